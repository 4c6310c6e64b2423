"""A mailbox file folded by id, kept up to date by reading only what was appended: every
message's latest state, the pending ones, their order and counts, the idempotency keys, each
task's messages, the questions asked (crew/store/runstore.py holds one per file)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path

from crew.models import MailboxMessage
from crew.registry import MessageData, MessageKind, MessageStatus
from crew.store import mailfile


class MailboxFold:
    """A mailbox file folded by id, brought up to date by reading only what was appended (and
    read again from the start if the file was replaced or shrank)."""

    def __init__(self, path: Path) -> None:
        self._follower = mailfile.Follower(path)
        self._messages: dict[str, MailboxMessage] = {}
        #: The messages whose latest line is pending, and each message's first-seen place.
        self.pending: dict[str, MailboxMessage] = {}
        self.order: dict[str, int] = {}
        #: How many of `pending` there are per task and kind.
        self.counts: Counter[tuple[str, MessageKind]] = Counter()
        #: The message first sent under each idempotency key, by key.
        self.keys: dict[str, str] = {}
        #: Each task's messages, in first-seen order.
        self.by_task: dict[str, list[str]] = {}
        #: The message that asked each question (a worker's contact), by contact id.
        self.contacts: dict[str, str] = {}
        #: Given each new state read (RunStore.follow_mail).
        self.listeners: list[Callable[[MailboxMessage], None]] = []

    def current(self) -> dict[str, MailboxMessage]:
        poll = self._follower.poll()
        if poll.reset:
            self._messages, self.pending, self.order, self.keys = {}, {}, {}, {}
            self.by_task, self.contacts = {}, {}
            self.counts = Counter()
        pending, counts = self.pending, self.counts
        for message in poll.records:
            self._messages[message.id] = message
            if message.id not in self.order:
                self.order[message.id] = len(self.order)
                self.by_task.setdefault(message.task_id, []).append(message.id)
            data = message.data or {}
            key = data.get(MessageData.IDEMPOTENCY_KEY)
            if isinstance(key, str):
                self.keys.setdefault(key, message.id)
            asked = data.get(MessageData.CONTACT_ID)
            if message.kind is MessageKind.CONTACT and isinstance(asked, str):
                self.contacts.setdefault(asked, message.id)
            was = pending.get(message.id)
            if was is not None:
                counts[was.task_id, was.kind] -= 1
            if message.status is MessageStatus.PENDING:
                pending[message.id] = message
                counts[message.task_id, message.kind] += 1
            elif was is not None:
                del pending[message.id]
            for listener in self.listeners:
                listener(message)
        return self._messages
