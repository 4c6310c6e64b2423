"""Indexes of a mailbox file, kept in `.runtime/` so a one-shot command reads only what was
appended since (flat in the number of messages ever sent).

A message is pending while its latest line says so; `crew status` counts them per task and a
send counts those of its class (backpressure). A send with an idempotency key must know whether
a message already carried the key. Folding a whole mailbox file to learn either grows with every
message ever sent (6.4 s at 100,000 messages; 3.2 s for a keyed follow-up). Each index records
what it knows — the pending ids, each with its task and kind (`PendingIndex`); the keys messages
carried, each with the first message that carried it (`KeyIndex`) — and the byte offset of the
file it covers; a reader folds only the lines after that offset into it.

Each is a cache of the mailbox file, which stays the truth: it is rebuilt from the start when it
is missing, damaged, from another format, or when the file it covers is no longer the one it
read (another inode, shorter than the offset, or different bytes just before it); and written
without fsync (a lost index is rebuilt). Only the standard library: the fast path (crew/fast)
reads them before anything else is imported.

- `<box>.pending.json` holds one JSON document and, on its second line, the CRC-32 of the
  first: what `crew status` reads whole, small (the pending messages alone). It is written by
  atomic replace, without the run lock: two writers each write a true index, of a prefix of
  the same file.
- `<box>.keys.sqlite` is an SQLite database (the standard library's), since keys pile up with
  every keyed message ever sent and a lookup must not read them all: a keyed send looks its key
  up and adds the new ones in one transaction, under the run lock, in WAL mode (a transaction
  cut short, by a kill or a power cut, is rolled back whole; none is synced).
"""

from __future__ import annotations

import contextlib
import json
import os
import zlib

TYPE_CHECKING = False  # `typing` costs a fast command a few milliseconds
if TYPE_CHECKING:
    import sqlite3
    from typing import Any

VERSION = 1
PENDING = "pending"
#: Where a message's data holds its idempotency key (crew/registry.py MessageData).
IDEMPOTENCY_KEY = "idempotencyKey"
#: Bytes of lines folded since the index was last written before a reader writes it again: a
#: write (a new temp file and a rename, ~350 µs on ext4) against folding the unsaved lines again
#: at every command (~4 µs a line, ~330 bytes); about a dozen lines is where the two meet.
SAVE_AFTER = 4 * 1024
#: How many bytes just before the covered offset must be unchanged for the index to hold.
_GUARD = 256


class BadLine(ValueError):
    """A line that is not a mailbox record: the caller's to report (the index is left as is)."""


class Unreadable(ValueError):
    """An index that cannot be read now: the caller's to do without."""


class BoxIndex:
    """What the lines of one mailbox file say, up to the byte offset `size` it covers: each
    kind of index folds a line its own way (`_fold`), and keeps what it folded its own way."""

    def __init__(self, mailbox: str, index: str) -> None:
        self.mailbox = mailbox
        self.index = index
        self.size = 0
        self._inode = 0
        self._guard = 0
        self._saved = -1

    def advance(self, *, save: bool = True) -> None:
        """Bring the index up to the file: the saved one, advanced over what was appended since
        (and, with `save`, saved again when that was a lot). BadLine if a new line is not a
        record."""
        try:
            fd = os.open(self.mailbox, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            self._forget()
            return
        try:
            info = os.fstat(fd)
            if self._saved < 0:
                self._load()
            if not self._covers(fd, info.st_ino):
                self._forget()
            self._inode = info.st_ino
            self._advance(fd, info.st_size)
        finally:
            os.close(fd)
        if save:
            self.save_if_behind()

    def save_if_behind(self) -> None:
        """Save the index if the saved one is missing or well behind the file."""
        if self.size - self._saved >= SAVE_AFTER or (self._saved == 0 and self.size):
            self.save()

    def save(self) -> None:
        """Write the index (best effort: it is a cache)."""
        raise NotImplementedError

    def _load(self) -> None:
        """Read the saved index, if there is one that holds (`_saved`: the offset it covers)."""
        raise NotImplementedError

    def _forget(self) -> None:
        """The file is not the one the index read: start again from its first byte."""
        self.size, self._saved = 0, 0

    def _fold(self, line: bytes, start: int) -> None:
        """Take in a line, which begins at byte `start` of the file."""
        raise NotImplementedError

    def _covers(self, fd: int, inode: int) -> bool:
        if self.size == 0:
            return True
        if inode != self._inode or os.fstat(fd).st_size < self.size:
            return False
        start = max(0, self.size - _GUARD)
        return zlib.crc32(os.pread(fd, self.size - start, start)) == self._guard

    def _advance(self, fd: int, end: int) -> None:
        if end <= self.size:
            return
        data = os.pread(fd, end - self.size, self.size)
        whole = data.rfind(b"\n") + 1
        at = 0
        while at < whole:
            stop = data.index(b"\n", at) + 1
            self._fold(data[at:stop], self.size + at)
            at = stop
        self.size += whole
        start = max(0, self.size - _GUARD)
        self._guard = zlib.crc32(os.pread(fd, self.size - start, start))

    @staticmethod
    def _record(line: bytes) -> dict[str, Any] | None:
        """The line's record (None for a blank line); BadLine if it is not a mailbox line."""
        if not line.strip():
            return None
        try:
            record = json.loads(line)
            fields = (record["id"], record["status"], record["taskId"], record["kind"])
        except (ValueError, KeyError, TypeError):
            raise BadLine(line[:80]) from None
        if not all(isinstance(v, str) for v in fields):
            raise BadLine(line[:80])
        return record  # type: ignore[no-any-return]


class PendingIndex(BoxIndex):
    """The pending messages of one mailbox file: id -> (task id, kind)."""

    def __init__(self, mailbox: str, index: str) -> None:
        super().__init__(mailbox, index)
        self.pending: dict[str, tuple[str, str]] = {}

    def current(self, *, save: bool = True) -> dict[str, tuple[str, str]]:
        """The pending messages now (`advance`)."""
        self.advance(save=save)
        return self.pending

    def counts(self, task_id: str) -> dict[str, int]:
        """How many messages of each kind are pending for a task."""
        found: dict[str, int] = {}
        for task, kind in self.pending.values():
            if task == task_id:
                found[kind] = found.get(kind, 0) + 1
        return found

    def _forget(self) -> None:
        super()._forget()
        self.pending = {}

    def _fold(self, line: bytes, start: int) -> None:
        record = self._record(line)
        if record is None:
            return
        if record["status"] == PENDING:
            self.pending[record["id"]] = (record["taskId"], record["kind"])
        else:
            self.pending.pop(record["id"], None)

    def _load(self) -> None:
        self._saved = 0
        try:
            with open(self.index, "rb") as handle:
                document, _, check = handle.read().partition(b"\n")
            if check.strip() != b"%08x" % zlib.crc32(document):
                return
            saved = json.loads(document)
            if saved["v"] != VERSION:
                return
            pending = {k: (v[0], v[1]) for k, v in saved["pending"].items()}
            size, inode, guard = saved["size"], saved["inode"], saved["guard"]
        except (OSError, ValueError, KeyError, TypeError, IndexError, AttributeError):
            return
        self.pending, self.size, self._inode, self._guard = pending, size, inode, guard
        self._saved = size

    def save(self) -> None:
        document = json.dumps(
            {
                "v": VERSION,
                "size": self.size,
                "inode": self._inode,
                "guard": self._guard,
                "pending": self.pending,
            },
            separators=(",", ":"),
        ).encode()
        folder, name = os.path.split(self.index)
        # Named as crew/store/snapshot.py names temp files, so `crew doctor` knows one left behind.
        temp = f"{folder}/.{name}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
        _sweep(folder, f".{name}.")
        try:
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
            try:
                os.write(fd, document + b"\n%08x\n" % zlib.crc32(document))
            finally:
                os.close(fd)
            os.replace(temp, self.index)
        except BaseException as error:  # a cache: a read-only or full disk, or Ctrl-C
            with contextlib.suppress(OSError):
                os.unlink(temp)
            if not isinstance(error, OSError):
                raise
            return  # only means the next reader reads more
        self._saved = self.size


def _sweep(folder: str, prefix: str) -> None:
    """Remove the temp files of an index's earlier saves whose writer was killed (SIGKILL,
    between the write and the rename): it is saved after the transaction's marker, so no
    recovery comes after it to remove them. A writer alive is saving now: its file is left."""
    try:
        names = [n for n in os.listdir(folder) if n.startswith(prefix) and n.endswith(".tmp")]
    except OSError:
        return
    for name in names:
        pid = name[len(prefix) :].partition(".")[0]
        if pid.isascii() and pid.isdigit() and int(pid) != os.getpid() and _gone(int(pid)):
            with contextlib.suppress(OSError):
                os.unlink(f"{folder}/{name}")


def _gone(pid: int) -> bool:
    """Whether no process has the pid (a zombie, or another user's, counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        pass
    return False


#: A transaction cut short is rolled back whole, by a kill or a power cut (WAL is consistent at
#: synchronous=NORMAL), and a commit syncs nothing.
_KEY_PRAGMAS = """
PRAGMA journal_mode = WAL;
PRAGMA synchronous = NORMAL;
"""
#: The key index's tables: what it covers (one row), and each key with its first message and
#: where the line that carried it begins.
_KEY_SCHEMA = """
CREATE TABLE IF NOT EXISTS covered (
    one INTEGER PRIMARY KEY CHECK (one = 1), version INTEGER, size INTEGER, inode INTEGER,
    guard INTEGER
);
CREATE TABLE IF NOT EXISTS key (
    name TEXT PRIMARY KEY, id TEXT NOT NULL, at INTEGER NOT NULL
) WITHOUT ROWID;
"""


class KeyIndex(BoxIndex):
    """The idempotency keys the messages of one mailbox file carried, each with the id of the
    first message that carried it (crew/store/fold.py names messages so). A line of any kind
    that carries a key counts, a change too: the index may name a key the models would not
    (a sender falls back to the full command, which decides), never miss one.

    Used under the run lock (no other writer changes the file meanwhile, nor the index): the
    keys saved in the database, and those of the lines after it, folded into `new`."""

    def __init__(self, mailbox: str, index: str) -> None:
        super().__init__(mailbox, index)
        self.new: dict[str, tuple[str, int]] = {}
        self._db: sqlite3.Connection | None = None
        self._stale = False  # the saved keys are of a file that is no longer there

    def carried(self, key: str) -> tuple[str, int] | None:
        """The message that first carried `key`, and where the line that carried it begins
        (None if none did), once `advance`d. Unreadable if the database cannot say."""
        import sqlite3

        if self._db is not None and not self._stale:
            try:
                row = self._db.execute("SELECT id, at FROM key WHERE name = ?", (key,)).fetchone()
            except sqlite3.Error as error:
                raise Unreadable(str(error)) from None
            if row is not None:
                return str(row[0]), int(row[1])
        return self.new.get(key)

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    def _forget(self) -> None:
        super()._forget()
        self.new, self._stale = {}, True

    def _fold(self, line: bytes, start: int) -> None:
        record = self._record(line)
        data = None if record is None else record.get("data")
        if data is None or record is None:
            return
        if not isinstance(data, dict):
            raise BadLine(line[:80])
        key = data.get(IDEMPOTENCY_KEY)
        if key is not None:
            if not isinstance(key, str):
                raise BadLine(line[:80])
            self.new.setdefault(key, (record["id"], start))  # one the database holds keeps its own

    def _load(self) -> None:
        """The saved keys, if there is a database (a lookup creates none: a command that falls
        back writes nothing)."""
        self._saved = 0
        if not os.path.exists(self.index):
            return
        row = self._open()
        if row is None or row[0] != VERSION:
            self._stale = self._db is not None
            return
        self.size, self._inode, self._guard = row[1], row[2], row[3]
        self._saved = self.size

    def _open(self) -> tuple[int, int, int, int] | None:
        """Open (or make) the database: what its `covered` row says, None if it has none."""
        import sqlite3

        for _ in range(2):
            try:
                self._db = sqlite3.connect(self.index, timeout=0, isolation_level=None)
                self._db.executescript(_KEY_PRAGMAS + _KEY_SCHEMA)
                row = self._db.execute("SELECT version, size, inode, guard FROM covered").fetchone()
            except sqlite3.OperationalError:  # busy, or a disk it cannot write: no index now
                self.close()
                return None
            except sqlite3.DatabaseError:  # not a database, or not this one: begin another
                self.close()
                for suffix in ("", "-wal", "-shm"):
                    with contextlib.suppress(OSError):
                        os.unlink(self.index + suffix)
            else:
                return None if row is None else (row[0], row[1], row[2], row[3])
        return None

    def save(self) -> None:
        import sqlite3

        if self._db is None:
            self._open()
            self._stale = True  # whatever a database made now holds, these keys replace it
        if self._db is None:
            return  # no database to keep it in: the next reader folds these lines again
        db = self._db
        try:
            db.execute("BEGIN IMMEDIATE")
            try:
                if self._stale:
                    db.execute("DELETE FROM key")
                db.executemany(
                    "INSERT OR IGNORE INTO key VALUES (?, ?, ?)",
                    [(key, id_, at) for key, (id_, at) in self.new.items()],
                )
                db.execute(
                    "INSERT OR REPLACE INTO covered VALUES (1, ?, ?, ?, ?)",
                    (VERSION, self.size, self._inode, self._guard),
                )
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
        except sqlite3.Error:  # a cache: a full or read-only disk means the next reader reads more
            return
        self.new, self._stale, self._saved = {}, False, self.size
