"""Delivering answers to secret questions: the real answer is read back (crew/store/
secret_answers.py) only to hand it to the agent, and removed once the delivery is recorded."""

from __future__ import annotations

from crew.domain import mailbox
from crew.leader.view import RunView
from crew.models import MailboxMessage
from crew.paths import RunPaths
from crew.protocol import Contact
from crew.store import secret_answers


def reveal_due(
    paths: RunPaths, view: RunView, due: list[MailboxMessage]
) -> tuple[list[MailboxMessage], list[MailboxMessage], list[Contact]]:
    """The due messages that can be delivered; each as the agent is given it (a secret answer
    with its real body); and the questions to ask again, whose secret answers were lost (the
    machine restarted since they were given: they are rejected, saying why)."""
    kept, given, lost = [], [], []
    for message in due:
        revealed = secret_answers.reveal(paths, message)
        if revealed is None:
            lost.append(message)
        else:
            kept.append(message)
            given.append(revealed)
    if not lost:
        return kept, given, []
    asked = []
    with view.change() as txn:
        for message in lost:
            mailbox.reject(txn, message, secret_answers.LOST)
            question = mailbox.question_of(txn, message)
            asked += [question] if question is not None else []
    return kept, given, asked


def forget_delivered(paths: RunPaths, messages: list[MailboxMessage]) -> None:
    """The agent has these: crew keeps no secret answer among them any longer."""
    for message in messages:
        if secret_answers.is_sealed(message):
            secret_answers.forget(paths, message.id)
