"""Timestamps and durations, in the one format crew writes."""

from __future__ import annotations

import math
import re
import time
from datetime import UTC, datetime

from crew.ids import shown

TIMESTAMP_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"
TIMESTAMP_PATTERN = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{6}Z$"

_TIMESTAMP_RE = re.compile(TIMESTAMP_PATTERN)
_DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$", re.ASCII)
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
#: The longest duration crew takes: a hundred years says "never" well enough, and every timer
#: and `select` can hold it (a longer one overflows them).
MAX_DURATION = 100 * 365 * 86400.0


def deadline(timeout: float | None) -> float | None:
    """When a wait of `timeout` seconds ends, on the monotonic clock: None (never) for no
    timeout, and for one past MAX_DURATION (`inf` among them), which no timer can hold. A
    timeout that is no number of seconds is a ValueError: NaN, which no wait would ever end
    (it compares false with everything), a string, a bool."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or math.isnan(timeout):
        raise ValueError(f"timeout must be a number of seconds or None, got {timeout!r}")
    return None if timeout > MAX_DURATION else time.monotonic() + timeout


def now() -> str:
    """The current time as an ISO-8601 UTC timestamp with microseconds and a `Z`."""
    return format_timestamp(datetime.now(UTC))


def format_timestamp(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime(TIMESTAMP_FORMAT)


def parse_timestamp(text: str) -> datetime:
    """Parse a timestamp crew wrote (raises ValueError on anything else). Checked against the
    pattern, then read by `fromisoformat`: `strptime` takes more (one-digit fields, fewer
    digits of microseconds), and its first call costs a command ~3 ms of imports."""
    if not _TIMESTAMP_RE.fullmatch(text):
        raise ValueError(f"not a timestamp crew writes: {text!r}")
    return datetime.fromisoformat(text[:-1]).replace(tzinfo=UTC)


def moment() -> datetime:
    """Now, as a datetime: what relative times ("created 724ms ago") count from (a seam tests
    pin, so that two renderings of one run print the same bytes)."""
    return datetime.now(UTC)


def seconds_since(text: str, *, at: datetime | None = None) -> float:
    """Seconds elapsed from a crew timestamp to `at` (default: `moment()`)."""
    return ((at or moment()) - parse_timestamp(text)).total_seconds()


def parse_duration(value: str | float | int) -> float:
    """`500ms`, `30s`, `2m`, `1h`, `1d`, or a number of seconds -> seconds (ValueError if not:
    negative, not finite, or over MAX_DURATION)."""
    if isinstance(value, bool):
        raise ValueError("expected a duration like '30s', '2m' or a number of seconds")
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        match = _DURATION_RE.match(value)
        if match is None:
            raise ValueError(
                "expected a duration like '500ms', '30s', '2m', '1h' or a number, "
                f"got {shown(value)}"
            )
        seconds = float(match.group(1)) * _UNIT_SECONDS[match.group(2) or "s"]
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"expected a non-negative duration, got {shown(value)}")
    if seconds > MAX_DURATION:
        raise ValueError(f"expected a duration of at most 100 years (36500d), got {shown(value)}")
    return seconds


def option_duration(text: str | None, option: str) -> float | None:
    """A duration option (`30s`, `5m`, …) in seconds, None if not given; a usage error names
    the option."""
    if text is None:
        return None
    from crew.errors import UsageError

    try:
        return parse_duration(text)
    except ValueError as exc:
        raise UsageError(f"{option}: {exc}.") from None


def format_duration(seconds: float) -> str:
    """A short human form: `850ms`, `42s`, `3m12s`, `2h05m`."""
    if seconds < 1:
        return f"{max(seconds, 0) * 1000:.0f}ms"
    if seconds < 60:
        return f"{seconds:.0f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours}h{minutes:02d}m"
    return f"{hours // 24}d{hours % 24:02d}h"
