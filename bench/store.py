"""Transaction against transaction: a whole `crew follow-up` against one SQLite transaction.

Crew's side is what the command does once it has started: `verbs.follow_up(store, "t1", body,
session=…)`, one call per message — the run lock, the gate, the event, the mailbox line and the
applied marker. SQLite's side is one WAL transaction holding the same writes: BEGIN IMMEDIATE,
read the task's row (as the gate reads the task), insert the event row, insert the mailbox row,
update the marker row, COMMIT. Its rows carry the very lines crew wrote for a follow-up (read
back from a crew run), so both store the same bytes. SQLite does no gate work: the comparison
favours it. The same follow-ups are also done as the `crew follow-up` command does them — its
fast path (crew/fast), which takes the lock with `flock` itself and writes the same lines without
the models — called in process with the command's arguments.

Pairs of equal durability: crew with fsync (CREW_FSYNC=1) and SQLite `synchronous=FULL` survive
a power cut; crew without (CREW_FSYNC=0) and SQLite `synchronous=NORMAL` survive the process
crashing. Each round starts from a fresh run (and a fresh database), untimed, so a mailbox never
grows beyond one batch; the crew cases run once more on a run of LARGE_RUN tasks, to show what
the size of a run adds to a transaction. The cases take turns, round after round.

Beside them, the least a writer of crew's files can do per transaction, in Python (the bound
any implementation of the format meets, not crew's code): take the run lock with `flock`, read
the marker and check the two files' sizes against it, append the same event line (fsynced, the
commit point) and mailbox line with one `write()` each, and overwrite the marker in place. What
separates crew from it is crew's own work: the lock's calls, the gate, the models, the checks.
The run lock is measured alone too: as crew takes it, as filelock would, and as one `flock`.
"""

from __future__ import annotations

import contextlib
import fcntl
import io
import os
import sqlite3
import tempfile
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from bench.common import Row, measure_side_by_side
from bench.crews import environment
from crew import verbs
from crew.config import parse_config
from crew.domain.runs import create_run
from crew.fast import fast, runfiles
from crew.paths import Home
from crew.registry import Box
from crew.store.lock import locked
from crew.store.runstore import RunStore

LARGE_RUN = 1_000
CREW_ON = "crew follow-up transaction, fsync on"
SQLITE_FULL = "SQLite WAL transaction, synchronous=FULL"
CREW_OFF = "crew follow-up transaction, fsync off"
SQLITE_NORMAL = "SQLite WAL transaction, synchronous=NORMAL"
CREW_LARGE = f"crew follow-up transaction, fsync off, {LARGE_RUN:,}-task run"
FAST_ON = "crew follow-up, the command's fast path in process, fsync on"
FAST_OFF = "crew follow-up, the command's fast path in process, fsync off"
LEAST_ON = "the least a writer of crew's files does (flock, 2 appends, marker), fsync on"
LEAST_OFF = "the least a writer of crew's files does (flock, 2 appends, marker), fsync off"
LOCKED = "the run lock alone: crew's acquire + release (crew/store/lock.py)"
FILELOCK = "the same lock taken by filelock (FileLock acquire + release)"
FLOCK = "the same lock file taken by flock directly"
GOAL = "≥ 1.0× (equal durability)"
SCHEMA = """
CREATE TABLE tasks (id TEXT PRIMARY KEY, status TEXT, json TEXT);
CREATE TABLE events (seq INTEGER PRIMARY KEY, json TEXT);
CREATE TABLE messages (id TEXT PRIMARY KEY, task TEXT, status TEXT, json TEXT);
CREATE TABLE marker (id INTEGER PRIMARY KEY, applied INTEGER);
INSERT INTO marker VALUES (1, 0);
"""


def _config(tasks: int) -> dict[str, Any]:
    return {
        "crew": {"name": "bench"},
        "agents": {"a": {"command": ["true"]}},
        "limits": {"maxPendingFollowUps": 100_000, "warnPending": 100_000},
        "tasks": [
            {"id": f"t{i}", "agent": "a", "prompt": f"task {i}: fix the parser's edge cases"}
            for i in range(1, tasks + 1)
        ],
    }


def _new_run(folder: Path, tasks: int) -> RunStore:
    root = Path(tempfile.mkdtemp(dir=folder))
    home = Home(root / ".crew")
    home.root.mkdir(parents=True)
    return create_run(home, parse_config(_config(tasks)), crew_dir=root, session="bench")


class CrewCase:
    """`batch` follow-ups per timed call, on a run made fresh before each call."""

    def __init__(self, folder: Path, batch: int, *, tasks: int = 8, fsync: bool) -> None:
        self.folder, self.batch, self.tasks, self.fsync = folder, batch, tasks, fsync
        self.store: RunStore | None = None

    def setup(self) -> None:
        os.environ["CREW_FSYNC"] = "1" if self.fsync else "0"
        self.store = _new_run(self.folder, self.tasks)

    def call(self) -> None:
        assert self.store is not None
        for index in range(self.batch):
            body = f"follow-up {index}: cover the edge cases"
            verbs.follow_up(self.store, "t1", body, session="bench")


class FastCase(CrewCase):
    """The same follow-ups as the `crew follow-up` command does them: its fast path (crew/fast),
    called in this process with the command's arguments (its output thrown away)."""

    def setup(self) -> None:
        super().setup()
        os.environ["CREW_SESSION_ID"] = "bench"

    def call(self) -> None:
        assert self.store is not None
        home = str(self.store.paths.home.root)
        with contextlib.redirect_stdout(io.StringIO()):
            for index in range(self.batch):
                runfiles.wrote = False  # each call stands for a new process
                body = f"follow-up {index}: cover the edge cases"
                argv = ["follow-up", self.store.run_id, "t1", body, "--home", home]
                if fast(argv) != 0:
                    raise RuntimeError("the fast path did not take the follow-up")


def _written_lines(folder: Path) -> tuple[str, str]:
    """The event line and the mailbox line one crew follow-up writes."""
    store = _new_run(folder, 8)
    verbs.follow_up(store, "t1", "follow-up 0: cover the edge cases", session="bench")
    event = store.paths.events.read_text().splitlines()[-1]
    message = store.paths.box(Box.INBOX).read_text().splitlines()[-1]
    return event, message


class LeastCase:
    """`batch` transactions of the same two lines as crew's, doing only what the file format
    needs (see the module's docstring), in a folder made fresh before each call."""

    def __init__(self, folder: Path, batch: int, *, fsync: bool, lines: tuple[str, str]) -> None:
        self.folder, self.batch, self.fsync = folder, batch, fsync
        self.lines = tuple(line.encode() + b"\n" for line in lines)
        self.fds: list[int] = []

    def setup(self) -> None:
        self.close()
        run = Path(tempfile.mkdtemp(dir=self.folder))
        flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC
        self.fds = [
            os.open(run / name, flags | (os.O_APPEND if name.endswith(".jsonl") else 0), 0o600)
            for name in (".lock", "events.jsonl", "inbox.jsonl", "applied")
        ]
        os.pwrite(self.fds[3], b"0 0 0\n", 0)

    def call(self) -> None:
        lock, events, inbox, applied = self.fds
        event, message = self.lines
        for seq in range(1, self.batch + 1):
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                marker = os.pread(applied, 64, 0).split()
                if int(marker[1]) != os.fstat(events).st_size:
                    raise RuntimeError("the marker does not describe events.jsonl")
                if int(marker[2]) != os.fstat(inbox).st_size:
                    raise RuntimeError("the marker does not describe inbox.jsonl")
                os.write(events, event)
                if self.fsync:
                    os.fsync(events)
                os.write(inbox, message)
                sizes = (seq, os.fstat(events).st_size, os.fstat(inbox).st_size)
                os.pwrite(applied, b"%d %d %d\n" % sizes, 0)
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def close(self) -> None:
        for fd in self.fds:
            os.close(fd)
        self.fds = []


class LockCase:
    """`batch` acquisitions and releases of a run's lock: crew's (`locked`), filelock's
    `FileLock` (which crew takes only where it must), or `flock` on the same file directly."""

    def __init__(self, folder: Path, batch: int, *, how: str) -> None:
        self.path = Path(tempfile.mkdtemp(dir=folder)) / ".lock"
        self.path.touch()
        self.batch, self.how = batch, how

    def call(self) -> None:
        if self.how == "crew":
            for _ in range(self.batch):
                with locked(self.path):
                    pass
        elif self.how == "filelock":
            import filelock

            lock = filelock.FileLock(self.path)
            for _ in range(self.batch):
                lock.acquire()
                lock.release()
        else:
            fd = os.open(self.path, os.O_RDWR | os.O_CLOEXEC)
            try:
                for _ in range(self.batch):
                    fcntl.flock(fd, fcntl.LOCK_EX)
                    fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)


class SqliteCase:
    """`batch` transactions per timed call, on a database made fresh before each call."""

    def __init__(self, folder: Path, batch: int, sync: str, lines: tuple[str, str]) -> None:
        self.folder, self.batch, self.sync, self.lines = folder, batch, sync, lines
        self.connection: sqlite3.Connection | None = None

    def setup(self) -> None:
        if self.connection is not None:
            self.connection.close()
        path = Path(tempfile.mkdtemp(dir=self.folder)) / "run.db"
        self.connection = sqlite3.connect(path, isolation_level=None)
        self.connection.execute("PRAGMA journal_mode=WAL")
        self.connection.execute(f"PRAGMA synchronous={self.sync}")
        self.connection.executescript(SCHEMA)
        self.connection.execute("INSERT INTO tasks VALUES ('t1', 'queued', '{}')")

    def call(self) -> None:
        assert self.connection is not None
        db, (event, message) = self.connection, self.lines
        for index in range(self.batch):
            db.execute("BEGIN IMMEDIATE")
            db.execute("SELECT status, json FROM tasks WHERE id = 't1'").fetchone()
            seq = db.execute("INSERT INTO events (json) VALUES (?)", (event,)).lastrowid
            db.execute(
                "INSERT INTO messages VALUES (?, 't1', 'pending', ?)", (f"msg_{index}", message)
            )
            db.execute("UPDATE marker SET applied = ? WHERE id = 1", (seq,))
            db.execute("COMMIT")

    def close(self) -> None:
        if self.connection is not None:
            self.connection.close()


def _rows(timings: dict[str, Any], batches: dict[str, int]) -> list[Row]:
    rate = {key: batches[key] / timing.median for key, timing in timings.items()}

    def row(key: str, ratio: str, goal: str = "") -> Row:
        timing, batch = timings[key], batches[key]
        return Row(
            "transactions",
            key,
            f"{rate[key]:,.0f}/s ({batch / timing.high:,.0f}–{batch / timing.low:,.0f})",
            ratio,
            goal,
            {"perSecond": rate[key], "batch": batch, "rounds": timing.runs},
        )

    return [
        row(CREW_ON, f"{rate[CREW_ON] / rate[SQLITE_FULL]:.2f}× SQLite FULL", GOAL),
        row(SQLITE_FULL, "baseline (power-cut safe)"),
        row(CREW_OFF, f"{rate[CREW_OFF] / rate[SQLITE_NORMAL]:.2f}× SQLite NORMAL", GOAL),
        row(SQLITE_NORMAL, "baseline (crash safe)"),
        row(CREW_LARGE, f"{rate[CREW_LARGE] / rate[CREW_OFF]:.2f}× the 8-task run", "flat"),
        row(FAST_ON, f"{rate[FAST_ON] / rate[SQLITE_FULL]:.2f}× SQLite FULL", GOAL),
        row(FAST_OFF, f"{rate[FAST_OFF] / rate[SQLITE_NORMAL]:.2f}× SQLite NORMAL", GOAL),
        row(LEAST_ON, f"{rate[LEAST_ON] / rate[SQLITE_FULL]:.2f}× SQLite FULL", "the bound"),
        row(LEAST_OFF, f"{rate[LEAST_OFF] / rate[SQLITE_NORMAL]:.2f}× SQLite NORMAL", "the bound"),
        row(LOCKED, f"{rate[LOCKED] / rate[SQLITE_NORMAL]:.1f}× a whole SQLite NORMAL's rate"),
        row(FILELOCK, f"{rate[FILELOCK] / rate[LOCKED]:.2f}× crew's rate"),
        row(FLOCK, f"{rate[FLOCK] / rate[LOCKED]:.0f}× crew's rate"),
    ]


def run(quick: bool = False) -> list[Row]:
    rounds, warmup = (3, 1) if quick else (9, 2)
    durable, loose = (20, 100) if quick else (100, 400)
    batches = {
        CREW_ON: durable,
        SQLITE_FULL: durable,
        CREW_OFF: loose,
        SQLITE_NORMAL: loose,
        CREW_LARGE: loose,
        FAST_ON: durable,
        FAST_OFF: loose,
        LEAST_ON: durable,
        LEAST_OFF: loose,
        LOCKED: loose,
        FILELOCK: loose,
        FLOCK: loose,
    }
    with (
        environment(CREW_FSYNC="0"),
        tempfile.TemporaryDirectory(prefix="crew-bench-") as name,
        ExitStack() as closing,
    ):
        folder = Path(name)
        lines = _written_lines(folder)
        full, normal = (
            SqliteCase(folder, batches[SQLITE_FULL], "FULL", lines),
            SqliteCase(folder, batches[SQLITE_NORMAL], "NORMAL", lines),
        )
        least_on = LeastCase(folder, durable, fsync=True, lines=lines)
        least_off = LeastCase(folder, loose, fsync=False, lines=lines)
        for case in (full, normal, least_on, least_off):
            closing.callback(case.close)
        cases: dict[str, CrewCase | SqliteCase | LeastCase | LockCase] = {
            CREW_ON: CrewCase(folder, durable, fsync=True),
            SQLITE_FULL: full,
            CREW_OFF: CrewCase(folder, loose, fsync=False),
            SQLITE_NORMAL: normal,
            CREW_LARGE: CrewCase(folder, loose, tasks=LARGE_RUN, fsync=False),
            FAST_ON: FastCase(folder, durable, fsync=True),
            FAST_OFF: FastCase(folder, loose, fsync=False),
            LEAST_ON: least_on,
            LEAST_OFF: least_off,
            LOCKED: LockCase(folder, loose, how="crew"),
            FILELOCK: LockCase(folder, loose, how="filelock"),
            FLOCK: LockCase(folder, loose, how="flock"),
        }
        setup: dict[str, Callable[[], object]] = {
            key: case.setup for key, case in cases.items() if not isinstance(case, LockCase)
        }
        timings = measure_side_by_side(
            {key: case.call for key, case in cases.items()}, runs=rounds, warmup=warmup, setup=setup
        )
    return _rows(timings, batches)
