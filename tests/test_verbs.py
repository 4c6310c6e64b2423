"""The leader verbs as a library: the gate, each verb's effect, idempotency, backpressure."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import pytest
from conftest import SESSION, config, snapshot_files

from crew import ids, verbs
from crew.domain import change, tasks
from crew.domain import mailbox as mailbox_domain
from crew.errors import CrewError, NotFound, Refused, UsageError
from crew.models import Event, MailboxMessage, SupervisorContact
from crew.procs import Stop
from crew.registry import (
    Box,
    ContactType,
    EventType,
    MessageKind,
    MessageStatus,
    Priority,
    RunStatus,
    TaskStatus,
)
from crew.store import jsonl
from crew.store.runstore import RunStore

MakeRun = Callable[..., RunStore]


def start(store: RunStore, task: str = "plan", pid: int | None = None) -> None:
    with change(store) as txn:
        tasks.transition(txn, task, TaskStatus.RUNNING, attempt=1, started_at=txn.at, pid=pid)


def ask(
    store: RunStore,
    task: str = "plan",
    kind: ContactType = ContactType.NEED_INPUT,
    options: list[str] | None = None,
    *,
    secret: bool | None = None,
) -> SupervisorContact:
    if store.state().tasks[task].status is TaskStatus.QUEUED:
        start(store, task)
    with change(store) as txn:
        contact = SupervisorContact(
            id=ids.new_contact_id(),
            task_id=task,
            type=kind,
            prompt="Which database?",
            options=options or [],
            asked_at=txn.at,
            secret=secret,
        )
        tasks.transition(txn, task, TaskStatus.WAITING, waiting_since=txn.at, contact=contact)
    return contact


def events(store: RunStore) -> list[Event]:
    return jsonl.read(store.paths.events, Event).records


def mailbox(store: RunStore, box: Box) -> list[MailboxMessage]:
    return store.messages(box)


# ----------------------------------------------------------------------------- respond


def test_respond_answers_the_open_question_and_the_task_runs_again(make_run: MakeRun) -> None:
    store = make_run()
    contact = ask(store)

    sent = verbs.respond(store, "plan", "Postgres", session=SESSION)

    task = store.state().tasks["plan"]
    assert task.status is TaskStatus.RUNNING and task.contact is None and task.waiting_since is None
    message = sent.message
    assert message.kind is MessageKind.RESPOND and message.priority is Priority.HIGH
    assert message.status is MessageStatus.PENDING and message.body == "Postgres"
    assert message.data is not None and message.data["contactId"] == contact.id
    assert mailbox(store, Box.INBOX) == [message]
    last = events(store)[-1]
    assert last.type is EventType.TASK_RESPONDED
    assert last.data is not None
    assert last.data["contact"]["answerId"] == message.id and "answeredAt" in last.data["contact"]
    assert last.data["task"]["status"] == "running"
    assert last.data["mailboxMessage"]["id"] == message.id


def test_a_second_respond_to_an_answered_question_is_refused(make_run: MakeRun) -> None:
    store = make_run()
    ask(store)
    verbs.respond(store, "plan", "first", session=SESSION)

    with pytest.raises(Refused, match="Task plan is running: respond needs a task that is waiting"):
        verbs.respond(store, "plan", "second", session=SESSION)
    assert [m.body for m in mailbox(store, Box.INBOX)] == ["first"]


def test_respond_to_a_task_waiting_for_its_children_is_refused(make_run: MakeRun) -> None:
    # It was accepted and delivered, and the SDK's spawn() left it queued for a later ask().
    store = make_run()
    start(store)
    with change(store) as txn:
        tasks.wait_for_children(txn, "plan", ["plan.1"])
    before = snapshot_files(store.paths.root)

    with pytest.raises(
        Refused, match=re.escape("Task plan is waiting for its task(s) plan.1, not")
    ):
        verbs.respond(store, "plan", "hey", session=SESSION)
    assert snapshot_files(store.paths.root) == before
    assert verbs.steer(store, "plan", "but this", session=SESSION).message


def test_a_selection_must_be_one_of_the_options(make_run: MakeRun) -> None:
    store = make_run()
    contact = ask(store, kind=ContactType.NEED_SELECTION, options=["postgres", "sqlite"])
    before = snapshot_files(store.paths.root)

    with pytest.raises(
        UsageError,
        match=f"'mysql' is not one of the options of question {contact.id}: postgres, sqlite",
    ):
        verbs.respond(store, "plan", "mysql", session=SESSION)
    assert snapshot_files(store.paths.root) == before

    assert verbs.respond(store, "plan", "sqlite", session=SESSION).message.body == "sqlite"


def test_respond_pinned_to_a_question_refuses_a_different_one(make_run: MakeRun) -> None:
    store = make_run()
    current = ask(store)

    with pytest.raises(
        Refused, match=f"Task plan is not waiting on q_old: its open question is {current.id}"
    ):
        verbs.respond(store, "plan", "x", session=SESSION, contact_id="q_old")
    assert verbs.respond(store, "plan", "x", session=SESSION, contact_id=current.id).message


def test_respond_clears_a_flagged_task_without_a_question(make_run: MakeRun) -> None:
    store = make_run()
    start(store)
    with change(store) as txn:
        tasks.transition(txn, "plan", TaskStatus.NEEDS_REVIEW, error="stalled")
    assert store.state().run.status is RunStatus.NEEDS_REVIEW

    sent = verbs.respond(store, "plan", "carry on", session=SESSION)

    assert store.state().tasks["plan"].status is TaskStatus.RUNNING
    assert store.state().run.status is RunStatus.RUNNING
    assert sent.message.data is not None and "contactId" not in sent.message.data


# ----------------------------------------------------------------------------- steer, follow-up, nudge


def test_steer_is_high_priority_on_the_steering_file(make_run: MakeRun) -> None:
    store = make_run()
    start(store)

    sent = verbs.steer(store, "plan", "use sqlite", session=SESSION)

    assert sent.message.kind is MessageKind.STEER and sent.message.priority is Priority.HIGH
    assert mailbox(store, Box.STEERING) == [sent.message]
    assert events(store)[-1].type is EventType.AGENT_STEERED


def test_steer_reaches_a_waiting_task_but_not_a_queued_one(make_run: MakeRun) -> None:
    store = make_run()
    with pytest.raises(
        Refused, match="Task plan is queued: steer needs a task that is running or waiting"
    ) as caught:
        verbs.steer(store, "plan", "x", session=SESSION)
    assert caught.value.hint == "It has not started yet; `crew follow-up` queues work for it."

    ask(store)
    assert verbs.steer(store, "plan", "x", session=SESSION).message.task_id == "plan"


def test_follow_up_queues_work_for_a_task_that_has_not_started(make_run: MakeRun) -> None:
    store = make_run()

    sent = verbs.follow_up(store, "build", "and add tests", session=SESSION)

    assert sent.message.kind is MessageKind.FOLLOW_UP and sent.message.priority is Priority.NORMAL
    assert mailbox(store, Box.INBOX) == [sent.message]
    assert events(store)[-1].type is EventType.AGENT_FOLLOWED_UP


def test_nudge_has_a_default_body_and_says_it_is_a_nudge(make_run: MakeRun) -> None:
    store = make_run()
    start(store)

    default = verbs.nudge(store, "plan", session=SESSION).message
    custom = verbs.nudge(store, "plan", "where are you?", session=SESSION).message

    assert default.body == "Please report your current status, blocker, or smallest next step."
    assert default.data is not None and default.data["source"] == "nudge"
    assert custom.body == "where are you?"
    assert default.kind is MessageKind.NUDGE and default.priority is Priority.NORMAL
    assert events(store)[-1].type is EventType.AGENT_NUDGED


# ----------------------------------------------------------------------------- the gate


SENDERS: dict[str, Callable[..., Any]] = {
    "respond": verbs.respond,
    "steer": verbs.steer,
    "follow-up": verbs.follow_up,
    "nudge": verbs.nudge,
}


def _refusal_cases() -> list[tuple[str, str, type[CrewError], str]]:
    cases = []
    for verb in SENDERS:
        cases += [
            (verb, "unknown task", NotFound, "has no task 'deploy'"),
            (verb, "other owner", Refused, "is owned by session 'someone@else'"),
            (verb, "run ended", Refused, "has ended (cancelled)"),
            (verb, "empty body", UsageError, "The message body is empty."),
            (verb, "body too large", UsageError, "the limit is 100 bytes"),
        ]
    cases += [
        ("respond", "wrong status", Refused, "Task build is queued: respond needs"),
        ("steer", "wrong status", Refused, "Task build is queued: steer needs"),
        ("nudge", "wrong status", Refused, "Task build is queued: nudge needs"),
        ("follow-up", "wrong status", Refused, "Task done is completed: follow-up needs"),
    ]
    return cases


@pytest.mark.parametrize(("verb", "case", "error", "text"), _refusal_cases())
def test_every_refusal_writes_nothing(
    make_run: MakeRun, verb: str, case: str, error: type[CrewError], text: str
) -> None:
    cfg = config(
        tasks=[
            {"id": "plan", "agent": "coder", "prompt": "p"},
            {"id": "build", "agent": "coder", "prompt": "b"},
            {"id": "done", "agent": "coder", "prompt": "d"},
        ],
        limits={"maxBodyBytes": 100},
    )
    store = make_run(cfg, session="someone@else" if case == "other owner" else SESSION)
    if case != "other owner":
        ask(store, "plan")
        with change(store) as txn:
            tasks.transition(txn, "done", TaskStatus.RUNNING)
            tasks.transition(txn, "done", TaskStatus.COMPLETED, exit_code=0)
    if case == "run ended":
        verbs.cancel(store, session=SESSION)
    task = {"unknown task": "deploy", "wrong status": "build" if verb != "follow-up" else "done"}
    body = {"empty body": "  \n", "body too large": "x" * 101}.get(case, "hello")
    before = snapshot_files(store.paths.root)

    with pytest.raises(error, match=re.escape(text)):
        SENDERS[verb](store, task.get(case, "plan"), body, session=SESSION)

    assert snapshot_files(store.paths.root) == before


def test_the_gate_checks_the_task_state_before_the_body(make_run: MakeRun) -> None:
    store = make_run()
    start(store)

    with pytest.raises(Refused):  # exit 4 (not waiting) wins over exit 2 (empty body)
        verbs.respond(store, "plan", "", session=SESSION)


def test_force_acts_on_another_sessions_run_and_records_both_sessions(make_run: MakeRun) -> None:
    store = make_run(session="owner@host")
    start(store)

    sent = verbs.steer(store, "plan", "x", session="intruder@host", force=True)

    assert sent.overridden == "owner@host"
    override = [e for e in events(store) if e.type is EventType.OWNERSHIP_OVERRIDDEN]
    assert len(override) == 1
    assert override[0].data == {"owner": "owner@host", "session": "intruder@host", "verb": "steer"}


# ----------------------------------------------------------------------------- idempotency


def test_a_repeated_key_returns_the_first_message_and_writes_nothing(make_run: MakeRun) -> None:
    store = make_run()
    start(store)
    first = verbs.steer(store, "plan", "use sqlite", session=SESSION, idempotency_key="ci-42")
    before = snapshot_files(store.paths.root)

    again = verbs.steer(store, "plan", "use sqlite", session=SESSION, idempotency_key="ci-42")

    assert again.replayed and again.message == first.message
    assert snapshot_files(store.paths.root) == before
    assert first.message.data is not None and first.message.data["idempotencyKey"] == "ci-42"


def test_a_replay_works_even_after_the_task_moved_on_and_the_run_ended(make_run: MakeRun) -> None:
    store = make_run()
    ask(store)
    first = verbs.respond(store, "plan", "yes", session=SESSION, idempotency_key="answer-1")
    verbs.cancel(store, session=SESSION)

    again = verbs.respond(store, "plan", "yes", session=SESSION, idempotency_key="answer-1")

    assert again.replayed and again.message.id == first.message.id


def test_a_key_is_found_by_another_process_among_many_messages_in_its_latest_state(
    make_run: MakeRun,
) -> None:
    store = make_run()
    start(store)
    for n in range(50):
        verbs.follow_up(store, "plan", f"item {n}", session=SESSION, idempotency_key=f"f{n}")
    first = verbs.steer(store, "plan", "use sqlite", session=SESSION, idempotency_key="k")
    with change(store) as txn:
        mailbox_domain.deliver(txn, [first.message], attempt=1)

    elsewhere = RunStore.open(store.paths.home, store.run_id)  # reads the files afresh
    again = verbs.steer(elsewhere, "plan", "use sqlite", session=SESSION, idempotency_key="k")
    keyed = verbs.follow_up(elsewhere, "plan", "item 7", session=SESSION, idempotency_key="f7")

    assert again.replayed and again.message.id == first.message.id
    assert again.message.status is MessageStatus.DELIVERED
    assert keyed.replayed and keyed.message.body == "item 7"


@pytest.mark.parametrize(
    ("call", "text"),
    [
        (
            lambda s: verbs.steer(s, "plan", "other body", session=SESSION, idempotency_key="k"),
            "with a different body",
        ),
        (
            lambda s: verbs.nudge(s, "plan", "use sqlite", session=SESSION, idempotency_key="k"),
            "already used for a steer to plan",
        ),
        (
            lambda s: verbs.follow_up(
                s, "build", "use sqlite", session=SESSION, idempotency_key="k"
            ),
            "already used for a steer to plan",
        ),
    ],
)
def test_the_same_key_for_a_different_request_is_refused(
    make_run: MakeRun, call: Callable[[RunStore], object], text: str
) -> None:
    store = make_run()
    start(store)
    verbs.steer(store, "plan", "use sqlite", session=SESSION, idempotency_key="k")
    before = snapshot_files(store.paths.root)

    with pytest.raises(Refused, match=text):
        call(store)
    assert snapshot_files(store.paths.root) == before


# ----------------------------------------------------------------------------- backpressure


def test_backpressure_drops_the_oldest_pending_follow_ups(make_run: MakeRun) -> None:
    store = make_run()
    results = [verbs.follow_up(store, "build", f"item {n}", session=SESSION) for n in range(1, 61)]

    inbox = mailbox(store, Box.INBOX)
    pending = [m for m in inbox if m.status is MessageStatus.PENDING]
    rejected = [m for m in inbox if m.status is MessageStatus.REJECTED]
    assert [m.body for m in pending] == [f"item {n}" for n in range(11, 61)]
    assert [m.body for m in rejected] == [f"item {n}" for n in range(1, 11)]
    assert {m.reason for m in rejected} == {"dropped: backpressure"}
    dropped = [e for e in events(store) if e.type is EventType.MAILBOX_DROPPED]
    assert len(dropped) == 10
    assert [r.over_warning for r in results].index(True) == 20  # the 21st warns
    assert all(r.pending == 50 for r in results[50:])


def test_steers_and_nudges_share_one_cap_and_answers_are_never_dropped(make_run: MakeRun) -> None:
    store = make_run(config(limits={"maxPendingSteers": 3}))
    ask(store)
    for n in range(3):
        verbs.steer(store, "plan", f"steer {n}", session=SESSION)
    verbs.nudge(store, "plan", session=SESSION)

    steering = mailbox(store, Box.STEERING)
    assert [m.status for m in steering] == [
        MessageStatus.REJECTED,
        MessageStatus.PENDING,
        MessageStatus.PENDING,
        MessageStatus.PENDING,
    ]
    answer = verbs.respond(store, "plan", "ok", session=SESSION)
    assert answer.dropped == []


# ----------------------------------------------------------------------------- cancel


def test_cancelling_a_task_rejects_its_messages_and_cancels_its_dependents(
    make_run: MakeRun,
) -> None:
    store = make_run()
    verbs.follow_up(store, "plan", "more", session=SESSION)
    verbs.follow_up(store, "build", "later", session=SESSION)

    result = verbs.cancel(store, "plan", session=SESSION)

    state = store.state()
    assert state.tasks["plan"].status is TaskStatus.CANCELLED
    assert state.tasks["plan"].error == f"cancelled by {SESSION}"
    assert state.tasks["build"].status is TaskStatus.CANCELLED
    assert state.tasks["build"].error == "dependency plan cancelled"
    assert result.tasks == ["plan", "build"]
    assert {m.reason for m in result.rejected} == {"task cancelled before delivery"}
    assert all(m.status is MessageStatus.REJECTED for m in mailbox(store, Box.INBOX))
    assert state.run.status is RunStatus.FAILED  # its tasks ended, but no one cancelled the run


def test_cancelling_the_run_ends_it_cancelled(make_run: MakeRun) -> None:
    store = make_run()
    start(store)
    with change(store) as txn:
        tasks.transition(txn, "plan", TaskStatus.COMPLETED, exit_code=0)

    result = verbs.cancel(store, session=SESSION)

    assert result.tasks == ["build"] and result.run_status is RunStatus.CANCELLED
    assert store.state().run.status is RunStatus.CANCELLED
    assert events(store)[-1].type is EventType.RUN_ENDED


def test_cancelling_an_ended_run_says_so_and_writes_nothing(make_run: MakeRun) -> None:
    store = make_run()
    verbs.cancel(store, session=SESSION)
    before = snapshot_files(store.paths.root)

    result = verbs.cancel(store, session=SESSION)

    assert result.already == f"run {store.run_id} already ended (cancelled)"
    assert snapshot_files(store.paths.root) == before


def _worker(store: RunStore, task: str, *, env: bool = True) -> subprocess.Popen[bytes]:
    environment = {**os.environ}
    if env:
        environment.update(
            CREW_RUN_ID=store.run_id, CREW_TASK_ID=task, CREW_STATE_DIR=str(store.paths.root)
        )
    script = "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_DFL)\ntime.sleep(60)\n"
    return subprocess.Popen([sys.executable, "-c", script], env=environment, start_new_session=True)


def test_cancel_stops_the_workers_process_group(make_run: MakeRun) -> None:
    store = make_run()
    worker = _worker(store, "plan")
    start(store, pid=worker.pid)

    result = verbs.cancel(store, "plan", session=SESSION, grace=5)

    assert [(s.task_id, s.pid, s.outcome) for s in result.stopped] == [
        ("plan", worker.pid, Stop.TERMINATED)
    ]
    assert worker.wait(timeout=5) == -signal.SIGTERM


def test_cancel_kills_a_worker_that_ignores_sigterm(make_run: MakeRun) -> None:
    store = make_run()
    script = (
        "import signal, sys, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    worker = subprocess.Popen(
        [sys.executable, "-c", script],
        env={
            **os.environ,
            "CREW_RUN_ID": store.run_id,
            "CREW_TASK_ID": "plan",
            "CREW_STATE_DIR": str(store.paths.root),
        },
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    assert worker.stdout is not None and worker.stdout.readline() == b"ready\n"
    start(store, pid=worker.pid)

    started = time.monotonic()
    result = verbs.cancel(store, "plan", session=SESSION, grace=0.3)

    assert result.stopped[0].outcome is Stop.KILLED
    assert worker.wait(timeout=5) == -signal.SIGKILL
    assert time.monotonic() - started < 5


def test_cancelling_a_run_stops_its_workers_together_in_one_grace_period(
    make_run: MakeRun,
) -> None:
    """Each worker gets its SIGTERM before any is waited for, and they are waited for together:
    three that ignore it are killed after one grace period of 2 s (one after the other, it was
    three: 6 s and more)."""
    names = ["a", "b", "c"]
    store = make_run(
        config(
            tasks=[{"id": name, "agent": "coder", "prompt": "work"} for name in names],
        )
    )
    script = (
        "import signal, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    workers = {}
    for name in names:
        environment = {**os.environ, "CREW_RUN_ID": store.run_id, "CREW_TASK_ID": name}
        environment["CREW_STATE_DIR"] = str(store.paths.root)
        workers[name] = subprocess.Popen(
            [sys.executable, "-c", script], env=environment, stdout=subprocess.PIPE,
            start_new_session=True,
        )  # fmt: skip
    for name, worker in workers.items():
        assert worker.stdout is not None and worker.stdout.readline() == b"ready\n"
        start(store, name, pid=worker.pid)

    started = time.monotonic()
    result = verbs.cancel(store, session=SESSION, grace=2)
    took = time.monotonic() - started

    assert [(s.task_id, s.outcome) for s in result.stopped] == [(n, Stop.KILLED) for n in names]
    assert all(w.wait(timeout=5) == -signal.SIGKILL for w in workers.values())
    assert 2 <= took < 5  # the grace once, whatever the machine adds; not three times


def test_cancel_never_signals_a_pid_that_is_not_the_worker(make_run: MakeRun) -> None:
    store = make_run()
    stranger = _worker(store, "plan", env=False)  # the pid was reused by another program
    start(store, pid=stranger.pid)
    try:
        result = verbs.cancel(store, "plan", session=SESSION, grace=0.2)

        assert result.stopped[0].outcome is Stop.NOT_OURS
        assert stranger.poll() is None  # still running
        assert store.state().tasks["plan"].status is TaskStatus.CANCELLED
    finally:
        stranger.kill()
        stranger.wait()


# ----------------------------------------------------------------------------- handoff


def test_handoff_transfers_ownership(make_run: MakeRun) -> None:
    store = make_run()
    start(store)

    result = verbs.handoff(store, "ci@runner", session=SESSION)

    assert result.changed and result.previous == SESSION and result.owner == "ci@runner"
    assert store.state().run.owner_session_id == "ci@runner"
    last = events(store)[-1]
    assert last.type is EventType.OWNERSHIP_TRANSFERRED
    assert last.data is not None and last.data["from"] == SESSION and last.data["to"] == "ci@runner"
    with pytest.raises(Refused, match="is owned by session 'ci@runner'"):
        verbs.steer(store, "plan", "x", session=SESSION)


def test_handoff_by_a_stranger_needs_force(make_run: MakeRun) -> None:
    store = make_run(session="owner@host")
    before = snapshot_files(store.paths.root)

    with pytest.raises(Refused, match="is owned by session 'owner@host'"):
        verbs.handoff(store, "me@host", session="me@host")
    assert snapshot_files(store.paths.root) == before

    result = verbs.handoff(store, "me@host", session="me@host", force=True)
    assert result.overridden == "owner@host"
    types = [e.type for e in events(store)]
    assert types[-2:] == [EventType.OWNERSHIP_OVERRIDDEN, EventType.OWNERSHIP_TRANSFERRED]


def test_handoff_to_an_invalid_session_is_a_usage_error(make_run: MakeRun) -> None:
    store = make_run()
    with pytest.raises(UsageError, match="Invalid session id"):
        verbs.handoff(store, "bad\nsession", session=SESSION)
