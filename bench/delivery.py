"""Delivery latency: from `steer` returning to the worker reading the message on its stdin.

One run, one idle worker, a detached leader. Each message is sent (`verbs.steer`, in this process),
then the worker reads it and reports `time.time_ns()` on a FIFO; latency is that time minus the
time right after `verbs.steer` returned (both processes read the same wall clock). The leader can
deliver before `verbs.steer` has returned (it wakes on the event-log append, while the sender is
still finishing its transaction), so that latency can be negative; the latency from the start of
the call is shown too.

Side by side, the same messages go through a polling orchestrator: a loop that checks a mailbox
file every 500 ms and writes new lines into a pipe to the same worker program. Each of its
messages is written at a random moment of the polling period (otherwise the benchmark, which
sends right after the last read, would lock onto the poller's phase). One message at a time: the
next one is sent once the last has been read.

Then a second run, whose steering.jsonl first gets many delivered steers (written in bulk under
the run lock), shows what a long mailbox costs a send and the leader: each message waits until
the leader has marked the previous one delivered, and the leader's CPU time per message is read
from /proc.
"""

from __future__ import annotations

import random
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
    cpu_seconds,
    detached_run,
    environment,
    kill,
    new_home,
    wait_all,
    write_crew,
    write_script,
)
from crew import verbs
from crew.ids import new_message_id
from crew.models import MailboxMessage
from crew.registry import Box, MessageStatus, TaskStatus
from crew.store import jsonl
from crew.store.runstore import RunStore
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
POLL_INTERVAL = 0.5


def _read_at(fifo: Fifo, expected: str) -> int:
    """When (time.time_ns) the worker read message `expected`."""
    message_id, read_ns = fifo.readline().split()
    if message_id != expected:
        raise RuntimeError(f"worker read {message_id}, expected {expected}")
    return int(read_ns)


def _steer(store: RunStore, fifo: Fifo, index: int) -> tuple[MailboxMessage, int, int, int]:
    """Steer the worker of t1: the message, and when the call started, returned and was read."""
    started = time.time_ns()
    sent = verbs.steer(store, "t1", f"message {index}", session=SESSION)
    returned = time.time_ns()
    return sent.message, started, returned, _read_at(fifo, sent.message.id)


class Latencies:
    """Seconds from a send's start, and from its return, to the worker's read."""

    def __init__(self) -> None:
        self.after_return: list[float] = []
        self.from_start: list[float] = []
        self.call: list[float] = []

    def add(self, started: int, returned: int, read: int) -> None:
        self.after_return.append((read - returned) / 1e9)
        self.from_start.append((read - started) / 1e9)
        self.call.append((returned - started) / 1e9)


def _with_history(
    folder: Path, reader: Path, *, count: int, history: int
) -> tuple[Latencies, float]:
    """Latencies of `count` steers to a worker whose steering.jsonl already holds `history`
    delivered steers, and the leader's CPU seconds per message."""
    home = new_home(folder)
    fifo = Fifo(folder / "crew.fifo")
    crew_toml = write_crew(folder, [PYTHON, str(reader), str(fifo.path)], tasks=1)
    latencies = Latencies()
    try:
        with detached_run(home, crew_toml) as live:
            wait_all(live.store, TaskStatus.RUNNING)
            fifo.readline()
            sent, *_ = _steer(live.store, fifo, 0)
            delivered = wait_for_message(live.store, sent, timeout=10)
            lines = [
                delivered.model_copy(update={"id": new_message_id()}).to_line()
                for _ in range(history)
            ]
            with live.store.lock():
                jsonl.append(live.store.paths.box(Box.STEERING), lines)
            _steer(live.store, fifo, 1)  # the leader has read the long file by now
            cpu = cpu_seconds(live.pid)
            for index in range(count):
                sent, started, returned, read = _steer(live.store, fifo, index + 2)
                latencies.add(started, returned, read)
                wait_for_message(live.store, sent, timeout=30)
            per_message = (cpu_seconds(live.pid) - cpu) / count
    finally:
        fifo.close()
    return latencies, per_message


def run(quick: bool = False) -> list[Row]:
    count, warmup = (30, 3) if quick else (120, 5)
    long_count, history = (10, 2_000) if quick else (30, 10_000)
    crew, poll = Latencies(), Latencies()
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
            [PYTHON, str(poller), str(POLL_INTERVAL), str(mailbox)], stdout=subprocess.PIPE
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
                    sent, started, returned, read = _steer(live.store, crew_fifo, index)
                    if index >= warmup:
                        crew.add(started, returned, read)
                    template = template or sent
                    line = template.model_copy(
                        update={"id": new_message_id(), "body": f"message {index}"}
                    )
                    time.sleep(random.uniform(0, POLL_INTERVAL))
                    started = time.time_ns()
                    jsonl.append(mailbox, [line.to_line()])
                    returned = time.time_ns()
                    read = _read_at(poll_fifo, line.id)
                    if index >= warmup:
                        poll.add(started, returned, read)
                wait_for_message(live.store, sent, timeout=10)
                if any(m.status is MessageStatus.PENDING for m in live.store.messages()):
                    raise RuntimeError("a steer the worker read is still pending in the mailbox")
        finally:
            kill(polled)
            kill(polling)
            crew_fifo.close()
            poll_fifo.close()
        (folder / "history").mkdir()
        long, leader_cpu = _with_history(
            folder / "history", reader, count=long_count, history=history
        )
    crew_p50 = statistics.median(crew.after_return)
    poll_p50 = statistics.median(poll.after_return)
    crew_p99, poll_p99 = percentile(crew.after_return, 99), percentile(poll.after_return, 99)
    start_p50 = statistics.median(crew.from_start)
    poll_start_p50 = statistics.median(poll.from_start)
    return [
        Row(
            "delivery latency",
            f"crew: steer returned → worker read, p50 of {count}",
            spread(crew.after_return, ms),
            f"{crew_p50 / poll_p50:.3f}× poller",
            "p50 < 20 ms",
            {
                "messages": count,
                "p50": crew_p50,
                "p99": crew_p99,
                "steerCallMedian": statistics.median(crew.call),
                "samples": crew.after_return,
            },
        ),
        Row(
            "delivery latency",
            "crew: steer returned → worker read, p99",
            ms(crew_p99),
            f"{crew_p99 / poll_p99:.3f}× poller",
            "",
            {"p99": crew_p99},
        ),
        Row(
            "delivery latency",
            f"crew: steer called → worker read, p50 of {count}",
            spread(crew.from_start, ms),
            f"{start_p50 / poll_start_p50:.3f}× poller",
            f"p99 {ms(percentile(crew.from_start, 99))}; call {ms(statistics.median(crew.call))}",
            {"p50": start_p50, "p99": percentile(crew.from_start, 99), "samples": crew.from_start},
        ),
        Row(
            "delivery latency",
            f"500 ms polling loop: append returned → read, p50 of {count}",
            spread(poll.after_return, ms),
            "1.00× (baseline)",
            f"p99 {ms(poll_p99)}",
            {"messages": count, "p50": poll_p50, "p99": poll_p99, "samples": poll.after_return},
        ),
        Row(
            "delivery latency",
            f"crew: steer called → worker read, {history:,} earlier steers, p50 of {long_count}",
            spread(long.from_start, ms),
            f"{statistics.median(long.from_start) / start_p50:.2f}× empty mailbox",
            f"call {ms(statistics.median(long.call))}; leader CPU {ms(leader_cpu)}/message",
            {
                "history": history,
                "messages": long_count,
                "p50": statistics.median(long.from_start),
                "afterReturnP50": statistics.median(long.after_return),
                "steerCallMedian": statistics.median(long.call),
                "leaderCpuPerMessage": leader_cpu,
            },
        ),
    ]
