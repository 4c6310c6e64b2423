"""Delivery latency: from `steer` returning to the worker reading the message on its stdin.

One run, one idle worker, a detached leader. Each message is sent (`ops.steer`, in this process),
then the worker reads it and reports `time.time_ns()` on a FIFO; latency is that time minus the
time right after `ops.steer` returned (both processes read the same wall clock). Side by side, the
same messages go through a polling orchestrator: a loop that checks a mailbox file every 500 ms
and writes new lines into a pipe to the same worker program. One message at a time: the next one
is sent once the last has been read.
"""

from __future__ import annotations

import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from bench.common import Row, ms, percentile, spread
from bench.crews import (
    POLLER,
    PYTHON,
    SESSION,
    Fifo,
    detached_run,
    environment,
    kill,
    new_home,
    wait_all,
    write_crew,
    write_script,
)
from crew import ops
from crew.ids import new_message_id
from crew.models import MailboxMessage
from crew.registry import MessageStatus, TaskStatus
from crew.store import jsonl
from crew.waiting import wait_for_message

#: Reads frames (JSON lines) on stdin; for each, reports `<id> <time.time_ns()>` on the FIFO.
READER = """\
import json, os, sys, time

out = os.open(sys.argv[1], os.O_WRONLY)
os.write(out, b"ready 0\\n")
while line := sys.stdin.buffer.readline():
    now = time.time_ns()
    os.write(out, f"{json.loads(line)['id']} {now}\\n".encode())
"""
POLL_INTERVAL = "0.5"


def _read_report(fifo: Fifo, expected: str, after_ns: int) -> float:
    """Seconds from `after_ns` until the worker read message `expected`."""
    message_id, read_ns = fifo.readline().split()
    if message_id != expected:
        raise RuntimeError(f"worker read {message_id}, expected {expected}")
    return (int(read_ns) - after_ns) / 1e9


def run(quick: bool = False) -> list[Row]:
    count, warmup = (30, 3) if quick else (120, 5)
    crew_latency: list[float] = []
    poll_latency: list[float] = []
    steer_call: list[float] = []
    with (
        environment(CREW_FSYNC="0"),
        tempfile.TemporaryDirectory(prefix="crew-bench-") as name,
    ):
        folder = Path(name)
        home = new_home(folder)
        reader = write_script(folder, "reader.py", READER)
        poller = write_script(folder, "poller.py", POLLER)
        crew_fifo = Fifo(folder / "crew.fifo")
        poll_fifo = Fifo(folder / "poll.fifo")
        mailbox = folder / "poll-mailbox.jsonl"
        mailbox.touch()
        crew_toml = write_crew(folder, [PYTHON, str(reader), str(crew_fifo.path)], tasks=1)
        polling = subprocess.Popen(
            [PYTHON, str(poller), POLL_INTERVAL, str(mailbox)], stdout=subprocess.PIPE
        )
        polled = subprocess.Popen([PYTHON, str(reader), str(poll_fifo.path)], stdin=polling.stdout)
        assert polling.stdout is not None
        polling.stdout.close()  # the worker holds the pipe's read end now
        try:
            with detached_run(home, crew_toml) as live:
                wait_all(live.store, TaskStatus.RUNNING)
                crew_fifo.readline()
                poll_fifo.readline()
                template: MailboxMessage | None = None
                for index in range(warmup + count):
                    start = time.perf_counter()
                    sent = ops.steer(live.store, "t1", f"message {index}", session=SESSION)
                    after = time.time_ns()
                    called = time.perf_counter() - start
                    crew_took = _read_report(crew_fifo, sent.message.id, after)
                    template = template or sent.message
                    line = template.model_copy(
                        update={"id": new_message_id(), "body": f"message {index}"}
                    )
                    jsonl.append(mailbox, [line.to_line()])
                    after = time.time_ns()
                    poll_took = _read_report(poll_fifo, line.id, after)
                    if index >= warmup:
                        crew_latency.append(crew_took)
                        poll_latency.append(poll_took)
                        steer_call.append(called)
                wait_for_message(live.store, sent.message, timeout=10)
                if any(m.status is MessageStatus.PENDING for m in live.store.messages()):
                    raise RuntimeError("a steer the worker read is still pending in the mailbox")
        finally:
            kill(polled)
            kill(polling)
            crew_fifo.close()
            poll_fifo.close()
    crew_p50, poll_p50 = statistics.median(crew_latency), statistics.median(poll_latency)
    crew_p99, poll_p99 = percentile(crew_latency, 99), percentile(poll_latency, 99)
    return [
        Row(
            "delivery latency",
            f"crew steer → worker reads, p50 of {count}",
            spread(crew_latency, ms),
            f"{crew_p50 / poll_p50:.3f}× poller",
            "p50 < 20 ms",
            {
                "messages": count,
                "p50": crew_p50,
                "p99": crew_p99,
                "steerCallMedian": statistics.median(steer_call),
                "samples": crew_latency,
            },
        ),
        Row(
            "delivery latency",
            "crew steer → worker reads, p99",
            ms(crew_p99),
            f"{crew_p99 / poll_p99:.3f}× poller",
            "",
            {"p99": crew_p99},
        ),
        Row(
            "delivery latency",
            f"500 ms polling loop, p50 of {count}",
            spread(poll_latency, ms),
            "1.00× (baseline)",
            f"p99 {ms(poll_p99)}",
            {"messages": count, "p50": poll_p50, "p99": poll_p99, "samples": poll_latency},
        ),
    ]
