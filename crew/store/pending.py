"""The pending messages of a mailbox file, kept in `.runtime/` so a one-shot command reads only
what was appended since (flat in the number of messages ever sent).

A message is pending while its latest line says so; `crew status` counts them per task and a
send counts those of its class (backpressure). Folding a whole mailbox file to learn that grows
with every message ever sent (6.4 s at 100,000 messages). The index records the pending ids,
each with its task and kind, and the byte offset of the file it covers; a reader folds only the
lines after that offset into it.

`<box>.pending.json` in `.runtime/` holds one JSON document and, on its second line, the CRC-32 of
the first. It is a cache of the mailbox file, which stays the truth: it is rebuilt from the
start when it is missing, torn, from another format, or when the file it covers is no longer
the one it read (another inode, shorter than the offset, or different bytes just before it).
It is written by atomic replace, without the run lock (two writers each write a true index,
of a prefix of the same file) and without fsync (a lost index is rebuilt). Only the standard
library: the fast path (crew/fast) reads it before anything else is imported.
"""

from __future__ import annotations

import contextlib
import json
import os
import zlib

VERSION = 1
PENDING = "pending"
#: Bytes of lines folded since the index was last written before a reader writes it again: a
#: write (a new temp file and a rename, ~350 µs on ext4) against folding the unsaved lines again
#: at every command (~4 µs a line, ~330 bytes); about a dozen lines is where the two meet.
SAVE_AFTER = 4 * 1024
#: How many bytes just before the covered offset must be unchanged for the index to hold.
_GUARD = 256


class BadLine(ValueError):
    """A line that is not a mailbox record: the caller's to report (the index is left as is)."""


class PendingIndex:
    """The pending messages of one mailbox file: id -> (task id, kind)."""

    def __init__(self, mailbox: str, index: str) -> None:
        self.mailbox = mailbox
        self.index = index
        self.pending: dict[str, tuple[str, str]] = {}
        self.size = 0
        self._inode = 0
        self._guard = 0
        self._saved = -1

    def current(self, *, save: bool = True) -> dict[str, tuple[str, str]]:
        """The pending messages now: the saved index, advanced over what was appended since
        (and, with `save`, saved again when that was a lot). BadLine if a new line is not a
        record."""
        try:
            fd = os.open(self.mailbox, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            self.pending, self.size = {}, 0
            return self.pending
        try:
            info = os.fstat(fd)
            if self._saved < 0:
                self._load()
            if not self._covers(fd, info.st_ino):
                self.pending, self.size, self._saved = {}, 0, 0
            self._inode = info.st_ino
            self._advance(fd, info.st_size)
        finally:
            os.close(fd)
        if save:
            self.save_if_behind()
        return self.pending

    def save_if_behind(self) -> None:
        """Save the index if the saved one is missing or well behind the file."""
        if self.size - self._saved >= SAVE_AFTER or (self._saved == 0 and self.size):
            self.save()

    def counts(self, task_id: str) -> dict[str, int]:
        """How many messages of each kind are pending for a task."""
        found: dict[str, int] = {}
        for task, kind in self.pending.values():
            if task == task_id:
                found[kind] = found.get(kind, 0) + 1
        return found

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
        for line in data[:whole].splitlines():
            self._fold(line)
        self.size += whole
        start = max(0, self.size - _GUARD)
        self._guard = zlib.crc32(os.pread(fd, self.size - start, start))

    def _fold(self, line: bytes) -> None:
        if not line.strip():
            return
        try:
            record = json.loads(line)
            message_id, status = record["id"], record["status"]
            task_id, kind = record["taskId"], record["kind"]
        except (ValueError, KeyError, TypeError):
            raise BadLine(line[:80]) from None
        if not all(isinstance(v, str) for v in (message_id, status, task_id, kind)):
            raise BadLine(line[:80])
        if status == PENDING:
            self.pending[message_id] = (task_id, kind)
        else:
            self.pending.pop(message_id, None)

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
        except (OSError, ValueError, KeyError, TypeError, IndexError):
            return
        self.pending, self.size, self._inode, self._guard = pending, size, inode, guard
        self._saved = size

    def save(self) -> None:
        """Write the index (best effort: it is a cache)."""
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
        # Named as crew/store/snapshot.py names temp files, so recovery removes one left behind.
        temp = f"{folder}/.{name}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
        try:
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
            try:
                os.write(fd, document + b"\n%08x\n" % zlib.crc32(document))
            finally:
                os.close(fd)
            os.replace(temp, self.index)
        except OSError:  # a cache: a read-only or full disk only means the next reader reads more
            with contextlib.suppress(OSError):
                os.unlink(temp)
            return
        self._saved = self.size
