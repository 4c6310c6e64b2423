"""What a leader costs: CPU while its workers are idle, and leading many short tasks.

(a) 50 workers that block reading stdin; once all are running, the leader's CPU time in ns (the
first field of /proc/<pid>/task/*/schedstat, summed over its threads) is read over a few
windows, side by side with a 500 ms polling loop over 50 mailbox files over the same windows.
Shown as % of one core, three decimals.

(b) N trivial workers (`python -S` printing a line, exit 0) in one run with maxParallel = N:
`crew run --no-input` in the foreground, from spawn to exit, and the leader's own CPU time (its
threads, not its workers': read from /proc while it is a zombie, before it is reaped), divided
by N. At LAUNCHER_SIZE workers it alternates with a minimal launcher that starts the same
workers with pipes, reads their output and waits for all of them, and with the same crew run
where crew may not make cgroups (`CREW_FAULT=no-cgroups`, as in a container): it then finds what
an ended worker left running by reading /proc.

(c) What creating a file costs in the benchmark's folder: crew creates four a task (its snapshot,
its log and the log's index, the snapshot's spare), the launcher none. On one file system the
cost differs by folder (ext4 looks for a free inode near the folder's own): run the benchmark
with TMPDIR elsewhere to compare (docs/performance.md).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from bench.common import Row, ms, spread
from bench.crews import (
    POLLER,
    PYTHON,
    cpu_ns,
    crew_argv,
    crew_env,
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
from crew.procs import raise_open_files
from crew.registry import TaskStatus

IDLE_WORKERS = 50
LAUNCHER_SIZE = 500
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


#: Files created in a round of the file-creation measure.
CREATED = 200


def _percent(value: float) -> str:
    return f"{value:.3f}%"


def _seconds(value: float) -> str:
    return f"{value:.2f} s"


def _idle_shares(
    leader: int, poller: int, *, windows: int, seconds: float
) -> dict[str, list[float]]:
    """% of a core used by each process in each window."""
    shares: dict[str, list[float]] = {"crew": [], "poller": []}
    for _ in range(windows):
        before = {"crew": cpu_ns(leader), "poller": cpu_ns(poller)}
        start = time.monotonic_ns()
        time.sleep(seconds)
        elapsed = time.monotonic_ns() - start
        shares["crew"].append(100 * (cpu_ns(leader) - before["crew"]) / elapsed)
        shares["poller"].append(100 * (cpu_ns(poller) - before["poller"]) / elapsed)
    return shares


def _idle_cpu(folder: Path, *, windows: int, seconds: float) -> list[Row]:
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
    try:
        with foreground_run(home, crew_toml) as (store, leader):
            wait_all(store, TaskStatus.RUNNING)
            time.sleep(2.0)  # let the start-up writes and the first output flush settle
            shares = _idle_shares(leader, polling.pid, windows=windows, seconds=seconds)
            still = [t.id for t in store.state().task_list() if t.status is not TaskStatus.RUNNING]
            if still:
                raise RuntimeError(f"tasks stopped running during the window: {still}")
    finally:
        kill(polling)
    window = f"{windows} × {seconds:g} s"
    crew, poll = statistics.median(shares["crew"]), statistics.median(shares["poller"])
    return [
        Row(
            "leader CPU, idle workers",
            f"crew leader, {IDLE_WORKERS} idle workers, % of a core ({window})",
            spread(shares["crew"], _percent),
            f"{crew / poll:.2f}× poller" if poll else "poller used no CPU",
            "< 1% of a core",
            {"workers": IDLE_WORKERS, "percent": shares["crew"], "windowSeconds": seconds},
        ),
        Row(
            "leader CPU, idle workers",
            f"500 ms polling loop over {IDLE_WORKERS} mailbox files ({window})",
            spread(shares["poller"], _percent),
            "1.00× (baseline)",
            "",
            {"percent": shares["poller"]},
        ),
    ]


def _file_creation(folder: Path, *, rounds: int) -> Row:
    """Seconds to create an empty file in a new folder beside the runs, each round's median."""
    seconds = []
    for index in range(rounds):
        made = folder / f"created-{index}"
        made.mkdir()
        took = []
        for number in range(CREATED):
            start = time.perf_counter()
            os.close(os.open(made / f"{number}.log", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
            took.append(time.perf_counter() - start)
        seconds.append(statistics.median(took))
        for number in range(CREATED):
            (made / f"{number}.log").unlink()
        made.rmdir()
    return Row(
        "many short tasks",
        "a file created in the benchmark's folder (crew creates 4 a task, the launcher none)",
        spread(seconds, ms),
        "",
        "",
        {"seconds": seconds, "files": CREATED},
    )


def _timed(command: list[str], home_dir: Path, env: dict[str, str]) -> tuple[float, float]:
    """Run a command to its end: wall seconds from spawn to exit, and its own CPU seconds."""
    start = time.perf_counter()
    process = subprocess.Popen(
        command,
        env=env,
        cwd=home_dir,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        cpu = final_cpu_seconds(process)
    finally:
        kill(process)
    wall = time.perf_counter() - start
    if process.returncode != 0:
        raise RuntimeError(f"{command[:4]}… exited {process.returncode}")
    return wall, cpu


def _crew_run(
    folder: Path, workers: int, argv: list[str], *, cgroups: bool = True
) -> tuple[float, float]:
    """`crew run` of `workers` trivial tasks in a new home: wall and leader CPU seconds. Without
    `cgroups`, as where crew may not make cgroups (a container, a CI runner)."""
    folder.mkdir()
    home = new_home(folder)
    crew_toml = write_crew(folder, argv, tasks=workers, max_parallel=workers)
    env = crew_env(home) | ({} if cgroups else {"CREW_FAULT": "no-cgroups"})
    wall, cpu = _timed(crew_argv("run", str(crew_toml), "--no-input"), folder, env)
    tasks = new_run(home).state().task_list()
    completed = sum(t.status is TaskStatus.COMPLETED for t in tasks)
    if completed != workers:
        raise RuntimeError(f"only {completed} of {workers} tasks completed")
    return wall, cpu


def _many_short(folder: Path, *, sizes: list[int], rounds: int) -> list[Row]:
    argv = [PYTHON, "-S", str(write_script(folder, "trivial.py", TRIVIAL))]
    launcher = [PYTHON, str(write_script(folder, "launcher.py", LAUNCHER)), str(LAUNCHER_SIZE)]
    per_task: dict[int, list[float]] = {size: [] for size in sizes}
    walls: dict[str, list[float]] = {"crew": [], "no cgroups": [], "launcher": []}
    cpus: dict[str, list[float]] = {"crew": [], "no cgroups": [], "launcher": []}
    for index in range(rounds):
        for size in sizes:
            wall, cpu = _crew_run(folder / f"crew-{size}-{index}", size, argv)
            per_task[size].append(cpu / size)
            if size == LAUNCHER_SIZE:
                walls["crew"].append(wall)
                cpus["crew"].append(cpu)
                wall, cpu = _crew_run(folder / f"bare-{index}", size, argv, cgroups=False)
                walls["no cgroups"].append(wall)
                cpus["no cgroups"].append(cpu)
                wall, cpu = _timed([*launcher, *argv], folder, dict(os.environ))
                walls["launcher"].append(wall)
                cpus["launcher"].append(cpu)
    base = statistics.median(per_task[sizes[0]])
    rows = [
        Row(
            "many short tasks",
            f"crew run, {size:,} trivial workers, maxParallel {size:,}: leader CPU per task",
            spread(per_task[size], lambda s: f"{s * 1e3:.2f} ms"),
            f"{statistics.median(per_task[size]) / base:.2f}× at {sizes[0]}",
            f"≤ 1.2× at {sizes[0]}",
            {"workers": size, "cpuPerTaskSeconds": per_task[size]},
        )
        for size in sizes
    ]
    return [*rows, *_launcher_rows(walls, cpus)]


def _launcher_rows(walls: dict[str, list[float]], cpus: dict[str, list[float]]) -> list[Row]:
    if not walls["crew"]:
        return []
    launcher = statistics.median(walls["launcher"])
    cpu_ratio = statistics.median(cpus["crew"]) / statistics.median(cpus["launcher"])
    bare_cpu = statistics.median(cpus["no cgroups"]) / statistics.median(cpus["launcher"])
    return [
        Row(
            "many short tasks",
            f"crew run, {LAUNCHER_SIZE} trivial workers: wall time (leader CPU)",
            spread(walls["crew"], _seconds),
            f"{statistics.median(walls['crew']) / launcher:.2f}× launcher",
            "≤ 1.3× launcher",
            {"seconds": walls["crew"], "cpuSeconds": cpus["crew"], "cpuRatio": cpu_ratio},
        ),
        Row(
            "many short tasks",
            f"the same where crew may not make cgroups: wall time (leader CPU {bare_cpu:.1f}× "
            "the launcher's)",
            spread(walls["no cgroups"], _seconds),
            f"{statistics.median(walls['no cgroups']) / launcher:.2f}× launcher",
            "≤ 1.3× launcher",
            {"seconds": walls["no cgroups"], "cpuSeconds": cpus["no cgroups"]},
        ),
        Row(
            "many short tasks",
            f"minimal launcher, same {LAUNCHER_SIZE} workers: wall time",
            spread(walls["launcher"], _seconds),
            "1.00× (baseline)",
            f"leader CPU {cpu_ratio:.1f}× the launcher's",
            {"seconds": walls["launcher"], "cpuSeconds": cpus["launcher"]},
        ),
    ]


def run(quick: bool = False) -> list[Row]:
    windows, seconds = (2, 2.0) if quick else (6, 5.0)
    sizes, rounds = ([200, 500], 1) if quick else ([200, 500, 1_000, 2_000], 2)
    raise_open_files()
    with (
        environment(CREW_FSYNC="0"),
        tempfile.TemporaryDirectory(prefix="crew-bench-") as name,
    ):
        folder = Path(name)
        (folder / "idle").mkdir()
        (folder / "short").mkdir()
        rows = _idle_cpu(folder / "idle", windows=windows, seconds=seconds)
        rows += _many_short(folder / "short", sizes=sizes, rounds=rounds)
        rows.append(_file_creation(folder / "short", rounds=3 if quick else 5))
    return rows
