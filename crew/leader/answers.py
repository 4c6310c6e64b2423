"""An answer as its worker is given it: naming the question it answers, as the worker asked it.

An answer accepted for one question can reach the worker after it has asked another: it stopped
waiting (`@supervisor withdraw:`, an SDK `ask` that timed out) and asked again while the answer
was on its way. Its frame names its question's id (`data.contactId`), which the worker never
learns; so the frame also carries the question's text (`data.question`, in the frame alone: the
mailbox line stays as written), and the SDK's `ask` takes only an answer to the question it
asked (crew/worker.py). A plain-text worker is given the answer's body alone, as before.
"""

from __future__ import annotations

from crew.leader.view import RunView
from crew.models import MailboxMessage
from crew.registry import Box, MessageData, MessageKind


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
