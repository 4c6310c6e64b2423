"""What a leader costs: CPU while its workers are idle, and leading many short tasks.

(a) 50 workers that block reading stdin; once all are running, the leader's CPU time (utime +
stime from /proc) is read over a window cut into slices, side by side with a 500 ms polling loop
over 50 mailbox files measured over the same slices.

(b) N trivial workers (they print a line and exit 0) in one run with maxParallel = N: `crew run`
in the foreground, from start to exit, and its peak memory (VmHWM, sampled until it exits);
alternated with a minimal launcher script that starts the same N workers and reads their output.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from bench.common import Row, spread
from bench.crews import (
    POLLER,
    PYTHON,
    cpu_seconds,
    crew_argv,
    crew_env,
    environment,
    foreground_run,
    kill,
    new_home,
    new_run,
    wait_all,
    write_crew,
    write_script,
)
from crew.registry import TaskStatus

IDLE_WORKERS = 50
IDLE = "import sys\nsys.stdin.buffer.read()\n"
TRIVIAL = "print('done')\n"
#: Starts N copies of a command with pipes, reads what each prints, and waits for all of them.
LAUNCHER = """\
import subprocess, sys

count, argv = int(sys.argv[1]), sys.argv[2:]
pipe = subprocess.PIPE
workers = [subprocess.Popen(argv, stdin=pipe, stdout=pipe, stderr=subprocess.STDOUT)
           for _ in range(count)]
for worker in workers:
    worker.stdin.close()
    worker.stdout.read()
sys.exit(max(worker.wait() for worker in workers))
"""


def _percent(value: float) -> str:
    return f"{value:.2f}%"


def _megabytes(kilobytes: float) -> str:
    return f"{kilobytes / 1024:.1f} MB"


def _idle_cpu(folder: Path, *, slices: int, seconds: float) -> list[Row]:
    home = new_home(folder)
    idle = write_script(folder, "idle.py", IDLE)
    crew_toml = write_crew(folder, [PYTHON, "-S", str(idle)], tasks=IDLE_WORKERS)
    boxes = [folder / f"box{index}.jsonl" for index in range(IDLE_WORKERS)]
    for box in boxes:
        box.touch()
    poller = write_script(folder, "poller.py", POLLER)
    polling = subprocess.Popen(
        [PYTHON, str(poller), "0.5", *map(str, boxes)], stdout=subprocess.DEVNULL
    )
    crew_share: list[float] = []
    poll_share: list[float] = []
    try:
        with foreground_run(home, crew_toml) as (store, leader):
            wait_all(store, TaskStatus.RUNNING)
            time.sleep(2.0)  # let the start-up writes and the first output flush settle
            crew_start, poll_start = cpu_seconds(leader), cpu_seconds(polling.pid)
            for _ in range(slices):
                crew_before, poll_before = cpu_seconds(leader), cpu_seconds(polling.pid)
                start = time.monotonic()
                time.sleep(seconds)
                elapsed = time.monotonic() - start
                crew_share.append(100 * (cpu_seconds(leader) - crew_before) / elapsed)
                poll_share.append(100 * (cpu_seconds(polling.pid) - poll_before) / elapsed)
            crew_total = cpu_seconds(leader) - crew_start
            poll_total = cpu_seconds(polling.pid) - poll_start
            still = [t.id for t in store.state().task_list() if t.status is not TaskStatus.RUNNING]
            if still:
                raise RuntimeError(f"tasks stopped running during the window: {still}")
    finally:
        kill(polling)
    window = f"{slices} × {seconds:g} s"
    # The ratio is of CPU time over the whole window: a slice holds only a few clock ticks.
    tick = 1 / os.sysconf("SC_CLK_TCK")
    if poll_total:
        ratio = f"{crew_total / poll_total:.1f}× poller (whole window)"
    else:
        ratio = f"poller < 1 tick ({100 * tick / (slices * seconds):.2f}%)"
    return [
        Row(
            "leader CPU, idle workers",
            f"crew leader, {IDLE_WORKERS} idle workers, % of a core ({window})",
            spread(crew_share, _percent),
            ratio,
            "< 1%",
            {
                "workers": IDLE_WORKERS,
                "percent": crew_share,
                "sliceSeconds": seconds,
                "cpuSeconds": crew_total,
                "pollerCpuSeconds": poll_total,
            },
        ),
        Row(
            "leader CPU, idle workers",
            f"500 ms polling loop over {IDLE_WORKERS} mailbox files ({window})",
            spread(poll_share, _percent),
            "1.00× (baseline)",
            "",
            {"percent": poll_share},
        ),
    ]


def _peak_memory(pid: int) -> int | None:
    """VmHWM (KB) of a live process: the peak resident memory of its current program."""
    try:
        with open(f"/proc/{pid}/status", "rb") as handle:
            for line in handle:
                if line.startswith(b"VmHWM:"):
                    return int(line.split()[1])
    except FileNotFoundError:
        pass
    return None  # gone, or a zombie (its memory is released)


def _reap(process: subprocess.Popen[bytes], *, timeout: float = 300.0) -> tuple[int, int]:
    """Wait for a child, sampling its VmHWM every 5 ms: its exit code and peak memory (KB).

    Not ru_maxrss from wait4: a child started with vfork or fork and exec inherits the peak of
    the (much larger) benchmark process that started it.
    """
    deadline = time.monotonic() + timeout
    peak = 0
    while time.monotonic() < deadline:
        peak = max(peak, _peak_memory(process.pid) or 0)
        code = process.poll()
        if code is not None:
            return code, peak
        time.sleep(0.005)
    raise TimeoutError(f"{process.args!r} still running after {timeout:g}s")


def _many_short(folder: Path, *, workers: int, rounds: int) -> list[Row]:
    trivial = write_script(folder, "trivial.py", TRIVIAL)
    launcher = write_script(folder, "launcher.py", LAUNCHER)
    argv = [PYTHON, "-S", str(trivial)]
    walls: dict[str, list[float]] = {"crew": [], "launcher": []}
    memory: dict[str, list[float]] = {"crew": [], "launcher": []}
    for index in range(rounds):
        round_dir = folder / f"round{index}"
        round_dir.mkdir()
        home = new_home(round_dir)
        crew_toml = write_crew(round_dir, argv, tasks=workers, max_parallel=workers)
        for name, command in (
            ("crew", crew_argv("run", str(crew_toml), "--no-input")),
            ("launcher", [PYTHON, str(launcher), str(workers), *argv]),
        ):
            start = time.perf_counter()
            process = subprocess.Popen(
                command,
                env=crew_env(home),
                cwd=round_dir,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            try:
                code, peak = _reap(process)
            finally:
                kill(process)
            walls[name].append(time.perf_counter() - start)
            memory[name].append(peak)
            if code != 0:
                raise RuntimeError(f"{name} with {workers} workers exited {code}")
        tasks = new_run(home).state().task_list()
        completed = sum(t.status is TaskStatus.COMPLETED for t in tasks)
        if completed != workers:
            raise RuntimeError(f"only {completed} of {workers} tasks completed")
    crew_wall, floor_wall = statistics.median(walls["crew"]), statistics.median(walls["launcher"])
    return [
        Row(
            "many short tasks",
            f"crew run, {workers} trivial workers, maxParallel {workers}: wall time",
            spread(walls["crew"], lambda s: f"{s:.2f} s"),
            f"{crew_wall / floor_wall:.2f}× launcher",
            f"all {workers} completed",
            {"workers": workers, "seconds": walls["crew"], "completed": workers},
        ),
        Row(
            "many short tasks",
            f"crew run, {workers} trivial workers: leader peak RSS",
            spread(memory["crew"], _megabytes),
            f"{statistics.median(memory['crew']) / statistics.median(memory['launcher']):.2f}× "
            "launcher",
            "",
            {"maxrssKB": memory["crew"]},
        ),
        Row(
            "many short tasks",
            f"minimal launcher, same {workers} workers: wall time (peak RSS)",
            spread(walls["launcher"], lambda s: f"{s:.2f} s"),
            "1.00× (baseline)",
            _megabytes(statistics.median(memory["launcher"])),
            {"seconds": walls["launcher"], "maxrssKB": memory["launcher"]},
        ),
    ]


def run(quick: bool = False) -> list[Row]:
    slices, seconds = (2, 5.0) if quick else (6, 5.0)
    workers, rounds = (50, 2) if quick else (200, 3)
    with (
        environment(CREW_FSYNC="0"),
        tempfile.TemporaryDirectory(prefix="crew-bench-") as name,
    ):
        folder = Path(name)
        (folder / "idle").mkdir()
        (folder / "short").mkdir()
        rows = _idle_cpu(folder / "idle", slices=slices, seconds=seconds)
        rows += _many_short(folder / "short", workers=workers, rounds=rounds)
    return rows
