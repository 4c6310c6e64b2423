"""The run lock: every read-modify-write of a run happens under it, always with a timeout.

It is a filelock `FileLock` on the run's `.lock` file: an exclusive `flock` where the filesystem
has one (the kernel releases it when the holder dies, even on `kill -9`), filelock's soft lock
where it has not. One lock object per lock file is kept for the life of the process and reused;
it is thread-local, so the leader's thread and a live view's thread exclude each other like two
processes do. What this costs per transaction is measured in docs/performance.md.

The leader alone waits without a timeout (`patience`): it has nothing better to do than wait for
the lock, and must not stop leading because another process holds it for long; it keeps its
heartbeat going while it waits.
"""

from __future__ import annotations

import contextlib
import os
import stat
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from crew import env
from crew.clock import parse_duration
from crew.errors import CrewTimeout, StoreError, UsageError, link_refused
from crew.procs import is_alive
from crew.procs.liveness import started
from crew.store.files import FILE_MODE, open_fd, open_read, read_bytes
from crew.text import clip

if TYPE_CHECKING:
    import filelock

DEFAULT_LOCK_TIMEOUT = 10.0
#: How often a busy lock is tried again: a holder keeps it for a few milliseconds only.
POLL_INTERVAL = 0.002
#: How long a waiter waits before it claims the next turn (see `_Hand`).
HAND_AFTER = 0.25
#: How often a patient wait for a busy lock looks up from it (see `patience`).
PATIENT_SLICE = 0.2

_locks: dict[Path, filelock.FileLock] = {}
_locks_guard = threading.Lock()
#: Per thread: what a wait for a busy lock calls while it waits (set by `patience`).
_patience = threading.local()


def _forget_locks() -> None:
    """A lock object belongs to the process that made it (filelock refuses one inherited by a
    fork): a forked child (a detached leader, a test's writer) starts with none."""
    global _locks_guard  # noqa: PLW0603  # a fork may have copied it while another thread held it
    _locks_guard = threading.Lock()
    _locks.clear()


os.register_at_fork(after_in_child=_forget_locks)


def lock_timeout() -> float:
    """Seconds to wait for a busy lock: $CREW_LOCK_TIMEOUT, else 10.

    A value that is not a duration (`nan`, `inf`, `-1`, which would wait for ever, or a typo)
    is a usage error naming the variable, never a silent default.
    """
    raw = env.LOCK_TIMEOUT.value()
    if raw is None:
        return DEFAULT_LOCK_TIMEOUT
    try:
        return parse_duration(raw)
    except ValueError:
        raise UsageError(
            f"{env.LOCK_TIMEOUT.name} must be a number of seconds (or a duration like 500ms or "
            f"30s) from 0 up, got {clip(repr(raw), 40)}.",
            hint=f"Unset it for the default ({DEFAULT_LOCK_TIMEOUT:g}s).",
        ) from None


def _lock_for(path: Path) -> filelock.FileLock:
    import filelock  # here: a command that only reads a run never pays for importing it

    with _locks_guard:
        lock = _locks.get(path)
        if lock is None:
            # The mode filelock sets on a lock file it makes (despite the umask): `locked`
            # makes the file first, as crew makes its files, so filelock does only in a race.
            lock = _locks[path] = filelock.FileLock(path, mode=FILE_MODE)
        return lock


@contextmanager
def patience(on_busy: Callable[[float], None]) -> Iterator[None]:
    """In this thread, for the block: a wait for a busy lock (with the default timeout) never
    times out. Every PATIENT_SLICE seconds of waiting it calls `on_busy(seconds waited)`, which
    may do other work meanwhile (the leader's heartbeat), or raise to give up the wait."""
    previous = getattr(_patience, "on_busy", None)
    _patience.on_busy = on_busy
    try:
        yield
    finally:
        _patience.on_busy = previous


@contextmanager
def locked(path: Path, *, timeout: float | None = None) -> Iterator[None]:
    """Hold the exclusive lock at `path` for the block; CrewTimeout if it stays busy (never, in
    a thread that has `patience` and asks for the default timeout)."""
    wait = lock_timeout() if timeout is None else timeout
    try:
        if stat.S_ISLNK(os.lstat(path).st_mode):  # filelock would open (and truncate) its target
            raise link_refused(path)
    except FileNotFoundError:  # made as crew makes its files: under the umask (SPEC §2)
        os.close(open_fd(path, os.O_WRONLY | os.O_CREAT))
    on_busy = getattr(_patience, "on_busy", None) if timeout is None else None
    lock = _lock_for(path)
    _acquire(lock, path, wait, on_busy)
    try:
        yield
    finally:
        lock.release()


def _acquire(
    lock: filelock.FileLock,
    path: Path,
    wait: float,
    on_busy: Callable[[float], None] | None = None,
) -> None:
    """Take the lock, in turn: a waiter kept waiting past HAND_AFTER raises its hand, and while
    a live waiter's hand is up, no one else takes the lock (see `_Hand`)."""
    hand = _Hand(path)
    if not os.path.lexists(hand.path) and _try(lock, path):  # the common case: no one waits
        return
    started = time.monotonic()
    looked_up = 0.0
    try:
        while True:
            if (hand.mine or not hand.other_up()) and _try(lock, path):
                return
            waited = time.monotonic() - started
            if on_busy is not None and waited >= looked_up + PATIENT_SLICE:
                on_busy(waited)  # a patient waiter: it never times out
                looked_up = waited
            elif on_busy is None and waited >= wait:
                raise CrewTimeout(
                    f"Timed out after {wait:g}s waiting for the lock {path}: "
                    "another crew process holds it.",
                    hint=f"Retry, or raise {env.LOCK_TIMEOUT.name} if the run is very busy.",
                )
            if waited >= HAND_AFTER:
                hand.raise_()
            time.sleep(POLL_INTERVAL)
    finally:
        hand.lower()


def _try(lock: filelock.FileLock, path: Path) -> bool:
    import filelock

    try:
        lock.acquire(blocking=False)
    except filelock.Timeout:
        return False
    except OSError as exc:
        raise StoreError(f"Cannot lock {path}: {exc.strerror or exc}.", errno=exc.errno) from None
    return True


class _Hand:
    """A waiter's claim to the next turn: the file `.next.lock` beside the lock, holding who
    raised it. Without it, a waiter that polls every few milliseconds can lose the lock for
    ever to writers arriving in between (16 writers in a burst kept one send waiting past
    its 10 s timeout). One hand is up at a time; a hand whose process is gone is taken down
    by the next waiter that sees it. It is advice, not the lock: the lock alone excludes."""

    #: Each lock's hand file, made once (a transaction takes the lock every time).
    _paths: ClassVar[dict[Path, Path]] = {}

    def __init__(self, lock_path: Path) -> None:
        path = self._paths.get(lock_path)
        if path is None:
            path = self._paths[lock_path] = lock_path.with_name(".next.lock")
        self.path = path
        self.mine = False

    @property
    def token(self) -> bytes:
        """Who raised it: the pid, the thread, and when the process started."""
        return f"{os.getpid()}:{threading.get_ident()}:{started(os.getpid())}".encode()

    def other_up(self) -> bool:
        """Whether a live waiter other than this one has its hand up."""
        try:
            with open_read(self.path) as handle:
                token = handle.read(96)
        except FileNotFoundError:
            self.mine = False
            return False
        if token == self.token:
            return False
        self.mine = False
        if _raised_by_the_living(token):
            return True
        self.path.unlink(missing_ok=True)  # its waiter is gone
        return False

    def raise_(self) -> None:
        if self.mine:
            return
        try:
            fd = open_fd(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        except FileExistsError:
            return
        try:
            os.write(fd, self.token)
        finally:
            os.close(fd)
        self.mine = True

    def lower(self) -> None:
        if self.mine:
            self.mine = False
            with contextlib.suppress(OSError):
                if read_bytes(self.path) == self.token:
                    self.path.unlink()


def _raised_by_the_living(token: bytes) -> bool:
    """Whether the hand's waiter lives: its pid is a live process that started when the waiter
    did (a waiter killed with its hand up leaves the hand, and the kernel may give its pid to
    another process, which would keep every writer waiting). A hand of an older crew names no
    start: its pid alone decides."""
    pid, _, rest = token.partition(b":")
    start = rest.partition(b":")[2]
    if not pid.isdigit():
        return False
    if int(pid) == os.getpid():
        return True
    if not is_alive(int(pid)):
        return False
    return not start.isdigit() or started(int(pid)) == int(start)
