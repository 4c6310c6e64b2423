"""Streams shown as they come: the event log (`crew events`, `crew run`'s progress) and
workers' output (`crew logs`). Lines for people are made safe for a terminal; JSON is exact."""

from __future__ import annotations

import json as jsonlib
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from crew import clock
from crew.models import Event
from crew.output import SETTINGS, Color, colored, print_json_line
from crew.registry import DecisionAction, EventType
from crew.store.logindex import TimedLine
from crew.text import RESET_STYLE, TerminalStream, json_safe, terminal_safe


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


def show_output(chunks: Iterable[bytes], *, raw: bool, flush: bool) -> None:
    """A worker's output: its bytes exactly as stored when stdout is not a terminal (a file, a
    pipe) or with `raw`; on a terminal (or anywhere with --color always), as `less -R` would
    show it (see `TerminalStream`), without its colours where crew/output.py says none."""
    if raw or not (sys.stdout.isatty() or SETTINGS.color is Color.ALWAYS):
        out = sys.stdout.buffer
        for chunk in chunks:
            out.write(chunk)
            if flush:
                out.flush()
        return
    stream = TerminalStream(colors=colored())
    try:
        for chunk in chunks:
            sys.stdout.write(stream.feed(chunk))
            if flush:
                sys.stdout.flush()
    finally:
        sys.stdout.write(stream.end())
        sys.stdout.flush()


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_last_time: list[int | str] = [-1, ""]
#: Made once: `json.dumps` with options makes an encoder per call.
_ENCODER = jsonlib.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
#: The colours of task prefixes, in turn (bright cyan, yellow, green, magenta, blue, red, and
#: their normal shades), as `docker compose logs` gives its services.
_PREFIX_COLOURS = (96, 93, 92, 95, 94, 91, 36, 33, 32, 35, 34, 31)


@dataclass(frozen=True)
class LineStyle:
    """How `crew logs` shows lines: after task prefixes (padded to the longest id of `tasks`,
    coloured in turn with `colour`), after receive times, as JSON; bytes as stored (`raw`) or
    made safe for a terminal."""

    tasks: tuple[str, ...]
    prefixed: bool
    timestamps: bool = False
    json: bool = False
    raw: bool = True
    colour: bool = False
    #: Each task's prefix, made once (a task the run gained later comes after `tasks`).
    _prefixes: dict[str, str] = field(default_factory=dict, compare=False, repr=False)

    def prefix(self, task_id: str) -> str:
        """What goes before each line of the task: `coder    | `, or nothing."""
        if not self.prefixed:
            return ""
        known = self._prefixes.get(task_id)
        if known is not None:
            return known
        pad = max(map(len, self.tasks), default=0)
        label = f"{task_id:<{pad}} |"
        if self.colour:
            place = self.tasks.index(task_id) if task_id in self.tasks else len(self._prefixes)
            code = _PREFIX_COLOURS[place % len(_PREFIX_COLOURS)]
            label = f"\x1b[{code}m{label}{RESET_STYLE}"
        self._prefixes[task_id] = label + " "
        return label + " "


def log_line_json(line: TimedLine) -> str:
    """One line of output as a JSON line: `{"task", "time", "line"}`."""
    document = {"task": line.task_id, "time": _time(line.time_us), "line": _text(line.text)}
    return json_safe(_ENCODER.encode(document))


def show_lines(batches: Iterable[Iterable[TimedLine]], style: LineStyle, *, flush: bool) -> None:
    """Lines of workers' output as `style` says, each batch as it comes."""
    if style.json and SETTINGS.jq is not None:
        for batch in batches:
            for line in batch:
                print_json_line(log_line_json(line))
            if flush:
                sys.stdout.flush()
        return
    out = sys.stdout.buffer
    for batch in batches:
        for line in batch:
            out.write(_shown(line, style))
        if flush:
            out.flush()
    out.flush()


def _shown(line: TimedLine, style: LineStyle) -> bytes:
    if style.json:
        return log_line_json(line).encode() + b"\n"
    head = style.prefix(line.task_id)
    if style.timestamps:
        head += _time(line.time_us)[:23] + "Z "
    if style.raw:
        return head.encode() + line.text + b"\n"
    stream = TerminalStream()
    return (head + stream.feed(line.text) + stream.end() + "\n").encode()


def _time(time_us: int) -> str:
    """A receive time as crew writes timestamps (ISO 8601, UTC, microseconds)."""
    if _last_time[0] != time_us:  # the lines of one write share their time: format it once
        moment = _EPOCH + timedelta(microseconds=time_us)
        _last_time[:] = [time_us, clock.format_timestamp(moment)]
    return str(_last_time[1])


def _text(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")
