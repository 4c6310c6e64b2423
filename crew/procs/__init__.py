"""Worker processes: is this pid still that worker, signalling its group, and stopping it.

From outside the leader (a cancel, a resume), a pid is signalled only after
`/proc/<pid>/environ` shows it carries the run's CREW_RUN_ID and the task's CREW_TASK_ID, so a
pid the kernel has since given to another process is never touched.
"""

from __future__ import annotations

import contextlib
import os
import resource
import select
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from enum import StrEnum

from crew import env
from crew.procs import cgroup, tree
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


def is_worker(
    pid: int,
    run_id: str,
    task_id: str,
    attempt: int | None = None,
    *,
    state_dir: str | None = None,
) -> bool:
    """Whether `pid` is (still) the worker of this run's task (and of that attempt, and of the
    run kept in `state_dir`, if given: another home may hold a run of the same id)."""
    found = worker_environ(pid)
    if found is None or found.get(env.RUN_ID.name) != run_id:
        return False
    if found.get(env.TASK_ID.name) != task_id:
        return False
    if state_dir is not None and not tree.same_folder(found.get(env.STATE_DIR.name), state_dir):
        return False
    return attempt is None or found.get(env.ATTEMPT.name) == str(attempt)


def stop_worker(
    pid: int,
    run_id: str,
    task_id: str,
    *,
    attempt: int | None = None,
    state_dir: str | None = None,
    grace: float = DEFAULT_GRACE,
) -> Stopped:
    """SIGTERM the worker's process group and every other process of its tree (crew.procs.tree:
    what it started, even in a session of its own), wait up to `grace` seconds for them to exit,
    then SIGKILL what is left. The outcome is the worker's own."""
    try:
        ours = is_worker(pid, run_id, task_id, attempt, state_dir=state_dir)
    except PermissionError:
        return Stopped(task_id, pid, Stop.DENIED)
    group = cgroup.crew_cgroup_of(pid, f"{run_id}-{task_id}-") if ours else None
    root = pid if ours else None
    owner = tree.Owner(run_id, task_id, attempt, root=root, cgroup=group, state_dir=state_dir)
    waiter = _ExitWaiter(pid) if ours else None
    try:
        signalled = ours and signal_group(pid, signal.SIGTERM)
        left = tree.signal_tree(owner, signal.SIGTERM)  # what the worker started: its own or not
        if not signalled:
            if left:
                _wait_tree(owner, grace)
            tree.signal_tree(owner, signal.SIGKILL)
            return Stopped(task_id, pid, Stop.NOT_OURS if is_alive(pid) else Stop.GONE)
        assert waiter is not None
        deadline = time.monotonic() + grace
        exited = waiter.wait(grace)
        _wait_tree(owner, deadline - time.monotonic())
        if is_worker(pid, run_id, task_id, attempt, state_dir=state_dir):
            signal_group(pid, signal.SIGKILL)
        if group is not None:
            group.kill()
        tree.signal_tree(owner, signal.SIGKILL)  # stragglers of the group and the tree, if any
        if exited:
            return Stopped(task_id, pid, Stop.TERMINATED)
        waiter.wait(grace)
        return Stopped(task_id, pid, Stop.KILLED)
    finally:
        if waiter is not None:
            waiter.close()


def _wait_tree(owner: tree.Owner, timeout: float) -> None:
    """Wait up to `timeout` seconds for the task's processes to exit (checked a few times a
    second: they are not our children, and there may be many)."""
    deadline = time.monotonic() + timeout
    while tree.remaining(owner) and time.monotonic() < deadline:
        time.sleep(0.05)


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


class _ExitWaiter:
    """Waits for a process that is not our child to exit: a pidfd where the kernel has them."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.fd: int | None = None
        with contextlib.suppress(OSError, AttributeError):
            self.fd = os.pidfd_open(pid)

    def wait(self, timeout: float) -> bool:
        """True once the process has exited (a zombie waiting for its parent counts)."""
        if self.fd is not None:
            ready, _, _ = select.select([self.fd], [], [], timeout)
            return bool(ready) or not is_alive(self.pid)
        deadline = time.monotonic() + timeout
        while is_alive(self.pid):  # no pidfd (old kernel): check a few times a second
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)
        return True

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def raise_open_files() -> None:
    """Allow this process as many descriptors as the system lets it have: a leader holds pipes
    to every worker (four a local one, up to eight a remote one), and a soft limit of 1024 would
    hold back a crew of a few hundred."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
