"""Whether a Python worker's output left off at the end of a line (the worker SDK's, crew.worker).

The leader reads an `@supervisor` line only at the start of a line. A worker that prints part of
a line (`print(…, end="")`, a progress bar ending in `\r`) and then a protocol line would have
the leader read one line that does not start with `@supervisor`: a question never asked, an
acknowledgement never given. The SDK watches what goes through `sys.stdout` and `sys.stderr`
(one pipe, for a worker) and starts its own line on a new one when the output left off inside
a line.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any, TextIO, cast


class LineEnds:
    """Where the watched streams' output left off (shared by both: they are one pipe)."""

    def __init__(self) -> None:
        self.at_line_start = True

    def noted(self, text: str) -> None:
        if text:
            self.at_line_start = text.endswith("\n")


class _Watched:
    """A text stream, each write noted; everything else is the stream's own."""

    def __init__(self, stream: TextIO, ends: LineEnds) -> None:
        self._stream = stream
        self.line_ends = ends

    def write(self, text: str) -> int:
        written = self._stream.write(text)
        self.line_ends.noted(text)
        return written

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def watch_standard_streams() -> tuple[TextIO, LineEnds]:
    """Watch `sys.stdout` and `sys.stderr` (once per process); returns the stdout to print to
    and where the output left off."""
    current = getattr(sys.stdout, "line_ends", None)
    if isinstance(current, LineEnds):
        return sys.stdout, current
    ends = LineEnds()
    sys.stdout = cast(TextIO, _Watched(sys.stdout, ends))
    if sys.stderr is not None:
        sys.stderr = cast(TextIO, _Watched(sys.stderr, ends))
    return sys.stdout, ends
