"""The pending messages a send counts (`Txn.pending_count`) and a transaction lists (`Txn.pending`) are those a fold
of every message ever sent lists, in the same order — whatever the history: messages delivered,
acknowledged, rejected, carried back to pending for a new attempt, and changed again by the
transaction itself."""

from __future__ import annotations

from collections.abc import Callable

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crew import ids
from crew.domain import change
from crew.models import MailboxMessage
from crew.registry import Box, Direction, MessageKind, MessageStatus, Priority
from crew.store import jsonl
from crew.store.runstore import RunStore

MakeRun = Callable[..., RunStore]
STATUSES = list(MessageStatus)
#: A history: (message number, task, status) lines, in the order written.
Lines = st.lists(
    st.tuples(st.integers(0, 7), st.sampled_from(["plan", "build"]), st.sampled_from(STATUSES)),
    max_size=40,
)


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
    )


def _reference(messages: dict[str, MailboxMessage], task: str) -> list[MailboxMessage]:
    return [m for m in messages.values() if m.task_id == task and m.status is MessageStatus.PENDING]


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(written=Lines, staged=Lines, split=st.integers(0, 40))
def test_pending_is_the_full_folds_pending_in_its_order(
    make_run: MakeRun, written: list[tuple[int, str, MessageStatus]],
    staged: list[tuple[int, str, MessageStatus]], split: int,
) -> None:  # fmt: skip
    store = make_run()
    path = store.paths.box(Box.STEERING)
    lines = [_message(*line) for line in written]
    # Two appends with a read between them: the fold is brought up to date, not read again.
    jsonl.append(path, [m.to_line() for m in lines[:split]])
    store.fold(Box.STEERING)
    jsonl.append(path, [m.to_line() for m in lines[split:]])
    with store.lock():
        store.write_applied(store.recover(full=True).last_seq)
    with change(store) as txn:
        for line in staged:
            message = _message(*line)
            txn._staged.setdefault(Box.STEERING, {})[message.id] = message
        for task in ("plan", "build"):
            expected = _reference(dict(txn.messages(Box.STEERING)), task)
            assert txn.pending(Box.STEERING, task) == expected
            steers = {MessageKind.STEER}
            assert txn.pending_count(Box.STEERING, task, steers) == len(expected)
            assert txn.pending_count(Box.STEERING, task, {MessageKind.NUDGE}) == 0
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
