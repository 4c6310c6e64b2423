"""Delivery latency: from a fresh `crew steer` process being started to the worker reading it.

One run, one idle worker, a detached leader. Each message is sent by the real command, `crew
steer RUN t1 "message N"`, started by the spawner (bench/spawner.py), which takes
`time.monotonic_ns()` just before it spawns the command and again once it has reaped it. The
worker reads frames on its stdin; for each it takes `time.monotonic_ns()` (the same clock) and
reports it (and `time.time_ns()`) with the message body on a FIFO, then acknowledges the frame
as the worker protocol asks. Latency, from spawn to read, is what a person typing the command
waits.

The leader's share runs from the message's `sentAt` (wall clock, microseconds: the moment the
command's transaction began, read back from steering.jsonl) to the read: the write, the leader
waking and the frame reaching the worker. The time from the command's exit to the read is shown
too; it is negative when the leader delivered before the command had exited (it wakes on the
write, while the command is still finishing).

Side by side, round after round, the same worker program reads from a polling orchestrator: a
loop that checks a mailbox file every 500 ms and writes new lines into the worker's stdin. Each
of its messages is appended at its own moment of the polling period (otherwise the benchmark,
which sends right after the last read, would lock onto the poller's phase): the moments are
spread evenly over the period and taken in a random order, so that the poller's p50 is the
median over every phase (a median of random phases strays by ±13% over 60 messages, and the
goal's ratio with it); its latency is append → read, a lower bound for a polling design whose
command would take time too.
One message at a time: the next is sent once the last has been read.
"""

from __future__ import annotations

import json
import random
import statistics
import subprocess
import tempfile
import time
from datetime import datetime
from pathlib import Path

from bench.common import Row, ms, percentile, spread
from bench.crews import (
    POLLER,
    PYTHON,
    Fifo,
    crew_argv,
    crew_env,
    detached_run,
    kill,
    new_home,
    wait_all,
    write_crew,
    write_script,
)
from bench.spawner import Command, Spawner, spawner
from crew.registry import Box, TaskStatus

#: Reads frames (JSON lines) on stdin; reports `<monotonic ns> <wall ns> <body>` on the FIFO,
#: then acknowledges it (a polled line has an id too, so the same program serves both).
READER = """\
import json, os, sys, time

out = os.open(sys.argv[1], os.O_WRONLY)
os.write(out, b"0 0 ready\\n")
while line := sys.stdin.buffer.readline():
    now, wall = time.monotonic_ns(), time.time_ns()
    frame = json.loads(line)
    os.write(out, f"{now} {wall} {frame['body']}\\n".encode())
    print(f"@supervisor ack: {frame['id']}", flush=True)
"""
POLL_INTERVAL = 0.5
GOAL = "p50 ≤ 50 ms, ≤ 0.2× the poller"


def _read_at(fifo: Fifo, body: str) -> tuple[int, int]:
    """When the worker read the message whose body is `body`: monotonic and wall-clock ns."""
    read_ns, wall_ns, read_body = fifo.readline().split(" ", 2)
    if read_body != body:
        raise RuntimeError(f"worker read {read_body!r}, expected {body!r}")
    return int(read_ns), int(wall_ns)


def _sent_at(steering: Path, body: str) -> int:
    """The `sentAt` (wall-clock ns) of the newest steer with this body."""
    for line in reversed(steering.read_bytes().splitlines()):
        record = json.loads(line)
        if record.get("body") == body:
            at = datetime.fromisoformat(record["sentAt"].replace("Z", "+00:00"))
            return int(at.timestamp() * 1_000_000) * 1000
    raise RuntimeError(f"no steer {body!r} in {steering}")


class Samples:
    """Per message: spawn → read, write → read, exit → read, spawn → exit (seconds)."""

    def __init__(self) -> None:
        self.total: list[float] = []
        self.leader: list[float] = []
        self.after_exit: list[float] = []
        self.command: list[float] = []


def _steer(
    spawn: Spawner, command: Command, steering: Path, fifo: Fifo, body: str, into: Samples
) -> None:
    sent = spawn.run(Command([*command.argv, body], command.env, command.cwd))
    read, wall = _read_at(fifo, body)
    into.total.append((read - sent.started_ns) / 1e9)
    into.leader.append((wall - _sent_at(steering, body)) / 1e9)
    into.after_exit.append((read - sent.ended_ns) / 1e9)
    into.command.append(sent.seconds)


def _poll_send(mailbox: Path, fifo: Fifo, index: int, phase: float, into: Samples) -> None:
    """Append a line `phase` seconds after the poller's last read, and time it to the read."""
    body = f"polled {index}"
    line = json.dumps({"id": f"msg_poll{index}", "body": body}) + "\n"
    time.sleep(phase)
    appended = time.monotonic_ns()
    with mailbox.open("a") as handle:
        handle.write(line)
    into.total.append((_read_at(fifo, body)[0] - appended) / 1e9)


def _measure(folder: Path, *, count: int, warmup: int) -> tuple[Samples, Samples]:
    home = new_home(folder)
    reader = write_script(folder, "reader.py", READER)
    poller = write_script(folder, "poller.py", POLLER)
    crew_fifo, poll_fifo = Fifo(folder / "crew.fifo"), Fifo(folder / "poll.fifo")
    mailbox = folder / "poll-mailbox.jsonl"
    mailbox.touch()
    crew_toml = write_crew(folder, [PYTHON, str(reader), str(crew_fifo.path)], tasks=1)
    polling = subprocess.Popen(
        [PYTHON, str(poller), str(POLL_INTERVAL), str(mailbox)], stdout=subprocess.PIPE
    )
    polled = subprocess.Popen(
        [PYTHON, str(reader), str(poll_fifo.path)], stdin=polling.stdout, stdout=subprocess.DEVNULL
    )
    assert polling.stdout is not None
    polling.stdout.close()  # the worker holds the pipe's read end now
    crew, poll, discarded = Samples(), Samples(), Samples()
    try:
        with detached_run(home, crew_toml) as live, spawner(folder) as spawn:
            wait_all(live.store, TaskStatus.RUNNING)
            crew_fifo.readline()
            poll_fifo.readline()
            steer = Command(crew_argv("steer", live.store.run_id, "t1"), crew_env(home), folder)
            steering = live.store.paths.box(Box.STEERING)
            phases = [(i + 0.5) / count * POLL_INTERVAL for i in range(count)]
            random.shuffle(phases)
            phases = [random.uniform(0, POLL_INTERVAL) for _ in range(warmup)] + phases
            for index in range(warmup + count):
                into = crew if index >= warmup else discarded
                _steer(spawn, steer, steering, crew_fifo, f"message {index}", into)
                polled_into = poll if index >= warmup else discarded
                _poll_send(mailbox, poll_fifo, index, phases[index], polled_into)
    finally:
        kill(polled)
        kill(polling)
        crew_fifo.close()
        poll_fifo.close()
    return crew, poll


def run(quick: bool = False) -> list[Row]:
    count, warmup = (15, 2) if quick else (60, 3)
    with tempfile.TemporaryDirectory(prefix="crew-bench-") as name:
        crew, poll = _measure(Path(name), count=count, warmup=warmup)
    p50, p99 = statistics.median(crew.total), percentile(crew.total, 99)
    poll_p50, poll_p99 = statistics.median(poll.total), percentile(poll.total, 99)
    leader_p50, command_p50 = statistics.median(crew.leader), statistics.median(crew.command)
    exit_p50 = statistics.median(crew.after_exit)
    benchmark = "delivery latency"
    return [
        Row(
            benchmark,
            f"`crew steer` started → worker read, p50 of {count}",
            spread(crew.total, ms),
            f"{p50 / poll_p50:.3f}× poller",
            GOAL,
            {"messages": count, "p50": p50, "p99": p99, "samples": crew.total},
        ),
        Row(
            benchmark,
            "`crew steer` started → worker read, p99",
            ms(p99),
            f"{p99 / poll_p99:.3f}× poller",
        ),
        Row(
            benchmark,
            "steer written (`sentAt`) → worker read (the leader's share), p50",
            spread(crew.leader, ms),
            f"{leader_p50 / p50:.2f}× of the whole",
            f"p99 {ms(percentile(crew.leader, 99))}",
            {"p50": leader_p50, "p99": percentile(crew.leader, 99), "samples": crew.leader},
        ),
        Row(
            benchmark,
            "`crew steer` exited → worker read, p50",
            spread(crew.after_exit, ms),
            f"{exit_p50 / p50:.2f}× of the whole",
            "negative: read before the exit",
            {"p50": exit_p50, "samples": crew.after_exit},
        ),
        Row(
            benchmark,
            "`crew steer` started → exited (the command), p50",
            spread(crew.command, ms),
            f"{command_p50 / p50:.2f}× of the whole",
            "",
            {"p50": command_p50, "samples": crew.command},
        ),
        Row(
            benchmark,
            f"500 ms polling loop: append → read, p50 of {count}",
            spread(poll.total, ms),
            "1.00× (baseline)",
            f"p99 {ms(poll_p99)}",
            {"messages": count, "p50": poll_p50, "p99": poll_p99, "samples": poll.total},
        ),
    ]
