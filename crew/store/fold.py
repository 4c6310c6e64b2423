"""A mailbox file folded by id, kept up to date by reading only what was appended: every
message's latest state, the pending ones, their order and counts, the idempotency keys, each
task's messages, the questions asked (crew/store/runstore.py holds one per file).

A `lean` fold (the leader's) holds in memory only the messages waiting to be delivered: those
pending. (A message delivered may still change — an acknowledgement, a decision, a new attempt
given it again — but an agent's worker never acknowledges one, so holding those held every
message ever sent to an agent; such a change is rare, a transaction, and reads the message
back.) What it knows of the others — where each was first seen, its task, where its lines
start — and the names messages carry (keys, questions) are on disk (crew/store/spill.py); a
message it let go of is read back from its lines in the file when it is asked for, by id, which
the leader does rarely (an acknowledgement, a restart, a replayed key). So what the leader
holds does not grow with the messages ever sent.

A message's place is where its first line starts in the file: messages in first-seen order are
in the order of their places.
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
from crew.store.spill import Name, Spill, Spilled

#: How many bytes of new lines a lean fold reads at a time (and the line that crosses it): what
#: a read holds at once, ~15 times as much once validated.
_CHUNK = 256 * 1024
#: The statuses of a message a lean fold holds: waiting to be delivered.
_LIVE = frozenset({MessageStatus.PENDING})


class MailboxFold:
    """A mailbox file folded by id, brought up to date by reading only what was appended (and
    read again from the start if the file was replaced or shrank)."""

    def __init__(self, path: Path, *, lean: bool = False) -> None:
        self.path = path
        self.lean = lean
        self._lines = jsonl.Follower(path, MailboxLine)
        #: Each message's latest state (a lean fold: those it holds) and its place.
        self._messages: dict[str, MailboxMessage] = {}
        self._places: dict[str, int] = {}
        #: A lean fold: where the lines of each message it holds start, from its last whole
        #: line on; and what it knows of the others.
        self._starts: dict[str, list[int]] = {}
        self._spill = Spill() if lean else None
        #: The messages whose latest line is pending.
        self.pending: dict[str, MailboxMessage] = {}
        #: How many of `pending` there are per task and kind.
        self.counts: Counter[tuple[str, MessageKind]] = Counter()
        #: A full fold: each task's messages in first-seen order; the first message that
        #: carried each name (an idempotency key, a question asked: the contact id).
        self._by_task: dict[str, list[str]] = {}
        self._names: dict[tuple[Name, str], str] = {}
        #: Given each new state read (RunStore.follow_mail).
        self.listeners: list[Callable[[MailboxMessage], None]] = []
        #: Called when the file is read again from its start (replaced: a repair set lines
        #: aside), before its lines are given again: what a listener kept of it may be gone.
        self.resets: list[Callable[[], None]] = []

    def current(self) -> Mapping[str, MailboxMessage]:
        """Every message's latest state, in first-seen order, after what was appended (a lean
        fold reads it a few hundred lines at a time, so as not to hold them all at once)."""
        while True:
            poll = self._lines.poll(_CHUNK if self.lean else None)
            if poll.reset:
                self._forget()
                for reset in self.resets:
                    reset()
            for record, start in zip(poll.records, poll.starts, strict=True):
                message = self._take(record.root, start)
                if message is not None:
                    self._index(message)
                    for listener in self.listeners:
                        listener(message)
            if self._spill is not None:
                self._spill.flush()
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
        """The messages a lean fold holds in memory (those pending)."""
        return iter(list(self._messages.values()))

    # ------------------------------------------------------------------ looking messages up

    def get(self, message_id: str) -> MailboxMessage | None:
        """A message's latest state as last read (from the file, if it is not held)."""
        found = self._messages.get(message_id)
        if found is None and self._spill is not None:
            spilled = self._spill.get(message_id)
            return None if spilled is None else self._read_back(message_id, spilled.starts)
        return found

    def place(self, message_id: str) -> int | None:
        """Where a message was first seen in the file (None: never)."""
        place = self._places.get(message_id)
        if place is None and self._spill is not None:
            spilled = self._spill.get(message_id)
            return None if spilled is None else spilled.place
        return place

    def knows(self, message_id: str) -> bool:
        return self.place(message_id) is not None

    def of_task(self, task_id: str) -> list[str]:
        """The ids of a task's messages, in first-seen order."""
        if self._spill is None:
            return list(self._by_task.get(task_id, ()))
        held = [(self._places[i], i) for i, m in self._messages.items() if m.task_id == task_id]
        return [i for _, i in sorted(held + self._spill.of_task(task_id))]

    def ids(self) -> list[str]:
        """Every message's id, in first-seen order."""
        if self._spill is None:
            return list(self._messages)
        held = [(place, i) for i, place in self._places.items()]
        return [i for _, i in sorted(held + self._spill.places())]

    def size(self) -> int:
        """How many messages the file holds."""
        return len(self._places) + (len(self._spill) if self._spill is not None else 0)

    def keyed(self, key: str) -> str | None:
        """The message first sent under idempotency key `key`."""
        return self._named(Name.KEY, key)

    def asking(self, contact_id: str) -> str | None:
        """The message (a worker's contact) that asked question `contact_id`."""
        return self._named(Name.CONTACT, contact_id)

    def _named(self, kind: Name, name: str) -> str | None:
        if self._spill is not None:
            return self._spill.named(kind, name)
        return self._names.get((kind, name))

    # ------------------------------------------------------------------ reading lines

    def _forget(self) -> None:
        self._messages, self._places, self._starts, self.pending = {}, {}, {}, {}
        self._by_task, self._names = {}, {}
        self.counts = Counter()
        if self._spill is not None:
            self._spill.clear()

    def _take(self, line: MailboxMessage | MailboxChange, start: int) -> MailboxMessage | None:
        """The message's state after `line` (None: a change to a message never seen)."""
        if self._spill is not None:
            return self._take_lean(line, start)
        if isinstance(line, MailboxChange):
            base = self._messages.get(line.id)
            if base is None:
                return None
            message = mailfile.merge(base, line)
        else:
            message = line
            if line.id not in self._places:
                self._places[line.id] = start
                self._by_task.setdefault(line.task_id, []).append(line.id)
        self._messages[message.id] = message
        return message

    def _take_lean(self, line: MailboxMessage | MailboxChange, start: int) -> MailboxMessage | None:
        """`_take` for a lean fold: the message held if it is pending, spilled if not."""
        spill = self._spill
        assert spill is not None
        message_id = line.id
        held = message_id in self._messages
        spilled: Spilled | None = None
        if isinstance(line, MailboxChange):
            if held:
                base: MailboxMessage | None = self._messages[message_id]
                starts = self._starts[message_id]
            else:
                spilled = spill.get(message_id)
                if spilled is None:
                    return None
                base, starts = self._read_back(message_id, spilled.starts), spilled.starts
            if base is None:
                return None
            message = mailfile.merge(base, line)
            starts.append(start)
        else:
            message, starts = line, [start]  # a whole line supersedes what came before
        live = message.status in _LIVE and message.direction is Direction.INBOX
        if held:
            place = self._places[message_id]
        elif spilled is None and not live:  # most often a message never seen: its first line
            spill.put(message_id, Spilled(start, message.task_id, starts), first=True)
            return message
        else:
            spilled = spilled or spill.get(message_id)
            place = spilled.place if spilled is not None else start
        if live:
            if spilled is not None:
                spill.drop(message_id)
            self._messages[message_id] = message
            self._places[message_id] = place
            self._starts[message_id] = starts
        else:
            if held:
                del self._messages[message_id], self._places[message_id]
                del self._starts[message_id]
            spill.put(message_id, Spilled(place, message.task_id, starts))
        return message

    def _index(self, message: MailboxMessage) -> None:
        pending, counts = self.pending, self.counts
        was = pending.get(message.id)
        if was is not None:
            counts[was.task_id, was.kind] -= 1
        if message.status is MessageStatus.PENDING:
            pending[message.id] = message
            counts[message.task_id, message.kind] += 1
        elif was is not None:
            del pending[message.id]
        data = message.data
        if not data:
            return
        key = data.get(MessageData.IDEMPOTENCY_KEY)
        if isinstance(key, str):
            self._name(Name.KEY, key, message.id)
        asked = data.get(MessageData.CONTACT_ID)
        if message.kind is MessageKind.CONTACT and isinstance(asked, str):
            self._name(Name.CONTACT, asked, message.id)

    def _name(self, kind: Name, name: str, message_id: str) -> None:
        if self._spill is not None:
            self._spill.name(kind, name, message_id)
        else:
            self._names.setdefault((kind, name), message_id)

    def _read_back(self, message_id: str, starts: list[int]) -> MailboxMessage | None:
        """A message not held, merged again from its lines in the file (None if the file no
        longer holds them: it was replaced, and the next read starts it again)."""
        message: MailboxMessage | None = None
        try:
            fd = open_fd(self.path, os.O_RDONLY)
        except FileNotFoundError:  # gone: the next read starts again from nothing
            return None
        try:
            for start in starts:
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
        return isinstance(message_id, str) and self._fold.knows(message_id)

    def __iter__(self) -> Iterator[str]:
        return iter(self._fold.ids())

    def __len__(self) -> int:
        return self._fold.size()
