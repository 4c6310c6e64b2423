"""How this process prints: the --color, --jq and --quiet options every command shares.

Each is set once, from the command line, before the command runs (crew/cli/common.py: the
option's callback), and read by the renderers (crew/render.py, crew/render_streams.py,
crew/dashboard.py), so a command gains one by declaring the option: nothing else changes.

- `--color auto|always|never`: colour and text styles for people. `auto` colours a terminal
  unless `NO_COLOR` is set (https://no-color.org); `always` colours even a pipe (and overrides
  NO_COLOR, as a flag should); `never` prints no escape sequence at all.
- `--jq EXPR`: the JSON output, filtered by jq itself (the `jq` binding, imported only then).
  Each result is printed on its own: a string as plain text (as `jq -r` prints it), anything
  else as JSON, indented as crew indents a document, or on one line where the output is JSON
  lines (a stream: the filter applies to each line). It implies --json.
- `--quiet`: no result text; what each command still prints is its own (render.py).
"""

from __future__ import annotations

import json as jsonlib
import sys
from enum import StrEnum

from crew.errors import CrewError, UsageError
from crew.text import colors_wanted, json_safe, terminal_safe

TYPE_CHECKING = False  # `typing` (and `dataclasses`) cost a fast command (crew/fast) milliseconds
if TYPE_CHECKING:
    from typing import Any, TextIO

    from rich.console import Console


class Color(StrEnum):
    """When text for people is coloured (`--color`)."""

    AUTO = "auto"
    ALWAYS = "always"
    NEVER = "never"


class Settings:
    """The output options of this process."""

    __slots__ = ("color", "jq", "quiet")

    def __init__(self) -> None:
        self.color = Color.AUTO
        #: The compiled --jq program, if one was given.
        self.jq: Any = None
        self.quiet = False


#: The one instance the options set and the renderers read.
SETTINGS = Settings()


def reset() -> None:
    """Back to the defaults (each command line starts from them; tests run many in a process)."""
    SETTINGS.color, SETTINGS.jq, SETTINGS.quiet = Color.AUTO, None, False


def colored(stream: TextIO | None = None) -> bool:
    """Whether text for people on `stream` (default stdout) gets colours and styles."""
    if SETTINGS.color is not Color.AUTO:
        return SETTINGS.color is Color.ALWAYS
    stream = stream or sys.stdout
    if not colors_wanted():
        return False
    try:
        return stream.isatty()
    except ValueError:  # a closed stream
        return False


def console() -> Console:
    """A rich console for stdout, as --color says; piped output is never wrapped or cut to a
    terminal's width."""
    from rich.console import Console

    piped = not sys.stdout.isatty()
    width = 100_000 if piped else None
    if SETTINGS.color is Color.ALWAYS:
        return Console(
            highlight=False, soft_wrap=piped, width=width, force_terminal=True, no_color=False
        )
    if SETTINGS.color is Color.NEVER:
        return Console(highlight=False, soft_wrap=piped, width=width, color_system=None)
    return Console(highlight=False, soft_wrap=piped, width=width)  # rich reads NO_COLOR itself


# ----------------------------------------------------------------------------- --jq


def use_jq(expression: str) -> None:
    """Filter this process's JSON output with `expression`; a usage error if jq cannot compile
    it (jq's own words, its pointer at the mistake as the hint)."""
    import jq  # type: ignore[import-not-found]  # the binding ships no type hints

    try:
        SETTINGS.jq = jq.compile(expression)
    except ValueError as exc:
        first, *rest = str(exc).splitlines() or ["invalid expression"]
        message = first.removeprefix("jq: error: ").rstrip(":")
        pointer = [line for line in rest if not line.startswith("jq: ")]
        raise UsageError(f"--jq: {message}.", hint="\n".join(pointer) or None) from None


def print_json(data: Any, *, compact: bool = False) -> None:
    """One JSON document (or one JSON line) on stdout, or what --jq makes of it."""
    if SETTINGS.jq is None:
        _write_json(data, compact=compact)
        return
    for value in _filtered(data):
        _write_value(value, compact=compact)


def print_json_line(line: str) -> None:
    """One line of a JSON-lines stream (`line` is JSON already), or what --jq makes of it."""
    if SETTINGS.jq is None:
        sys.stdout.write(line + "\n")
        return
    for value in _filtered(jsonlib.loads(line)):
        _write_value(value, compact=True)


def _filtered(data: Any) -> list[Any]:
    try:
        return list(SETTINGS.jq.input_value(data).all())
    except ValueError as exc:
        # The expression compiled but fails on this data (`.[]` of a number): the command has
        # done its work by now, so this is no usage error.
        raise CrewError(f"--jq: {str(exc).splitlines()[0]}.") from None


def _write_value(value: Any, *, compact: bool) -> None:
    if isinstance(value, str):  # as `jq -r`: exact in a pipe, made safe on a terminal
        shown = terminal_safe(value, lines=True) if sys.stdout.isatty() else value
        sys.stdout.write(shown + "\n")
    else:
        _write_json(value, compact=compact)


def _write_json(data: Any, *, compact: bool) -> None:
    text = jsonlib.dumps(
        data,
        ensure_ascii=False,
        separators=(",", ":") if compact else None,
        indent=None if compact else 2,
    )
    sys.stdout.write(json_safe(text) + "\n")
