"""A task's snapshot written as the leader writes it at every change of a task: a temp file renamed
over the old one (crew/store/snapshot.py `write_atomic`, what crew did) against the old one
swapped with a spare overwritten in place (`write_by_twin`, what it does now).

Each call writes BATCH snapshots — a real task's bytes, to TASKS task files in turn, as a leader
of that many tasks does — in one folder of the machine's own file system (the run folders').
The two take turns, round after round: on the idle machine, then with every core kept busy by
spinning processes, as on a shared CI runner. Beside each time, the voluntary context switches
per write: the times the writer slept in the kernel (on ext4 a rename over an existing file
makes it write the new file's blocks first, `auto_da_alloc`), each of which, on a busy machine,
costs a wait for a core.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from bench.common import Row, measure_side_by_side
from bench.crews import environment
from crew.store import snapshot

TASKS = 50
BATCH = 200
RENAME = "temp file renamed over it"
SWAP = "spare swapped with it"
SPIN = "while True: pass"
#: A task's snapshot as a leader writes it mid-run (its size is what matters).
TASK = (
    b'{\n  "id": "t17",\n  "status": "running",\n  "attempt": 1,\n  "prompt": "'
    + b"x" * 900
    + b'",\n  "pid": 41234,\n  "startedAt": "2026-12-01T08:00:00.000000Z"\n}\n'
)


def _writer(folder: Path, swap: bool, switches: list[int]) -> Callable[[], None]:
    paths = [folder / "tasks" / f"t{n}.json" for n in range(TASKS)]
    twins = [folder / ".runtime" / "tasks" / f"t{n}.json" for n in range(TASKS)]
    (folder / "tasks").mkdir(parents=True)
    for path in paths:
        path.write_bytes(TASK)

    def write() -> None:
        before = resource.getrusage(resource.RUSAGE_SELF).ru_nvcsw
        for n in range(BATCH):
            index = n % TASKS
            if swap:
                snapshot.write_by_twin(paths[index], TASK, twins[index], durable=False)
            else:
                snapshot.write_atomic(paths[index], TASK, durable=False)
        switches.append(resource.getrusage(resource.RUSAGE_SELF).ru_nvcsw - before)

    return write


@contextmanager
def _busy() -> Iterator[None]:
    """Every core kept busy by a spinning process, for the block."""
    spinners = [subprocess.Popen([sys.executable, "-c", SPIN]) for _ in range(os.cpu_count() or 2)]
    try:
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()


def run(quick: bool = False) -> list[Row]:
    rounds, warmup = (5, 1) if quick else (15, 2)
    rows: list[Row] = []
    with environment(CREW_FSYNC="0"), tempfile.TemporaryDirectory(prefix="crew-bench-") as name:
        for load in ("idle", "every core busy"):
            folder = Path(name) / load.replace(" ", "-")
            switches: dict[str, list[int]] = {RENAME: [], SWAP: []}
            calls = {
                RENAME: _writer(folder / "rename", False, switches[RENAME]),
                SWAP: _writer(folder / "swap", True, switches[SWAP]),
            }
            if load == "idle":
                timings = measure_side_by_side(calls, runs=rounds, warmup=warmup)
            else:
                with _busy():
                    timings = measure_side_by_side(calls, runs=rounds, warmup=warmup)
            for key, timing in timings.items():
                sleeps = sum(switches[key][warmup:]) / (BATCH * timing.runs)
                ratio = timing.median / timings[RENAME].median
                rows.append(
                    Row(
                        "task snapshot write",
                        f"{key}, {load}",
                        f"{timing.median / BATCH * 1e6:.0f} µs a write "
                        f"({timing.low / BATCH * 1e6:.0f}–{timing.high / BATCH * 1e6:.0f}), "
                        f"{sleeps:.2f} sleeps",
                        f"{ratio:.2f}× the rename",
                        "",
                        {"seconds": timing.median / BATCH, "sleepsPerWrite": sleeps},
                    )
                )
    return rows
