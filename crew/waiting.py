"""Blocking until something happens in a run, woken by file changes (never a sleep loop)."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import select
import time
from collections.abc import Callable
from enum import StrEnum

from crew import clock
from crew.config import HEARTBEAT_INTERVAL
from crew.domain.lease import LeaseState, read_lease
from crew.errors import CrewTimeout, Refused
from crew.models import MailboxMessage, Run, Task
from crew.procs.liveness import host
from crew.registry import LIVE_TASK_STATUSES, MessageStatus, TaskStatus
from crew.results.leading import Waited
from crew.results.sending import Sent
from crew.store import mailfile
from crew.store.runstore import RunStore
from crew.store.watch import Watcher, watch_folders

_REACHED = {
    MessageStatus.DELIVERED: frozenset({MessageStatus.DELIVERED, MessageStatus.ACKNOWLEDGED}),
    MessageStatus.ACKNOWLEDGED: frozenset({MessageStatus.ACKNOWLEDGED}),
}


def wait_for_message(
    store: RunStore,
    message: MailboxMessage,
    *,
    until: MessageStatus = MessageStatus.DELIVERED,
    timeout: float | None = None,
) -> MailboxMessage:
    """Block until `message` is delivered (or acknowledged); its latest state.

    Refused if it is rejected meanwhile, or its task ends with it delivered and not acknowledged
    (no acknowledgement can come); CrewTimeout (exit 3) when `timeout` passes first — the
    message stays pending either way.
    """
    wanted = _REACHED[until]
    deadline = None if timeout is None else time.monotonic() + timeout
    # Before the first read, so no change is missed: the mailbox, and the run (its task's end).
    watcher = watch_folders([store.paths.mailbox_dir, store.paths.root])
    follower = mailfile.Follower(store.paths.box(message.kind.box))
    latest = message
    try:
        while True:
            latest = _latest(follower, latest)
            if latest.status in wanted:
                return latest
            if latest.status is MessageStatus.REJECTED:
                raise Refused(f"Message {message.id} was rejected: {latest.reason}.")
            ended = _ended(store, latest) if latest.status is MessageStatus.DELIVERED else None
            if ended is not None:
                # Acknowledged just before the task ended? A change writes its mailbox lines
                # before its task files: the line is there once the end shows.
                latest = _latest(follower, latest)
                if latest.status in wanted:
                    return latest
                raise Refused(
                    f"Message {message.id} was delivered to {message.task_id}, which ended "
                    f"({ended}) without acknowledging it."
                )
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise CrewTimeout(_still(latest, until, timeout or 0.0))
            watcher.wait(remaining)
    finally:
        watcher.close()


def wait_for_sent(
    store: RunStore, sent: Sent, *, until: MessageStatus, timeout: float | None = None
) -> Sent:
    """`sent`, once its message is delivered (or acknowledged): see `wait_for_message`.

    A wait that times out, or a message rejected meanwhile, is part of the result
    (`wait_failed`, with the message as it is now), so the caller still learns what was sent.
    """
    try:
        message = wait_for_message(store, sent.message, until=until, timeout=timeout)
    except (CrewTimeout, Refused) as failed:
        message = store.fold(sent.message.kind.box).get(sent.message.id, sent.message)
        return dataclasses.replace(
            sent, message=message, waited_for=until.value, wait_failed=failed
        )
    return dataclasses.replace(sent, message=message, waited_for=until.value)


def _latest(follower: mailfile.Follower, message: MailboxMessage) -> MailboxMessage:
    """The message as the lines its mailbox file gained since the last look leave it."""
    for line in follower.poll().records:
        if line.id == message.id:
            message = line
    return message


def _ended(store: RunStore, message: MailboxMessage) -> TaskStatus | None:
    """How the task of `message` ended (None while it is live)."""
    status = store.state().task(message.task_id).status
    return status if status.terminal else None


def _still(message: MailboxMessage, until: MessageStatus, timeout: float) -> str:
    waited = clock.format_duration(timeout)
    if message.status is MessageStatus.PENDING:
        return (
            f"Message {message.id} to {message.task_id} is still pending after {waited}; "
            "it stays queued and is delivered as soon as the task can take it."
        )
    return (
        f"Message {message.id} to {message.task_id} was delivered but not {until} after {waited}."
    )


class Until(StrEnum):
    """What `crew wait --for` waits for."""

    STARTED = "started"  # some task (or the named one) runs, or ran before it ended
    WAITING = "waiting"  # some task (or the named one) waits for an answer
    DONE = "done"  # the run (or the named task) has ended


def wait_for_run(
    store: RunStore, until: Until, *, task_id: str | None = None, timeout: float | None = None
) -> Waited:
    """Block until the condition holds; returns the tasks that match it (and, waiting for the
    end, how the run or task ended: `Waited.exit_code` is `crew run`'s).

    CrewTimeout (exit 3) when `timeout` passes first; Refused (exit 4) when it can no longer
    hold: a run or task that ended without starting or asking what was waited for, or a run
    whose leader is gone (it cannot progress until one leads it again).
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    watcher = watch_folders([store.paths.root])  # before the first read: no change missed
    leader = LeaderWatch(store)
    try:
        while True:
            state = store.state()
            tasks = [state.task(task_id)] if task_id is not None else state.task_list()
            ended = tasks[0].status.terminal if task_id is not None else state.run.status.terminal
            status = tasks[0].status if task_id is not None else state.run.status
            if until is Until.DONE:
                if ended:
                    return Waited(store.run_id, until.value, tasks, ended=status)
                matching = []
            else:
                matching = [t for t in tasks if _MATCHES[until](t)]
            if matching:
                return Waited(store.run_id, until.value, matching)
            what = f"task {task_id}" if task_id else f"run {store.run_id}"
            if ended:
                raise Refused(f"{what.capitalize()} ended ({status}) without {_NEVER[until]}.")
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise CrewTimeout(
                    f"Timed out after {clock.format_duration(timeout or 0)} waiting for {what} "
                    f"{_GOALS[until]}."
                )
            leader.pause(watcher, state.run, remaining)
    finally:
        watcher.close()
        leader.close()


def _started(task: Task) -> bool:
    """Whether a task runs, or ran before it ended (one cancelled in the queue never ran)."""
    return task.status in LIVE_TASK_STATUSES or (task.status.terminal and task.attempt > 0)


def _waiting(task: Task) -> bool:
    """Waiting, or flagged for waiting too long (`needs_review`) with its question still open."""
    return task.status is TaskStatus.WAITING or (
        task.contact is not None and not task.status.terminal
    )


_MATCHES: dict[Until, Callable[[Task], bool]] = {Until.STARTED: _started, Until.WAITING: _waiting}
_GOALS = {Until.STARTED: "to start", Until.WAITING: "to wait for an answer", Until.DONE: "to end"}
_NEVER = {Until.STARTED: "starting", Until.WAITING: "waiting for an answer"}


#: How long a waiter gives a run without a readable lease to get one before it looks again: a
#: run is made before its leader takes the lease; a heartbeat is rewritten every second.
_SETTLE = HEARTBEAT_INTERVAL


class LeaderWatch:
    """The run's leader, for a waiter: a dead one is an error, noticed as it dies (a pidfd where
    the leader runs on this host) or as its heartbeat goes stale (a hung leader, another host)."""

    def __init__(self, store: RunStore) -> None:
        self._store = store
        self._pid: int | None = None
        self._pidfd: int | None = None
        #: When the leader's heartbeat goes stale unless it beats again (monotonic).
        self._stale_at: float | None = None
        self._looked_again = False
        self._known_gone = False

    def pause(self, watcher: Watcher, run: Run, timeout: float | None) -> None:
        """Until the run's files change, its leader dies, or `timeout` passes. A run without a
        live leader will not change: Refused — the second time in a row, as a leader that
        ended the run leaves just after, and the caller looks at the run once more first."""
        gone = self.gone(run)
        if gone is None:
            self._looked_again = False
            self.wait(watcher, timeout)
        elif self._looked_again:
            raise gone
        else:
            self._looked_again = True
            if not self._known_gone:  # no lease yet (a run being made), or one being rewritten
                watcher.wait(_SETTLE if timeout is None else min(timeout, _SETTLE))

    def gone(self, run: Run) -> Refused | None:
        """What to say when the run has no live leader (None while it has one)."""
        stale_after = run.config.crew.leader_stale_after
        lease = read_lease(self._store.paths, stale_after=stale_after)
        # A leader that was, and is no more: nothing to wait for before saying so.
        self._known_gone = lease.state is LeaseState.STALE and lease.leader is not None
        if lease.state is not LeaseState.ALIVE or lease.leader is None:
            why = lease.reason or "no leader has led it"
            return Refused(
                f"Run {run.run_id} has no leader ({why}): it cannot get there until one leads "
                "it again.",
                hint=f"`crew resume {run.run_id}` leads it again.",
            )
        info = lease.leader
        age = clock.seconds_since(info.heartbeat_at)
        self._stale_at = time.monotonic() + max(0.0, stale_after - age) + 0.05
        if info.pid != self._pid and info.host == host():
            self.close()
            self._pid = info.pid
            with contextlib.suppress(OSError, AttributeError):
                self._pidfd = os.pidfd_open(info.pid)
        return None

    def wakeups(self, run: Run) -> tuple[list[int], float | None]:
        """For a waiter on descriptors of its own (a live view), what wakes it as the run's
        leader dies: its pidfd, and the seconds until its heartbeat goes stale (neither once
        the run has no live leader, but a wake-up at once the first time it finds none: what
        the waiter read just before may have been read while the leader lived)."""
        if self.gone(run) is not None:
            first, self._looked_again = not self._looked_again, True
            return [], 0.0 if first else None
        self._looked_again = False
        stale = None if self._stale_at is None else max(0.0, self._stale_at - time.monotonic())
        return ([self._pidfd] if self._pidfd is not None else []), stale

    def wait(self, watcher: Watcher, timeout: float | None) -> None:
        """Until the run's files change, its leader dies, or `timeout` passes."""
        if self._stale_at is not None:
            until_stale = max(0.0, self._stale_at - time.monotonic())
            timeout = until_stale if timeout is None else min(timeout, until_stale)
        fd = watcher.fileno()
        if fd is None or self._pidfd is None:
            watcher.wait(timeout)
            return
        ready, _, _ = select.select([fd, self._pidfd], [], [], timeout)
        if fd in ready:
            watcher.wait(0)  # consume the notification

    def close(self) -> None:
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None
