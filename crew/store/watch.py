"""Waking up when files change, at no cost while nothing does.

Three ways to notice a change, best first:
- inotify (Linux), read directly: a file descriptor that can sit in a `select` beside worker pipes,
  so a waiting process uses no CPU at all and wakes within a millisecond of a write;
- watchfiles (macOS, BSD): its wait loop checks for changes every `step` milliseconds, so its
  idle CPU grows as its latency shrinks (measured here: 2.8% of a core at step=1ms, 1.0% at 5ms,
  0.13% at 50ms); callers choose the latency they need;
- stat polling, where file events do not work (network filesystems): CREW_FORCE_POLLING=1.
"""

from __future__ import annotations

import ctypes
import os
import select
import sys
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from crew import env
from crew.registry import WatcherKind

if TYPE_CHECKING:
    from pathlib import Path

    #: A folder to watch, as a path or its text (a fast command passes text: no pathlib).
    Folder = Path | str

POLL_INTERVAL = 0.1
#: watchfiles cannot change its timeout between waits: a wait longer than this is made of
#: several, so a deadline is met within this much.
WATCHFILES_SLICE_MS = 250

# inotify(7) event masks: anything that can change what a reader of the folder sees.
_IN_MODIFY = 0x002
_IN_ATTRIB = 0x004
_IN_CLOSE_WRITE = 0x008
_IN_MOVED_FROM = 0x040
_IN_MOVED_TO = 0x080
_IN_CREATE = 0x100
_IN_DELETE = 0x200
_IN_DELETE_SELF = 0x400
_IN_MOVE_SELF = 0x800
_WATCH_MASK = (
    _IN_MODIFY
    | _IN_ATTRIB
    | _IN_CLOSE_WRITE
    | _IN_MOVED_FROM
    | _IN_MOVED_TO
    | _IN_CREATE
    | _IN_DELETE
    | _IN_DELETE_SELF
    | _IN_MOVE_SELF
)
_IN_NONBLOCK = os.O_NONBLOCK
_IN_CLOEXEC = os.O_CLOEXEC


class Watcher(Protocol):
    """Something that can wait for a change in a set of folders."""

    #: Shown in `crew status` when it is not file events.
    kind: WatcherKind

    def fileno(self) -> int | None:
        """A descriptor that becomes readable on a change (for select), if there is one."""

    def wait(self, timeout: float | None) -> bool:
        """Block until something changes (True) or `timeout` seconds pass (False)."""

    def close(self) -> None: ...


class InotifyWatcher:
    """Linux inotify on each folder (not recursive): zero CPU while idle."""

    kind = WatcherKind.INOTIFY

    def __init__(self, folders: Sequence[Folder]) -> None:
        libc = _libc()
        fd: int = libc.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC)
        if fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1 failed")
        self._fd = fd
        try:
            for folder in folders:
                if libc.inotify_add_watch(fd, os.fsencode(folder), _WATCH_MASK) < 0:
                    errno = ctypes.get_errno()
                    raise OSError(errno, f"cannot watch {folder}: {os.strerror(errno)}")
        except BaseException:
            os.close(fd)
            raise

    def fileno(self) -> int | None:
        return self._fd

    def drain(self) -> bool:
        """Consume pending notifications; True if there were any."""
        seen = False
        while True:
            try:
                data = os.read(self._fd, 65536)
            except BlockingIOError:
                return seen
            if not data:
                return seen
            seen = True

    def wait(self, timeout: float | None) -> bool:
        if self.drain():
            return True
        ready, _, _ = select.select([self._fd], [], [], timeout)
        return bool(ready) and self.drain()

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class WatchfilesWatcher:
    """watchfiles (Rust notify): portable file events; `step_ms` trades idle CPU for latency."""

    kind = WatcherKind.WATCHFILES

    def __init__(
        self, folders: Sequence[Folder], *, debounce_ms: int = 5, step_ms: int = 5
    ) -> None:
        import watchfiles

        self._changes = watchfiles.watch(
            *folders,
            watch_filter=None,
            debounce=debounce_ms,
            step=step_ms,
            rust_timeout=WATCHFILES_SLICE_MS,
            yield_on_timeout=True,
            raise_interrupt=False,
            recursive=False,
        )

    def fileno(self) -> int | None:
        return None

    def wait(self, timeout: float | None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if next(self._changes, None):
                return True
            if deadline is not None and time.monotonic() >= deadline:
                return False

    def close(self) -> None:
        self._changes.close()


class PollWatcher:
    """Stat polling: for filesystems that deliver no file events."""

    kind = WatcherKind.POLL

    def __init__(self, folders: Sequence[Folder], *, interval: float = POLL_INTERVAL) -> None:
        self._folders = list(folders)
        self._interval = interval
        self._last = self._snapshot()

    def _snapshot(self) -> dict[str, tuple[int, int, int]]:
        seen: dict[str, tuple[int, int, int]] = {}
        for folder in self._folders:
            try:
                entries = list(os.scandir(folder))
            except FileNotFoundError:
                continue
            for entry in entries:
                try:
                    stat = entry.stat()
                except FileNotFoundError:
                    continue
                seen[entry.path] = (stat.st_ino, stat.st_size, stat.st_mtime_ns)
        return seen

    def fileno(self) -> int | None:
        return None

    def wait(self, timeout: float | None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            current = self._snapshot()
            if current != self._last:
                self._last = current
                return True
            if deadline is not None and time.monotonic() >= deadline:
                return False
            pause = self._interval
            if deadline is not None:
                pause = min(pause, max(0.0, deadline - time.monotonic()))
            time.sleep(pause)

    def close(self) -> None:
        pass


def watch_folders(folders: Sequence[Folder], *, step_ms: int = 5) -> Watcher:
    """The best watcher this platform offers for `folders` (see the module docstring)."""
    if env.FORCE_POLLING.enabled():
        return PollWatcher(folders)
    if sys.platform.startswith("linux"):
        try:
            return InotifyWatcher(folders)
        except (OSError, AttributeError):
            pass  # no inotify (or out of watches): fall through
    try:
        return WatchfilesWatcher(folders, step_ms=step_ms)
    except (OSError, RuntimeError, ImportError):
        return PollWatcher(folders)


_LIBC: ctypes.CDLL | None = None
_LIBC_LOCK = threading.Lock()


def _libc() -> ctypes.CDLL:
    global _LIBC  # noqa: PLW0603  # loaded once, on first use
    with _LIBC_LOCK:
        if _LIBC is None:
            # The symbols the process already has, libc's among them: `find_library("c")` would
            # run `ldconfig -p` in a child process at every leader's start to name the same one.
            _LIBC = ctypes.CDLL(None, use_errno=True)
        return _LIBC
