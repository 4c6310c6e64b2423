"""Worker processes: is this pid still that worker, signalling its group (stopping a run's
workers is crew/procs/stopping.py's).

From outside the leader (a cancel, a resume), a pid is signalled only after
`/proc/<pid>/environ` shows it carries the run's CREW_RUN_ID and the task's CREW_TASK_ID, so a
pid the kernel has since given to another process is never touched.
"""

from __future__ import annotations

import contextlib
import os
import resource
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from enum import StrEnum

from crew.procs.liveness import is_alive as is_alive
from crew.procs.liveness import parent_of

DEFAULT_GRACE = 5.0


class Stop(StrEnum):
    """What stopping a worker came to."""

    TERMINATED = "terminated"  # exited after SIGTERM, within the grace period
    KILLED = "killed"  # needed SIGKILL
    GONE = "gone"  # had already exited
    NOT_OURS = "not ours"  # the pid now belongs to another process: left alone
    DENIED = "denied"  # exists, but we may not inspect or signal it


@dataclass(frozen=True)
class Stopped:
    task_id: str
    pid: int
    outcome: Stop


def worker_environ(pid: int) -> dict[str, str] | None:
    """The environment a process started with, or None if it is gone or unreadable."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            raw = handle.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    except PermissionError:
        raise
    except OSError:
        return None
    variables: dict[str, str] = {}
    for entry in raw.split(b"\0"):
        key, sep, value = entry.partition(b"=")
        if sep:
            variables[key.decode(errors="replace")] = value.decode(errors="replace")
    return variables


def signal_group(pid: int, sig: signal.Signals) -> bool:
    """Signal the process group led by `pid` (each worker leads its own group); False if
    there was nothing we may signal."""
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        try:
            os.kill(pid, sig)  # not a group leader after all: signal the process alone
        except (ProcessLookupError, PermissionError):
            return False
    except PermissionError:
        return False
    return True


def inherited_environs(names: tuple[str, ...], *, depth: int = 64) -> Iterator[dict[str, str]]:
    """The starting environments of this process's ancestors that were given every one of
    `names` (workers, for a command run below them), nearest first; none without /proc.

    A process can change its own environment, not the one its ancestors started with: a command
    that dropped a worker's variables is still found below that worker.
    """
    pid = os.getppid()
    for _ in range(depth):
        if pid <= 1:
            return
        try:
            found = worker_environ(pid)
        except PermissionError:  # not ours to read (another user's): look further up
            found = None
        if found is not None and all(found.get(name) for name in names):
            yield found
        parent = parent_of(pid)
        if parent is None:
            return
        pid = parent


def raise_open_files() -> None:
    """Allow this process as many descriptors as the system lets it have: a leader holds pipes
    to every worker (four a local one, up to eight a remote one), and a soft limit of 1024 would
    hold back a crew of a few hundred."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
