"""The run lock: every read-modify-write of a run happens under it, always with a timeout.

It is a filelock `FileLock` on the run's `.lock` file: an exclusive `flock` where the filesystem
has one (the kernel releases it when the holder dies, even on `kill -9`), filelock's soft lock
where it has not. One lock object per lock file is kept for the life of the process and reused;
it is thread-local, so the leader's thread and a live view's thread exclude each other like two
processes do. What this costs per transaction is measured in docs/performance.md.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from crew import env
from crew.errors import CrewTimeout, StoreError
from crew.store.files import FILE_MODE, refuse_link

if TYPE_CHECKING:
    import filelock

DEFAULT_LOCK_TIMEOUT = 10.0
#: How often a busy lock is tried again: a holder keeps it for a few milliseconds only.
POLL_INTERVAL = 0.002

_locks: dict[Path, filelock.FileLock] = {}
_locks_guard = threading.Lock()


def _forget_locks() -> None:
    """A lock object belongs to the process that made it (filelock refuses one inherited by a
    fork): a forked child (a detached leader, a test's writer) starts with none."""
    global _locks_guard  # noqa: PLW0603  # a fork may have copied it while another thread held it
    _locks_guard = threading.Lock()
    _locks.clear()


os.register_at_fork(after_in_child=_forget_locks)


def lock_timeout() -> float:
    """Seconds to wait for a busy lock: $CREW_LOCK_TIMEOUT, else 10."""
    try:
        return float(env.LOCK_TIMEOUT.value() or DEFAULT_LOCK_TIMEOUT)
    except ValueError:
        return DEFAULT_LOCK_TIMEOUT


def _lock_for(path: Path) -> filelock.FileLock:
    import filelock  # here: a command that only reads a run never pays for importing it

    with _locks_guard:
        lock = _locks.get(path)
        if lock is None:
            lock = _locks[path] = filelock.FileLock(path, mode=FILE_MODE)
        return lock


@contextmanager
def locked(path: Path, *, timeout: float | None = None) -> Iterator[None]:
    """Hold the exclusive lock at `path` for the block; CrewTimeout if it stays busy."""
    import filelock

    wait = lock_timeout() if timeout is None else timeout
    refuse_link(path)  # filelock would open (and truncate) what a link points to
    lock = _lock_for(path)
    try:
        lock.acquire(timeout=wait, poll_interval=POLL_INTERVAL)
    except filelock.Timeout:
        raise CrewTimeout(
            f"Timed out after {wait:g}s waiting for the lock {path}: "
            "another crew process holds it.",
            hint=f"Retry, or raise {env.LOCK_TIMEOUT.name} if the run is very busy.",
        ) from None
    except OSError as exc:
        raise StoreError(f"Cannot lock {path}: {exc.strerror or exc}.") from None
    try:
        yield
    finally:
        lock.release()
