"""The run lock: every read-modify-write of a run happens under it, always with a timeout.

It is an exclusive `flock` on the run's `.lock` file (the kernel releases it when the holder
dies, even on `kill -9`), taken on a descriptor of its own for each take. One lock file is held
once per thread: the leader's thread and a live view's thread exclude each other like two
processes do, and a thread that holds it may take it again. Where the file system has no
`flock`, or the lock file is not there (a run an older crew made), the take is filelock's
`FileLock` (which creates the file, and falls back to its soft lock where `flock` is missing):
it is the same `flock` on the same file, so the two exclude each other. The `flock` is taken
directly because filelock's acquire and release cost more than a whole SQLite transaction
(docs/performance.md).

The leader alone waits without a timeout (`patience`): it has nothing better to do than wait for
the lock, and must not stop leading because another process holds it for long; it keeps its
heartbeat going while it waits.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from crew import env
from crew.clock import parse_duration
from crew.errors import CrewError, CrewTimeout, StoreError, UsageError
from crew.procs import is_alive
from crew.store.files import FILE_MODE, link_refused, open_fd, open_read, read_bytes, refuse_link
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
#: What `flock` fails with on a file system that has none: filelock's soft lock there.
_NO_FLOCK = frozenset({errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOLCK})
_OPEN = os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC

#: Lock files whose take is filelock's, one object each for the life of the process.
_filelocks: dict[Path, filelock.FileLock] = {}
_filelocks_guard = threading.Lock()
#: Lock files on a file system without `flock`.
_flockless: set[Path] = set()


class _Take:
    """One lock file held by this thread: its descriptor (-1: filelock's take), and how many
    times the thread has taken it (it may take again what it holds)."""

    __slots__ = ("depth", "fd")

    def __init__(self, fd: int) -> None:
        self.fd, self.depth = fd, 1


class _Held(threading.local):
    """What this thread holds."""

    def __init__(self) -> None:
        self.takes: dict[Path, _Take] = {}


_held = _Held()
#: Per thread: what a wait for a busy lock calls while it waits (set by `patience`).
_patience = threading.local()


def _forget_locks() -> None:
    """A lock belongs to the process that took it (filelock refuses an object inherited by a
    fork, and a descriptor inherited would share the parent's hold): a forked child (a detached
    leader, a test's writer) starts holding none."""
    global _filelocks_guard, _held  # noqa: PLW0603  # a fork may copy them mid-use by a thread
    for take in _held.takes.values():
        if take.fd >= 0:
            os.close(take.fd)  # not unlocked: that would release the parent's hold
    _filelocks_guard = threading.Lock()
    _filelocks.clear()
    _held = _Held()


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
    takes = _held.takes
    take = takes.get(path)
    if take is not None:  # this thread holds it already
        take.depth += 1
        try:
            yield
        finally:
            take.depth -= 1
        return
    wait = lock_timeout() if timeout is None else timeout
    on_busy = getattr(_patience, "on_busy", None) if timeout is None else None
    takes[path] = take = _acquire(path, wait, on_busy)
    try:
        yield
    finally:
        del takes[path]
        _release(path, take)


def _acquire(path: Path, wait: float, on_busy: Callable[[float], None] | None = None) -> _Take:
    """Take the lock, in turn: a waiter kept waiting past HAND_AFTER raises its hand, and while
    a live waiter's hand is up, no one else takes the lock (see `_Hand`)."""
    hand = _Hand(path)
    if not os.path.lexists(hand.path):  # the common case: no one waits
        take = _try(path)
        if take is not None:
            return take
    started = time.monotonic()
    looked_up = 0.0
    try:
        while True:
            if hand.mine or not hand.other_up():
                take = _try(path)
                if take is not None:
                    return take
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


def make_lock_file(path: Path) -> None:
    """Create a new run's lock file, so that its first take is crew's own. Not where the file
    system has no `flock`: there a lock file's existence is filelock's soft lock, held, so
    only filelock makes one (this one is removed)."""
    fd = open_fd(path, os.O_RDWR | os.O_CREAT | os.O_EXCL)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno not in _NO_FLOCK:
            raise
        path.unlink()
    finally:
        os.close(fd)  # and with it the probe's shared hold


def _try(path: Path) -> _Take | None:
    """The lock taken without waiting, or None if another holds it. The file is opened afresh
    at each try, as filelock opens it: a run removed meanwhile is found gone (ENOENT)."""
    if path in _flockless:
        return _try_filelock(path)
    try:
        fd = os.open(path, _OPEN)
    except FileNotFoundError:
        return _try_filelock(path)  # an older crew's run: filelock makes the file
    except OSError as exc:
        raise _cannot(path, exc) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    except OSError as exc:
        os.close(fd)
        if exc.errno not in _NO_FLOCK:
            raise _cannot(path, exc) from None
        _flockless.add(path)
        return _try_filelock(path)
    return _Take(fd)


def _release(path: Path, take: _Take) -> None:
    if take.fd < 0:
        _filelocks[path].release()
        return
    try:
        fcntl.flock(take.fd, fcntl.LOCK_UN)  # a descriptor a fork copied holds it no longer
    finally:
        os.close(take.fd)


def _try_filelock(path: Path) -> _Take | None:
    import filelock  # here: only a new run's first take, or a file system without flock

    refuse_link(path)  # filelock would open (and truncate) what a link points to
    with _filelocks_guard:
        lock = _filelocks.get(path)
        if lock is None:
            lock = _filelocks[path] = filelock.FileLock(path, mode=FILE_MODE)
    try:
        lock.acquire(blocking=False)
    except filelock.Timeout:
        return None
    except OSError as exc:
        raise _cannot(path, exc) from None
    return _Take(-1)


def _cannot(path: Path, exc: OSError) -> CrewError:
    if exc.errno == errno.ELOOP:
        return link_refused(path)
    return StoreError(f"Cannot lock {path}: {exc.strerror or exc}.", errno=exc.errno)


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
        return f"{os.getpid()}:{threading.get_ident()}".encode()

    def other_up(self) -> bool:
        """Whether a live waiter other than this one has its hand up."""
        try:
            with open_read(self.path) as handle:
                token = handle.read(64)
        except FileNotFoundError:
            self.mine = False
            return False
        if token == self.token:
            return False
        self.mine = False
        pid = token.partition(b":")[0]
        if pid.isdigit() and (int(pid) == os.getpid() or is_alive(int(pid))):
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
