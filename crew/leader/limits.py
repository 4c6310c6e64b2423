"""The leader's side of a task's limits (crew/domain/budget.py has the rules): an idle agent
over one is given no more work until crew's question about it is answered, nor is an attempt
started for a task over one, and what an agent stopped at one had held for later is crew's
again."""

from __future__ import annotations

from crew.domain import budget, mailbox
from crew.leader.view import RunView
from crew.models import MailboxMessage, SupervisorContact, Task
from crew.registry import LIVE_TASK_STATUSES
from crew.store.txn import Txn


def carry_back(view: RunView, messages: list[MailboxMessage]) -> None:
    """Messages an agent held and gave back unread when its turn was stopped: pending again in
    crew, for after the answer (not for a task that has ended: what it was sent ends with it)."""
    live = [m for m in messages if view.state.task(m.task_id).status in LIVE_TASK_STATUSES]
    if live:
        with view.change() as txn:
            mailbox.carry_back(txn, live)


def pause_if_reached(view: RunView, task: Task) -> SupervisorContact | None:
    """Before an idle agent is given more work: crew's question, if its task reached a limit."""
    reached = budget.reached(view.state.run, task)
    if reached is None:
        return None
    with view.change() as txn:
        return budget.pause(txn, task.id, reached, interrupted=False)


def held_at_start(txn: Txn, task: Task) -> bool:
    """Before a task's next attempt starts: whether it already reached a limit (what it spent is
    the task's, over every attempt), and so waits on crew's question instead (recorded in
    `txn`)."""
    reached = budget.reached(txn.run, task)
    if reached is None:
        return False
    budget.pause(txn, task.id, reached, interrupted=False, before_start=True)
    return True
