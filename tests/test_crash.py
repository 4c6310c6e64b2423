"""The crash matrix: a leader killed (SIGKILL) right after each kind of write, interrupted
(Ctrl-C) there, or taken over while hung (between transactions, or inside one), then resumed.

With default settings (maxAttempts = 1) the run must finish: an interrupted attempt is not a
failure. Every accepted message must end delivered or rejected with a reason, and `crew doctor`
must find the files clean or repairable.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import SESSION
from leaders import eventually, write_crew

from crew import verbs
from crew.doctor import doctor
from crew.domain.lease import LeaseState, read_lease
from crew.leader import start_run
from crew.paths import Home
from crew.registry import Box, EventType, MessageStatus, RunStatus, TaskStatus
from crew.store.runstore import RunStore

KILL_POINTS = [
    "append:events.jsonl@1",  # the takeover's events, before its snapshot
    "replace:manifest.json@1",  # the takeover's manifest, before the marker
    "write:applied@2",  # the applied marker
    "append:events.jsonl@3",
    "deliver@1",  # a frame reached the worker, its delivery is not recorded
    "append:inbox.jsonl@1",  # a delivery recorded in the mailbox, not yet in the snapshots
    "append:outbox.jsonl@1",  # a question recorded, the task not yet waiting
    "replace:tasks/a.json@2",  # a task's snapshot: a's question recorded
    "deliver@3",
    "append:inbox.jsonl@3",
    "tear:events.jsonl@5",  # half an event line written
    "tear:inbox.jsonl@2",  # half a mailbox line written
    "append:events.jsonl@12",
    "replace:leader.json@2",  # a heartbeat
    "temp:tasks/a.json@2",  # a snapshot's temp file written, not yet renamed
    "temp:leader.json@2",  # a heartbeat's, likewise
]
#: Where Ctrl-C lands (the leader stops at the end of what it was doing).
INTERRUPT_POINTS = [
    "append:events.jsonl@3",
    "deliver@1",
    "append:outbox.jsonl@1",
    "replace:tasks/a.json@2",
    "append:inbox.jsonl@3",
]


def _crew(
    *args: str, fault: str | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    environ = {**os.environ, **(env or {})}
    if fault:
        environ["CREW_FAULT"] = fault
    return subprocess.run(
        [sys.executable, "-m", "crew", *args],
        capture_output=True, text=True, env=environ, timeout=60, check=False,
    )  # fmt: skip


def _scripted_run(tmp_path: Path, home: Home, **crew: str) -> RunStore:
    write_crew(
        tmp_path,
        [
            {"id": "a", "prompt": "say:a starts ; ask:need_confirmation:proceed with a? ; await:respond ; await:followUp ; exit:0"},
            {"id": "b", "prompt": "ask:need_selection:which colour? [red|blue] ; await:respond ; await:followUp ; exit:0", "dependsOn": ["a"]},
        ],
        crew=crew,
        auto_respond=[
            {"type": "need_confirmation", "answer": "yes"},
            {"type": "need_selection", "answer": "red"},
        ],
    )  # fmt: skip
    store = start_run(home, tmp_path / "crew.toml", session=SESSION)
    verbs.follow_up(store, "a", "extra work for a", session=SESSION)
    verbs.follow_up(store, "b", "extra work for b", session=SESSION)
    return store


@pytest.mark.parametrize("point", KILL_POINTS)
def test_a_leader_killed_after_any_write_loses_nothing(
    tmp_path: Path, home: Home, point: str
) -> None:
    store = _scripted_run(tmp_path, home)

    killed = _crew("resume", store.run_id, "--no-input", fault=point)
    assert killed.returncode == -9, f"{point} was never reached: {killed.stderr}"
    resumed = _crew("resume", store.run_id, "--no-input")

    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    _assert_finished_whole(home, store)


@pytest.mark.parametrize("point", INTERRUPT_POINTS)
def test_a_leader_interrupted_at_any_write_resumes_and_finishes(
    tmp_path: Path, home: Home, point: str
) -> None:
    store = _scripted_run(tmp_path, home)

    stopped = _crew("resume", store.run_id, "--no-input", fault=f"interrupt:{point}")
    assert stopped.returncode == 130, f"{point} was never reached: {stopped.stderr}"
    resumed = _crew("resume", store.run_id, "--no-input")

    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    _assert_finished_whole(home, store, restarted=True)


def test_a_hung_leader_taken_over_writes_nothing_and_the_run_finishes(
    tmp_path: Path, home: Home
) -> None:
    store = _scripted_run(tmp_path, home, leaderStaleAfter="3s")
    hung = subprocess.Popen(
        [sys.executable, "-m", "crew", "resume", store.run_id, "--no-input"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    eventually(lambda: store.state().tasks["a"].attempt == 1)
    with store.lock():  # paused outside a transaction (inside one, see the next test)
        hung.send_signal(signal.SIGSTOP)  # its heartbeat goes stale
    stale = store.state().run.config.crew.leader_stale_after
    eventually(lambda: read_lease(store.paths, stale_after=stale).state is LeaseState.STALE)

    took_over = _crew("resume", store.run_id, "--no-input")
    hung.send_signal(signal.SIGCONT)
    _, err = hung.communicate(timeout=30)

    assert took_over.returncode == 0, took_over.stdout + took_over.stderr
    assert hung.returncode == 4, err  # fenced out: it stopped without writing
    _assert_finished_whole(home, store, restarted=True)


def test_a_leader_hung_holding_the_run_lock_is_named_and_once_stopped_replaced(
    tmp_path: Path, home: Home
) -> None:
    store = _scripted_run(tmp_path, home, leaderStaleAfter="3s")
    hung = subprocess.Popen(
        [sys.executable, "-m", "crew", "resume", store.run_id, "--no-input"],
        env={**os.environ, "CREW_FAULT": "stop:append:events.jsonl@3"},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    stale = store.state().run.config.crew.leader_stale_after
    eventually(lambda: read_lease(store.paths, stale_after=stale).state is LeaseState.STALE)

    blocked = _crew("resume", store.run_id, "--no-input", env={"CREW_LOCK_TIMEOUT": "0.5"})
    hung.kill()  # what the hint says to do
    hung.communicate(timeout=30)
    resumed = _crew("resume", store.run_id, "--no-input")

    assert blocked.returncode == 3 and blocked.stdout == ""
    assert f"may be hung holding it: leader pid {hung.pid} on " in blocked.stderr
    assert f"Stop that process (`kill {hung.pid}` on " in blocked.stderr
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    _assert_finished_whole(home, store, restarted=True)


def _assert_finished_whole(home: Home, store: RunStore, *, restarted: bool = False) -> None:
    """The run completed, nothing was lost, and no interruption cost a task an attempt (with
    `restarted`: every task the resume queued again shows its new attempt)."""
    state = store.state()
    assert state.run.status is RunStatus.COMPLETED
    assert all(t.status is TaskStatus.COMPLETED for t in state.task_list())
    assert all(t.failures == 0 for t in state.task_list())
    if restarted:  # which tasks were live when the leader stopped depends on the moment it did
        resumed = [e for e in store.events().records if e.type is EventType.RUN_RESUMED]
        requeued = {t for e in resumed for t in (e.data or {}).get("requeued", [])}
        assert all(state.tasks[t].attempt > 1 for t in requeued), requeued
    messages = store.messages(Box.INBOX) + store.messages(Box.STEERING)
    for message in messages:
        assert message.status is not MessageStatus.PENDING, message
        if message.status is MessageStatus.REJECTED:
            assert message.reason, message
    follow_ups = {m.body: m.status for m in messages if m.kind == "followUp"}
    assert set(follow_ups) == {"extra work for a", "extra work for b"}
    assert all(s is not MessageStatus.REJECTED for s in follow_ups.values())  # they carry over
    seqs = [e.seq for e in store.events().records]
    assert seqs == list(range(1, len(seqs) + 1))
    report = doctor(home, store.run_id)
    assert report.clean, [f"{f.path}: {f.problem}" for f in report.findings]


def test_a_cli_writer_killed_mid_append_leaves_readers_unaffected(
    tmp_path: Path, home: Home
) -> None:
    store = _scripted_run(tmp_path, home)
    events_before = store.events().records

    torn = _crew("follow-up", store.run_id, "a", "x" * 50_000, fault="tear:events.jsonl")

    assert torn.returncode == -9
    read = store.events()
    assert read.records == events_before and read.bad == [] and read.tail_bytes > 0
    assert [m.body for m in store.messages(Box.INBOX)] == ["extra work for a", "extra work for b"]
    assert store.load().clean  # the half-written line is not a record: nothing to roll forward

    after = _crew("follow-up", store.run_id, "a", "the next one")
    assert after.returncode == 0, after.stderr
    assert [m.body for m in store.messages(Box.INBOX)][-1] == "the next one"
    assert store.events().tail_bytes == 0
    assert store.paths.events.with_name("events.jsonl.corrupt").stat().st_size > 25_000
    assert doctor(home, store.run_id).clean


@pytest.mark.parametrize(
    ("fault", "said"),
    [
        ("enospc", "the disk is full"),
        ("edquot", "the disk is full"),  # over the user's quota: the same to the user
        ("eio", "Input/output error"),
    ],
)
def test_a_full_or_failing_disk_is_a_clear_error_and_leaves_nothing_half_written(
    tmp_path: Path, home: Home, fault: str, said: str
) -> None:
    store = _scripted_run(tmp_path, home)
    before = {p.name: p.read_bytes() for p in store.paths.root.rglob("*.json*") if p.is_file()}

    full = _crew("follow-up", store.run_id, "a", "more", fault=f"{fault}:events.jsonl")

    assert full.returncode == 1
    assert full.stderr.startswith(
        f"crew: error: Could not append to {store.paths.events}: {said}"
    ), full.stderr
    assert "Nothing was recorded." in full.stderr
    after = {p.name: p.read_bytes() for p in store.paths.root.rglob("*.json*") if p.is_file()}
    assert after == before


def test_a_full_disk_after_the_commit_point_says_what_was_recorded(
    tmp_path: Path, home: Home
) -> None:
    store = _scripted_run(tmp_path, home)

    partial = _crew("follow-up", store.run_id, "a", "more", fault="enospc:inbox.jsonl")

    assert partial.returncode == 1
    assert "The change was recorded in events.jsonl, but could not append to" in partial.stderr
    assert "The next command that changes the run completes it." in partial.stderr
    assert [m.body for m in store.messages(Box.INBOX)] == ["extra work for a", "extra work for b"]
    _crew("follow-up", store.run_id, "b", "later")  # the next writer completes it
    assert [m.body for m in store.messages(Box.INBOX)] == [
        "extra work for a", "extra work for b", "more", "later",
    ]  # fmt: skip


def test_sixteen_writers_hammering_one_run_never_time_out_or_lose_a_line(
    tmp_path: Path, home: Home
) -> None:
    import multiprocessing

    from test_concurrency import _writer

    store = _scripted_run(tmp_path, home)
    context = multiprocessing.get_context("fork")
    ready = context.Event()
    writers = [context.Process(target=_writer, args=(store.paths, w, 60, ready)) for w in range(16)]
    for writer in writers:
        writer.start()
    ready.set()
    for writer in writers:
        writer.join(timeout=120)
        assert writer.exitcode == 0  # a lock timeout would have raised: exit code 1

    inbox = [m for m in store.messages(Box.INBOX) if m.body.startswith("writer")]
    assert len(inbox) == 16 * 60 and len({m.body for m in inbox}) == 16 * 60
    seqs = [e.seq for e in store.events().records]
    assert seqs == list(range(1, len(seqs) + 1))


def test_a_writer_killed_after_filling_a_tasks_spare_changed_nothing_it_had_not_committed(
    tmp_path: Path, home: Home
) -> None:
    store = _scripted_run(tmp_path, home)
    before = store.paths.task_file("b").read_bytes()

    killed = _crew("cancel", store.run_id, "b", fault="temp:tasks/b.json")
    assert killed.returncode == -9
    assert b'"cancelled"' in store.paths.task_twin("b").read_bytes()  # the spare, filled
    assert store.paths.task_file("b").read_bytes() == before  # the snapshot, as it was
    writer = subprocess.Popen(["true"])  # a temp file of an older crew whose writer is gone
    writer.wait()
    store.paths.tasks_dir.joinpath(f".b.json.{writer.pid}.abcd.tmp").write_text("{")
    assert _crew("follow-up", store.run_id, "a", "next").returncode == 0

    assert list(store.paths.tasks_dir.glob(".*.tmp")) == []
    assert store.state().tasks["b"].status is TaskStatus.CANCELLED  # the cancel was committed
    assert doctor(home, store.run_id).clean
