"""events.jsonl read as whole transactions: a transaction cut short is never part of the history.

A transaction's events are appended with one `write()`, but a write can be cut short (a SIGKILL
in the middle of a large write, a power cut): the first events of a transaction would then look
committed while the rest are missing. So every event of a transaction of more than one event
names the seq of the transaction's last event (`endSeq`); an event without it closes its
transaction. A reader takes the log up to the last event that closes a transaction; the events
after it are a transaction still being written, or one cut short, which the next writer sets
aside (to `events.jsonl.corrupt`) before it appends.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from crew.models import CheckedEvent, Event
from crew.store import jsonl


def whole(events: Sequence[Event]) -> int:
    """How many of `events` (in log order, from a transaction's start) form whole transactions."""
    count = 0
    for index, event in enumerate(events):
        if closes(event):
            count = index + 1
    return count


def closes(event: Event) -> bool:
    """Whether an event is the last of its transaction."""
    return event.end_seq is None or event.end_seq <= event.seq


def framed(events: Sequence[Event]) -> list[Event]:
    """A transaction's events as they are written: each but the last names the last one's seq."""
    if len(events) < 2:
        return list(events)
    end = events[-1].seq
    return [e.model_copy(update={"end_seq": end}) for e in events[:-1]] + [events[-1]]


def read(
    path: Path, *, offset: int = 0, end: int | None = None, checked: bool = False
) -> jsonl.ReadResult[Event]:
    """Every event of whole transactions from `offset` (a transaction boundary) to byte `end`
    (the whole file if None), tolerantly; `checked`: an event carrying invalid state is a bad
    line too (the check costs 2.6 times the read)."""
    model: type[Event] = CheckedEvent if checked else Event
    result: jsonl.ReadResult[Event] = jsonl.read(path, model, offset=offset, end=end)
    del result.records[whole(result.records) :]
    return result


@dataclass
class Tail:
    """The end of the log: its last whole event, and a transaction cut short after it."""

    last: Event | None = None
    #: The events of a transaction that never got its last event, in log order.
    cut: list[Event] = field(default_factory=list)

    @property
    def last_seq(self) -> int:
        return self.last.seq if self.last is not None else 0


def tail(path: Path, *, end: int | None = None) -> Tail:
    """The last whole event and any cut transaction after it (in the first `end` bytes, when
    given): reads only the end of the file."""
    found = Tail()
    for event in jsonl.read_backwards(path, Event, end=end):
        if closes(event):
            found.last = event
            break
        found.cut.insert(0, event)
    return found


def after(path: Path, seq: int) -> list[Event]:
    """The whole transactions' events after `seq` (a transaction boundary), read backwards only
    as far as needed."""
    found: list[Event] = []
    for event in jsonl.read_backwards(path, Event):
        if event.seq <= seq:
            break
        found.append(event)
    found.reverse()
    return found[: whole(found)]


class Follower:
    """Follows the log a whole transaction at a time: events of a transaction still being
    written are held back until its last event is there."""

    def __init__(self, path: Path, *, offset: int = 0) -> None:
        """`offset`: where to start, the start of a transaction."""
        self._lines = jsonl.Follower(path, Event, offset=offset)
        self._held: list[Event] = []

    def poll(self) -> jsonl.Poll[Event]:
        poll = self._lines.poll()
        if poll.reset:
            self._held = []
        pending = self._held + poll.records
        count = whole(pending)
        self._held = pending[count:]
        return jsonl.Poll(pending[:count], poll.bad, poll.reset)
