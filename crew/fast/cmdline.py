"""The command lines the fast path takes, and every option it leaves to the full command.

Each hot command's arguments and options are those of its typer command (crew/cli); a test
(tests/test_fast.py) enumerates the typer command's parameters and fails on any this table does
not account for, so the two definitions cannot drift apart. Anything outside the table — an
unknown option, `--opt=value`, `--`, a `-` where no text is read from stdin, a missing or extra
argument — is the full command's to parse and, if it is wrong, to explain.
"""

from __future__ import annotations

import re
import sys

#: A duration crew/clock.py `parse_duration` surely takes (CREW_LOCK_TIMEOUT, a send's --timeout);
#: any other is checked by the full command. Compiled (and cached by `re`) where one is given.
PLAIN_DURATION = r"([0-9]{1,6}(\.[0-9]{1,6})?)(ms|s|m)?"
#: crew/clock.py's units of a PLAIN_DURATION.
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0}


def is_plain_duration(text: str) -> bool:
    return re.fullmatch(PLAIN_DURATION, text) is not None


def plain_seconds(text: str) -> float:
    """A PLAIN_DURATION (checked to be one) in seconds."""
    match = re.fullmatch(PLAIN_DURATION, text)
    if match is None:
        raise ValueError(f"not a plain duration: {text!r}")
    return float(match.group(1)) * _UNIT_SECONDS[match.group(3) or "s"]


class Fallback(Exception):
    """Something the fast path does not do: the full command does it (and explains any error).
    Raised only before anything is written."""


class Spec:
    """One command as the fast path reads it."""

    __slots__ = ("arguments", "flags", "many", "optional", "rest", "slow", "stdin", "values")

    def __init__(
        self,
        arguments: tuple[str, ...],
        *,
        optional: tuple[str, ...] = (),
        rest: str | None = None,
        flags: frozenset[str] = frozenset(),
        values: frozenset[str] = frozenset(),
        many: frozenset[str] = frozenset(),
        slow: frozenset[str] = frozenset(),
        stdin: str | None = None,
    ) -> None:
        #: Positional arguments, in order; then `optional` ones.
        self.arguments = arguments
        self.optional = optional
        #: A list argument after them, of any length (`logs RUN [TASK]...`): `Call.rest`.
        self.rest = rest
        #: Options the fast path takes: flags, and options with a value.
        self.flags = flags
        self.values = values
        #: Options with a value that may be given again and again (`Call.lists`).
        self.many = many
        #: Options of the command that always go to the full command.
        self.slow = slow
        #: The argument that `-` reads from stdin (`stdin_text`), if any.
        self.stdin = stdin


_SEND_SLOW = frozenset({"--force", "--jq"})
_SEND_FLAGS = frozenset({"--json", "--quiet", "-q"})
_SEND_VALUES = frozenset({"--home", "--session", "--idempotency-key"})
_WAIT_FLAGS = frozenset({"--wait", "--wait-ack"})

_LEAD_FLAGS = frozenset({"--detach", "--no-input", "--json", "--quiet", "-q"})
_LEAD_VALUES = frozenset({"--home", "--session"})
_LEAD_SLOW = frozenset({"--jq", "--color"})

SPECS: dict[str, Spec] = {
    "status": Spec(
        (),
        optional=("run",),
        flags=frozenset({"--json"}),
        values=frozenset({"--home", "--color"}),
        slow=frozenset({"--jq"}),
    ),
    **dict.fromkeys(
        ("runs", "ps"),
        Spec(
            (),
            flags=frozenset({"--json", "--quiet", "-q"}),
            values=frozenset({"--home", "--color", "--status"}),
            slow=frozenset({"--jq"}),
        ),
    ),
    "mailbox": Spec(
        ("run",),
        flags=frozenset({"--json"}),
        values=frozenset({"--home", "--color", "--task", "--box", "--status"}),
        slow=frozenset({"--jq"}),
    ),
    "steer": Spec(
        ("run", "task", "body"),
        flags=_SEND_FLAGS | _WAIT_FLAGS,
        values=_SEND_VALUES | {"--timeout"},
        slow=_SEND_SLOW,
        stdin="body",
    ),
    "follow-up": Spec(
        ("run", "task", "body"),
        flags=_SEND_FLAGS | _WAIT_FLAGS,
        values=_SEND_VALUES | {"--timeout"},
        slow=_SEND_SLOW,
        stdin="body",
    ),
    "nudge": Spec(
        ("run", "task"),
        optional=("body",),
        flags=_SEND_FLAGS | _WAIT_FLAGS,
        values=_SEND_VALUES | {"--timeout"},
        slow=_SEND_SLOW,
        stdin="body",
    ),
    "respond": Spec(
        ("run", "task", "body"),
        flags=_SEND_FLAGS | _WAIT_FLAGS,
        values=_SEND_VALUES | {"--timeout", "--contact"},
        slow=_SEND_SLOW,
        stdin="body",
    ),
    "add": Spec(
        ("run", "prompt"),
        flags=_SEND_FLAGS | {"--force"},
        values=_SEND_VALUES | {"--agent", "--id", "--title"},
        many=frozenset({"--depends-on"}),
        slow=frozenset({"--jq"}),
        stdin="prompt",
    ),
    "handoff": Spec(
        ("run", "to"),
        flags=_SEND_FLAGS | {"--force"},
        values=frozenset({"--home", "--session"}),
        slow=frozenset({"--jq"}),
    ),
    "cancel": Spec(
        ("run",),
        optional=("task",),
        flags=_SEND_FLAGS | {"--force"},
        values=frozenset({"--home", "--session", "--grace"}),
        slow=frozenset({"--jq"}),
    ),
    "logs": Spec(
        ("run",),
        rest="tasks",
        flags=frozenset({"--raw", "--timestamps", "--json"}),
        values=frozenset({"--home", "--tail", "--since", "--color"}),
        slow=frozenset({"--follow", "-f", "--jq"}),
    ),
    "events": Spec(
        ("run",),
        flags=frozenset({"--json"}),
        values=frozenset({"--home", "--task"}),
        slow=frozenset({"--follow", "-f", "--type", "--jq"}),
    ),
    "schema": Spec((), optional=("name",), flags=frozenset({"--json"}), slow=frozenset({"--jq"})),
    "doctor": Spec(
        (),
        optional=("run",),
        flags=frozenset({"--repair", "--json", "--quiet", "-q"}),
        values=frozenset({"--home"}),
        slow=frozenset({"--jq"}),
    ),
    "run": Spec(
        (),
        optional=("crew_toml",),
        flags=_LEAD_FLAGS,
        values=_LEAD_VALUES | {"--max-parallel", "--timeout"},
        slow=_LEAD_SLOW,
    ),
    "resume": Spec(("run",), flags=_LEAD_FLAGS | {"--force"}, values=_LEAD_VALUES, slow=_LEAD_SLOW),
    "rerun": Spec(
        ("run",),
        rest="tasks",
        flags=_LEAD_FLAGS - {"--quiet", "-q"} | {"--failed"},
        values=_LEAD_VALUES | {"--max-parallel", "--timeout"},
        slow=frozenset({"--jq"}),
    ),
    "rm": Spec(
        (),
        rest="runs",
        flags=frozenset({"--dry-run", "--json"}),
        values=frozenset({"--home"}),
        slow=frozenset({"--force", "--jq"}),
    ),
    "prune": Spec(
        (),
        flags=frozenset({"--dry-run", "--json"}),
        values=frozenset({"--home", "--keep", "--older-than"}),
        slow=frozenset({"--jq"}),
    ),
    "init": Spec(
        (),
        optional=("directory",),
        flags=frozenset({"--json", "--quiet", "-q"}),
        slow=frozenset({"--jq"}),
    ),
    "validate": Spec(
        (),
        optional=("crew_toml",),
        flags=frozenset({"--json"}),
        values=frozenset({"--home"}),
        slow=frozenset({"--jq"}),
    ),
    "wait": Spec(
        ("run",),
        flags=frozenset({"--json"}),
        values=frozenset({"--home", "--for", "--task"}),
        slow=frozenset({"--timeout", "--jq", "--quiet", "-q"}),
    ),
}
#: Options every command has, which the fast path leaves to the full command.
HELP_OPTIONS = frozenset({"-h", "--help"})


class Call:
    """A parsed command line: the command, its arguments by name, and its options."""

    __slots__ = ("arguments", "command", "lists", "options", "rest")

    def __init__(
        self,
        command: str,
        arguments: dict[str, str],
        options: dict[str, str],
        rest: list[str] | None = None,
        lists: dict[str, list[str]] | None = None,
    ) -> None:
        self.command = command
        self.arguments = arguments
        #: The words of the spec's list argument, if it has one.
        self.rest = rest or []
        #: Flags given map to "", options with a value to it.
        self.options = options
        #: Each option of the spec's `many` given, to its values in order.
        self.lists = lists or {}


def parse(argv: list[str]) -> Call:
    """The call `argv` makes, if the fast path takes it (Fallback otherwise)."""
    if not argv or argv[0] not in SPECS:
        raise Fallback
    command, words = argv[0], argv[1:]
    spec = SPECS[command]
    positional: list[str] = []
    options: dict[str, str] = {}
    lists: dict[str, list[str]] = {}
    index = 0
    while index < len(words):
        word = words[index]
        index += 1
        if word.startswith("-") and word != "-":
            if word in spec.flags and word not in options:
                options[word] = ""
            elif word in spec.values and word not in options and index < len(words):
                options[word] = words[index]
                index += 1
            elif word in spec.many and index < len(words):
                lists.setdefault(word, []).append(words[index])
                index += 1
            else:
                raise Fallback
        else:
            positional.append(word)
    names = spec.arguments + spec.optional
    most = len(positional) if spec.rest is not None else len(names)
    if not len(spec.arguments) <= len(positional) <= most:
        raise Fallback  # a missing or extra argument
    given = dict(zip(names, positional, strict=False))
    from_stdin = names.index(spec.stdin) if spec.stdin is not None else -1
    if any(word == "-" for i, word in enumerate(positional) if i not in {0, from_stdin}):
        raise Fallback  # a `-` the full command reads as it reads it
    return Call(command, given, options, positional[len(names) :], lists)


def stdin_text(value: str) -> str:
    """An argument as the typer command reads it: `-` is the text on stdin (crew/cli/send.py
    `_read_body`: UTF-8, trailing newlines dropped). What was read is put back as stdin, so a
    full command that runs after the fast path fell back reads the same bytes. Fallback, before
    reading, for a terminal (an answer may be a secret to prompt for), and for bytes that are
    not UTF-8 (the full command says so)."""
    if value != "-":
        return value
    if sys.stdin is None or sys.stdin.isatty():
        raise Fallback
    import io

    try:
        raw = sys.stdin.buffer.read()
    except (OSError, AttributeError):  # nothing to read: the full command says so
        raise Fallback from None
    sys.stdin = io.TextIOWrapper(io.BytesIO(raw), encoding="utf-8")
    try:
        return raw.decode("utf-8").rstrip("\n")
    except UnicodeDecodeError:
        raise Fallback from None
