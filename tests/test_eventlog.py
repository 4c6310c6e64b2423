"""A transaction is all or nothing: its events are framed, so a write cut short at any byte is
never taken for history, and the next writer sets it aside before appending."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from conftest import SESSION, snapshot_files

from crew import verbs
from crew.doctor import doctor
from crew.models import Event
from crew.paths import Home
from crew.registry import RunStatus, TaskStatus
from crew.store import eventlog, jsonl
from crew.store.runstore import RunStore

MakeRun = Callable[..., RunStore]


def _cancelled_run(make_run: MakeRun) -> tuple[RunStore, dict[str, bytes], bytes]:
    """A run with a pending follow-up, its files, and events.jsonl after a run-wide cancel (one
    transaction of four events: two tasks cancelled, the follow-up rejected, the run ended)."""
    store = make_run()
    verbs.follow_up(store, "plan", "and the docs", session=SESSION)
    before = snapshot_files(store.paths.root)
    verbs.cancel(store, session=SESSION)
    return store, before, store.paths.events.read_bytes()


def _as_if_cut(store: RunStore, before: dict[str, bytes], events: bytes) -> RunStore:
    """The run as a crash inside the events write leaves it: only `events` reached the log, and
    nothing after the commit point (mailbox, snapshots, marker) was written."""
    for name, data in before.items():
        path = store.paths.root / name
        path.write_bytes(events if path == store.paths.events else data)
    return RunStore(store.paths)


def test_a_cancel_cut_at_any_byte_is_all_or_nothing(make_run: MakeRun) -> None:
    store, before, after = _cancelled_run(make_run)
    start = len(before["events.jsonl"])
    lines = after[start:].splitlines(keepends=True)
    assert len(lines) == 4
    ends = {start + sum(len(x) for x in lines[: i + 1]) for i in range(len(lines))}

    _as_if_cut(store, before, b"")
    for cut in range(start, len(after) + 1):
        store.paths.events.write_bytes(after[:cut])
        state = RunStore(store.paths).load()

        if cut < len(after):
            assert state.state.run.status is RunStatus.RUNNING, cut
            assert {t.status for t in state.state.task_list()} == {TaskStatus.QUEUED}, cut
            assert state.last_seq == 4, cut
            assert bool(state.cut) is (cut >= min(ends)), cut  # whole lines of a cut transaction
        else:
            assert state.state.run.status is RunStatus.CANCELLED
            assert state.last_seq == 8 and not state.cut


def test_the_next_writer_sets_a_cut_transaction_aside_and_continues_the_seq(
    make_run: MakeRun,
) -> None:
    store, before, after = _cancelled_run(make_run)
    start = len(before["events.jsonl"])
    three_lines = start + sum(len(x) for x in after[start:].splitlines(keepends=True)[:3])
    for cut in (three_lines, three_lines + 17):  # on a line boundary, and inside the last line
        cut_store = _as_if_cut(store, before, after[:cut])
        cut_store.paths.events.with_name("events.jsonl.corrupt").unlink(missing_ok=True)

        verbs.follow_up(cut_store, "build", "then this", session=SESSION)

        events = jsonl.read(cut_store.paths.events, Event)
        assert [e.seq for e in events.records] == list(range(1, 7)) and events.bad == []
        assert events.records[-2].type == "state.repaired"
        assert "set aside a transaction cut short (3 of its events, seq 5–8)" in str(
            events.records[-2].message
        )
        aside = cut_store.paths.events.with_name("events.jsonl.corrupt").read_bytes()
        assert aside.rstrip(b"\n") == after[start:cut].rstrip(b"\n")
        state = cut_store.state()
        assert state.run.status is RunStatus.RUNNING
        assert [m.status for m in cut_store.messages()] == ["pending", "pending"]
        assert cut_store.load().clean


def test_status_warns_of_a_cut_transaction_and_doctor_repairs_it(
    make_run: MakeRun, home: Home
) -> None:
    store, before, after = _cancelled_run(make_run)
    start = len(before["events.jsonl"])
    cut_store = _as_if_cut(store, before, after[: start + 1000])

    assert any("a transaction cut short" in w for w in cut_store.load().warnings())
    found = doctor(home, store.run_id)
    assert any("a transaction cut short" in f.problem for f in found.findings)
    assert doctor(home, store.run_id, repair=True).findings
    assert doctor(home, store.run_id).clean
    assert [e.seq for e in cut_store.events().records] == [1, 2, 3, 4]


def test_a_follower_holds_back_a_transaction_until_its_last_event(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    follower = eventlog.Follower(path)
    events = eventlog.framed([_event(seq) for seq in (1, 2, 3)])
    lines = [e.to_line() for e in events]
    with path.open("ab") as handle:
        handle.write(lines[0] + lines[1])  # a write still going on

    assert follower.poll().records == []
    with path.open("ab") as handle:
        handle.write(lines[2])
    assert [e.seq for e in follower.poll().records] == [1, 2, 3]
    assert [e.end_seq for e in events] == [3, 3, None]


def test_a_real_cancel_killed_mid_write_changes_nothing(make_run: MakeRun, home: Home) -> None:
    store = make_run()
    verbs.follow_up(store, "plan", "and the docs", session=SESSION)
    env = {**os.environ, "CREW_HOME": str(home.root), "CREW_FAULT": "tear:events.jsonl"}

    torn = subprocess.run(
        [sys.executable, "-m", "crew", "cancel", store.run_id],
        env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip

    assert torn.returncode == -9
    state = store.load()
    assert state.state.run.status is RunStatus.RUNNING
    assert all(t.status is TaskStatus.QUEUED for t in state.state.task_list())
    assert [m.status for m in store.messages()] == ["pending"]
    verbs.cancel(store, session=SESSION)
    seqs = [e.seq for e in jsonl.read(store.paths.events, Event).records]
    assert seqs == list(range(1, len(seqs) + 1))
    assert store.state().run.status is RunStatus.CANCELLED


def _event(seq: int) -> Event:
    return Event(
        id=f"evt_{seq:016x}",
        seq=seq,
        run_id="20261130-034100-7f3a",
        at="2026-11-30T03:41:00.123456Z",
        type="task.started",
        task_id="plan",
    )
