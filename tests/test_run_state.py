"""A run's state: creation, transactions, the event log as source of truth, crash recovery."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import SESSION, snapshot_files
from test_verbs import start

from crew import ids, verbs
from crew.domain import change, mailbox, tasks
from crew.errors import Corrupt, NotFound, Refused, StaleLeader
from crew.models import Event, MailboxMessage, SupervisorContact
from crew.paths import Home
from crew.registry import (
    Box,
    ContactType,
    Direction,
    EventType,
    MessageKind,
    MessageStatus,
    Priority,
    RunStatus,
    TaskStatus,
)
from crew.store import eventlog, jsonl
from crew.store.runstore import RunStore
from crew.store.state import rebuild, same_state

MakeRun = Callable[..., RunStore]


def steer(store: RunStore, task: str, body: str, at: str) -> MailboxMessage:
    return MailboxMessage(
        id=ids.new_message_id(),
        direction=Direction.INBOX,
        kind=MessageKind.STEER,
        from_="leader",
        to=task,
        task_id=task,
        body=body,
        status=MessageStatus.PENDING,
        priority=Priority.HIGH,
        sent_at=at,
    )


def test_a_new_run_has_every_file_and_its_creation_in_the_log(make_run: MakeRun) -> None:
    store = make_run()
    paths = store.paths

    assert paths.manifest.is_file() and paths.events.is_file()
    assert paths.task_file("plan").is_file() and paths.task_file("build").is_file()
    assert not paths.tasks.exists()  # one file per task, not tasks.json
    assert all(paths.box(b).is_file() for b in Box)
    assert paths.logs_dir.is_dir() and paths.runtime_dir.is_dir()
    state = store.state()
    assert state.run.owner_session_id == SESSION
    assert state.run.status is RunStatus.RUNNING
    assert [t.id for t in state.task_list()] == ["plan", "build"]
    assert all(t.status is TaskStatus.QUEUED for t in state.task_list())
    types = [e.type for e in store.events().records]
    assert types == [EventType.RUN_CREATED, EventType.TASK_QUEUED, EventType.TASK_QUEUED]


def test_the_state_folder_is_private(make_run: MakeRun, home: Home) -> None:
    make_run()

    assert home.state_dir.stat().st_mode & 0o777 == 0o700
    assert home.runs_dir.stat().st_mode & 0o777 == 0o700


def test_no_file_is_group_or_world_writable_even_with_a_lax_umask(make_run: MakeRun) -> None:
    old = os.umask(0)
    try:
        store = make_run()
        with change(store) as txn:
            mailbox.post(txn, steer(store, "plan", "x", txn.at), EventType.AGENT_STEERED)
    finally:
        os.umask(old)

    for path in store.paths.root.rglob("*"):
        assert path.stat().st_mode & 0o022 == 0, path


def test_snapshots_are_pretty_with_keys_in_schema_order(make_run: MakeRun) -> None:
    store = make_run()

    text = store.paths.manifest.read_text()
    assert text.endswith("}\n") and text.startswith('{\n  "runId": ')
    keys = list(json.loads(text))
    assert keys == [
        "runId", "crew", "status", "ownerSessionId", "leaderEpoch", "createdAt", "crewDir",
        "config", "stateVersion",
    ]  # fmt: skip
    task_text = store.paths.task_file("plan").read_text()
    assert task_text.startswith('{\n  "id": "plan",') and task_text.endswith("}\n")
    assert list(json.loads(task_text))[:5] == ["id", "agent", "title", "prompt", "status"]


def test_a_transition_writes_an_event_carrying_the_new_state(make_run: MakeRun) -> None:
    store = make_run()

    with change(store) as txn:
        tasks.transition(txn, "plan", TaskStatus.RUNNING, attempt=1, started_at=txn.at, pid=4242)

    last = store.events().records[-1]
    assert last.type is EventType.TASK_STARTED and last.task_id == "plan"
    assert last.data is not None and last.data["task"]["status"] == "running"
    assert last.data["task"]["pid"] == 4242
    assert store.state().tasks["plan"].status is TaskStatus.RUNNING


def test_an_illegal_transition_is_refused_and_writes_nothing(make_run: MakeRun) -> None:
    store = make_run()
    before = snapshot_files(store.paths.root)

    with (
        pytest.raises(Refused, match="cannot go from queued to needs_review"),
        change(store) as txn,
    ):
        tasks.transition(txn, "plan", TaskStatus.NEEDS_REVIEW)

    assert snapshot_files(store.paths.root) == before


def test_an_error_inside_a_transaction_writes_nothing(make_run: MakeRun) -> None:
    store = make_run()
    before = snapshot_files(store.paths.root)

    with pytest.raises(NotFound), change(store) as txn:
        tasks.transition(txn, "plan", TaskStatus.RUNNING)
        mailbox.post(txn, steer(store, "plan", "go", txn.at), EventType.AGENT_STEERED)
        txn.task("nope")

    assert snapshot_files(store.paths.root) == before


def test_seq_numbers_continue_across_transactions(make_run: MakeRun) -> None:
    store = make_run()
    for _ in range(3):
        with change(store) as txn:
            txn.record(EventType.ATTENTION_DECISION, task_id="plan", data={"action": "continue"})

    assert [e.seq for e in store.events().records] == [1, 2, 3, 4, 5, 6]


def test_the_run_ends_when_every_task_is_terminal(make_run: MakeRun) -> None:
    store = make_run()
    with change(store) as txn:
        tasks.transition(txn, "plan", TaskStatus.RUNNING)
        tasks.transition(txn, "plan", TaskStatus.COMPLETED, exit_code=0)
    assert store.state().run.status is RunStatus.RUNNING

    with change(store) as txn:
        tasks.transition(txn, "build", TaskStatus.RUNNING)
        tasks.transition(txn, "build", TaskStatus.FAILED, exit_code=3)

    state = store.state()
    assert state.run.status is RunStatus.FAILED and state.run.ended_at is not None
    assert store.events().records[-1].type is EventType.RUN_ENDED


def test_a_flagged_task_flags_the_run_and_clearing_it_clears_the_run(make_run: MakeRun) -> None:
    store = make_run()
    with change(store) as txn:
        tasks.transition(txn, "plan", TaskStatus.RUNNING)
        tasks.transition(txn, "plan", TaskStatus.NEEDS_REVIEW, error="stalled")
    assert store.state().run.status is RunStatus.NEEDS_REVIEW

    with change(store) as txn:
        tasks.transition(txn, "plan", TaskStatus.RUNNING, error=None)

    assert store.state().run.status is RunStatus.RUNNING
    types = [e.type for e in store.events().records]
    assert EventType.RUN_FLAGGED in types and types[-1] is EventType.RUN_CLEARED


def test_snapshots_can_be_rebuilt_from_the_event_log(make_run: MakeRun) -> None:
    store = make_run()
    with change(store) as txn:
        tasks.transition(txn, "plan", TaskStatus.RUNNING, attempt=1)
        contact = SupervisorContact(
            id=ids.new_contact_id(),
            task_id="plan",
            type=ContactType.NEED_SELECTION,
            prompt="Which DB?",
            options=["pg", "sqlite"],
            asked_at=txn.at,
        )
        tasks.transition(txn, "plan", TaskStatus.WAITING, waiting_since=txn.at, contact=contact)
    with change(store) as txn:
        txn.record(
            EventType.OWNERSHIP_TRANSFERRED, run=txn.run.revised(owner_session_id="other@host")
        )

    rebuilt = rebuild(store.events().records)

    assert rebuilt is not None and same_state(rebuilt, store.state())
    assert rebuilt.run.owner_session_id == "other@host"
    assert rebuilt.tasks["plan"].contact is not None


def test_a_newer_leader_epoch_fences_a_stale_leader_out(make_run: MakeRun) -> None:
    store = make_run()
    with change(store) as txn:
        txn.record(EventType.LEADER_STARTED, run=txn.run.revised(leader_epoch=2))
    before = snapshot_files(store.paths.root)

    with pytest.raises(StaleLeader, match="epoch 2, not 1"), change(store, epoch=1) as txn:
        tasks.transition(txn, "plan", TaskStatus.RUNNING)

    assert snapshot_files(store.paths.root) == before
    with change(store, epoch=2) as txn:
        tasks.transition(txn, "plan", TaskStatus.RUNNING)


def test_the_transaction_sees_its_own_mailbox_writes(make_run: MakeRun) -> None:
    store = make_run()
    with change(store) as txn:
        first = mailbox.post(txn, steer(store, "plan", "one", txn.at), EventType.AGENT_STEERED)
        assert list(txn.messages(Box.STEERING)) == [first.id]
        second = mailbox.post(txn, steer(store, "plan", "two", txn.at), EventType.AGENT_STEERED)
        assert list(txn.messages(Box.STEERING)) == [first.id, second.id]

    assert [m.body for m in store.messages(Box.STEERING)] == ["one", "two"]
    event = store.events().records[-1]
    assert event.data is not None and event.data["mailboxMessage"]["body"] == "two"


# ----------------------------------------------------------------- crash recovery


def _crash_after_events(store: RunStore, monkeypatch: pytest.MonkeyPatch, stage: str) -> None:
    """Run a transaction that dies after its event append, before `stage` is written."""

    class Crash(Exception):
        pass

    def boom(*args: object, **kwargs: object) -> None:
        raise Crash

    if stage == "mailbox":
        real_append = jsonl.append
        calls = {"n": 0}

        def append_then_die(path: Path, lines: list[bytes], **kw: object) -> int:
            calls["n"] += 1
            if calls["n"] > 1:  # the first append is the events: let it through
                raise Crash
            return real_append(path, lines)

        monkeypatch.setattr(jsonl, "append", append_then_die)
    elif stage == "snapshots":
        monkeypatch.setattr(RunStore, "write_snapshots", boom)
    else:
        monkeypatch.setattr(RunStore, "write_applied", boom)
    with pytest.raises(Crash), change(store) as txn:
        tasks.transition(txn, "plan", TaskStatus.RUNNING, attempt=1)
        mailbox.post(txn, steer(store, "plan", "use sqlite", txn.at), EventType.AGENT_STEERED)
    monkeypatch.undo()


@pytest.mark.parametrize("stage", ["mailbox", "snapshots", "marker"])
def test_a_write_interrupted_after_its_events_is_completed_by_the_next_writer(
    make_run: MakeRun, monkeypatch: pytest.MonkeyPatch, stage: str
) -> None:
    store = make_run()
    _crash_after_events(store, monkeypatch, stage)

    # Readers already see the state the events describe, and say a write was interrupted.
    recovery = store.load()
    assert recovery.state.tasks["plan"].status is TaskStatus.RUNNING
    assert any("interrupted" in w for w in recovery.warnings())

    with change(store) as txn:
        assert txn.repairs  # it rolled the interrupted write forward first
        tasks.transition(txn, "build", TaskStatus.CANCELLED, error="test")

    assert store.load().clean
    assert store.state().tasks["plan"].status is TaskStatus.RUNNING
    steering = jsonl.read(store.paths.box(Box.STEERING), MailboxMessage).records
    assert [m.body for m in steering] == ["use sqlite"]  # written exactly once
    assert json.loads(store.paths.task_file("plan").read_text())["status"] == "running"


def test_a_corrupt_snapshot_is_quarantined_and_rebuilt_never_reset(make_run: MakeRun) -> None:
    store = make_run()
    with change(store) as txn:
        tasks.transition(txn, "plan", TaskStatus.RUNNING, attempt=1)
    store.paths.task_file("plan").write_text('{"id": "plan", "status": "bogus"')

    recovery = RunStore(store.paths).load()  # readers show the rebuilt state, and say why
    assert recovery.state.tasks["plan"].status is TaskStatus.RUNNING
    named = [w for w in recovery.warnings() if "tasks/plan.json" in w]
    assert len(named) == 1 and "tasks/plan.json is unreadable" in named[0]  # not also "missing"

    with change(RunStore(store.paths)) as txn:
        assert any("set it aside" in r for r in txn.repairs)

    quarantined = list(store.paths.tasks_dir.glob("plan.json.corrupt-*"))
    assert len(quarantined) == 1
    assert quarantined[0].read_text() == '{"id": "plan", "status": "bogus"'
    assert store.load().clean
    assert store.state().tasks["plan"].status is TaskStatus.RUNNING


def test_a_missing_marker_triggers_a_full_check_that_finds_nothing_wrong(
    make_run: MakeRun,
) -> None:
    store = make_run()
    with change(store) as txn:
        mailbox.post(txn, steer(store, "plan", "a", txn.at), EventType.AGENT_STEERED)
    store.paths.applied.unlink()
    files = snapshot_files(store.paths.root)

    recovery = store.load()
    assert recovery.full and not recovery.mismatch and not recovery.broken

    with change(store):
        pass
    after = snapshot_files(store.paths.root)
    after.pop(".runtime/applied")
    files.pop(".runtime/applied", None)
    assert after == files  # only the marker was written back


def test_snapshots_that_disagree_with_events_are_reported_and_rewritten(
    make_run: MakeRun,
) -> None:
    store = make_run()
    plan = json.loads(store.paths.task_file("plan").read_text())
    plan["status"] = "completed"  # someone edited the snapshot by hand
    store.paths.task_file("plan").write_text(json.dumps(plan))
    store.paths.applied.unlink()

    recovery = store.load()
    assert recovery.mismatch
    assert recovery.state.tasks["plan"].status is TaskStatus.QUEUED

    with change(store):
        pass
    assert json.loads(store.paths.task_file("plan").read_text())["status"] == "queued"


def test_a_run_with_no_readable_state_is_a_clear_error(make_run: MakeRun) -> None:
    store = make_run()
    store.paths.manifest.write_text("{")
    store.paths.events.write_text("junk\n")

    with pytest.raises(Corrupt, match="has no readable state"):
        store.load()


def test_a_snapshot_from_a_newer_crew_is_refused(make_run: MakeRun) -> None:
    store = make_run()
    manifest = json.loads(store.paths.manifest.read_text())
    manifest["stateVersion"] = 99
    store.paths.manifest.write_text(json.dumps(manifest))

    with pytest.raises(Refused, match="written by a newer crew"):
        store.load()


def test_events_carry_the_run_id_and_a_timestamp_in_utc(make_run: MakeRun) -> None:
    store = make_run()
    for event in jsonl.read(store.paths.events, Event).records:
        assert event.run_id == store.run_id
        assert event.at.endswith("Z") and len(event.at) == 27


@pytest.mark.parametrize("damage", ["truncated", "deleted", "cut short"])
def test_a_damaged_mailbox_file_is_noticed_on_open_and_rewritten_by_the_next_writer(
    make_run: MakeRun, damage: str
) -> None:

    store = make_run()
    verbs.follow_up(store, "plan", "first", session=SESSION)
    verbs.follow_up(store, "plan", "second", session=SESSION)
    inbox = store.paths.box(Box.INBOX)
    if damage == "truncated":
        inbox.write_bytes(b"")
    elif damage == "deleted":
        inbox.unlink()
    else:
        inbox.write_bytes(inbox.read_bytes().splitlines(keepends=True)[0])

    warnings = RunStore(store.paths).load().warnings()
    assert any("inbox.jsonl lacks" in w for w in warnings), warnings
    verbs.follow_up(store, "plan", "third", session=SESSION)

    bodies = [m.body for m in RunStore(store.paths).messages(Box.INBOX)]
    assert bodies == ["first", "second", "third"]
    assert RunStore(store.paths).load().clean


def _as_an_older_crew_kept_it(store: RunStore) -> None:
    """How crew kept tasks before the task files: one JSON array in tasks.json, no tasks/."""
    older = [json.loads(store.paths.task_file(t).read_text()) for t in ("plan", "build")]
    for task_id in ("plan", "build"):
        store.paths.task_file(task_id).unlink()
    store.paths.tasks_dir.rmdir()
    store.paths.tasks.write_text(json.dumps(older, indent=2) + "\n")


def test_a_run_an_older_crew_made_is_converted_by_a_writer_that_changes_no_task(
    make_run: MakeRun,
) -> None:
    store = make_run()
    with change(store) as txn:
        tasks.transition(txn, "plan", TaskStatus.RUNNING, attempt=1)
    _as_an_older_crew_kept_it(store)

    verbs.steer(RunStore(store.paths), "plan", "a message, no task changed", session=SESSION)

    assert not store.paths.tasks.exists()
    assert json.loads(store.paths.task_file("plan").read_text())["status"] == "running"
    assert json.loads(store.paths.task_file("build").read_text())["status"] == "queued"
    assert RunStore(store.paths).load().clean


def test_a_run_an_older_crew_made_is_read_from_tasks_json_and_converted_by_its_next_writer(
    make_run: MakeRun,
) -> None:
    store = make_run()
    with change(store) as txn:
        tasks.transition(txn, "plan", TaskStatus.RUNNING, attempt=1)
    _as_an_older_crew_kept_it(store)

    recovery = RunStore(store.paths).load()
    assert recovery.clean and recovery.state.tasks["plan"].status is TaskStatus.RUNNING

    with change(RunStore(store.paths)) as txn:
        tasks.transition(txn, "build", TaskStatus.CANCELLED, error="test")
    assert not store.paths.tasks.exists()
    assert json.loads(store.paths.task_file("plan").read_text())["status"] == "running"
    assert json.loads(store.paths.task_file("build").read_text())["status"] == "cancelled"
    assert RunStore(store.paths).load().clean


def test_a_reader_that_comes_in_the_middle_of_a_write_waits_for_it_without_a_full_check(
    make_run: MakeRun, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A leader wakes as soon as a writer appends a mailbox line, before the writer has written
    # the marker: checking the whole run against its log then (every line of every mailbox
    # file) cost a leader seconds on a long run. It waits for the writer instead.
    import threading

    from crew.store import mailbox_repair

    store = make_run()
    with change(store) as txn:
        tasks.start(txn, "plan", attempt=1, pid=4242)
    verbs.steer(store, "plan", "before", session=SESSION)
    full_checks: list[object] = []
    real_compare = mailbox_repair.compare
    monkeypatch.setattr(
        mailbox_repair, "compare", lambda *a, **k: full_checks.append(a) or real_compare(*a, **k)
    )
    reader = RunStore(store.paths)
    found: list[object] = []
    count = len(store.state().tasks)
    with store.lock():  # a writer, half-way: its mailbox line is there, the marker not yet
        (sent,) = store.messages(Box.STEERING)
        extra = sent.model_copy(update={"id": ids.new_message_id(), "body": "mid-write"})
        jsonl.append(store.paths.box(Box.STEERING), [extra.to_line()])
        thread = threading.Thread(target=lambda: found.append(reader.load()))
        thread.start()
        thread.join(timeout=0.5)  # it waits for the lock (a reader that does not is caught below)
        last = eventlog.tail(store.paths.events).last_seq
        store.write_applied(last, tasks=count)  # the write ends
    thread.join(timeout=30)

    assert not thread.is_alive() and found and found[0].clean  # type: ignore[attr-defined]
    assert full_checks == []


@pytest.mark.parametrize("loss", ["removed", "emptied", "cut short"])
def test_a_run_whose_history_is_lost_is_shown_but_never_changed(
    make_run: MakeRun, cli: Callable[..., Any], loss: str
) -> None:
    # A send started the log again at seq 1, over the events the snapshots reflect, and
    # `crew doctor` called the run clean.
    store = make_run()
    start(store)
    verbs.steer(store, "plan", "first", session=SESSION)
    lines = store.paths.events.read_bytes().splitlines(keepends=True)
    if loss == "removed":
        store.paths.events.unlink()
    else:
        store.paths.events.write_bytes(b"" if loss == "emptied" else b"".join(lines[:-1]))
    before = snapshot_files(store.paths.root)

    shown = cli("status", store.run_id)
    refused = cli("steer", store.run_id, "plan", "again")
    found = cli("doctor", store.run_id)
    repaired = cli("doctor", store.run_id, "--repair")

    assert shown.code == 0 and "some history is missing" in shown.out  # its warnings
    assert refused.code == 1 and refused.out == ""
    assert refused.err.startswith(f"crew: error: Run {store.run_id} cannot be changed: events")
    assert "so a new event would be numbered over lost ones." in refused.err
    assert found.code == repaired.code == 1
    assert "some of the run's history is missing" in found.out
    assert "[repaired]" not in repaired.out
    assert snapshot_files(store.paths.root) == before  # nothing written, repaired or not
