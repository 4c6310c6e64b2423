"""A worker's whole process tree: the worker, everything it started, and everything those started,
whatever they did to leave its process group (`setsid`, a daemon's double fork).

A task's processes are found three ways, and each process is signalled only once it is proven to
be that task's:

- its cgroup, where crew made one for the worker (crew.procs.cgroup): the kernel keeps every
  descendant in it, and membership is the proof; then nothing else is looked at (the two ways
  below read every process on the machine, which a leader of many workers cannot afford at
  each worker's exit);
- where there is no cgroup, the processes descended from the worker by parent pid, while the
  worker (or the parent) lives;
- and every process whose `/proc/<pid>/environ` carries the run's CREW_RUN_ID and the task's
  CREW_TASK_ID (and CREW_ATTEMPT, when one is given, and the run's CREW_STATE_DIR, since another
  home may hold a run of the same id): a child inherits them, so a daemon that was reparented to
  init is still found.

A process is opened as a pidfd before it is checked, and the signal goes through that pidfd, so a
pid the kernel reuses between the check and the signal is never touched. Only a descendant that
cleared its environment and left its parent, on a system where crew cannot make cgroups, escapes.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

from crew import env
from crew.procs.cgroup import Cgroup
from crew.procs.liveness import is_zombie, parent_of


@dataclass(frozen=True)
class Owner:
    """Whose processes to look for: a run's task (one attempt of it, when `attempt` is set), the
    worker's pid when known, and its cgroup when it has one."""

    run_id: str
    task_id: str
    attempt: int | None = None
    root: int | None = None
    cgroup: Cgroup | None = None
    #: The run's state folder: run ids are unique in a home only, so two homes on one machine
    #: can hold runs of the same id (and task ids); the folder tells their workers apart.
    state_dir: str | None = None

    def marks(self, environ: dict[bytes, bytes]) -> bool:
        """Whether an environment carries this task's ids (and its run's state folder)."""
        if environ.get(env.RUN_ID.name.encode()) != self.run_id.encode():
            return False
        if environ.get(env.TASK_ID.name.encode()) != self.task_id.encode():
            return False
        wanted = str(self.attempt).encode() if self.attempt is not None else None
        if wanted is not None and environ.get(env.ATTEMPT.name.encode()) != wanted:
            return False
        found = environ.get(env.STATE_DIR.name.encode())
        return self.state_dir is None or same_folder(found, self.state_dir)


def same_folder(found: bytes | str | None, expected: str) -> bool:
    """Whether a worker's CREW_STATE_DIR names the folder `expected` (through links too)."""
    if found is None:
        return False
    text = os.fsdecode(found)
    return text == expected or os.path.realpath(text) == os.path.realpath(expected)


@dataclass
class Leftovers:
    """What an ended worker left running (a daemon, a `setsid` child): SIGTERM was sent, SIGKILL
    falls due at `kill_at`; then its cgroup, if any, is removed once empty."""

    owner: Owner
    kill_at: float
    killed: bool = False

    def escalate(self, now: float) -> bool:
        """SIGKILL them once due, then remove the cgroup; True once nothing is left to do."""
        if now < self.kill_at:
            return False
        if not self.killed:
            self.killed = True
            if self.owner.cgroup is not None:
                self.owner.cgroup.kill()
            signal_tree(self.owner, signal.SIGKILL)
            self.kill_at = now + 0.1  # the kernel takes a moment to empty the group
            return self.owner.cgroup is None
        done = self.owner.cgroup is None or self.owner.cgroup.remove()
        self.kill_at = now + 1.0
        return done or not remaining(self.owner)

    def finish(self) -> None:
        """SIGKILL them now and remove the cgroup (waiting a moment for the kernel to empty it)."""
        if not self.killed:
            self.kill_at = 0.0
            self.escalate(0.0)
        deadline = time.monotonic() + 1.0
        while not self.escalate(math.inf) and time.monotonic() < deadline:
            time.sleep(0.02)


def signal_tree(owner: Owner, sig: signal.Signals) -> set[int]:
    """Send `sig` to every live process proven to be the task's; the pids signalled. Each is
    proven before any is signalled: a parent that dies of the signal would break the proof of a
    child that is the task's through it."""
    proven: dict[int, int] = {}
    try:
        for pid in sorted(candidates(owner) - {os.getpid()}):
            try:
                fd = os.pidfd_open(pid)
            except OSError:
                continue  # gone, or not ours to open
            if _proven(owner, pid):
                proven[pid] = fd
            else:
                os.close(fd)
        signalled: set[int] = set()
        for pid, fd in proven.items():
            with contextlib.suppress(OSError):  # exited meanwhile, or not ours to signal
                signal.pidfd_send_signal(fd, sig)
                signalled.add(pid)
        return signalled
    finally:
        for fd in proven.values():
            os.close(fd)


def remaining(owner: Owner) -> set[int]:
    """The task's processes still alive (zombies not counted)."""
    found = candidates(owner) - {os.getpid()}  # `crew cancel` run by the worker itself
    return {pid for pid in found if _proven(owner, pid) and not is_zombie(pid)}


def candidates(owner: Owner) -> set[int]:
    """Pids that may be the task's (each still to be proven). With a cgroup, its members: the
    kernel keeps every descendant of the worker in it, so nothing else need be looked at (a scan
    of every process on the machine, per worker exit, made a leader of N workers O(N²))."""
    if owner.cgroup is not None:
        return set(owner.cgroup.pids())
    # A worker already reaped (the usual case: it exited) is no process's parent any more: its
    # children went to init at its exit. Then only the marks can find them, and no parent pid
    # need be read (half of what this scan costs).
    root = owner.root if owner.root is not None and parent_of(owner.root) is not None else None
    if root is None and _scan.active:
        return {pid for pid in _crew_processes() if _environ_marks(owner, pid)}
    found: set[int] = set()
    parents: dict[int, list[int]] = {}
    for pid in _pids():
        if root is not None and (ppid := parent_of(pid)) is not None:
            parents.setdefault(ppid, []).append(pid)
        if _environ_marks(owner, pid):
            found.add(pid)
    if root is not None:
        found |= _descendants(root, parents)
    return found


class _Scan(threading.local):
    """Within `one_scan()` (on this thread): the processes that carry a crew run id, once read."""

    active = False
    seen: list[int] | None = None


_scan = _Scan()


@contextlib.contextmanager
def one_scan() -> Iterator[None]:
    """Within the block, the leftovers of workers already reaped are looked for in one reading
    of the machine's processes, shared: a leader woken by many exits at once reads every
    process once, not once per exit. A process born later descends from one found (its
    environment is inherited), which is signalled, and looked at again when its SIGKILL is due."""
    if _scan.active:
        yield
        return
    _scan.active, _scan.seen = True, None
    try:
        yield
    finally:
        _scan.active, _scan.seen = False, None


def _crew_processes() -> list[int]:
    if _scan.seen is None:
        _scan.seen = [pid for pid in _pids() if _carries_a_run(pid)]
    return _scan.seen


def _proven(owner: Owner, pid: int) -> bool:
    """Whether `pid` is provably the task's now: in its cgroup, carrying its ids, or descended
    from its worker (itself proven by its ids)."""
    if owner.cgroup is not None and owner.cgroup.holds(pid):
        return True
    if _environ_marks(owner, pid):
        return True
    if owner.root is None or not _environ_marks(owner, owner.root):
        return False
    ancestor = parent_of(pid)
    for _ in range(4096):  # a parent chain is finite; the bound guards against a pid cycle
        if ancestor is None or ancestor <= 1:
            return False
        if ancestor == owner.root:
            return True
        ancestor = parent_of(ancestor)
    return False


def _descendants(root: int, children: dict[int, list[int]]) -> set[int]:
    found: set[int] = set()
    stack = [root]
    while stack:
        for child in children.get(stack.pop(), []):
            if child not in found:
                found.add(child)
                stack.append(child)
    return found


def _pids() -> Iterator[int]:
    with contextlib.suppress(OSError):
        for name in os.listdir("/proc"):
            if name.isdigit():
                yield int(name)


def _carries_a_run(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            return env.RUN_ID.name.encode() + b"=" in handle.read()
    except OSError:
        return False


def _environ_marks(owner: Owner, pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            raw = handle.read()
    except OSError:
        return False
    if env.RUN_ID.name.encode() + b"=" + owner.run_id.encode() not in raw:
        return False  # most processes: no need to split their environment
    environ: dict[bytes, bytes] = {}
    for entry in raw.split(b"\0"):
        key, sep, value = entry.partition(b"=")
        if sep:
            environ[key] = value
    return owner.marks(environ)
