"""Faults the leader rides out rather than dying of them: a full disk (ENOSPC, EDQUOT), an I/O
error (EIO), no file descriptor left (EMFILE, ENFILE), a run lock held elsewhere for long.

What a fault stops is held back, never dropped: the writes for a worker wait in order
(crew/leader/guard.py; the leader pauses that worker meanwhile: it blocks once its pipe is full,
and its exit waits to be recorded); a task that cannot be started stays queued. `Degradation`
says when to try again: on a timer that backs off from FIRST_RETRY to MAX_RETRY (there is no
event for free disk space), at once when a worker exits while descriptors are short (its
descriptors are free now). The leader tells of it in `.runtime/leader.json` (`degraded`, which
`crew status` warns about), in its log, and with `leader.degraded` and `leader.recovered` events
once it can write them (crew/leader/health.py).
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Iterator
from dataclasses import dataclass

from crew import clock
from crew.errors import StoreError

#: Errors that say the machine, not the run, is in trouble for now: the leader waits them out.
FAULTS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EMFILE, errno.ENFILE})
#: A worker may also fail to start for want of processes or memory for a while.
SPAWN_FAULTS = FAULTS | {errno.EAGAIN, errno.ENOMEM}
#: Faults that a worker's exit may end: it frees its descriptors.
DESCRIPTORS = frozenset({errno.EMFILE, errno.ENFILE})
#: Seconds until the first retry after a fault; each failed retry doubles it, up to MAX_RETRY.
FIRST_RETRY = 0.1
MAX_RETRY = 2.0


def fault_of(error: BaseException, faults: frozenset[int] = FAULTS) -> int | None:
    """The error number of `error` if it is a fault to wait out (None for anything else)."""
    code = error.errno if isinstance(error, OSError | StoreError) else None
    return code if code in faults else None


def describe(error: BaseException) -> str:
    """A fault in words: `No space left on device (ENOSPC)`."""
    code = error.errno if isinstance(error, OSError | StoreError) else None
    if code is None:
        return str(error)
    name = errno.errorcode.get(code, str(code))
    return f"{os.strerror(code)} ({name})"


@dataclass
class Degradation:
    """Whether the leader is degraded, since when, why, and when to try again."""

    #: What failed, and how (None: not degraded).
    reason: str | None = None
    #: When it began (a timestamp, and monotonic), and how many faults since.
    since: str = ""
    started: float = 0.0
    faults: int = 0
    #: The error number of the last fault.
    errno: int | None = None
    retry_at: float = 0.0
    delay: float = 0.0
    #: A `leader.degraded` event was written for it.
    announced: bool = False

    @property
    def active(self) -> bool:
        return self.reason is not None

    def failed(self, what: str, error: BaseException, now: float) -> bool:
        """A fault held `what` back; True when it degrades a leader that was not degraded."""
        first = self.reason is None
        self.reason = f"{what}: {describe(error)}"
        self.faults += 1
        self.errno = error.errno if isinstance(error, OSError | StoreError) else None
        if first:
            self.since, self.started = clock.now(), now
            self.delay, self.announced = FIRST_RETRY, False
            self.retry_at = now + self.delay
        elif now >= self.retry_at:  # a retry failed: wait longer before the next
            self.delay = min(self.delay * 2, MAX_RETRY)
            self.retry_at = now + self.delay
        return first

    def due(self, now: float) -> bool:
        """Whether it is time to retry what was held back."""
        return self.active and now >= self.retry_at

    def wake_at(self) -> float | None:
        return self.retry_at if self.active else None

    def freed(self, now: float) -> None:
        """A worker exited: its descriptors are free, so a retry may succeed now."""
        if self.errno in DESCRIPTORS:
            self.retry_at = min(self.retry_at, now)

    def clear(self, now: float) -> float:
        """The fault cleared; returns how long it lasted (seconds)."""
        lasted = now - self.started
        self.reason, self.errno, self.faults = None, None, 0
        return lasted


class Reserve:
    """A spare file descriptor, given up for a moment when none is left (EMFILE), so that the
    leader can still write its heartbeat."""

    def __init__(self) -> None:
        self._fd: int | None = None
        self.take()

    def take(self) -> None:
        if self._fd is None:
            with contextlib.suppress(OSError):
                self._fd = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)

    @contextlib.contextmanager
    def released(self) -> Iterator[None]:
        """The block runs with the spare descriptor free; it is taken back after (if it can)."""
        self.close()
        try:
            yield
        finally:
            self.take()

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
