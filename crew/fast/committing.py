"""A change to a run on the fast path: where it begins (`owned`: the run locked, its files
clean, owned by the person acting), and crew/store/txn.py `commit`: the events (the commit
point, the one file fsynced, all of them in one write), then what they carry — a mailbox line,
the snapshots of the tasks they changed, manifest.json — then the marker. Before the events
nothing is written, so a failure there hands the command to the full one (Fallback); after
them, a failure is the full command's to explain as it explains one of its own
(`committed_error`), and the next command that changes the run completes what is missing from
the event log.
"""

from __future__ import annotations

import contextlib
import json
import os

from crew.fast import people
from crew.fast.cmdline import Call, Fallback
from crew.fast.output import formats_apart
from crew.fast.runfiles import (
    LINE_LIMIT,
    Marker,
    RunFiles,
    RunLock,
    fsync_enabled,
    open_append,
    open_run,
    write_lines,
)
from crew.fast.status import read_run

TYPE_CHECKING = False  # `typing` costs a fast command a few milliseconds
if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import Any


class Owned:
    """A run a person who owns it is changing: its files, the marker the change begins on, the
    manifest, and who acts."""

    __slots__ = ("files", "marker", "run", "who")

    def __init__(
        self, files: RunFiles, marker: Marker, run: dict[str, Any], who: people.Session
    ) -> None:
        self.files, self.marker, self.run, self.who = files, marker, run, who


@contextlib.contextmanager
def owned(call: Call) -> Iterator[Owned]:
    """The run the command names, under its lock, once its files need no recovery and the
    person running the command owns it (Fallback otherwise: a worker's credentials, a refusal
    or a recovery, all the full command's)."""
    who = people.session(call.options.get("--session"))
    files = open_run(call)
    with RunLock(files.root):
        marker = files.clean()
        run = read_run(files)
        if run.get("ownerSessionId") != who.name:
            raise Fallback
        yield Owned(files, marker, run, who)


def commit(
    files: RunFiles,
    marker: Marker,
    events: list[dict[str, Any]],
    *,
    mail: tuple[str, dict[str, Any]] | None = None,
    tasks: list[dict[str, Any]] | None = None,
    run: dict[str, Any] | None = None,
    added: int = 0,
) -> int | None:
    """Write `events` (numbered from the marker's seq on), then the line of `mail` (its mailbox
    file's name and the message), the snapshots of `tasks` (`added` of them new) and
    manifest.json (`run`), each if given, then the marker. Returns where the mailbox line
    begins (None without one)."""
    if formats_apart(events):
        raise Fallback
    last = events[-1]["seq"]  # framed (crew/store/eventlog.py): a write cut short is told apart
    lines = [_line({**event, "endSeq": last}) for event in events[:-1]] + [_line(events[-1])]
    mail_line = _line(mail[1]) if mail is not None else b""
    if max(len(line) for line in [*lines, mail_line]) > LINE_LIMIT:
        raise Fallback
    log, box = open_append(files.events), -1
    ends: dict[str, int] = {}
    try:
        if mail is not None:
            box = open_append(files.box(mail[0]))
        try:
            events_size = write_lines(log, b"".join(lines), fsync=fsync_enabled())
        except OSError:
            raise Fallback from None  # nothing was written: the full command reports it
        try:
            if mail is not None:
                ends[mail[0]] = write_lines(box, mail_line, fsync=False)
            for task in tasks or []:
                files.write_task(task)
            if run is not None:
                files.write_manifest(run)
            files.write_marker(marker, events[-1]["seq"], events_size, ends, added=added)
        except OSError as error:
            from crew.store.txn import committed_error

            raise committed_error(error) from None
    finally:
        os.close(log)
        if box >= 0:
            os.close(box)
    return ends[mail[0]] - len(mail_line) if mail is not None else None


def event(
    seq: int,
    run_id: str,
    at: str,
    kind: str,
    message: str,
    data: dict[str, Any],
    task_id: str | None = None,
) -> dict[str, Any]:
    """An event as crew/store/txn.py `record` writes one (crew/models.py Event's fields in
    order, `taskId` only when it names a task); `data` is what it carries, after who acted."""
    record: dict[str, Any] = {
        "id": f"evt_{os.urandom(8).hex()}",
        "seq": seq,
        "runId": run_id,
        "at": at,
        "type": kind,
    }
    if task_id is not None:
        record["taskId"] = task_id
    record["message"] = message
    record["data"] = data
    return record


def _line(record: dict[str, Any]) -> bytes:
    """A JSONL line as crew/store/jsonl.py writes one."""
    return json.dumps(record, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"
