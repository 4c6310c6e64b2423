"""A mailbox file folded by id, kept up to date by reading only what was appended: every
message's latest state, the pending ones, their order and counts, the idempotency keys, each
task's messages, the questions asked (crew/store/runstore.py holds one per file).

A `lean` fold (the leader's) keeps in memory only the messages that may still change: those
pending or delivered to a worker. Any other is read back from its lines in the file when it is
asked for, by id, which the leader does rarely (an acknowledgement of an old message, a restart,
a replayed key). So what the leader holds grows by the ids it indexes, not by whole messages.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

from crew.models import MailboxChange, MailboxLine, MailboxMessage
from crew.registry import Direction, MessageData, MessageKind, MessageStatus
from crew.store import jsonl, mailfile
from crew.store.files import open_fd

#: How many bytes of new lines a lean fold reads at a time (beyond the line that crosses it).
_CHUNK = 1024 * 1024
#: The statuses of a message a worker may still change (acknowledge, be given again).
_LIVE = frozenset({MessageStatus.PENDING, MessageStatus.DELIVERED})


class MailboxFold:
    """A mailbox file folded by id, brought up to date by reading only what was appended (and
    read again from the start if the file was replaced or shrank)."""

    def __init__(self, path: Path, *, lean: bool = False) -> None:
        self.path = path
        self.lean = lean
        self._lines = jsonl.Follower(path, MailboxLine)
        #: Each message's latest state (a lean fold: those that may still change).
        self._messages: dict[str, MailboxMessage] = {}
        #: A lean fold: where each message's lines start, from its last whole line on.
        self._starts: dict[str, list[int]] = {}
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

    def current(self) -> Mapping[str, MailboxMessage]:
        """Every message's latest state, in first-seen order, after what was appended (a lean
        fold reads it a few thousand lines at a time, so as not to hold them all at once)."""
        while True:
            poll = self._lines.poll(_CHUNK if self.lean else None)
            if poll.reset:
                self._messages, self._starts, self.pending, self.order = {}, {}, {}, {}
                self.keys, self.by_task, self.contacts = {}, {}, {}
                self.counts = Counter()
            for record, start in zip(poll.records, poll.starts, strict=True):
                message = self._take(record.root, start)
                if message is not None:
                    self._index(message)
                    for listener in self.listeners:
                        listener(message)
            if not poll.more:
                return self.as_read()

    def as_read(self) -> Mapping[str, MailboxMessage]:
        """Every message's latest state as last read, in first-seen order (nothing read now)."""
        return _Messages(self) if self.lean else self._messages

    def wrote(self, start: int, lines: list[mailfile.Line], sizes: list[int]) -> None:
        """This process appended `lines` (of `sizes` bytes) at byte `start` of the file: the
        next read takes them as they are, without reading them back (see jsonl.Follower)."""
        records = [MailboxLine.model_construct(root=line) for line in lines]
        self._lines.wrote(start, records, sizes)

    def kept(self) -> Iterator[MailboxMessage]:
        """The messages a lean fold keeps in memory (those that may still change)."""
        return iter(list(self._messages.values()))

    def get(self, message_id: str) -> MailboxMessage | None:
        """A message's latest state as last read (from the file, if it is not kept)."""
        found = self._messages.get(message_id)
        if found is None and message_id in self._starts:
            return self._read_back(message_id)
        return found

    def _take(self, line: MailboxMessage | MailboxChange, start: int) -> MailboxMessage | None:
        """The message's state after `line` (None: a change to a message never seen)."""
        if isinstance(line, MailboxChange):
            base = self.get(line.id)
            if base is None:
                return None
            message = mailfile.merge(base, line)
            if self.lean:
                self._starts[line.id].append(start)
        else:
            message = line
            if self.lean:
                self._starts[line.id] = [start]  # a whole line supersedes what came before
        if not self.lean or (message.status in _LIVE and message.direction is Direction.INBOX):
            self._messages[message.id] = message
        else:
            self._messages.pop(message.id, None)
        return message

    def _index(self, message: MailboxMessage) -> None:
        if message.id not in self.order:
            self.order[message.id] = len(self.order)
            self.by_task.setdefault(message.task_id, []).append(message.id)
        pending, counts = self.pending, self.counts
        was = pending.get(message.id)
        if was is not None:
            counts[was.task_id, was.kind] -= 1
        if message.status is MessageStatus.PENDING:
            pending[message.id] = message
            counts[message.task_id, message.kind] += 1
        elif was is not None:
            del pending[message.id]
        data = message.data or {}
        key = data.get(MessageData.IDEMPOTENCY_KEY)
        if isinstance(key, str):
            self.keys.setdefault(key, message.id)
        asked = data.get(MessageData.CONTACT_ID)
        if message.kind is MessageKind.CONTACT and isinstance(asked, str):
            self.contacts.setdefault(asked, message.id)

    def _read_back(self, message_id: str) -> MailboxMessage | None:
        """A message not kept, merged again from its lines in the file (None if the file no
        longer holds them: it was replaced, and the next read starts it again)."""
        message: MailboxMessage | None = None
        try:
            fd = open_fd(self.path, os.O_RDONLY)
        except FileNotFoundError:  # gone: the next read starts again from nothing
            return None
        try:
            for start in self._starts[message_id]:
                raw = _line_at(fd, start)
                line = MailboxLine.model_validate_json(raw).root if raw else None
                if line is None or line.id != message_id:
                    return None
                if isinstance(line, MailboxChange):
                    message = mailfile.merge(message, line) if message is not None else None
                else:
                    message = line
        except ValueError:  # not a record there now
            return None
        finally:
            os.close(fd)
        return message


def _line_at(fd: int, start: int) -> bytes:
    """The complete line that starts at byte `start` (empty if there is none)."""
    chunks: list[bytes] = []
    position = start
    while True:
        block = os.pread(fd, 64 * 1024, position)
        if not block:
            return b""
        end = block.find(b"\n")
        if end >= 0:
            chunks.append(block[: end + 1])
            return b"".join(chunks)
        chunks.append(block)
        position += len(block)
        if position - start > jsonl.LINE_LIMIT:
            return b""


class _Messages(Mapping[str, MailboxMessage]):
    """A lean fold's messages as a mapping: those not kept are read back when asked for."""

    def __init__(self, fold: MailboxFold) -> None:
        self._fold = fold

    def __getitem__(self, message_id: str) -> MailboxMessage:
        found = self._fold.get(message_id)
        if found is None:
            raise KeyError(message_id)
        return found

    def __contains__(self, message_id: object) -> bool:
        return message_id in self._fold.order

    def __iter__(self) -> Iterator[str]:
        return iter(self._fold.order)

    def __len__(self) -> int:
        return len(self._fold.order)
