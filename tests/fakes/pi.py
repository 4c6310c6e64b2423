"""A stand-in for `pi --mode rpc`, speaking its protocol as the real one does (pi 1.6.0).

The prompt picks a scenario: `ASK:select|confirm|input|editor` asks through an extension dialog,
`SLOW` works for a while (taking steers and follow-ups mid-run), `FAIL` ends the turn with a model
error, `NOKEY` refuses the prompt like pi without credentials. Anything else answers at once.
Every command received is echoed on stderr (`fake-pi got …`), which the crew log keeps.
"""

import json
import sys
import threading
import time

lock = threading.Lock()
queue: list[str] = []
busy = False
aborted = False
dialog_answers: dict[str, dict] = {}
dialog_waiting = threading.Condition(lock)


def emit(event: dict) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def assistant(text: str, stop: str = "stop", error: str | None = None) -> None:
    message = {"role": "assistant", "content": [{"type": "text", "text": text}], "stopReason": stop}
    if error:
        message["errorMessage"] = error
    emit({"type": "message_start", "message": {**message, "stopReason": "pending"}})
    emit({"type": "message_update", "assistantMessageEvent": {"type": "text_delta", "delta": text}})
    emit({"type": "message_end", "message": message})


def ask(method: str) -> str:
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
    emit(request)
    with dialog_waiting:
        while request_id not in dialog_answers:
            dialog_waiting.wait()
        answer = dialog_answers.pop(request_id)
    return json.dumps({k: v for k, v in answer.items() if k not in {"type", "id"}})


def run(first: str) -> None:
    global busy, aborted
    emit({"type": "agent_start"})
    work = [first]
    while work:
        text = work.pop(0)
        emit({"type": "turn_start"})
        emit(
            {
                "type": "message_end",
                "message": {"role": "user", "content": [{"type": "text", "text": text}]},
            }
        )
        if text.startswith("ASK:"):
            assistant(f"answer was {ask(text[4:])}")
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
    emit({"type": "agent_settled", "aborted": was_aborted})


def main() -> None:
    global busy, aborted  # noqa: PLW0603  # a tiny stand-in: module state is the agent's state
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
                if busy:
                    queue.append(text)
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
            emit(
                {
                    "id": ident,
                    "type": "response",
                    "command": "prompt",
                    "success": True,
                    "data": {"disposition": "started"},
                }
            )
            runner = threading.Thread(target=run, args=(text,), daemon=True)
            runner.start()
        elif kind == "extension_ui_response":
            with dialog_waiting:
                dialog_answers[command["id"]] = command
                dialog_waiting.notify_all()
        elif kind == "clear_queue":
            with lock:
                queue.clear()
            emit(
                {
                    "id": ident,
                    "type": "response",
                    "command": "clear_queue",
                    "success": True,
                    "data": {"steering": [], "followUp": []},
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
