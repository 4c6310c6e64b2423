"""What the JSON-lines agent protocols (pi, Claude Code, Codex) share: reading a line as a JSON
object, writing one, reading a yes, and the first message of a resumed session."""

from __future__ import annotations

from typing import Any

from crew import protocol
from crew.models import Task
from crew.protocol import parse_json
from crew.text import YES

#: The answer to a permission request that allows it and what the agent would ask about next
#: of the same kind, for the rest of the agent's session (and `always`, a person's word for it).
SESSION = "session"
FOR_SESSION = frozenset({SESSION, "always"})
#: The options of a permission request that can be allowed for the session.
SESSION_OPTIONS = ["yes", "no", SESSION]


def confirms(answer: str) -> bool:
    """Whether an answer to a yes/no question says yes (only an explicit yes does; allowing
    for the session is a yes too)."""
    return answer.strip().lower() in YES | FOR_SESSION


def for_session(answer: str) -> bool:
    """Whether an answer to a permission request allows it for the rest of the session."""
    return answer.strip().lower() in FOR_SESSION


def json_object(line: str) -> dict[str, Any] | None:
    """A line an agent printed, if it is a JSON object within crew's bounds (nested at most
    MAX_DEPTH deep; lone surrogates made U+FFFD); anything else is plain output."""
    try:
        value = parse_json(line)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def json_line(payload: dict[str, Any]) -> bytes:
    """One compact JSON line: what every JSON-lines agent protocol reads (exactly one line for
    any reader, as crew's own frames are)."""
    return protocol.json_line(payload)


def continuation(task: Task) -> str:
    """An agent's first message when its own session was resumed.

    The conversation goes on, so the task is not set again as if new; it is quoted all the same,
    because the agent may have saved nothing before the attempt was cut short (pi writes its
    session file only after the first reply), and then this message is all the agent has.
    """
    return (
        "[crew] Your previous run of this task was cut short (the crew leader restarted), and"
        " this conversation was resumed. Continue from where you left off, without redoing"
        " what is already done. The task, as first given:\n\n" + task.prompt
    )
