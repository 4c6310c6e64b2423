"""A message's life: every change of a mailbox message is made here, over a transaction.

To a worker (inbound: respond and followUp in inbox.jsonl, steer and nudge in steering.jsonl):

    pending -> delivered -> acknowledged
    pending -> rejected     (its task ended, it was dropped by backpressure, or superseded)

From a worker (outbound, outbox.jsonl): contacts and reports are recorded `delivered`, since
they have reached the leader. A new attempt of a task is given again the steers and follow-ups
the previous attempt received: each goes back to `pending`, keeping its id (`carried` counts the
times), so however often a task restarts, a message stays one message.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from crew import ids
from crew.models import MailboxMessage, SupervisorContact, Task
from crew.protocol import Contact
from crew.registry import (
    INBOUND_BOXES,
    LEADER,
    ContactType,
    Direction,
    EventData,
    EventType,
    MessageData,
    MessageKind,
    MessageStatus,
    Priority,
)
from crew.store.txn import Txn
from crew.text import clip, short

DROPPED = "dropped: backpressure"
#: The attention decisions a message keeps in `data.decisions`: the latest ones.
DECISIONS_KEPT = 16
SUPERSEDED = "superseded: worker restarted"
#: How much of a progress line the outbox and the event log keep (its log keeps it whole): a
#: worker may print thousands, each up to 8 KiB; status and note reports, which a person asked
#: for or is meant to read, are kept up to that limit.
PROGRESS_EXCERPT = 240

#: What a new attempt is given again of what the last one received.
_CARRIED = frozenset({MessageKind.STEER, MessageKind.FOLLOW_UP})
#: Messages that belong to the attempt they were sent to: a new attempt never sees them.
_OF_ONE_ATTEMPT = frozenset({MessageKind.RESPOND, MessageKind.NUDGE})


# ----------------------------------------------------------------------------- reading


def inbound(txn: Txn, message_id: str) -> MailboxMessage | None:
    """The current state of a message to a worker, by id."""
    for box in INBOUND_BOXES:
        found = txn.message(box, message_id)
        if found is not None:
            return found
    return None


def to_task(txn: Txn, task_id: str) -> list[MailboxMessage]:
    """Every message to a task, in the order written (inbox first, then steering)."""
    return [m for box in INBOUND_BOXES for m in txn.of_task(box, task_id)]


def pending(txn: Txn, task_id: str, kinds: Iterable[MessageKind]) -> list[MailboxMessage]:
    """Undelivered messages of these kinds to a task, oldest first."""
    wanted = frozenset(kinds)
    boxes = {kind.box for kind in wanted}
    return [
        m
        for box in INBOUND_BOXES
        if box in boxes
        for m in txn.pending(box, task_id)
        if m.kind in wanted
    ]


def pending_count(txn: Txn, task_id: str, kinds: Iterable[MessageKind]) -> int:
    """How many undelivered messages of these kinds wait for a task."""
    wanted = frozenset(kinds)
    return sum(
        txn.pending_count(box, task_id, wanted)
        for box in INBOUND_BOXES
        if any(kind.box is box for kind in wanted)
    )


def with_key(txn: Txn, key: str) -> MailboxMessage | None:
    """The message sent with this idempotency key, if any."""
    for box in INBOUND_BOXES:
        found = txn.keyed(box, key)
        if found is not None:
            return found
    return None


def rejected_in(txn: Txn) -> list[MailboxMessage]:
    """The messages this transaction rejected."""
    return [m for m in txn.staged_mail() if m.status is MessageStatus.REJECTED]


# ----------------------------------------------------------------------------- to a worker


def compose(
    txn: Txn,
    kind: MessageKind,
    task_id: str,
    body: str,
    data: dict[str, Any],
    *,
    sender: str = LEADER,
) -> MailboxMessage:
    """A new message to a task, pending until the leader delivers it (not yet recorded);
    `sender` is its `from`: a task, when that task's worker sent it."""
    message = _new(txn, kind, task_id, body, data, MessageStatus.PENDING, kind.default_priority)
    return message if sender == LEADER else message.model_copy(update={"from_": sender})


def post(
    txn: Txn, message: MailboxMessage, event: EventType, text: str | None = None
) -> MailboxMessage:
    """Record a new message (one the verbs composed), with the event that says who sent it."""
    txn.record(event, message=text or f"{message.kind} {message.task_id}", mail=message)
    return message


def deliver(txn: Txn, messages: Iterable[MailboxMessage], *, attempt: int) -> None:
    """The leader wrote these messages to the worker of `attempt`: they are delivered.

    A message that changed meanwhile (rejected by a cancel, say) keeps its new status.
    """
    for message in messages:
        current = inbound(txn, message.id) or message
        if current.status is not MessageStatus.PENDING:
            continue
        txn.record(
            EventType.MAILBOX_DELIVERED,
            message=f"delivered {message.kind} {message.id} to {message.task_id}",
            mail=current.model_copy(
                update={
                    "status": MessageStatus.DELIVERED,
                    "delivered_at": txn.at,
                    "data": {**(current.data or {}), MessageData.ATTEMPT: attempt},
                }
            ),
            was=current,
        )


def acknowledge(txn: Txn, task_id: str, message_id: str) -> MailboxMessage | None:
    """The worker says it has taken a message in hand (`@supervisor ack: msg_…`)."""
    message = inbound(txn, message_id)
    if message is None or message.task_id != task_id:
        return None
    if message.status not in {MessageStatus.PENDING, MessageStatus.DELIVERED}:
        return None
    acknowledged = message.model_copy(
        update={
            "status": MessageStatus.ACKNOWLEDGED,
            "delivered_at": message.delivered_at or txn.at,
            "acknowledged_at": txn.at,
        }
    )
    txn.record(
        EventType.MAILBOX_ACKNOWLEDGED,
        message=f"{task_id} acknowledged {message.kind} {message.id}",
        mail=acknowledged,
        was=message,
    )
    return acknowledged


def decide(txn: Txn, task_id: str, decision: dict[str, Any]) -> None:
    """Record a worker's attention decision; the message it is about keeps it too (in
    `data.decisions`), so `crew mailbox` shows each message's whole life without the event log.
    """
    action = short(str(decision.get("action", "?")), 20)
    about = decision.get("item")
    message = inbound(txn, about) if isinstance(about, str) else None
    text = f"{task_id} attention: {action}"
    if isinstance(about, str):
        text += f" {message.kind if message else 'item'} {short(about, 40)}"
    if decision.get("reason"):
        text += f" ({short(str(decision['reason']), 80)})"
    data: dict[str, Any] = {EventData.DECISION: decision}  # the worker's JSON, apart from crew's
    if message is None or message.task_id != task_id:
        txn.record(EventType.ATTENTION_DECISION, task_id=task_id, message=text, data=data)
        return
    # `seq` orders decisions taken in the same instant (one leader transaction).
    entry = {
        "at": txn.at,
        "seq": txn.next_seq,
        **{k: v for k, v in decision.items() if k != "item"},
    }
    kept = dict(message.data or {})
    # The latest ones only: a message's line must stay far below the line limit however many
    # decisions a worker prints about it (the event log keeps every one).
    decisions = [*kept.get(MessageData.DECISIONS, []), entry]
    kept[MessageData.DECISIONS] = decisions[-DECISIONS_KEPT:]
    txn.record(
        EventType.ATTENTION_DECISION,
        task_id=task_id,
        message=text,
        data=data,
        mail=message.model_copy(update={"data": kept}),
        was=message,
    )


def reject(txn: Txn, message: MailboxMessage, reason: str) -> MailboxMessage:
    """A message that will never be delivered, and why (the time goes in `data.rejectedAt`)."""
    rejected = _rejected(txn, message, reason)
    txn.record(
        EventType.MAILBOX_REJECTED,
        message=f"rejected {message.kind} {message.id} to {message.task_id}: {reason}",
        mail=rejected,
        was=message,
    )
    return rejected


def drop_oldest(
    txn: Txn, task_id: str, kinds: Iterable[MessageKind], cap: int
) -> list[MailboxMessage]:
    """Backpressure: reject the oldest pending messages beyond `cap - 1`, to make room for one
    more. Returns them, rejected."""
    if pending_count(txn, task_id, kinds) < cap:
        return []
    waiting = pending(txn, task_id, kinds)
    dropped = []
    for old in waiting[: max(0, len(waiting) - cap + 1)]:
        dropped.append(_rejected(txn, old, DROPPED))
        txn.record(
            EventType.MAILBOX_DROPPED,
            message=f"dropped {old.kind} {old.id} to {task_id}: more than {cap} pending",
            data={"cap": cap},
            mail=dropped[-1],
            was=old,
        )
    return dropped


def _rejected(txn: Txn, message: MailboxMessage, reason: str) -> MailboxMessage:
    data = {**(message.data or {}), MessageData.REJECTED_AT: txn.at}
    return message.model_copy(
        update={"status": MessageStatus.REJECTED, "reason": reason, "data": data}
    )


def reject_undeliverable(txn: Txn, ended: Iterable[Task]) -> None:
    """Messages still pending for tasks that ended can never be delivered."""
    by_id = {t.id: t for t in ended}
    if not by_id:
        return
    for box in INBOUND_BOXES:
        for message in txn.pending(box, *by_id):
            reject(txn, message, f"task {by_id[message.task_id].status} before delivery")


def restart(txn: Txn, task: Task, *, retrying: bool) -> None:
    """The worker of `task.attempt` is gone. What was pending for it: steers and follow-ups
    stay for the next attempt; an answer is held until the next attempt asks its question again
    (`answer_held_for`); nudges, and answers that fit no question, are rejected. With
    `retrying`, the steers and follow-ups the old attempt was given are sent again, as new
    messages, since the next attempt starts over."""
    for message in to_task(txn, task.id):
        if message.status is MessageStatus.PENDING:
            question = _question_answered(txn, message) if retrying else None
            if question is not None:
                _hold(txn, message, question)
            elif message.kind in _OF_ONE_ATTEMPT:
                reject(txn, message, SUPERSEDED)
        elif (
            retrying
            and message.kind in _CARRIED
            and (message.data or {}).get(MessageData.ATTEMPT) == task.attempt
        ):
            _carry_over(txn, message)


def answer_held_for(txn: Txn, question: SupervisorContact) -> MailboxMessage | None:
    """The answer held for this question since the task's last attempt asked it (the same type,
    prompt and options), made the answer to it; None if there is none. Not recorded: the
    task's change (crew.domain.tasks.answer) records it."""
    asked = _question_key(question.type.value, question.prompt, question.options)
    for message in pending(txn, question.task_id, [MessageKind.RESPOND]):  # held: pending
        held = (message.data or {}).get(MessageData.AWAITS_QUESTION)
        if held == asked:
            data = dict(message.data or {})
            del data[MessageData.AWAITS_QUESTION]
            data[MessageData.CONTACT_ID] = question.id
            return message.model_copy(update={"data": data})
    return None


def is_held(message: MailboxMessage) -> bool:
    """An answer waiting for its question to be asked again: not to be delivered yet."""
    return MessageData.AWAITS_QUESTION in (message.data or {})


def _question_answered(txn: Txn, message: MailboxMessage) -> dict[str, Any] | None:
    """The question an answer answers ({type, prompt, options}), from the worker's contact in
    outbox.jsonl; None for anything else (a nudge, a steer, an answer that cleared a flag)."""
    data = message.data or {}
    if message.kind is not MessageKind.RESPOND:
        return None
    if MessageData.AWAITS_QUESTION in data:  # held before: it stays held
        held = data[MessageData.AWAITS_QUESTION]
        return held if isinstance(held, dict) else None
    contact_id = data.get(MessageData.CONTACT_ID)
    asked = txn.asking(contact_id) if isinstance(contact_id, str) else None
    if asked is None:
        return None
    facts = asked.data or {}
    kind = str(facts.get(MessageData.CONTACT_TYPE))
    return _question_key(kind, asked.body, facts.get(MessageData.OPTIONS, []))


def question_of(txn: Txn, answer: MailboxMessage) -> Contact | None:
    """The question an answer was given to, as the worker asked it (from outbox.jsonl)."""
    contact_id = (answer.data or {}).get(MessageData.CONTACT_ID)
    asked = txn.asking(contact_id) if isinstance(contact_id, str) else None
    if asked is None:
        return None
    facts = asked.data or {}
    return Contact(
        ContactType(str(facts.get(MessageData.CONTACT_TYPE))),
        asked.body,
        list(facts.get(MessageData.OPTIONS, [])),
        secret=bool(facts.get(MessageData.SECRET)),
    )


def _question_key(kind: str, prompt: str, options: list[str]) -> dict[str, Any]:
    return {"type": kind, "prompt": prompt, "options": list(options)}


def _hold(txn: Txn, message: MailboxMessage, question: dict[str, Any]) -> None:
    if (message.data or {}).get(MessageData.AWAITS_QUESTION) == question:
        return
    data = {**(message.data or {}), MessageData.AWAITS_QUESTION: question}
    txn.record(
        EventType.MAILBOX_HELD,
        message=f"answer {message.id} to {message.task_id} held until its next attempt asks "
        f"{short(question['prompt'], 60)!r} again",
        mail=message.model_copy(update={"data": data}),
        was=message,
    )


def carry_back(txn: Txn, messages: Iterable[MailboxMessage]) -> None:
    """Messages delivered to a worker's adapter that the agent never got (it held them for
    after a turn that crew stopped): pending again, to be given once the task goes on."""
    for message in messages:
        current = inbound(txn, message.id)
        if current is not None and current.status is MessageStatus.DELIVERED:
            _carry_over(txn, current)


def _carry_over(txn: Txn, message: MailboxMessage) -> None:
    data = {k: v for k, v in (message.data or {}).items() if k != MessageData.ATTEMPT}
    data[MessageData.CARRIED] = message.carried + 1
    txn.record(
        EventType.MAILBOX_CARRIED,
        message=f"{message.kind} {message.id} given again to {message.task_id}'s next attempt",
        mail=message.model_copy(
            update={
                "status": MessageStatus.PENDING,
                "delivered_at": None,
                "acknowledged_at": None,
                "data": data,
            }
        ),
        was=message,
    )


# ----------------------------------------------------------------------------- from a worker


def report(
    txn: Txn, task_id: str, kind: ContactType, text: str, *, folded: int = 0
) -> MailboxMessage:
    """A worker's status, progress or note line, kept in outbox.jsonl. `folded`: it stands for
    this many reports (the latest of them) that were not recorded one by one. A progress line
    is kept as an excerpt (PROGRESS_EXCERPT characters): the task's log has it whole."""
    data: dict[str, Any] = {MessageData.REPORT_TYPE: kind.value}
    if kind is ContactType.PROGRESS and len(text) > PROGRESS_EXCERPT:
        data[MessageData.LENGTH] = len(text)
        text = clip(text, PROGRESS_EXCERPT)
    summary = f"{task_id} {kind}: {short(text)}"
    if folded:
        data[MessageData.FOLDED] = folded
        summary += f" (the latest of {folded} reports folded into one; the log has them all)"
    message = _outbound(txn, task_id, MessageKind.REPORT, text, data)
    txn.record(EventType.SUPERVISOR_REPORT, message=summary, mail=message)
    return message


def contact(txn: Txn, question: SupervisorContact) -> MailboxMessage:
    """A worker's question, kept in outbox.jsonl (the task keeps it too, while it is open)."""
    data: dict[str, Any] = {
        MessageData.CONTACT_ID: question.id,
        MessageData.CONTACT_TYPE: question.type.value,
    }
    if question.options:
        data[MessageData.OPTIONS] = question.options
    if question.secret:
        data[MessageData.SECRET] = True
    message = _outbound(txn, question.task_id, MessageKind.CONTACT, question.prompt, data)
    txn.record(
        EventType.SUPERVISOR_CONTACT,
        message=f"{question.task_id} asks ({question.type}): {short(question.prompt)}",
        mail=message,
    )
    return message


def _outbound(
    txn: Txn, task_id: str, kind: MessageKind, body: str, data: dict[str, Any]
) -> MailboxMessage:
    """A message from a worker: delivered, since it has reached the leader."""
    priority = Priority.HIGH if kind is MessageKind.CONTACT else Priority.NORMAL
    return _new(txn, kind, task_id, body, data, MessageStatus.DELIVERED, priority)


def _new(
    txn: Txn,
    kind: MessageKind,
    task_id: str,
    body: str,
    data: dict[str, Any],
    status: MessageStatus,
    priority: Priority,
) -> MailboxMessage:
    inbound = kind.direction is Direction.INBOX
    return MailboxMessage(
        id=ids.new_message_id(),
        direction=kind.direction,
        kind=kind,
        from_=LEADER if inbound else task_id,
        to=task_id if inbound else LEADER,
        task_id=task_id,
        body=body,
        status=status,
        priority=priority,
        sent_at=txn.at,
        delivered_at=None if status is MessageStatus.PENDING else txn.at,
        data=data or None,
    )
