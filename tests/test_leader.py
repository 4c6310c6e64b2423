"""The leader end to end, with real worker processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import SESSION
from leaders import Leader, eventually, store_of, write_crew

from crew import clock, verbs
from crew.domain import change
from crew.models import Event
from crew.paths import Home
from crew.registry import (
    Box,
    EventType,
    MessageKind,
    MessageStatus,
    RunStatus,
    TaskStatus,
    WatcherKind,
)
from crew.store import jsonl
from crew.waiting import Until, wait_for_run


def events_of(store: object) -> list[Event]:
    return jsonl.read(store.paths.events, Event).records  # type: ignore[attr-defined]


def log_of(store: object, task: str) -> str:
    return store.paths.log(task).read_text()  # type: ignore[attr-defined]


def test_ask_respond_from_another_process_then_complete(tmp_path: Path, home: Home) -> None:
    write_crew(
        tmp_path, [{"id": "plan", "prompt": "ask:need_input:Which database? ; read ; ack ; exit:0"}]
    )
    leader = Leader("run", "crew.toml", cwd=tmp_path)
    store = store_of(home, leader.run_id)

    (waiting,) = wait_for_run(store, Until.WAITING, timeout=20).tasks
    assert waiting.contact is not None and waiting.contact.prompt == "Which database?"
    answered = subprocess.run(
        [sys.executable, "-m", "crew", "respond", leader.run_id, "plan", "Postgres, please", "--wait-ack", "--timeout", "20s"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip

    assert answered.returncode == 0, answered.stderr
    assert leader.finish() == 0
    assert "got respond Postgres, please" in log_of(store, "plan")
    state = store.state()
    assert state.run.status is RunStatus.COMPLETED and state.tasks["plan"].exit_code == 0
    (answer,) = store.messages(Box.INBOX)
    assert (
        answer.status is MessageStatus.ACKNOWLEDGED
        and answer.delivered_at
        and answer.acknowledged_at
    )
    (contact,) = store.messages(Box.OUTBOX)
    assert contact.kind is MessageKind.CONTACT and contact.body == "Which database?"
    types = [e.type for e in events_of(store)]
    for expected in (EventType.SUPERVISOR_CONTACT, EventType.TASK_WAITING, EventType.TASK_RESPONDED,
                     EventType.MAILBOX_DELIVERED, EventType.MAILBOX_ACKNOWLEDGED, EventType.TASK_COMPLETED,
                     EventType.RUN_ENDED):  # fmt: skip
        assert expected in types


def test_a_selection_takes_only_one_of_its_options(tmp_path: Path, home: Home) -> None:
    write_crew(
        tmp_path,
        [{"id": "pick", "prompt": "ask:need_selection:Which one? [red|green] ; read ; exit:0"}],
    )
    leader = Leader("run", "crew.toml", cwd=tmp_path)
    store = store_of(home, leader.run_id)
    (task,) = wait_for_run(store, Until.WAITING, timeout=20).tasks
    assert task.contact is not None and task.contact.options == ["red", "green"]

    try:
        verbs.respond(store, "pick", "blue", session=SESSION)
        raise AssertionError("an answer outside the options was accepted")
    except Exception as error:
        assert "is not one of the options" in str(error)
    verbs.respond(store, "pick", "green", session=SESSION)

    assert leader.finish() == 0
    assert "got respond green" in log_of(store, "pick")


def test_dependencies_run_in_order_and_a_failure_cancels_dependents(
    tmp_path: Path, home: Home
) -> None:
    write_crew(
        tmp_path,
        [
            {"id": "first", "prompt": "say:one ; exit:0"},
            {"id": "second", "prompt": "say:two ; exit:3", "dependsOn": ["first"]},
            {"id": "third", "prompt": "say:three", "dependsOn": ["second"]},
            {"id": "alone", "prompt": "say:free"},
        ],
    )
    leader = Leader("run", "crew.toml", cwd=tmp_path)

    assert leader.finish() == 1
    store = store_of(home, leader.run_id)
    tasks = store.state().tasks
    assert tasks["first"].status is TaskStatus.COMPLETED
    assert tasks["second"].status is TaskStatus.FAILED and tasks["second"].exit_code == 3
    assert tasks["second"].error == "exited with code 3"
    assert tasks["third"].status is TaskStatus.CANCELLED
    assert tasks["third"].error == "dependency second failed"
    assert tasks["alone"].status is TaskStatus.COMPLETED
    assert store.state().run.status is RunStatus.FAILED
    started = [e.task_id for e in events_of(store) if e.type is EventType.TASK_STARTED]
    assert started.index("second") > started.index("first") and "third" not in started


def test_logs_hold_stdout_and_stderr_verbatim(tmp_path: Path, home: Home) -> None:
    write_crew(
        tmp_path,
        [{"id": "noisy", "prompt": "say:out one ; err:err one ; say:\x1b[1mbold\x1b[0m ; exit:0"}],
    )
    leader = Leader("run", "crew.toml", cwd=tmp_path)
    assert leader.finish() == 0

    log = log_of(store_of(home, leader.run_id), "noisy")
    assert log == "attempt 1\nout one\nerr one\n\x1b[1mbold\x1b[0m\n"


def test_detach_then_wait_from_a_ci_script(tmp_path: Path, home: Home) -> None:
    write_crew(tmp_path, [{"id": "a", "prompt": "sleep:0.3 ; exit:0"}])

    started = subprocess.run(
        [sys.executable, "-m", "crew", "run", "crew.toml", "--detach", "--json"],
        cwd=tmp_path, capture_output=True, text=True, check=True,
    )  # fmt: skip
    detached = json.loads(started.stdout)
    waited = subprocess.run(
        [sys.executable, "-m", "crew", "wait", detached["runId"], "--for", "done", "--timeout", "20s", "--json"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip

    assert waited.returncode == 0, waited.stderr
    result = json.loads(waited.stdout)
    assert result["for"] == "done" and result["tasks"][0]["status"] == "completed"
    assert isinstance(detached["pid"], int)
    store = store_of(home, detached["runId"])
    eventually(lambda: not store.paths.leader.exists())  # a leader that finished lets go


def test_follow_ups_wait_for_the_answer_and_messages_go_in_priority_order(
    tmp_path: Path, home: Home
) -> None:
    script = "ask:need_input:go? ; read ; read ; read ; read ; exit:0"
    write_crew(tmp_path, [{"id": "t", "prompt": script}])
    leader = Leader("run", "crew.toml", cwd=tmp_path)
    store = store_of(home, leader.run_id)
    wait_for_run(store, Until.WAITING, timeout=20)
    verbs.follow_up(store, "t", "follow", session=SESSION)
    verbs.nudge(store, "t", "status?", session=SESSION)
    verbs.steer(store, "t", "steer", session=SESSION)
    eventually(
        lambda: all(m.status is not MessageStatus.PENDING for m in store.messages(Box.STEERING))
    )
    assert (
        store.messages(Box.INBOX)[0].status is MessageStatus.PENDING
    )  # held: an answer comes first
    verbs.respond(store, "t", "yes", session=SESSION)

    assert leader.finish() == 0
    got = [line for line in log_of(store, "t").splitlines() if line.startswith("got")]
    assert got[-2:] == ["got respond yes", "got followUp follow"]
    assert sorted(got[:2]) == ["got nudge status?", "got steer steer"]


def test_text_input_gets_one_sanitized_line_per_message(tmp_path: Path, home: Home) -> None:
    write_crew(
        tmp_path,
        [{"id": "t", "prompt": "ask:need_input:x ; read ; exit:0"}],
        agent={"input": "text"},
    )
    leader = Leader("run", "crew.toml", cwd=tmp_path)
    store = store_of(home, leader.run_id)
    wait_for_run(store, Until.WAITING, timeout=20)

    verbs.respond(store, "t", "line one\nline two\x1b[31m red\x07", session=SESSION)

    assert leader.finish() == 0
    assert "got line one␤line two red␇\n" in log_of(store, "t")


def test_cancel_from_the_shell_stops_the_worker_and_ends_the_run(
    tmp_path: Path, home: Home
) -> None:
    write_crew(tmp_path, [{"id": "slow", "prompt": "say:working ; sleep:60"}])
    leader = Leader("run", "crew.toml", cwd=tmp_path)
    store = store_of(home, leader.run_id)
    eventually(lambda: store.state().tasks["slow"].status is TaskStatus.RUNNING)

    started = time.monotonic()
    verbs.cancel(store, session=SESSION)

    assert leader.finish() == 1
    assert time.monotonic() - started < 5
    assert store.state().run.status is RunStatus.CANCELLED


def test_a_task_over_its_timeout_is_stopped_failed_and_retried(tmp_path: Path, home: Home) -> None:
    write_crew(
        tmp_path, [{"id": "t", "prompt": "sleep:30"}], agent={"timeout": "500ms", "maxAttempts": 2}
    )
    leader = Leader("run", "crew.toml", cwd=tmp_path)

    assert leader.finish() == 1
    store = store_of(home, leader.run_id)
    task = store.state().tasks["t"]
    assert task.status is TaskStatus.FAILED and task.attempt == 2 and task.failures == 2
    assert task.error == "timed out after 500ms of running (failed attempt 2 of 2)"
    retried = [e for e in events_of(store) if e.type is EventType.TASK_RETRIED]
    assert len(retried) == 1
    assert log_of(store, "t").count("attempt ") == 2


def test_run_timeout_cancels_what_is_left_and_exits_3(tmp_path: Path, home: Home) -> None:
    write_crew(tmp_path, [{"id": "t", "prompt": "sleep:30"}])
    leader = Leader("run", "crew.toml", "--timeout", "700ms", cwd=tmp_path)

    assert leader.finish() == 3
    state = store_of(home, leader.run_id).state()
    assert state.run.status is RunStatus.FAILED
    assert state.tasks["t"].status is TaskStatus.CANCELLED
    assert state.tasks["t"].error == "run timed out after 700ms"


def test_a_silent_worker_is_nudged_once_then_flagged(tmp_path: Path, home: Home) -> None:
    write_crew(
        tmp_path,
        [
            {"id": "quiet", "prompt": "sleep:30"},
            {"id": "asking", "prompt": "ask:need_input:hello? ; sleep:30"},
        ],
        agent={"stallAfter": "1s", "maxNudges": 1},
    )
    leader = Leader("run", "crew.toml", cwd=tmp_path)
    store = store_of(home, leader.run_id)

    eventually(lambda: store.state().tasks["quiet"].status is TaskStatus.NEEDS_REVIEW, timeout=15)
    time.sleep(1.5)  # long enough for another stall period: no second nudge, no nudge to `asking`
    nudges = [m for m in store.messages(Box.STEERING) if m.kind is MessageKind.NUDGE]
    assert [m.task_id for m in nudges] == ["quiet"]
    assert nudges[0].data is not None and nudges[0].data["source"] == "monitor"
    state = store.state()
    assert state.tasks["quiet"].nudges == 1
    assert state.tasks["quiet"].error is not None and state.tasks["quiet"].error.startswith(
        "stalled"
    )
    assert state.tasks["asking"].status is TaskStatus.WAITING
    assert state.run.status is RunStatus.NEEDS_REVIEW
    verbs.cancel(store, session=SESSION)
    assert leader.finish() == 1


def test_a_flag_a_person_clears_is_not_raised_again_at_once(tmp_path: Path, home: Home) -> None:
    write_crew(
        tmp_path,
        [{"id": "quiet", "prompt": "sleep:60"}],
        agent={"stallAfter": "1s", "maxNudges": 1},
    )
    leader = Leader("run", "crew.toml", cwd=tmp_path)
    store = store_of(home, leader.run_id)
    eventually(lambda: store.state().tasks["quiet"].status is TaskStatus.NEEDS_REVIEW, timeout=15)

    verbs.respond(store, "quiet", "carry on", session=SESSION)

    def flags() -> list[Event]:
        return [e for e in events_of(store) if e.type is EventType.TASK_FLAGGED]

    eventually(lambda: len(flags()) == 2, timeout=15)
    verbs.cancel(store, session=SESSION, grace=0.1)
    leader.finish()
    events = events_of(store)
    cleared = next(e for e in events if e.type is EventType.TASK_RESPONDED)
    after = [e for e in events if e.seq > cleared.seq and e.task_id == "quiet"]
    kinds = [e.type for e in after if e.type in {EventType.AGENT_NUDGED, EventType.TASK_FLAGGED}]
    assert kinds[:2] == [EventType.AGENT_NUDGED, EventType.TASK_FLAGGED]  # nudged first, again
    assert cleared.data is not None and cleared.data["task"]["nudges"] == 0
    nudged = next(e for e in after if e.type is EventType.AGENT_NUDGED)
    silence = clock.parse_timestamp(nudged.at) - clock.parse_timestamp(cleared.at)
    assert silence.total_seconds() >= 0.9  # a whole stallAfter of silence, not a moment


def test_auto_respond_answers_known_questions_unattended(tmp_path: Path, home: Home) -> None:
    write_crew(
        tmp_path,
        [{"id": "t", "prompt": "ask:need_confirmation:Run the tests now? ; read ; exit:0"}],
        auto_respond=[{"type": "need_confirmation", "match": "(?i)run the tests", "answer": "yes"}],
    )
    leader = Leader("run", "crew.toml", cwd=tmp_path)

    assert leader.finish() == 0
    store = store_of(home, leader.run_id)
    (answer,) = store.messages(Box.INBOX)
    assert answer.body == "yes" and answer.data is not None
    assert answer.data["source"] == "autoRespond[0]"
    assert "got respond yes" in log_of(store, "t")


def test_a_second_leader_is_refused_with_the_first_named(tmp_path: Path, home: Home) -> None:
    write_crew(tmp_path, [{"id": "t", "prompt": "ask:need_input:x ; read ; exit:0"}])
    leader = Leader("run", "crew.toml", cwd=tmp_path)
    store = store_of(home, leader.run_id)
    wait_for_run(store, Until.WAITING, timeout=20)

    second = subprocess.run(
        [sys.executable, "-m", "crew", "resume", leader.run_id],
        capture_output=True,
        text=True,
        check=False,
    )

    assert second.returncode == 4
    assert f"is already led by pid {leader.pid} on {os.uname().nodename}" in second.stderr
    verbs.respond(store, "t", "ok", session=SESSION)
    assert leader.finish() == 0


def test_kill_9_while_waiting_then_respond_then_resume(tmp_path: Path, home: Home) -> None:
    """The answer sent while no leader ran reaches the next attempt, which asks the same question;
    the interrupted attempt costs nothing of the default maxAttempts = 1."""
    write_crew(tmp_path, [{"id": "t", "prompt": "ask:need_input:Which database? ; read ; exit:0"}])
    leader = Leader("run", "crew.toml", cwd=tmp_path)
    store = store_of(home, leader.run_id)
    (task,) = wait_for_run(store, Until.WAITING, timeout=20).tasks
    orphan = task.pid
    assert orphan is not None

    leader.process.kill()  # SIGKILL: no goodbye
    leader.finish()
    answer = verbs.respond(store, "t", "sqlite", session=SESSION).message  # no leader now
    resumed = Leader("resume", leader.run_id, cwd=tmp_path)

    assert resumed.finish() == 0
    state = store.state()
    assert state.run.status is RunStatus.COMPLETED and state.run.leader_epoch >= 2
    task = state.tasks["t"]
    assert task.attempt == 2 and task.failures == 0
    (delivered,) = store.messages(Box.INBOX)
    assert delivered.id == answer.id and delivered.status is not MessageStatus.PENDING
    types = [e.type for e in events_of(store)]
    assert EventType.TASK_INTERRUPTED in types and EventType.MAILBOX_HELD in types
    log = log_of(store, "t")
    assert "attempt 2" in log and "got respond sqlite" in log
    eventually(lambda: not _alive(orphan))  # the old attempt's worker was stopped


def test_an_answer_the_next_attempt_does_not_ask_for_is_never_given_to_it(
    tmp_path: Path, home: Home
) -> None:
    asks = 'echo "@supervisor need_input: question $CREW_ATTEMPT"; read -r x; echo "got $x"'
    write_crew(
        tmp_path, [{"id": "t", "prompt": "p"}], command=["sh", "-c", asks], agent={"input": "text"}
    )
    leader = Leader("run", "crew.toml", cwd=tmp_path)
    store = store_of(home, leader.run_id)
    wait_for_run(store, Until.WAITING, timeout=20)
    leader.process.kill()
    leader.finish()
    first = verbs.respond(store, "t", "for the first", session=SESSION).message

    resumed = Leader("resume", leader.run_id, cwd=tmp_path)
    (task,) = wait_for_run(store, Until.WAITING, timeout=20).tasks
    assert task.contact is not None and task.contact.prompt == "question 2"
    verbs.respond(store, "t", "for the second", session=SESSION)

    assert resumed.finish() == 0
    held = next(m for m in store.messages(Box.INBOX) if m.id == first.id)
    assert held.status is MessageStatus.REJECTED and held.reason == "task completed before delivery"
    log = log_of(store, "t")
    assert "got for the second" in log and "got for the first" not in log


def test_a_stale_leader_writes_nothing_once_fenced(tmp_path: Path, home: Home) -> None:
    write_crew(tmp_path, [{"id": "t", "prompt": "ask:need_input:x ; drain"}])
    leader = Leader("run", "crew.toml", cwd=tmp_path)
    store = store_of(home, leader.run_id)
    wait_for_run(store, Until.WAITING, timeout=20)

    with change(store) as txn:  # someone took the run over under it
        txn.record(
            EventType.LEADER_STARTED, run=txn.run.revised(leader_epoch=txn.run.leader_epoch + 1)
        )
    fenced_at = len(events_of(store))
    verbs.steer(store, "t", "anyone there?", session=SESSION)

    assert leader.finish() == 4
    assert len(events_of(store)) == fenced_at + 1  # only our steer
    (steer,) = store.messages(Box.STEERING)
    assert steer.status is MessageStatus.PENDING


def test_sigint_stops_leading_and_resume_continues(tmp_path: Path, home: Home) -> None:
    write_crew(tmp_path, [{"id": "t", "prompt": "drain"}], agent={"maxAttempts": 2})
    leader = Leader("run", "crew.toml", cwd=tmp_path)
    store = store_of(home, leader.run_id)
    eventually(lambda: store.state().tasks["t"].status is TaskStatus.RUNNING)

    leader.process.send_signal(signal.SIGINT)

    assert leader.finish() == 130
    assert "`crew resume" in leader.err
    assert store.state().tasks["t"].status is TaskStatus.RUNNING  # resumable, not "completed"
    assert "got EOF" in log_of(store, "t")  # the worker was told the leader is gone
    resumed = Leader("resume", leader.run_id, cwd=tmp_path)
    eventually(lambda: store.state().tasks["t"].attempt == 2)
    verbs.cancel(store, session=SESSION)
    assert resumed.finish() == 1


def test_messages_for_a_task_that_has_not_started_wait_for_it(tmp_path: Path, home: Home) -> None:
    write_crew(
        tmp_path,
        [
            {"id": "first", "prompt": "sleep:0.5 ; exit:0"},
            {"id": "second", "prompt": "read ; exit:0", "dependsOn": ["first"]},
        ],
    )
    leader = Leader("run", "crew.toml", cwd=tmp_path)
    store = store_of(home, leader.run_id)
    verbs.follow_up(store, "second", "when you start", session=SESSION)

    assert leader.finish() == 0
    assert "got followUp when you start" in log_of(store, "second")


def test_a_script_waits_for_a_task_to_start_before_steering_it(tmp_path: Path, home: Home) -> None:
    write_crew(
        tmp_path,
        [
            {"id": "first", "prompt": "sleep:0.3 ; exit:0"},
            {"id": "second", "prompt": "read ; exit:0", "dependsOn": ["first"]},
        ],
    )
    leader = Leader("run", "crew.toml", cwd=tmp_path)
    store = store_of(home, leader.run_id)

    waited = subprocess.run(
        [sys.executable, "-m", "crew", "wait", leader.run_id, "--for", "started", "--task", "second", "--timeout", "30s"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip

    assert waited.returncode == 0, waited.stderr
    assert waited.stdout.startswith("second running")
    verbs.steer(store, "second", "go on", session=SESSION)  # a queued task would refuse it
    assert leader.finish() == 0
    assert "got steer go on" in log_of(store, "second")


def test_a_resumed_run_delivers_what_a_deleted_inbox_held(tmp_path: Path, home: Home) -> None:
    from crew.leader import start_run

    write_crew(tmp_path, [{"id": "t", "prompt": "read ; exit:0"}])
    store = start_run(home, tmp_path / "crew.toml", session=SESSION)
    verbs.follow_up(store, "t", "the work", session=SESSION)
    store.paths.box(Box.INBOX).unlink()  # lost, as a bad `git checkout` or a person might

    status = subprocess.run(
        [sys.executable, "-m", "crew", "status", store.run_id, "--json"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    leader = Leader("resume", store.run_id, cwd=tmp_path)

    assert any("inbox.jsonl lacks 1 message" in w for w in json.loads(status.stdout)["warnings"])
    assert leader.finish() == 0, leader.err
    assert "got followUp the work" in log_of(store, "t")


def test_crew_logs_follows_a_task_to_its_end(tmp_path: Path, home: Home) -> None:
    write_crew(tmp_path, [{"id": "t", "prompt": "say:one ; sleep:0.5 ; say:two ; exit:0"}])
    leader = Leader("run", "crew.toml", cwd=tmp_path)

    followed = subprocess.run(
        [sys.executable, "-m", "crew", "logs", leader.run_id, "t", "--follow"],
        capture_output=True, text=True, check=False, timeout=30,
    )  # fmt: skip

    assert followed.returncode == 0
    assert followed.stdout == "attempt 1\none\ntwo\n"
    assert leader.finish() == 0


def _alive(pid: int) -> bool:
    from crew.procs import is_alive

    return is_alive(pid)


def test_a_repair_under_a_live_leader_loses_and_repeats_nothing(tmp_path: Path, home: Home) -> None:
    write_crew(tmp_path, [{"id": "t", "prompt": "ask:need_input:x ; drain"}])
    leader = Leader("run", "crew.toml", cwd=tmp_path)
    store = store_of(home, leader.run_id)
    wait_for_run(store, Until.WAITING, timeout=20)
    first = verbs.steer(store, "t", "before the repair", session=SESSION).message
    eventually(lambda: store.messages(Box.STEERING)[0].status is MessageStatus.DELIVERED)
    with store.paths.box(Box.STEERING).open("ab") as handle:
        handle.write(b"garbage from a bad disk\n")
    inode = store.paths.box(Box.STEERING).stat().st_ino

    from crew.doctor import doctor

    assert doctor(home, leader.run_id, repair=True).clean
    assert store.paths.box(Box.STEERING).stat().st_ino != inode  # replaced under the leader
    second = verbs.steer(store, "t", "after the repair", session=SESSION).message
    eventually(lambda: "got steer after the repair" in log_of(store, "t"))
    verbs.cancel(store, session=SESSION)

    assert leader.finish() == 1
    got = [line for line in log_of(store, "t").splitlines() if line.startswith("got steer")]
    assert got == ["got steer before the repair", "got steer after the repair"]
    statuses = {m.id: m.status for m in store.messages(Box.STEERING)}
    assert (
        statuses[first.id] is MessageStatus.DELIVERED
        and statuses[second.id] is MessageStatus.DELIVERED
    )


def test_an_sdk_worker_answers_preempts_and_resumes_under_crew_run(
    tmp_path: Path, home: Home
) -> None:
    agent = Path(__file__).parent / "workers" / "sdk_agent.py"
    (tmp_path / "crew.toml").write_text(
        "[agents.sdk]\n"
        f'command = ["{sys.executable}", "{agent}"]\n'
        '[[tasks]]\nid = "coder"\nagent = "sdk"\nprompt = "code"\n'
    )
    leader = Leader("run", "crew.toml", cwd=tmp_path)
    store = store_of(home, leader.run_id)
    wait_for_run(store, Until.WAITING, timeout=20)
    verbs.respond(store, "coder", "sqlite", session=SESSION)
    job = verbs.follow_up(store, "coder", "add the users table", session=SESSION).message
    eventually(lambda: "working on add the users table" in log_of(store, "coder"))
    steer = verbs.steer(store, "coder", "use uuids for ids", session=SESSION).message

    assert leader.finish() == 0
    log = log_of(store, "coder")
    assert "preempted by use uuids for ids" in log and "resumed add the users table" in log
    decisions = [
        e.data["decision"]
        for e in events_of(store)
        if e.type is EventType.ATTENTION_DECISION and e.data
    ]
    preempt = next(d for d in decisions if d["action"] == "preempt")
    assert preempt["item"] == steer.id and preempt["focus"] == job.id

    shown = subprocess.run(
        [sys.executable, "-m", "crew", "mailbox", leader.run_id, "--json"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    views = {m["id"]: m for m in json.loads(shown.stdout)}
    job_life = [(d["action"], d.get("by")) for d in views[job.id]["decisions"]]
    assert job_life == [("pick", None), ("preempt", steer.id), ("pick", None), ("done", None)]
    assert views[job.id]["decisions"][-1]["reason"] == "finished"
    assert [h["status"] for h in views[job.id]["history"]] == [
        "pending",
        "delivered",
        "acknowledged",
    ]
    human = subprocess.run(
        [sys.executable, "-m", "crew", "mailbox", leader.run_id, "--task", "coder"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert f"preempted by {steer.id}" in human and "done: finished" in human


def test_a_leader_without_file_events_polls_and_status_says_so(
    tmp_path: Path, home: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CREW_FORCE_POLLING", "1")
    write_crew(tmp_path, [{"id": "t", "prompt": "ask:need_input:x ; read ; exit:0"}])
    leader = Leader("run", "crew.toml", cwd=tmp_path)
    store = store_of(home, leader.run_id)
    wait_for_run(store, Until.WAITING, timeout=20)

    from crew.views import run_status

    eventually(lambda: any("the leader polls" in w for w in run_status(store).run_warnings))
    verbs.respond(store, "t", "still delivered", session=SESSION)  # polling still delivers
    assert leader.finish() == 0
    assert "got respond still delivered" in log_of(store, "t")


class _BrokenWatcher:
    """A file watcher without a descriptor whose wait fails, as a watchfiles backend might."""

    kind = WatcherKind.WATCHFILES

    def fileno(self) -> int | None:
        return None

    def wait(self, timeout: float | None) -> bool:
        raise RuntimeError("the watcher died")

    def close(self) -> None:
        pass


def test_a_leader_whose_file_watcher_fails_says_so_and_polls_instead(
    tmp_path: Path, home: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    from crew.leader import become_leader, start_run
    from crew.leader import wakeups as wakeups_module
    from crew.views import run_status

    monkeypatch.setattr(wakeups_module, "watch_folders", lambda folders: _BrokenWatcher())
    config = write_crew(tmp_path, [{"id": "t", "prompt": "ask:need_input:x ; read ; exit:0"}])
    store = start_run(home, config, session=SESSION)
    leader = become_leader(store, session=SESSION)
    codes: list[int] = []
    thread = threading.Thread(target=lambda: codes.append(leader.lead()), daemon=True)
    thread.start()
    try:
        wait_for_run(store, Until.WAITING, timeout=20)
        (failed,) = eventually(
            lambda: [e for e in events_of(store) if e.type is EventType.LEADER_ERROR]
        )
        assert failed.message is not None and "the watchfiles file watcher failed" in failed.message
        assert (failed.data or {}).get("error") == "RuntimeError('the watcher died')"
        lease = json.loads(store.paths.leader.read_text())
        assert lease["watcher"] == "poll"
        assert any("the leader polls" in w for w in run_status(store).run_warnings)
        verbs.respond(store, "t", "still delivered", session=SESSION)  # polling delivers it
        thread.join(timeout=30)
    finally:
        leader.request_stop("the test ended")  # never leave a leader thread behind
        thread.join(timeout=30)
    assert codes == [0]
    assert "got respond still delivered" in log_of(store, "t")
    assert len([e for e in events_of(store) if e.type is EventType.LEADER_ERROR]) == 1
