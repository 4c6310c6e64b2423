"""A stand-in for `codex app-server`, speaking its protocol as the real one does (codex 0.171.0):
JSON-RPC 2.0 lines without `"jsonrpc"`, notifications with `emittedAtMs`, server requests with
integer ids from 0.

The prompt of a turn picks a scenario: `ASKQ` asks one question with options, `ASKMANY` asks two,
`RUNCMD` asks to run a command, `EDIT` asks to apply a file change, `PERMS` asks for network
access, `SLOW` works for 0.7 s (taking steers), `FAIL` fails the turn, `RETRY` retries twice
before it succeeds. Anything else is answered at once. Every line received is echoed on stderr
(`fake-codex got …`), which the crew log keeps.
"""

import itertools
import json
import sys
import threading
import time
import uuid
from typing import Any

Json = dict[str, Any]

lock = threading.Condition()
initialized = False
thread_id = ""
turn_id: str | None = None  # the active turn
interrupted = False
steers: list[str] = []
answers: dict[int, Json] = {}
request_ids = itertools.count()


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
    ident = next(request_ids)
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


def say(text: str) -> None:
    ident = f"msg_{uuid.uuid4().hex[:8]}"
    item("agentMessage", ident, False, text="")
    in_turn("item/agentMessage/delta", itemId=ident, delta=text)
    item("agentMessage", ident, True, text=text)


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
    item("userMessage", user, False, content=[{"type": "text", "text": text}])
    item("userMessage", user, True, content=[{"type": "text", "text": text}])
    status, error = "completed", None
    if "ASK" in text:  # ASKQ, ASKMANY
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
        decision = ask(
            "item/commandExecution/requestApproval",
            kind="command",
            itemId="call_2",
            startedAtMs=0,
            environmentId="local",
            reason="it writes outside the sandbox",
            command=command,
            cwd=".",
            availableDecisions=["accept", "cancel"],
        ).get("decision")
        ran = decision == "accept"
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
        applied = decision == "accept"
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
                item("userMessage", steered, False, content=[{"type": "text", "text": extra}])
                item("userMessage", steered, True, content=[{"type": "text", "text": extra}])
                say(f"took into account: {extra}")
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
        for attempt in (1, 2):
            info = {"responseStreamDisconnected": {"httpStatusCode": None}}
            in_turn(
                "error",
                error={
                    "message": f"Reconnecting... {attempt}/5",
                    "codexErrorInfo": info,
                    "additionalDetails": None,
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


def reply(ident: object, result: Json) -> None:
    send({"id": ident, "result": result})


def refuse(ident: object, message: str) -> None:
    send({"error": {"code": -32600, "message": message}, "id": ident})


def main() -> None:
    global initialized, thread_id, turn_id, interrupted  # noqa: PLW0603  # module state is the server's
    runner: threading.Thread | None = None
    for line in sys.stdin:
        log(f"fake-codex got {line.strip()}")
        try:
            message = json.loads(line)
        except ValueError as exc:
            log(f"ERROR Failed to deserialize JSONRPCMessage: {exc}")
            continue
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
            thread = {
                "id": thread_id,
                "ephemeral": params.get("ephemeral", False),
                "status": {"type": "idle"},
            }
            reply(
                ident,
                {
                    "thread": thread,
                    "model": "mock-model",
                    "modelProvider": "mock",
                    "approvalPolicy": params.get("approvalPolicy"),
                },
            )
            notify("thread/started", thread=thread)
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
