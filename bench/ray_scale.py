"""The Ray executor beside the local one: start-up, idle leader, delivery (`--only ray`).

The benchmark starts one Ray test cluster on this machine (ray.cluster_utils: a head with no
CPU to give, and NODES worker nodes of NODE_CPUS each) and shuts it down at the end; the leaders
reach it through RAY_ADDRESS. Every case runs the same crew.toml twice in the same run, once
with the local executor and once with `[crew] executor = "ray"` and
`[agents.w.resources] cpus = 0.01` (so that many workers share a node). Each Ray worker is an
actor: a new Python process on its node (Ray starts at most NODE_CPUS of them at once per node),
which starts the worker's process there and bridges it to the leader. The nodes are processes
of this machine, so the worker's clock (CLOCK_MONOTONIC) is the benchmark's.

(a) Start-up: N trivial workers (`python -S` printing a line) in one `crew run --no-input` in
the foreground, spawn to exit: wall time per task and the leader's own CPU time per task (all
its threads, Ray's driver threads among them; read from /proc while it is a zombie). For Ray,
the time from each task's `task.started` event to its `task.placed` (the actor placed and the
worker's process started on its node), from the events' `at`. Ray runs with a lower
maxParallel in the full size (RAY_PARALLEL): every actor in flight is a ~90 MB process; the
local executor runs at maxParallel = N and at Ray's, the baseline of the ratios.

(b) Idle: IDLE workers blocking on stdin in each of two runs, local and Ray, led at the same
time; once all are running (Ray: all placed), each leader's CPU (schedstat ns of its threads)
over the same windows, as % of one core; its RSS; and the RSS of an actor's process.

(c) Delivery: one worker reading its stdin in each of two detached runs; the real
`crew steer RUN t1 BODY`, started by the spawner (bench/spawner.py), alternately to each:
spawn → the worker read it, and the leader's share (`sentAt` → read), as bench/delivery.py
measures them; and each leader's CPU over the steers, per message (which includes what the
leader spends idle over that span: see (b)).

(d) Output: one worker that prints COUNT lines of 80 bytes, one write each, as fast as it can,
once it is told to go: the leader's CPU per line from the go to the last byte in the task's
log, and the lines a second that reach the log, local and Ray.

Every row's goal is "report": these are measurements for docs/scale-out.md, not thresholds.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from bench.common import Row, ms, percentile, spread
from bench.crews import (
    PYTHON,
    Fifo,
    cpu_ns,
    crew_argv,
    crew_env,
    detached_run,
    environment,
    final_cpu_seconds,
    foreground_run,
    kill,
    new_home,
    new_run,
    wait_all,
    write_crew,
    write_script,
)
from bench.delivery import READER, Samples, _steer
from bench.leader_load import IDLE, TRIVIAL
from bench.spawner import Command, spawner
from crew.procs import raise_open_files
from crew.registry import Box, TaskStatus
from crew.store.runstore import RunStore

NODES = 3
NODE_CPUS = 2
#: What one Ray worker asks of its node: a hundredth of a core, so that all fit.
RAY_CPUS = 0.01
#: maxParallel of the Ray start-up run at the full size: each actor in flight is a process.
RAY_PARALLEL = 20
#: Placing the actors of a run may take a while on a busy 2-core machine.
SLOW = 300.0
BENCHMARK = "ray executor"
GOAL = "report"
EXECUTORS = ("local", "ray")


@contextlib.contextmanager
def cluster() -> Iterator[str]:
    """A Ray test cluster on this machine for the block; yields its address. Its files (logs,
    sockets) go to a folder of its own under /tmp, removed after: a socket's path must stay
    short (107 bytes), which a TMPDIR deep in a test's folder is not."""
    from ray.cluster_utils import Cluster

    scratch = tempfile.mkdtemp(prefix="crew-ray-", dir="/tmp")
    try:
        with environment(RAY_TMPDIR=scratch):
            made = Cluster(
                initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False}
            )
            try:
                for _ in range(NODES):
                    made.add_node(num_cpus=NODE_CPUS)
                made.wait_for_nodes()
                yield made.address
            finally:
                made.shutdown()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _crew_toml(
    folder: Path, argv: list[str], *, executor: str, tasks: int, max_parallel: int
) -> Path:
    path = write_crew(folder, argv, tasks=tasks, max_parallel=max_parallel)
    if executor == "ray":
        text = path.read_text().replace("[crew]\n", '[crew]\nexecutor = "ray"\n', 1)
        path.write_text(text + f"\n[agents.w.resources]\ncpus = {RAY_CPUS}\n")
    return path


def _ratio(ray: float, local: float) -> str:
    return f"{ray / local:.2f}× local" if local else "local: 0"


def _seconds(value: float) -> str:
    return f"{value:.2f} s"


def _duration(value: float) -> str:
    return ms(value) if value < 1 else _seconds(value)


def _percent(value: float) -> str:
    return f"{value:.3f}%"


def _mb(kb: float) -> str:
    return f"{kb / 1024:.0f} MB"


def _rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as handle:
        for line in handle:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def _parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat", "rb") as handle:
        stat = handle.read()
    return int(stat[stat.rfind(b")") + 2 :].split()[1])


def _at(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _placement_seconds(store: RunStore) -> list[float]:
    """Per task, its first attempt's `task.started` → `task.placed` (from events.jsonl)."""
    started: dict[str, float] = {}
    placed: dict[str, float] = {}
    for line in store.paths.events.read_bytes().splitlines():
        event = json.loads(line)
        task, kind = event.get("taskId"), event.get("type")
        if kind == "task.started":
            started.setdefault(task, _at(event["at"]))
        elif kind == "task.placed":
            placed.setdefault(task, _at(event["at"]))
    return [placed[task] - started[task] for task in placed if task in started]


# ---------------------------------------------------------------------------- (a) start-up


def _run_to_end(
    folder: Path, argv: list[str], executor: str, tasks: int, parallel: int
) -> dict[str, Any]:
    """One `crew run --no-input` to its end: wall and leader CPU seconds, placement latencies."""
    folder.mkdir()
    home = new_home(folder)
    crew_toml = _crew_toml(folder, argv, executor=executor, tasks=tasks, max_parallel=parallel)
    start = time.perf_counter()
    process = subprocess.Popen(
        crew_argv("run", str(crew_toml), "--no-input"),
        env=crew_env(home),
        cwd=folder,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        cpu = final_cpu_seconds(process, timeout=SLOW * 2)
    finally:
        kill(process)
    wall = time.perf_counter() - start
    store = new_run(home)
    completed = sum(t.status is TaskStatus.COMPLETED for t in store.state().task_list())
    if process.returncode != 0 or completed != tasks:
        raise RuntimeError(f"{executor}: exited {process.returncode}, {completed}/{tasks} done")
    return {"wall": wall, "cpu": cpu, "placed": _placement_seconds(store)}


def _start_up(folder: Path, *, tasks: int, rounds: int) -> list[Row]:
    """Local at maxParallel = tasks and at Ray's (when lower), and Ray, round after round."""
    argv = [PYTHON, "-S", str(write_script(folder, "trivial.py", TRIVIAL))]
    ray_parallel = min(tasks, RAY_PARALLEL)
    cases = list(dict.fromkeys([("local", tasks), ("local", ray_parallel), ("ray", ray_parallel)]))
    wall: dict[tuple[str, int], list[float]] = {case: [] for case in cases}
    cpu: dict[tuple[str, int], list[float]] = {case: [] for case in cases}
    placed: list[float] = []
    for index in range(rounds):
        for executor, parallel in cases:
            where = folder / f"{executor}-{parallel}-{index}"
            done = _run_to_end(where, argv, executor, tasks, parallel)
            wall[executor, parallel].append(done["wall"] / tasks)
            cpu[executor, parallel].append(done["cpu"] / tasks)
            placed += done["placed"]
    base = ("local", ray_parallel)
    rows = []
    for case in cases:
        executor, parallel = case
        what = f"{executor}, {tasks} trivial workers, maxParallel {parallel}"
        if executor == "ray" and parallel < tasks:
            what += f" (not {tasks}: each actor in flight is a ~90 MB process)"
        for name, values, unit in (("wall time", wall, "wall"), ("leader CPU", cpu, "cpu")):
            ratio = (
                "1.00× (baseline)"
                if case == base
                else _ratio(statistics.median(values[case]), statistics.median(values[base]))
            )
            rows.append(
                Row(
                    BENCHMARK,
                    f"start-up: {what}: {name} per task",
                    spread(values[case], ms),
                    ratio,
                    GOAL,
                    {
                        "executor": executor,
                        "tasks": tasks,
                        "maxParallel": parallel,
                        f"{unit}PerTaskSeconds": values[case],
                    },
                )
            )
    if len(placed) >= 2:
        p50, p99 = statistics.median(placed), percentile(placed, 99)
        rows.append(
            Row(
                BENCHMARK,
                f"start-up: ray, task.started → task.placed, p50 of {len(placed)} (p99 in goal)",
                spread(placed, _duration),
                "",
                f"{GOAL}; p99 {_duration(p99)}",
                {"p50": p50, "p99": p99, "samples": placed},
            )
        )
    return rows


# ---------------------------------------------------------------------------- (b) idle


def _all_placed(store: RunStore, executor: str) -> None:
    wait_all(store, TaskStatus.RUNNING, timeout=SLOW)
    if executor != "ray":
        return
    deadline = time.monotonic() + SLOW
    while not all(t.node and t.pid for t in store.state().task_list()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"not all workers of {store.run_id} were placed in {SLOW:g}s")
        time.sleep(0.1)


def _idle(folder: Path, *, workers: int, windows: int, seconds: float) -> list[Row]:
    argv = [PYTHON, "-S", str(write_script(folder, "idle.py", IDLE))]
    shares: dict[str, list[float]] = {e: [] for e in EXECUTORS}
    rss: dict[str, int] = {}
    actors: list[int] = []
    placing = 0.0
    with contextlib.ExitStack() as stack:
        leaders: dict[str, int] = {}
        for executor in EXECUTORS:
            (folder / executor).mkdir()
            home = new_home(folder / executor)
            crew_toml = _crew_toml(
                folder / executor, argv, executor=executor, tasks=workers, max_parallel=workers
            )
            begun = time.monotonic()
            store, leaders[executor] = stack.enter_context(foreground_run(home, crew_toml))
            _all_placed(store, executor)
            if executor == "ray":
                placing = time.monotonic() - begun
                for task in store.state().task_list():
                    with contextlib.suppress(OSError, ValueError):
                        actors.append(_rss_kb(_parent(task.pid or 0)))
        time.sleep(2.0)  # let the start-up writes settle
        for _ in range(windows):
            before = {e: cpu_ns(pid) for e, pid in leaders.items()}
            start = time.monotonic_ns()
            time.sleep(seconds)
            elapsed = time.monotonic_ns() - start
            for executor, pid in leaders.items():
                shares[executor].append(100 * (cpu_ns(pid) - before[executor]) / elapsed)
        rss = {e: _rss_kb(pid) for e, pid in leaders.items()}
    window = f"{windows} × {seconds:g} s"
    local, ray = statistics.median(shares["local"]), statistics.median(shares["ray"])
    rows = [
        Row(
            BENCHMARK,
            f"idle: {executor} leader, {workers} idle workers, % of a core ({window})",
            spread(shares[executor], _percent),
            "1.00× (baseline)" if executor == "local" else _ratio(ray, local),
            GOAL,
            {"workers": workers, "percent": shares[executor], "windowSeconds": seconds},
        )
        for executor in EXECUTORS
    ]
    rows += [
        Row(
            BENCHMARK,
            f"idle: {executor} leader RSS, {workers} idle workers",
            _mb(rss[executor]),
            "1.00× (baseline)" if executor == "local" else _ratio(rss["ray"], rss["local"]),
            GOAL,
            {"rssKB": rss[executor]},
        )
        for executor in EXECUTORS
    ]
    if actors:
        rows.append(
            Row(
                BENCHMARK,
                f"idle: ray, RSS of one worker's actor process ({len(actors)} actors)",
                spread([float(kb) for kb in actors], _mb),
                "",
                f"{GOAL}; all {workers} placed {placing:.1f} s after the leader started",
                {"actorRssKB": actors, "placeAllSeconds": placing},
            )
        )
    return rows


# ---------------------------------------------------------------------------- (c) delivery


def _delivery(folder: Path, *, count: int, warmup: int) -> list[Row]:
    reader = write_script(folder, "reader.py", READER)
    samples = {e: Samples() for e in EXECUTORS}
    cpu: dict[str, float] = {}
    fifos: dict[str, Fifo] = {}
    try:
        with contextlib.ExitStack() as stack:
            spawn = stack.enter_context(spawner(folder))
            live: dict[str, Any] = {}
            for executor in EXECUTORS:
                (folder / executor).mkdir()
                home = new_home(folder / executor)
                fifos[executor] = Fifo(folder / f"{executor}.fifo")
                crew_toml = _crew_toml(
                    folder / executor,
                    [PYTHON, str(reader), str(fifos[executor].path)],
                    executor=executor,
                    tasks=1,
                    max_parallel=1,
                )
                run = stack.enter_context(detached_run(home, crew_toml))
                _all_placed(run.store, executor)
                fifos[executor].readline(timeout=SLOW)
                steer = Command(crew_argv("steer", run.store.run_id, "t1"), crew_env(home), folder)
                live[executor] = (run, steer, run.store.paths.box(Box.STEERING))
            discarded = Samples()
            before: dict[str, int] = {}
            for index in range(warmup + count):
                if index == warmup:
                    before = {e: cpu_ns(live[e][0].pid) for e in EXECUTORS}
                for executor in EXECUTORS:
                    _, steer, steering = live[executor]
                    into = samples[executor] if index >= warmup else discarded
                    _steer(spawn, steer, steering, fifos[executor], f"{executor} {index}", into)
            cpu = {e: (cpu_ns(live[e][0].pid) - before[e]) / 1e9 / count for e in EXECUTORS}
    finally:
        for fifo in fifos.values():
            fifo.close()
    p50 = {e: statistics.median(samples[e].total) for e in EXECUTORS}
    p99 = {e: percentile(samples[e].total, 99) for e in EXECUTORS}
    share = {e: statistics.median(samples[e].leader) for e in EXECUTORS}
    rows = []
    for executor in EXECUTORS:
        base = executor == "local"
        got = samples[executor]
        rows += [
            Row(
                BENCHMARK,
                f"delivery: {executor}, `crew steer` started → worker read, p50 of {count}",
                spread(got.total, ms),
                "1.00× (baseline)" if base else _ratio(p50["ray"], p50["local"]),
                GOAL,
                {
                    "messages": count,
                    "p50": p50[executor],
                    "p99": p99[executor],
                    "samples": got.total,
                },
            ),
            Row(
                BENCHMARK,
                f"delivery: {executor}, `crew steer` started → worker read, p99",
                ms(p99[executor]),
                "1.00× (baseline)" if base else _ratio(p99["ray"], p99["local"]),
                GOAL,
            ),
            Row(
                BENCHMARK,
                f"delivery: {executor}, steer written (`sentAt`) → worker read (leader's share)",
                spread(got.leader, ms),
                "1.00× (baseline)" if base else _ratio(share["ray"], share["local"]),
                f"{GOAL}; p99 {ms(percentile(got.leader, 99))}",
                {"p50": share[executor], "p99": percentile(got.leader, 99), "samples": got.leader},
            ),
            Row(
                BENCHMARK,
                f"delivery: {executor} leader CPU per message (incl. its idle CPU meanwhile)",
                ms(cpu[executor]),
                "1.00× (baseline)" if base else _ratio(cpu["ray"], cpu["local"]),
                GOAL,
                {"cpuPerMessageSeconds": cpu[executor]},
            ),
        ]
    return rows


# ---------------------------------------------------------------------------- (d) output

#: Prints `ready`, waits for the go file, then COUNT lines of 80 bytes, one write each.
OUTPUT = """\
import os, sys, time

go, count = sys.argv[1], int(sys.argv[2])
print("ready", flush=True)
while not os.path.exists(go):
    time.sleep(0.01)
line = b"x" * 79 + b"\\n"
for _ in range(count):
    os.write(1, line)
"""


def _output(folder: Path, *, count: int) -> list[Row]:
    script = write_script(folder, "output.py", OUTPUT)
    cpu: dict[str, float] = {}
    rate: dict[str, float] = {}
    for executor in EXECUTORS:
        where = folder / executor
        where.mkdir()
        home = new_home(where)
        go = where / "go"
        argv = [PYTHON, "-S", str(script), str(go), str(count)]
        crew_toml = _crew_toml(where, argv, executor=executor, tasks=1, max_parallel=1)
        with foreground_run(home, crew_toml) as (store, pid):
            _all_placed(store, executor)
            log = store.paths.log("t1")
            expected = len(b"ready\n") + 80 * count
            _until_size(log, len(b"ready\n"))
            time.sleep(1.0)  # the start-up's writes settle
            before, start = cpu_ns(pid), time.perf_counter()
            go.touch()
            _until_size(log, expected)
            rate[executor] = count / (time.perf_counter() - start)
            cpu[executor] = (cpu_ns(pid) - before) / 1e9 / count
    rows = []
    for executor in EXECUTORS:
        base = executor == "local"
        rows += [
            Row(
                BENCHMARK,
                f"output: {executor} leader CPU per 80-byte line ({count} lines, one write each)",
                f"{cpu[executor] * 1e6:.1f} µs",
                "1.00× (baseline)" if base else _ratio(cpu["ray"], cpu["local"]),
                GOAL,
                {"cpuPerLineSeconds": cpu[executor], "lines": count},
            ),
            Row(
                BENCHMARK,
                f"output: {executor}, lines a second into the task's log",
                f"{rate[executor]:,.0f}/s",
                "1.00× (baseline)" if base else _ratio(rate["ray"], rate["local"]),
                GOAL,
                {"linesPerSecond": rate[executor]},
            ),
        ]
    return rows


def _until_size(path: Path, size: int, timeout: float = SLOW) -> None:
    """Until the file at `path` holds `size` bytes (a worker's log, written by the leader)."""
    deadline = time.monotonic() + timeout
    while not path.exists() or path.stat().st_size < size:
        if time.monotonic() > deadline:
            raise TimeoutError(f"not done in {timeout:g}s")
        time.sleep(0.005)


def run(quick: bool = False) -> list[Row]:
    if not available():
        print("skipping ray: Ray is not installed (pip install 'crew[ray]')", file=sys.stderr)
        return []
    tasks, rounds = (20, 1) if quick else (200, 2)
    workers, windows, seconds = (10, 2, 2.0) if quick else (50, 6, 5.0)
    count, warmup = (10, 2) if quick else (50, 3)
    lines = 2_000 if quick else 100_000
    raise_open_files()
    with (
        cluster() as address,
        environment(CREW_FSYNC="0", RAY_ADDRESS=address),
        tempfile.TemporaryDirectory(prefix="crew-bench-") as name,
    ):
        folder = Path(name)
        for part in ("start", "idle", "idle-few", "delivery", "output"):
            (folder / part).mkdir()
        rows = _start_up(folder / "start", tasks=tasks, rounds=rounds)
        if not quick:  # a second size: what one more idle worker costs
            rows += _idle(folder / "idle-few", workers=10, windows=windows, seconds=seconds)
        rows += _idle(folder / "idle", workers=workers, windows=windows, seconds=seconds)
        rows += _delivery(folder / "delivery", count=count, warmup=warmup)
        rows += _output(folder / "output", count=lines)
    return rows


def available() -> bool:
    """Whether Ray can be imported here (the `ray` extra)."""
    try:
        import ray.cluster_utils  # noqa: F401
    except ImportError:
        return False
    return True
