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
    @supervisor spawn: {"agent": "coder", "prompt": "Write the tests", "wait": true}
    @supervisor withdraw: no answer within 30s, going on with sqlite

Anything else is plain output.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pydantic_core

from crew.registry import ContactType
from crew.text import clip, short

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

# Bounds on what a worker's line may make crew keep (docs/worker-protocol.md, "Limits"). Whatever
# is within them can be written in one event line (1 MiB at most) and read back by crew's own
# readers; a line beyond them is malformed, and parsing it costs time linear in its length.

#: The longest question or report kept, in characters (a longer one is cut).
MAX_PROMPT = 8 * 1024
#: The largest checkpoint state kept, in bytes of JSON (it travels in an event line: 1 MiB at most).
MAX_CHECKPOINT = 512 * 1024
#: The largest attention decision kept, in bytes of JSON (a message keeps its latest ones too).
MAX_DECISION = 16 * 1024
#: The largest spawn request, in bytes of JSON: room for the largest task prompt (64 KiB).
MAX_SPAWN = 72 * 1024
#: The fields of a spawn request, and the type of each (`agent` and `prompt` are required).
SPAWN_FIELDS: dict[str, type] = {"agent": str, "prompt": str, "id": str, "wait": bool}
#: The deepest JSON kept, in nested arrays and objects. crew's readers take 200 levels in all,
#: and an event wraps what it keeps in a few of its own.
MAX_DEPTH = 64
#: The most options a need_selection question may offer, and the longest option, in characters.
MAX_OPTIONS = 100
MAX_OPTION = 500
#: The longest line read as an `@supervisor` line, in characters: room for the largest checkpoint.
MAX_LINE = MAX_CHECKPOINT + 1024
#: How much of a malformed line its event quotes.
EXCERPT = 80
#: Kept out of a JSON line as `\uXXXX` (it means the same inside a JSON string): line breaks some
#: readers split on (U+0085, U+2028, U+2029; JSON escapes those below U+0020 itself), the other C1
#: controls (U+009B starts an escape sequence) and DEL, and lone surrogates (not valid UTF-8).
_UNSAFE_IN_A_LINE = re.compile(r"[\x7f-\x9f\u2028\u2029\ud800-\udfff]")
#: A JSON escape of a surrogate: a line without one cannot hold a lone surrogate.
_ESCAPED_SURROGATE = re.compile(r"\\u[dD][89abcdefABCDEF]")
_SURROGATE = re.compile(r"[\ud800-\udfff]")


@dataclass(frozen=True)
class Contact:
    """A blocking question: the task waits until someone responds."""

    type: ContactType
    prompt: str
    options: list[str] = field(default_factory=list)
    #: A need_selection question that takes an answer of one's own too (an agent's "Other").
    other: bool = False
    #: Its answer is a secret (a password, a token): no file of the run ever holds it.
    secret: bool = False


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
class SpawnRequest:
    """The worker adds a task to its run, as its task's child (`wait`: it waits for it)."""

    agent: str
    prompt: str
    task_id: str | None = None
    wait: bool = False


@dataclass(frozen=True)
class Withdrawn:
    """The worker (or its agent) took its open question back: the task no longer waits for an
    answer."""

    reason: str = ""


@dataclass(frozen=True)
class Malformed:
    """Starts with @supervisor but does not parse, or says more than crew keeps: kept as plain
    output, and counted. `excerpt`: the start of the line, on one line."""

    reason: str
    excerpt: str = ""


Parsed = (
    Contact
    | Report
    | Ack
    | DecisionRecord
    | CheckpointRecord
    | SpawnRequest
    | Withdrawn
    | Malformed
)


def strip_ansi(text: str) -> str:
    return ANSI_RE.sub("", text)


def parse_line(line: str) -> Parsed | None:
    """What an output line says to the supervisor, or None for plain output.

    Never raises, and takes time linear in the line's length whatever it holds: a line over
    MAX_LINE, JSON nested deeper than MAX_DEPTH or larger than its limit, a question with more
    than MAX_OPTIONS options, are all Malformed.
    """
    if len(line) > MAX_LINE:
        if _PREFIX_RE.match(strip_ansi(line[: 4 * EXCERPT])) is None:
            return None
        return _malformed(f"a line of {len(line)} characters (the limit is {MAX_LINE})", line)
    text = strip_ansi(line).rstrip("\r\n")
    if _PREFIX_RE.match(text) is None:
        return None
    match = _CONTACT_RE.match(text)
    if match is None:
        return _malformed("expected '@supervisor <type>: <text>'", text)
    name, rest = match.group(1), match.group(2).strip()
    try:
        kind = ContactType(name)
    except ValueError:
        known = ", ".join(t.value for t in ContactType)
        return _malformed(f"unknown type {clip(name, 40)!r} (known: {known})", text)
    if kind.blocking:
        return _contact(kind, rest, text)
    if kind.report:
        return Report(kind, rest[:MAX_PROMPT])
    if kind is ContactType.WITHDRAW:
        return Withdrawn(rest[:MAX_PROMPT])
    if kind is ContactType.ACK:
        if _MESSAGE_ID_RE.fullmatch(rest) is None:
            return _malformed(f"ack needs a message id like msg_…, got {rest[:40]!r}", text)
        return Ack(rest)
    limit = {ContactType.CHECKPOINT: MAX_CHECKPOINT, ContactType.SPAWN: MAX_SPAWN}
    try:
        data = load_json(rest, limit=limit.get(kind, MAX_DECISION))
    except ValueError as error:
        return _malformed(f"{kind} needs JSON: {error}", text)
    if kind is ContactType.CHECKPOINT:
        return CheckpointRecord(data)
    if kind is ContactType.SPAWN:
        return _spawn(data, text)
    if not isinstance(data, dict):
        return _malformed("decision needs a JSON object", text)
    return DecisionRecord(data)


def _spawn(data: Any, line: str) -> SpawnRequest | Malformed:
    """A spawn request's JSON object, checked against SPAWN_FIELDS."""
    if not isinstance(data, dict):
        return _malformed("spawn needs a JSON object", line)
    for name, value in data.items():
        wanted = SPAWN_FIELDS.get(name)
        if wanted is None:
            known = ", ".join(SPAWN_FIELDS)
            return _malformed(f"spawn has no field {clip(name, 40)!r} (fields: {known})", line)
        if not isinstance(value, wanted):
            return _malformed(f"spawn's {name} must be a {wanted.__name__}", line)
    if "agent" not in data or "prompt" not in data:
        return _malformed("spawn needs an agent and a prompt", line)
    return SpawnRequest(data["agent"], data["prompt"], data.get("id"), data.get("wait", False))


def spawn_line(agent: str, prompt: str, *, task_id: str | None = None, wait: bool = False) -> str:
    """The line a worker prints to spawn a task (the inverse of parse_line for spawns)."""
    request: dict[str, Any] = {"agent": agent, "prompt": prompt, "wait": wait}
    if task_id is not None:
        request["id"] = task_id
    text = _one_line_json(json.dumps(request, ensure_ascii=False))
    return readable(f"@supervisor {ContactType.SPAWN}: {text}")


def withdraw_line(reason: str = "") -> str:
    """The line a worker prints to take its open question back (the inverse of parse_line)."""
    return readable(f"@supervisor {ContactType.WITHDRAW}: {' '.join(one_line(reason).split())}")


def readable(line: str) -> str:
    """A line a worker is about to print, as it is: ValueError where the leader would take it
    for malformed (parse_line's rules, the one place they are), so that the worker is told
    and does not wait for what will never come."""
    parsed = parse_line(line)
    if isinstance(parsed, Malformed):
        raise ValueError(f"crew would not read this line: {parsed.reason}")
    return line


def _malformed(reason: str, line: str) -> Malformed:
    return Malformed(reason, short(one_line(line[: 4 * EXCERPT]), EXCERPT))


def _contact(kind: ContactType, rest: str, line: str) -> Contact | Malformed:
    options: list[str] = []
    if kind is ContactType.NEED_SELECTION:
        found = _trailing_options(rest)
        if found is None:
            return _malformed("need_selection needs its options at the end, like [a|b|c]", line)
        rest, listed = found
        # dict.fromkeys: duplicates dropped in one pass, first-seen order kept.
        options = [o for o in dict.fromkeys(part.strip() for part in listed.split("|")) if o]
        if not options:
            return _malformed("need_selection needs at least one option, like [a|b|c]", line)
        if len(options) > MAX_OPTIONS:
            return _malformed(
                f"need_selection offers {len(options)} options (at most {MAX_OPTIONS})", line
            )
        if (longest := max(len(o) for o in options)) > MAX_OPTION:
            return _malformed(
                f"an option of {longest} characters (at most {MAX_OPTION} each)", line
            )
    if not rest:
        return _malformed(f"{kind} needs a question after the colon", line)
    return Contact(kind, rest[:MAX_PROMPT], options)


def _trailing_options(text: str) -> tuple[str, str] | None:
    """`Which one? [a|b|c]` as `("Which one?", "a|b|c")`: a bracketed group that ends the text
    and holds no bracket itself (None when there is none). Linear in the text's length, unlike a
    regular expression searched for at every position."""
    text = text.rstrip()
    if not text.endswith("]"):
        return None
    start = text.rfind("[", 0, len(text) - 1)
    if start < 0 or "]" in text[start + 1 : -1]:
        return None
    return text[:start].strip(), text[start + 1 : -1]


# ----------------------------------------------------------------------------- JSON, bounded


def parse_json(text: str) -> Any:
    """`text` as JSON that crew can keep: ValueError (saying why) for invalid JSON, `NaN` or an
    infinite number, or nesting deeper than MAX_DEPTH; a lone surrogate (which no UTF-8 file can
    hold) becomes U+FFFD. Takes time linear in the text's length."""
    try:
        value = json.loads(text, parse_constant=_no_constant, parse_float=_finite)
    except RecursionError:  # the decoder's own guard, far deeper than MAX_DEPTH
        raise ValueError(f"nested deeper than {MAX_DEPTH} levels") from None
    except ValueError as error:
        raise ValueError(f"not valid JSON ({clip(str(error), 80)})") from None
    return _kept(value, MAX_DEPTH, scrub=_ESCAPED_SURROGATE.search(text) is not None)


def load_json(text: str, *, limit: int) -> Any:
    """`parse_json`, and at most `limit` bytes once crew writes it (ValueError otherwise)."""
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > limit:
        raise ValueError(f"{size} bytes of JSON (the limit is {limit})")
    value = parse_json(text)
    if (written := len(pydantic_core.to_json(value))) > limit:
        raise ValueError(f"{written} bytes of JSON once written (the limit is {limit})")
    return value


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    number = float(text)
    if math.isinf(number):
        raise ValueError(f"{clip(text, 20)} is out of range")
    return number


def _kept(value: Any, room: int, *, scrub: bool) -> Any:
    """`value` checked to nest at most `room` levels deep (lone surrogates replaced if `scrub`)."""
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value) if scrub else value
    if not isinstance(value, list | dict):
        return value
    if room == 0:
        raise ValueError(f"nested deeper than {MAX_DEPTH} levels")
    if isinstance(value, list):
        return [_kept(item, room - 1, scrub=scrub) for item in value]
    return {
        _kept(key, room, scrub=scrub): _kept(item, room - 1, scrub=scrub)
        for key, item in value.items()
    }


def one_line(text: str) -> str:
    """`text` as one line of visible characters: escape sequences removed whole, line breaks shown
    as ␤, a tab as a space, any other control character as its picture (C1 controls as �)."""
    return _LINE_BREAKS_RE.sub("\u2424", strip_ansi(text)).translate(_VISIBLE_CONTROLS)


def contact_line(kind: ContactType, prompt: str, options: list[str] | None = None) -> str:
    """The line a worker prints to ask (the inverse of parse_line for contacts)."""
    text = " ".join(one_line(prompt).split())
    if any("[" in o or "]" in o for o in options or ()):
        raise ValueError("An option may not hold '[' or ']': the options are read from brackets.")
    if options:
        text += " [" + "|".join(option_text(o) for o in options) + "]"
    return readable(f"@supervisor {kind}: {text}")


def option_text(option: str) -> str:
    """An option as a contact line writes it, and so as its answer comes back: on one line,
    its runs of spaces one space, `|` (the options' separator) written `/`."""
    return " ".join(one_line(option).replace("|", "/").split())


# ----------------------------------------------------------------------------- stdin frames


def written_options(options: list[str]) -> dict[str, str]:
    """Each option as the question's line writes it (and its answer comes back), to the option
    as given; ValueError where two would be written alike, as no answer could tell them apart."""
    shown: dict[str, str] = {}
    for option in options:
        written = option_text(option)
        if shown.setdefault(written, option) != option:
            raise ValueError(
                f"The options {shown[written]!r} and {option!r} are both written {written!r} on "
                "the question's line: no answer could tell them apart."
            )
    return shown


def checkpoint_line(state: Any) -> str:
    """The line that saves `state`: its JSON on one line, whatever characters its strings hold."""
    text = _one_line_json(json.dumps(state, ensure_ascii=False, allow_nan=False))
    if (size := len(text.encode())) > MAX_CHECKPOINT:
        raise ValueError(
            f"A checkpoint's state is limited to {MAX_CHECKPOINT} bytes of JSON, this one has "
            f"{size}: save large data in a file and checkpoint its path."
        )
    return readable(f"@supervisor {ContactType.CHECKPOINT}: {text}")


def json_frame(message: MailboxMessage) -> bytes:
    """A message as one JSON line: `{"type","id","body","priority","data"}`."""
    frame = {
        "type": message.kind.value,
        "id": message.id,
        "body": message.body,
        "priority": message.priority.value,
        "data": message.data or {},
    }
    return json_line(frame)


def json_line(payload: Any) -> bytes:
    """`payload` as compact JSON on exactly one line, for any reader: one that splits on U+2028,
    U+2029 or U+0085 (Python's `splitlines`, some editors and terminals) finds none, since those
    are written as `\\uXXXX` escapes, which mean the same in a JSON string."""
    return (
        _one_line_json(json.dumps(payload, ensure_ascii=False, separators=(",", ":"))).encode()
        + b"\n"
    )


def _one_line_json(text: str) -> str:
    return _UNSAFE_IN_A_LINE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def sanitize_text(body: str) -> str:
    """A message body as the one line a plain-text worker reads: `one_line`, with backslash, `%`
    and `@` as look-alikes, so that no shell idiom (`read`, `echo`, `printf`) can turn it into
    more lines, a terminal sequence or an `@supervisor` line. Lossy by design."""
    return one_line(body).translate(_SHELL_LOOKALIKES)


def text_frame(message: MailboxMessage) -> bytes:
    """A message as one plain line (lossy by design; JSON frames carry exact bodies)."""
    return sanitize_text(message.body).encode("utf-8", errors="replace") + b"\n"
