"""A scripted stand-in for a model provider, for the real agent CLIs: an HTTP server on
127.0.0.1 speaking, streamed (SSE), OpenAI chat completions (pi), the Anthropic Messages API
(Claude Code) and the OpenAI Responses API (Codex).

A test scripts the turns, each a list of steps, and every model request the CLI makes takes the
next one: `model.script([text("Hi")], [error(503)], [bash("ls"), text("Done")])`. Requests beyond
the script get `Model.default`. Each request is recorded (`model.requests`), so a test can check
what reached the model: a steer's text, a tool result, a denial. A step's tool call is named
after the tool the request offers (`Bash` for Claude, `bash` for pi, Codex's shell tool), so one
script serves every CLI.
"""

from __future__ import annotations

import json
import select
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

#: The usage every response reports unless its turn says otherwise.
USAGE = {"input": 120, "output": 30, "cached": 80}


@dataclass(frozen=True)
class Text:
    """Text streamed in `chunks`, `delay` seconds apart; a `held` text stops after its first
    chunk until `Model.release()`, so a test can act while the model is mid-answer."""

    chunks: tuple[str, ...]
    delay: float = 0.0
    held: bool = False


@dataclass(frozen=True)
class Tool:
    """A call of the request's tool named (case-insensitively) one of `names`."""

    names: tuple[str, ...]
    arguments: dict[str, Any]


@dataclass(frozen=True)
class Error:
    """An HTTP error instead of a response."""

    status: int
    message: str


@dataclass(frozen=True)
class Usage:
    """The token counts the response reports."""

    input: int
    output: int
    cached: int = 0


Step = Text | Tool | Error | Usage


def text(*chunks: str, delay: float = 0.0, held: bool = False) -> Text:
    return Text(chunks, delay, held)


def bash(command: str) -> Tool:
    """A shell command, as each CLI's shell tool takes it."""
    return Tool(
        ("bash", "shell", "exec_command", "shell_command"),
        {"command": command, "cmd": command, "description": "run a command"},
    )


def ask(question: str, options: list[str]) -> Tool:
    """A question to the user: Claude's AskUserQuestion, Codex's request_user_input (both
    refuse a question with fewer than two options, and both take an answer of one's own)."""
    choices = [{"label": o, "description": f"use {o}"} for o in options]
    item = {"question": question, "header": "Question", "options": choices, "multiSelect": False}
    codex = {"id": "q1", "header": "Question", "question": question, "options": choices}
    pi = {"kind": "select", "question": question, "options": options}
    names = ("askuserquestion", "request_user_input", "ask_user")
    return Tool(names, {"questions": [item], "_codex": codex, "_pi": pi})


def dialog(kind: str, question: str) -> Tool:
    """A question to the user through pi's extension UI (tests/fixtures/pi-ask.ts): `confirm`
    (yes or no) or `input` (any text)."""
    return Tool(("ask_user",), {"_pi": {"kind": kind, "question": question}})


def error(status: int, message: str = "") -> Error:
    reasons = {401: "invalid x-api-key", 503: "service unavailable", 529: "Overloaded"}
    return Error(status, message or reasons.get(status, "error"))


def usage(input: int, output: int, cached: int = 0) -> Usage:
    return Usage(input, output, cached)


@dataclass
class Request:
    """One request the server got."""

    path: str
    body: dict[str, Any]
    headers: dict[str, str]
    scripted: bool
    #: The client dropped the connection before the response ended (an interrupt).
    dropped: bool = False
    #: The usage its response reported (None for an HTTP error).
    usage: Usage | None = None

    @property
    def dump(self) -> str:
        """The whole body as text: to look for what reached the model."""
        return json.dumps(self.body)


@dataclass
class Model:
    """The server; `with Model() as model:` runs it in a thread."""

    turns: list[list[Step]] = field(default_factory=list)
    requests: list[Request] = field(default_factory=list)
    default: list[Step] = field(default_factory=lambda: [text("OK")])
    lock: threading.Lock = field(default_factory=threading.Lock)
    changed: threading.Condition = field(init=False)
    gate: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self.changed = threading.Condition(self.lock)
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.server.daemon_threads = True

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> Model:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
        self.server.shutdown()
        self.server.server_close()

    def release(self) -> None:
        """Let held texts go on."""
        self.gate.set()

    def script(self, *turns: list[Step]) -> None:
        with self.lock:
            self.turns.extend(turns)

    def take(
        self, path: str, body: dict[str, Any], headers: dict[str, str]
    ) -> tuple[Request, list[Step]]:
        """Record a request and return the turn that answers it."""
        with self.lock:
            scripted = bool(self.turns) and _is_main(path, body)
            turn = self.turns.pop(0) if scripted else self.default
            failed = any(isinstance(step, Error) for step in turn)
            request = Request(path, body, headers, scripted, usage=None if failed else _usage(turn))
            self.requests.append(request)
            self.changed.notify_all()
            return request, turn

    def note(self, request: Request) -> None:
        """Mark `request` dropped by the client."""
        with self.lock:
            request.dropped = True
            self.changed.notify_all()

    def until(self, check: Callable[[list[Request]], Any], timeout: float = 60) -> Any:
        """Wait until `check` of the scripted requests is truthy, and return it."""
        with self.changed:
            found = self.changed.wait_for(
                lambda: check([r for r in self.requests if r.scripted]), timeout
            )
            if not found:
                raise AssertionError(f"not met in {timeout}s; requests: {self.requests}")
            return found

    def scripted(self) -> list[Request]:
        """The requests that took a scripted turn."""
        with self.lock:
            return [r for r in self.requests if r.scripted]

    def wait(self, count: int, timeout: float = 60) -> list[Request]:
        """Wait until `count` requests took a scripted turn, and return them."""
        return self.until(lambda requests: requests if len(requests) >= count else None, timeout)


def _is_main(path: str, body: dict[str, Any]) -> bool:
    """A request of the agent's own conversation (with tools), not a side request (a title, a
    token count)."""
    return not path.endswith("/count_tokens") and bool(body.get("tools"))


def _handler(model: Model) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            model.take(self.path, {}, dict(self.headers))
            self.reply(404, {"error": {"message": "not found"}})

        def do_POST(self) -> None:
            self.path = self.path.split("?")[0]
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b"{}"
            body = json.loads(raw or b"{}")
            request, turn = model.take(self.path, body, dict(self.headers))
            failure = next((s for s in turn if isinstance(s, Error)), None)
            if failure is not None:
                self.reply(failure.status, _error_body(self.path, failure))
                return
            if self.path.endswith("/count_tokens"):
                self.reply(200, {"input_tokens": 100})
                return
            events = _stream(self.path, body, turn, self.hold)
            if events is None:
                self.reply(404, {"error": {"message": f"no such API: {self.path}"}})
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Connection", "close")
            self.end_headers()
            try:
                for chunk in events:
                    self.wfile.write(chunk.encode())
                    self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError, _Dropped):
                model.note(request)  # the client gave up on the stream (an interrupt)
            self.close_connection = True

        def hold(self) -> None:
            """Wait for the model's gate, or until the client hangs up."""
            while not model.gate.wait(0.05):
                readable, _, _ = select.select([self.connection], [], [], 0)
                if readable and not self.connection.recv(1, socket.MSG_PEEK):
                    raise _Dropped

        def reply(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            if status in (429, 503, 529):
                self.send_header("Retry-After", "0")
            self.end_headers()
            self.wfile.write(data)

    return Handler


def _error_body(path: str, failure: Error) -> dict[str, Any]:
    if "/messages" in path:
        kinds = {401: "authentication_error", 529: "overloaded_error", 503: "api_error"}
        kind = kinds.get(failure.status, "api_error")
        return {"type": "error", "error": {"type": kind, "message": failure.message}}
    return {"error": {"message": failure.message, "type": "error", "code": str(failure.status)}}


class _Dropped(Exception):
    """The client hung up while its response was held."""


Hold = Callable[[], None]


def _stream(path: str, body: dict[str, Any], turn: list[Step], hold: Hold) -> Iterator[str] | None:
    if path.endswith("/chat/completions"):
        return _chat(body, turn, hold)
    if path.endswith("/messages"):
        return _messages(body, turn, hold)
    if path.endswith("/responses"):
        return _responses(body, turn, hold)
    return None


def _texts(step: Text, hold: Hold) -> Iterator[str]:
    for i, chunk in enumerate(step.chunks):
        if i and step.delay:
            time.sleep(step.delay)
        yield chunk
        if i == 0 and step.held:
            hold()


def _usage(turn: list[Step]) -> Usage:
    return next(
        (s for s in turn if isinstance(s, Usage)),
        Usage(USAGE["input"], USAGE["output"], USAGE["cached"]),
    )


def _tool_name(body: dict[str, Any], step: Tool) -> str:
    """The name of the request's tool that `step` calls."""
    for tool in body.get("tools") or []:
        name = tool.get("name") or (tool.get("function") or {}).get("name") or ""
        if name.lower() in step.names:
            return str(name)
    return step.names[0]


def _arguments(name: str, step: Tool) -> dict[str, Any]:
    """The arguments as the named tool takes them."""
    if name == "request_user_input":
        return {"questions": [step.arguments["_codex"]]}
    if name == "ask_user":
        return dict(step.arguments["_pi"])
    keys = {"bash": ["command"], "Bash": ["command", "description"], "shell": ["command"]}
    args = {k: v for k, v in step.arguments.items() if not k.startswith("_")}
    if name == "shell":
        return {"command": ["bash", "-lc", args["command"]]}
    if name in ("exec_command", "shell_command"):
        return {("cmd" if name == "exec_command" else "command"): args["command"]}
    if name in keys:
        return {k: args[k] for k in keys[name]}
    return args


def _sse(data: dict[str, Any], event: str | None = None) -> str:
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(data)}\n\n"


def _chat(body: dict[str, Any], turn: list[Step], hold: Hold) -> Iterator[str]:
    """OpenAI chat completions, streamed."""
    base = {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "model": body.get("model")}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
        return _sse({**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})

    calls = 0
    yield chunk({"role": "assistant", "content": ""})
    for step in turn:
        if isinstance(step, Text):
            for piece in _texts(step, hold):
                yield chunk({"content": piece})
        elif isinstance(step, Tool):
            name = _tool_name(body, step)
            call = {
                "index": calls,
                "id": f"call_{calls}",
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(_arguments(name, step))},
            }
            yield chunk({"tool_calls": [call]})
            calls += 1
    yield chunk({}, "tool_calls" if calls else "stop")
    used = _usage(turn)
    yield _sse(
        {
            **base,
            "choices": [],
            "usage": {
                "prompt_tokens": used.input,
                "completion_tokens": used.output,
                "total_tokens": used.input + used.output,
                "prompt_tokens_details": {"cached_tokens": used.cached},
            },
        }
    )
    yield "data: [DONE]\n\n"


def _messages(body: dict[str, Any], turn: list[Step], hold: Hold) -> Iterator[str]:
    """The Anthropic Messages API, streamed."""
    used = _usage(turn)
    message = {
        "id": "msg_fake",
        "type": "message",
        "role": "assistant",
        "model": body.get("model"),
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {
            "input_tokens": used.input,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": used.cached,
            "output_tokens": 1,
        },
    }
    yield _sse({"type": "message_start", "message": message}, "message_start")
    index = 0
    tools = False
    for step in turn:
        if isinstance(step, Text):
            block = {"type": "text", "text": ""}
            yield _sse(
                {"type": "content_block_start", "index": index, "content_block": block},
                "content_block_start",
            )
            for piece in _texts(step, hold):
                delta = {"type": "text_delta", "text": piece}
                yield _sse(
                    {"type": "content_block_delta", "index": index, "delta": delta},
                    "content_block_delta",
                )
        elif isinstance(step, Tool):
            name = _tool_name(body, step)
            block = {"type": "tool_use", "id": f"toolu_{index}", "name": name, "input": {}}
            yield _sse(
                {"type": "content_block_start", "index": index, "content_block": block},
                "content_block_start",
            )
            delta = {"type": "input_json_delta", "partial_json": json.dumps(_arguments(name, step))}
            yield _sse(
                {"type": "content_block_delta", "index": index, "delta": delta},
                "content_block_delta",
            )
            tools = True
        else:
            continue
        yield _sse({"type": "content_block_stop", "index": index}, "content_block_stop")
        index += 1
    delta = {"stop_reason": "tool_use" if tools else "end_turn", "stop_sequence": None}
    yield _sse(
        {"type": "message_delta", "delta": delta, "usage": {"output_tokens": used.output}},
        "message_delta",
    )
    yield _sse({"type": "message_stop"}, "message_stop")


def _responses(body: dict[str, Any], turn: list[Step], hold: Hold) -> Iterator[str]:
    """The OpenAI Responses API, streamed."""
    response: dict[str, Any] = {"id": "resp_fake", "object": "response", "status": "in_progress"}
    yield _sse({"type": "response.created", "response": response}, "response.created")
    for index, step in enumerate(turn):
        if isinstance(step, Text):
            item: dict[str, Any] = {
                "type": "message",
                "id": f"msg_{index}",
                "role": "assistant",
                "status": "in_progress",
                "content": [],
            }
            added = {"type": "response.output_item.added", "output_index": index, "item": item}
            yield _sse(added, added["type"])
            for piece in _texts(step, hold):
                delta = {
                    "type": "response.output_text.delta",
                    "item_id": item["id"],
                    "output_index": index,
                    "content_index": 0,
                    "delta": piece,
                }
                yield _sse(delta, delta["type"])
            whole = "".join(step.chunks)
            item = {
                **item,
                "status": "completed",
                "content": [{"type": "output_text", "text": whole, "annotations": []}],
            }
        elif isinstance(step, Tool):
            name = _tool_name(body, step)
            item = {
                "type": "function_call",
                "id": f"fc_{index}",
                "call_id": f"call_{index}",
                "name": name,
                "arguments": json.dumps(_arguments(name, step)),
                "status": "completed",
            }
        else:
            continue
        done = {"type": "response.output_item.done", "output_index": index, "item": item}
        yield _sse(done, done["type"])
    used = _usage(turn)
    response = {
        **response,
        "status": "completed",
        "usage": {
            "input_tokens": used.input,
            "input_tokens_details": {"cached_tokens": used.cached},
            "output_tokens": used.output,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": used.input + used.output,
        },
    }
    yield _sse({"type": "response.completed", "response": response}, "response.completed")
