"""What the JSON-lines agent protocols (pi, Claude Code, Codex) share: reading a line as a JSON
object, writing one, and reading a yes."""

from __future__ import annotations

import json
from typing import Any

#: Answers that approve a yes/no question put to an agent's supervisor; anything else declines.
YES = frozenset({"y", "yes", "true", "ok", "okay", "sure", "approve", "approved", "confirm"})


def confirms(answer: str) -> bool:
    """Whether an answer to a yes/no question says yes (only an explicit yes does)."""
    return answer.strip().lower() in YES


def json_object(line: str) -> dict[str, Any] | None:
    """A line an agent printed, if it is a JSON object (anything else is plain output)."""
    try:
        value = json.loads(line)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def json_line(payload: dict[str, Any]) -> bytes:
    """One compact JSON line: what every JSON-lines agent protocol reads."""
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"
