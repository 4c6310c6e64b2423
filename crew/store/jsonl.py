"""Append-only JSONL files: atomic appends, tolerant reads, incremental following, upsert folds.

Writers hold the run lock (crew.store.lock) around every append; readers take no lock at all.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import signal
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Generic, TypeVar

from pydantic import BaseModel, ValidationError

from crew import faults
from crew.errors import StoreError
from crew.store.files import fsync_dir, fsync_enabled, open_fd, open_read

M = TypeVar("M", bound=BaseModel)

CORRUPT_SUFFIX = ".corrupt"
#: The longest record line, in bytes: a line over it is refused, never split (docs/design.md).
LINE_LIMIT = 1024 * 1024
_BLOCK = 256 * 1024
_FIRST_BLOCK = 4 * 1024


@dataclass(frozen=True)
class BadLine:
    """A line a reader skipped: where it is and why."""

    path: Path
    line: int
    offset: int
    size: int
    reason: str

    def describe(self) -> str:
        return f"{self.path}:{self.line}: {self.reason}"


@dataclass
class ReadResult(Generic[M]):
    """What a tolerant read found, and where the next incremental read starts."""

    records: list[M] = field(default_factory=list)
    bad: list[BadLine] = field(default_factory=list)
    #: Where each record's line starts (byte offset), record by record.
    starts: list[int] = field(default_factory=list)
    #: Byte offset just past the last complete line read.
    offset: int = 0
    #: Line number of the next line.
    line: int = 1
    #: Bytes after the last `\n`: a line still being written, or a torn write.
    tail_bytes: int = 0


def _reason(exc: ValidationError) -> str:
    error = exc.errors(include_url=False, include_input=False)[0]
    where = ".".join(str(p) for p in error["loc"])
    text = str(error["msg"]).removeprefix("Value error, ")
    return f"{where}: {text}" if where else text


def _lines(
    path: Path, offset: int, line: int, end: int | None = None, until: int | None = None
) -> Iterator[tuple[int, int, bytes]]:
    """Yield `(line number, offset, raw)` for each complete line from `offset` (to `end`, when
    given; of those that start before `until`, when given), blank ones too."""
    try:
        handle = open_read(path)
    except FileNotFoundError:
        return
    with handle:
        handle.seek(offset)
        position = offset
        number = line
        for raw in handle:
            if until is not None and position >= until:
                return
            if end is not None and position + len(raw) > end:
                return  # past the end the caller read to
            if raw[-1:] != b"\n":
                return  # unterminated: still being written, or torn by a crash
            yield number, position, raw
            position += len(raw)
            number += 1


def _parse(path: Path, model: type[M], number: int, start: int, raw: bytes) -> M | BadLine:
    try:
        return model.model_validate_json(raw)
    except ValidationError as exc:
        return BadLine(path, number, start, len(raw), _reason(exc))


def read(
    path: Path,
    model: type[M],
    *,
    offset: int = 0,
    line: int = 1,
    end: int | None = None,
    until: int | None = None,
) -> ReadResult[M]:
    """Read every complete line from `offset` (up to byte `end`, when given; those that start
    before byte `until`, when given), tolerantly.

    Never raises on file content: blank lines are skipped, invalid ones reported as BadLine, and
    an unterminated last line is left for a later read (it is being written, or was torn by a
    crash).
    """
    faults.crash_at(f"read:{path.name}")
    result: ReadResult[M] = ReadResult(offset=offset, line=line)
    for number, start, raw in _lines(path, offset, line, end, until):
        result.offset = start + len(raw)
        result.line = number + 1
        if raw.isspace():
            continue
        item = _parse(path, model, number, start, raw)
        if isinstance(item, BadLine):
            result.bad.append(item)
        else:
            result.records.append(item)
            result.starts.append(start)
    result.tail_bytes = max(0, (_size(path) if end is None else end) - result.offset)
    return result


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def fold(records: Iterable[M], key: Callable[[M], str]) -> dict[str, M]:
    """Upsert fold: the latest record per key, in first-seen order of the keys."""
    folded: dict[str, M] = {}
    for record in records:
        folded[key(record)] = record
    return folded


def last_record(path: Path, model: type[M]) -> M | None:
    """The last valid record of a file, read backwards from its end: O(1) in the file's length."""
    return next(read_backwards(path, model), None)


def tail_records(path: Path, model: type[M], count: int) -> list[M]:
    """Up to `count` last valid records, oldest first (for checking what the tail holds)."""
    found = list(itertools.islice(read_backwards(path, model), max(count, 0)))
    found.reverse()
    return found


def read_backwards(path: Path, model: type[M], *, end: int | None = None) -> Iterator[M]:
    """The valid records of a file (its first `end` bytes, when given) from the last to the
    first, reading only as far as needed."""
    for raw in _reverse_lines(path, end):
        if raw.isspace() or not raw:
            continue
        try:
            yield model.model_validate_json(raw)
        except ValidationError:
            continue


def _reverse_lines(path: Path, end: int | None = None) -> Iterator[bytes]:
    """Complete lines of a file from the last to the first, without reading it all."""
    try:
        handle = open_read(path)
    except FileNotFoundError:
        return
    with handle:
        position = handle.seek(0, os.SEEK_END)
        if end is not None:
            position = min(position, end)
        carry = b""
        seen_newline = False
        block = _FIRST_BLOCK  # most lines are short: start small, grow while nothing is found
        while position > 0:
            size = min(block, position)
            block = min(block * 4, _BLOCK)
            position -= size
            handle.seek(position)
            parts = (handle.read(size) + carry).split(b"\n")
            carry = parts[0]
            complete = parts[1:]
            if not seen_newline:
                if not complete:
                    carry = b""  # still inside an unterminated tail: not a record yet
                    continue
                complete = complete[:-1]
                seen_newline = True
            yield from reversed(complete)
        if carry and seen_newline:
            yield carry


@dataclass
class Poll(Generic[M]):
    """What a follower found since its last poll."""

    records: list[M] = field(default_factory=list)
    bad: list[BadLine] = field(default_factory=list)
    #: The file was replaced or shrank: these records start again from its beginning.
    reset: bool = False
    #: Where each record's line starts (byte offset), record by record.
    starts: list[int] = field(default_factory=list)
    #: More was appended than this poll read (`max_bytes`).
    more: bool = False


@dataclass
class _Written(Generic[M]):
    """Whole lines this process appended to a followed file, as the records they hold."""

    start: int
    end: int
    records: list[M] = field(default_factory=list)
    starts: list[int] = field(default_factory=list)


class Follower(Generic[M]):
    """Reads a JSONL file incrementally: each poll costs only the bytes appended since the last.

    If the file is replaced (a repair rewrites it under a new inode) or shrinks, the follower
    starts again from the beginning and reports `reset`, so the caller can de-duplicate by id.
    Lines the process itself appended (`wrote`) are taken as read by the next poll, not read
    back: the writer holds the records they were made from.
    """

    def __init__(self, path: Path, model: type[M], *, offset: int = 0) -> None:
        """`offset`: where to start, the start of a line (lines are then numbered from it)."""
        self.path = path
        self.model = model
        self.offset = offset
        self.line = 1
        self._inode: int | None = None
        self._written: _Written[M] | None = None

    def wrote(self, start: int, records: Sequence[M], sizes: Sequence[int]) -> None:
        """This process appended whole lines at byte `start`, of `sizes` bytes, that parse as
        `records`. If they follow what this follower has read (or was told of), the next poll
        takes them without reading them, once it has found the file the same one and at least
        that long; otherwise the poll reads them as any other lines."""
        written = self._written
        at = self.offset if written is None else written.end
        if self._inode is None or start != at:
            self._written = None  # the poll reads everything from its offset
            return
        if written is None:
            written = self._written = _Written(start, start)
        for record, size in zip(records, sizes, strict=True):
            written.records.append(record)
            written.starts.append(written.end)
            written.end += size

    def poll(self, max_bytes: int | None = None) -> Poll[M]:
        """New complete lines since the last poll (about `max_bytes` of them at most, never
        less than a line: what follows is `more`)."""
        written, self._written = self._written, None
        try:
            stat = self.path.stat()
        except FileNotFoundError:
            replaced = self._inode is not None
            self.offset, self.line, self._inode = 0, 1, None
            return Poll(reset=replaced)
        reset = self._inode is not None and (
            stat.st_ino != self._inode or stat.st_size < self.offset
        )
        if reset:
            self.offset, self.line = 0, 1
        self._inode = stat.st_ino
        known: Poll[M] = Poll(reset=reset)
        if written is not None and not reset and stat.st_size >= written.end:
            known.records, known.starts = written.records, written.starts
            self.offset, self.line = written.end, self.line + len(written.records)
        if stat.st_size == self.offset:
            return known
        until = None
        if max_bytes is not None and stat.st_size - self.offset > max_bytes:
            until = self.offset + max_bytes  # the line that crosses it is read whole
        result = read(self.path, self.model, offset=self.offset, line=self.line, until=until)
        self.offset, self.line = result.offset, result.line
        return Poll(
            known.records + result.records,
            result.bad,
            reset,
            known.starts + result.starts,
            more=until is not None and result.offset >= until,  # else: the end, or a torn tail
        )


def check_line(line: bytes, *, limit: int = LINE_LIMIT) -> None:
    """A record line must be one `\\n`-terminated line within the size limit."""
    if not line.endswith(b"\n") or b"\n" in line[:-1]:
        raise StoreError(
            "Refusing to append: a record must be exactly one newline-terminated line."
        )
    if len(line) > limit:
        raise StoreError(
            f"Refusing to append a {len(line)}-byte line: the limit is {limit} bytes.",
            hint="Send large content as a file path instead.",
        )


def append(
    path: Path, lines: Sequence[bytes], *, limit: int = LINE_LIMIT, durable: bool = True
) -> int:
    """Append whole lines with one `write()` on an O_APPEND descriptor. Caller holds the run lock.

    A torn tail left by a crash is first moved to `<file>.corrupt`, so a new record is never glued
    to half of an old one. A short or failed write is rolled back and raised as StoreError: a
    reader never sees half a record. Returns the offset where the lines begin. `durable`: fsynced
    (when the CREW_FSYNC policy allows); a file derived from the event log is not (files.py).
    """
    durable = durable and fsync_enabled()
    for line in lines:
        check_line(line, limit=limit)
    data = b"".join(lines)
    created = False
    try:
        fd = open_fd(path, os.O_RDWR | os.O_APPEND)
    except FileNotFoundError:
        fd = open_fd(path, os.O_RDWR | os.O_APPEND | os.O_CREAT)
        created = True
    try:
        start = _cut_torn_tail(fd, path)
        if faults.armed(f"tear:{path.name}"):  # a crash in the middle of the write
            os.write(fd, data[: max(1, len(data) // 2)])
            os.kill(os.getpid(), signal.SIGKILL)
        try:
            faults.disk_error_at(path.name)
            written = os.write(fd, data)
        except OSError as exc:
            _roll_back(fd, start)
            raise _write_error(path, exc) from None
        if written != len(data):
            _roll_back(fd, start)
            raise StoreError(
                f"Could not append to {path}: only {written} of {len(data)} bytes fit "
                "(is the disk full?). Nothing was recorded.",
                errno=errno.ENOSPC,
            )
        if durable:
            try:
                os.fsync(fd)
            except OSError as exc:  # what the disk did keep is unknown: take the lines back
                _roll_back(fd, start)
                raise _write_error(path, exc) from None
    finally:
        os.close(fd)
    if created and durable:
        fsync_dir(path.parent)
    faults.crash_at(f"append:{path.name}")
    return start


def _write_error(path: Path, exc: OSError) -> StoreError:
    if exc.errno in {errno.ENOSPC, errno.EDQUOT}:
        return StoreError(
            f"Could not append to {path}: the disk is full. Nothing was recorded.",
            errno=exc.errno,
        )
    return StoreError(
        f"Could not append to {path}: {exc.strerror}. Nothing was recorded.", errno=exc.errno
    )


def _roll_back(fd: int, size: int) -> None:
    # If even this fails, the unterminated remains are a torn tail: readers skip it, and the next
    # append moves it aside.
    with contextlib.suppress(OSError):
        os.ftruncate(fd, size)


def _cut_torn_tail(fd: int, path: Path) -> int:
    """If the file does not end in `\\n`, move the bytes after the last `\\n` aside. -> new size."""
    size = os.fstat(fd).st_size
    if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
        return size
    cut = size
    while cut > 0:
        begin = max(0, cut - _BLOCK)
        block = os.pread(fd, cut - begin, begin)
        newline = block.rfind(b"\n")
        if newline >= 0:
            cut = begin + newline + 1
            break
        cut = begin
    torn = os.pread(fd, size - cut, cut)
    set_aside(path, [torn])
    os.ftruncate(fd, cut)
    return cut


def set_aside_last(path: Path, count: int) -> int:
    """Move the last `count` complete lines, and any torn tail after them, to `<file>.corrupt`
    (one piece), truncating the file where they began. Caller holds the run lock. -> bytes moved."""
    fd = open_fd(path, os.O_RDWR)
    try:
        size = os.fstat(fd).st_size
        cut = _start_of_last_lines(fd, size, count)
        if cut == size:
            return 0
        set_aside(path, [os.pread(fd, size - cut, cut)])
        os.ftruncate(fd, cut)
        if fsync_enabled():
            os.fsync(fd)
        return size - cut
    finally:
        os.close(fd)


def _start_of_last_lines(fd: int, size: int, count: int) -> int:
    """The offset where the last `count` complete lines (and a torn tail after them) begin."""
    ends = 0  # newlines passed, counting from the end
    wanted = count + 1  # the one that ends the line before the first line to move
    position = size
    while position > 0:
        begin = max(0, position - _BLOCK)
        block = os.pread(fd, position - begin, begin)
        index = len(block)
        while (index := block.rfind(b"\n", 0, index)) >= 0:
            ends += 1
            if ends == wanted:
                return begin + index + 1
        position = begin
    return 0


def set_aside(path: Path, pieces: Sequence[bytes]) -> Path:
    """Append damaged bytes to `<file>.corrupt`, one piece per line: nothing is ever deleted."""
    target = path.with_name(path.name + CORRUPT_SUFFIX)
    data = b"".join(p if p.endswith(b"\n") else p + b"\n" for p in pieces)
    fd = open_fd(target, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, data)
        if fsync_enabled():
            os.fsync(fd)
    finally:
        os.close(fd)
    return target


@dataclass
class Cleanup:
    """What `rewrite_clean` set aside."""

    bad: list[BadLine] = field(default_factory=list)
    torn_bytes: int = 0
    dropped: int = 0

    @property
    def changed(self) -> bool:
        return bool(self.bad or self.torn_bytes or self.dropped)


def rewrite_clean(path: Path, model: type[M], drop: Callable[[M], bool] | None = None) -> Cleanup:
    """Move bad lines, a torn tail and the records `drop` picks to `<file>.corrupt`; atomically
    rewrite the rest (a new inode, so followers notice and re-read it). Locked."""
    from crew.store.snapshot import write_atomic

    cleanup = Cleanup()
    kept: list[bytes] = []
    aside: list[bytes] = []
    end = 0
    for number, start, raw in _lines(path, 0, 1):
        end = start + len(raw)
        if raw.isspace():
            continue
        item = _parse(path, model, number, start, raw)
        if isinstance(item, BadLine):
            cleanup.bad.append(item)
            aside.append(raw)
        elif drop is not None and drop(item):
            cleanup.dropped += 1
            aside.append(raw)
        else:
            kept.append(raw)
    size = _size(path)
    if size > end:
        with open_read(path) as handle:
            handle.seek(end)
            torn = handle.read()
        cleanup.torn_bytes = len(torn)
        aside.append(torn)
    if cleanup.changed:
        set_aside(path, aside)
        write_atomic(path, b"".join(kept))
    return cleanup
