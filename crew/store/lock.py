"""The run lock: every read-modify-write of a run happens under it, always with a timeout."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from crew.errors import CrewTimeout
from crew.store.files import FILE_MODE

LOCK_TIMEOUT_ENV = "CREW_LOCK_TIMEOUT"
DEFAULT_LOCK_TIMEOUT = 10.0
#: Contended waits re-try flock this often; a writer holds the lock for a few milliseconds.
_POLL_INTERVAL = 0.002


def lock_timeout() -> float:
    try:
        return float(os.environ.get(LOCK_TIMEOUT_ENV, DEFAULT_LOCK_TIMEOUT))
    except ValueError:
        return DEFAULT_LOCK_TIMEOUT


@contextmanager
def locked(path: Path, *, timeout: float | None = None) -> Iterator[None]:
    """Hold the exclusive lock at `path` (flock) for the block; CrewTimeout if it stays busy."""
    from filelock import FileLock, Timeout  # imported here: read-only commands never need it

    wait = lock_timeout() if timeout is None else timeout
    lock = FileLock(
        path, timeout=wait, mode=FILE_MODE, poll_interval=_POLL_INTERVAL, thread_local=False
    )
    try:
        lock.acquire()
    except Timeout:
        raise CrewTimeout(
            f"Timed out after {wait:g}s waiting for the lock {path}: "
            "another crew process holds it.",
            hint=f"Retry, or raise {LOCK_TIMEOUT_ENV} if the run is very busy.",
        ) from None
    try:
        yield
    finally:
        lock.release()
