"""The event log shown as it comes (`crew events`, `crew run`'s progress); workers' output
(`crew logs`) is crew/loglines.py's. Lines for people are made safe for a terminal; JSON is
exact."""

from __future__ import annotations

import sys

from crew.models import Event
from crew.output import SETTINGS, print_json_line
from crew.registry import DecisionAction, EventType
from crew.text import json_safe, terminal_safe


def event_line(event: Event) -> str:
    """One event as a plain line: time, seq, type, task, message."""
    task = event.task_id or "-"
    text = event.message or ""
    return f"{event.at}  #{event.seq:<5} {event.type:<22} {task:<16} {text}".rstrip()


def event_json(event: Event) -> str:
    """One event as a JSON line, as events.jsonl holds it."""
    return json_safe(event.model_dump_json(exclude_none=True))


#: Events too frequent or too internal for the progress of a run shown to a person.
_QUIET = frozenset(
    {
        EventType.MAILBOX_DELIVERED,
        EventType.MAILBOX_ACKNOWLEDGED,
        EventType.ATTENTION_DECISION,
        EventType.LEADER_STARTED,
    }
)
#: Attention decisions worth a line of progress: the ones that change what a worker does.
_NOTABLE_DECISIONS = frozenset(
    {DecisionAction.PREEMPT, DecisionAction.MERGE, DecisionAction.CANCEL, DecisionAction.DEFER}
)


def progress_line(event: Event) -> str | None:
    """One event as a progress line for a person watching `crew run` (None: not worth a line)."""
    if not event.message:
        return None
    if event.type is EventType.ATTENTION_DECISION:
        decision = (event.data or {}).get("decision")
        if not isinstance(decision, dict) or decision.get("action") not in _NOTABLE_DECISIONS:
            return None
    elif event.type in _QUIET:
        return None
    return f"{event.at[11:19]}  {event.message}"


def show_events(events: list[Event], *, json: bool, progress: bool = False) -> None:
    """Print events as they come: JSON lines (each through --jq, if given), or lines for people
    (`progress`: only those worth showing while a run goes, and none with --quiet)."""
    for event in events:
        if json or SETTINGS.jq is not None:
            print_json_line(event_json(event))
            continue
        if progress and SETTINGS.quiet:
            continue
        line = progress_line(event) if progress else event_line(event)
        if line:
            sys.stdout.write(terminal_safe(line) + "\n")
    sys.stdout.flush()
