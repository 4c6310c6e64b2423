"""Notification latency: from a worker asking a question to its `[[notify]]` command reading it.

One run, one worker, a detached leader, and one `[[notify]]` entry on `contact` whose command is
`tee FIFO`: it copies the event it is given on stdin to a FIFO the benchmark reads (`tee` is a
small program, so its start-up is counted, but not an interpreter's). The worker asks its
questions one at a time: it takes `time.monotonic_ns()` just before it prints the contact line,
and reports it on a second FIFO. The benchmark takes the same clock as it reads the event from
the first FIFO; the difference is the latency: the leader reading the line, recording the
contact, noticing the new event at the end of its turn, queueing the command, a thread starting
it, and the command copying its stdin. Then the benchmark answers (a library respond, outside
the timing) and the worker asks the next question.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from pathlib import Path

from bench.common import Row, ms, percentile, spread
from bench.crews import (
    PYTHON,
    SESSION,
    Fifo,
    detached_run,
    environment,
    new_home,
    write_crew,
    write_script,
)
from crew import verbs

#: Asks `count` questions, one at a time; reports `<index> <monotonic ns>` for each on the FIFO.
ASKER = """\
import os, sys, time

out = os.open(sys.argv[1], os.O_WRONLY)
for index in range(int(sys.argv[2])):
    asked = time.monotonic_ns()
    print(f"@supervisor need_input: question {index}", flush=True)
    os.write(out, f"{index} {asked}\\n".encode())
    if not sys.stdin.readline():
        break
"""
GOAL = "p50 and p99 ≤ 100 ms"


def _measure(folder: Path, *, count: int, warmup: int) -> list[float]:
    home = new_home(folder)
    asker = write_script(folder, "asker.py", ASKER)
    asked_fifo, told_fifo = Fifo(folder / "asked.fifo"), Fifo(folder / "told.fifo")
    total = warmup + count
    crew_toml = write_crew(folder, [PYTHON, str(asker), str(asked_fifo.path), str(total)], tasks=1)
    with crew_toml.open("a") as handle:
        handle.write(f'\n[[notify]]\non = "contact"\ncommand = ["tee", "{told_fifo.path}"]\n')
    samples: list[float] = []
    try:
        with detached_run(home, crew_toml) as live, environment(CREW_FSYNC="0"):
            for index in range(total):
                asked_index, asked_ns = asked_fifo.readline(timeout=30).split()
                event = json.loads(told_fifo.readline(timeout=30))
                told_ns = time.monotonic_ns()
                body = event["data"]["mailboxMessage"]["body"]
                if int(asked_index) != index or body != f"question {index}":
                    raise RuntimeError(f"question {index}: notified of {body!r}")
                if index >= warmup:
                    samples.append((told_ns - int(asked_ns)) / 1e9)
                verbs.respond(live.store, "t1", "ok", session=SESSION)
    finally:
        asked_fifo.close()
        told_fifo.close()
    return samples


def run(quick: bool = False) -> list[Row]:
    count, warmup = (10, 2) if quick else (30, 3)
    with tempfile.TemporaryDirectory(prefix="crew-bench-") as name:
        samples = _measure(Path(name), count=count, warmup=warmup)
    p50, p99 = statistics.median(samples), percentile(samples, 99)
    benchmark = "notification latency"
    return [
        Row(
            benchmark,
            f"contact printed → `[[notify]]` command read it, p50 of {count}",
            spread(samples, ms),
            "",
            GOAL,
            {"contacts": count, "p50": p50, "p99": p99, "samples": samples},
        ),
        Row(benchmark, "contact printed → `[[notify]]` command read it, p99", ms(p99)),
    ]
