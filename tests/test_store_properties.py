"""Property tests: the tolerant reader on untrusted bytes."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from crew.models import Event, MailboxMessage
from crew.registry import EventType
from crew.store import jsonl

_SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

texts = st.text(max_size=40)


@st.composite
def events(draw: st.DrawFn) -> Event:
    return Event(
        id=f"evt_{draw(st.integers(min_value=0, max_value=2**64 - 1)):016x}",
        seq=draw(st.integers(min_value=1, max_value=2**40)),
        run_id="20261130-034100-7f3a",
        at="2026-11-30T03:41:00.123456Z",
        type=draw(st.sampled_from(list(EventType))),
        task_id=draw(st.none() | st.from_regex(r"^[a-z0-9][a-z0-9_.-]{0,10}$", fullmatch=True)),
        message=draw(st.none() | texts),
        data=draw(
            st.none()
            | st.dictionaries(
                st.text(max_size=5).filter(lambda key: key not in _CARRIED),
                texts | st.integers(),
                max_size=3,
            )
        ),
    )


#: Keys of an event's data that carry state, which must be valid state (not a random value).
_CARRIED = {"run", "task", "message", "checkpoint"}


def _is_valid(raw: bytes) -> bool:
    try:
        Event.model_validate_json(raw)
    except ValidationError:
        return False
    return True


_FOLDER = tempfile.TemporaryDirectory(prefix="crew-properties-")


def _write(data: bytes) -> Path:
    """The file under test: one per module, rewritten for each example."""
    path = Path(_FOLDER.name) / "events.jsonl"
    path.write_bytes(data)
    return path


@_SETTINGS
@given(st.binary(max_size=4096))
def test_the_reader_never_raises_on_arbitrary_bytes(data: bytes) -> None:
    path = _write(data)

    result = jsonl.read(path, Event)
    last = jsonl.last_record(path, Event)
    followed = jsonl.Follower(path, Event).poll()

    assert result.offset + result.tail_bytes == len(data)
    assert followed.records == result.records
    assert last == (result.records[-1] if result.records else None)


junk = st.binary(max_size=200).filter(lambda b: b"\n" not in b)


@_SETTINGS
@given(
    st.lists(st.one_of(events(), junk), max_size=30),
    st.binary(max_size=60).filter(lambda b: b"\n" not in b),
)
def test_the_reader_returns_exactly_the_valid_lines(
    items: list[Event | bytes], torn_tail: bytes
) -> None:
    lines: list[bytes] = []
    expected: list[Event] = []
    for item in items:
        if isinstance(item, Event):
            lines.append(item.to_line())
            expected.append(item)
        else:
            assume(not _is_valid(item))
            lines.append(item + b"\n")
    path = _write(b"".join(lines) + torn_tail)

    result = jsonl.read(path, Event)

    assert result.records == expected
    junk_lines = [i + 1 for i, item in enumerate(items) if isinstance(item, bytes)]
    blank = {
        i + 1
        for i, item in enumerate(items)
        if isinstance(item, bytes) and (item + b"\n").isspace()
    }
    assert [b.line for b in result.bad] == [n for n in junk_lines if n not in blank]
    assert result.tail_bytes == len(torn_tail)


@_SETTINGS
@given(st.lists(st.one_of(events(), junk), min_size=1, max_size=20), st.integers(0, 19))
def test_reading_in_two_steps_equals_reading_at_once(items: list[Event | bytes], cut: int) -> None:
    lines = [i.to_line() if isinstance(i, Event) else i + b"\n" for i in items]
    cut = min(cut, len(lines))
    path = _write(b"".join(lines[:cut]))
    first = jsonl.read(path, Event)
    with path.open("ab") as handle:
        handle.write(b"".join(lines[cut:]))

    second = jsonl.read(path, Event, offset=first.offset, line=first.line)
    whole = jsonl.read(path, Event)

    assert first.records + second.records == whole.records
    assert first.bad + second.bad == whole.bad


def test_huge_lines_nuls_and_invalid_utf8_are_skipped_not_fatal(tmp_path: Path) -> None:
    path = tmp_path / "inbox.jsonl"
    good = MailboxMessage(
        id="msg_0123456789abcdef",
        direction="inbox",
        kind="steer",
        from_="leader",
        to="plan",
        task_id="plan",
        body="hi",
        status="pending",
        priority="high",
        sent_at="2026-11-30T03:41:00.123456Z",
    ).to_line()
    path.write_bytes(
        b"x" * 5_000_000
        + b"\n"
        + b"\x00" * 100
        + b"\n"
        + b'{"id": "\xc3\x28"}\n'
        + b"[" * 100_000
        + b"\n"
        + good
        + b"{" * 3_000_000
    )

    result = jsonl.read(path, MailboxMessage)

    assert [m.body for m in result.records] == ["hi"]
    assert [b.line for b in result.bad] == [1, 2, 3, 4]
    assert result.tail_bytes == 3_000_000
