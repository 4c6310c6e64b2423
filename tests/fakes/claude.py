"""A stand-in for `claude -p --input-format stream-json --output-format stream-json --verbose
--permission-prompt-tool stdio`, speaking its protocol as the real one does (Claude Code 2.1.332).

A keyword in the prompt picks the scenario: `ASKQ` asks one AskUserQuestion question with options,
`ASKMANY` two (the second multi-select), `RUNBASH` asks to run a Bash command, `TWOBASH` asks for
two at once (each with a suggestion to allow it from now on, which an answer's `updatedPermissions`
can take up: a tool use an allow rule matches is not asked about, and a rule for anywhere but the
`session` is saved to `.claude/settings.local.json`), `WITHDRAW` asks a question and withdraws it,
`SLOW` works until something is sent to it (at most 5 s: `next` messages join the turn, `later`
ones wait for their own), `WORK` works until interrupted (at most 10 s), `PAUSE` for 1 s, `NOAUTH`
fails like claude without credentials, `BADKEY` retries a refused key (401) until interrupted,
`DENIED` reports a tool use it denied without asking (as claude does without a permission prompt
tool), `LATEIDLE` says `idle` 0.5 s after each turn's result from then on (so that the two are read
apart). Anything else is answered at once.
Session state events are emitted only with CLAUDE_CODE_EMIT_SESSION_STATE_EVENTS=1. With
FAKE_CLAUDE_VERSION=2.1.197 it behaves as that version: an interrupt's `cancel_queued` is ignored,
and the messages queued for turns of their own run after the interrupted one all the same. Every
line received is echoed on stderr (`fake-claude got …`), which the crew log keeps; a line that is
not JSON kills it (exit 1). At the end of stdin it finishes its turns, then exits 0 (1 when the
last result was an error). Its command line is echoed first (`fake-claude argv …`).

Sessions are kept as claude keeps them: a transcript `projects/<cwd, each character other than a
letter or digit a dash>/<session id>.jsonl` in its config folder, a line per message (the user's
as it is taken up, then the assistant's and the tool results), unless `--no-session-persistence`.
The config folder is `$CLAUDE_CONFIG_DIR`, else `./.claude` (the real one uses `~/.claude`; a fake
never writes to a real home). `--resume=<id>` (or `--resume <id>`) goes on with that transcript
under the same session id; a resumed conversation shows it remembers in its first turn (it names
the earlier messages and the first prompt). An id without a transcript is refused as claude
refuses it: an `error_during_execution` result naming it, the same on stderr, exit 1, before any
input is read.
"""

from __future__ import annotations

import json
import os
import re
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SESSION = str(uuid.uuid4())  # a resumed session keeps its id
STATES = os.environ.get("CLAUDE_CODE_EMIT_SESSION_STATE_EVENTS") == "1"
#: The version to behave as: 2.1.197 ignores `cancel_queued`, so what waits in its queue runs
#: after an interrupt all the same.
VERSION = os.environ.get("FAKE_CLAUDE_VERSION", "2.1.332")
ASKQ = {
    "question": "Which database should we use?",
    "header": "Database",
    "options": [
        {"label": "Postgres", "description": "Relational"},
        {"label": "SQLite", "description": "Embedded"},
    ],
    "multiSelect": False,
}
ASKFEATURES = {
    "question": "Which features do you want?",
    "header": "Features",
    "options": [
        {"label": "Auth", "description": "Login"},
        {"label": "Search", "description": "Full text"},
        {"label": "Export", "description": "CSV"},
    ],
    "multiSelect": True,
}

lock = threading.Lock()
changed = threading.Condition(lock)
out = threading.Lock()
saving = threading.Lock()
queue: list[tuple[str, str]] = []  # (text, priority) of user messages waiting for a turn
answers: dict[str, dict[str, Any]] = {}  # request id -> the `response` of our control_response
asking: set[str] = set()
rules: list[dict[str, Any]] = []  # allow rules: a tool use one matches is not asked about


@dataclass
class Agent:
    """What the reader of stdin and the thread running turns share (under `lock`)."""

    busy: bool = False  # a turn runs, or is about to
    aborted: bool = False  # interrupted: the running turn winds down
    results: int = 0
    last_error: bool = False
    cost: float = 0.0  # the process's `total_cost_usd`
    late_idle: bool = False  # LATEIDLE: `idle` comes 0.5 s after each last result


agent = Agent()
MODEL = "claude-opus-5-5"
#: What each turn costs.
TURN_COST = 0.01


@dataclass
class Transcript:
    """The session's messages on disk (`file` None: not saved)."""

    file: Path | None
    last: str | None = None  # the uuid of the last line: the next one's parentUuid
    earlier: list[dict[str, Any]] = field(default_factory=list)  # resumed, until recalled

    @classmethod
    def of(cls, session: str, saved: bool) -> Transcript:
        config = Path(os.environ.get("CLAUDE_CONFIG_DIR") or Path.cwd() / ".claude")
        project = config / "projects" / re.sub(r"[^A-Za-z0-9]", "-", os.getcwd())
        return cls(project / f"{session}.jsonl" if saved else None)

    def load(self) -> None:
        assert self.file is not None
        lines = [json.loads(line) for line in self.file.read_text().splitlines() if line]
        self.earlier = [line["message"] for line in lines]
        self.last = lines[-1]["uuid"] if lines else None

    def add(self, message: dict[str, Any]) -> None:
        if self.file is None:
            return
        line = {
            "parentUuid": self.last,
            "isSidechain": False,
            "type": message["role"],
            "message": message,
            "uuid": str(uuid.uuid4()),
            "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime()),
            "cwd": os.getcwd(),
            "sessionId": SESSION,
            "version": "2.1.332",
        }
        with saving:
            self.file.parent.mkdir(parents=True, exist_ok=True)
            with self.file.open("a") as out:
                out.write(json.dumps(line, ensure_ascii=False) + "\n")
            self.last = line["uuid"]

    def recall(self) -> str | None:
        """What a resumed conversation remembers, said once."""
        earlier, self.earlier = self.earlier, []
        prompts = [m["content"] for m in earlier if isinstance(m["content"], str)]
        if not prompts:
            return None
        return f"resumed {SESSION}: {len(earlier)} earlier messages, the first prompt: {prompts[0]}"


transcript = Transcript(None)


def emit(event: dict[str, Any]) -> None:
    with out:
        sys.stdout.write(json.dumps(event, ensure_ascii=False) + "\n")
        sys.stdout.flush()


def state(name: str) -> None:
    if STATES:
        emit(
            {
                "type": "system",
                "subtype": "session_state_changed",
                "state": name,
                "uuid": str(uuid.uuid4()),
                "session_id": SESSION,
            }
        )


def assistant(content: list[dict[str, Any]], **extra: Any) -> None:
    message = {
        "id": f"msg_{uuid.uuid4().hex[:8]}",
        "type": "message",
        "role": "assistant",
        "model": "claude-opus-5-5",
        "content": content,
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 1},
        "context_management": None,
    }
    transcript.add(message)
    emit(
        {
            "type": "assistant",
            "message": message,
            "parent_tool_use_id": None,
            "session_id": SESSION,
            "uuid": str(uuid.uuid4()),
            **extra,
        }
    )


def say(text: str) -> None:
    assistant([{"type": "text", "text": text}])


def tool_result(tool_use_id: str, text: str, is_error: bool) -> None:
    block = {"tool_use_id": tool_use_id, "type": "tool_result", "content": text}
    message = {"role": "user", "content": [{**block, "is_error": is_error}]}
    transcript.add(message)
    emit(
        {
            "type": "user",
            "message": message,
            "parent_tool_use_id": None,
            "session_id": SESSION,
            "uuid": str(uuid.uuid4()),
        }
    )


def ask(
    tools: list[tuple[str, dict[str, Any]]], withdraw_first: bool
) -> list[dict[str, Any] | None]:
    """Ask for permission to use these tools at once; their answers (None: withdrawn). A tool
    use a rule allows is not asked about."""
    allowed = [allow(t, i) for t, i in tools]
    if all(allowed):
        return allowed
    requests = []
    assistant(
        [
            {"type": "tool_use", "id": f"toolu_{n}", "name": t, "input": i}
            for n, (t, i) in enumerate(tools)
        ]
    )
    state("requires_action")
    for n, (tool, tool_input) in enumerate(tools):
        request: dict[str, Any] = {
            "subtype": "can_use_tool",
            "tool_name": tool,
            "display_name": tool,
            "input": tool_input,
            "tool_use_id": f"toolu_{n}",
        }
        if tool == "AskUserQuestion":
            request["requires_user_interaction"] = True
        else:
            request["description"] = tool_input.get("description")
            rule = {"toolName": tool, "ruleContent": tool_input.get("command")}
            request["permission_suggestions"] = [  # as claude suggests: saved in a settings file
                {
                    "type": "addRules",
                    "rules": [rule],
                    "behavior": "allow",
                    "destination": "localSettings",
                }
            ]
        request_id = str(uuid.uuid4())
        requests.append(request_id)
        with lock:
            asking.add(request_id)
        emit({"type": "control_request", "request_id": request_id, "request": request})
    if withdraw_first:  # as when another client answered it
        time.sleep(0.3)
        withdraw(requests[0])
    replies = [wait_for(request_id) for request_id in requests]
    for reply in replies:
        remember(reply)
    state("running")
    return replies


def allow(tool: str, tool_input: dict[str, Any]) -> dict[str, Any] | None:
    """The answer a permission rule gives this tool use (None: none does)."""
    rule = {"toolName": tool, "ruleContent": tool_input.get("command")}
    return {"behavior": "allow", "updatedInput": tool_input} if rule in rules else None


def remember(reply: dict[str, Any] | None) -> None:
    """Keep the allow rules an answer adds: for the session, or saved in a settings file."""
    for update in (reply or {}).get("updatedPermissions") or []:
        if update["type"] == "addRules" and update["behavior"] == "allow":
            rules.extend(update["rules"])
            if update["destination"] != "session":  # as claude saves them: beyond the session
                settings = Path(".claude") / "settings.local.json"
                settings.parent.mkdir(exist_ok=True)
                settings.write_text(json.dumps({"permissions": {"allow": update["rules"]}}))


def wait_for(request_id: str) -> dict[str, Any] | None:
    with changed:
        while request_id not in answers and request_id in asking:
            changed.wait()
        asking.discard(request_id)
        return answers.pop(request_id, None)


def withdraw(request_id: str) -> None:
    with changed:
        asking.discard(request_id)
        changed.notify_all()
    emit({"type": "control_cancel_request", "request_id": request_id})


def answered(reply: dict[str, Any]) -> str:
    """The tool_result claude gives the model for an AskUserQuestion answer."""
    given = ", ".join(
        f'"{q}"="{",".join(a) if isinstance(a, list) else a}"'
        for q, a in reply["updatedInput"]["answers"].items()
    )
    return f"Your questions have been answered: {given}. You can now continue with these answers in mind."


def use_tools(tools: list[tuple[str, dict[str, Any]]], withdraw_first: bool = False) -> str:
    """Ask for the tools, report what became of each; the turn's final text."""
    said = []
    for n, reply in enumerate(ask(tools, withdraw_first)):
        tool = tools[n][0]
        if reply is None:
            said.append(f"{tool} was withdrawn")
            continue
        if reply["behavior"] != "allow":
            tool_result(f"toolu_{n}", reply["message"], is_error=True)
            said.append(f"{tool} was denied: {reply['message']}")
        elif tool == "AskUserQuestion":
            text = answered(reply)
            tool_result(f"toolu_{n}", text, is_error=False)
            said.append(f"fake saw: {text}")
        else:
            tool_result(f"toolu_{n}", "created", is_error=False)
            said.append(f"{tool} was allowed: {reply['updatedInput']['command']}")
    return "; ".join(said)


def bash(command: str) -> tuple[str, dict[str, Any]]:
    return "Bash", {"command": command, "description": "fake command"}


def bad_key() -> str:
    """A key the API refuses: claude retries (10 times, minutes in all) until interrupted."""
    for attempt in range(1, 11):
        emit(
            {
                "type": "system",
                "subtype": "api_retry",
                "attempt": attempt,
                "max_retries": 10,
                "retry_delay_ms": 600,
                "error_status": 401,
                "error": "authentication_failed",
                "session_id": SESSION,
                "uuid": str(uuid.uuid4()),
            }
        )
        for _ in range(60):  # the delay, unless interrupted
            time.sleep(0.01)
            with lock:
                if agent.aborted:
                    return ""
    return "done: BADKEY"


def slow() -> str:
    """Work until a message comes: `next` ones join this turn, `later` ones wait for theirs."""
    for _ in range(100):
        time.sleep(0.05)
        with lock:
            if agent.aborted:
                break
            taken = [text for text, priority in queue if priority == "next"]
            queue[:] = [(text, priority) for text, priority in queue if priority != "next"]
            waiting = bool(queue)
        for text in taken:
            transcript.add({"role": "user", "content": text})
            say(f"took into account: {text}")
        if taken or waiting:
            break
    return "done: SLOW"


def work(seconds: float) -> str:
    """Work that long unless interrupted: `next` messages join the turn, `later` ones wait."""
    for _ in range(int(seconds / 0.05)):
        time.sleep(0.05)
        with lock:
            if agent.aborted:
                break
            taken = [text for text, priority in queue if priority == "next"]
            queue[:] = [(text, priority) for text, priority in queue if priority != "next"]
        for text in taken:
            transcript.add({"role": "user", "content": text})
            say(f"took into account: {text}")
    return "done: work"


def turn(text: str) -> None:
    """One turn: system/init, the work, one result."""
    emit(
        {
            "type": "system",
            "subtype": "init",
            "cwd": os.getcwd(),
            "session_id": SESSION,
            "tools": ["Task", "AskUserQuestion", "Bash", "Edit", "Read", "Write"],
            "mcp_servers": [],
            "model": "claude-opus-5-5",
            "permissionMode": "default",
            "apiKeySource": "none",
            "claude_code_version": "2.1.332",
            "uuid": str(uuid.uuid4()),
        }
    )
    emit({"type": "system", "subtype": "status", "status": "requesting", "session_id": SESSION})
    transcript.add({"role": "user", "content": text})
    agent.late_idle = agent.late_idle or "LATEIDLE" in text
    remembered = transcript.recall()
    if remembered:
        say(remembered)
    result: dict[str, Any] = {"subtype": "success", "is_error": False, "stop_reason": "end_turn"}
    if "NOAUTH" in text:
        text = "Not logged in · Please run /login"
        assistant(
            [{"type": "text", "text": text}],
            error="authentication_failed",
            is_api_error_message=True,
        )
        result.update(
            is_error=True, result=text, stop_reason="stop_sequence", terminal_reason="api_error"
        )
    else:
        if "ASKQ" in text:
            reply = use_tools([("AskUserQuestion", {"questions": [ASKQ]})])
        elif "ASKMANY" in text:
            reply = use_tools([("AskUserQuestion", {"questions": [ASKQ, ASKFEATURES]})])
        elif "RUNBASH" in text:
            reply = use_tools([bash("touch created-by-fake.txt && echo created")])
        elif "TWOBASH" in text:
            reply = use_tools([bash("echo one"), bash("echo two")])
        elif "WITHDRAW" in text:
            reply = use_tools([("AskUserQuestion", {"questions": [ASKQ]})], withdraw_first=True)
        elif "SLOW" in text:
            reply = slow()
        elif "WORK" in text:
            reply = work(10)
        elif "PAUSE" in text:
            reply = work(1)
        elif "BADKEY" in text:
            reply = bad_key()
        elif "DENIED" in text:  # as claude without a permission prompt tool: it asks no one
            reply = "I could not run Bash: permission denied."
            result["permission_denials"] = [
                {"tool_name": "Bash", "tool_use_id": "toolu_9", "tool_input": {"command": "make"}}
            ]
        else:
            reply = f"done: {text}"
        with lock:
            was_aborted, agent.aborted = agent.aborted, False
        if was_aborted:
            say("chunk0 ")
            interrupted = {"type": "text", "text": "[Request interrupted by user]"}
            emit(
                {
                    "type": "user",
                    "message": {"role": "user", "content": [interrupted]},
                    "parent_tool_use_id": None,
                    "session_id": SESSION,
                    "uuid": str(uuid.uuid4()),
                }
            )
            result.update(
                subtype="error_during_execution",
                is_error=True,
                result=None,
                stop_reason=None,
                terminal_reason="aborted_streaming",
                errors=["[ede_diagnostic] result_type=user last_content_type=n/a stop_reason=null"],
            )
        else:
            say(reply)
            result.update(result=reply, terminal_reason="completed")
    with lock:
        queued = len(queue)
        index, agent.results = agent.results, agent.results + 1
        agent.last_error = result["is_error"]
        agent.cost = round(agent.cost + TURN_COST, 6)
    emit(
        {
            "type": "result",
            **result,
            "duration_ms": 12,
            "duration_api_ms": 10,
            "num_turns": 1,
            "session_id": SESSION,
            # As claude 2.1.332: `usage` is the turn's (input without the cached tokens), the
            # cost the process's; `model_usage_since_last_result` is the turn's, per model.
            "total_cost_usd": agent.cost,
            "usage": {
                "input_tokens": 400,
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 600,
                "output_tokens": 50,
            },
            "modelUsage": {MODEL: {"inputTokens": 400 * agent.results, "costUSD": agent.cost}},
            "model_usage_since_last_result": {MODEL: {"inputTokens": 400, "costUSD": TURN_COST}},
            "permission_denials": result.pop("permission_denials", []),
            "queued_turn_count": queued,
            "result_index": index,
            "uuid": str(uuid.uuid4()),
        }
    )


def run(text: str) -> None:
    """Turns while there is work; `idle` once the queue is empty."""
    work: str | None = text
    while True:
        state("running")
        while work is not None:
            turn(work)
            with lock:
                work = queue.pop(0)[0] if queue else None
        if agent.late_idle:
            time.sleep(0.5)
        state("idle")
        with lock:
            if not queue:
                agent.busy = False
                return
            work = queue.pop(0)[0]


def control(request_id: str, request: dict[str, Any]) -> None:
    if request.get("subtype") != "interrupt":
        error = f"Unsupported control request subtype: {request.get('subtype')}"
        response = {"subtype": "error", "request_id": request_id, "error": error}
        emit(
            {
                "type": "control_response",
                "response": {**response, "error_code": "unsupported_request"},
            }
        )
        return
    with changed:
        if agent.busy:
            agent.aborted = True
        if request.get("cancel_queued") and VERSION != "2.1.197":
            queue.clear()
        pending = list(asking)
    emit(
        {
            "type": "control_response",
            "response": {
                "subtype": "success",
                "request_id": request_id,
                "response": {"still_queued": []},
            },
        }
    )
    for pending_id in pending:
        withdraw(pending_id)


def resumed(argv: list[str]) -> str | None:
    """The session `--resume` names, if any."""
    for n, arg in enumerate(argv):
        if arg.startswith("--resume="):
            return arg.removeprefix("--resume=")
        if arg == "--resume" and n + 1 < len(argv):
            return argv[n + 1]
    return None


def refuse_resume(session: str) -> None:
    """No transcript for that id: claude says so in a result, then exits 1."""
    error = f"No conversation found with session ID: {session}"
    emit(
        {
            "type": "result",
            "subtype": "error_during_execution",
            "duration_ms": 0,
            "duration_api_ms": 0,
            "is_error": True,
            "num_turns": 0,
            "stop_reason": None,
            "session_id": session,
            "total_cost_usd": 0,
            "usage": {"input_tokens": 0, "output_tokens": 0},
            "modelUsage": {},
            "permission_denials": [],
            "errors": [error],
            "uuid": str(uuid.uuid4()),
        }
    )
    print(error, file=sys.stderr, flush=True)
    sys.exit(1)


def main() -> None:
    global SESSION, transcript  # noqa: PLW0603  # the session is the process's: set once, at start
    argv = sys.argv[1:]
    print(f"fake-claude argv {json.dumps(argv)}", file=sys.stderr, flush=True)
    SESSION = resumed(argv) or SESSION
    transcript = Transcript.of(SESSION, "--no-session-persistence" not in argv)
    if resumed(argv) is not None:
        if transcript.file is None or not transcript.file.is_file():
            refuse_resume(SESSION)
        transcript.load()
    runner: threading.Thread | None = None
    for line in sys.stdin:
        try:
            message = json.loads(line)
        except ValueError:
            print(
                f"Error parsing streaming input line (type=unknown, {len(line)} chars): SyntaxError",
                file=sys.stderr,
                flush=True,
            )
            os._exit(1)
        print(
            f"fake-claude got {json.dumps(message, ensure_ascii=False)}",
            file=sys.stderr,
            flush=True,
        )
        kind = message.get("type")
        if kind == "user":
            text = message["message"]["content"]
            with lock:
                if agent.busy:
                    queue.append((text, message.get("priority", "next")))
                    continue
                agent.busy = True
            runner = threading.Thread(target=run, args=(text,), daemon=True)
            runner.start()
        elif kind == "control_response":
            response = message["response"]
            with changed:
                if response["request_id"] in asking:
                    answers[response["request_id"]] = response["response"]
                    changed.notify_all()
        elif kind == "control_request":
            control(message["request_id"], message["request"])
    print("fake-claude: stdin closed", file=sys.stderr, flush=True)
    with changed:
        asking.clear()  # what is still asked goes unanswered
        changed.notify_all()
    if runner is not None:  # finish the turns, queued ones too
        runner.join(timeout=10)
    sys.exit(1 if agent.last_error else 0)


if __name__ == "__main__":
    main()
