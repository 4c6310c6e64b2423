"""The inspection commands: runs, status, mailbox, events — output, JSON and exit codes."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable

import pytest
from conftest import SESSION, CliResult, config

from crew import ids
from crew.domain import change, lease, mailbox, tasks
from crew.models import MailboxMessage, SupervisorContact
from crew.registry import (
    ContactType,
    Direction,
    EventType,
    MessageKind,
    MessageStatus,
    Priority,
    TaskStatus,
)
from crew.store.runstore import RunStore

Cli = Callable[..., CliResult]
MakeRun = Callable[..., RunStore]


def waiting_run(make_run: MakeRun) -> RunStore:
    """A run whose `plan` task waits on a selection, with one steer delivered and one pending."""
    store = make_run()
    with change(store) as txn:
        tasks.transition(txn, "plan", TaskStatus.RUNNING, attempt=1, started_at=txn.at)
        for body in ("use sqlite", "and keep it small"):
            mailbox.post(
                txn,
                MailboxMessage(
                    id=ids.new_message_id(),
                    direction=Direction.INBOX,
                    kind=MessageKind.STEER,
                    from_="leader",
                    to="plan",
                    task_id="plan",
                    body=body,
                    status=MessageStatus.PENDING,
                    priority=Priority.HIGH,
                    sent_at=txn.at,
                ),
                EventType.AGENT_STEERED,
                f"steered plan: {body}",
            )
    with change(store) as txn:
        first = next(iter(txn.messages(MessageKind.STEER.box).values()))
        mailbox.post(
            txn,
            first.model_copy(update={"status": MessageStatus.DELIVERED, "delivered_at": txn.at}),
            EventType.MAILBOX_DELIVERED,
        )
        contact = SupervisorContact(
            id="q_abc123",
            task_id="plan",
            type=ContactType.NEED_SELECTION,
            prompt="Which database?",
            options=["postgres", "sqlite"],
            asked_at=txn.at,
        )
        tasks.transition(txn, "plan", TaskStatus.WAITING, waiting_since=txn.at, contact=contact)
    return store


def test_version_and_help(cli: Cli) -> None:
    from crew import __version__

    assert cli("--version") == CliResult(0, f"crew {__version__}\n", "")
    result = cli("--help")
    assert result.code == 0
    for command in ("runs", "status", "mailbox", "events", "init", "doctor", "schema"):
        assert command in result.out


def test_runs_lists_newest_first_and_filters_by_status(cli: Cli, make_run: MakeRun) -> None:
    older = make_run()
    newer = waiting_run(make_run)
    with change(older) as txn:
        for task in ("plan", "build"):
            tasks.transition(txn, task, TaskStatus.CANCELLED, error="test")

    listed = json.loads(cli("runs", "--json").out)
    assert [r["runId"] for r in listed] == [newer.run_id, older.run_id]
    assert listed[0]["tasks"] == {"waiting": 1, "queued": 1}
    assert "config" not in listed[0]

    failed = json.loads(cli("runs", "--status", "failed", "--json").out)
    assert [r["runId"] for r in failed] == [older.run_id]

    human = cli("runs")
    assert human.code == 0
    assert human.out.index(newer.run_id) < human.out.index(older.run_id)
    assert "1 waiting, 1 queued" in human.out


def test_runs_in_an_empty_home_says_how_to_start(cli: Cli) -> None:
    assert cli("runs") == CliResult(0, "No runs yet. Start one with `crew run`.\n", "")
    assert cli("runs", "--json") == CliResult(0, "[]\n", "")


def test_status_json_has_the_documented_shape(cli: Cli, make_run: MakeRun) -> None:
    store = waiting_run(make_run)

    result = cli("status", "--json")

    assert result.code == 0
    data = json.loads(result.out)
    assert list(data) == ["run", "tasks", "pending", "warnings", "leader"]
    assert data["leader"] == {"alive": False}
    assert data["run"]["runId"] == store.run_id
    assert [t["id"] for t in data["tasks"]] == ["plan", "build"]
    assert data["tasks"][0]["contact"]["options"] == ["postgres", "sqlite"]
    assert data["pending"] == {
        "plan": {"inbox": 0, "steering": 1},
        "build": {"inbox": 0, "steering": 0},
    }
    assert any("no leader is running" in w for w in data["warnings"])


def test_status_shows_tasks_open_questions_and_how_to_answer(cli: Cli, make_run: MakeRun) -> None:
    store = waiting_run(make_run)

    result = cli("status", store.run_id[:17])

    assert result.code == 0
    assert f"Run {store.run_id}" in result.out
    assert "Which database? [postgres|sqlite]" in result.out
    assert f'crew respond {store.run_id} plan "…"' in result.out
    assert "1 steering" in result.out


@pytest.mark.parametrize(
    ("args", "code", "error"),
    [
        (("status", "../etc"), 2, "crew: error: Invalid run id '../etc': expected a run id such as"),
        (("status", "1999"), 5, "crew: error: No run matches '1999' in "),
        (("mailbox", "latest", "--task", "../x"), 2, "crew: error: Invalid task id '../x'"),
        (("mailbox", "latest", "--task", "deploy"), 5, "crew: error: Run {run} has no task 'deploy' (tasks: plan, build)."),
        (("events", "latest", "--type", "bogus"), 2, "crew: error: Unknown event type 'bogus'"),
    ],
)  # fmt: skip
def test_bad_arguments_get_one_sentence_and_the_documented_exit_code(
    cli: Cli, make_run: MakeRun, args: tuple[str, ...], code: int, error: str
) -> None:
    store = make_run()

    result = cli(*args)

    assert result.code == code
    assert result.out == ""
    assert result.err.startswith(error.format(run=store.run_id))
    assert "Traceback" not in result.err


HUGE = "x" * 100_000


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (("events", "latest", "--type", HUGE), 2),
        (("schema", HUGE), 2),
        (("add", "latest", "--agent", HUGE, "more"), 5),
        (("respond", "latest", "plan", "postgres", "--contact", HUGE), 4),
    ],
)
def test_a_huge_argument_is_shown_cut_short_in_the_error(
    cli: Cli, make_run: MakeRun, args: tuple[str, ...], code: int
) -> None:
    waiting_run(make_run)

    result = cli(*args)

    assert (result.code, result.out) == (code, "")
    assert "x" * 64 + "…" in result.err and len(result.err) < 1_000


def test_status_without_any_run_is_not_found(cli: Cli) -> None:
    result = cli("status")

    assert result.code == 5
    assert result.err.startswith("crew: error: No runs in ")
    assert "Start one with `crew run`." in result.err


def test_mailbox_shows_each_message_and_what_became_of_it(cli: Cli, make_run: MakeRun) -> None:
    store = waiting_run(make_run)

    human = cli("mailbox", store.run_id)
    assert human.code == 0
    assert "'use sqlite'" in human.out and "pending" in human.out and "delivered" in human.out

    data = json.loads(cli("mailbox", "latest", "--json").out)
    assert [m["body"] for m in data] == ["use sqlite", "and keep it small"]
    assert [h["status"] for h in data[0]["history"]] == ["pending", "delivered"]
    assert data[0]["box"] == "steering" and data[0]["status"] == "delivered"

    pending = json.loads(cli("mailbox", "latest", "--status", "pending", "--json").out)
    assert [m["body"] for m in pending] == ["and keep it small"]
    assert json.loads(cli("mailbox", "latest", "--box", "inbox", "--json").out) == []
    assert json.loads(cli("mailbox", "latest", "--task", "build", "--json").out) == []


def test_events_prints_the_log_and_filters_it(cli: Cli, make_run: MakeRun) -> None:
    store = waiting_run(make_run)

    lines = cli("events", store.run_id, "--json").out.splitlines()
    events = [json.loads(line) for line in lines]
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert events[0]["type"] == "run.created"

    steers = cli("events", "latest", "--type", "agent.steered", "--json").out.splitlines()
    assert [json.loads(line)["message"] for line in steers] == [
        "steered plan: use sqlite",
        "steered plan: and keep it small",
    ]
    tasks = cli("events", "latest", "--type", "task", "--task", "plan", "--json").out.splitlines()
    assert [json.loads(line)["type"] for line in tasks] == [
        "task.queued",
        "task.started",
        "task.waiting",
    ]
    human = cli("events", "latest").out
    assert "#1" in human and "run.created" in human


def test_events_reports_a_corrupt_line_on_stderr_and_goes_on(cli: Cli, make_run: MakeRun) -> None:
    store = make_run()
    with store.paths.events.open("ab") as handle:
        handle.write(b"garbage\n")
    with change(store) as txn:
        txn.record(EventType.ATTENTION_DECISION, task_id="plan")

    result = cli("events", "latest", "--json")

    assert result.code == 0
    assert len(result.out.splitlines()) == 4
    assert f"crew: warning: skipped {store.paths.events}:4: " in result.err


def test_events_follow_prints_new_events_until_the_run_ends(cli: Cli, make_run: MakeRun) -> None:
    store = make_run()
    lease.write_lease(store.paths, lease.new_lease(SESSION, 0))  # led: by this process

    def writer() -> None:
        time.sleep(0.2)
        with change(store) as txn:
            tasks.transition(txn, "plan", TaskStatus.RUNNING)
        time.sleep(0.1)
        with change(store) as txn:
            tasks.transition(txn, "plan", TaskStatus.CANCELLED, error="stop")
            tasks.transition(txn, "build", TaskStatus.CANCELLED, error="stop")

    thread = threading.Thread(target=writer)
    thread.start()
    result = cli("events", "latest", "--follow", "--json")
    thread.join()

    types = [json.loads(line)["type"] for line in result.out.splitlines()]
    assert result.code == 0
    assert types[-4:] == ["task.started", "task.cancelled", "task.cancelled", "run.ended"]


def test_following_an_ended_run_prints_it_and_returns(cli: Cli, make_run: MakeRun) -> None:
    store = make_run(config(tasks=[{"id": "only", "agent": "coder", "prompt": "x"}]))
    with change(store) as txn:
        tasks.transition(txn, "only", TaskStatus.CANCELLED)

    result = cli("events", "latest", "--follow")

    assert result.code == 0 and "run.ended" in result.out


def test_status_shows_the_failures_that_count_against_max_attempts(
    cli: Cli, make_run: MakeRun
) -> None:
    store = make_run(config(agents={"coder": {"command": ["true"], "maxAttempts": 2}}))
    with change(store) as txn:
        tasks.start(txn, "plan", attempt=1, pid=4242)
        tasks.requeue(txn, "plan", "exited with code 1")
    with change(store) as txn:
        tasks.start(txn, "plan", attempt=2, pid=4243)

    shown = cli("status", "latest")

    assert shown.code == 0
    row = next(line for line in shown.out.splitlines() if line.startswith("plan "))
    assert "running" in row and " 2 (1/2 failed) " in row
