"""What the JSON-lines agent protocols (pi, Claude Code, Codex) share: reading a line as a JSON
object, writing one, reading a yes, and the first message of a resumed session."""

from __future__ import annotations

from typing import Any

from crew import protocol
from crew.models import Task
from crew.protocol import parse_json


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
