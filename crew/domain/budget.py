"""What agents spend, and the limits on it.

Adapters report what each model turn cost (`agent.usage`); the task keeps the total. A task that
reaches one of its limits — its agent's `maxTurns`, `maxTokens` or `maxCostUsd` in crew.toml, or
one raised for it — is paused before it spends more: in the middle of a turn, when its agent
reports usage as it goes (pi, Codex), the leader interrupts the agent; after a turn (Claude Code
reports usage only then), the agent is given no more work. Then crew asks a need_confirmation
question of its own, "raise the limit to …?". A yes raises the limit
and tells the agent to go on; anything else flags the task needs_review, its agent left idle, for
a person to look at (a respond then sends the agent on; a cancel ends it). A task already at a
limit when its next attempt would start (a resumed run, a retry: what it spent is the task's, over
every attempt) asks before the attempt starts, since a started agent begins to spend at once: a
yes starts it, anything else cancels the task. autoRespond rules answer these questions like any
other, so an unattended run can say yes or no by itself.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from crew import ids
from crew.domain import mailbox, tasks
from crew.models import (
    LimitReached,
    Limits,
    MailboxMessage,
    Run,
    SupervisorContact,
    Task,
    Usage,
)
from crew.registry import ContactType, EventType, MessageData, MessageKind, MessageSource
from crew.store.txn import Txn
from crew.text import confirms


def _dollars(amount: float) -> str:
    """'$1.50', '$0.005': cents, and smaller amounts to a hundredth of a cent."""
    whole, _, part = f"{amount:,.4f}".rstrip("0").partition(".")
    return f"${whole}.{part.ljust(2, '0')}"


@dataclass(frozen=True)
class _Limit:
    key: str
    """Its crew.toml key."""
    field: str
    """Its field of Limits."""
    reads: Callable[[float], str]
    """How an amount of it reads."""


_LIMITS = {
    limit.key: limit
    for limit in (
        _Limit("maxTurns", "max_turns", lambda n: f"{int(n):,} model turn{'s' * (n != 1)}"),
        _Limit("maxTokens", "max_tokens", lambda n: f"{int(n):,} tokens"),
        _Limit("maxCostUsd", "max_cost_usd", _dollars),
    )
}


@dataclass(frozen=True)
class Reached:
    """A limit a task reached: its key, the limit, what was used."""

    key: str
    limit: float
    used: float

    def raised(self) -> float:
        """What a yes raises it to: twice the limit, or the limit again above what was used."""
        more = max(self.limit * 2, self.used + self.limit)
        return round(more, 4) if self.key == "maxCostUsd" else int(more)


def spend(txn: Txn, task_id: str, used: Usage) -> Reached | None:
    """The task's agent spent `used`: add it to the task's total; the limit it has now reached,
    if any."""
    task = txn.task(task_id)
    total = (task.usage or Usage()).plus(used)
    updated = task.revised(usage=total)
    txn.record(
        EventType.AGENT_USAGE,
        task_id=task_id,
        message=f"{task_id} used {used.summary()} ({total.summary()} in all)",
        data={"turn": used.to_dict()},
        task=updated,
    )
    return reached(txn.run, updated)


def reached(run: Run, task: Task) -> Reached | None:
    """The first of the task's limits its usage has reached, if any."""
    usage = task.usage or Usage()
    used = {"max_turns": usage.turns, "max_tokens": usage.tokens, "max_cost_usd": usage.cost_usd}
    limits = limits_of(run, task)
    for each in _LIMITS.values():
        limit, spent = getattr(limits, each.field), used[each.field]
        if limit is not None and spent is not None and spent >= limit:
            return Reached(each.key, limit, spent)
    return None


def limits_of(run: Run, task: Task) -> Limits:
    """The task's limits: those raised for it, else its agent's."""
    agent = run.config.agents.get(task.agent)
    raised = task.limits or Limits()
    return Limits(
        **{
            each.field: getattr(raised, each.field) or getattr(agent, each.field, None)
            for each in _LIMITS.values()
        }
    )


def pause(
    txn: Txn, task_id: str, reached: Reached, *, interrupted: bool, before_start: bool = False
) -> SupervisorContact:
    """Ask whether the task may go on past the limit it reached (the task waits for the answer);
    `before_start`: its next attempt, about to start, waits for the answer instead."""
    what = _LIMITS[reached.key].reads
    to = reached.raised()
    go_on = "start its next attempt" if before_start else "go on"
    question = SupervisorContact(
        id=ids.new_contact_id(),
        task_id=task_id,
        type=ContactType.NEED_CONFIRMATION,
        prompt=f"{task_id} reached its limit of {what(reached.limit)} ({what(reached.used)} used)."
        f" Raise the limit to {what(to)} and {go_on}?",
        asked_at=txn.at,
        limit=LimitReached(
            key=reached.key, raise_to=to, interrupted=interrupted, before_start=before_start
        ),
    )
    txn.record(
        EventType.TASK_LIMIT_REACHED,
        task_id=task_id,
        message=f"{task_id} reached its limit of {what(reached.limit)}: "
        + ("its next attempt waits" if before_start else "paused"),
        data={"limit": reached.key, "value": reached.limit, "used": reached.used},
    )
    mailbox.contact(txn, question)
    tasks.wait(txn, question, unstarted=before_start)
    return question


def answered(txn: Txn, task_id: str, question: SupervisorContact, answer: MailboxMessage) -> None:
    """The answer to a limit question (recorded, the task running again, or queued for the
    attempt that waited for it): crew takes it, so it is delivered at once; a yes raises the
    limit, anything else flags the task (or cancels it, when no attempt was started)."""
    assert question.limit is not None
    task = txn.task(task_id)
    mailbox.deliver(txn, [answer], attempt=task.attempt)
    key = question.limit.key
    what = _LIMITS[key].reads
    if not confirms(answer.body):
        why = f"stopped at its limit ({key}): the answer was {answer.body.strip()!r}, not yes"
        if question.limit.before_start:  # no agent to leave idle
            tasks.cancel(txn, task_id, why, message=f"task {task_id} cancelled: {why}")
        else:
            tasks.flag(txn, task_id, why)
        return
    limits = (task.limits or Limits()).revised(**{_LIMITS[key].field: question.limit.raise_to})
    txn.record(
        EventType.TASK_LIMIT_RAISED,
        task_id=task_id,
        message=f"{task_id}'s limit raised to {what(question.limit.raise_to)}",
        data={"limit": key, "value": question.limit.raise_to},
        task=task.revised(limits=limits),
    )
    if question.limit.interrupted:
        text = (
            f"[crew] You were paused at your limit of {key}; it was raised to "
            f"{what(question.limit.raise_to)}. Go on with the task from where you stopped."
        )
        data: dict[str, Any] = {MessageData.SOURCE: MessageSource.LIMIT.value}
        go_on = mailbox.compose(txn, MessageKind.FOLLOW_UP, task_id, text, data)
        mailbox.post(txn, go_on, EventType.AGENT_FOLLOWED_UP, f"followUp {task_id}: go on")
