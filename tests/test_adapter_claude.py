"""The claude-code adapter end to end under `crew run`, against a fake `claude` that speaks its
stream-json protocol; and, driven line by line, the races a fake cannot time."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import SESSION
from fake_agents import FakeAgent, killed_and_resumed, line, lines, log, message, notes
from leaders import eventually

from crew import verbs
from crew.adapters.base import AgentError, Reaction, SessionStarted, Spent, TurnBegun, TurnEnd
from crew.adapters.claude_code import ClaudeCodeAdapter
from crew.adapters.wire import continuation
from crew.config import AgentConfig
from crew.models import Task
from crew.paths import Home
from crew.protocol import Contact, Report
from crew.registry import (
    Box,
    ContactType,
    EventType,
    MessageKind,
    MessageStatus,
    RunStatus,
    TaskStatus,
)
from crew.waiting import Until, wait_for_run

AGENT = FakeAgent("claude", "claude-code")
start = AGENT.start
sent = AGENT.sent
STATES = "CLAUDE_CODE_EMIT_SESSION_STATE_EVENTS"
DATABASE = "Which database should we use?"
FEATURES = "Which features do you want?"


def answers(store: Any) -> list[dict[str, Any]]:
    """The `response` of each control_response crew sent."""
    return [m["response"]["response"] for m in sent(store) if m["type"] == "control_response"]


def results(store: Any) -> list[Any]:
    """The text of each result the fake claude gave, in order."""
    found = [json.loads(each) for each in lines(store) if each.startswith("{")]
    return [r.get("result") for r in found if r.get("type") == "result"]


def user(text: str, **extra: Any) -> dict[str, Any]:
    """A user message as crew writes it."""
    return {
        "type": "user",
        "message": {"role": "user", "content": text},
        "parent_tool_use_id": None,
        "session_id": "default",
        **extra,
    }


def test_a_question_with_options_is_a_selection_answered_by_its_text(
    tmp_path: Path, home: Home
) -> None:
    leader, store = start(tmp_path, home, "ASKQ")

    (task,) = wait_for_run(store, Until.WAITING, timeout=20).tasks
    assert task.contact is not None and task.contact.type is ContactType.NEED_SELECTION
    assert task.contact.prompt == DATABASE and task.contact.options == ["Postgres", "SQLite"]
    verbs.respond(store, "t", "SQLite", session=SESSION)

    assert leader.finish() == 0
    assert sent(store)[0] == user("ASKQ")
    (answer,) = answers(store)
    assert answer["behavior"] == "allow"
    assert answer["updatedInput"]["answers"] == {DATABASE: "SQLite"}
    assert answer["updatedInput"]["questions"][0]["question"] == DATABASE  # the input, kept
    assert f'\\"{DATABASE}\\"=\\"SQLite\\"' in log(store)  # the model saw the answer
    assert store.state().tasks["t"].status is TaskStatus.COMPLETED


def test_several_questions_are_one_input_answered_by_a_json_object(
    tmp_path: Path, home: Home
) -> None:
    leader, store = start(tmp_path, home, "ASKMANY")

    (task,) = wait_for_run(store, Until.WAITING, timeout=20).tasks
    assert task.contact is not None and task.contact.type is ContactType.NEED_INPUT
    assert task.contact.prompt.splitlines()[1:] == [
        f"1. {DATABASE} [Postgres|SQLite]",
        f"2. {FEATURES} [Auth|Search|Export] (any of them)",
    ]
    body = json.dumps({DATABASE: "SQLite", FEATURES: ["Auth", "Search"]})
    verbs.respond(store, "t", body, session=SESSION)

    assert leader.finish() == 0
    (answer,) = answers(store)
    assert answer["updatedInput"]["answers"] == {DATABASE: "SQLite", FEATURES: "Auth, Search"}
    assert f'\\"{FEATURES}\\"=\\"Auth, Search\\"' in log(store)


@pytest.mark.parametrize(
    ("body", "said"),
    [
        ("yes", "Bash was allowed: touch created-by-fake.txt && echo created"),
        ("no, not today", "Bash was denied: Denied by the crew supervisor: no, not today"),
    ],
    ids=["yes", "no"],
)
def test_a_permission_request_is_a_confirmation_only_a_yes_allows(
    tmp_path: Path, home: Home, body: str, said: str
) -> None:
    leader, store = start(tmp_path, home, "RUNBASH")

    (task,) = wait_for_run(store, Until.WAITING, timeout=20).tasks
    assert task.contact is not None and task.contact.type is ContactType.NEED_CONFIRMATION
    assert task.contact.prompt == (
        "Allow Bash: fake command — touch created-by-fake.txt && echo created?"
    )
    verbs.respond(store, "t", body, session=SESSION)

    assert leader.finish() == 0
    (answer,) = answers(store)
    if body == "yes":
        assert answer == {
            "behavior": "allow",
            "updatedInput": {
                "command": "touch created-by-fake.txt && echo created",
                "description": "fake command",
            },
        }
    else:
        assert answer == {
            "behavior": "deny",
            "message": "Denied by the crew supervisor: no, not today",
        }
    assert said in log(store)


def test_a_permission_allowed_for_the_session_is_not_asked_again_and_saved_nowhere(
    tmp_path: Path, home: Home
) -> None:
    leader, store = start(tmp_path, home, "RUNBASH")

    (task,) = wait_for_run(store, Until.WAITING, timeout=20).tasks
    assert task.contact is not None and task.contact.options == ["yes", "no", "session"]
    verbs.follow_up(store, "t", "RUNBASH again", session=SESSION)
    verbs.respond(store, "t", "session", session=SESSION)

    assert leader.finish() == 0
    (answer,) = answers(store)  # the second time, the rule claude was given allowed it
    command = "touch created-by-fake.txt && echo created"
    assert answer == {
        "behavior": "allow",
        "updatedInput": {"command": command, "description": "fake command"},
        "updatedPermissions": [
            {
                "type": "addRules",
                "rules": [{"toolName": "Bash", "ruleContent": command}],
                "behavior": "allow",
                "destination": "session",  # claude suggested localSettings: kept for now only
            }
        ],
    }
    assert results(store) == [f"Bash was allowed: {command}"] * 2
    assert not (tmp_path / ".claude" / "settings.local.json").exists()


@pytest.mark.parametrize("approvals", ["allow", "deny"])
def test_approvals_allow_or_deny_answer_at_once_and_say_so(
    tmp_path: Path, home: Home, approvals: str
) -> None:
    leader, store = start(tmp_path, home, "RUNBASH", approvals=approvals)

    assert leader.finish() == 0
    (answer,) = answers(store)
    assert answer["behavior"] == approvals
    verb = "allowed" if approvals == "allow" else "denied"
    assert notes(store) == [
        f"{verb} Bash: fake command — touch created-by-fake.txt && echo created"
        f" (approvals = {approvals})"
    ]
    events = [e.type for e in store.events().records]
    assert EventType.TASK_WAITING not in events and EventType.SUPERVISOR_CONTACT not in events


def test_two_requests_are_asked_one_after_the_other(tmp_path: Path, home: Home) -> None:
    leader, store = start(tmp_path, home, "TWOBASH")

    (task,) = wait_for_run(store, Until.WAITING, timeout=20).tasks
    assert (
        task.contact is not None and task.contact.prompt == "Allow Bash: fake command — echo one?"
    )
    verbs.respond(store, "t", "yes", session=SESSION)
    asked = eventually(lambda: store.state().tasks["t"].contact)
    assert asked.prompt == "Allow Bash: fake command — echo two?"
    verbs.respond(store, "t", "no", session=SESSION)

    assert leader.finish() == 0
    assert [a["behavior"] for a in answers(store)] == ["allow", "deny"]
    assert "Bash was allowed: echo one; Bash was denied" in log(store)


def test_a_withdrawn_question_stops_the_task_waiting(tmp_path: Path, home: Home) -> None:
    leader, store = start(tmp_path, home, "WITHDRAW")
    wait_for_run(store, Until.WAITING, timeout=20)

    assert leader.finish() == 0  # nothing to answer any more: the turn ends, the task completes
    assert sent(store) == [user("WITHDRAW")]
    withdrawn = [e for e in store.events().records if e.type is EventType.SUPERVISOR_WITHDRAWN]
    assert len(withdrawn) == 1 and withdrawn[0].message is not None
    assert withdrawn[0].message.endswith(": claude withdrew it")
    assert store.state().tasks["t"].contact is None


def test_a_steer_mid_turn_joins_it(tmp_path: Path, home: Home) -> None:
    leader, store = start(tmp_path, home, "SLOW")
    eventually(lambda: sent(store))

    verbs.steer(store, "t", "also bananas", session=SESSION)

    assert leader.finish() == 0
    assert sent(store)[1] == user("also bananas", priority="next")
    assert "took into account: also bananas" in log(store)
    assert log(store).count('"type": "result"') == 1


@pytest.mark.parametrize("states", [True, False], ids=["idle-ends-it", "result-ends-it"])
def test_a_follow_up_mid_turn_is_its_own_turn_after_it(
    tmp_path: Path, home: Home, monkeypatch: pytest.MonkeyPatch, states: bool
) -> None:
    agent = {"keepOpen": "500ms", **({} if states else {"env": {STATES: "0"}})}
    leader, store = start(tmp_path, home, "PAUSE", **agent)
    eventually(lambda: sent(store))

    verbs.follow_up(store, "t", "second job", session=SESSION)

    assert leader.finish() == 0
    assert sent(store)[1] == user("second job")  # a turn of its own, not queued in claude
    output = log(store)
    assert output.index('"result_index": 0') < output.index('"content": "second job"')
    assert results(store) == ["done: work", "done: second job"]
    assert ('"state": "idle"' in output) is states


def test_a_follow_up_after_the_turn_starts_a_new_turn_while_the_agent_is_kept_open(
    tmp_path: Path, home: Home
) -> None:
    leader, store = start(tmp_path, home, "first job", keepOpen="800ms")
    eventually(lambda: '"state": "idle"' in log(store))

    verbs.follow_up(store, "t", "second job", session=SESSION)

    assert leader.finish() == 0
    assert sent(store)[1] == user("second job")  # claude was idle: no priority
    assert "done: second job" in log(store)
    assert store.state().run.status is RunStatus.COMPLETED


def test_stopping_a_task_interrupts_claude_first(tmp_path: Path, home: Home) -> None:
    leader, store = start(tmp_path, home, "SLOW", timeout="500ms")

    assert leader.finish() == 1
    assert sent(store)[-1] == {
        "type": "control_request",
        "request_id": "crew-interrupt-1",
        "request": {"subtype": "interrupt", "cancel_queued": True},
    }
    assert '"terminal_reason": "aborted_streaming"' in log(store)  # it wound down by itself
    task = store.state().tasks["t"]
    assert task.status is TaskStatus.FAILED and task.error == "timed out after 500ms of running"


def test_a_follow_up_waiting_for_its_turn_never_runs_once_the_turn_is_interrupted(
    tmp_path: Path, home: Home
) -> None:
    # Claude Code 2.1.197 ignores `cancel_queued`: what waits in its queue runs after an interrupt.
    env = {"FAKE_CLAUDE_VERSION": "2.1.197"}
    leader, store = start(tmp_path, home, "WORK", timeout="3s", env=env)
    eventually(lambda: sent(store))  # the first turn runs

    sent_up = verbs.follow_up(store, "t", "second job", session=SESSION)
    eventually(lambda: store.fold(Box.INBOX)[sent_up.message.id].status is MessageStatus.DELIVERED)

    assert leader.finish() == 1
    kinds = [(e.type, e.task_id) for e in store.events().records]
    delivered = kinds.index((EventType.MAILBOX_DELIVERED, "t"))
    assert delivered < kinds.index((EventType.TASK_FAILED, "t"))  # crew had it, mid-turn
    assert store.state().tasks["t"].error == "timed out after 3s of running"
    assert results(store) == [None]  # the interrupted turn's, and no other
    assert "second job" not in log(store)  # never written to claude


def test_cancel_stops_the_agent(tmp_path: Path, home: Home) -> None:
    leader, store = start(tmp_path, home, "SLOW")
    eventually(lambda: sent(store))

    verbs.cancel(store, session=SESSION)

    assert leader.finish() == 1
    assert store.state().tasks["t"].status is TaskStatus.CANCELLED


def test_not_being_logged_in_fails_the_task_with_claudes_reason(tmp_path: Path, home: Home) -> None:
    leader, store = start(tmp_path, home, "NOAUTH")

    assert leader.finish() == 1
    task = store.state().tasks["t"]  # claude exited 1 after the turn: its reason is kept
    assert task.status is TaskStatus.FAILED
    assert (
        task.error
        == "claude: not logged in (authentication_failed): Not logged in · Please run /login"
    )


# ---------------------------------------------------------------------- line by line


def adapter(**config: Any) -> ClaudeCodeAdapter:
    """An adapter whose first turn runs, with session state events."""
    claude = ClaudeCodeAdapter(AgentConfig(command=["claude"], protocol="claude-code", **config))
    claude.start(Task(id="t", agent="w", title="t", prompt="go", status=TaskStatus.RUNNING))
    claude.on_line(line(type="system", subtype="session_state_changed", state="running"))
    return claude


def result(reason: str = "completed", **fields: Any) -> str:
    return line(type="result", subtype="success", terminal_reason=reason, **fields)


IDLE = line(type="system", subtype="session_state_changed", state="idle")


def ask(request_id: str, tool: str, tool_input: dict[str, Any]) -> str:
    request = {"subtype": "can_use_tool", "tool_name": tool, "input": tool_input}
    return line(type="control_request", request_id=request_id, request=request)


def test_an_idle_before_the_result_for_a_newer_message_does_not_end_the_turn() -> None:
    claude = adapter()
    assert claude.on_line(result(is_error=False)).signals == []  # `idle` will tell
    steer = json.loads(claude.deliver(message(MessageKind.STEER, "more")).write)
    assert steer["priority"] == "next"

    assert claude.on_line(IDLE).signals == []  # the idle of the turn before: "more" is due
    claude.on_line(result(is_error=False))
    assert claude.on_line(IDLE).signals == [TurnEnd(None)]
    assert claude.on_line(IDLE).signals == []  # once


def test_follow_ups_during_a_turn_are_held_and_each_sent_as_a_turn_once_it_is_over() -> None:
    claude = adapter()
    assert claude.deliver(message(MessageKind.FOLLOW_UP, "more")).write == b""
    assert claude.deliver(message(MessageKind.NUDGE, "status?")).write == b""
    claude.on_line(result(is_error=True, result="boom"))

    first = claude.on_line(IDLE)  # the failed turn is overtaken: an error, not the end
    assert first.signals == [AgentError("claude: boom"), TurnBegun()]  # a turn crew did not start
    assert json.loads(first.write)["message"]["content"] == "more"
    assert "priority" not in json.loads(first.write)
    claude.on_line(result(is_error=False))
    second = claude.on_line(IDLE)
    assert (second.signals, json.loads(second.write)["message"]["content"]) == (
        [TurnBegun()],
        "status?",
    )
    claude.on_line(result(is_error=False, result="all done"))
    assert claude.on_line(IDLE) == Reaction(signals=[TurnEnd(None, "all done")])


def test_an_interrupt_drops_the_follow_ups_held_for_after_the_turn() -> None:
    claude = adapter()
    held = message(MessageKind.FOLLOW_UP, "more")
    claude.deliver(held)

    assert claude.interrupt().returned == [held]  # the leader's again: claude never got it
    claude.on_line(result("aborted_streaming", is_error=True))
    assert claude.on_line(IDLE) == Reaction(signals=[TurnEnd("aborted")])


def test_a_turn_fails_on_its_terminal_reason_not_only_is_error() -> None:
    claude = adapter()
    claude.on_line(result("max_turns", is_error=False, result="Reached the maximum turns"))
    assert claude.on_line(IDLE).signals == [TurnEnd("Reached the maximum turns")]

    claude.deliver(message(MessageKind.FOLLOW_UP, "again"))
    claude.on_line(result("aborted_tools", is_error=False, result=None))
    assert claude.on_line(IDLE).signals == [TurnEnd("aborted")]


def test_a_result_says_the_turn_is_over_before_idle_does_unless_claude_queued_more() -> None:
    # The leader may read a result and the `idle` after it apart: a turn that is over is not
    # stopped at a limit (Spent.settled), one claude goes on to by itself is.
    claude = adapter()
    usage = {"input_tokens": 10, "output_tokens": 5}
    (last,) = claude.on_line(result(usage=usage, queued_turn_count=0)).signals
    (more,) = claude.on_line(result(usage=usage, queued_turn_count=1)).signals
    assert isinstance(last, Spent) and last.settled
    assert isinstance(more, Spent) and not more.settled

    claude.on_line(result(usage=usage, queued_turn_count=0))
    init = line(type="system", subtype="init", session_id="s1")
    assert claude.on_line(init).signals == [TurnBegun(), SessionStarted("s1")]  # no idle between
    claude.on_line(IDLE)
    assert claude.on_line(init).signals == []  # a turn crew started: nothing to say


def test_without_state_events_a_result_ends_the_turn_unless_turns_are_queued() -> None:
    claude = ClaudeCodeAdapter(AgentConfig(command=["claude"], protocol="claude-code"))
    claude.start(Task(id="t", agent="w", title="t", prompt="go", status=TaskStatus.RUNNING))

    assert claude.on_line(result(queued_turn_count=1)).signals == []
    assert claude.on_line(result(queued_turn_count=0)).signals == [TurnEnd(None)]


def test_a_withdrawn_open_question_gives_way_to_the_next() -> None:
    claude = adapter()
    first = claude.on_line(ask("r1", "Bash", {"command": "ls", "description": "List files"}))
    assert first.signals == [Contact(ContactType.NEED_CONFIRMATION, "Allow Bash: List files — ls?")]
    assert claude.on_line(ask("r2", "Write", {"file_path": "a.txt"})).signals == []

    nxt = claude.on_line(line(type="control_cancel_request", request_id="r1"))
    assert nxt.signals == [
        Contact(ContactType.NEED_CONFIRMATION, 'Allow Write: {"file_path": "a.txt"}?')
    ]
    answer = json.loads(claude.deliver(message(MessageKind.RESPOND, "y")).write)
    assert answer["response"]["request_id"] == "r2"


def test_claudes_own_requests_crew_does_not_know_are_refused_and_its_refusals_reported() -> None:
    claude = adapter()
    request = {"subtype": "elicitation", "mcp_server_name": "x", "message": "?"}
    refusal = json.loads(
        claude.on_line(line(type="control_request", request_id="e1", request=request)).write
    )
    assert refusal == {
        "type": "control_response",
        "response": {
            "subtype": "error",
            "request_id": "e1",
            "error": "crew does not handle elicitation requests",
        },
    }
    error = {"subtype": "error", "request_id": "crew-interrupt-1", "error": "no"}
    assert claude.on_line(line(type="control_response", response=error)).signals == [
        AgentError("claude refused crew-interrupt-1: no")
    ]
    assert claude.on_line("not json").signals == []
    assert claude.on_line('["a list"]').signals == []


def test_one_text_answers_every_question_and_a_multi_select_one_is_an_input() -> None:
    claude = adapter()
    questions = [
        {"question": "Q?", "options": [{"label": "A"}, {"label": "B"}], "multiSelect": True}
    ]
    (contact,) = claude.on_line(ask("r1", "AskUserQuestion", {"questions": questions})).signals
    assert contact == Contact(ContactType.NEED_INPUT, "Q? [A|B] (any of them)")
    answer = json.loads(claude.deliver(message(MessageKind.RESPOND, "A, B")).write)
    assert answer["response"]["response"]["updatedInput"]["answers"] == {"Q?": "A, B"}


# ---------------------------------------------------------------------- sessions


def transcript(tmp_path: Path, session: str) -> Path:
    """Where the fake claude (run in tmp_path, its config folder ./.claude) keeps a session."""
    project = "".join(c if c.isalnum() else "-" for c in str(tmp_path))
    return tmp_path / ".claude" / "projects" / project / f"{session}.jsonl"


def test_claudes_session_is_recorded_and_a_resumed_run_continues_it(
    tmp_path: Path, home: Home
) -> None:
    leader, store = start(tmp_path, home, "ASKQ")
    wait_for_run(store, Until.WAITING, timeout=20)
    session = store.state().tasks["t"].session  # system/init came before the question
    assert session is not None and transcript(tmp_path, session).is_file()

    resumed = killed_and_resumed(leader, store, tmp_path)
    asked = eventually(lambda: (t := store.state().tasks["t"]).attempt == 2 and t.contact)
    assert asked.prompt == DATABASE  # the quoted task asks again, in the same conversation
    verbs.respond(store, "t", "SQLite", session=SESSION)

    assert resumed.finish() == 0
    first, second = AGENT.launches(store)
    assert not any(arg.startswith("--resume") for arg in first.argv)
    assert second.argv[-1] == f"--resume={session}"
    assert second.sent[0] == user(continuation(store.state().tasks["t"]))
    assert f"resumed {session}: " in log(store)
    assert "earlier messages, the first prompt: ASKQ" in log(store)
    task = store.state().tasks["t"]
    assert task.status is TaskStatus.COMPLETED and task.attempt == 2 and task.session == session


def test_a_session_claude_no_longer_has_fails_the_attempt_with_claudes_reason(
    tmp_path: Path, home: Home
) -> None:
    leader, store = start(tmp_path, home, "ASKQ")
    wait_for_run(store, Until.WAITING, timeout=20)
    session = store.state().tasks["t"].session
    assert session is not None
    transcript(tmp_path, session).unlink()  # e.g. claude's cleanup removed it meanwhile

    resumed = killed_and_resumed(leader, store, tmp_path)

    assert resumed.finish() == 1
    task = store.state().tasks["t"]
    assert task.status is TaskStatus.FAILED and task.attempt == 2
    assert task.error == f"No conversation found with session ID: {session}"


def test_with_no_session_persistence_claude_saves_nothing_and_no_session_is_recorded(
    tmp_path: Path, home: Home
) -> None:
    leader, store = start(tmp_path, home, "first job", args=("--no-session-persistence",))

    assert leader.finish() == 0
    assert '"subtype": "init"' in log(store)  # claude named a session all the same
    assert store.state().tasks["t"].session is None
    assert not (tmp_path / ".claude").exists()


def claude_task(session: str | None = None) -> Task:
    return Task(
        id="t", agent="w", title="t", prompt="go", status=TaskStatus.RUNNING, session=session
    )


def init(session: str) -> str:
    return line(type="system", subtype="init", session_id=session, cwd="/w", tools=[])


def test_resume_is_asked_for_only_when_an_earlier_attempt_recorded_a_session() -> None:
    claude = ClaudeCodeAdapter(AgentConfig(command=["claude"], protocol="claude-code"))
    argv = ["claude", "-p", "--input-format", "stream-json"]

    assert claude.command(argv, claude_task()) == argv
    assert claude.command(argv, claude_task("-x")) == [*argv, "--resume=-x"]  # bound to it


def test_the_session_of_system_init_is_reported_once_and_again_when_it_changes() -> None:
    claude = adapter()

    assert claude.on_line(init("s-1")).signals == [SessionStarted("s-1")]
    assert claude.on_line(init("s-1")).signals == []  # every turn names it
    assert claude.on_line(init("s-2")).signals == [SessionStarted("s-2")]  # --fork-session


def test_a_resumed_attempt_continues_and_reports_no_session_it_already_knows() -> None:
    claude = ClaudeCodeAdapter(AgentConfig(command=["claude"], protocol="claude-code"))
    resumed = claude_task("s-1")

    first = json.loads(claude.start(resumed).write)

    assert first == user(continuation(resumed))
    assert claude.on_line(init("s-1")).signals == []


def test_without_session_persistence_no_session_is_reported() -> None:
    command = ["claude", "-p", "--no-session-persistence"]
    claude = ClaudeCodeAdapter(AgentConfig(command=command, protocol="claude-code"))
    claude.start(claude_task())

    assert claude.on_line(init("s-1")).signals == []


def test_a_refused_key_fails_the_turn_at_once_not_after_claudes_retries(
    tmp_path: Path, home: Home
) -> None:
    leader, store = start(tmp_path, home, "BADKEY")

    assert leader.finish() == 1
    task = store.state().tasks["t"]
    assert task.status is TaskStatus.FAILED
    assert task.error == (
        "claude: the API refused the call: authentication_failed (HTTP 401); retrying cannot help"
    )
    (note,) = notes(store)  # one retry, then claude is stopped
    assert (
        note == "claude: retrying in 0.6s (attempt 1 of 10) after authentication_failed (HTTP 401)"
    )
    assert sent(store)[-1]["request"] == {"subtype": "interrupt", "cancel_queued": True}


def test_tool_uses_claude_denied_without_asking_are_a_note(tmp_path: Path, home: Home) -> None:
    leader, store = start(tmp_path, home, "DENIED")

    assert leader.finish() == 0
    (note,) = notes(store)
    assert note.startswith("claude denied 1 tool use(s) without asking crew") and note.endswith(
        ": Bash: make"
    )


def test_without_a_permission_prompt_tool_the_note_says_why() -> None:
    claude = ClaudeCodeAdapter(AgentConfig(command=["claude", "-p"], protocol="claude-code"))
    denial = {"tool_name": "Bash", "tool_use_id": "toolu_1", "tool_input": {"command": "make"}}

    reaction = claude.on_line(json.dumps({"type": "result", "permission_denials": [denial]}))

    assert reaction.signals[0] == Report(
        ContactType.NOTE,
        "claude denied 1 tool use(s) without asking crew (its command has no "
        "`--permission-prompt-tool stdio`, so it asks no one): Bash: make",
    )


def test_a_question_with_options_accepts_an_answer_of_ones_own(tmp_path: Path, home: Home) -> None:
    leader, store = start(tmp_path, home, "ASKQ")

    (task,) = wait_for_run(store, Until.WAITING, timeout=20).tasks
    assert task.contact is not None and task.contact.other  # claude always offers "Other"
    verbs.respond(store, "t", "DuckDB", session=SESSION)

    assert leader.finish() == 0
    (answer,) = answers(store)
    assert answer["updatedInput"]["answers"] == {DATABASE: "DuckDB"}
