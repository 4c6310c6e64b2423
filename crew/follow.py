"""Waking up when a run's files change, and following its event log as it grows.

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
import ctypes.util
import os
import select
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from crew.models import Event
from crew.registry import EventType
from crew.store import jsonl

if TYPE_CHECKING:
    from crew.run import RunStore

FORCE_POLLING_ENV = "CREW_FORCE_POLLING"
POLL_INTERVAL = 0.1

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

    #: "inotify", "watchfiles" or "poll": shown in `crew status` when it is not file events.
    kind: str

    def fileno(self) -> int | None:
        """A descriptor that becomes readable on a change (for select), if there is one."""

    def wait(self, timeout: float | None) -> bool:
        """Block until something changes (True) or `timeout` seconds pass (False)."""

    def close(self) -> None: ...


class InotifyWatcher:
    """Linux inotify on each folder (not recursive): zero CPU while idle."""

    kind = "inotify"

    def __init__(self, folders: Sequence[Path]) -> None:
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

    kind = "watchfiles"

    def __init__(self, folders: Sequence[Path], *, debounce_ms: int = 5, step_ms: int = 5) -> None:
        from watchfiles._rust_notify import RustNotify

        self._notify = RustNotify([str(f) for f in folders], False, False, 50, False, False)
        self._debounce_ms = debounce_ms
        self._step_ms = step_ms

    def fileno(self) -> int | None:
        return None

    def wait(self, timeout: float | None) -> bool:
        timeout_ms = 0 if timeout is None else max(1, int(timeout * 1000))
        result = self._notify.watch(self._debounce_ms, self._step_ms, timeout_ms, None)
        if result == "signal":
            raise KeyboardInterrupt
        return isinstance(result, set) and bool(result)

    def close(self) -> None:
        self._notify.close()


class PollWatcher:
    """Stat polling: for filesystems that deliver no file events."""

    kind = "poll"

    def __init__(self, folders: Sequence[Path], *, interval: float = POLL_INTERVAL) -> None:
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


def watch_folders(folders: Sequence[Path], *, step_ms: int = 5) -> Watcher:
    """The best watcher this platform offers for `folders` (see the module docstring)."""
    if os.environ.get(FORCE_POLLING_ENV, "") not in {"", "0"}:
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
            _LIBC = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        return _LIBC


def follow_events(
    store: RunStore, *, follow: bool
) -> Iterator[tuple[Event | None, jsonl.BadLine | None]]:
    """Yield each event of a run (and each bad line); with `follow`, keep going as events are
    appended, until the run ends.

    Survives the log being replaced by a repair: it re-reads from the start and skips what it
    already showed (by seq).
    """
    follower = jsonl.Follower(store.paths.events, Event)
    shown_seq = 0
    ended = False
    watcher = watch_folders([store.paths.root], step_ms=20) if follow else None
    try:
        if follow:
            ended = store.state().run.status.terminal
        while True:
            result = follower.poll()
            for bad in result.bad:
                yield None, bad
            for event in result.records:
                if event.seq <= shown_seq:
                    continue  # shown before the file was replaced
                shown_seq = event.seq
                ended = ended or event.type is EventType.RUN_ENDED
                yield event, None
            if watcher is None or ended or not store.paths.root.is_dir():
                return
            # The timeout only guards against a missed notification; changes wake it at once.
            watcher.wait(5.0)
    finally:
        if watcher is not None:
            watcher.close()


def follow_log(store: RunStore, task_id: str, *, follow: bool) -> Iterator[bytes]:
    """A worker's output, as stored; with `follow`, keep going until the task has ended."""
    path = store.paths.log(task_id)
    offset = 0
    watcher = watch_folders([store.paths.logs_dir, store.paths.root]) if follow else None
    try:
        while True:
            ended = not follow or store.state().tasks[task_id].status.terminal
            try:
                with path.open("rb") as handle:
                    handle.seek(offset)
                    while chunk := handle.read(65536):
                        offset += len(chunk)
                        yield chunk
            except FileNotFoundError:
                pass
            if watcher is None or ended:
                return
            watcher.wait(5.0)
    finally:
        if watcher is not None:
            watcher.close()
