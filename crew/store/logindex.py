"""When each part of a worker's log was received: the sidecar `logs/<taskId>.idx`, and a reader
of a log as lines with their receive times.

`logs/<taskId>.log` holds the output bytes exactly as received and nothing else, so the times
live beside it. The leader appends one record per write to the log: `<end> <time>\\n` — the log's
size after the write, and when the leader read the newest of those bytes (microseconds since the
epoch, UTC). A line's time is that of the first record whose end reaches the line's end: the
bytes up to `end` had all been received by `time`.

Both files are written by the one leader of the run, the log first. A record that is missing (a
run from before the index, a leader killed between the two writes, a full disk) makes no line
wrong, only later: bytes past the last record get the log's modification time, which no byte
of it is newer than; a leader starting an attempt writes such a record first (`anchor`).
"""

from __future__ import annotations

import contextlib
import heapq
import os
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from operator import attrgetter
from pathlib import Path
from time import time_ns

from crew.errors import Refused
from crew.store.files import open_fd, open_read

#: The sidecar of `<taskId>.log`.
INDEX_SUFFIX = ".idx"
#: A line longer than this is shown in pieces (a worker that never prints a newline).
MAX_LINE = 1024 * 1024
_CHUNK = 1024 * 1024


def index_path(log: Path) -> Path:
    """The index beside a log: `logs/<taskId>.idx`."""
    return log.with_suffix(INDEX_SUFFIX)


def open_index(log: Path, log_fd: int) -> tuple[int, int]:
    """For a leader about to append to a log: the index opened for appending (-1 when it cannot
    be: the log goes on without it) and the log's size. Records what the log holds already, by
    its modification time: a leader that crashed may not have indexed its last write."""
    info = os.fstat(log_fd)
    try:
        index_fd = open_fd(index_path(log), os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    except (OSError, Refused):  # a link planted there is never written through
        return -1, info.st_size
    if info.st_size:
        append(index_fd, info.st_size, info.st_mtime_ns // 1000)
    return index_fd, info.st_size


def append(index_fd: int, end: int, time_us: int) -> None:
    """Append a record; a failure (a full disk) costs later lines their exact time, nothing
    else: the log itself was written."""
    with contextlib.suppress(OSError):
        os.write(index_fd, b"%d %d\n" % (end, time_us))


def now_us() -> int:
    """The time a record holds: now, in microseconds since the epoch."""
    return time_ns() // 1000


@dataclass(frozen=True)
class TimedLine:
    """One line of a worker's output (without its newline) and when it was received."""

    task_id: str
    text: bytes
    #: Microseconds since the epoch, UTC.
    time_us: int


class TaskLog:
    """A task's log read incrementally, as lines with their receive times."""

    def __init__(self, task_id: str, log: Path) -> None:
        self.task_id = task_id
        self._log = log
        self._index_path = index_path(log)
        self._log_offset = 0  # how far the log has been read
        self._index_offset = 0
        self._index = bytearray()  # read from the index, parsed as lines need its records
        self._parsed = 0
        self._record: tuple[int, int] | None = None  # (end, time): the first not behind us
        self._indexed = False  # the log has an index (a run from before it has none)
        self._newest = 0
        self._pending = bytearray()  # read, not yet shown: starts at `_shown`
        self._shown = 0
        self._last_time = 0

    def newest(self) -> int:
        """The time of the newest record written so far (0: none)."""
        self._read_index()
        return self._newest

    def lines(self, *, final: bool, until_us: int | None = None) -> Iterator[TimedLine]:
        """The complete lines not shown yet, in order. Unless `final`, stops at a line the index
        does not cover yet (the leader writes its record just after the line), or received
        after `until_us`; with `final`, shows the rest too, and a last line without a newline."""
        self._read_index()
        mtime_us = None
        for chunk in self._read_log():
            self._pending += chunk
            while True:
                end = self._pending.find(b"\n")
                if end < 0 and len(self._pending) < MAX_LINE:
                    break
                size = end + 1 if end >= 0 else MAX_LINE
                time_us = self._time_of(self._shown + size)
                if not final and self._held(time_us, until_us):
                    self._unread()
                    return
                if time_us is None:
                    if mtime_us is None:
                        mtime_us = self._mtime_us()
                    time_us = mtime_us
                yield self._take(size, time_us, newline=end >= 0)
        if final and self._pending:
            if mtime_us is None:
                mtime_us = self._mtime_us()
            yield self._take(len(self._pending), self._time_of(self._log_offset) or mtime_us)

    def _held(self, time_us: int | None, until_us: int | None) -> bool:
        """Whether a line waits (while following): for its record, or till `until_us`."""
        if time_us is None:
            return self._indexed
        return until_us is not None and time_us > until_us

    def _take(self, size: int, time_us: int, *, newline: bool = False) -> TimedLine:
        text = bytes(self._pending[: size - 1 if newline else size])
        del self._pending[:size]
        self._shown += size
        self._last_time = max(self._last_time, time_us)  # never back in time within a task
        return TimedLine(self.task_id, text, self._last_time)

    def _unread(self) -> None:
        """Forget what was read past the shown lines: read again next time."""
        self._log_offset = self._shown
        self._pending.clear()

    def _time_of(self, end: int) -> int | None:
        """The time of the first record reaching `end` (None: no record does yet)."""
        while self._record is None or self._record[0] < end:
            self._record = self._next_record()
            if self._record is None:
                return None
        return self._record[1]

    def _next_record(self) -> tuple[int, int] | None:
        """The next record (None: none was written yet). One that does not grow is passed over
        by `_time_of`, as lines only grow."""
        while (newline := self._index.find(b"\n", self._parsed)) >= 0:
            end, _, time_us = bytes(self._index[self._parsed : newline]).partition(b" ")
            self._parsed = newline + 1
            if end.isdigit() and time_us.isdigit():  # else torn or foreign: it says nothing
                return int(end), int(time_us)
        del self._index[: self._parsed]
        self._parsed = 0
        return None

    def _read_log(self) -> Iterator[bytes]:
        try:
            with open_read(self._log) as handle:
                handle.seek(self._log_offset)
                while chunk := handle.read(_CHUNK):
                    self._log_offset += len(chunk)
                    yield chunk
        except FileNotFoundError:
            return

    def _read_index(self) -> None:
        try:
            with open_read(self._index_path) as handle:
                handle.seek(self._index_offset)
                data = handle.read()
        except FileNotFoundError:
            return
        self._indexed = True
        self._index_offset += len(data)
        self._index += data
        ended = self._index.rfind(b"\n")
        if ended >= 0:
            last = self._index[:ended].rpartition(b"\n")[2].partition(b" ")[2]
            if last.isdigit():
                self._newest = max(self._newest, int(last))

    def _mtime_us(self) -> int:
        try:
            return os.stat(self._log, follow_symlinks=False).st_mtime_ns // 1000
        except FileNotFoundError:
            return now_us()


def merged(
    logs: Iterable[TaskLog],
    *,
    final: bool,
    until_us: int | None = None,
    since: int | None = None,
    tail: int | None = None,
) -> Iterator[TimedLine]:
    """The lines of `logs` read now, merged in the order received (ties in the logs' order):
    those received from `since` on, the last `tail` of each log."""
    batches: list[Iterable[TimedLine]] = []
    for log in logs:
        lines: Iterable[TimedLine] = log.lines(final=final, until_us=until_us)
        if since is not None:
            lines = (line for line in lines if line.time_us >= since)
        if tail is not None:
            lines = deque(lines, maxlen=tail)
        batches.append(lines)
    # Each task's lines are in time order: merging keeps ties in task order.
    return heapq.merge(*batches, key=attrgetter("time_us"))
