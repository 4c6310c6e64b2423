"""The codex adapter end to end under `crew run`, against a fake `codex app-server` that speaks its
JSON-RPC protocol; and, driven line by line, the races a fake cannot time."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from conftest import SESSION
from fake_agents import FakeAgent, killed_and_resumed, line, lines, log, message, notes
from leaders import Leader, eventually

import crew
from crew import verbs
from crew.adapters.base import AgentError, SessionStarted, TurnEnd
from crew.adapters.codex import CodexAdapter
from crew.adapters.wire import SESSION_OPTIONS, continuation
from crew.config import AgentConfig
from crew.models import Task
from crew.paths import Home
from crew.protocol import Contact, Withdrawn
from crew.registry import (
    Box,
    ContactType,
    EventType,
    MessageKind,
    RunStatus,
    TaskStatus,
)
from crew.store import secret_answers
from crew.waiting import Until, wait_for_run

AGENT = FakeAgent("codex", "codex")
start = AGENT.start
sent = AGENT.sent


def said(store: Any, method: str) -> list[dict[str, Any]]:
    """The params of the notifications (or server requests) the fake codex sent, in order."""
    messages = [json.loads(line) for line in lines(store) if line.startswith("{")]
    return [m["params"] for m in messages if m.get("method") == method]


def answer(store: Any) -> dict[str, Any]:
    """Our answer to the fake's (only) server request."""
    (reply,) = [m for m in sent(store) if "result" in m]
    return reply


def test_the_handshake_comes_in_order_before_the_first_turn(tmp_path: Path, home: Home) -> None:
    leader, store = start(tmp_path, home, "hello")

    assert leader.finish() == 0
    (thread,) = said(store, "thread/started")
    assert sent(store) == [
        {
            "id": 1,
            "method": "initialize",
            "params": {
                "clientInfo": {"name": "crew", "title": "crew", "version": crew.__version__},
                "capabilities": {"experimentalApi": True},
            },
        },
        {"method": "initialized"},
        {
            "id": 2,
            "method": "thread/start",
            "params": {"ephemeral": False},  # codex's own approval policy: crew sets none
        },
        {
            "id": 3,
            "method": "turn/start",
            "params": {
                "threadId": thread["thread"]["id"],
                "input": [{"type": "text", "text": "hello"}],
            },
        },
    ]
    assert "done: hello" in log(store)
    assert store.state().tasks["t"].status is TaskStatus.COMPLETED


def test_a_question_with_options_is_a_selection_answered_by_its_id(
    tmp_path: Path, home: Home
) -> None:
    leader, store = start(tmp_path, home, "ASKQ")

    (task,) = wait_for_run(store, Until.WAITING, timeout=20).tasks
    assert task.contact is not None and task.contact.type is ContactType.NEED_SELECTION
    assert task.contact.prompt == "Database: Which database should we use?"
    assert task.contact.options == ["Postgres (Recommended)", "SQLite"]
    verbs.respond(store, "t", "SQLite", session=SESSION)

    assert leader.finish() == 0
    assert answer(store) == {"id": 0, "result": {"answers": {"db": {"answers": ["SQLite"]}}}}
    assert store.state().tasks["t"].status is TaskStatus.COMPLETED


def test_several_questions_are_one_input_answered_by_a_json_object(
    tmp_path: Path, home: Home
) -> None:
    leader, store = start(tmp_path, home, "ASKMANY")

    (task,) = wait_for_run(store, Until.WAITING, timeout=20).tasks
    assert task.contact is not None and task.contact.type is ContactType.NEED_INPUT
    assert "db: Database: Which database should we use? [Postgres (Recommended)|SQLite]" in (
        task.contact.prompt
    )
    assert "name: Name: What is the project called?" in task.contact.prompt
    verbs.respond(
        store, "t", '{"db": "SQLite", "What is the project called?": "crew"}', session=SESSION
    )

    assert leader.finish() == 0
    assert answer(store)["result"] == {
        "answers": {"db": {"answers": ["SQLite"]}, "name": {"answers": ["crew"]}}
    }


@pytest.mark.parametrize(
    ("reply", "decision", "outcome"),
    [
        ("yes", "accept", "the command ran"),
        ("no, not now", "decline", "the command was declined"),
        ("always", "accept", "the command ran"),  # codex offers no more than this once
    ],
)
def test_a_command_approval_is_a_confirmation_accepted_only_by_a_yes(
    tmp_path: Path, home: Home, reply: str, decision: str, outcome: str
) -> None:
    leader, store = start(tmp_path, home, "RUNCMD")

    (task,) = wait_for_run(store, Until.WAITING, timeout=20).tasks
    assert task.contact is not None and task.contact.type is ContactType.NEED_CONFIRMATION
    assert task.contact.prompt == (
        "Run `/bin/bash -lc 'touch created.txt'`? (it writes outside the sandbox)"
    )
    assert task.contact.options == []  # its availableDecisions have no acceptForSession
    verbs.respond(store, "t", reply, session=SESSION)

    assert leader.finish() == 0
    assert answer(store) == {"id": 0, "result": {"decision": decision}}
    assert outcome in log(store)
    assert store.state().tasks["t"].status is TaskStatus.COMPLETED


def messages_said(store: Any) -> list[str]:
    """The text of each agent message the fake codex completed."""
    items = [p["item"] for p in said(store, "item/completed")]
    return [i["text"] for i in items if i["type"] == "agentMessage"]


def test_a_command_accepted_for_the_session_is_not_asked_about_again(
    tmp_path: Path, home: Home
) -> None:
    leader, store = start(tmp_path, home, "RUNCMD SESSION", approvalPolicy="on-request")

    (task,) = wait_for_run(store, Until.WAITING, timeout=20).tasks
    assert task.contact is not None and task.contact.type is ContactType.NEED_CONFIRMATION
    assert task.contact.options == ["yes", "no", "session"]
    verbs.follow_up(store, "t", "RUNCMD SESSION again", session=SESSION)
    verbs.respond(store, "t", "session", session=SESSION)

    assert leader.finish() == 0
    assert answer(store) == {"id": 0, "result": {"decision": "acceptForSession"}}
    assert len(said(store, "item/commandExecution/requestApproval")) == 1
    assert messages_said(store).count("the command ran") == 2
    # The approval policy crew.toml sets is passed as it is, once, and never changed.
    policies = [(m["method"], m["params"]) for m in sent(store) if "approvalPolicy" in str(m)]
    assert policies == [("thread/start", {"approvalPolicy": "on-request", "ephemeral": False})]


@pytest.mark.parametrize(("reply", "scope"), [("yes", "turn"), ("session", "session")])
def test_permissions_granted_for_the_session_say_so(
    tmp_path: Path, home: Home, reply: str, scope: str
) -> None:
    leader, store = start(tmp_path, home, "PERMS")

    (task,) = wait_for_run(store, Until.WAITING, timeout=20).tasks
    assert task.contact is not None and task.contact.options == ["yes", "no", "session"]
    verbs.respond(store, "t", reply, session=SESSION)

    assert leader.finish() == 0
    assert answer(store)["result"] == {
        "permissions": {"network": {"enabled": True}, "fileSystem": None},
        "scope": scope,
    }


def test_with_approvals_deny_a_command_is_declined_without_asking(
    tmp_path: Path, home: Home
) -> None:
    leader, store = start(tmp_path, home, "RUNCMD", approvals="deny")

    assert leader.finish() == 0
    assert answer(store) == {"id": 0, "result": {"decision": "decline"}}
    assert [m for m in store.messages(Box.OUTBOX) if m.kind is MessageKind.CONTACT] == []
    assert notes(store) == [
        "codex: declined (approvals = deny): Run `/bin/bash -lc 'touch created.txt'`? "
        "(it writes outside the sandbox)"
    ]


def test_with_approvals_allow_permissions_are_granted_as_asked(tmp_path: Path, home: Home) -> None:
    leader, store = start(tmp_path, home, "PERMS", approvals="allow")

    assert leader.finish() == 0
    assert answer(store)["result"] == {
        "permissions": {"network": {"enabled": True}, "fileSystem": None},
        "scope": "turn",
    }
    assert notes(store) == [
        "codex: accepted (approvals = allow): Grant network access? (it fetches a page)"
    ]


def test_a_file_change_approval_names_the_files_of_its_item(tmp_path: Path, home: Home) -> None:
    leader, store = start(tmp_path, home, "EDIT")

    (task,) = wait_for_run(store, Until.WAITING, timeout=20).tasks
    assert task.contact is not None and task.contact.type is ContactType.NEED_CONFIRMATION
    assert task.contact.prompt == (
        "Apply changes to src/app.py (update), NOTES.md (add)? (it edits two files)"
    )
    verbs.respond(store, "t", "yes", session=SESSION)

    assert leader.finish() == 0
    assert answer(store) == {"id": 0, "result": {"decision": "accept"}}
    assert "the changes were applied" in log(store)


def elicit(**request: Any) -> str:
    """A prompt that makes the fake codex's MCP server ask the user this."""
    return "ELICIT " + json.dumps(request)


PORT = {"type": "integer", "title": "Port", "description": "where to listen", "minimum": 1}


def test_an_mcp_form_of_one_field_asks_for_it_and_again_when_the_answer_does_not_fit(
    tmp_path: Path, home: Home
) -> None:
    schema = {"type": "object", "properties": {"port": PORT}, "required": ["port"]}
    leader, store = start(
        tmp_path, home, elicit(mode="form", message="Configure the server", requestedSchema=schema)
    )

    (task,) = wait_for_run(store, Until.WAITING, timeout=20).tasks
    assert task.contact is not None and task.contact.type is ContactType.NEED_INPUT
    assert task.contact.prompt == (
        "fake-mcp (MCP) asks: Configure the server — port (integer, at least 1, required):"
        " where to listen (or decline, cancel)"
    )
    verbs.respond(store, "t", "eighty", session=SESSION)
    again = eventually(lambda: wait_for_run(store, Until.WAITING, timeout=20).tasks[0].contact)
    assert again.id != task.contact.id
    assert again.prompt.endswith("(port takes a number, not 'eighty'; answer again)")
    verbs.respond(store, "t", "8080", session=SESSION)

    assert leader.finish() == 0
    assert answer(store) == {"id": 0, "result": {"action": "accept", "content": {"port": 8080}}}
    assert 'elicited: {\\"action\\": \\"accept\\"' in log(store)


def test_an_mcp_form_of_several_fields_is_answered_by_a_json_object(
    tmp_path: Path, home: Home
) -> None:
    schema = {
        "type": "object",
        "properties": {
            "port": PORT,
            "env": {"type": "string", "oneOf": [{"const": "p", "title": "Production"}]},
            "tls": {"type": "boolean", "title": "TLS"},
            "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b", "c"]}},
        },
        "required": ["port"],
    }
    leader, store = start(
        tmp_path, home, elicit(mode="form", message="Set up", requestedSchema=schema)
    )

    (task,) = wait_for_run(store, Until.WAITING, timeout=20).tasks
    assert task.contact is not None and task.contact.type is ContactType.NEED_INPUT
    assert task.contact.prompt == (
        "fake-mcp (MCP) asks: Set up\n"
        "Answer with a JSON object of field → value, or decline or cancel:\n"
        "- port (integer, at least 1, required): where to listen\n"
        "- env (one of Production)\n"
        "- tls (boolean): TLS\n"
        "- tags (any of a|b|c, as a JSON list)"
    )
    verbs.respond(
        store, "t", '{"port": "443", "env": "Production", "TLS": "yes", "tags": ["a", "c"]}',
        session=SESSION,
    )  # fmt: skip

    assert leader.finish() == 0
    content = {"port": 443, "env": "p", "tls": True, "tags": ["a", "c"]}
    assert answer(store)["result"] == {"action": "accept", "content": content}


def test_an_mcp_choice_is_a_selection_that_can_be_declined(tmp_path: Path, home: Home) -> None:
    env = {"type": "string", "enum": ["dev", "prod"], "enumNames": ["Development", "Production"]}
    schema = {"type": "object", "properties": {"env": env}}
    leader, store = start(
        tmp_path, home, elicit(mode="form", message="Where?", requestedSchema=schema)
    )

    (task,) = wait_for_run(store, Until.WAITING, timeout=20).tasks
    assert task.contact is not None and task.contact.type is ContactType.NEED_SELECTION
    assert task.contact.options == ["Development", "Production", "decline"]
    verbs.respond(store, "t", "decline", session=SESSION)

    assert leader.finish() == 0
    assert answer(store)["result"] == {"action": "decline"}


@pytest.mark.parametrize(("reply", "action"), [("yes", "accept"), ("no", "decline")])
def test_an_mcp_url_is_a_confirmation_naming_it(
    tmp_path: Path, home: Home, reply: str, action: str
) -> None:
    request = {
        "mode": "url",
        "message": "Sign in to the tracker.",
        "url": "https://tracker.example/login?state=1",
        "elicitationId": "el_1",
    }
    leader, store = start(tmp_path, home, elicit(**request))

    (task,) = wait_for_run(store, Until.WAITING, timeout=20).tasks
    assert task.contact is not None and task.contact.type is ContactType.NEED_CONFIRMATION
    assert task.contact.prompt == (
        "fake-mcp (MCP) asks: Sign in to the tracker. Open https://tracker.example/login?state=1"
        " — yes once you have (or decline, cancel)"
    )
    verbs.respond(store, "t", reply, session=SESSION)

    assert leader.finish() == 0
    expected = {"action": "accept", "content": {}} if action == "accept" else {"action": action}
    assert answer(store)["result"] == expected


def test_an_mcp_device_verification_is_declined_at_once_and_noted(
    tmp_path: Path, home: Home
) -> None:
    request = {
        "mode": "openai/userVerification",
        "title": "Verify",
        "description": "Prove it is you",
        "challenge": "abc",
    }
    leader, store = start(tmp_path, home, elicit(**request))

    assert leader.finish() == 0
    assert answer(store)["result"] == {"action": "decline"}
    assert notes(store) == ["codex: declined an MCP request crew cannot answer: Prove it is you"]


TOKEN = "hunter2-deploy-token"


def files_holding(root: Path, text: str) -> list[Path]:
    """Every file under `root` whose bytes hold `text`."""
    return [p for p in root.rglob("*") if p.is_file() and text.encode() in p.read_bytes()]


def test_a_secret_answer_reaches_codex_and_no_file_of_the_run(tmp_path: Path, home: Home) -> None:
    leader, store = start(tmp_path, home, "ASKSECRET")

    (task,) = wait_for_run(store, Until.WAITING, timeout=20).tasks
    assert task.contact is not None and task.contact.secret is True
    sent_answer = verbs.respond(store, "t", TOKEN, session=SESSION)
    assert sent_answer.message.body == secret_answers.REDACTED

    assert leader.finish() == 0
    assert f"got a token of sha256 {hashlib.sha256(TOKEN.encode()).hexdigest()}" in log(store)
    assert files_holding(tmp_path, TOKEN) == []  # the run's files, and the secret's own: gone
    responded = [e for e in store.events().records if e.type is EventType.TASK_RESPONDED]
    assert secret_answers.REDACTED[:6] in str(responded[0].message)


@pytest.mark.parametrize("lost", [False, True], ids=["kept", "lost-by-a-reboot"])
def test_a_secret_answer_given_while_the_leader_is_down_reaches_the_resumed_agent(
    tmp_path: Path, home: Home, lost: bool
) -> None:
    leader, store = start(tmp_path, home, "ASKSECRET")
    wait_for_run(store, Until.WAITING, timeout=20)
    leader.process.kill()
    leader.finish()

    verbs.respond(store, "t", TOKEN, session=SESSION)  # accepted with no leader to deliver it
    assert files_holding(home.root, TOKEN) == []
    (kept,) = files_holding(tmp_path / "secrets", TOKEN)
    if lost:  # as a restart of the machine empties the tmpfs
        kept.unlink()
    resumed = Leader("resume", leader.run_id, cwd=tmp_path)
    if lost:  # the answer is rejected, saying why, and the question is asked again
        asked = eventually(lambda: store.state().tasks["t"].contact, timeout=20)
        assert asked.secret is True
        verbs.respond(store, "t", TOKEN, session=SESSION)

    assert resumed.finish() == 0
    assert f"got a token of sha256 {hashlib.sha256(TOKEN.encode()).hexdigest()}" in log(store)
    assert files_holding(tmp_path, TOKEN) == []
    reasons = [m.reason for m in store.messages(Box.INBOX) if m.reason]
    assert reasons == ([secret_answers.LOST] if lost else [])


def test_a_steer_mid_turn_steers_the_active_turn(tmp_path: Path, home: Home) -> None:
    leader, store = start(tmp_path, home, "SLOW")
    (started,) = eventually(lambda: said(store, "turn/started"))

    verbs.steer(store, "t", "also bananas", session=SESSION)

    assert leader.finish() == 0
    steer = next(m for m in sent(store) if m.get("method") == "turn/steer")
    assert steer["params"] == {
        "threadId": started["threadId"],
        "input": [{"type": "text", "text": "also bananas"}],
        "expectedTurnId": started["turn"]["id"],
    }
    assert "took into account: also bananas" in log(store)
    assert store.state().tasks["t"].status is TaskStatus.COMPLETED


def test_a_follow_up_during_a_turn_is_a_new_turn_once_it_completes(
    tmp_path: Path, home: Home
) -> None:
    leader, store = start(tmp_path, home, "SLOW")
    eventually(lambda: said(store, "turn/started"))

    verbs.follow_up(store, "t", "second job", session=SESSION)

    assert leader.finish() == 0
    logged = lines(store)
    first_end = next(i for i, line in enumerate(logged) if '"turn/completed"' in line)
    follow = next(
        i for i, line in enumerate(logged) if "fake-codex got" in line and "second job" in line
    )
    assert first_end < follow
    assert json.loads(logged[follow].split(" ", 2)[2])["method"] == "turn/start"
    assert "took into account: second job" not in log(store)
    assert "done: second job" in log(store)
    assert len(said(store, "turn/completed")) == 2
    assert store.state().tasks["t"].status is TaskStatus.COMPLETED


def test_a_follow_up_after_the_turn_starts_a_new_turn_while_the_agent_is_kept_open(
    tmp_path: Path, home: Home
) -> None:
    leader, store = start(tmp_path, home, "first job", keepOpen="800ms")
    eventually(lambda: "done: first job" in log(store))

    verbs.follow_up(store, "t", "second job", session=SESSION)

    assert leader.finish() == 0
    follow = sent(store)[-1]
    assert follow["method"] == "turn/start"
    assert follow["params"]["input"] == [{"type": "text", "text": "second job"}]
    assert "done: second job" in log(store)
    assert store.state().run.status is RunStatus.COMPLETED


def test_stopping_a_task_interrupts_its_turn_first(tmp_path: Path, home: Home) -> None:
    leader, store = start(tmp_path, home, "SLOW", timeout="500ms")

    assert leader.finish() == 1
    (started,) = said(store, "turn/started")
    assert sent(store)[-1] == {
        "id": 4,
        "method": "turn/interrupt",
        "params": {"threadId": started["threadId"], "turnId": started["turn"]["id"]},
    }
    assert said(store, "turn/completed")[0]["turn"]["status"] == "interrupted"  # wound down
    task = store.state().tasks["t"]
    assert task.status is TaskStatus.FAILED and task.error == "timed out after 500ms of running"


def test_a_failed_turn_fails_the_task_with_its_error(tmp_path: Path, home: Home) -> None:
    leader, store = start(tmp_path, home, "FAIL")

    assert leader.finish() == 1
    task = store.state().tasks["t"]
    assert task.status is TaskStatus.FAILED and task.error == "mock: forced failure"


def test_retry_notices_are_a_note_and_do_not_fail_the_task(tmp_path: Path, home: Home) -> None:
    leader, store = start(tmp_path, home, "RETRY")

    assert leader.finish() == 0
    assert store.state().tasks["t"].status is TaskStatus.COMPLETED
    assert notes(store) == [  # again only when the cause changes
        "codex: retrying: Reconnecting... 1/5 (401 Unauthorized)",
        "codex: retrying: Reconnecting... 3/5",
    ]


# ---------------------------------------------------------------------- line by line


def adapter() -> tuple[CodexAdapter, str]:
    """An adapter past the handshake whose first turn is active; and that turn's id."""
    codex = CodexAdapter(AgentConfig(command=["codex", "app-server"], protocol="codex"))
    codex.start(Task(id="t", agent="w", title="t", prompt="go", status=TaskStatus.RUNNING))
    codex.on_line(line(id=1, result={}))
    codex.on_line(line(id=2, result={"thread": {"id": "th"}}))
    codex.on_line(line(id=3, result={"turn": {"id": "t1", "status": "inProgress"}}))
    return codex, "t1"


def completed(turn: str, status: str = "completed", **fields: Any) -> str:
    return line(
        method="turn/completed",
        params={"threadId": "th", "turn": {"id": turn, "status": status, **fields}},
    )


def test_a_steer_that_meets_the_end_of_the_turn_becomes_a_new_turn() -> None:
    codex, turn = adapter()
    steer = json.loads(codex.deliver(message(MessageKind.STEER, "also bananas")).write)
    assert steer["method"] == "turn/steer" and steer["params"]["expectedTurnId"] == turn

    assert codex.on_line(completed(turn)).signals == []  # not idle while the steer is unanswered
    retried = codex.on_line(
        line(id=steer["id"], error={"code": -32600, "message": "no active turn to steer"})
    )
    assert json.loads(retried.write) == {
        "id": steer["id"] + 1,
        "method": "turn/start",
        "params": {"threadId": "th", "input": [{"type": "text", "text": "also bananas"}]},
    }
    assert retried.signals == []
    codex.on_line(line(id=steer["id"] + 1, result={"turn": {"id": "t2", "status": "inProgress"}}))
    assert codex.on_line(completed("t2")).signals == [TurnEnd(None)]


def test_a_failed_turn_that_a_follow_up_overtakes_is_an_error_not_the_end() -> None:
    codex, turn = adapter()
    assert codex.deliver(message(MessageKind.FOLLOW_UP, "more")).write == b""

    reaction = codex.on_line(completed(turn, "failed", error={"message": "boom"}))

    assert reaction.signals == [AgentError("codex: boom")]
    assert json.loads(reaction.write)["params"]["input"] == [{"type": "text", "text": "more"}]


def test_a_turn_that_fails_after_its_retries_names_the_cause() -> None:
    codex, turn = adapter()
    error = {"message": "stream disconnected", "additionalDetails": "Name does not resolve"}
    codex.on_line(line(method="error", params={"error": error, "willRetry": False}))

    reaction = codex.on_line(completed(turn, "failed", error=error))

    assert reaction.signals == [TurnEnd("stream disconnected (Name does not resolve)")]


def test_withdrawn_questions_give_way_and_a_late_answer_is_a_message() -> None:
    codex, turn = adapter()
    ask = {"threadId": "th", "turnId": turn, "itemId": "i", "command": "make", "cwd": "."}
    first = codex.on_line(line(method="item/commandExecution/requestApproval", id=0, params=ask))
    second = codex.on_line(line(method="item/commandExecution/requestApproval", id=1, params=ask))
    assert first.signals == [Contact(ContactType.NEED_CONFIRMATION, "Run `make`?", SESSION_OPTIONS)]
    assert second.signals == []  # asked once the first is settled

    resolved = {"threadId": "th", "requestId": 0}
    assert codex.on_line(line(method="serverRequest/resolved", params=resolved)).signals == [
        Contact(ContactType.NEED_CONFIRMATION, "Run `make`?", SESSION_OPTIONS)  # the second
    ]
    resolved = {"threadId": "th", "requestId": 1}
    assert codex.on_line(line(method="serverRequest/resolved", params=resolved)).signals == [
        Withdrawn("codex no longer needs the answer")
    ]
    late = json.loads(codex.deliver(message(MessageKind.RESPOND, "yes")).write)
    assert late["method"] == "turn/steer" and late["params"]["expectedTurnId"] == turn


# ---------------------------------------------------------------------- sessions


def rollouts(tmp_path: Path) -> list[Path]:
    """The threads the fake codex (run in tmp_path, its home ./.codex) has kept."""
    return sorted((tmp_path / ".codex" / "sessions").glob("*/*/*/rollout-*.jsonl"))


def resumed_attempt(store: Any) -> Any:
    """The second attempt's question, once it asks it."""
    return eventually(lambda: (t := store.state().tasks["t"]).attempt == 2 and t.contact)


def test_codexs_thread_is_recorded_and_a_resumed_run_continues_it(
    tmp_path: Path, home: Home
) -> None:
    leader, store = start(tmp_path, home, "ASKQ")
    wait_for_run(store, Until.WAITING, timeout=20)
    thread = store.state().tasks["t"].session
    (kept,) = rollouts(tmp_path)
    assert thread is not None and kept.name.endswith(f"-{thread}.jsonl")

    resumed = killed_and_resumed(leader, store, tmp_path)
    assert resumed_attempt(store).prompt == "Database: Which database should we use?"
    verbs.respond(store, "t", "SQLite", session=SESSION)

    assert resumed.finish() == 0
    first, second = AGENT.launches(store)
    assert first.argv == second.argv == []  # codex resumes in its protocol
    assert first.sent[2]["method"] == "thread/start"
    assert second.sent[2] == {
        "id": 2,
        "method": "thread/resume",
        "params": {"threadId": thread},
    }
    task = store.state().tasks["t"]
    assert second.sent[3]["method"] == "turn/start"
    assert second.sent[3]["params"] == {
        "threadId": thread,
        "input": [{"type": "text", "text": continuation(task)}],
    }
    assert f"resumed {thread}: " in log(store)
    assert "earlier messages, the first prompt: ASKQ" in log(store)
    assert len(said(store, "thread/started")) == 1  # resuming announces no new thread
    assert task.status is TaskStatus.COMPLETED and task.attempt == 2 and task.session == thread


def test_a_thread_codex_no_longer_has_is_replaced_by_a_new_one_given_the_task(
    tmp_path: Path, home: Home
) -> None:
    leader, store = start(tmp_path, home, "ASKQ")
    wait_for_run(store, Until.WAITING, timeout=20)
    lost = store.state().tasks["t"].session
    for kept in rollouts(tmp_path):
        kept.unlink()  # e.g. archived, or CODEX_HOME changed

    resumed = killed_and_resumed(leader, store, tmp_path)
    resumed_attempt(store)
    verbs.respond(store, "t", "SQLite", session=SESSION)

    assert resumed.finish() == 0
    second = AGENT.launches(store)[1]
    assert [m.get("method") for m in second.sent[2:5]] == [
        "thread/resume",
        "thread/start",
        "turn/start",
    ]
    assert second.sent[4]["params"]["input"] == [{"type": "text", "text": "ASKQ"}]
    errors = [e.message for e in store.events().records if e.type is EventType.AGENT_ERROR]
    assert errors == [
        f"t: codex: cannot resume thread {lost} (no rollout found for thread id {lost}):"
        " starting a new one"
    ]
    task = store.state().tasks["t"]
    assert task.status is TaskStatus.COMPLETED
    assert task.session is not None and task.session != lost
    assert [p.name.endswith(f"-{task.session}.jsonl") for p in rollouts(tmp_path)] == [True]


def codex_task(session: str | None = None) -> Task:
    return Task(
        id="t", agent="w", title="t", prompt="go", status=TaskStatus.RUNNING, session=session
    )


def opened(codex: CodexAdapter, task: Task) -> dict[str, Any]:
    """Start the adapter and answer `initialize`: the request that opens the thread."""
    codex.start(task)
    _, request = codex.on_line(line(id=1, result={})).write.splitlines()
    return json.loads(request)


def test_the_command_line_is_left_alone_codex_resumes_in_its_protocol() -> None:
    codex = CodexAdapter(AgentConfig(command=["codex", "app-server"], protocol="codex"))
    assert codex.command(["codex", "app-server"], codex_task("th")) == ["codex", "app-server"]


def test_a_new_thread_is_kept_and_its_id_reported_as_the_session() -> None:
    codex = CodexAdapter(AgentConfig(command=["codex", "app-server"], protocol="codex"))
    request = opened(codex, codex_task())
    assert request["method"] == "thread/start" and request["params"]["ephemeral"] is False

    reaction = codex.on_line(line(id=2, result={"thread": {"id": "th", "ephemeral": False}}))

    assert reaction.signals == [SessionStarted("th")]
    assert json.loads(reaction.write)["params"]["input"] == [{"type": "text", "text": "go"}]


def test_a_resumed_attempt_resumes_the_thread_and_continues_in_it() -> None:
    codex = CodexAdapter(
        AgentConfig(command=["codex", "app-server"], protocol="codex", approvalPolicy="untrusted")
    )
    resumed = codex_task("th")
    request = opened(codex, resumed)
    assert request == {
        "id": 2,
        "method": "thread/resume",
        "params": {"threadId": "th", "approvalPolicy": "untrusted"},  # as crew.toml sets it
    }

    reaction = codex.on_line(line(id=2, result={"thread": {"id": "th", "turns": []}}))

    assert reaction.signals == []  # the leader knows this session
    first = json.loads(reaction.write)
    assert first["params"] == {
        "threadId": "th",
        "input": [{"type": "text", "text": continuation(resumed)}],
    }


def test_a_refused_resume_starts_a_new_thread_with_the_task_prompt() -> None:
    codex = CodexAdapter(AgentConfig(command=["codex", "app-server"], protocol="codex"))
    opened(codex, codex_task("gone"))

    error = {"code": -32600, "message": "no rollout found for thread id gone"}
    refused = codex.on_line(line(id=2, error=error))
    assert refused.signals == [
        AgentError(
            "codex: cannot resume thread gone (no rollout found for thread id gone):"
            " starting a new one"
        )
    ]
    assert json.loads(refused.write)["method"] == "thread/start"
    started = codex.on_line(line(id=3, result={"thread": {"id": "th2"}}))
    assert started.signals == [SessionStarted("th2")]
    assert json.loads(started.write)["params"]["input"] == [{"type": "text", "text": "go"}]


def test_a_question_that_takes_other_answers_accepts_one_of_your_own(
    tmp_path: Path, home: Home
) -> None:
    leader, store = start(tmp_path, home, "ASKQ")

    (task,) = wait_for_run(store, Until.WAITING, timeout=20).tasks
    assert task.contact is not None and task.contact.other  # codex's isOther
    verbs.respond(store, "t", "DuckDB, embedded", session=SESSION)

    assert leader.finish() == 0
    assert answer(store)["result"] == {"answers": {"db": {"answers": ["DuckDB, embedded"]}}}


def test_an_interrupt_hands_back_the_follow_ups_held_for_after_the_turn() -> None:
    codex, turn = adapter()
    held = message(MessageKind.FOLLOW_UP, "more")
    assert codex.deliver(held).write == b""  # kept for a turn of its own

    stop = codex.interrupt()

    assert stop.returned == [held]  # the leader's again: codex never got it
    assert json.loads(stop.write)["method"] == "turn/interrupt"
    codex.on_line(completed(turn, "interrupted"))
    assert b"more" not in codex.on_line(line(id=4, result={})).write
