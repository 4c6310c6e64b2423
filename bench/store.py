"""Append throughput: crew's JSONL append under the run lock against SQLite, and a transaction.

One process, N sequential appends of one mailbox-message record each, timed in batches, round
after round side by side. Pairs of equal durability:
- crew with fsync on (each append fsynced before it returns) and SQLite in WAL mode with
  synchronous=FULL (the WAL is synced at every commit): a record survives a power cut.
- crew with fsync off (CREW_FSYNC=0) and SQLite WAL with synchronous=NORMAL (no sync at commit,
  only at checkpoints): a record survives the process crashing, not a power cut.
SQLite gets one transaction per insert (autocommit), into `(id TEXT PRIMARY KEY, json TEXT)`.

A whole transaction is compared with its SQLite equivalent: one SQLite transaction (BEGIN
IMMEDIATE … COMMIT, WAL) writing the same three rows — the event, the mailbox message and the
applied marker (an upsert) — at the same two durability levels.

A full transaction (`change(store)` posting one follow-up: the run lock, recovery, an event
append, a mailbox append and the applied marker) is what one `crew follow-up` writes; it is timed
on a run of 8 tasks, and (fsync off) on one of LARGE_RUN tasks, to see what a bigger run adds.
"""

from __future__ import annotations

import fcntl
import os
import sqlite3
import tempfile
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from bench.common import Row, measure_side_by_side
from bench.crews import environment
from crew import env
from crew.config import parse_config
from crew.domain import change, mailbox
from crew.domain.runs import create_run
from crew.ids import new_message_id
from crew.models import MailboxMessage
from crew.paths import Home
from crew.registry import Direction, EventType, MessageKind, MessageStatus
from crew.store import jsonl
from crew.store.lock import locked

LARGE_RUN = 200
CREW_ON = "crew append, fsync on"
SQLITE_FULL = "SQLite WAL, synchronous=FULL"
CREW_OFF = "crew append, fsync off"
SQLITE_NORMAL = "SQLite WAL, synchronous=NORMAL"
TXN_ON = "crew transaction (follow-up), fsync on"
TXN_OFF = "crew transaction (follow-up), fsync off"
TXN_LARGE = f"crew transaction (follow-up), fsync off, {LARGE_RUN}-task run"
LOCK_ONLY = "run lock alone (filelock: acquire + release)"
FLOCK_ONLY = "flock alone (open, lock, unlock, close)"
SQLITE_TXN_FULL = "SQLite WAL transaction of the same 3 rows, synchronous=FULL"
SQLITE_TXN_NORMAL = "SQLite WAL transaction of the same 3 rows, synchronous=NORMAL"
EQUAL = "≥ 1.0× (equal durability)"


def _message(index: int, at: str = "2026-11-30T03:41:00.123456Z") -> MailboxMessage:
    return MailboxMessage(
        id=new_message_id(),
        direction=Direction.INBOX,
        kind=MessageKind.FOLLOW_UP,
        from_="leader",
        to="t1",
        task_id="t1",
        body=f"follow-up number {index}: please also cover the edge cases in the parser",
        status=MessageStatus.PENDING,
        priority=MessageKind.FOLLOW_UP.default_priority,
        sent_at=at,
        data={"session": "bench"},
    )


def _records(count: int) -> Iterator[tuple[str, bytes]]:
    """`count` distinct records, built before any timing: (message id, its mailbox line)."""
    messages = [_message(index) for index in range(count)]
    return iter([(message.id, message.to_line()) for message in messages])


def _crew_appends(folder: Path, name: str, batch: int, total: int) -> Callable[[], None]:
    path, lock = folder / f"{name}.jsonl", folder / f"{name}.lock"
    records = _records(total)

    def call() -> None:
        for _ in range(batch):
            _, line = next(records)
            with locked(lock):
                jsonl.append(path, [line])

    return call


def _sqlite_inserts(
    folder: Path, sync: str, batch: int, total: int, closing: ExitStack
) -> Callable[[], None]:
    connection = sqlite3.connect(folder / f"sqlite-{sync}.db", isolation_level=None)
    closing.callback(connection.close)
    connection.execute("PRAGMA journal_mode=WAL")
    connection.execute(f"PRAGMA synchronous={sync}")
    connection.execute("CREATE TABLE messages (id TEXT PRIMARY KEY, json TEXT)")
    records = _records(total)

    def call() -> None:
        for _ in range(batch):
            message_id, line = next(records)
            connection.execute("INSERT INTO messages VALUES (?, ?)", (message_id, line.decode()))

    return call


def _sqlite_transactions(
    folder: Path, sync: str, batch: int, total: int, closing: ExitStack
) -> Callable[[], None]:
    """What a follow-up writes, as SQLite would: the event, the message, the marker (upserted)."""
    connection = sqlite3.connect(folder / f"sqlite-txn-{sync}.db", isolation_level=None)
    closing.callback(connection.close)
    connection.execute("PRAGMA journal_mode=WAL")
    connection.execute(f"PRAGMA synchronous={sync}")
    connection.execute("CREATE TABLE events (seq INTEGER PRIMARY KEY, json TEXT)")
    connection.execute("CREATE TABLE messages (id TEXT PRIMARY KEY, json TEXT)")
    connection.execute("CREATE TABLE applied (id INTEGER PRIMARY KEY, seq INTEGER)")
    records = _records(total)
    seq = 0

    def call() -> None:
        nonlocal seq
        for _ in range(batch):
            message_id, line = next(records)
            seq += 1
            data = f'{{"mailboxMessage":{line.decode()}}}'
            event = f'{{"seq":{seq},"type":"agent.followedUp","data":{data}}}'
            connection.execute("BEGIN IMMEDIATE")
            connection.execute("INSERT INTO events VALUES (?, ?)", (seq, event))
            connection.execute("INSERT INTO messages VALUES (?, ?)", (message_id, line.decode()))
            connection.execute("INSERT OR REPLACE INTO applied VALUES (0, ?)", (seq,))
            connection.execute("COMMIT")

    return call


def _config(tasks: int) -> dict[str, Any]:
    return {
        "crew": {"name": "bench"},
        "agents": {"a": {"command": ["true"]}},
        "tasks": [
            {"id": f"t{i}", "agent": "a", "prompt": f"task {i}: fix the parser's edge cases"}
            for i in range(1, tasks + 1)
        ],
    }


def _transactions(folder: Path, name: str, batch: int, *, tasks: int = 8) -> Callable[[], None]:
    root = folder / name
    home = Home(root / ".crew")
    home.root.mkdir(parents=True)
    store = create_run(home, parse_config(_config(tasks)), crew_dir=root, session="bench")
    count = 0

    def call() -> None:
        nonlocal count
        for _ in range(batch):
            count += 1
            with change(store) as txn:
                mailbox.post(txn, _message(count, txn.at), EventType.AGENT_FOLLOWED_UP)

    return call


def _lock_only(folder: Path, batch: int) -> Callable[[], None]:
    lock = folder / "alone.lock"

    def call() -> None:
        for _ in range(batch):
            with locked(lock):
                pass

    return call


def _flock_only(folder: Path, batch: int) -> Callable[[], None]:
    """The flock system call that filelock wraps, on a descriptor opened each time."""
    path = folder / "flock.lock"

    def call() -> None:
        for _ in range(batch):
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)

    return call


def _fsync(on: bool) -> Callable[[], None]:
    """Setup for a call: the durability policy crew reads from the environment."""

    def setup() -> None:
        os.environ[env.FSYNC.name] = "1" if on else "0"

    return setup


def run(quick: bool = False) -> list[Row]:
    rounds, warmup = (3, 1) if quick else (9, 2)
    durable, loose = (40, 400) if quick else (100, 1000)
    total = {size: (rounds + warmup) * size for size in (durable, loose)}
    batches = {
        CREW_ON: durable,
        SQLITE_FULL: durable,
        TXN_ON: durable,
        SQLITE_TXN_FULL: durable,
        CREW_OFF: loose,
        SQLITE_NORMAL: loose,
        TXN_OFF: loose,
        SQLITE_TXN_NORMAL: loose,
        TXN_LARGE: durable,
        LOCK_ONLY: loose,
        FLOCK_ONLY: loose,
    }
    with (
        environment(CREW_FSYNC="0"),
        tempfile.TemporaryDirectory(prefix="crew-bench-") as name,
        ExitStack() as closing,
    ):
        folder = Path(name)
        calls = {
            CREW_ON: _crew_appends(folder, "on", durable, total[durable]),
            SQLITE_FULL: _sqlite_inserts(folder, "FULL", durable, total[durable], closing),
            TXN_ON: _transactions(folder, "txn-on", durable),
            SQLITE_TXN_FULL: _sqlite_transactions(folder, "FULL", durable, total[durable], closing),
            CREW_OFF: _crew_appends(folder, "off", loose, total[loose]),
            SQLITE_NORMAL: _sqlite_inserts(folder, "NORMAL", loose, total[loose], closing),
            TXN_OFF: _transactions(folder, "txn-off", loose),
            SQLITE_TXN_NORMAL: _sqlite_transactions(folder, "NORMAL", loose, total[loose], closing),
            TXN_LARGE: _transactions(folder, "txn-large", durable, tasks=LARGE_RUN),
            LOCK_ONLY: _lock_only(folder, loose),
            FLOCK_ONLY: _flock_only(folder, loose),
        }
        timings = measure_side_by_side(
            calls,
            runs=rounds,
            warmup=warmup,
            setup={key: _fsync(key in {CREW_ON, TXN_ON}) for key in calls},
        )
    rate = {key: batches[key] / timing.median for key, timing in timings.items()}

    def row(key: str, ratio: str, goal: str = "") -> Row:
        timing, batch = timings[key], batches[key]
        return Row(
            "append throughput",
            key,
            f"{rate[key]:,.0f}/s ({batch / timing.high:,.0f}–{batch / timing.low:,.0f})",
            ratio,
            goal,
            {"perSecond": rate[key], "batch": batch, "rounds": timing.runs},
        )

    return [
        row(CREW_ON, f"{rate[CREW_ON] / rate[SQLITE_FULL]:.2f}× SQLite FULL", EQUAL),
        row(SQLITE_FULL, "baseline (power-cut safe)"),
        row(CREW_OFF, f"{rate[CREW_OFF] / rate[SQLITE_NORMAL]:.2f}× SQLite NORMAL", EQUAL),
        row(SQLITE_NORMAL, "baseline (crash safe)"),
        row(TXN_ON, f"{rate[TXN_ON] / rate[SQLITE_TXN_FULL]:.2f}× SQLite transaction FULL", EQUAL),
        row(SQLITE_TXN_FULL, "baseline (power-cut safe)"),
        row(
            TXN_OFF,
            f"{rate[TXN_OFF] / rate[SQLITE_TXN_NORMAL]:.2f}× SQLite transaction NORMAL",
            EQUAL,
        ),
        row(SQLITE_TXN_NORMAL, "baseline (crash safe)"),
        row(TXN_LARGE, f"{rate[TXN_LARGE] / rate[TXN_OFF]:.2f}× the 8-task run"),
        row(LOCK_ONLY, f"{1e6 / rate[LOCK_ONLY]:.0f} µs each"),
        row(FLOCK_ONLY, f"{1e6 / rate[FLOCK_ONLY]:.0f} µs each"),
    ]
