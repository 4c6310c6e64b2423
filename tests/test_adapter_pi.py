"""The pi adapter end to end under `crew run`, against a fake pi that speaks its RPC protocol."""

from __future__ import annotations

from pathlib import Path

from conftest import SESSION
from fake_agents import FakeAgent, log
from leaders import eventually

from crew import verbs
from crew.paths import Home
from crew.registry import Box, ContactType, RunStatus, TaskStatus
from crew.waiting import Until, wait_for_run

AGENT = FakeAgent("pi", "pi")
start = AGENT.start
sent = AGENT.sent


def test_a_selection_dialog_becomes_a_question_and_the_answer_goes_back(
    tmp_path: Path, home: Home
) -> None:
    leader, store = start(tmp_path, home, "ASK:select")

    (task,) = wait_for_run(store, Until.WAITING, timeout=20).tasks
    assert task.contact is not None and task.contact.type is ContactType.NEED_SELECTION
    assert task.contact.prompt == "Pick a colour" and task.contact.options == ["red", "green"]
    verbs.respond(store, "t", "green", session=SESSION)

    assert leader.finish() == 0
    commands = sent(store)
    assert commands[0] == {"id": "crew-1", "type": "prompt", "message": "ASK:select"}
    assert commands[1]["type"] == "extension_ui_response" and commands[1]["value"] == "green"
    assert '"value": "green"' in log(store)
    assert store.state().tasks["t"].status is TaskStatus.COMPLETED


def test_a_confirm_dialog_is_confirmed_only_by_a_yes(tmp_path: Path, home: Home) -> None:
    leader, store = start(tmp_path, home, "ASK:confirm")

    (task,) = wait_for_run(store, Until.WAITING, timeout=20).tasks
    assert task.contact is not None and task.contact.type is ContactType.NEED_CONFIRMATION
    assert task.contact.prompt == "Proceed?: This will repaint the house."
    verbs.respond(store, "t", "no, not today", session=SESSION)

    assert leader.finish() == 0
    assert sent(store)[1] == {
        "type": "extension_ui_response",
        "id": sent(store)[1]["id"],
        "confirmed": False,
    }


def test_a_steer_mid_run_is_a_steering_prompt(tmp_path: Path, home: Home) -> None:
    leader, store = start(tmp_path, home, "SLOW")
    eventually(lambda: len(sent(store)) >= 1)

    verbs.steer(store, "t", "also bananas", session=SESSION)

    assert leader.finish() == 0
    steer = next(c for c in sent(store) if c.get("message") == "also bananas")
    assert steer["type"] == "prompt" and steer["streamingBehavior"] == "steer"
    assert "took into account: also bananas" in log(store)


def test_a_follow_up_after_the_turn_starts_a_new_run_while_the_agent_is_kept_open(
    tmp_path: Path, home: Home
) -> None:
    leader, store = start(tmp_path, home, "first job", keepOpen="3s")
    eventually(lambda: "done: first job" in log(store))

    verbs.follow_up(store, "t", "second job", session=SESSION)

    assert leader.finish() == 0
    follow = next(c for c in sent(store) if c.get("message") == "second job")
    assert follow["type"] == "prompt" and "streamingBehavior" not in follow  # pi was idle
    assert "done: second job" in log(store)
    assert store.state().run.status is RunStatus.COMPLETED


def test_stopping_a_task_clears_pis_queue_and_aborts_it_first(tmp_path: Path, home: Home) -> None:
    leader, store = start(tmp_path, home, "SLOW", timeout="1s")

    assert leader.finish() == 1
    kinds = [c["type"] for c in sent(store)]
    assert kinds[-2:] == ["clear_queue", "abort"]
    assert '"aborted": true' in log(store)  # pi wound down before it was signalled
    task = store.state().tasks["t"]
    assert task.status is TaskStatus.FAILED and task.error == "timed out after 1s of running"


def test_cancel_stops_the_agent(tmp_path: Path, home: Home) -> None:
    leader, store = start(tmp_path, home, "SLOW")
    eventually(lambda: len(sent(store)) >= 1)

    verbs.cancel(store, session=SESSION)

    assert leader.finish() == 1
    assert store.state().tasks["t"].status is TaskStatus.CANCELLED


def test_a_refused_prompt_fails_the_task_with_pis_reason(tmp_path: Path, home: Home) -> None:
    leader, store = start(tmp_path, home, "NOKEY")

    assert leader.finish() == 1
    task = store.state().tasks["t"]
    assert task.status is TaskStatus.FAILED
    assert task.error is not None and task.error.startswith(
        "pi refused the prompt: No API key found"
    )


def test_a_failed_turn_fails_the_task_with_the_model_error(tmp_path: Path, home: Home) -> None:
    leader, store = start(tmp_path, home, "FAIL")

    assert leader.finish() == 1
    task = store.state().tasks["t"]
    assert task.status is TaskStatus.FAILED and task.error == '400 {"error":"mock: forced failure"}'
    assert store.messages(Box.OUTBOX) == []
