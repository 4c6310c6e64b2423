"""A task's checkpoint: kept through the event log, given back to the next attempt, never a way
to break the leader."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from crew.domain import change, tasks
from crew.leader import signals
from crew.protocol import MAX_CHECKPOINT, CheckpointRecord
from crew.registry import EventType, TaskStatus
from crew.store.runstore import RunStore

MakeRun = Callable[..., RunStore]


def running(make_run: MakeRun) -> RunStore:
    store = make_run()
    with change(store) as txn:
        tasks.start(txn, "plan", attempt=1, pid=4242)
    return store


def save(store: RunStore, state: object) -> None:
    with change(store) as txn:
        signals.apply(txn, "plan", 1, signals.AgentState(), [CheckpointRecord(state)])


@pytest.mark.parametrize("state", [{"done": ["parser"], "next": "lexer"}, [1, 2], "text", None])
def test_the_last_checkpoint_is_kept_whatever_json_it_holds(
    make_run: MakeRun, state: object
) -> None:
    store = running(make_run)
    save(store, {"first": True})

    save(store, state)

    kept = store.checkpoint("plan")
    assert kept is not None and kept.state == state and kept.attempt == 1
    assert store.paths.checkpoint("plan").read_text().startswith("{\n")  # pretty, for git diff
    assert [e.type for e in store.events().records].count(EventType.TASK_CHECKPOINTED) == 2


def test_a_checkpoint_a_crash_kept_from_its_file_is_written_by_the_next_writer(
    make_run: MakeRun, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = running(make_run)

    class Crash(Exception):
        pass

    def crash(*args: object) -> None:
        raise Crash

    monkeypatch.setattr(RunStore, "write_checkpoint", crash)
    with pytest.raises(Crash):
        save(store, {"step": 3})  # recorded in events.jsonl, its file never written
    monkeypatch.undo()
    assert store.checkpoint("plan") is None

    with change(store):  # any writer completes what the last one left
        pass

    kept = store.checkpoint("plan")
    assert kept is not None and kept.state == {"step": 3} and kept.task_id == "plan"


def test_a_checkpoint_too_large_to_keep_is_refused_and_the_task_goes_on(
    make_run: MakeRun,
) -> None:
    store = running(make_run)

    save(store, "x" * (MAX_CHECKPOINT + 1))

    assert store.checkpoint("plan") is None
    last = store.events().records[-1]
    assert last.type is EventType.AGENT_ERROR and last.message is not None
    assert "checkpoint was not kept" in last.message
    assert store.state().tasks["plan"].status is TaskStatus.RUNNING
