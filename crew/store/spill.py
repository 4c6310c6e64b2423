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
file gives is held until `flush` (the fold flushes after each read), rounds until 512 are. A
batch SQLite cannot write (its disk full) is held, and written with the next one.
"""

from __future__ import annotations

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
        self._db = _connect(_SCHEMA)
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
        self._db.execute("DELETE FROM message WHERE id = ?", (message_id,))

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
        if _batch(self._db, (_PUT, rows), (_NAME, names)):
            self._rows, self._names, self._guessed = {}, {}, set()

    def clear(self) -> None:
        """Forget everything (the file is read again from its start)."""
        self._rows, self._names, self._guessed = {}, {}, set()
        with self._db:
            self._db.execute("BEGIN")
            self._db.execute("DELETE FROM message")
            self._db.execute("DELETE FROM name")


class Rounds:
    """A number for each message, by id, on disk: the round in which each message to a worker
    settled, the leader's guard against delivering one twice (crew/leader/schedule.py)."""

    #: How many numbers are held before they are written.
    BATCH = 512

    def __init__(self) -> None:
        self._db = _connect(
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
        if len(held) >= self.BATCH and _batch(self._db, (_RAISE, list(held.items()))):
            self._held = {}


def _batch(db: sqlite3.Connection, *statements: tuple[str, list[tuple[Any, ...]]]) -> bool:
    """Run each statement over its rows, in one transaction. False if SQLite could not (its
    disk full, say): then nothing was written, and the caller holds the rows for a later try."""
    try:
        with db:
            db.execute("BEGIN")
            for statement, rows in statements:
                db.executemany(statement, rows)
    except db.Error:  # the module's, as the connection names it
        return False
    return True


def _connect(schema: str) -> sqlite3.Connection:
    """A private temporary database with `schema` (see the module's docstring)."""
    import sqlite3  # a leader's alone: not every command's start-up (~3 ms)

    db = sqlite3.connect("", isolation_level=None, check_same_thread=False)
    db.executescript(_PRAGMAS + schema)
    return db


def _packed(starts: list[int]) -> bytes:
    return array("q", starts).tobytes()


def _unpacked(blob: bytes) -> list[int]:
    starts = array("q")
    starts.frombytes(blob)
    return starts.tolist()
