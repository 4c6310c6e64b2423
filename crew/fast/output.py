"""What a fast command prints, exactly as crew/render.py prints it."""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys

TYPE_CHECKING = False  # `typing` costs a fast command a few milliseconds
if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import Any

#: crew/text.py: characters a terminal might obey, escaped in JSON output.
RAW_IN_JSON_PATTERN = r"[\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]"


@contextlib.contextmanager
def reader_may_go() -> Iterator[None]:
    """Printing a result whose exit code stands if the reader has gone (`crew steer … | head
    -0`): what is left to print goes nowhere (crew/render.py `emit`, `silence_stdout`)."""
    try:
        yield
    except BrokenPipeError:
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def print_json(data: Any) -> None:
    """crew/render.py `print_json`: one indented JSON document."""
    sys.stdout.write(json_text(data))


def json_text(data: Any) -> str:
    """What `print_json` prints."""
    text = json.dumps(data, ensure_ascii=False, indent=2)
    # Compiled here, not at import: a command that prints no JSON spares re's compiler (1 ms).
    escaped = re.sub(RAW_IN_JSON_PATTERN, lambda m: f"\\u{ord(m.group()):04x}", text)
    return escaped + "\n"


def out(line: str) -> None:
    """A line for people; only crew's own words and validated ids reach it, nothing a
    terminal could obey."""
    sys.stdout.write(line + "\n")


def formats_apart(value: object) -> bool:
    """Whether `value` holds a number Python's json writes otherwise than pydantic does (a float
    under 1e-4: `1e-05` against `0.00001`): the full command writes those, so the bytes agree."""
    if isinstance(value, float):
        return 0 < abs(value) < 1e-4
    if isinstance(value, dict):
        return any(formats_apart(v) for v in value.values())
    if isinstance(value, list):
        return any(formats_apart(v) for v in value)
    return False
