"""The leader verbs: respond, steer, follow-up, nudge, cancel, handoff.

Each checks its gate under the run lock before anything is written, in this order: the task
exists, the caller owns the run (or forces it, which is recorded), an idempotency key replays its
first result, the run has not ended, the verb's own precondition, the body, backpressure. A
refusal writes nothing. None of them needs a running leader: they write the run's files, and the
leader (when one runs) delivers what they wrote.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from crew import ids
from crew.errors import Refused, UsageError
from crew.lease import LeaseState, read_lease
from crew.models import MailboxMessage, Run, SupervisorContact, Task
from crew.procs import DEFAULT_GRACE, Stopped, stop_worker
from crew.registry import (
    Box,
    ContactType,
    Direction,
    EventType,
    MessageKind,
    MessageStatus,
    RunStatus,
    TaskStatus,
)
from crew.run import RunStore, Txn

DEFAULT_NUDGE = "Please report your current status, blocker, or smallest next step."
LEADER = "leader"
DROPPED_REASON = "dropped: backpressure"

#: Keys crew itself puts in MailboxMessage.data.
DATA_KEY = "idempotencyKey"
DATA_CONTACT = "contactId"
DATA_CONTACT_TYPE = "contactType"
DATA_SOURCE = "source"
DATA_SESSION = "session"

_LIVE = frozenset({TaskStatus.RUNNING, TaskStatus.WAITING, TaskStatus.NEEDS_REVIEW})


@dataclass(frozen=True)
class Verb:
    """What distinguishes one sending verb from another."""

    name: str  # as typed on the command line
    kind: MessageKind
    event: EventType
    allowed: frozenset[TaskStatus]
    needs: str  # the precondition, in words, for the refusal message


RESPOND = Verb(
    "respond",
    MessageKind.RESPOND,
    EventType.TASK_RESPONDED,
    frozenset({TaskStatus.WAITING, TaskStatus.NEEDS_REVIEW}),
    "waiting for an answer (or flagged needs_review)",
)
STEER = Verb(
    "steer",
    MessageKind.STEER,
    EventType.AGENT_STEERED,
    _LIVE,
    "running or waiting",
)
FOLLOW_UP = Verb(
    "follow-up",
    MessageKind.FOLLOW_UP,
    EventType.AGENT_FOLLOWED_UP,
    frozenset({TaskStatus.QUEUED, *_LIVE}),
    "not finished",
)
NUDGE = Verb(
    "nudge",
    MessageKind.NUDGE,
    EventType.AGENT_NUDGED,
    _LIVE,
    "running or waiting",
)


@dataclass
class Sent:
    """The outcome of a sending verb."""

    run_id: str
    message: MailboxMessage
    #: True when an idempotency key matched an earlier call: nothing was written.
    replayed: bool = False
    #: Older pending messages rejected to make room (backpressure).
    dropped: list[MailboxMessage] = field(default_factory=list)
    #: Undelivered messages of the same class for the task, this one included.
    pending: int = 0
    warn_pending: int = 20
    max_pending: int = 50
    #: The owner session that --force acted over, if any.
    overridden: str | None = None
    #: Whether a leader is running to deliver the message.
    leader: LeaseState = LeaseState.ABSENT

    @property
    def over_warning(self) -> bool:
        return self.pending > self.warn_pending


# ----------------------------------------------------------------------------- the gate


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


def _check_live(run: Run) -> None:
    if run.status.terminal:
        raise Refused(f"Run {run.run_id} has ended ({run.status}): it takes no more messages.")


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


def _find_by_key(txn: Txn, key: str) -> MailboxMessage | None:
    for box in (Box.INBOX, Box.STEERING):
        for message in txn.messages(box).values():
            if message.data and message.data.get(DATA_KEY) == key:
                return message
    return None


def _replay(txn: Txn, key: str, verb: Verb, task_id: str, body: str) -> MailboxMessage | None:
    """The message an earlier call with this key sent, if it was the same request."""
    prior = _find_by_key(txn, key)
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


def _pending(txn: Txn, task_id: str, kinds: frozenset[MessageKind]) -> list[MailboxMessage]:
    """Undelivered messages of these kinds to a task, oldest first."""
    boxes = {kind.box for kind in kinds}
    return [
        m
        for box in Box
        if box in boxes
        for m in txn.messages(box).values()
        if m.task_id == task_id and m.kind in kinds and m.status is MessageStatus.PENDING
    ]


def _backpressure_class(kind: MessageKind) -> frozenset[MessageKind]:
    if kind in {MessageKind.STEER, MessageKind.NUDGE}:
        return frozenset({MessageKind.STEER, MessageKind.NUDGE})
    return frozenset({kind})


def _make_room(txn: Txn, task_id: str, kind: MessageKind) -> tuple[list[MailboxMessage], int]:
    """Drop the oldest pending messages beyond the cap; returns them and the cap."""
    limits = txn.run.config.limits
    if kind is MessageKind.FOLLOW_UP:
        cap = limits.max_pending_follow_ups
    elif kind in {MessageKind.STEER, MessageKind.NUDGE}:
        cap = limits.max_pending_steers
    else:
        return [], 0  # answers are never dropped
    pending = _pending(txn, task_id, _backpressure_class(kind))
    dropped = []
    for old in pending[: max(0, len(pending) - cap + 1)]:
        rejected = old.rejected(DROPPED_REASON, txn.at)
        txn.post(
            rejected,
            EventType.MAILBOX_DROPPED,
            message=f"dropped {old.kind} {old.id} to {task_id}: more than {cap} pending",
            data={"cap": cap},
        )
        dropped.append(rejected)
    return dropped, cap


# ----------------------------------------------------------------------------- sending


def _message(txn: Txn, verb: Verb, task_id: str, body: str, data: dict[str, Any]) -> MailboxMessage:
    return MailboxMessage(
        id=ids.new_message_id(),
        direction=Direction.INBOX,
        kind=verb.kind,
        from_=LEADER,
        to=task_id,
        task_id=task_id,
        body=body,
        status=MessageStatus.PENDING,
        priority=verb.kind.default_priority,
        sent_at=txn.at,
        data=data or None,
    )


def _send(
    store: RunStore,
    verb: Verb,
    task_id: str,
    body: str,
    *,
    session: str,
    force: bool,
    idempotency_key: str | None,
    extra: dict[str, Any] | None = None,
    prepare: Callable[[Txn, Task, str], dict[str, Any]] | None = None,
    finish: Callable[[Txn, Task, MailboxMessage], None] | None = None,
    epoch: int | None = None,
) -> Sent:
    """The shared gate and write of respond, steer, follow-up and nudge.

    `epoch` fences the write when the leader itself sends (automatic nudges and answers).
    """
    with store.transaction(epoch=epoch) as txn:
        task = txn.task(task_id)
        overridden = check_owner(txn.run, session, force)
        limits = txn.run.config.limits
        if idempotency_key is not None:
            prior = _replay(txn, idempotency_key, verb, task_id, body)
            if prior is not None:
                return Sent(txn.run.run_id, prior, replayed=True, leader=_lease(store, txn.run))
        _check_live(txn.run)
        if task.status not in verb.allowed:
            raise Refused(
                f"Task {task_id} is {task.status}: {verb.name} needs a task that is {verb.needs}.",
                hint=_status_hint(verb, task),
            )
        check_body(body, limits.max_body_bytes)
        data: dict[str, Any] = {DATA_SESSION: session, **(extra or {})}
        if prepare is not None:
            data.update(prepare(txn, task, body))
        if idempotency_key is not None:
            data[DATA_KEY] = idempotency_key
        dropped, cap = _make_room(txn, task_id, verb.kind)
        if overridden is not None:
            txn.record(
                EventType.OWNERSHIP_OVERRIDDEN,
                task_id=task_id,
                message=f"{session} used --force on a run owned by {overridden} ({verb.name})",
                data={"owner": overridden, "session": session, "verb": verb.name},
            )
        message = _message(txn, verb, task_id, body, data)
        if finish is not None:
            finish(txn, task, message)
        else:
            txn.post(message, verb.event, message=f"{verb.name} {task_id}: {_short(body)}")
        pending = len(_pending(txn, task_id, _backpressure_class(verb.kind)))
        run = txn.run
    return Sent(
        run.run_id,
        message,
        dropped=dropped,
        pending=pending,
        warn_pending=limits.warn_pending,
        max_pending=cap,
        overridden=overridden,
        leader=_lease(store, run),
    )


def _status_hint(verb: Verb, task: Task) -> str | None:
    if task.status is TaskStatus.QUEUED and verb is not FOLLOW_UP:
        return "It has not started yet; `crew follow-up` queues work for it."
    if task.status in {TaskStatus.RUNNING} and verb is RESPOND:
        return "It has not asked anything; `crew steer` redirects a running task."
    if task.status.terminal:
        return "It has finished; start a new run for more work."
    return None


def respond(
    store: RunStore,
    task_id: str,
    body: str,
    *,
    session: str,
    force: bool = False,
    idempotency_key: str | None = None,
    contact_id: str | None = None,
    epoch: int | None = None,
    source: str | None = None,
) -> Sent:
    """Answer a waiting task's open question (or clear a flagged task): the task runs again.

    `contact_id` pins the question being answered: if the worker has since asked another one,
    the answer is refused instead of answering the wrong question.
    """
    answered: dict[str, SupervisorContact] = {}

    def prepare(txn: Txn, task: Task, text: str) -> dict[str, Any]:
        contact = task.contact
        if contact_id is not None and (contact is None or contact.id != contact_id):
            current = f"its open question is {contact.id}" if contact else "it has no open question"
            raise Refused(
                f"Task {task.id} is not waiting on {contact_id}: {current}.",
                hint="The question was answered or replaced; look at `crew status`.",
            )
        if contact is None:
            return {}
        selection = contact.type is ContactType.NEED_SELECTION and contact.options
        if selection and text not in contact.options:
            raise UsageError(
                f"{text!r} is not one of the options of question {contact.id}: "
                f"{', '.join(contact.options)}."
            )
        answered[task.id] = contact
        return {DATA_CONTACT: contact.id, DATA_CONTACT_TYPE: contact.type.value}

    def finish(txn: Txn, task: Task, message: MailboxMessage) -> None:
        contact = answered.get(task.id)
        data: dict[str, Any] = {}
        if contact is not None:
            done = contact.model_copy(update={"answered_at": txn.at, "answer_id": message.id})
            data["contact"] = done.to_dict()
        what = f"question {contact.id}" if contact else "flag"
        txn.transition(
            task.id,
            TaskStatus.RUNNING,
            event_type=EventType.TASK_RESPONDED,
            message=f"answered {task.id}'s {what}: {_short(message.body)}",
            data=data,
            mail=message,
            contact=None,
            waiting_since=None,
        )

    return _send(
        store,
        RESPOND,
        task_id,
        body,
        session=session,
        force=force,
        idempotency_key=idempotency_key,
        extra={DATA_SOURCE: source} if source else None,
        prepare=prepare,
        finish=finish,
        epoch=epoch,
    )


def steer(
    store: RunStore,
    task_id: str,
    body: str,
    *,
    session: str,
    force: bool = False,
    idempotency_key: str | None = None,
) -> Sent:
    """Redirect a running or waiting task; delivered ahead of everything but answers."""
    return _send(
        store, STEER, task_id, body, session=session, force=force, idempotency_key=idempotency_key
    )


def follow_up(
    store: RunStore,
    task_id: str,
    body: str,
    *,
    session: str,
    force: bool = False,
    idempotency_key: str | None = None,
) -> Sent:
    """Queue more work for a task; delivered when it is running and not waiting on a question."""
    return _send(
        store,
        FOLLOW_UP,
        task_id,
        body,
        session=session,
        force=force,
        idempotency_key=idempotency_key,
    )


def nudge(
    store: RunStore,
    task_id: str,
    body: str | None = None,
    *,
    session: str,
    force: bool = False,
    idempotency_key: str | None = None,
    source: str = "nudge",
    epoch: int | None = None,
    count: bool = False,
) -> Sent:
    """Ask a task for a status report (default body: DEFAULT_NUDGE).

    `count` (the stall monitor's nudges) adds one to the task's `nudges`.
    """

    def counted(txn: Txn, task: Task, message: MailboxMessage) -> None:
        txn.record(
            NUDGE.event,
            message=f"nudge {task.id}: {_short(message.body)}",
            task=task.model_copy(update={"nudges": task.nudges + 1}),
            mail=message,
        )

    return _send(
        store,
        NUDGE,
        task_id,
        DEFAULT_NUDGE if body is None else body,
        session=session,
        force=force,
        idempotency_key=idempotency_key,
        extra={DATA_SOURCE: source},
        finish=counted if count else None,
        epoch=epoch,
    )


# ----------------------------------------------------------------------------- cancel


@dataclass
class Cancelled:
    """The outcome of a cancel."""

    run_id: str
    task_id: str | None
    #: Tasks this cancel ended (dependents cancelled with them included).
    tasks: list[str] = field(default_factory=list)
    #: Pending messages rejected because their task ended.
    rejected: list[MailboxMessage] = field(default_factory=list)
    #: Worker processes this cancel signalled, and how each one ended.
    stopped: list[Stopped] = field(default_factory=list)
    #: Set when there was nothing to cancel: the run (or task) had already ended.
    already: str | None = None
    run_status: RunStatus = RunStatus.RUNNING
    overridden: str | None = None

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "runId": self.run_id,
            "task": self.task_id,
            "cancelled": self.tasks,
            "rejected": [m.id for m in self.rejected],
            "stopped": [
                {"task": s.task_id, "pid": s.pid, "outcome": s.outcome.value} for s in self.stopped
            ],
            "runStatus": self.run_status.value,
        }
        if self.already:
            data["already"] = self.already
        return data


def cancel(
    store: RunStore,
    task_id: str | None = None,
    *,
    session: str,
    force: bool = False,
    grace: float = DEFAULT_GRACE,
) -> Cancelled:
    """Cancel one task or the whole run, reject what was pending for it, stop its workers."""
    targets: list[tuple[str, int]] = []
    with store.transaction() as txn:
        task = txn.task(task_id) if task_id is not None else None
        overridden = check_owner(txn.run, session, force)
        result = Cancelled(txn.run.run_id, task_id, run_status=txn.run.status)
        if txn.run.status.terminal:
            result.already = f"run {txn.run.run_id} already ended ({txn.run.status})"
            return result
        if task is not None and task.status.terminal:
            result.already = f"task {task.id} already ended ({task.status})"
            return result
        if overridden is not None:
            txn.record(
                EventType.OWNERSHIP_OVERRIDDEN,
                task_id=task_id,
                message=f"{session} used --force on a run owned by {overridden} (cancel)",
                data={"owner": overridden, "session": session, "verb": "cancel"},
            )
        chosen = [task] if task is not None else txn.state.task_list()
        txn.cancelling_run = task is None
        reason = f"cancelled by {session}"
        for each in chosen:
            if each.status.terminal:
                continue
            if each.status in _LIVE and each.pid is not None:
                targets.append((each.id, each.pid))
            txn.transition(
                each.id,
                TaskStatus.CANCELLED,
                message=f"task {each.id} {reason}",
                ended_at=txn.at,
                error=reason,
            )
        txn.settle()
        result.tasks = [t.id for t in txn.ended_tasks()]
        result.rejected = list(txn.rejected)
        result.overridden = overridden
        run_id = txn.run.run_id
    result.run_status = store.state().run.status
    result.stopped = [stop_worker(pid, run_id, tid, grace=grace) for tid, pid in targets]
    return result


# ----------------------------------------------------------------------------- handoff


@dataclass
class HandedOff:
    run_id: str
    previous: str
    owner: str
    overridden: str | None = None

    @property
    def changed(self) -> bool:
        return self.previous != self.owner

    def to_json(self) -> dict[str, Any]:
        return {"runId": self.run_id, "previous": self.previous, "owner": self.owner}


def handoff(store: RunStore, new_owner: str, *, session: str, force: bool = False) -> HandedOff:
    """Transfer ownership of a run to another session (the owner, or anyone with --force)."""
    ids.check_session(new_owner)
    with store.transaction() as txn:
        overridden = check_owner(txn.run, session, force)
        _check_live(txn.run)
        previous = txn.run.owner_session_id
        if previous == new_owner:
            return HandedOff(txn.run.run_id, previous, new_owner)
        if overridden is not None:
            txn.record(
                EventType.OWNERSHIP_OVERRIDDEN,
                message=f"{session} used --force on a run owned by {overridden} (handoff)",
                data={"owner": overridden, "session": session, "verb": "handoff"},
            )
        txn.update_run(
            EventType.OWNERSHIP_TRANSFERRED,
            message=f"ownership passed from {previous} to {new_owner} by {session}",
            data={"from": previous, "to": new_owner, "by": session},
            owner_session_id=new_owner,
        )
        return HandedOff(txn.run.run_id, previous, new_owner, overridden)


# ----------------------------------------------------------------------------- helpers


def _lease(store: RunStore, run: Run) -> LeaseState:
    return read_lease(store.paths, stale_after=run.config.crew.leader_stale_after).state


def _short(text: str, limit: int = 80) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"
