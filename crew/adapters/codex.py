"""codex as an app server (`codex app-server`, 0.171.0): JSON-RPC 2.0 lines without the
`"jsonrpc"` field, in both directions.

- Start: `initialize`; on its result `initialized` and `thread/start` (in the worker's folder,
  with the agent's `approvalPolicy` when crew.toml sets one: else codex's own configuration
  decides); on that result the task prompt as the first `turn/start`.
  Each request of ours has an integer id, remembered with its method until the response.
- Session: the thread. It is started with `ephemeral: false` (an ephemeral thread lives in memory
  only and cannot be resumed), so codex keeps it as a rollout file under
  `$CODEX_HOME/sessions/` (default `~/.codex`), and its id (`result.thread.id`) is reported as the
  session. A later attempt sends `thread/resume` (`threadId`, and the same approval policy if one
  is set, which resume accepts as an override) instead of `thread/start`; its result has the
  shape of thread/start's (no `thread/started` follows), and the first `turn/start` carries
  `continuation()` instead of the prompt. Codex writes the rollout only once the first user
  message arrives, so a thread can be gone: resume is refused (`-32600`, `no rollout found for
  thread id …`), which is an error, not the end — a new thread starts with the task prompt.
  These threads are ordinary codex threads: they appear in codex's own history.
- Turns: `turn/completed` ends the turn `turn/started` began: `completed`, `failed` (the error is
  `turn.error.message`, else the last `error` notice that is not retried) or `interrupted`.
  `error` notices with `willRetry` are retries: the first of a turn is a note. The agent is idle
  (TurnEnd) once a turn has ended with no follow-up left and no turn request unanswered.
- A steer is a `turn/steer` of the active turn (`expectedTurnId`), else a `turn/start`; a steer
  refused because the turn ended meanwhile is sent again as a `turn/start`. Codex keeps no queue:
  follow-ups and nudges wait here while a turn runs, each a `turn/start` once it completes (as
  does anything sent while the thread is being set up).
- Questions are server requests, answered `{"id": <theirs>, "result": …}`, one at a time in the
  order asked; `serverRequest/resolved` of one we still hold withdraws it.
  - `item/tool/requestUserInput` (codex asks only in Plan collaboration mode): one question is
    need_selection (with options) or need_input; several are one need_input, answered by a JSON
    object of question id (or text) → answer, or by one text for all. A question with
    `isSecret` makes the contact secret: its answer is kept out of the run's files
    (crew/store/secret_answers.py), and only the JSON-RPC result written to codex holds it.
  - Command, file-change and permission approvals: need_confirmation with agent `approvals = "ask"`
    (a yes accepts; anything else declines, and the turn goes on), else answered at once and noted.
    Where the request allows it (a command approval whose `availableDecisions`, when listed, hold
    `acceptForSession`; any file change; any permission request) the question's options are
    yes|no|session: `session` (or `always`) is `acceptForSession`, or a grant with `scope:
    "session"`. The thread's approval policy is never changed. The files of a file change come from
    its `fileChange` item.
  - `mcpServer/elicitation/request` (an MCP server asks the user): a form or a URL to open, as
    crew/adapters/elicitation.py asks it; an answer that does not fit is asked again.
  - Any other request gets a JSON-RPC error. An answer with no question open is a steer.
- A refused `initialize` or `thread/start` is fatal; a refused `turn/start` with no turn running
  ends the turn with that error; other refusals are errors.
- Cancel: drop the waiting follow-ups, then `turn/interrupt` the active turn.
"""

from __future__ import annotations

import contextlib
import functools
import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from crew import __version__
from crew.adapters import codex_approvals
from crew.adapters.base import AgentError, Questions, Reaction, SessionStarted, TurnEnd, spent
from crew.adapters.elicitation import Unfit, elicitation
from crew.adapters.wire import (
    SESSION_OPTIONS,
    confirms,
    continuation,
    for_session,
    json_line,
    json_object,
)
from crew.config import AgentConfig
from crew.models import MailboxMessage, Task
from crew.protocol import Contact, Report
from crew.registry import Approvals, ContactType, MessageKind
from crew.text import short

#: Requests of ours without which the agent cannot work at all (a refused `thread/resume` falls
#: back to `thread/start`).
_SETUP = frozenset({"initialize", "thread/start"})
#: How every thread is run: codex asks before what its sandbox does not allow.
#: Requests of ours that may start a turn or add to one: the agent is not idle until answered.
_TURN_REQUESTS = frozenset({"turn/start", "turn/steer"})
_METHOD_NOT_FOUND = -32601


@dataclass
class _Question:
    """A server request held until it is answered; `reply` makes its result from the answer."""

    id: int | str
    contact: Contact
    reply: Callable[[str], dict[str, Any]]


@dataclass
class _Call:
    """A request of ours awaiting its response (`text`: what a turn request gave the agent)."""

    method: str
    text: str | None = None


@dataclass
class CodexAdapter:
    agent: AgentConfig
    merge_stderr: bool = False
    answers_only_while_asking: bool = False  # questions are answered in the protocol's terms
    environment: dict[str, str] = field(default_factory=dict)
    thread: str | None = None
    #: The active turn's id.
    turn: str | None = None
    #: A turn is under way or on its way (False once the leader was told the agent is idle).
    busy: bool = True
    _task: Task | None = None
    #: The thread of an earlier attempt, to resume (None: start one).
    _resume: str | None = None
    _count: int = 0
    _calls: dict[int, _Call] = field(default_factory=dict)
    #: Follow-ups and nudges for after the running turn (each starts a turn of its own).
    _queued: list[MailboxMessage] = field(default_factory=list)
    _questions: Questions[_Question] = field(default_factory=Questions)
    #: The files of each `fileChange` item under way, by item id.
    _changes: dict[str, list[Any]] = field(default_factory=dict)
    #: The ids of the turns that have completed (a late turn/start response may name one).
    _completed: set[str] = field(default_factory=set)
    #: A turn has ended and the leader is not told yet (`_outcome`: its error).
    _ended: bool = False
    _outcome: str | None = None
    #: The last error notice of the active turn that will not be retried.
    _error: str | None = None
    #: The active turn's retry notice was noted, and for which cause: the next ones with the same
    #: cause are not.
    _retrying: bool = False
    _retry_cause: str = ""
    #: The last agent message: the turn's final answer.
    _answer_text: str | None = None
    #: The thread's model, and its token usage in all when it was last reported.
    _model: str | None = None
    _used_before: dict[str, int] | None = None

    # ------------------------------------------------------------------ to codex

    def command(self, argv: list[str], task: Task) -> list[str]:
        return argv  # the thread is resumed in the protocol, not on the command line

    def start(self, task: Task) -> Reaction:
        self._task, self._resume = task, task.session
        client = {"name": "crew", "title": "crew", "version": __version__}
        features = {"experimentalApi": True}
        return Reaction(write=self._call("initialize", clientInfo=client, capabilities=features))

    def deliver(self, message: MailboxMessage) -> Reaction:
        if message.kind is MessageKind.RESPOND and self._questions:
            return self._answer(message.body)
        later = message.kind in {MessageKind.FOLLOW_UP, MessageKind.NUDGE} and self.busy
        if later or self.thread is None:  # a turn/start once the turn (or the set-up) is over
            self._queued.append(message)
            return Reaction()
        return Reaction(write=self._steer(message.body))  # a steer, or an answer to prose

    def interrupt(self) -> Reaction:
        returned, self._queued = self._queued, []
        if self.turn is None:
            return Reaction(returned=returned)
        stop = self._call("turn/interrupt", threadId=self.thread, turnId=self.turn)
        return Reaction(write=stop, returned=returned)

    def _steer(self, text: str) -> bytes:
        if self.turn is not None:
            return self._call(
                "turn/steer",
                text,
                threadId=self.thread,
                input=_input(text),
                expectedTurnId=self.turn,
            )
        return self._start_turn(text)  # while a turn is starting, codex adds it to that turn

    def _start_turn(self, text: str) -> bytes:
        self.busy = True
        return self._call("turn/start", text, threadId=self.thread, input=_input(text))

    def _call(self, method: str, text: str | None = None, **params: Any) -> bytes:
        self._count += 1
        self._calls[self._count] = _Call(method, text)
        return json_line({"id": self._count, "method": method, "params": params})

    def _answer(self, body: str) -> Reaction:
        asked = self._questions.held()[0]
        try:
            result = asked.reply(body)
        except Unfit as unfit:  # asked again, saying why: nothing reaches codex
            again = replace(asked.contact, prompt=f"{asked.contact.prompt} ({unfit}; answer again)")
            return Reaction(signals=[again])
        question, reaction = self._questions.answered()
        reaction.write = json_line({"id": question.id, "result": result})
        return reaction

    # ------------------------------------------------------------------ from codex

    def on_line(self, line: str) -> Reaction:
        message = json_object(line)
        if message is None:
            return Reaction()
        method, params = message.get("method"), _dict(message.get("params"))
        if method is None:
            return self._response(message)
        if "id" in message:
            return self._request(message["id"], str(method), params)
        return self._notification(str(method), params)

    def _response(self, message: dict[str, Any]) -> Reaction:
        ident = message.get("id")
        call = self._calls.pop(ident, None) if isinstance(ident, int) else None
        if message.get("error") is not None:
            error = _dict(message["error"]).get("message") or message["error"]
            return self._refused(call, str(error))
        if call is None:
            return Reaction()
        result = _dict(message.get("result"))
        if call.method == "initialize":
            initialized = json_line({"method": "initialized"})
            return Reaction(write=initialized + self._open_thread())
        if call.method in {"thread/start", "thread/resume"}:
            self.thread = str(_dict(result.get("thread")).get("id"))
            self._model = result.get("model") if isinstance(result.get("model"), str) else None
            reaction = Reaction(write=self._start_turn(self._first_message()))
            if self.thread != self._resume:
                reaction.signals.append(SessionStarted(self.thread))
            return reaction
        if call.method == "turn/start":
            turn = _dict(result.get("turn")).get("id")
            if turn is not None and turn not in self._completed:
                self.turn = str(turn)  # turn/started may come after this response
        return self._settle()

    def _open_thread(self) -> bytes:
        """The thread of an earlier attempt resumed, or a new one started."""
        policy = self.agent.approval_policy
        chosen = {"approvalPolicy": str(policy)} if policy is not None else {}
        if self._resume is None:
            return self._call("thread/start", **chosen, ephemeral=False)
        return self._call("thread/resume", threadId=self._resume, **chosen)

    def _first_message(self) -> str:
        """The task prompt on a new thread; on a resumed one, the note to continue."""
        assert self._task is not None  # a thread is opened only after start()
        return self._task.prompt if self._resume is None else continuation(self._task)

    def _refused(self, call: _Call | None, error: str) -> Reaction:
        if call is None:
            return Reaction(signals=[AgentError(f"codex: {error}")])
        if call.method == "thread/resume":  # the thread is gone: the task starts over
            lost = f"codex: cannot resume thread {self._resume} ({error}): starting a new one"
            self._resume = None
            return Reaction(write=self._open_thread(), signals=[AgentError(lost)])
        if call.method in _SETUP:
            return Reaction(signals=[AgentError(f"codex: {call.method}: {error}", fatal=True)])
        if call.method == "turn/steer" and call.text is not None:  # the turn ended meanwhile
            return Reaction(write=self._start_turn(call.text))
        if call.method == "turn/start" and self.turn is None:  # nothing runs: the turn is over
            return self._end(f"codex: turn/start: {error}")
        return Reaction(signals=[AgentError(f"codex: {call.method}: {error}")])

    def _notification(self, method: str, params: dict[str, Any]) -> Reaction:
        ours = params.get("threadId") == self.thread
        item = _dict(params.get("item"))
        if method == "turn/started" and ours:
            self.turn = str(_dict(params.get("turn")).get("id"))
            self._error, self._retrying = None, False
        elif method == "turn/completed" and ours:
            return self._turn_completed(_dict(params.get("turn")))
        elif method == "error" and ours:
            return self._error_notice(params)
        elif method == "item/started" and item.get("type") == "fileChange":
            self._changes[str(item.get("id"))] = list(item.get("changes") or [])
        elif method == "item/completed":
            self._changes.pop(str(item.get("id")), None)
            if item.get("type") == "agentMessage" and isinstance(item.get("text"), str):
                self._answer_text = item["text"] or self._answer_text
        elif method == "serverRequest/resolved":
            return self._withdrawn(params.get("requestId"))
        elif method == "thread/tokenUsage/updated" and ours:
            return self._used(_dict(params.get("tokenUsage")))
        return Reaction()

    def _used(self, usage: dict[str, Any]) -> Reaction:
        """Codex says what its thread has used in all (`total`) and in its last model call
        (`last`): what is new since the last report is spent (a resumed thread's first report
        counts only its last call: the rest was counted by the attempt that spent it)."""
        total, last = _dict(usage.get("total")), _dict(usage.get("last"))
        before = self._used_before or {k: _tokens(total, k) - _tokens(last, k) for k in _TOKENS}
        now = {k: _tokens(total, k) for k in _TOKENS}
        self._used_before = now
        new = {k: now[k] - before.get(k, 0) for k in _TOKENS}
        if not any(v > 0 for v in new.values()):
            return Reaction()  # the same report again
        return Reaction(
            signals=[
                spent(
                    input_tokens=new["inputTokens"],
                    output_tokens=new["outputTokens"],
                    cached_tokens=new["cachedInputTokens"],
                    model=self._model,
                )
            ]
        )

    def _turn_completed(self, turn: dict[str, Any]) -> Reaction:
        error = None
        if turn.get("status") == "failed":
            error = _error_text(_dict(turn.get("error"))) or self._error or "the turn failed"
        elif turn.get("status") == "interrupted":
            error = "interrupted"
        self._completed.add(str(turn.get("id")))
        self.turn, self._error, self._retrying = None, None, False
        return self._end(error)

    def _error_notice(self, params: dict[str, Any]) -> Reaction:
        """An error in a turn: the turn's failure, or (`willRetry`) a note when codex starts
        retrying, and again whenever the cause (`additionalDetails`) changes."""
        error = _dict(params.get("error"))
        message = _error_text(error) or "unknown error"
        details = error.get("additionalDetails")
        if not params.get("willRetry"):
            self._error = message
            return Reaction()
        cause = details if isinstance(details, str) else ""
        if self._retrying and cause == self._retry_cause:
            return Reaction()
        self._retrying, self._retry_cause = True, cause
        return Reaction(signals=[Report(ContactType.NOTE, f"codex: retrying: {message}")])

    def _end(self, error: str | None) -> Reaction:
        """A turn is over (or could not start); the leader hears of it once nothing is under way."""
        reaction = self._overtaken()
        self._ended, self._outcome = True, error
        reaction += self._settle()
        return reaction

    def _settle(self) -> Reaction:
        """After a turn ended, once no turn runs and no turn request is unanswered: the next
        follow-up, or else the end of the turn for the leader."""
        pending = any(call.method in _TURN_REQUESTS for call in self._calls.values())
        if not self._ended or self.turn is not None or pending:
            return Reaction()
        self._ended = False
        if self._queued:
            reaction = self._overtaken()
            reaction.write += self._start_turn(self._queued.pop(0).body)
            return reaction
        self.busy = False
        error, self._outcome = self._outcome, None
        answer, self._answer_text = self._answer_text, None
        return Reaction(signals=[TurnEnd(error, None if error else answer)])

    def _overtaken(self) -> Reaction:
        """The failure of an ended turn that more work follows: an error, not the end."""
        error, self._outcome = self._outcome, None
        return Reaction(signals=[AgentError(f"codex: {error}")] if error else [])

    def _request(self, ident: Any, method: str, params: dict[str, Any]) -> Reaction:
        if method == "item/tool/requestUserInput":
            return self._questions.ask(_user_input(ident, params))
        if method == "mcpServer/elicitation/request":
            return self._elicitation(ident, params)
        approval = codex_approvals.approval(method, params, self._changes)
        if approval is None:
            error = {"code": _METHOD_NOT_FOUND, "message": f"crew cannot answer {method}"}
            return Reaction(
                write=json_line({"id": ident, "error": error}),
                signals=[AgentError(f"codex: refused its {method} request (crew cannot answer)")],
            )
        prompt, decide, session = approval
        if self.agent.approvals is Approvals.ASK:
            options = SESSION_OPTIONS if session else []
            contact = Contact(ContactType.NEED_CONFIRMATION, prompt, options)
            return self._questions.ask(
                _Question(
                    ident,
                    contact,
                    lambda body: decide(confirms(body), session and for_session(body)),
                )
            )
        allowed = self.agent.approvals is Approvals.ALLOW
        verdict = "accepted" if allowed else "declined"
        note = f"codex: {verdict} (approvals = {self.agent.approvals}): {prompt}"
        return Reaction(
            write=json_line({"id": ident, "result": decide(allowed, False)}),
            signals=[Report(ContactType.NOTE, note)],
        )

    def _elicitation(self, ident: Any, params: dict[str, Any]) -> Reaction:
        """An MCP server asks the user (crew/adapters/elicitation.py); one crew cannot ask
        (a device verification) is declined at once, and noted."""
        asked = elicitation(params)
        if asked is not None:
            return self._questions.ask(_Question(ident, *asked))
        what = params.get("message") or params.get("description") or params.get("mode")
        note = f"codex: declined an MCP request crew cannot answer: {what}"
        return Reaction(
            write=json_line({"id": ident, "result": {"action": "decline"}}),
            signals=[Report(ContactType.NOTE, note)],
        )

    def _withdrawn(self, ident: Any) -> Reaction:
        """A request was resolved: one we still hold was settled elsewhere, or withdrawn."""
        reaction = self._questions.withdraw(ident, "codex no longer needs the answer")
        return reaction or Reaction()  # None: ours was answered


# ---------------------------------------------------------------------- questions


def _user_input(ident: Any, params: dict[str, Any]) -> _Question:
    questions = [_dict(q) for q in params.get("questions") or []]
    secret = any(q.get("isSecret") for q in questions)  # the answer is kept out of every file
    if len(questions) == 1:
        options = _options(questions[0])
        kind = ContactType.NEED_SELECTION if options else ContactType.NEED_INPUT
        other = bool(questions[0].get("isOther"))  # an answer of one's own is welcome too
        contact = Contact(
            kind, _asked(questions[0]), options, other=other and bool(options), secret=secret
        )
    else:
        listed = "; ".join(
            f"{q.get('id')}: {_asked(q)}" + (f" [{'|'.join(_options(q))}]" if _options(q) else "")
            for q in questions
        )
        how = 'answer {"<id>": "<answer>", …} to answer each, or one text for all'
        contact = Contact(ContactType.NEED_INPUT, f"codex asks: {listed} ({how})", secret=secret)
    return _Question(ident, contact, functools.partial(_answers, questions))


def _asked(question: dict[str, Any]) -> str:
    header, text = question.get("header"), question.get("question")
    return f"{header}: {text}" if header else str(text)


def _options(question: dict[str, Any]) -> list[str]:
    return [str(_dict(option).get("label")) for option in question.get("options") or []]


def _answers(questions: list[dict[str, Any]], body: str) -> dict[str, Any]:
    """The result of a requestUserInput: with several questions, a JSON object answers each by
    its id (or its text); any other answer is every question's."""
    named = None
    if len(questions) > 1:
        with contextlib.suppress(ValueError):
            named = json.loads(body)
    answers: dict[str, Any] = {}
    for question in questions:
        ident = str(question.get("id"))
        value: Any = body
        if isinstance(named, dict):
            value = named.get(ident, named.get(str(question.get("question"))))
        if value is not None:  # one a JSON object leaves out stays unanswered
            values = value if isinstance(value, list) else [value]
            answers[ident] = {"answers": [str(v) for v in values]}
    return {"answers": answers}


# ---------------------------------------------------------------------- helpers


def _input(text: str) -> list[dict[str, Any]]:
    return [{"type": "text", "text": text}]


#: The counts of Codex's token usage that crew keeps.
_TOKENS = ("inputTokens", "outputTokens", "cachedInputTokens")


def _tokens(usage: dict[str, Any], key: str) -> int:
    value = usage.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _error_text(error: dict[str, Any]) -> str:
    """A codex error in words: its message, and its cause when codex gives one apart
    (`additionalDetails`: "401 Unauthorized", "Name does not resolve")."""
    message = str(error.get("message") or "")
    details = error.get("additionalDetails")
    if isinstance(details, str) and details and details not in message:
        return f"{message} ({short(details, 200)})" if message else short(details, 200)
    return message
