"""Text that tries to take over the terminal it is printed on, and how to tell it did not."""

from __future__ import annotations

import re

#: Every character a terminal acts on, or a reader cannot see: C0, DEL, C1, the bidirectional
#: embeddings, overrides and isolates, the line and paragraph separators, lone surrogates.
OBEYED = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
#: What a hostile steer body or worker line may hold: a full reset (ESC c), the line-drawing
#: character set (ESC ( 0), a window title (OSC), a clear screen (CSI), an 8-bit CSI, a device
#: control string, bells, a right-to-left override and an isolate.
HOSTILE = "\x1bc\x1b(0\x1b]0;owned\x07\x1b[2J\x9b1;1H\x1bP+q\x1b\\\x07\u202eevil\u2066x\u2069"

#: A colour or style sequence: the one kind of escape a worker's output may keep on a terminal.
SGR = re.compile(r"\x1b\[[0-9;:]*m")


def controls_left(shown: str) -> set[str]:
    """The controls in a worker's output as shown on a terminal, beyond its colours and the
    line feeds, tabs and CRLF line ends it keeps."""
    return set(OBEYED.findall(SGR.sub("", shown).replace("\r\n", "\n"))) - {"\n", "\t"}
