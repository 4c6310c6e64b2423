"""The worker protocol: what a worker's output lines mean, and the frames written to its stdin.

A line whose first non-blank content (after ANSI escapes are stripped) is
`@supervisor <type>: <text>` is addressed to the supervisor:

    @supervisor need_input: Which database should I use?
    @supervisor need_selection: Which database? [postgres|sqlite]
    @supervisor need_confirmation: Run the migrations now?
    @supervisor progress: 3 of 5 files done
    @supervisor ack: msg_0123456789abcdef
    @supervisor decision: {"action": "preempt", "item": "msg_…"}
    @supervisor checkpoint: {"done": ["parser", "lexer"], "next": "tests"}

Anything else is plain output.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from crew.registry import ContactType

if TYPE_CHECKING:
    from crew.models import MailboxMessage

# CSI (ESC [ … final), OSC (ESC ] … BEL or ST), other two-byte escapes, and 8-bit CSI.
ANSI_RE = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"
    r"|\x1b[P^_X][^\x1b]*(?:\x1b\\)?"
    r"|\x1b[@-Z\\-_]"
    r"|\x9b[0-?]*[ -/]*[@-~]"
)
_PREFIX_RE = re.compile(r"^\s*@supervisor(?![A-Za-z0-9_])")
_CONTACT_RE = re.compile(r"^\s*@supervisor\s+([A-Za-z_]+)\s*:\s?(.*)$", re.DOTALL)
_OPTIONS_RE = re.compile(r"\s*\[([^\[\]]*)\]\s*$")
_MESSAGE_ID_RE = re.compile(r"^msg_[0-9a-z]{1,32}$")
# Text framing (docs/worker-protocol.md, "Plain lines"). Every line break a reader might split
# on becomes one ␤ (SYMBOL FOR NEWLINE).
_LINE_BREAKS_RE = re.compile(r"\r\n|[\n\r\x0b\x0c\x85\u2028\u2029]")
# Any other control character as something visible and inert: a tab as the space it stands for,
# C0 controls and DEL as their Unicode control pictures (␀ … ␟, ␡), C1 controls (which have no
# pictures, and some terminals obey) as the replacement character.
_VISIBLE_CONTROLS = str.maketrans(
    {
        **{code: chr(0x2400 + code) for code in range(0x20)},
        0x09: " ",
        0x7F: "\u2421",
        **{code: "\ufffd" for code in range(0x80, 0xA0)},
    }
)
# The three ASCII characters through which a shell idiom can make new text out of a line: a
# backslash (escapes in `read` without -r, `echo` in dash, `echo -e`, `printf FORMAT`), a percent
# sign (`printf "$line"` deletes text with `%s` and, in bash, prints a newline with `%(%n)T`) and
# an at sign (from which deletions, or `echo -n` gluing two messages, could spell `@supervisor`).
# Each becomes a look-alike outside ASCII: in UTF-8 every byte of such a character is >= 0x80, so
# no shell, echo or printf, byte-oriented (dash) or not, can read one as an escape, a directive
# or an `@`.
_SHELL_LOOKALIKES = str.maketrans(
    {
        "\\": "\u29f5",  # REVERSE SOLIDUS OPERATOR
        "%": "\uff05",  # FULLWIDTH PERCENT SIGN
        "@": "\uff20",  # FULLWIDTH COMMERCIAL AT
    }
)

MAX_PROMPT = 8 * 1024
#: The largest checkpoint state kept, in bytes of JSON (it travels in an event line: 1 MiB at most).
MAX_CHECKPOINT = 512 * 1024
#: Kept out of a checkpoint line as `\uXXXX` (it means the same inside a JSON string): line breaks
#: some readers split on, C1 controls (U+009B starts an escape sequence), lone surrogates.
_UNSAFE_IN_A_LINE = re.compile(r"[\x7f-\x9f\u2028\u2029\ud800-\udfff]")
_NOT_JSON = object()


@dataclass(frozen=True)
class Contact:
    """A blocking question: the task waits until someone responds."""

    type: ContactType
    prompt: str
    options: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Report:
    """A non-blocking status, progress or note line."""

    type: ContactType
    text: str


@dataclass(frozen=True)
class Ack:
    """The worker acknowledges a message it was given."""

    message_id: str


@dataclass(frozen=True)
class DecisionRecord:
    """A worker's attention decision (`@supervisor decision: {json}`), recorded as an event."""

    data: dict[str, Any]


@dataclass(frozen=True)
class CheckpointRecord:
    """The task's progress so far, as the worker wants it back if it is restarted."""

    state: Any


@dataclass(frozen=True)
class Malformed:
    """Starts with @supervisor but does not parse: kept as plain output, and counted."""

    reason: str


Parsed = Contact | Report | Ack | DecisionRecord | CheckpointRecord | Malformed


def strip_ansi(text: str) -> str:
    return ANSI_RE.sub("", text)


def parse_line(line: str) -> Parsed | None:
    """What an output line says to the supervisor, or None for plain output. Never raises."""
    text = strip_ansi(line).rstrip("\r\n")
    if _PREFIX_RE.match(text) is None:
        return None
    match = _CONTACT_RE.match(text)
    if match is None:
        return Malformed("expected '@supervisor <type>: <text>'")
    name, rest = match.group(1), match.group(2).strip()
    try:
        kind = ContactType(name)
    except ValueError:
        known = ", ".join(t.value for t in ContactType)
        return Malformed(f"unknown type {name!r} (known: {known})")
    if kind.blocking:
        return _contact(kind, rest)
    if kind.report:
        return Report(kind, rest[:MAX_PROMPT])
    if kind is ContactType.ACK:
        if _MESSAGE_ID_RE.match(rest) is None:
            return Malformed(f"ack needs a message id like msg_…, got {rest[:40]!r}")
        return Ack(rest)
    try:
        data = json.loads(rest)
    except (ValueError, RecursionError):
        data = _NOT_JSON
    if kind is ContactType.CHECKPOINT:
        return Malformed("checkpoint needs JSON") if data is _NOT_JSON else CheckpointRecord(data)
    if not isinstance(data, dict):
        return Malformed("decision needs a JSON object")
    return DecisionRecord(data)


def _contact(kind: ContactType, rest: str) -> Contact | Malformed:
    options: list[str] = []
    if kind is ContactType.NEED_SELECTION:
        found = _OPTIONS_RE.search(rest)
        if found is None:
            return Malformed("need_selection needs its options at the end, like [a|b|c]")
        for part in found.group(1).split("|"):
            option = part.strip()
            if option and option not in options:
                options.append(option)
        if not options:
            return Malformed("need_selection needs at least one option, like [a|b|c]")
        rest = rest[: found.start()].strip()
    if not rest:
        return Malformed(f"{kind} needs a question after the colon")
    return Contact(kind, rest[:MAX_PROMPT], options)


def one_line(text: str) -> str:
    """`text` as one line of visible characters: escape sequences removed whole, line breaks shown
    as ␤, a tab as a space, any other control character as its picture (C1 controls as �)."""
    return _LINE_BREAKS_RE.sub("\u2424", strip_ansi(text)).translate(_VISIBLE_CONTROLS)


def contact_line(kind: ContactType, prompt: str, options: list[str] | None = None) -> str:
    """The line a worker prints to ask (the inverse of parse_line for contacts)."""
    text = " ".join(one_line(prompt).split())
    if options:
        text += (
            " [" + "|".join(" ".join(one_line(o).replace("|", "/").split()) for o in options) + "]"
        )
    return f"@supervisor {kind}: {text}"


# ----------------------------------------------------------------------------- stdin frames


def checkpoint_line(state: Any) -> str:
    """The line that saves `state`: its JSON on one line, whatever characters its strings hold."""
    text = json.dumps(state, ensure_ascii=False, allow_nan=False)
    text = _UNSAFE_IN_A_LINE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
    if (size := len(text.encode())) > MAX_CHECKPOINT:
        raise ValueError(
            f"A checkpoint's state is limited to {MAX_CHECKPOINT} bytes of JSON, this one has "
            f"{size}: save large data in a file and checkpoint its path."
        )
    return f"@supervisor {ContactType.CHECKPOINT}: {text}"


def json_frame(message: MailboxMessage) -> bytes:
    """A message as one JSON line: `{"type","id","body","priority","data"}`."""
    frame = {
        "type": message.kind.value,
        "id": message.id,
        "body": message.body,
        "priority": message.priority.value,
        "data": message.data or {},
    }
    return json.dumps(frame, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"


def sanitize_text(body: str) -> str:
    """A message body as the one line a plain-text worker reads: `one_line`, with backslash, `%`
    and `@` as look-alikes, so that no shell idiom (`read`, `echo`, `printf`) can turn it into
    more lines, a terminal sequence or an `@supervisor` line. Lossy by design."""
    return one_line(body).translate(_SHELL_LOOKALIKES)


def text_frame(message: MailboxMessage) -> bytes:
    """A message as one plain line (lossy by design; JSON frames carry exact bodies)."""
    return sanitize_text(message.body).encode("utf-8", errors="replace") + b"\n"
