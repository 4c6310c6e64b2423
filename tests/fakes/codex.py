"""A stand-in for `codex app-server`, speaking its protocol as the real one does (codex 0.171.0):
JSON-RPC 2.0 lines without `"jsonrpc"`, notifications with `emittedAtMs`, server requests with
integer ids from 0.

The prompt of a turn picks a scenario: `ASKQ` asks one question with options, `ASKMANY` asks two,
`ASKSECRET` asks for a token with `isSecret` (never echoing the answer: it says its sha256),
`ELICIT <json>` is an MCP server asking the user (`mcpServer/elicitation/request`, with the JSON as
its params), `RUNCMD` asks to run a command (offering `acceptForSession` with `SESSION` in the
prompt; a command accepted so is not asked about again), `EDIT` asks to apply a file change,
`PERMS` asks for network access, `SLOW` works for 0.7 s (taking steers), `SPEND` makes five model calls 0.2 s apart
(stopping when interrupted), `FAIL` fails the turn,
`RETRY` retries twice before it succeeds. Anything else is answered at once.
Every line received is echoed on stderr
(`fake-codex got …`), which the crew log keeps; so is its command line first (`fake-codex argv …`).

Threads are kept as codex keeps them: a thread that is not `ephemeral` is a rollout file
`sessions/YYYY/MM/DD/rollout-<time>-<thread id>.jsonl` in its home (a `session_meta` line, then a
`response_item` per message), written from the first user message on. The home is
`$CODEX_HOME`, else `./.codex` (the real one uses `~/.codex`; a fake never writes to a real
home). `thread/resume` loads the rollout of `threadId` and answers like `thread/start`, with the
earlier turns and without a `thread/started` notification; a thread with no rollout is refused
(`-32600`, `no rollout found for thread id …`). A resumed thread shows it remembers: the first
turn names the earlier messages and the first prompt.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

Json = dict[str, Any]


@dataclass
class Rollout:
    """A thread's messages on disk (`path` None: an ephemeral thread, kept in memory)."""

    thread: str
    path: Path | None
    lines: list[Json] = field(default_factory=list)
    written: bool = False
    earlier: list[Json] = field(default_factory=list)  # resumed, until recalled

    @staticmethod
    def sessions() -> Path:
        return Path(os.environ.get("CODEX_HOME") or Path.cwd() / ".codex") / "sessions"

    @classmethod
    def new(cls, thread: str, ephemeral: bool) -> Rollout:
        day, moment = time.strftime("%Y/%m/%d"), time.strftime("%Y-%m-%dT%H-%M-%S")
        path = None if ephemeral else cls.sessions() / day / f"rollout-{moment}-{thread}.jsonl"
        meta = {"id": thread, "timestamp": now(), "cwd": os.getcwd(), "cli_version": "0.171.0"}
        return cls(thread, path, [{"timestamp": now(), "type": "session_meta", "payload": meta}])

    @classmethod
    def find(cls, thread: str) -> Rollout | None:
        found = sorted(cls.sessions().glob(f"*/*/*/rollout-*-{thread}.jsonl"))
        if not found:
            return None
        lines = [json.loads(line) for line in found[-1].read_text().splitlines() if line]
        rollout = cls(thread, found[-1], lines, written=True)
        rollout.earlier = rollout.messages()
        return rollout

    def messages(self) -> list[Json]:
        return [line["payload"] for line in self.lines if line["type"] == "response_item"]

    def add(self, role: str, text: str) -> None:
        kind = "input_text" if role == "user" else "output_text"
        message = {"type": "message", "role": role, "content": [{"type": kind, "text": text}]}
        with lock:
            self.lines.append({"timestamp": now(), "type": "response_item", "payload": message})
            if self.path is None or not (self.written or role == "user"):
                return  # codex writes a rollout once the first user message comes
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a") as out:
                for line in self.lines if not self.written else self.lines[-1:]:
                    out.write(json.dumps(line) + "\n")
            self.written = True

    def turns(self) -> list[Json]:
        """The thread's turns, as thread/resume returns them: one per user message."""
        turns: list[Json] = []
        for message in self.messages():
            text = message["content"][0]["text"]
            if message["role"] == "user":
                content = [{"type": "text", "text": text}]
                entry = {"type": "userMessage", "id": str(uuid.uuid4()), "content": content}
                turns.append(turn(str(uuid.uuid4()), "completed") | {"items": [entry]})
            elif turns:
                entry = {"type": "agentMessage", "id": str(uuid.uuid4()), "text": text}
                turns[-1]["items"].append(entry)
        return turns

    def recall(self) -> str | None:
        """What a resumed thread remembers, said once."""
        with lock:
            earlier, self.earlier = self.earlier, []
        prompts = [m["content"][0]["text"] for m in earlier if m["role"] == "user"]
        if not prompts:
            return None
        first = prompts[0]
        return f"resumed {self.thread}: {len(earlier)} earlier messages, the first prompt: {first}"


lock = threading.Condition()
initialized = False
thread_id = ""
rollout: Rollout | None = None
turn_id: str | None = None  # the active turn
interrupted = False
steers: list[str] = []
answers: dict[int, Json] = {}
session_approved: set[str] = set()  # commands accepted for the session: not asked again
request_ids = itertools.count()
_peeked: list[int] = []
secret_requests: set[int] = set()  # requests whose answers are secret: never echoed


def next_request_id() -> int:
    """The id the next server request will have."""
    if not _peeked:
        _peeked.append(next(request_ids))
    return _peeked[0]


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime())


def send(message: Json) -> None:
    with lock:
        sys.stdout.write(json.dumps(message) + "\n")
        sys.stdout.flush()


def log(text: str) -> None:
    """One line on stderr, in one write (print's separate newline could let stdout in between)."""
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


def notify(method: str, **params: object) -> None:
    send({"method": method, "params": params, "emittedAtMs": int(time.time() * 1000)})


def in_turn(method: str, **params: object) -> None:
    notify(method, threadId=thread_id, turnId=turn_id, **params)


def ask(method: str, **params: object) -> Json:
    """A server request; waits for the client's answer (or an interrupt)."""
    ident = _peeked.pop() if _peeked else next(request_ids)
    send(
        {
            "method": method,
            "id": ident,
            "params": {"threadId": thread_id, "turnId": turn_id, **params},
        }
    )
    with lock:
        while ident not in answers and not interrupted:
            lock.wait()
        answer = answers.pop(ident, {})
    notify("serverRequest/resolved", threadId=thread_id, requestId=ident)
    result: Json = answer.get("result", {})
    return result


def item(kind: str, ident: str, done: bool, **fields: object) -> None:
    in_turn(
        f"item/{'completed' if done else 'started'}", item={"type": kind, "id": ident, **fields}
    )


def remember(role: str, text: str) -> None:
    if rollout is not None:
        rollout.add(role, text)


#: What each model call uses, as codex reports it (`inputTokens` with the cached ones), and the
#: thread's running total.
LAST = {"inputTokens": 1000, "cachedInputTokens": 600, "outputTokens": 50, "totalTokens": 1050}
total = dict.fromkeys(LAST, 0)


def say(text: str) -> None:
    remember("assistant", text)
    ident = f"msg_{uuid.uuid4().hex[:8]}"
    item("agentMessage", ident, False, text="")
    in_turn("item/agentMessage/delta", itemId=ident, delta=text)
    item("agentMessage", ident, True, text=text)
    for key, value in LAST.items():
        total[key] += value
    usage = {"total": dict(total), "last": LAST, "modelContextWindow": 258400}
    in_turn("thread/tokenUsage/updated", tokenUsage=usage)


def question(ident: str, header: str, text: str, options: list[str] | None) -> Json:
    labels = None if options is None else [{"label": o, "description": ""} for o in options]
    return {
        "id": ident,
        "header": header,
        "question": text,
        "isOther": options is not None,
        "isSecret": False,
        "options": labels,
    }


def turn(ident: str | None, status: str = "inProgress", error: Json | None = None) -> Json:
    return {"id": ident, "items": [], "status": status, "error": error}


def run(text: str) -> None:
    """One turn, from turn/started to turn/completed."""
    global turn_id, interrupted
    notify(
        "thread/status/changed", threadId=thread_id, status={"type": "active", "activeFlags": []}
    )
    notify("turn/started", threadId=thread_id, turn=turn(turn_id))
    user = str(uuid.uuid4())
    remember("user", text)
    item("userMessage", user, False, content=[{"type": "text", "text": text}])
    item("userMessage", user, True, content=[{"type": "text", "text": text}])
    remembered = rollout.recall() if rollout is not None else None
    if remembered:
        say(remembered)
    status, error = "completed", None
    if text.startswith("ELICIT "):  # an MCP server asks: the rest of the prompt is the request
        request = json.loads(text.removeprefix("ELICIT "))
        elicited = ask("mcpServer/elicitation/request", serverName="fake-mcp", **request)
        say(f"elicited: {json.dumps(elicited)}")
    elif "ASKSECRET" in text:  # the answer is not echoed: it says only the answer's digest
        asked = [question("token", "Token", "What is the deploy token?", None) | {"isSecret": True}]
        with lock:
            secret_requests.add(next_request_id())
        answered = ask(
            "item/tool/requestUserInput",
            itemId="call_5",
            questions=asked,
            isBlocking=True,
            autoResolutionMs=None,
        )
        token = answered.get("answers", {}).get("token", {}).get("answers", [""])[0]
        say(f"got a token of sha256 {hashlib.sha256(token.encode()).hexdigest()}")
    elif "ASK" in text:  # ASKQ, ASKMANY
        db = ["Postgres (Recommended)", "SQLite"]
        asked = [question("db", "Database", "Which database should we use?", db)]
        if "ASKMANY" in text:
            asked.append(question("name", "Name", "What is the project called?", None))
        answered = ask(
            "item/tool/requestUserInput",
            itemId="call_1",
            questions=asked,
            isBlocking=True,
            autoResolutionMs=None,
        )
        say(f"answers: {json.dumps(answered)}")
    elif "RUNCMD" in text:
        command = "/bin/bash -lc 'touch created.txt'"
        item("commandExecution", "call_2", False, command=command, cwd=".", status="inProgress")
        offered = ["accept", "acceptForSession", "cancel"] if "SESSION" in text else None
        decision = (
            "accept"
            if command in session_approved
            else ask(
                "item/commandExecution/requestApproval",
                kind="command",
                itemId="call_2",
                startedAtMs=0,
                environmentId="local",
                reason="it writes outside the sandbox",
                command=command,
                cwd=".",
                availableDecisions=offered or ["accept", "cancel"],
            ).get("decision")
        )
        if decision == "acceptForSession":  # codex asks no more about it in this session
            session_approved.add(command)
        ran = decision in {"accept", "acceptForSession"}
        item(
            "commandExecution",
            "call_2",
            True,
            command=command,
            cwd=".",
            status="completed" if ran else "declined",
        )
        say("the command ran" if ran else "the command was declined")
    elif "EDIT" in text:
        changes = [
            {
                "path": "src/app.py",
                "kind": {"type": "update", "move_path": None},
                "diff": "-a\n+b\n",
            },
            {"path": "NOTES.md", "kind": {"type": "add"}, "diff": "+hello\n"},
        ]
        item("fileChange", "call_3", False, changes=changes, status="inProgress")
        decision = ask(
            "item/fileChange/requestApproval",
            itemId="call_3",
            startedAtMs=0,
            reason="it edits two files",
        ).get("decision")
        applied = decision in {"accept", "acceptForSession"}
        item(
            "fileChange",
            "call_3",
            True,
            changes=changes,
            status="completed" if applied else "declined",
        )
        say("the changes were applied" if applied else "the changes were declined")
    elif "PERMS" in text:
        granted = ask(
            "item/permissions/requestApproval",
            itemId="call_4",
            environmentId="local",
            startedAtMs=0,
            cwd=".",
            reason="it fetches a page",
            permissions={"network": {"enabled": True}, "fileSystem": None},
        )
        say(f"granted: {json.dumps(granted)}")
    elif "SLOW" in text:
        for _ in range(14):
            time.sleep(0.05)
            with lock:
                if interrupted:
                    break
                taken = list(steers)
                steers.clear()
            for extra in taken:
                steered = str(uuid.uuid4())
                remember("user", extra)
                item("userMessage", steered, False, content=[{"type": "text", "text": extra}])
                item("userMessage", steered, True, content=[{"type": "text", "text": extra}])
                say(f"took into account: {extra}")
    elif "SPEND" in text:
        for step in range(5):
            with lock:
                if interrupted:
                    break
            say(f"step {step}")
            time.sleep(0.2)
    elif "FAIL" in text:
        error = {
            "message": "mock: forced failure",
            "codexErrorInfo": "other",
            "additionalDetails": None,
            "misalignment": None,
        }
        notify("thread/status/changed", threadId=thread_id, status={"type": "systemError"})
        in_turn("error", error=error, willRetry=False)
        status = "failed"
    elif "RETRY" in text:
        for attempt, details in ((1, "401 Unauthorized"), (2, "401 Unauthorized"), (3, None)):
            info = {"responseStreamDisconnected": {"httpStatusCode": None}}
            in_turn(
                "error",
                error={
                    "message": f"Reconnecting... {attempt}/5",
                    "codexErrorInfo": info,
                    "additionalDetails": details,
                    "misalignment": None,
                },
                willRetry=True,
            )
        say(f"done: {text}")
    else:
        say(f"done: {text}")
    with lock:
        if interrupted:
            status, error = "interrupted", None
        ended, turn_id, interrupted = turn_id, None, False
        steers.clear()
    if status != "failed":
        notify("thread/status/changed", threadId=thread_id, status={"type": "idle"})
    notify("turn/completed", threadId=thread_id, turn=turn(ended, status, error))


def opened(thread: Json, params: Json) -> Json:
    """The result of thread/start and thread/resume."""
    return {
        "thread": thread,
        "model": "mock-model",
        "modelProvider": "mock",
        "cwd": os.getcwd(),
        "approvalPolicy": params.get("approvalPolicy"),
        "approvalsReviewer": "user",
        "sandbox": {"type": "workspaceWrite", "networkAccess": False},
    }


def reply(ident: object, result: Json) -> None:
    send({"id": ident, "result": result})


def refuse(ident: object, message: str) -> None:
    send({"error": {"code": -32600, "message": message}, "id": ident})


def main() -> None:
    global initialized, thread_id, turn_id, interrupted, rollout  # noqa: PLW0603  # module state is the server's
    log(f"fake-codex argv {json.dumps(sys.argv[1:])}")
    runner: threading.Thread | None = None
    for line in sys.stdin:
        try:
            message = json.loads(line)
        except ValueError as exc:
            log(f"fake-codex got {line.strip()}")
            log(f"ERROR Failed to deserialize JSONRPCMessage: {exc}")
            continue
        secret = message.get("method") is None and message.get("id") in secret_requests
        shown = json.dumps({"id": message["id"], "result": "(not echoed)"}) if secret else line
        log(f"fake-codex got {shown.strip()}")
        method, ident, params = (
            message.get("method"),
            message.get("id"),
            message.get("params") or {},
        )
        if method is None:  # an answer to one of our requests
            with lock:
                answers[ident] = message
                lock.notify_all()
        elif ident is None:  # a notification: `initialized`
            continue
        elif method == "initialize":
            if initialized:
                refuse(ident, "Already initialized")
                continue
            initialized = True
            reply(
                ident,
                {
                    "userAgent": "crew/0.171.0 (fake)",
                    "codexHome": "/nonexistent/.codex",
                    "platformFamily": "unix",
                    "platformOs": "linux",
                },
            )
        elif not initialized:
            refuse(ident, "Not initialized")
        elif method == "thread/start":
            thread_id = str(uuid.uuid4())
            rollout = Rollout.new(thread_id, params.get("ephemeral", False))
            thread = {
                "id": thread_id,
                "ephemeral": rollout.path is None,
                "path": str(rollout.path) if rollout.path else None,
                "status": {"type": "idle"},
            }
            reply(ident, opened(thread, params))
            notify("thread/started", thread=thread)
        elif method == "thread/resume":
            found = Rollout.find(str(params.get("threadId")))
            if found is None:
                refuse(ident, f"no rollout found for thread id {params.get('threadId')}")
                continue
            rollout, thread_id = found, found.thread
            thread = {
                "id": thread_id,
                "ephemeral": False,
                "path": str(found.path),
                "status": {"type": "idle"},
                "turns": found.turns(),
            }
            reply(ident, opened(thread, params))  # no thread/started: it existed already
        elif method == "turn/start":
            text = " ".join(part.get("text", "") for part in params.get("input", []))
            with lock:
                if turn_id is not None:  # a turn is active: the input steers it
                    steers.append(text)
                    reply(ident, {"turn": turn(turn_id)})
                    continue
                turn_id = str(uuid.uuid4())
                reply(ident, {"turn": turn(turn_id)})
            runner = threading.Thread(target=run, args=(text,), daemon=True)
            runner.start()
        elif method == "turn/steer":
            expected = params.get("expectedTurnId")
            with lock:
                if turn_id is None:
                    refuse(ident, "no active turn to steer")
                elif expected != turn_id:
                    refuse(ident, f"expected active turn id `{expected}` but found `{turn_id}`")
                else:
                    steers.extend(part.get("text", "") for part in params.get("input", []))
                    reply(ident, {"turnId": turn_id})
        elif method == "turn/interrupt":
            with lock:
                if params.get("turnId") == turn_id:
                    interrupted = True
                    lock.notify_all()
            reply(ident, {})
        else:
            refuse(ident, f"Invalid request: unknown variant `{method}`")
    if runner is not None:  # stdin closed: the current turn finishes first
        runner.join(timeout=10)


if __name__ == "__main__":
    main()
