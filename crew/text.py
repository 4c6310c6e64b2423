"""Short text for people: one-line excerpts and status tallies, written the same way everywhere."""

from __future__ import annotations

import codecs
import os
import re
from collections import Counter
from collections.abc import Iterable

ELLIPSIS = "…"


def short(text: str, limit: int = 80) -> str:
    """`text` on one line (runs of whitespace become one space), cut to `limit` characters."""
    return clip(" ".join(text.split()), limit)


def clip(text: str, limit: int) -> str:
    """`text` cut to at most `limit` characters, the last one an ellipsis when it was cut."""
    return text if len(text) <= limit else text[: limit - 1] + ELLIPSIS


def first_line(text: str, limit: int = 80) -> str:
    """The first non-blank line of `text`, cut to `limit` characters ('' when there is none)."""
    stripped = text.strip()
    return clip(stripped.splitlines()[0], limit) if stripped else ""


def counts(values: Iterable[str]) -> dict[str, int]:
    """How many times each value occurs, in first-seen order."""
    return dict(Counter(str(v) for v in values))


def tally(values: Iterable[str]) -> str:
    """`2 completed, 1 failed`: how many of each value, in first-seen order."""
    return format_counts(counts(values))


def format_counts(found: dict[str, int]) -> str:
    """`{"completed": 2, "failed": 1}` as `2 completed, 1 failed`."""
    return ", ".join(f"{n} {value}" for value, n in found.items())


# ----------------------------------------------------------------------------- terminals

#: Unicode controls a terminal (or the person reading it) acts on although nothing shows: the
#: bidirectional embeddings, overrides and isolates (which reorder what follows them: "Trojan
#: Source"), and the line and paragraph separators.
_INVISIBLE_CONTROLS = (*range(0x202A, 0x202F), *range(0x2066, 0x206A), 0x2028, 0x2029)
#: Every control character as visible, inert text: C0 controls and DEL as their Unicode control
#: pictures (ESC is ␛, so `ESC [2J` shows as `␛[2J`), C1 controls (which some terminals obey:
#: U+009B starts an escape sequence) and the controls above as `<U+XXXX>`, lone surrogates as
#: the replacement character.
_VISIBLE = str.maketrans(
    {
        **{code: chr(0x2400 + code) for code in range(0x20)},
        0x7F: "\u2421",
        **{code: f"<U+{code:04X}>" for code in (*range(0x80, 0xA0), *_INVISIBLE_CONTROLS)},
        **{code: "\ufffd" for code in range(0xD800, 0xE000)},
    }
)
#: The same, keeping what shapes lines of output: line feeds, tabs, and the carriage returns of
#: CRLF line ends (a lone one, which lets text overwrite its line, is shown as ␍ first).
_VISIBLE_KEEPING_LINES = {k: v for k, v in _VISIBLE.items() if k not in {0x09, 0x0A, 0x0D}}
_LONE_CR_RE = re.compile(r"\r(?!\n)")
#: A colour or text style (SGR: `ESC [ 1;31 m`): changes how text looks, never where it goes or
#: what the terminal does.
_SGR_RE = re.compile(r"\x1b\[[0-9;:]{0,64}m")
#: An SGR sequence cut short at the end of a chunk of output: held back until the rest arrives.
_PARTIAL_SGR_RE = re.compile(r"\x1b(?:\[[0-9;:]{0,64})?\Z")
RESET_STYLE = "\x1b[0m"


def terminal_safe(text: str, *, lines: bool = False) -> str:
    """`text` made inert for a terminal: every control character shown as visible text
    (`␛[2J`, `␇`, `<U+202E>`), so nothing in it can move the cursor, clear the screen, set a
    window title, switch character sets, ring a bell or reorder text.

    One line by default (a line break shows as `␤`); with `lines`, line feeds, tabs and CRLF
    line ends are kept.
    """
    if lines:
        return _LONE_CR_RE.sub("\u240d", text).translate(_VISIBLE_KEEPING_LINES)
    return text.translate(_VISIBLE)


def colors_wanted() -> bool:
    """Whether a terminal may be coloured unasked: not when NO_COLOR is set (no-color.org) or
    the terminal says it is dumb (`--color always` overrides both: crew/output.py)."""
    return not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"


class TerminalStream:
    """A worker's output bytes, chunk by chunk, made safe for a terminal as `less -R` shows
    them: colours and text styles (SGR sequences) pass, every other control is shown as text
    (see `terminal_safe`), lines and tabs are kept. A character or a colour split across two
    chunks is completed by the next one."""

    def __init__(self, *, colors: bool = True) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._held = ""
        self._styled = False
        #: Without colours, the SGR sequences are dropped too (--color never, NO_COLOR).
        self._colors = colors

    def feed(self, chunk: bytes) -> str:
        """What `chunk` adds, ready to print."""
        text = self._held + self._decoder.decode(chunk)
        partial = _PARTIAL_SGR_RE.search(text)
        self._held = partial.group() if partial else ""
        return self._show(text[: partial.start()] if partial else text)

    def end(self) -> str:
        """What is left at the end of the output, and a style reset if a colour was shown."""
        rest = self._show(self._held + self._decoder.decode(b"", final=True))
        self._held = ""
        return rest + (RESET_STYLE if self._styled else "")

    def _show(self, text: str) -> str:
        shown: list[str] = []
        start = 0
        for match in _SGR_RE.finditer(text):
            shown.append(terminal_safe(text[start : match.start()], lines=True))
            if self._colors:
                shown.append(match.group())
                self._styled = True
            start = match.end()
        shown.append(terminal_safe(text[start:], lines=True))
        return "".join(shown)


#: Characters JSON may carry raw inside its strings that a terminal might obey or a reader
#: might take for a line break: DEL, C1 controls, the invisible controls above, lone surrogates.
_RAW_IN_JSON_RE = re.compile(r"[\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def json_safe(text: str) -> str:
    """JSON text with each character a terminal might obey written as a `\\uXXXX` escape: the
    same JSON value (they can only occur inside strings, where the escape means the same)."""
    return _RAW_IN_JSON_RE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


#: Answers that approve a yes/no question (an agent's, or crew's own); anything else declines.
YES = frozenset({"y", "yes", "true", "ok", "okay", "sure", "approve", "approved", "confirm"})


def confirms(answer: str) -> bool:
    """Whether an answer to a yes/no question says yes (only an explicit yes does)."""
    return answer.strip().lower() in YES


def placement(node: str | None, pid: int | None) -> str:
    """Where a task's worker runs (or last ran): `c1c91b54@10.0.0.7 pid 4242` on a Ray node,
    `pid 4242` on the leader's machine, `-` before it started or was placed."""
    where = [part for part in (node, f"pid {pid}" if pid is not None else None) if part]
    return " ".join(where) or "-"
