"""What `crew logs` shows: a worker's output as stored or made safe for a terminal; or its lines
(crew/store/logindex.py `merged`, with the --tail and --since read here), shown with task
prefixes, receive times or as JSON lines. The standard library alone, and little of it (no
`typing`, `dataclasses` or `datetime` until they are needed), so the fast path (crew/fast/logs.py)
shows them as the full command does, with this code, and as fast as it did without it.
"""

from __future__ import annotations

import json as jsonlib
import sys

from crew.ids import shown
from crew.output import SETTINGS, Color, colored, print_json_line
from crew.text import RESET_STYLE, TerminalStream, json_safe

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable

    from crew.store.logindex import TimedLine


def tail_count(text: str | None) -> int | None:
    """--tail N: a number of lines, 0 or more."""
    if text is None:
        return None
    from crew.errors import UsageError

    if not text.isascii() or not text.isdigit():
        raise UsageError(f"--tail: expected a number of lines (0 or more), got {shown(text)}.")
    return int(text) if len(text) < 19 else sys.maxsize  # more lines than any log holds


def since_us(text: str | None) -> int | None:
    """--since: a duration ago, or an ISO 8601 time; microseconds since the epoch."""
    if text is None:
        return None
    from datetime import UTC, datetime

    from crew.clock import parse_duration
    from crew.errors import UsageError

    now = datetime.now(UTC)
    try:
        moment = now.timestamp() - parse_duration(text)
    except ValueError:
        try:
            when = datetime.fromisoformat(text)
        except ValueError:
            raise UsageError(
                "--since: expected a duration like '10m' or an ISO 8601 time like "
                f"'2026-11-30T12:00:00Z', got {shown(text)}."
            ) from None
        moment = (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp()
    return int(moment * 1_000_000)


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


_last_time: list[int | str] = [-1, ""]
#: Made once: `json.dumps` with options makes an encoder per call.
_ENCODER = jsonlib.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
#: The colours of task prefixes, in turn (bright cyan, yellow, green, magenta, blue, red, and
#: their normal shades), as `docker compose logs` gives its services.
_PREFIX_COLOURS = (96, 93, 92, 95, 94, 91, 36, 33, 32, 35, 34, 31)


class LineStyle:
    """How `crew logs` shows lines: after task prefixes (padded to the longest id of `tasks`,
    coloured in turn with `colour`), after receive times, as JSON; bytes as stored (`raw`) or
    made safe for a terminal."""

    __slots__ = ("_prefixes", "colour", "json", "prefixed", "raw", "tasks", "timestamps")

    def __init__(
        self,
        tasks: tuple[str, ...],
        *,
        prefixed: bool,
        timestamps: bool = False,
        json: bool = False,
        raw: bool = True,
        colour: bool = False,
    ) -> None:
        self.tasks = tasks
        self.prefixed = prefixed
        self.timestamps = timestamps
        self.json = json
        self.raw = raw
        self.colour = colour
        #: Each task's prefix, made once (a task the run gained later comes after `tasks`).
        self._prefixes: dict[str, str] = {}

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
        from datetime import UTC, datetime, timedelta

        from crew.clock import format_timestamp

        moment = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=time_us)
        _last_time[:] = [time_us, format_timestamp(moment)]
    return str(_last_time[1])


def _text(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")
