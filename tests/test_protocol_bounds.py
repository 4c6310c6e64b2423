"""Hostile worker lines: bounded before they are parsed, recorded as something crew reads back.

Each case is a line that once stopped the leader (a RecursionError, a line too long to append,
quadratic option handling) or made it write what its own readers reject.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crew import ids
from crew.adapters.base import AgentError, SessionStarted, bounded
from crew.adapters.wire import json_object
from crew.domain import change, tasks
from crew.leader import signals
from crew.leader.signals import AgentState
from crew.models import Event, MailboxMessage
from crew.protocol import (
    MAX_DEPTH,
    MAX_OPTIONS,
    CheckpointRecord,
    Contact,
    DecisionRecord,
    Malformed,
    json_frame,
    parse_line,
)
from crew.registry import (
    Box,
    ContactType,
    Direction,
    EventType,
    MessageKind,
    MessageStatus,
    TaskStatus,
)
from crew.store import jsonl
from crew.store.jsonl import LINE_LIMIT
from crew.store.runstore import RunStore


def deep(levels: int) -> str:
    return "[" * levels + "]" * levels


def deep_object(levels: int) -> str:
    return '{"a":' * levels + "1" + "}" * levels


#: Lines that once stopped the leader or wrote what crew could not read back.
HOSTILE = {
    "100k deep": f"@supervisor decision: {deep_object(100_000)}",
    "900 deep": f"@supervisor decision: {deep_object(900)}",
    "220 deep": f"@supervisor decision: {deep_object(220)}",
    "1 MiB decision": '@supervisor decision: {"x": "' + "y" * (1024 * 1024) + '"}',
    "1 MiB checkpoint": '@supervisor checkpoint: {"x": "' + "y" * (1024 * 1024) + '"}',
    "110k options": "@supervisor need_selection: pick ["
    + "|".join(f"o{i}" for i in range(110_000))
    + "]",
    "50k options": "@supervisor need_selection: pick ["
    + "|".join(f"o{i}" for i in range(50_000))
    + "]",
    "deep checkpoint": f"@supervisor checkpoint: {deep(5000)}",
    "NaN": '@supervisor decision: {"x": NaN}',
    "huge number": '@supervisor decision: {"x": 1e999}',
}


@pytest.mark.parametrize("name", list(HOSTILE))
def test_a_hostile_line_is_malformed_quickly_and_says_why(name: str) -> None:
    started = time.monotonic()
    parsed = parse_line(HOSTILE[name])
    took = time.monotonic() - started

    assert isinstance(parsed, Malformed), parsed
    assert parsed.reason and len(parsed.excerpt) <= 80 and "\n" not in parsed.excerpt
    assert took < 1.0  # linear: the 110k options once took a minute


def test_json_nested_up_to_the_limit_is_kept() -> None:
    parsed = parse_line(f"@supervisor checkpoint: {deep(MAX_DEPTH)}")
    assert isinstance(parsed, CheckpointRecord)
    over = parse_line(f"@supervisor checkpoint: {deep(MAX_DEPTH + 1)}")
    assert isinstance(over, Malformed) and f"deeper than {MAX_DEPTH}" in over.reason


def test_a_selection_keeps_its_options_in_order_without_duplicates() -> None:
    options = [f"o{i % 50}" for i in range(MAX_OPTIONS * 10)]
    parsed = parse_line(f"@supervisor need_selection: pick [{'|'.join(options)}]")
    assert parsed == Contact(ContactType.NEED_SELECTION, "pick", [f"o{i}" for i in range(50)])


def test_an_agent_question_with_too_many_options_is_asked_as_a_plain_question() -> None:
    question = Contact(ContactType.NEED_SELECTION, "pick", [f"o{i}" for i in range(110_000)])
    asked = bounded(question)
    assert isinstance(asked, Contact) and asked.type is ContactType.NEED_INPUT
    assert asked.options == [] and "110000 options" in asked.prompt


def test_an_agent_line_nested_too_deep_is_plain_output() -> None:
    assert json_object(deep_object(100_000)) is None
    assert json_object(deep_object(MAX_DEPTH + 1)) is None
    assert json_object('{"type": "x"}') == {"type": "x"}


def test_an_agent_error_and_session_id_are_cut_to_size() -> None:
    error = bounded(AgentError("e" * 100_000))
    assert isinstance(error, AgentError) and len(error.message) <= 2000
    assert isinstance(bounded(SessionStarted("s" * 100_000)), Malformed)


@pytest.mark.parametrize("char", ["\u2028", "\u2029", "\u0085", "\x1c", "\x1d", "\x1e", "\x0b"])
def test_a_json_frame_is_one_line_for_any_reader(char: str) -> None:
    message = MailboxMessage(
        id=ids.new_message_id(),
        direction=Direction.INBOX,
        kind=MessageKind.STEER,
        from_="leader",
        to="plan",
        task_id="plan",
        body=f"a{char}b",
        status=MessageStatus.PENDING,
        priority=MessageKind.STEER.default_priority,
        sent_at="2026-11-30T03:41:00.123456Z",
    )
    frame = json_frame(message)
    assert frame.endswith(b"\n") and len(frame.decode().splitlines()) == 1
    assert json.loads(frame)["body"] == f"a{char}b"


# ----------------------------------------------------------------------------- fuzz

_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=30,
)
_TYPES = [t.value for t in ContactType] + ["bogus", ""]


@st.composite
def worker_lines(draw: st.DrawFn) -> str:
    """Lines a worker might print, well-formed or not."""
    kind = draw(st.sampled_from(_TYPES))
    body = draw(
        st.one_of(
            st.text(),
            _JSON.map(lambda v: json.dumps(v, ensure_ascii=draw(st.booleans()))),
            st.integers(0, 3000).map(deep),
            st.integers(0, 400).map(deep_object),
            st.lists(st.text(max_size=5), max_size=300).map(lambda o: f"q [{'|'.join(o)}]"),
            st.binary(max_size=200).map(lambda b: b.decode("utf-8", "replace")),
        )
    )
    prefix = draw(st.sampled_from(["@supervisor ", "@supervisor", " \x1b[1m@supervisor ", ""]))
    return f"{prefix}{kind}:{body}"


@settings(max_examples=300, deadline=None)
@given(st.one_of(worker_lines(), st.text()))
def test_parse_line_never_raises_and_keeps_only_what_crew_can_write(line: str) -> None:
    parsed = parse_line(line)
    if isinstance(parsed, DecisionRecord | CheckpointRecord):
        data: Any = parsed.data if isinstance(parsed, DecisionRecord) else parsed.state
        written = Event.model_validate(
            {
                "id": ids.new_event_id(),
                "seq": 1,
                "runId": "20260101-000000-abcd",
                "at": "2026-01-01T00:00:00.000000Z",
                "type": "run.created",
                "data": {"d": data},
            }
        ).to_line()
        assert len(written) < LINE_LIMIT
        assert Event.model_validate_json(written).data == {"d": data}


@pytest.fixture
def running(make_run: Any) -> RunStore:
    store: RunStore = make_run()
    with change(store) as txn:
        tasks.transition(txn, "plan", TaskStatus.RUNNING, attempt=1, started_at=txn.at)
    return store


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(st.one_of(worker_lines(), st.sampled_from(list(HOSTILE.values()))), max_size=8))
def test_whatever_a_worker_prints_is_recorded_and_read_back(
    running: RunStore, lines: list[str]
) -> None:
    said = [parsed for line in lines if (parsed := parse_line(line)) is not None]
    with change(running) as txn:
        signals.apply(txn, "plan", 1, AgentState(), said)  # type: ignore[arg-type]  # Parsed ⊂ Signal

    paths = running.paths
    for path in (paths.events, paths.box(Box.OUTBOX)):
        if Path(path).exists():
            read = jsonl.read(path, Event if path == paths.events else MailboxMessage)
            assert not read.bad, read.bad
    if any(isinstance(s, Malformed) for s in said):
        assert EventType.SUPERVISOR_MALFORMED in {e.type for e in running.events().records}
