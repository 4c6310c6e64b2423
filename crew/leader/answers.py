"""An answer as its worker is given it: naming the question it answers, as the worker asked it.

An answer accepted for one question can reach the worker after it has asked another: it stopped
waiting (`@supervisor withdraw:`, an SDK `ask` that timed out) and asked again while the answer
was on its way. Its frame names its question's id (`data.contactId`), which the worker never
learns; so the frame also carries the question's text (`data.question`, in the frame alone: the
mailbox line stays as written), and the SDK's `ask` takes only an answer to the question it
asked (crew/worker.py). A worker that reads plain lines is given an answer's body alone, and
cannot tell one answer from another: an answer to a question it has since replaced by another
is rejected instead (`due`), saying so, where it would have been read as the new one's.
"""

from __future__ import annotations

from crew.domain import mailbox
from crew.leader.view import RunView
from crew.models import MailboxMessage, Task
from crew.registry import Box, MessageData, MessageKind

#: Why an answer to a replaced question is not given to a worker that reads plain lines.
REPLACED = (
    "its question was replaced by another before the answer reached the worker, which reads "
    "plain lines and would have taken it for the new question's answer"
)


def due(view: RunView, task: Task, *, plain: bool) -> list[MailboxMessage]:
    """What the task's worker may be given now (crew/leader/schedule.py `deliverable`); to a
    worker that reads plain lines, no answer to a question other than the last it asked (those
    are rejected, saying why)."""
    found = view.pending.due(task, answers_only_while_asking=plain)
    if not plain:
        return found
    stale = [m for m in found if _answers_another(view, task, m)]
    if not stale:
        return found
    with view.change() as txn:
        for message in stale:
            mailbox.reject(txn, message, REPLACED)
    return [m for m in found if m not in stale]


def _answers_another(view: RunView, task: Task, message: MailboxMessage) -> bool:
    """Whether an answer names a question other than the last one the task asked."""
    answered = (message.data or {}).get(MessageData.CONTACT_ID)
    if message.kind is not MessageKind.RESPOND or not isinstance(answered, str):
        return False
    if task.contact is not None:
        return task.contact.id != answered
    outbox = view.store.mail(Box.OUTBOX)
    for message_id in reversed(outbox.of_task(task.id)):
        asked = outbox.get(message_id)
        if asked is not None and asked.kind is MessageKind.CONTACT:
            return (asked.data or {}).get(MessageData.CONTACT_ID) != answered
    return False


def naming_question(view: RunView, message: MailboxMessage) -> MailboxMessage:
    """`message`, and if it answers a question the outbox holds, naming that question."""
    data = message.data or {}
    contact_id = data.get(MessageData.CONTACT_ID)
    if message.kind is not MessageKind.RESPOND or not isinstance(contact_id, str):
        return message
    outbox = view.store.mail(Box.OUTBOX)
    asking = outbox.asking(contact_id)
    asked = outbox.get(asking) if asking is not None else None
    if asked is None:
        return message
    return message.model_copy(update={"data": {**data, MessageData.QUESTION: asked.body}})
