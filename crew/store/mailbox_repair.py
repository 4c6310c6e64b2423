"""Bringing the mailbox files up to what the event log records: after an interrupted write (the
tail the marker does not cover) and after a full check (every message's latest version)."""

from __future__ import annotations

from collections.abc import Mapping

from crew.models import Event, MailboxMessage
from crew.paths import RunPaths
from crew.registry import Box, MessageStatus
from crew.store import jsonl, mailfile
from crew.store.files import fsync_derived, make_dirs
from crew.store.pin import Pin
from crew.store.state import messages_by_box

#: A status never goes back: a mailbox line that is behind the log's is out of date.
_MESSAGE_RANK = {
    MessageStatus.PENDING: 0,
    MessageStatus.DELIVERED: 1,
    MessageStatus.ACKNOWLEDGED: 2,
    MessageStatus.REJECTED: 2,
}


def compare(
    paths: RunPaths,
    events: list[Event],
    pin: Pin | None = None,
    read: Mapping[Box, list[mailfile.Line]] | None = None,
) -> tuple[dict[Box, list[MailboxMessage]], dict[Box, list[str]]]:
    """Each mailbox file against the log, after a full check: the messages whose latest
    evented version the file lacks (or has older), each whole, since the file may lack the line
    a change would be merged into; and the ids of the messages it holds lines of that the log
    does not record in it (no crew command wrote them: a hand edit, a line copied from another
    run or file). `read`: the files' valid lines, as the caller read them (as pinned), instead
    of reading them again."""
    missing_by_box: dict[Box, list[MailboxMessage]] = {}
    unrecorded: dict[Box, list[str]] = {}
    evented = messages_by_box(events)
    # A log that skips a seq lost an event (a line removed, or bad and set aside by a repair):
    # a line of its message is no stray then, but the only record left of what was sent.
    whole = all(event.seq == seq for seq, event in enumerate(events, start=1))
    for box in Box:
        if read is not None:
            lines = read[box]
        else:
            path = paths.box(box)
            lines = mailfile.read(path, end=pin.end(path) if pin is not None else None)
        expected, have = mailfile.fold(evented.get(box, [])), mailfile.fold(lines)
        missing = [
            m
            for m in expected.values()
            if m.id not in have or (have[m.id] != m and _progress(m) >= _progress(have[m.id]))
        ]
        if missing:
            missing_by_box[box] = missing
        recorded = {line.id for line in evented.get(box, [])}
        strays = list(dict.fromkeys(line.id for line in lines if line.id not in recorded))
        if strays and whole:
            unrecorded[box] = strays
    return missing_by_box, unrecorded


def reapply_tail(paths: RunPaths, events: list[Event]) -> list[str]:
    """Append the mailbox lines of unapplied events that did not reach their files (each as the
    event carries it: a change stays a change, its message's earlier lines being there)."""
    repairs: list[str] = []
    for box, expected in messages_by_box(events).items():
        path = paths.box(box)
        present = mailfile.tail(path, len(expected))
        done = _applied_prefix([p.to_line() for p in present], [e.to_line() for e in expected])
        missing = expected[done:]
        if missing:
            make_dirs(path.parent)  # a mailbox/ folder removed: made again, as at the run's start
            jsonl.append(path, [m.to_line() for m in missing], durable=fsync_derived())
            repairs.append(f"re-wrote {len(missing)} line(s) of {path.name}")
    return repairs


def rewrite_gaps(paths: RunPaths, missing_by_box: dict[Box, list[MailboxMessage]]) -> list[str]:
    """After a full check: bring each message up to its latest evented version."""
    repairs: list[str] = []
    for box, missing in missing_by_box.items():
        path = paths.box(box)
        make_dirs(path.parent)
        jsonl.append(path, [m.to_line() for m in missing], durable=fsync_derived())
        repairs.append(f"re-wrote {len(missing)} line(s) of {path.name}")
    return repairs


def _applied_prefix(present: list[bytes], expected: list[bytes]) -> int:
    """How many of `expected` already end the file: the longest prefix matching its tail."""
    for count in range(min(len(present), len(expected)), 0, -1):
        if present[len(present) - count :] == expected[:count]:
            return count
    return 0


def _progress(message: MailboxMessage) -> tuple[int, int]:
    """How far a message's life has gone: lines of a later round (`carried`) come after."""
    return (message.carried, _MESSAGE_RANK[message.status])
