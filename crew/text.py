"""Short text for people: one-line excerpts and status tallies, written the same way everywhere."""

from __future__ import annotations

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
