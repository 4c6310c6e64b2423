"""The gate: what every change someone asks for must pass, under the run lock, before anything
is written. Checked in this order (SPEC §5):

1. the run exists (exit 5), and the task (exit 5);
2. the caller owns the run, or forces it, which is recorded (exit 4);
3. an idempotency key already used for the same request replays its first result (exit 0);
4. the run has not ended (exit 4);
5. the verb's own precondition: the task's status (exit 4);
6. the body is not empty and fits the size limit (exit 2);
7. backpressure: beyond the limit, the oldest pending message of the same class is dropped.

A refused request writes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from crew.domain import mailbox
from crew.errors import Refused, UsageError
from crew.models import MailboxMessage, Run, Task
from crew.registry import LIVE_TASK_STATUSES, EventType, MessageKind, TaskStatus
from crew.store.txn import Txn


@dataclass(frozen=True)
class Verb:
    """What distinguishes one sending verb from another."""

    name: str  # as typed on the command line
    noun: str  # what it sends, in words
    kind: MessageKind
    event: EventType
    allowed: frozenset[TaskStatus]
    needs: str  # the precondition, in words, for the refusal message


RESPOND = Verb(
    "respond",
    "answer",
    MessageKind.RESPOND,
    EventType.TASK_RESPONDED,
    frozenset({TaskStatus.WAITING, TaskStatus.NEEDS_REVIEW}),
    "waiting for an answer (or flagged needs_review)",
)
STEER = Verb(
    "steer",
    "steer",
    MessageKind.STEER,
    EventType.AGENT_STEERED,
    LIVE_TASK_STATUSES,
    "running or waiting",
)
FOLLOW_UP = Verb(
    "follow-up",
    "follow-up",
    MessageKind.FOLLOW_UP,
    EventType.AGENT_FOLLOWED_UP,
    frozenset({TaskStatus.QUEUED, *LIVE_TASK_STATUSES}),
    "not finished",
)
NUDGE = Verb(
    "nudge",
    "nudge",
    MessageKind.NUDGE,
    EventType.AGENT_NUDGED,
    LIVE_TASK_STATUSES,
    "running or waiting",
)

#: Kinds that share a backpressure limit: steers and nudges together, follow-ups alone.
_CLASSES = (
    frozenset({MessageKind.STEER, MessageKind.NUDGE}),
    frozenset({MessageKind.FOLLOW_UP}),
)


def check_owner(run: Run, session: str, force: bool) -> str | None:
    """Refuse a session that does not own the run, unless forced; returns the overridden owner."""
    if run.owner_session_id == session:
        return None
    if not force:
        raise Refused(
            f"Run {run.run_id} is owned by session {run.owner_session_id!r}, and you are "
            f"session {session!r}.",
            hint="Use --force to act anyway (it is recorded), or ask the owner to "
            f"`crew handoff {run.run_id} {session}`.",
        )
    return run.owner_session_id


def record_override(
    txn: Txn, owner: str, session: str, verb: str, *, task_id: str | None = None
) -> None:
    """`session` acted with --force on a run `owner` owns: say so in the event log."""
    txn.record(
        EventType.OWNERSHIP_OVERRIDDEN,
        task_id=task_id,
        message=f"{session} used --force on a run owned by {owner} ({verb})",
        data={"owner": owner, "session": session, "verb": verb},
    )


def check_live(run: Run) -> None:
    """Refuse a run that has ended."""
    if run.status.terminal:
        raise Refused(f"Run {run.run_id} has ended ({run.status}): it takes no more messages.")


def check_status(task: Task, verb: Verb) -> None:
    """Refuse a task whose status the verb cannot act on."""
    if task.status in verb.allowed:
        return
    hint = None
    if task.status is TaskStatus.QUEUED and verb is not FOLLOW_UP:
        hint = "It has not started yet; `crew follow-up` queues work for it."
    elif task.status is TaskStatus.RUNNING and verb is RESPOND:
        hint = "It has not asked anything; `crew steer` redirects a running task."
    elif task.status.terminal:
        hint = "It has finished; start a new run for more work."
    raise Refused(
        f"Task {task.id} is {task.status}: {verb.name} needs a task that is {verb.needs}.",
        hint=hint,
    )


def check_body(body: str, limit: int) -> str:
    """A body must have some text and fit the size limit (exit 2 otherwise)."""
    if not body.strip():
        raise UsageError("The message body is empty.")
    try:
        size = len(body.encode("utf-8"))
    except UnicodeEncodeError:
        raise UsageError("The message body is not valid UTF-8 text.") from None
    if size > limit:
        raise UsageError(
            f"The message body is {size} bytes; the limit is {limit} bytes.",
            hint="Write the content to a file and send its path instead.",
        )
    return body


def replay(txn: Txn, key: str, verb: Verb, task_id: str, body: str) -> MailboxMessage | None:
    """The message an earlier request with this idempotency key sent, if it was the same
    request (None if the key is new); a different request under the same key is refused."""
    prior = mailbox.with_key(txn, key)
    if prior is None:
        return None
    if prior.kind is not verb.kind or prior.task_id != task_id or prior.body != body:
        same_request = prior.kind is verb.kind and prior.task_id == task_id
        raise Refused(
            f"Idempotency key {key!r} was already used for a {prior.kind} to {prior.task_id} "
            f"({prior.id}){' with a different body' if same_request else ''}.",
            hint="Use a new key for a new message.",
        )
    return prior


def pressure_class(kind: MessageKind) -> frozenset[MessageKind]:
    """The kinds whose pending messages count against the same limit as `kind`."""
    return next((c for c in _CLASSES if kind in c), frozenset({kind}))


def limit_for(txn: Txn, kind: MessageKind) -> int | None:
    """How many messages of `kind`'s class may wait for a task (None: no limit)."""
    limits = txn.run.config.limits
    if kind is MessageKind.FOLLOW_UP:
        return limits.max_pending_follow_ups
    if kind in {MessageKind.STEER, MessageKind.NUDGE}:
        return limits.max_pending_steers
    return None  # answers are never dropped


def make_room(txn: Txn, task_id: str, kind: MessageKind) -> list[MailboxMessage]:
    """Backpressure: drop the oldest pending messages of `kind`'s class beyond the limit."""
    cap = limit_for(txn, kind)
    if cap is None:
        return []
    return mailbox.drop_oldest(txn, task_id, pressure_class(kind), cap)
