"""A run's files pinned at one moment, so that a long read holds the run lock for a moment only.

Reading a run's whole history (`crew doctor`) takes as long as the history is big: seconds for a
large run. Under the run lock, that would stall the leader and every writer for as long. So the
reader takes the lock only to pin the run: it keeps the bytes of the snapshots (small, and
replaced whole when they change) and notes how long each append-only file is. It then reads
the logs unlocked, up to those lengths: they are only ever appended to, so those bytes are still
what they were at the pin. Last, it checks the pin held: a log replaced meanwhile (a repair
rewrites it under a new inode) or cut back (setting aside a transaction cut short) shows as a
different inode, a shorter file or a changed last block, and the reader reads again.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from crew.paths import RunPaths
from crew.registry import Box
from crew.store import marker
from crew.store.files import open_read
from crew.store.marker import Applied
from crew.store.snapshots import Snapshots

#: How much of the end of each log a pin keeps, to tell that it was not rewritten.
_CHECKED = 4096


@dataclass(frozen=True)
class _Log:
    size: int
    inode: int
    last_block: bytes


@dataclass(frozen=True)
class Pin:
    """The run's files as they were when pinned."""

    #: manifest.json's bytes (None: missing).
    manifest: bytes | None
    #: The task files' bytes by task id (None: an older run, whose tasks are in tasks.json).
    tasks: dict[str, bytes] | None
    #: That older run's tasks.json (None: missing, or not needed).
    legacy: bytes | None
    _logs: dict[Path, _Log]
    #: What `.runtime/applied` said (None: missing or torn): the last seq the snapshots reflect.
    applied: Applied | None = None

    def end(self, path: Path) -> int | None:
        """How many bytes of a log to read (None: the file is not pinned, read it all)."""
        log = self._logs.get(path)
        return None if log is None else log.size


def take(paths: RunPaths) -> Pin:
    """Pin the run's files as they are now. The caller holds the run lock."""
    manifest, tasks, legacy = Snapshots(paths).read_raw()
    logs = {}
    for path in (paths.events, *(paths.box(box) for box in Box)):
        log = _look(path)
        logs[path] = log if log is not None else _Log(0, 0, b"")
    return Pin(manifest, tasks, legacy, logs, marker.read(paths))


def holds(pin: Pin) -> bool:
    """Whether every pinned log still begins with the bytes it had when pinned."""
    for path, then in pin._logs.items():
        if then.size == 0:
            continue
        now = _look(path, then.size)
        if now is None or now.inode != then.inode or now.last_block != then.last_block:
            return False
    return True


def _look(path: Path, size: int | None = None) -> _Log | None:
    """A log's size, inode and the block before `size` (its end if None); None if missing or
    shorter than `size`."""
    try:
        handle = open_read(path)  # a folder in its place is named
    except FileNotFoundError:
        return None
    with handle:
        stat = os.fstat(handle.fileno())
        end = stat.st_size if size is None else size
        if stat.st_size < end:
            return None
        start = max(0, end - _CHECKED)
        return _Log(end, stat.st_ino, os.pread(handle.fileno(), end - start, start))
