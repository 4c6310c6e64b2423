"""The pending messages a send counts (`Txn.pending_count`) and a transaction lists (`Txn.pending`),
a task's messages (`Txn.of_task`) and the message first sent under a key (`Txn.keyed`) are those
a fold of every message ever sent gives, in the same order — whatever the history: messages
delivered, acknowledged, rejected, carried back to pending for a new attempt, and changed again
by the transaction itself; and a file read again from its start (a repair) leaves nothing of
what it no longer holds."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crew import ids
from crew.domain import change
from crew.models import MailboxMessage
from crew.registry import Box, Direction, MessageKind, MessageStatus, Priority
from crew.store import jsonl, mailfile
from crew.store.runstore import RunStore

MakeRun = Callable[..., RunStore]
STATUSES = list(MessageStatus)
#: A history: (message number, status) lines, in the order written. A message's task is fixed
#: by its number, as a message's task never changes.
Lines = st.lists(st.tuples(st.integers(0, 7), st.sampled_from(STATUSES)), max_size=40)


def _message(number: int, task: str, status: MessageStatus) -> MailboxMessage:
    return MailboxMessage(
        id=f"msg_{number:016x}",
        direction=Direction.INBOX,
        kind=MessageKind.STEER,
        from_="leader",
        to=task,
        task_id=task,
        body=f"message {number}",
        status=status,
        priority=Priority.HIGH,
        sent_at="2026-11-30T10:00:00.000000Z",
        data={"idempotencyKey": f"k{number % 3}"} if number % 2 == 0 else None,
    )


def _line(number: int, status: MessageStatus) -> MailboxMessage:
    return _message(number, ("plan", "build", "build")[number % 3], status)


def _reference(messages: dict[str, MailboxMessage], task: str) -> list[MailboxMessage]:
    return [m for m in messages.values() if m.task_id == task and m.status is MessageStatus.PENDING]


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(written=Lines, staged=Lines, split=st.integers(0, 40))
def test_pending_is_the_full_folds_pending_in_its_order(
    make_run: MakeRun, written: list[tuple[int, MessageStatus]],
    staged: list[tuple[int, MessageStatus]], split: int,
) -> None:  # fmt: skip
    store = make_run()
    path = store.paths.box(Box.STEERING)
    lines = [_line(*line) for line in written]
    # Two appends with a read between them: the fold is brought up to date, not read again.
    jsonl.append(path, [m.to_line() for m in lines[:split]])
    store.fold(Box.STEERING)
    jsonl.append(path, [m.to_line() for m in lines[split:]])
    with store.lock():
        recovery = store.recover(full=True)
        store.write_applied(recovery.last_seq, tasks=len(recovery.state.tasks))
    with change(store) as txn:
        for line in staged:
            message = _line(*line)
            txn._staged.setdefault(Box.STEERING, {})[message.id] = message
        every = dict(txn.messages(Box.STEERING))
        for task in ("plan", "build"):
            expected = _reference(every, task)
            assert txn.pending(Box.STEERING, task) == expected
            steers = {MessageKind.STEER}
            assert txn.pending_count(Box.STEERING, task, steers) == len(expected)
            assert txn.pending_count(Box.STEERING, task, {MessageKind.NUDGE}) == 0
            assert txn.of_task(Box.STEERING, task) == [
                m for m in every.values() if m.task_id == task
            ]
        both = [m for m in every.values() if m.status is MessageStatus.PENDING]
        assert txn.pending(Box.STEERING, "plan", "build") == both
        for key in ("k0", "k1", "k2", "k3"):
            first = [m for m in every.values() if (m.data or {}).get("idempotencyKey") == key]
            assert txn.keyed(Box.STEERING, key) == (first[0] if first else None)
        txn._staged.clear()  # nothing is written


def test_a_new_message_comes_after_every_one_before_it(make_run: MakeRun) -> None:
    store = make_run()
    old = _message(1, "plan", MessageStatus.PENDING)
    jsonl.append(store.paths.box(Box.STEERING), [old.to_line()])
    with change(store) as txn:
        new = _message(2, "plan", MessageStatus.PENDING).model_copy(
            update={"id": ids.new_message_id()}
        )
        txn._staged.setdefault(Box.STEERING, {})[new.id] = new
        assert [m.id for m in txn.pending(Box.STEERING, "plan")] == [old.id, new.id]
        txn._staged.clear()


@pytest.mark.parametrize("lean", [False, True], ids=["full", "lean"])
def test_what_the_fold_indexes_is_read_again_when_the_file_is_replaced(
    make_run: MakeRun, lean: bool
) -> None:
    store = make_run()
    path = store.paths.box(Box.STEERING)
    kept, gone = (
        _message(0, "plan", MessageStatus.PENDING),
        _message(2, "build", MessageStatus.ACKNOWLEDGED),  # a lean fold does not hold it
    )
    jsonl.append(path, [kept.to_line(), gone.to_line()])
    reader = RunStore(store.paths, lean_mail=lean)
    fold = reader.mail(Box.STEERING)
    assert fold.keyed("k2") == gone.id and fold.of_task("build") == [gone.id]
    assert fold.get(gone.id) == gone

    replacement = path.with_name("replacement")
    replacement.write_bytes(kept.to_line())
    replacement.replace(path)  # as a repair rewrites a file: another inode, shorter

    fold = reader.mail(Box.STEERING)
    assert fold.keyed("k2") is None and fold.keyed("k0") == kept.id
    assert fold.of_task("build") == [] and fold.of_task("plan") == [kept.id]
    assert fold.get(gone.id) is None and fold.size() == 1


def test_the_question_an_answer_answers_is_found_by_its_contact_id(make_run: MakeRun) -> None:
    store = make_run()
    asked = [
        _message(n, "plan", MessageStatus.DELIVERED).model_copy(
            update={
                "direction": Direction.OUTBOX,
                "kind": MessageKind.CONTACT,
                "data": {"contactId": f"q_{n}", "contactType": "need_input"},
            }
        )
        for n in range(5)
    ]
    jsonl.append(store.paths.box(Box.OUTBOX), [m.to_line() for m in asked])
    with change(store) as txn:
        assert txn.asking("q_3") == asked[3]
        assert txn.asking("q_9") is None


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(written=Lines, split=st.integers(0, 40), box=st.sampled_from([Box.STEERING, Box.OUTBOX]))
def test_a_lean_fold_gives_what_a_full_one_does(
    make_run: MakeRun, written: list[tuple[int, MessageStatus]], split: int, box: Box
) -> None:
    # The leader's fold keeps only the messages that may still change; any other is read back
    # from its lines (a whole one, then changes) when asked for, by id.
    store = make_run()
    path = store.paths.box(box)
    lean = RunStore(store.paths, lean_mail=True)
    latest: dict[str, MailboxMessage] = {}
    lines = []
    for number, status in written:
        now = _line(number, status)
        if box is Box.OUTBOX:
            now = now.model_copy(update={"direction": Direction.OUTBOX})
        was = latest.get(now.id)
        lines.append((mailfile.change_line(was, now) if was is not None else now).to_line())
        latest[now.id] = now
    jsonl.append(path, lines[:split])
    lean.fold(box)  # read in two steps, as a leader follows a file
    jsonl.append(path, lines[split:])

    full = dict(store.fold(box))
    assert list(lean.fold(box).values()) == list(full.values()) == list(latest.values())
    kept, every = lean.mail(box), store.mail(box)
    for message_id, message in full.items():
        assert kept.get(message_id) == message
    for task in ("plan", "build"):
        assert kept.of_task(task) == every.of_task(task)
    for key in ("k0", "k1", "k2"):
        assert kept.keyed(key) == every.keyed(key)
    assert kept.pending == every.pending
    assert [kept.place(i) for i in full] == [every.place(i) for i in full]
    assert kept.ids() == every.ids() == list(full) and kept.size() == len(full)


def test_a_tasks_last_report_is_found_without_reading_back_those_before_it(
    make_run: MakeRun, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What a parent is told of a child that gave no final answer: the child's last report. A
    # lean store reads back each message it does not hold; it reads the last ones alone.
    from crew.store.fold import MailboxFold

    store = make_run()

    def outbound(number: int, kind: MessageKind) -> MailboxMessage:
        return _message(number, "plan", MessageStatus.DELIVERED).model_copy(
            update={"direction": Direction.OUTBOX, "kind": kind, "from_": "plan", "to": "leader"}
        )

    sent = [outbound(n, MessageKind.REPORT) for n in range(40)]
    sent.append(outbound(40, MessageKind.CONTACT))
    jsonl.append(store.paths.box(Box.OUTBOX), [m.to_line() for m in sent])
    lean = RunStore(store.paths, lean_mail=True)
    lean.mail(Box.OUTBOX)
    reads: list[str] = []
    read_back = MailboxFold._read_back
    monkeypatch.setattr(
        MailboxFold,
        "_read_back",
        lambda self, message_id, starts: (
            reads.append(message_id) or read_back(self, message_id, starts)
        ),
    )
    with change(lean) as txn:
        assert txn.last_of_task(Box.OUTBOX, "plan", MessageKind.REPORT) == sent[39]
        assert reads == [sent[40].id, sent[39].id]
        assert txn.last_of_task(Box.OUTBOX, "build", MessageKind.REPORT) is None
        later = outbound(41, MessageKind.REPORT)
        txn._staged.setdefault(Box.OUTBOX, {})[later.id] = later  # this transaction's own
        assert txn.last_of_task(Box.OUTBOX, "plan", MessageKind.REPORT) == later
        txn._staged.clear()
