"""The pi adapter end to end under `crew run`, against a fake pi that speaks its RPC protocol;
and, driven line by line, how it names and resumes pi's session."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from conftest import SESSION
from fake_agents import FakeAgent, killed_and_resumed, line, log, message, notes
from leaders import Leader, eventually, store_of, write_crew

from crew import verbs
from crew.adapters.base import SessionStarted, TurnEnd
from crew.adapters.pi import PiAdapter
from crew.adapters.wire import continuation
from crew.config import AgentConfig
from crew.models import Task
from crew.paths import Home
from crew.registry import Box, ContactType, MessageKind, RunStatus, TaskStatus
from crew.waiting import Until, wait_for_run

AGENT = FakeAgent("pi", "pi")
start = AGENT.start
sent = AGENT.sent


def dialog_answer(store: Any) -> dict[str, Any]:
    """The (only) extension_ui_response crew sent."""
    (answer,) = [c for c in sent(store) if c["type"] == "extension_ui_response"]
    return answer


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
    assert dialog_answer(store)["value"] == "green"
    assert '"value": "green"' in log(store)
    assert store.state().tasks["t"].status is TaskStatus.COMPLETED


def test_a_confirm_dialog_is_confirmed_only_by_a_yes(tmp_path: Path, home: Home) -> None:
    leader, store = start(tmp_path, home, "ASK:confirm")

    (task,) = wait_for_run(store, Until.WAITING, timeout=20).tasks
    assert task.contact is not None and task.contact.type is ContactType.NEED_CONFIRMATION
    assert task.contact.prompt == "Proceed?: This will repaint the house."
    verbs.respond(store, "t", "no, not today", session=SESSION)

    assert leader.finish() == 0
    answer = dialog_answer(store)
    assert answer == {"type": "extension_ui_response", "id": answer["id"], "confirmed": False}


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
    # The run's end, not its text: pi prints the answer before it settles, and a follow-up
    # sent in between joins the run (streamingBehavior) instead of starting a new one.
    eventually(lambda: '"type": "agent_settled"' in log(store))

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


# ---------------------------------------------------------------------- sessions


def test_pis_session_file_is_recorded_and_a_resumed_run_continues_it(
    tmp_path: Path, home: Home
) -> None:
    leader, store = start(tmp_path, home, "ASK:select")
    wait_for_run(store, Until.WAITING, timeout=20)
    session = eventually(lambda: store.state().tasks["t"].session)
    assert Path(session).is_file()  # pi saved the conversation: the model had answered once
    # The session came from get_state's answer on stdout; the fake's echo of get_state comes on
    # stderr, another pipe, which the leader may not have logged yet: wait for it.
    eventually(lambda: len(AGENT.sent(store)) >= 2)

    resumed = killed_and_resumed(leader, store, tmp_path)

    assert resumed.finish() == 0
    first, second = AGENT.launches(store)
    assert "--session" not in first.argv
    assert second.argv[-2:] == ["--session", session]
    assert first.sent[:2] == [
        {"id": "crew-1", "type": "prompt", "message": "ASK:select"},
        {"id": "crew-2", "type": "get_state"},
    ]
    assert second.sent[0]["type"] == "prompt"
    assert second.sent[0]["message"] == continuation(store.state().tasks["t"])
    # The resumed pi had the earlier conversation: the prompt and the tool call that asked.
    assert "2 earlier messages, the first prompt: ASK:select" in log(store)
    task = store.state().tasks["t"]
    assert task.status is TaskStatus.COMPLETED and task.attempt == 2 and task.session == session


def test_with_no_session_pi_keeps_nothing_and_no_session_is_recorded(
    tmp_path: Path, home: Home
) -> None:
    leader, store = start(tmp_path, home, "first job", args=("--no-session",))

    assert leader.finish() == 0
    assert {"id": "crew-2", "type": "get_state"} in sent(store)
    assert '"sessionId"' in log(store)  # pi named its in-memory session, but no file
    assert store.state().tasks["t"].session is None
    assert not (tmp_path / ".pi").exists()


def pi() -> PiAdapter:
    return PiAdapter(AgentConfig(command=["pi", "--mode", "rpc"], protocol="pi"))


def task(session: str | None = None) -> Task:
    return Task(
        id="t", agent="w", title="t", prompt="go", status=TaskStatus.RUNNING, session=session
    )


def state(**data: Any) -> str:
    return line(id="crew-2", type="response", command="get_state", success=True, data=data)


def test_the_session_file_is_passed_to_pi_only_when_an_earlier_attempt_recorded_one() -> None:
    argv = ["pi", "--mode", "rpc"]

    assert pi().command(argv, task()) == argv
    assert pi().command(argv, task("/s/a.jsonl")) == [*argv, "--session", "/s/a.jsonl"]


def test_the_session_file_pi_names_is_reported_once() -> None:
    adapter = pi()
    commands = [json.loads(c) for c in adapter.start(task()).write.splitlines()]
    assert commands == [
        {"id": "crew-1", "type": "prompt", "message": "go"},
        {"id": "crew-2", "type": "get_state"},
    ]

    named = state(sessionFile="/s/a.jsonl", sessionId="abc", messageCount=1)
    assert adapter.on_line(named).signals == [SessionStarted("/s/a.jsonl")]
    assert adapter.on_line(named).signals == []
    assert pi().on_line(state(sessionId="abc", messageCount=1)).signals == []  # --no-session
    database = state(sessionFile="/s/sessions.sqlite", sessionId="abc")
    assert pi().on_line(database).signals == []  # not a file of its own to pass to --session


def test_a_resumed_attempt_continues_instead_of_starting_the_task_again() -> None:
    adapter = pi()
    resumed = task("/s/a.jsonl")

    (prompt, _) = [json.loads(c) for c in adapter.start(resumed).write.splitlines()]

    assert prompt == {"id": "crew-1", "type": "prompt", "message": continuation(resumed)}
    assert continuation(resumed).endswith("The task, as first given:\n\ngo")
    assert adapter.on_line(state(sessionFile="/s/a.jsonl")).signals == []  # known already


def test_a_follow_up_pi_takes_only_after_its_run_settled_is_a_turn_of_its_own() -> None:
    """Seen with the real pi: a follow-up that reaches it as its run ends is answered after
    `agent_settled`, with a new run; that settle is not the end of the work."""
    adapter = pi()
    started = {"type": "response", "command": "prompt", "success": True,
               "data": {"disposition": "started"}}  # fmt: skip
    answer = {
        "role": "assistant",
        "stopReason": "stop",
        "content": [{"type": "text", "text": "ok"}],
    }
    adapter.start(task())
    adapter.on_line(line(id="crew-1", **started))
    adapter.on_line(line(type="agent_start"))
    sent = adapter.deliver(message(MessageKind.FOLLOW_UP, "more")).write
    assert json.loads(sent)["streamingBehavior"] == "followUp"  # pi is busy, as far as crew knows

    assert adapter.on_line(line(type="agent_settled", aborted=False)).signals == []
    adapter.on_line(line(id="crew-3", **started))
    adapter.on_line(line(type="agent_start"))
    adapter.on_line(line(type="message_end", message=answer))
    settled = adapter.on_line(line(type="agent_settled", aborted=False))
    assert settled.signals == [TurnEnd(None, "ok")]


def test_a_503_that_pis_retry_gets_past_does_not_fail_the_task(tmp_path: Path, home: Home) -> None:
    leader, store = start(tmp_path, home, "FLAKY")

    assert leader.finish() == 0
    task = store.state().tasks["t"]
    assert task.status is TaskStatus.COMPLETED and task.error is None
    (note,) = [m.body for m in store.messages(Box.OUTBOX)]
    assert note.startswith("pi: retrying in 0.01s (attempt 1 of 2) after 503 ")


def test_a_503_that_pis_retries_never_get_past_fails_the_task(tmp_path: Path, home: Home) -> None:
    leader, store = start(tmp_path, home, "DOWN")

    assert leader.finish() == 1
    task = store.state().tasks["t"]
    assert task.status is TaskStatus.FAILED
    assert task.error == '503 {"type":"error","error":{"type":"overloaded_error"}}'
    assert len(store.messages(Box.OUTBOX)) == 2  # a note per retry


def test_a_prompt_an_extension_command_handles_ends_the_turn(tmp_path: Path, home: Home) -> None:
    leader, store = start(tmp_path, home, "/hello")

    assert leader.finish(timeout=20) == 0  # no run started, and no agent_settled came
    assert store.state().tasks["t"].status is TaskStatus.COMPLETED
    assert "fake-pi ran the command /hello" in log(store)


def test_a_steer_pi_refuses_mid_run_is_sent_again_when_the_run_settles(
    tmp_path: Path, home: Home
) -> None:
    leader, store = start(tmp_path, home, "SLOW")
    eventually(lambda: sent(store))

    verbs.steer(store, "t", "REFUSE for now", session=SESSION)

    assert leader.finish() == 0  # a refused message is no longer fatal
    assert store.state().tasks["t"].status is TaskStatus.COMPLETED
    prompts = [c["message"] for c in sent(store) if c["type"] == "prompt"]
    assert prompts == ["SLOW", "REFUSE for now", "REFUSE for now"]
    assert "done: REFUSE for now" in log(store)
    assert any(n.startswith("pi refused a message for now (Cannot queue") for n in notes(store))


def test_a_dialog_that_times_out_in_pi_stops_the_task_waiting(tmp_path: Path, home: Home) -> None:
    leader, store = start(tmp_path, home, "ASKT:select")
    eventually(lambda: store.state().tasks["t"].status is TaskStatus.WAITING)

    assert leader.finish() == 0  # no answer came: pi went on, and so did the task
    assert store.state().tasks["t"].status is TaskStatus.COMPLETED
    withdrawn = [e for e in store.events().records if e.type == "supervisor.withdrawn"]
    assert len(withdrawn) == 1 and "pi's dialog timed out" in (withdrawn[0].message or "")
    assert 'answer was {\\"cancelled\\": true}' in log(store)  # as pi's JSON line has it


def test_a_pi_older_than_1_0_is_refused_at_once_naming_what_is_needed(
    tmp_path: Path, home: Home
) -> None:
    leader, store = start(tmp_path, home, "hello", env={"FAKE_PI_OLD": "1"})

    assert leader.finish(timeout=20) == 1  # rather than waiting for ever for the turn's end
    error = store.state().tasks["t"].error
    assert error is not None and error.startswith("pi is older than 1.0")
    assert "crew needs pi 1.x, which needs Node 22.19 or later" in error


#: An agent that writes half a line to stdout, a line to stderr, then the rest of the first.
HALVES = (
    "printf '{\"type\": \"agent_'; sleep 0.3; echo 'a line on stderr' >&2; sleep 0.3; "
    "printf 'start\"}\\n'"
)


def test_a_line_of_stdout_and_one_of_stderr_reach_the_log_whole(tmp_path: Path, home: Home) -> None:
    write_crew(tmp_path, [{"id": "t", "prompt": "p"}], command=["sh", "-c", HALVES],
               agent={"protocol": "pi"})  # fmt: skip
    leader = Leader("run", "crew.toml", cwd=tmp_path)
    store = store_of(home, leader.run_id)
    leader.finish()

    assert sorted(log(store).splitlines()) == ["a line on stderr", '{"type": "agent_start"}']


def test_messages_pi_had_queued_are_handed_back_when_an_interrupt_clears_its_queue() -> None:
    adapter = pi()
    adapter.start(task())
    adapter.on_line(line(type="agent_start"))
    waiting, taken = message(MessageKind.FOLLOW_UP, "later"), message(MessageKind.STEER, "now")
    for each in (waiting, taken):
        adapter.deliver(each)

    clear = json.loads(adapter.interrupt().write.splitlines()[0])
    assert clear["type"] == "clear_queue"
    cleared = {"steering": [], "followUp": ["later"]}  # pi had taken the steer already
    response = line(id=clear["id"], type="response", command="clear_queue", success=True,
                    data=cleared)  # fmt: skip
    assert adapter.on_line(response).returned == [waiting]
