"""crew/clock.py: timestamps in the one format crew writes."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from crew import clock


@pytest.mark.parametrize(
    "text",
    [
        "2026-12-03T16:31:24.12345Z",  # five digits of microseconds
        "2026-12-03T16:31:24.123456",  # no zone
        "2026-12-03T16:31:24.123456+00:00",
        "2026-1-03T16:31:24.123456Z",
        "2026-13-03T16:31:24.123456Z",  # no such month
        " 2026-12-03T16:31:24.123456Z",
        "2026-12-03T16:31:24.123456Z\n",
        "\u0662026-12-03T16:31:24.123456Z",  # a digit of another script
    ],
)
def test_only_a_timestamp_as_crew_writes_it_is_read(text: str) -> None:
    with pytest.raises(ValueError):
        clock.parse_timestamp(text)


def test_a_timestamp_reads_back_as_the_moment_it_was_written() -> None:
    moment = datetime(2026, 12, 3, 16, 31, 24, 123456, tzinfo=UTC)
    assert clock.parse_timestamp(clock.format_timestamp(moment)) == moment
    assert clock.parse_timestamp("2026-12-03T16:31:24.000000Z").microsecond == 0
