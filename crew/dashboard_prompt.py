"""The live view's inline answer prompt (crew/dashboard.py): the rows it takes, to erase them
after, and a line typed on the terminal that gives way when the run is no longer led here."""

from __future__ import annotations

import os
import select
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console
    from rich.control import Control as RichControl


class Ended(Exception):
    """The leader thread finished while the person was typing an answer."""


class Rows:
    """Prints to a console and counts the terminal rows it took (wrapped lines and the line the
    person typed included), so that they can be erased."""

    def __init__(self, console: Console, keys: int | None = None, wake_fd: int | None = None):
        self.console = console
        self.rows = 0
        self._keys, self._wake_fd = keys, wake_fd

    def print(self, markup: str) -> None:
        from rich.text import Text

        self.console.print(markup)
        # As rich wrapped it (at spaces), not as the terminal would have.
        self.rows += len(self.console.render_lines(Text.from_markup(markup), pad=False))

    def input(self, prompt: str) -> str:
        """A line typed by the person ('' at end of input); Ended when the wake-up descriptor
        becomes readable first (a blocking `input()` would hold the terminal until Enter)."""
        if self._keys is None or self._wake_fd is None:
            try:
                typed = input(prompt)
            except EOFError:
                typed = ""
        else:
            self.console.file.write(prompt)
            self.console.file.flush()
            typed = self._line()
        self.rows += self._height(prompt + typed)
        return typed

    def _line(self) -> str:
        """A line from the terminal in line mode (its own editing: erase, kill the line)."""
        assert self._keys is not None and self._wake_fd is not None
        typed = b""
        while not typed.endswith(b"\n"):
            ready, _, _ = select.select([self._keys, self._wake_fd], [], [])
            if self._wake_fd in ready:
                self.console.file.write("\n")
                raise Ended
            chunk = os.read(self._keys, 4096)
            if not chunk:
                break  # end of input (Ctrl-D)
            typed += chunk
        return typed.decode(errors="replace").rstrip("\r\n")

    def _height(self, text: str) -> int:
        """The rows a line the terminal echoed takes (it wraps at its edge, not at spaces)."""
        from rich.cells import cell_len

        return max(1, -(-cell_len(text) // max(1, self.console.width)))


def erase_rows(rows: int) -> RichControl:
    """Erase the `rows` rows above the cursor (which starts a line) and go to the first."""
    from rich.control import Control as RichControl
    from rich.segment import ControlType

    up_and_erase = ((ControlType.CURSOR_UP, 1), (ControlType.ERASE_IN_LINE, 2))
    return RichControl(ControlType.CARRIAGE_RETURN, *(up_and_erase * rows))
