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
import threading
from collections.abc import Iterable
from typing import Any, TextIO, cast


class LineEnds:
    """Where each watched stream's output left off. They are one pipe, but each has its own
    buffer (stdout's a block's worth when piped, stderr's a line): their bytes reach the pipe
    in an order their writes do not give. A line begins a line for sure only when neither
    stream left off inside one; an empty line too many is the price of not knowing."""

    def __init__(self) -> None:
        self._inside: set[int] = set()  # the streams (by id) whose last write ended mid-line
        self._streams: list[TextIO] = []
        self.lock = threading.RLock()  # a write and its note, a check and the line it decides

    def watch(self, stream: TextIO) -> None:
        """One more stream to flush before a line of one's own."""
        self._streams.append(stream)

    @property
    def at_line_start(self) -> bool:
        return not self._inside

    def line_begun(self) -> str:
        """Before a line of one's own (lock held): each stream's buffer sent to the pipe, and
        a line break to end what they left unfinished ('' where none did). Once the line is
        written, every stream starts a line."""
        for stream in self._streams:
            stream.flush()
        begun = "" if self.at_line_start else "\n"
        self._inside.clear()
        return begun

    def noted(self, stream: object, text: str) -> None:
        if not text:
            return
        if text.endswith("\n"):
            self._inside.discard(id(stream))
        else:
            self._inside.add(id(stream))


class _Watched:
    """A text stream, each write noted; everything else is the stream's own."""

    def __init__(self, stream: TextIO, ends: LineEnds) -> None:
        self._stream = stream
        self.line_ends = ends
        ends.watch(stream)

    def write(self, text: str) -> int:
        with self.line_ends.lock:
            written = self._stream.write(text)
            self.line_ends.noted(self, text)
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
