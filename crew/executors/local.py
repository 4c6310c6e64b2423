"""The local executor: workers are child processes of the leader, each in its own session and
process group, and in a cgroup of its own where the leader can make one (crew.procs)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from dataclasses import dataclass, field
from typing import BinaryIO

from crew import env
from crew.leader import spawn
from crew.leader.processes import STOP_GRACE
from crew.procs import signal_group, tree
from crew.procs.cgroup import Cgroup, CgroupHome


@dataclass
class LocalHandle:
    """A worker that is a child process of the leader."""

    process: subprocess.Popen[bytes]
    #: Its whole process tree (crew.procs.tree), its cgroup if it has one.
    owner: tree.Owner
    exit_fd: int | None = None
    node: str | None = field(default=None, init=False)

    @property
    def pid(self) -> int:
        return int(self.process.pid)

    @property
    def stdin(self) -> BinaryIO | None:
        return self.process.stdin  # type: ignore[return-value]  # a raw pipe: bufsize=0

    @property
    def stdout(self) -> BinaryIO | None:
        return self.process.stdout  # type: ignore[return-value]  # a raw pipe: bufsize=0

    @property
    def stderr(self) -> BinaryIO | None:
        return self.process.stderr  # type: ignore[return-value]  # a raw pipe: bufsize=0

    @property
    def lost(self) -> str | None:
        return None  # a child of the leader always has an exit status

    @property
    def failure(self) -> str | None:
        return None  # a command that cannot start fails in `start`

    def settle(self) -> bool:
        return True  # its pidfd becomes readable at its exit only

    def signal(self, sig: signal.Signals) -> None:
        """Signal its process group and every process of its tree (those that left the group
        too); SIGKILL empties its cgroup at once."""
        signal_group(self.pid, sig)
        if sig == signal.SIGKILL and self.owner.cgroup is not None:
            self.owner.cgroup.kill()
        tree.signal_tree(self.owner, sig)

    def poll(self) -> int | None:
        return self.process.poll()

    def wait(self) -> int:
        return int(self.process.wait())

    def leftovers(self, now: float) -> tree.Leftovers | None:
        """SIGTERM what it left running (SIGKILL after the grace); its cgroup goes once empty."""
        owner = self.owner
        if tree.signal_tree(owner, signal.SIGTERM):
            return tree.Leftovers(owner, now + STOP_GRACE)
        if owner.cgroup is not None and not owner.cgroup.remove():
            return tree.Leftovers(owner, now, killed=True)
        return None

    def close(self) -> None:
        for stream in (self.process.stdin, self.process.stdout, self.process.stderr):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
        if self.exit_fd is not None:
            os.close(self.exit_fd)
            self.exit_fd = None


class LocalExecutor:
    """Starts workers on the leader's machine."""

    name = "local"

    def __init__(self) -> None:
        self._cgroups = CgroupHome.find()
        #: Whether a worker was seen born in its group. Until then each new worker is checked,
        #: and moved there if it is not; after, the birth in the group is trusted (the same
        #: permissions let the leader enter every group): the check costs a read of /proc.
        self._joins_itself = False
        if self._cgroups is not None:
            self._cgroups.clear_dead()  # what leaders that died (kill -9, a power cut) left

    def start(
        self,
        launch: spawn.Launch,
        *,
        merge_stderr: bool,
        task_id: str,
        attempt: int,
        resources: dict[str, float],
    ) -> LocalHandle:
        """Start a worker here (`resources` place workers on a cluster; here they are moot)."""
        group = self._new_cgroup(launch, task_id, attempt)
        try:
            process = spawn.start(launch, merge_stderr=merge_stderr, group=group)
        except BaseException:
            if group is not None:
                group.remove()
            raise
        exit_fd = None
        with contextlib.suppress(OSError, AttributeError):
            exit_fd = os.pidfd_open(process.pid)
        if group is not None and not self._joins_itself and not self._in_group(group, process.pid):
            group.remove()  # the kernel would not have it there: its tree is found through /proc
            group = None
        run_id, state_dir = launch.env[env.RUN_ID.name], launch.env[env.STATE_DIR.name]
        owner = tree.Owner(
            run_id, task_id, attempt, root=process.pid, cgroup=group, state_dir=state_dir
        )
        return LocalHandle(process, owner, exit_fd)

    def close(self) -> None:
        """Nothing to let go of: the leader's children are its own."""

    def _in_group(self, group: Cgroup, pid: int) -> bool:
        """Whether the worker is in its group: it was born there (and so will every worker
        after it: crew/leader/spawn.py), or the leader moved it there (False: the kernel
        would not)."""
        if group.holds(pid):
            self._joins_itself = True
            return True
        return group.add(pid)

    def _new_cgroup(self, launch: spawn.Launch, task_id: str, attempt: int) -> Cgroup | None:
        """A cgroup of its own for a worker, where the leader can make one (else None: the
        worker's tree is then found through /proc alone)."""
        if self._cgroups is None:
            return None
        run_id = launch.env[env.RUN_ID.name]
        return self._cgroups.make(f"{run_id}-{task_id}-{attempt}-{os.getpid()}")
