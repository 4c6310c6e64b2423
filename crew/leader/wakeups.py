"""What wakes the leader besides its workers: writes to the run's files, and a wake-up pipe
(`request_stop` from a signal handler or another thread).

The file watcher sits in the leader's select where it has a descriptor (inotify); otherwise a
thread waits on it and writes to the wake-up pipe. A watcher that fails is replaced by polling,
and the failure is kept for the leader to record, so the leader never stops noticing messages
while leader.json still claims a watcher.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from crew.registry import WatcherKind
from crew.store.watch import PollWatcher, Watcher, watch_folders

#: How long a watcher thread waits before looking at its stop flag again.
_THREAD_WAIT = 1.0


class Wakeups:
    """The wake-up pipe and the file watcher of one leader."""

    def __init__(self, selector: selectors.BaseSelector, folders: Sequence[Path]) -> None:
        self._selector = selector
        self._folders = list(folders)
        self._read_end, self._write_end = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._watcher: Watcher | None = None
        self._closed = False
        #: Set (by the watcher thread, too) when a watcher failed: its kind and the error.
        self._failure: tuple[WatcherKind, str] | None = None
        #: Kinds of watcher whose failure was noted: each is reported once.
        self._failed_kinds: set[WatcherKind] = set()
        #: Guards `_closed` and `_failure` between the loop and a watcher thread. A watcher
        #: thread writes to the wake-up pipe only under it, and never once closed: a closed
        #: descriptor's number may be reused by another file or pipe by then.
        self._closing = threading.Lock()

    @property
    def kind(self) -> WatcherKind:
        """How file changes are noticed now."""
        return self._watcher.kind if self._watcher is not None else WatcherKind.POLL

    def start(self) -> None:
        self._selector.register(self._read_end, selectors.EVENT_READ, ("wake", None))
        self._use(watch_folders(self._folders))

    def wake(self) -> None:
        """Wake the leader (safe from a signal handler or another thread)."""
        with contextlib.suppress(OSError):
            os.write(self._write_end, b"!")

    def handle(self, kind: str) -> None:
        """The wake-up pipe or the watcher's descriptor is readable."""
        if kind == "wake":
            with contextlib.suppress(BlockingIOError):
                os.read(self._read_end, 4096)
            return
        drain = getattr(self._watcher, "drain", None)
        try:
            if drain is not None:
                drain()
        except OSError as error:
            failed = self._watcher
            self._use(PollWatcher(self._folders))
            if failed is not None:
                self._failed(failed, error)

    @property
    def failed(self) -> bool:
        """Whether a watcher failure waits to be reported."""
        return self._failure is not None

    def failure(self) -> tuple[WatcherKind, str] | None:
        """The watcher failure not yet reported, if any (reported once)."""
        with self._closing:
            failure, self._failure = self._failure, None
        return failure

    def quiet(self) -> None:
        """Stop waking on anything but workers (the leader is stopping)."""
        for fd in (self._read_end, self._watcher.fileno() if self._watcher else None):
            if fd is not None:
                with contextlib.suppress(KeyError, ValueError):
                    self._selector.unregister(fd)

    def close(self) -> None:
        with self._closing:
            self._closed = True
        if self._watcher is not None:
            # watchfiles cannot be closed while its thread waits in it (ValueError): that
            # thread ends on its next wake-up, seeing `_closed`.
            with contextlib.suppress(Exception):
                self._watcher.close()
            self._watcher = None
        for fd in (self._read_end, self._write_end):
            with contextlib.suppress(OSError):
                os.close(fd)

    def _use(self, watcher: Watcher) -> None:
        previous, self._watcher = self._watcher, watcher
        if previous is not None:
            fd = previous.fileno()
            if fd is not None:
                with contextlib.suppress(KeyError, ValueError):
                    self._selector.unregister(fd)
            with contextlib.suppress(Exception):
                previous.close()
        fd = watcher.fileno()
        if fd is not None:
            self._selector.register(fd, selectors.EVENT_READ, ("files", None))
        else:
            threading.Thread(target=self._wait_in_thread, args=(watcher,), daemon=True).start()

    def _wait_in_thread(self, watcher: Watcher) -> None:
        """Wake the leader on changes a descriptor-less watcher sees (watchfiles, polling)."""
        while not self._closed and self._watcher is watcher:
            try:
                changed = watcher.wait(_THREAD_WAIT)
            except Exception as error:  # whatever broke, the leader must keep noticing writes
                failed, changed = watcher, True
                if watcher.kind is WatcherKind.POLL:
                    time.sleep(_THREAD_WAIT)  # polling itself fails: wake the leader each second
                else:
                    with contextlib.suppress(Exception):
                        watcher.close()
                    watcher = self._watcher = PollWatcher(self._folders)
                # Reported once the replacement is in place: `kind` says what is used now.
                self._failed(failed, error)
            if changed:
                with self._closing:
                    if not self._closed:
                        self.wake()

    def _failed(self, watcher: Watcher, error: BaseException) -> None:
        with self._closing:
            if watcher.kind not in self._failed_kinds:
                self._failed_kinds.add(watcher.kind)
                self._failure = (watcher.kind, repr(error))
