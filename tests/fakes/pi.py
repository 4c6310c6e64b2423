"""A stand-in for `pi --mode rpc`, speaking its protocol as the real one does (pi 1.6.0).

The prompt picks a scenario: `ASK:select|confirm|input|editor` asks through an extension dialog
(from inside a tool call, as an extension tool does), `ASKT:…` likewise with a 0.5 s timeout, `SLOW` works for a while (taking steers and
follow-ups mid-run), `FAIL` ends the turn with a model error, `FLAKY` meets a 503 that pi's
auto-retry gets past and `DOWN` one it never does, `NOKEY` refuses the prompt like pi
without credentials, `SPEND` makes five model calls 0.2 s apart (stopping when aborted), and a prompt starting with `/` is an extension command pi handles without
starting a run; mid-run, a message starting with `REFUSE` is refused the first time, as pi refuses
one while it compacts. Anything else answers at once. Every command received is echoed on stderr
(`fake-pi got …`), which the crew log keeps, and so is the command line (`fake-pi argv …`).

Sessions are kept as pi keeps them: a JSONL file (a `session` header, then one `message` entry
per message), written only once the first assistant message exists, in
`<agent dir>/sessions/--<cwd>--/` unless `--session-dir` says otherwise; `--session <file>` loads
that file (or starts a new session there when it does not exist), `--no-session` keeps the
session in memory. `get_state` names the file. The agent dir is `$PI_CODING_AGENT_DIR`, else
`./.pi/agent` (the real pi uses `~/.pi/agent`; a fake never writes to a real home). A resumed
conversation shows it remembers: its first reply names the earlier messages and the first prompt.
"""

import json
import os
import sys
import threading
import time
import uuid
from pathlib import Path

lock = threading.Lock()
queue: list[str] = []
behaviours: dict[str, str] = {}  # how each queued text was sent: steer or followUp
busy = False
aborted = False
#: Speak as pi 0.74 does (FAKE_PI_OLD=1): what npm installs under Node 20.
OLD = os.environ.get("FAKE_PI_OLD") == "1"
refused: set[str] = set()  # messages refused once (mid-run), accepted when sent again
dialog_answers: dict[str, dict] = {}
dialog_waiting = threading.Condition(lock)


class Session:
    """pi's session file: written once an assistant message exists, appended to after that."""

    def __init__(self, argv: list[str]) -> None:
        self.file: Path | None = None
        self.id = str(uuid.uuid4())
        self.entries: list[dict] = []
        self.flushed = False
        self.earlier: list[dict] = []  # the messages of a loaded session, until first recalled
        if "--no-session" in argv:
            return
        if "--session" in argv:
            self.file = Path(argv[argv.index("--session") + 1]).resolve()
            if self.file.exists():
                self.load()
                return
        else:
            folder = self.folder(argv)
            folder.mkdir(parents=True, exist_ok=True)
            stamp = time.strftime("%Y-%m-%dT%H-%M-%S-000Z", time.gmtime())
            self.file = folder / f"{stamp}_{self.id}.jsonl"
        self.entries = [
            {
                "type": "session",
                "version": 3,
                "id": self.id,
                "timestamp": now(),
                "cwd": os.getcwd(),
            }
        ]

    @staticmethod
    def folder(argv: list[str]) -> Path:
        if "--session-dir" in argv:
            return Path(argv[argv.index("--session-dir") + 1])
        agent = Path(os.environ.get("PI_CODING_AGENT_DIR") or Path.cwd() / ".pi" / "agent")
        safe = "--" + os.getcwd().lstrip("/").replace("/", "-").replace(":", "-") + "--"
        return agent / "sessions" / safe

    def load(self) -> None:
        assert self.file is not None
        self.entries = [json.loads(line) for line in self.file.read_text().splitlines() if line]
        self.id = next(e["id"] for e in self.entries if e["type"] == "session")
        self.flushed = True
        self.earlier = self.messages()

    def messages(self) -> list[dict]:
        return [e["message"] for e in self.entries if e["type"] == "message"]

    def record(self, message: dict) -> None:
        with lock:
            parent = self.entries[-1].get("id") if len(self.entries) > 1 else None
            entry = {
                "type": "message",
                "id": uuid.uuid4().hex[:8],
                "parentId": parent,
                "timestamp": now(),
                "message": message,
            }
            self.entries.append(entry)
            if self.file is None:
                return
            if not any(m["role"] == "assistant" for m in self.messages()):
                return  # pi writes nothing until the model has answered once
            with self.file.open("a") as out:
                for written in self.entries if not self.flushed else [entry]:
                    out.write(json.dumps(written) + "\n")
            self.flushed = True

    def recall(self) -> str | None:
        """What a resumed conversation remembers, said once."""
        with lock:
            earlier, self.earlier = self.earlier, []
        prompts = [m for m in earlier if m["role"] == "user"]
        if not prompts:
            return None
        first = prompts[0]["content"][0]["text"]
        return f"resumed {self.id}: {len(earlier)} earlier messages, the first prompt: {first}"


session: Session


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime())


def emit(event: dict) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def assistant(text: str, stop: str = "stop", error: str | None = None) -> None:
    reply(
        {"role": "assistant", "content": [{"type": "text", "text": text}], "stopReason": stop},
        error,
    )


#: What each model call costs, as pi 1.6.0 reports it (`input` without the cached tokens;
#: priced by the model's `cost` in models.json).
USAGE = {
    "input": 400,
    "output": 50,
    "cacheRead": 600,
    "cacheWrite": 0,
    "totalTokens": 1050,
    "cost": {"input": 0.0012, "output": 0.00075, "cacheRead": 0.00018, "cacheWrite": 0,
             "total": 0.00213},
}  # fmt: skip


def reply(message: dict, error: str | None = None) -> None:
    if error:
        message["errorMessage"] = error
    else:
        message.update(model="fake-model", usage=USAGE)
    emit({"type": "message_start", "message": {**message, "stopReason": "pending"}})
    for block in message["content"]:
        if block["type"] == "text":
            delta = {"type": "text_delta", "delta": block["text"]}
            emit({"type": "message_update", "assistantMessageEvent": delta})
    session.record(message)
    emit({"type": "message_end", "message": message})


def ask(method: str, timeout: float | None = None) -> str:
    """An extension tool asks through a dialog; its answer, as the tool reports it (with a
    `timeout`, pi gives up waiting after that many seconds: the dialog is dismissed)."""
    call = f"toolu_{uuid.uuid4().hex[:8]}"
    tool = {"type": "toolCall", "id": call, "name": "ask_user", "arguments": {"method": method}}
    reply({"role": "assistant", "content": [tool], "stopReason": "toolUse"})
    emit({"type": "tool_execution_start", "toolCallId": call, "toolName": "ask_user", "args": {}})
    request_id = f"ui-{time.monotonic_ns()}"
    request = {
        "type": "extension_ui_request",
        "id": request_id,
        "method": method,
        "title": "Pick a colour",
    }
    if method == "select":
        request["options"] = ["red", "green"]
    if method == "confirm":
        request.update(title="Proceed?", message="This will repaint the house.")
    if timeout is not None:
        request["timeout"] = int(timeout * 1000)
    emit(request)
    with dialog_waiting:
        expires = time.monotonic() + timeout if timeout is not None else None
        while request_id not in dialog_answers:
            if expires is not None and time.monotonic() >= expires:
                dialog_answers[request_id] = {"cancelled": True}  # timed out, dismissed
                break
            dialog_waiting.wait(None if expires is None else max(0.0, expires - time.monotonic()))
        answer = dialog_answers.pop(request_id)
    text = json.dumps({k: v for k, v in answer.items() if k not in {"type", "id"}})
    result = {"content": [{"type": "text", "text": text}], "details": {}}
    emit(
        {
            "type": "tool_execution_end",
            "toolCallId": call,
            "toolName": "ask_user",
            "result": result,
            "isError": False,
        }
    )
    message = {
        "role": "toolResult",
        "toolCallId": call,
        "toolName": "ask_user",
        "content": result["content"],
        "isError": False,
    }
    session.record(message)
    emit({"type": "message_end", "message": message})
    return text


def run(first: str) -> None:
    global busy, aborted
    emit({"type": "agent_start"})
    work = [first]
    while work:
        text = work.pop(0)
        emit({"type": "turn_start"})
        user = {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": 0}
        session.record(user)
        emit({"type": "message_end", "message": user})
        remembered = session.recall()
        if remembered:
            assistant(remembered)
        if text.startswith("ASK:"):
            assistant(f"answer was {ask(text[4:])}")
        elif text.startswith("ASKT:"):  # a dialog that times out in pi
            assistant(f"answer was {ask(text[5:], timeout=0.5)}")
        elif text in {"FLAKY", "DOWN"}:  # a 503 that pi retries: it succeeds, or never does
            overloaded = '503 {"type":"error","error":{"type":"overloaded_error"}}'
            for attempt in (1, 2):
                assistant("", stop="error", error=overloaded)
                emit(
                    {
                        "type": "auto_retry_start",
                        "attempt": attempt,
                        "maxAttempts": 2,
                        "delayMs": 10,
                        "errorMessage": overloaded,
                    }
                )
                if text == "FLAKY":
                    emit({"type": "auto_retry_end", "success": True, "attempt": attempt})
                    assistant(f"done: {text}")
                    break
            else:
                assistant("", stop="error", error=overloaded)
                emit(
                    {
                        "type": "auto_retry_end",
                        "success": False,
                        "attempt": 2,
                        "finalError": overloaded,
                    }
                )
        elif text == "SPEND":
            for step in range(5):
                with lock:
                    if aborted:
                        break
                assistant(f"step {step}", stop="toolUse")
                time.sleep(0.2)
            else:
                assistant("spent")
        elif text == "FAIL":
            assistant("", stop="error", error='400 {"error":"mock: forced failure"}')
        elif text == "SLOW":
            for step in range(30):
                time.sleep(0.1)
                with lock:
                    if aborted:
                        break
                    taken = list(queue)
                    queue.clear()
                for extra in taken:
                    assistant(f"took into account: {extra}")
                if step == 12:
                    emit(
                        {
                            "type": "tool_execution_start",
                            "toolName": "bash",
                            "args": {"command": "make"},
                        }
                    )
        else:
            assistant(f"done: {text}")
        emit({"type": "turn_end", "message": {}, "toolResults": []})
        with lock:
            if aborted:
                break
            work.extend(queue)
            queue.clear()
    emit({"type": "agent_end", "messages": [], "willRetry": False})
    with lock:
        was_aborted, aborted, busy = aborted, False, False
    if not OLD:  # pi before 1.0 has no agent_settled (nor a prompt's disposition)
        emit({"type": "agent_settled", "aborted": was_aborted})


def state(ident: str | None) -> dict:
    data = {
        "model": {"provider": "mock", "id": "mock-model"},
        "thinkingLevel": "off",
        "isStreaming": busy,
        "isCompacting": False,
        "steeringMode": "one-at-a-time",
        "followUpMode": "one-at-a-time",
        "sessionId": session.id,
        "autoCompactionEnabled": True,
        "messageCount": len(session.messages()),
        "pendingMessageCount": len(queue),
    }
    if session.file is not None:  # in memory (--no-session) there is no file
        data["sessionFile"] = str(session.file)
    return {"id": ident, "type": "response", "command": "get_state", "success": True, "data": data}


def main() -> None:
    global busy, aborted, session  # noqa: PLW0603  # a tiny stand-in: module state is the agent's state
    sys.stderr.write(f"fake-pi argv {json.dumps(sys.argv[1:])}\n")
    sys.stderr.flush()
    session = Session(sys.argv[1:])
    runner: threading.Thread | None = None
    for line in sys.stdin:
        try:
            command = json.loads(line)
        except ValueError as exc:
            emit(
                {
                    "type": "response",
                    "command": "parse",
                    "success": False,
                    "error": f"Failed to parse command: {exc}",
                }
            )
            continue
        sys.stderr.write(f"fake-pi got {json.dumps(command)}\n")  # one write: never split
        sys.stderr.flush()
        kind, ident = command.get("type"), command.get("id")
        if kind == "prompt":
            text = command["message"]
            with lock:
                if busy and not command.get("streamingBehavior"):
                    emit(
                        {
                            "id": ident,
                            "type": "response",
                            "command": "prompt",
                            "success": False,
                            "error": "Agent is already processing. Specify streamingBehavior ('steer' or 'followUp') to queue the message.",
                        }
                    )
                    continue
                if busy and text.startswith("REFUSE") and text not in refused:
                    refused.add(text)  # as pi refuses a message while it compacts
                    emit(
                        {
                            "id": ident,
                            "type": "response",
                            "command": "prompt",
                            "success": False,
                            "error": "Cannot queue a message while compacting the context.",
                        }
                    )
                    continue
                if busy:
                    queue.append(text)
                    behaviours[text] = command["streamingBehavior"]
                    emit(
                        {
                            "id": ident,
                            "type": "response",
                            "command": "prompt",
                            "success": True,
                            "data": {"disposition": "queued"},
                        }
                    )
                    continue
                if text.startswith("/"):  # an extension command: it runs, no agent run starts
                    sys.stderr.write(f"fake-pi ran the command {text}\n")
                    emit(
                        {
                            "id": ident,
                            "type": "response",
                            "command": "prompt",
                            "success": True,
                            "data": {"disposition": "handled"},
                        }
                    )
                    continue
                if text == "NOKEY":
                    emit(
                        {
                            "id": ident,
                            "type": "response",
                            "command": "prompt",
                            "success": False,
                            "error": "No API key found for the selected model.\n\nUse /login to log into a provider.",
                        }
                    )
                    continue
                busy = True
            started = {"id": ident, "type": "response", "command": "prompt", "success": True}
            if not OLD:
                started["data"] = {"disposition": "started"}
            emit(started)
            runner = threading.Thread(target=run, args=(text,), daemon=True)
            runner.start()
        elif kind == "get_state":
            with lock:
                emit(state(ident))
        elif kind == "extension_ui_response":
            with dialog_waiting:
                dialog_answers[command["id"]] = command
                dialog_waiting.notify_all()
        elif kind == "clear_queue":  # what it removed, by kind, as pi answers
            with lock:
                cleared = {"steering": [], "followUp": []}
                for text in queue:
                    kind_of = "steering" if behaviours.get(text) == "steer" else "followUp"
                    cleared[kind_of].append(text)
                queue.clear()
            emit(
                {
                    "id": ident,
                    "type": "response",
                    "command": "clear_queue",
                    "success": True,
                    "data": cleared,
                }
            )
        elif kind == "abort":
            with lock:
                aborted = True
            emit({"id": ident, "type": "response", "command": "abort", "success": True})
        else:
            emit(
                {
                    "id": ident,
                    "type": "response",
                    "command": kind,
                    "success": False,
                    "error": f"Unknown command: {kind}",
                }
            )
    if runner is not None:  # stdin closed: an orderly shutdown lets the run settle first
        runner.join(timeout=10)


if __name__ == "__main__":
    main()
