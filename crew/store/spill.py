"""What a lean fold (the leader's, crew/store/fold.py) knows of the messages it does not hold in
memory — where each was first seen, its task, where its lines start — and the names the file's
messages carry (idempotency keys, the questions workers asked); and the round in which each
message to a worker settled (the leader's delivery guard). Kept on disk so that the leader's
memory does not grow with every message ever sent.

The place is SQLite's private temporary database: a file in SQLite's temporary folder that it
unlinks as soon as it has opened it, so nothing is left behind, even by a leader killed, and
that it pages through a small cache. It is an index of the mailbox file, which stays the truth:
each leader builds it again as it reads the file. Nothing in it is durable or shared: no
journal, no sync, one connection.

Rows are written in batches, and every lookup sees those not written yet: what a read of the
file gives is held until `flush` (the fold flushes after each read), rounds until 512 are. When
SQLite cannot write to its folder (the disk full), the database moves into memory, whole, and
stays there: the leader's memory grows with the messages again, but it answers every lookup.
Where the failed write left SQLite unable to read the database back (a transaction cut short
while its cache spilled to the disk), what it held is gone: `SpillLost`, which names the
folder to free (the leader stops, and `crew resume` continues the run; holding the rows to try
again instead grew, at 100,000 messages a file, into a leader too busy retrying to beat).
"""

from __future__ import annotations

import os
from array import array
from dataclasses import dataclass
from enum import IntEnum
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import sqlite3

#: Pages of the database SQLite keeps in memory (a negative cache_size is KiB).
_CACHE_KIB = 1024

#: What nothing else reads needs no sync, and its journal in memory (a batch that fails, on a
#: full disk, is rolled back whole).
_PRAGMAS = f"""
PRAGMA journal_mode = MEMORY;
PRAGMA synchronous = OFF;
PRAGMA cache_size = -{_CACHE_KIB};
"""
_SCHEMA = """
CREATE TABLE message (
    id TEXT PRIMARY KEY, place INTEGER NOT NULL, task TEXT NOT NULL, starts BLOB NOT NULL
) WITHOUT ROWID;
CREATE INDEX message_task ON message (task, place);
CREATE TABLE name (kind INTEGER, name TEXT, id TEXT NOT NULL, PRIMARY KEY (kind, name))
    WITHOUT ROWID;
"""

#: A message already here keeps the place it was first seen at.
_PUT = (
    "INSERT INTO message VALUES (?, ?, ?, ?) "
    "ON CONFLICT (id) DO UPDATE SET task = excluded.task, starts = excluded.starts"
)
#: A name names the first message that carried it.
_NAME = "INSERT OR IGNORE INTO name VALUES (?, ?, ?)"
#: A round only grows.
_RAISE = (
    "INSERT INTO round VALUES (?, ?) "
    "ON CONFLICT (id) DO UPDATE SET round = max(round, excluded.round)"
)


class Name(IntEnum):
    """The kinds of names a message may carry that a fold looks messages up by."""

    KEY = 1
    CONTACT = 2


@dataclass(frozen=True, slots=True)
class Spilled:
    """A message as the spill knows it: its first-seen place, its task, where its lines start
    (its last whole line, then the changes after it)."""

    place: int
    task_id: str
    starts: list[int]


class Spill:
    """The messages a lean fold let go of, and the names of the file's messages."""

    def __init__(self) -> None:
        self._db = _Database(_SCHEMA)
        #: Written at the next flush: messages by id, names in the order they came.
        self._rows: dict[str, Spilled] = {}
        self._names: dict[tuple[Name, str], str] = {}
        #: Of `_rows`, those whose place is the start of a line that may not be the first.
        self._guessed: set[str] = set()

    def put(self, message_id: str, spilled: Spilled, *, first: bool = False) -> None:
        """Keep a message here. `first`: its place is where this line starts, unless it was seen
        before (then it keeps the place it was first seen at: found without a lookup, at the
        flush, for the message never seen that such a line most often is)."""
        was = self._rows.get(message_id)
        if was is not None:  # a guess stays a guess: the flush keeps an older place
            spilled = Spilled(was.place, spilled.task_id, spilled.starts)
        elif first:
            self._guessed.add(message_id)
        self._rows[message_id] = spilled

    def get(self, message_id: str) -> Spilled | None:
        found = self._rows.get(message_id)
        if found is not None and message_id not in self._guessed:
            return found
        row = self._db.execute(
            "SELECT place, task, starts FROM message WHERE id = ?", (message_id,)
        ).fetchone()
        if found is not None:  # its place, if it was here before
            return found if row is None else Spilled(row[0], found.task_id, found.starts)
        return None if row is None else Spilled(row[0], row[1], _unpacked(row[2]))

    def drop(self, message_id: str) -> None:
        """Forget a message that is here (the fold holds it again)."""
        self._rows.pop(message_id, None)
        self._guessed.discard(message_id)
        self._db.write(("DELETE FROM message WHERE id = ?", [(message_id,)]))

    def name(self, kind: Name, name: str, message_id: str) -> None:
        """`message_id` carries `name` (only the first message to carry it is kept)."""
        self._names.setdefault((kind, name), message_id)

    def named(self, kind: Name, name: str) -> str | None:
        """The first message that carried `name`."""
        row = self._db.execute(
            "SELECT id FROM name WHERE kind = ? AND name = ?", (kind, name)
        ).fetchone()
        return row[0] if row is not None else self._names.get((kind, name))

    def of_task(self, task_id: str) -> list[tuple[int, str]]:
        """The task's messages here, as (place, id), in first-seen order."""
        self.flush()
        query = "SELECT place, id FROM message WHERE task = ? ORDER BY place"
        return self._db.execute(query, (task_id,)).fetchall()

    def places(self) -> list[tuple[int, str]]:
        """Every message here, as (place, id), in first-seen order."""
        self.flush()
        return self._db.execute("SELECT place, id FROM message ORDER BY place").fetchall()

    def __len__(self) -> int:
        self.flush()
        count: int = self._db.execute("SELECT count(*) FROM message").fetchone()[0]
        return count

    def flush(self) -> None:
        """Write what was put and named since the last flush."""
        if not (self._rows or self._names):
            return
        rows = [(i, s.place, s.task_id, _packed(s.starts)) for i, s in self._rows.items()]
        names = [(kind, name, i) for (kind, name), i in self._names.items()]
        self._db.write((_PUT, rows), (_NAME, names))
        self._rows, self._names, self._guessed = {}, {}, set()

    def clear(self) -> None:
        """Forget everything (the file is read again from its start)."""
        self._rows, self._names, self._guessed = {}, {}, set()
        self._db.write(("DELETE FROM message", [()]), ("DELETE FROM name", [()]))


class Rounds:
    """A number for each message, by id, on disk: the round in which each message to a worker
    settled, the leader's guard against delivering one twice (crew/leader/schedule.py)."""

    #: How many numbers are held before they are written.
    BATCH = 512

    def __init__(self) -> None:
        self._db = _Database(
            "CREATE TABLE round (id TEXT PRIMARY KEY, round INTEGER NOT NULL) WITHOUT ROWID;"
        )
        self._held: dict[str, int] = {}

    def get(self, message_id: str, default: int) -> int:
        row = self._db.execute("SELECT round FROM round WHERE id = ?", (message_id,)).fetchone()
        return max(self._held.get(message_id, default), default if row is None else int(row[0]))

    def raise_to(self, message_id: str, value: int) -> None:
        """The message's number is at least `value` (a lower one is never written over a
        higher one: no lookup needed)."""
        held = self._held
        if value > held.get(message_id, value - 1):
            held[message_id] = value
        if len(held) >= self.BATCH:
            self._db.write((_RAISE, list(held.items())))
            self._held = {}


class _Database:
    """A private temporary database (see the module's docstring), in memory once SQLite could
    not write to its folder: `in_memory`, and why (`error`)."""

    def __init__(self, schema: str) -> None:
        import sqlite3  # a leader's alone: not every command's start-up (~3 ms)

        self.error: str | None = None
        try:
            self.connection = _connect("", schema)
        except sqlite3.OperationalError as error:  # no room for even the tables
            self.error = str(error)
            self.connection = _connect(":memory:", schema)

    @property
    def in_memory(self) -> bool:
        return self.error is not None

    def execute(self, sql: str, parameters: tuple[Any, ...] = ()) -> sqlite3.Cursor:
        """A query (which may need room on the disk too: a sort too big for the cache)."""
        import sqlite3

        try:
            return self.connection.execute(sql, parameters)
        except sqlite3.OperationalError as error:
            self._move(error)
            return self.connection.execute(sql, parameters)

    def write(self, *statements: tuple[str, list[tuple[Any, ...]]]) -> None:
        """Run each statement over its rows, in one transaction."""
        import sqlite3

        try:
            self._write(statements)
        except sqlite3.OperationalError as error:
            self._move(error)
            self._write(statements)

    def _write(self, statements: tuple[tuple[str, list[tuple[Any, ...]]], ...]) -> None:
        with self.connection:
            self.connection.execute("BEGIN")
            for statement, rows in statements:
                self.connection.executemany(statement, rows)

    def _move(self, error: Exception) -> None:
        """Into memory, whole (the failed transaction rolled back), or `error` again if the
        database is in memory already."""
        import sqlite3

        if self.in_memory:
            raise error
        self.error = str(error)
        moved = _connect(":memory:", "")
        try:
            self.connection.backup(moved)  # a read of what is on the disk and in the cache
        except sqlite3.Error:
            moved.close()
            raise SpillLost(error) from error
        self.connection.close()
        self.connection = moved


class SpillLost(RuntimeError):
    """SQLite could write no more to its temporary folder, and cannot read back what it had
    written there."""

    def __init__(self, error: Exception) -> None:
        super().__init__(
            f"SQLite's temporary folder ({temporary_folder()}) has no room ({error}): the "
            "leader's index of the messages it let go of is lost. Free space there, or set "
            "SQLITE_TMPDIR to a folder with room, then `crew resume` the run."
        )


def temporary_folder() -> str:
    """Where SQLite puts its temporary files (its unix VFS: the first of these it may use)."""
    for name in ("SQLITE_TMPDIR", "TMPDIR"):
        folder = os.environ.get(name)
        if folder and os.access(folder, os.W_OK | os.X_OK):
            return folder
    return next((f for f in ("/var/tmp", "/usr/tmp", "/tmp") if os.access(f, os.W_OK)), ".")


def _connect(name: str, schema: str) -> sqlite3.Connection:
    """A private database with `schema`: temporary (`""`) or in memory (`":memory:"`)."""
    import sqlite3

    db = sqlite3.connect(name, isolation_level=None, check_same_thread=False)
    db.executescript(_PRAGMAS + schema)
    return db


def _packed(starts: list[int]) -> bytes:
    return array("q", starts).tobytes()


def _unpacked(blob: bytes) -> list[int]:
    starts = array("q")
    starts.frombytes(blob)
    return starts.tolist()
