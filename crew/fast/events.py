"""`crew events RUN` without typer or pydantic: the event log as crew/render_streams.py shows it
(a line for people, or with --json each event as events.jsonl holds it), whole transactions
only, for a log whose every line is an event crew wrote. A line the models would reject (the
full command skips it with a warning), a line it would write back otherwise, and following
(`-f`) are the full command's."""

from __future__ import annotations

import json
import os
import re
import sys

from crew.fast.cmdline import Call, Fallback
from crew.fast.output import formats_apart
from crew.fast.runfiles import (
    RUN_ID_PATTERN,
    TASK_ID_PATTERN,
    open_run,
    read_file,
    task_option,
)

TYPE_CHECKING = False  # `typing` costs a fast command a few milliseconds
if TYPE_CHECKING:
    from typing import Any

#: crew/models.py Event's fields as written, in order.
EVENT_FIELDS = ("id", "seq", "runId", "at", "type", "taskId", "message", "data", "endSeq")
EVENT_ID_PATTERN = r"^evt_[0-9a-z]{1,32}$"
TIMESTAMP_PATTERN = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{6}Z$"
_EVENT_ID_RE = re.compile(EVENT_ID_PATTERN)
_TIMESTAMP_RE = re.compile(TIMESTAMP_PATTERN)
_TASK_ID_RE = re.compile(TASK_ID_PATTERN)
_RUN_ID_RE = re.compile(RUN_ID_PATTERN)


def events(call: Call) -> int:
    task_id = task_option(call)
    files = open_run(call)
    data = read_file(files.events)
    if data and not data.endswith(b"\n"):
        raise Fallback  # a write in progress or cut short
    from crew.text import json_safe, terminal_safe  # the standard library only

    shown = [
        (line, event)
        for line, event in _whole_transactions(data.splitlines())
        if task_id is None or event.get("taskId") == task_id
    ]
    if "--json" in call.options:
        text = "".join(json_safe(line.decode()) + "\n" for line, _ in shown)
    else:
        text = "".join(terminal_safe(_line(event)) + "\n" for _, event in shown)
    sys.stdout.write(text)  # all checked before a byte is printed: a fallback prints it once
    sys.stdout.flush()
    return 0


def _whole_transactions(lines: list[bytes]) -> list[tuple[bytes, dict[str, Any]]]:
    """Each event of a whole transaction, in order, once (crew/store/eventlog.py)."""
    found: list[tuple[bytes, dict[str, Any]]] = []
    held: list[tuple[bytes, dict[str, Any]]] = []
    shown_seq = 0
    for line in lines:
        event = _event(line)
        held.append((line, event))
        end = event.get("endSeq")
        if end is None or end <= event["seq"]:  # it closes its transaction
            for each in held:
                if each[1]["seq"] > shown_seq:
                    found.append(each)
                    shown_seq = each[1]["seq"]
            held = []
    return found


def _event(line: bytes) -> dict[str, Any]:
    """An event as crew wrote it: what the models accept, written as they would write it."""
    try:
        event = json.loads(line)
    except ValueError:
        raise Fallback from None
    if not isinstance(event, dict) or list(event) != [k for k in EVENT_FIELDS if k in event]:
        raise Fallback
    if None in event.values():
        raise Fallback  # crew leaves a null field out
    if json.dumps(event, ensure_ascii=False, separators=(",", ":")).encode() != line:
        raise Fallback  # not as crew writes it (or a number written otherwise)
    if formats_apart(event):
        raise Fallback  # a number pydantic writes otherwise than it was found (`1e-07`)
    seq, end = event.get("seq"), event.get("endSeq")
    if not (
        isinstance(seq, int) and seq >= 1 and (end is None or (isinstance(end, int) and end >= 1))
    ):
        raise Fallback
    text_fields = (event.get("id"), event.get("runId"), event.get("at"), event.get("type"))
    if not all(isinstance(v, str) for v in text_fields):
        raise Fallback
    if not _EVENT_ID_RE.fullmatch(event["id"]) or not _RUN_ID_RE.fullmatch(event["runId"]):
        raise Fallback
    if not _TIMESTAMP_RE.fullmatch(event["at"]):
        raise Fallback
    if event["type"] not in EVENT_TYPES:
        raise Fallback
    task, message, data = event.get("taskId"), event.get("message"), event.get("data")
    if task is not None and not (isinstance(task, str) and _TASK_ID_RE.fullmatch(task)):
        raise Fallback
    if not isinstance(message, str | None) or not isinstance(data, dict | None):
        raise Fallback
    return event


def _line(event: dict[str, Any]) -> str:
    """crew/render_streams.py `event_line`."""
    task = event.get("taskId") or "-"
    text = event.get("message") or ""
    return f"{event['at']}  #{event['seq']:<5} {event['type']:<22} {task:<16} {text}".rstrip()


def _event_types() -> frozenset[str]:
    """crew/registry.py EventType's values, read from `schemas.json` (checked by a test)."""
    path = os.path.join(os.path.dirname(__file__), "schemas.json")
    try:
        with open(path, "rb") as handle:
            schema = json.loads(handle.read())["event"]
        return frozenset(schema["$defs"]["EventType"]["enum"])
    except (OSError, ValueError, KeyError, TypeError):
        return frozenset()


EVENT_TYPES = _event_types()
