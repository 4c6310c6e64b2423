"""Mailbox files as upsert logs of whole messages and of changes to them.

A message's first line is whole, body and all. Each later change of it (delivered, acknowledged,
rejected, carried, held, a decision about it) is a MailboxChange line: the message's id, kind and
task, its status, and only the fields that changed, so a status change never writes the body
again (docs/design.md, "Lean files"). The event that records the change carries the same line.

Readers merge the lines of a file by id, in order: the latest state of each message, in
first-seen order. A whole line supersedes whatever came before it (an older crew wrote every
change whole, and recovery re-writes a message whole), so files of either kind read alike. A
change with no line of its message before it (a file cut short at its start, or edited) is
skipped: the full check finds the message missing and writes it whole from the event log.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from crew.models import CHANGEABLE, MailboxChange, MailboxLine, MailboxMessage
from crew.store import jsonl

Line = MailboxMessage | MailboxChange

#: Fields a change line never changes: a difference in any of them writes the message whole.
_FIXED = tuple(f for f in MailboxMessage.model_fields if f not in {*CHANGEABLE, "status"})


def change_line(was: MailboxMessage, now: MailboxMessage) -> Line:
    """The line that records `now`, the state after `was`: only what changed (whole if a field a
    change line does not carry changed)."""
    if any(getattr(was, f) != getattr(now, f) for f in _FIXED):
        return now
    changed = {f: getattr(now, f) for f in CHANGEABLE if getattr(was, f) != getattr(now, f)}
    return MailboxChange(
        id=now.id, kind=now.kind, task_id=now.task_id, status=now.status, **changed
    )


def merge(base: MailboxMessage, change: MailboxChange) -> MailboxMessage:
    """The message `base` after `change`."""
    named = change.model_fields_set
    update = {f: getattr(change, f) for f in CHANGEABLE if f in named}
    return base.model_copy(update={"status": change.status, **update})


class Merger:
    """Lines merged by id as they come: the latest state of each message, first-seen order."""

    def __init__(self) -> None:
        self.messages: dict[str, MailboxMessage] = {}

    def take(self, line: Line) -> MailboxMessage | None:
        """The message's state after `line` (None: a change to a message never seen)."""
        if isinstance(line, MailboxChange):
            base = self.messages.get(line.id)
            if base is None:
                return None
            line = merge(base, line)
        self.messages[line.id] = line
        return line


def fold(lines: Iterable[Line]) -> dict[str, MailboxMessage]:
    """The latest state of each message the lines describe, in first-seen order."""
    merger = Merger()
    for line in lines:
        merger.take(line)
    return merger.messages


def states(lines: Iterable[Line]) -> list[MailboxMessage]:
    """Each line as the state of its message it leaves (a change never seen before: left out)."""
    merger = Merger()
    return [m for line in lines if (m := merger.take(line)) is not None]


def read(
    path: Path, *, end: int | None = None, skipped: list[jsonl.BadLine] | None = None
) -> list[Line]:
    """Every valid line of a mailbox file (its first `end` bytes, when given), tolerantly; the
    lines it skipped added to `skipped`, when given."""
    result = jsonl.read(path, MailboxLine, end=end)
    if skipped is not None:
        skipped.extend(result.bad)
    return [r.root for r in result.records]


def tail(path: Path, count: int) -> list[Line]:
    """Up to `count` last valid lines of a mailbox file, oldest first."""
    return [r.root for r in jsonl.tail_records(path, MailboxLine, count)]


def history(path: Path, skipped: list[jsonl.BadLine] | None = None) -> list[MailboxMessage]:
    """Each line of a mailbox file as the state it leaves its message in: its whole life (the
    lines it skipped added to `skipped`, when given)."""
    return states(read(path, skipped=skipped))


class Follower:
    """A mailbox file followed a poll at a time: each new line as the state of its message
    (merged with what came before it). Starts again from the beginning, with a `reset`, when the
    file is replaced or shrinks."""

    def __init__(self, path: Path) -> None:
        self._lines = jsonl.Follower(path, MailboxLine)
        self._merger = Merger()

    def poll(self) -> jsonl.Poll[MailboxMessage]:
        poll = self._lines.poll()
        if poll.reset:
            self._merger = Merger()
        found = [m for r in poll.records if (m := self._merger.take(r.root)) is not None]
        return jsonl.Poll(found, poll.bad, poll.reset)
