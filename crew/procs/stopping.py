"""Stopping a run's workers from outside the leader (a cancel, a resume): each pid checked to
be the task's worker before it is signalled, its process group, cgroup and process tree
signalled, and SIGKILL after a grace period. Apart from crew/procs/__init__.py, whose
liveness checks every command makes, so that those that stop nothing never import the cgroup
and process-tree modules."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import time
from collections.abc import Sequence

from crew import env
from crew.procs import DEFAULT_GRACE, Stop, Stopped, cgroup, signal_group, tree, worker_environ
from crew.procs.liveness import is_alive


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


def stop_workers(
    run_id: str,
    targets: Sequence[tuple[str, int, int | None]],
    *,
    state_dir: str | None = None,
    grace: float = DEFAULT_GRACE,
) -> list[Stopped]:
    """Stop each `(task_id, pid, attempt)` worker of a run: SIGTERM its process group and every
    other process of its tree (crew.procs.tree: what it started, even in a session of its own),
    wait up to `grace` seconds for them to exit, then SIGKILL what is left. Every worker gets its
    SIGTERM before any is waited for, and all are waited for together: stopping twenty workers
    that each take a while to save their work takes one grace period, not twenty. Each outcome
    is the worker's own."""
    stops = [
        _Stopping(run_id, task_id, pid, attempt, state_dir) for task_id, pid, attempt in targets
    ]
    try:
        deadline = time.monotonic() + grace
        _await_exits(stops, deadline)
        for stop in stops:
            stop.kill()
        _await_exits([s for s in stops if s.outcome is Stop.KILLED], time.monotonic() + grace)
        return [Stopped(s.task_id, s.pid, s.outcome) for s in stops]
    finally:
        for stop in stops:
            stop.close()


class _Stopping:
    """One worker being stopped: proven to be the task's, then sent SIGTERM (it and its tree)."""

    def __init__(
        self, run_id: str, task_id: str, pid: int, attempt: int | None, state_dir: str | None
    ) -> None:
        self.run_id, self.task_id, self.pid, self.attempt = run_id, task_id, pid, attempt
        self.state_dir = state_dir
        self.owner: tree.Owner | None = None
        self.group: cgroup.Cgroup | None = None
        self.waiter: _ExitWaiter | None = None
        self.signalled = self.left = self.exited = False
        self.outcome = Stop.GONE
        try:
            ours = self._is_it()
        except PermissionError:
            self.outcome = Stop.DENIED
            return
        if ours:
            self.group = cgroup.crew_cgroup_of(pid, f"{run_id}-{task_id}-")
            self.waiter = _ExitWaiter(pid)
        self.owner = tree.Owner(
            run_id, task_id, attempt, root=pid if ours else None, cgroup=self.group,
            state_dir=state_dir,
        )  # fmt: skip
        self.signalled = ours and signal_group(pid, signal.SIGTERM)
        #: What the worker started was signalled too (its own or not).
        self.left = bool(tree.signal_tree(self.owner, signal.SIGTERM))
        if self.signalled:
            self.outcome = Stop.TERMINATED

    def _is_it(self) -> bool:
        return is_worker(
            self.pid, self.run_id, self.task_id, self.attempt, state_dir=self.state_dir
        )

    def waiting(self) -> bool:
        """Whether anything of it is still to be waited for."""
        if self.owner is None:
            return False
        if self.signalled and not self.exited:
            return True
        return (self.left or self.signalled) and bool(tree.remaining(self.owner))

    def kill(self) -> None:
        """SIGKILL what is left of it, once the grace period is over."""
        if self.owner is None:
            return
        if not self.signalled:
            tree.signal_tree(self.owner, signal.SIGKILL)
            self.outcome = Stop.NOT_OURS if is_alive(self.pid) else Stop.GONE
            return
        if self._is_it():
            signal_group(self.pid, signal.SIGKILL)
        if self.group is not None:
            self.group.kill()
        tree.signal_tree(self.owner, signal.SIGKILL)  # stragglers of the group and the tree
        if not self.exited:
            self.outcome = Stop.KILLED

    def close(self) -> None:
        if self.waiter is not None:
            self.waiter.close()


def _await_exits(stops: list[_Stopping], deadline: float) -> None:
    """Wait until `deadline` at most for the workers (their exits, through their pidfds) and
    their trees (checked a few times a second: they are not our children) to be gone."""
    while True:
        with tree.one_scan():  # every tree looked for in one reading of the processes
            waiting = [s for s in stops if s.waiting()]
        left = deadline - time.monotonic()
        if not waiting or left <= 0:
            return
        pending = [s for s in waiting if s.signalled and not s.exited]
        gone = _ExitWaiter.wait_any([s.waiter for s in pending], min(left, 0.05))
        for stop, exited in zip(pending, gone, strict=True):
            stop.exited = exited


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

    @staticmethod
    def wait_any(waiters: Sequence[_ExitWaiter | None], timeout: float) -> list[bool]:
        """Wait up to `timeout` for any of the processes to exit; whether each has."""
        fds = [w.fd for w in waiters if w is not None and w.fd is not None]
        if fds:
            select.select(fds, [], [], timeout)
        else:
            time.sleep(timeout)
        return [w is None or not is_alive(w.pid) for w in waiters]
