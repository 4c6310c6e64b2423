"""The worker protocol: the contact-line grammar (property-tested), stdin frames, delivery order."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crew import ids
from crew.leader.schedule import deliverable
from crew.models import MailboxMessage, Task
from crew.protocol import (
    Ack,
    Contact,
    DecisionRecord,
    Malformed,
    Report,
    Withdrawn,
    contact_line,
    json_frame,
    one_line,
    parse_line,
    text_frame,
)
from crew.registry import ContactType, Direction, MessageKind, MessageStatus, TaskStatus


@pytest.mark.parametrize(
    ("line", "parsed"),
    [
        ("@supervisor need_input: Which database?", Contact(ContactType.NEED_INPUT, "Which database?")),
        ("   @supervisor need_confirmation:   Run migrations?  ", Contact(ContactType.NEED_CONFIRMATION, "Run migrations?")),
        ("@supervisor need_selection: Pick one [a | b|c]", Contact(ContactType.NEED_SELECTION, "Pick one", ["a", "b", "c"])),
        ("@supervisor need_selection: Pick [x|x|y]", Contact(ContactType.NEED_SELECTION, "Pick", ["x", "y"])),
        ("\x1b[32m@supervisor progress:\x1b[0m 3 of 5", Report(ContactType.PROGRESS, "3 of 5")),
        ("@supervisor status: blocked on review", Report(ContactType.STATUS, "blocked on review")),
        ("@supervisor note:", Report(ContactType.NOTE, "")),
        ("@supervisor ack: msg_0123456789abcdef", Ack("msg_0123456789abcdef")),
        ('@supervisor decision: {"action": "preempt"}', DecisionRecord({"action": "preempt"})),
        ("@supervisor withdraw: found it myself", Withdrawn("found it myself")),
        ("@supervisor withdraw:", Withdrawn("")),
        ("plain output", None),
        ("says @supervisor need_input: later in the line", None),
        ("@supervisors need_input: x", None),
        ("", None),
    ],
)  # fmt: skip
def test_lines_are_parsed_as_documented(line: str, parsed: object) -> None:
    assert parse_line(line) == parsed


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("@supervisor", "expected '@supervisor <type>: <text>'"),
        ("@supervisor need_input Which?", "expected '@supervisor <type>: <text>'"),
        ("@supervisor shout: hey", "unknown type 'shout'"),
        ("@supervisor need_input:   ", "need_input needs a question after the colon"),
        ("@supervisor need_selection: Pick one", "need_selection needs its options at the end"),
        ("@supervisor need_selection: Pick [ | ]", "need_selection needs at least one option"),
        ("@supervisor ack: 42", "ack needs a message id"),
        ("@supervisor decision: [1, 2]", "decision needs a JSON object"),
        ("@supervisor decision: {nope", "decision needs JSON: not valid JSON"),
    ],
)
def test_malformed_supervisor_lines_say_why(line: str, reason: str) -> None:
    result = parse_line(line)
    assert isinstance(result, Malformed) and reason in result.reason


@settings(max_examples=500, deadline=None)
@given(st.text(max_size=300))
def test_the_parser_never_raises_and_plain_text_stays_plain(text: str) -> None:
    result = parse_line(text)
    if "@supervisor" not in text:
        assert result is None


def _visible(text: str) -> bool:
    return bool(one_line(text).split())


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from([ContactType.NEED_INPUT, ContactType.NEED_CONFIRMATION, ContactType.NEED_SELECTION]),
    st.text(min_size=1, max_size=80).filter(lambda s: _visible(s) and "[" not in s and "]" not in s),
    st.lists(st.text(min_size=1, max_size=10).filter(lambda s: _visible(s) and not set(s) & set("[]|")), min_size=1, max_size=4),
    st.sampled_from(["", "\x1b[1m", "\x1b[38;5;200m", "\x1b]0;title\x07"]),
)  # fmt: skip
def test_contact_lines_round_trip_through_ansi_colour(
    kind: ContactType, prompt: str, options: list[str], colour: str
) -> None:
    wanted = options if kind is ContactType.NEED_SELECTION else None
    line = colour + contact_line(kind, prompt, wanted) + ("\x1b[0m" if colour else "")

    parsed = parse_line(line)

    assert isinstance(parsed, Contact), (line, parsed)
    assert parsed.type is kind
    assert parsed.prompt == " ".join(one_line(prompt).split())
    if wanted:
        expected = []
        for option in options:
            clean = " ".join(one_line(option).split())
            if clean and clean not in expected:
                expected.append(clean)
        assert parsed.options == expected


def _message(kind: MessageKind, body: str = "hi", task: str = "t") -> MailboxMessage:
    return MailboxMessage(
        id=ids.new_message_id(),
        direction=Direction.INBOX,
        kind=kind,
        from_="leader",
        to=task,
        task_id=task,
        body=body,
        status=MessageStatus.PENDING,
        priority=kind.default_priority,
        sent_at="2026-11-30T03:41:00.123456Z",
        data={"k": [1, "two"]},
    )


def test_a_json_frame_carries_the_exact_body() -> None:
    message = _message(MessageKind.STEER, 'multi\nline "quoted" \x1b[31m ✓')

    frame = json_frame(message)

    assert frame.endswith(b"\n") and frame.count(b"\n") == 1
    assert json.loads(frame) == {
        "type": "steer",
        "id": message.id,
        "body": 'multi\nline "quoted" \x1b[31m ✓',
        "priority": "high",
        "data": {"k": [1, "two"]},
    }


@settings(max_examples=500, deadline=None)
@given(st.text(max_size=200))
def test_a_text_frame_is_always_exactly_one_safe_line(body: str) -> None:
    frame = text_frame(_message(MessageKind.RESPOND, body)).decode()

    assert frame.endswith("\n") and frame.count("\n") == 1
    line = frame[:-1]
    assert not any(ord(c) < 32 or 0x7F <= ord(c) <= 0x9F for c in line)
    assert "\u2028" not in line and "\u2029" not in line


def test_text_frames_show_line_breaks_and_drop_escape_sequences() -> None:
    body = "one\ntwo\r\nthree\x1b[2J\x1b]0;pwned\x07four\tfive\x00"
    assert text_frame(_message(MessageKind.RESPOND, body)) == "one␤two␤threefour five␀\n".encode()


def _task(status: TaskStatus) -> Task:
    return Task(id="t", agent="a", title="t", prompt="p", status=status)


def test_delivery_order_is_respond_steer_nudge_follow_up_fifo_within_each() -> None:
    written = [
        _message(MessageKind.FOLLOW_UP, "f1"),
        _message(MessageKind.NUDGE, "n1"),
        _message(MessageKind.STEER, "s1"),
        _message(MessageKind.FOLLOW_UP, "f2"),
        _message(MessageKind.RESPOND, "r1"),
        _message(MessageKind.STEER, "s2"),
        _message(MessageKind.STEER, "elsewhere", task="other"),
    ]
    order = {m.id: i for i, m in enumerate(written)}

    running = deliverable(written, _task(TaskStatus.RUNNING), order)
    waiting = deliverable(written, _task(TaskStatus.WAITING), order)

    assert [m.body for m in running] == ["r1", "s1", "s2", "n1", "f1", "f2"]
    assert [m.body for m in waiting] == ["r1", "s1", "s2", "n1"]  # follow-ups wait for the answer
