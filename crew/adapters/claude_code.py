"""Claude Code in stream-json mode: JSON lines in both directions.

The agent's command is `claude -p --input-format stream-json --output-format stream-json
--verbose --permission-prompt-tool stdio` (without the last flag claude denies every permission
request itself and never asks a question). crew sets `CLAUDE_CODE_EMIT_SESSION_STATE_EVENTS=1`
in its environment.

- The task prompt is the first user message. A steer is a user message with `priority: "next"`
  (it joins the running turn). A follow-up, a nudge or an answer nobody asked for waits here
  while a turn runs, and is sent as a plain user message (a turn of its own) once the turn is
  over; while claude is idle, at once. claude could queue them itself (`priority: "later"`), but
  Claude Code 2.1.197 ignores an interrupt's `cancel_queued` and runs the queued message after
  the interrupted turn: work the person cancelled. A malformed line kills claude: we only ever
  write one-line JSON.
- Questions are `can_use_tool` control requests. `AskUserQuestion` asks 1 to 4 questions: one with
  options to pick one of → need_selection, any other single question → need_input; several → one
  need_input, answered by a JSON object mapping each question's text to its answer, or by one text
  for all. Any other tool asks for permission: with `approvals = "ask"` a need_confirmation
  question (only a yes allows it), with `allow`/`deny` an answer at once, noted in the event log. A
  request with `permission_suggestions` offers yes|no|session: `session` (or `always`) allows it
  with `updatedPermissions` set to those suggestions, each with `destination: "session"` (claude's
  own would often save the rule in a settings file). A second request waits until the first is
  answered. A request claude withdraws (`control_cancel_request`) is dropped: the task stops
  waiting (or the next request becomes the question), and an answer that crossed the withdrawal is
  not passed on.
- A `result` ends a turn, classified by `terminal_reason` (`completed`; `aborted_*`; anything
  else, or `is_error`, fails it). Results of queued turns can come back to back, so the `idle`
  session state is the end; without the state events, a `result` with no `queued_turn_count`.
  An `authentication_failed` assistant message names the failure. A control request crew sent
  that claude refuses is an error; one claude sends that crew does not know is refused.
- Cancel: drop the held messages, then an `interrupt` control request that also drops claude's
  queued messages (a steer not yet taken up, where claude honours `cancel_queued`).
- Session: claude names its session in the `system`/`init` message that opens every turn
  (`session_id`, a UUID; results carry it too), and keeps the transcript in
  `~/.claude/projects/<cwd>/<id>.jsonl` (under `CLAUDE_CONFIG_DIR` when set). It is reported
  once, or again when it changes (`--fork-session`); with `--no-session-persistence` in the
  command nothing is saved, so nothing is reported. A later attempt runs the same command plus
  `--resume=<id>`: `-p` is a plain switch, so the flag's place does not matter, and the `=` form
  binds the value to the flag even if it began with a dash (the Agent SDKs pass it so). Resumed
  without `--fork-session`, claude keeps the same id. Its first user message is not the prompt
  again but `continuation()`. A session claude cannot find ends at once: an
  `error_during_execution` result whose `errors` say `No conversation found with session ID: …`,
  then exit 1, which fails the attempt with that message.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from crew.adapters.base import (
    AgentError,
    Questions,
    Reaction,
    SessionStarted,
    Signal,
    Spent,
    TurnBegun,
    TurnEnd,
    spent,
)
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
from crew.protocol import Contact, Report, Withdrawn
from crew.registry import Approvals, ContactType, MessageKind
from crew.text import clip, short

#: The tool through which claude asks the user questions.
ASK_TOOL = "AskUserQuestion"
_ABORTED = frozenset({"aborted_streaming", "aborted_tools"})
_LOGGED_OUT = "authentication_failed"
_PROMPT_TOOL = "--permission-prompt-tool"
#: API errors claude retries (minutes in all) though no retry can fix them.
_HOPELESS = frozenset({_LOGGED_OUT, "billing_error"})
_MULTI_PROMPT = (
    "Answer with a JSON object mapping each question to its answer, or one text for all:"
)
#: In claude's command, this flag keeps sessions off the disk: there is nothing to resume.
_NOT_SAVED = "--no-session-persistence"


@dataclass
class _Request:
    """A `can_use_tool` request waiting for its answer."""

    id: str
    tool: str
    input: dict[str, Any]
    contact: Contact
    #: The permission updates claude suggests, to allow the like for the rest of the session.
    suggestions: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class ClaudeCodeAdapter:
    agent: AgentConfig
    merge_stderr: bool = False
    answers_only_while_asking: bool = False  # questions are answered in the protocol's terms
    #: Session state events make `idle` (the authoritative end of a turn) visible.
    environment: dict[str, str] = field(
        default_factory=lambda: {"CLAUDE_CODE_EMIT_SESSION_STATE_EVENTS": "1"}
    )
    #: How claude's last turn ended, while it is idle (None while a turn runs or is due).
    _ended: TurnEnd | None = None
    #: A user message was written after the last `result`: claude owes it a result.
    _owed: bool = False
    #: claude emits session state events: `idle`, not `result`, ends a turn.
    _states: bool = False
    #: A result said the turn is over (Spent.settled), and claude has not yet said it is idle.
    _settled: bool = False
    _interrupts: int = 0
    _requests: Questions[_Request] = field(default_factory=Questions)
    #: claude withdrew the question the leader still shows: its answer goes nowhere.
    _withdrawn: bool = False
    _error: str | None = None
    _logged_out: bool = False
    #: Why the turn fails, once claude is retrying what no retry can fix (it is interrupted).
    _hopeless: str | None = None
    #: The last result's text: the turn's final answer.
    _answer_text: str | None = None
    #: The tool uses claude asked crew about (`tool_use_id`): its other denials were its own.
    _asked: set[str] = field(default_factory=set)
    #: The session id the leader knows (from an earlier attempt, or reported by this one).
    _session: str | None = None
    #: `total_cost_usd` of the last result: what the process had spent until then.
    _cost_before: float = 0.0
    #: Follow-ups, nudges and unasked answers that came while a turn ran, each sent as a turn
    #: of its own once the turn is over: in claude's own queue, an interrupt might not drop them.
    _queued: list[MailboxMessage] = field(default_factory=list)

    # ------------------------------------------------------------------ to claude

    def command(self, argv: list[str], task: Task) -> list[str]:
        if task.session is None:
            return argv
        return [*argv, f"--resume={task.session}"]

    def start(self, task: Task) -> Reaction:
        self._session = task.session
        prompt = task.prompt if task.session is None else continuation(task)
        return Reaction(write=self._user(prompt))

    def deliver(self, message: MailboxMessage) -> Reaction:
        if message.kind is MessageKind.RESPOND and self._requests:
            return self._answer(message.body)
        if message.kind is MessageKind.RESPOND and self._withdrawn:
            return self._drop()
        if message.kind is MessageKind.STEER:
            return Reaction(write=self._user(message.body, "next"))
        if self._ended is None:  # a followUp, a nudge or prose, while a turn runs: held here
            self._queued.append(message)
            return Reaction()
        return Reaction(write=self._user(message.body))

    def interrupt(self) -> Reaction:
        self._interrupts += 1
        returned, self._queued = self._queued, []  # not claude's: handed back to the leader
        self._owed = False  # `cancel_queued`: what waits in claude's queue never runs
        return Reaction(
            write=json_line(
                {
                    "type": "control_request",
                    "request_id": f"crew-interrupt-{self._interrupts}",
                    "request": {"subtype": "interrupt", "cancel_queued": True},
                }
            ),
            returned=returned,
        )

    def _user(self, text: str, priority: str | None = None) -> bytes:
        message: dict[str, Any] = {
            "type": "user",
            "message": {"role": "user", "content": text},
            "parent_tool_use_id": None,
            "session_id": "default",
        }
        if priority is not None and self._ended is None:
            message["priority"] = priority  # while idle claude starts a new turn instead
        self._ended = None
        self._owed = True
        return json_line(message)

    def _answer(self, body: str) -> Reaction:
        request, reaction = self._requests.answered()
        if request.tool == ASK_TOOL:
            answers = _answers(request.input.get("questions"), body)
            response = _allow({**request.input, "answers": answers})
        elif confirms(body):
            response = _allow(request.input)
            if for_session(body) and request.suggestions:
                response["updatedPermissions"] = _for_session(request.suggestions)
        else:
            response = _deny(f"Denied by the crew supervisor: {body}")
        reaction.write = _response(request.id, response)
        return reaction

    def _drop(self) -> Reaction:
        self._withdrawn = False
        note = Report(
            ContactType.NOTE, "the answer was not passed on: claude withdrew the question"
        )
        if self._ended is None:
            return Reaction(signals=[note])
        # claude is idle: the leader took the answer for new work, so its turn ends again.
        return Reaction(signals=[note, self._ended])

    # ------------------------------------------------------------------ from claude

    def on_line(self, line: str) -> Reaction:
        event = json_object(line)
        if event is None:
            return Reaction()
        kind = event.get("type")
        if kind == "control_request":
            return self._request(str(event.get("request_id")), _dict(event.get("request")))
        if kind == "control_cancel_request":
            return self._withdraw(str(event.get("request_id")))
        if kind == "control_response":
            response = _dict(event.get("response"))
            if response.get("subtype") == "error":
                what = f"claude refused {response.get('request_id')}: {response.get('error')}"
                return Reaction(signals=[AgentError(what)])
        elif kind == "assistant" and event.get("error") == _LOGGED_OUT:
            self._logged_out = True
        elif kind == "result":
            return self._result(event)
        elif kind == "system" and event.get("subtype") == "init":
            return self._init(event)
        elif kind == "system" and event.get("subtype") == "api_retry":
            return self._retrying(event)
        elif kind == "system" and event.get("subtype") == "session_state_changed":
            self._states = True
            if event.get("state") == "idle" and self._ended is None and not self._owed:
                return self._turn_end()
        return Reaction()

    def _retrying(self, event: dict[str, Any]) -> Reaction:
        """claude retries a failed API call: a note naming the cause; when retrying cannot
        help (a refused key, no credit), claude is interrupted and the turn fails at once
        instead of after minutes of retries."""
        cause = str(event.get("error") or "an error")
        status = event.get("error_status")
        cause += f" (HTTP {status})" if isinstance(status, int) else ""
        delay = event.get("retry_delay_ms")
        when = f" in {delay / 1000:g}s" if isinstance(delay, int | float) else ""
        attempt, most = event.get("attempt"), event.get("max_retries")
        count = f" (attempt {attempt} of {most})" if attempt and most else ""
        note = Report(ContactType.NOTE, short(f"claude: retrying{when}{count} after {cause}", 300))
        if event.get("error") not in _HOPELESS or self._hopeless is not None:
            return Reaction(signals=[note])
        self._hopeless = f"claude: the API refused the call: {cause}; retrying cannot help"
        stop = self.interrupt()
        return Reaction(write=stop.write, signals=[note])

    def _init(self, event: dict[str, Any]) -> Reaction:
        """A turn begins: claude names its session (the same one every turn). One that begins
        after a result said the last was over, with no `idle` between, is said to have begun."""
        signals: list[Signal] = [TurnBegun()] if self._settled else []
        self._settled = False
        session, saved = event.get("session_id"), _NOT_SAVED not in self.agent.command
        if saved and isinstance(session, str) and session and session != self._session:
            self._session = session
            signals.append(SessionStarted(session))
        return Reaction(signals=signals)

    def _result(self, event: dict[str, Any]) -> Reaction:
        denied = self._denied_unasked(event.get("permission_denials"))
        # Unless claude queued turns of its own, it spends nothing more until it is given work.
        self._settled = not event.get("queued_turn_count")
        used = self._spent(event, settled=self._settled)
        reaction = self._turn_result(event)
        reaction.signals[:0] = [s for s in (denied, used) if s is not None]
        return reaction

    def _spent(self, result: dict[str, Any], *, settled: bool) -> Spent | None:
        """What the turn a `result` ends cost: its `usage` is the turn's (Anthropic's counts:
        input without the cached tokens), its cost the turn's models' `costUSD` (or the growth
        of `total_cost_usd`, which counts the whole process)."""
        usage = _dict(result.get("usage"))
        models = _dict(result.get("model_usage_since_last_result"))
        total = result.get("total_cost_usd")
        cost: Any = None
        if models:
            cost = sum(_dict(m).get("costUSD") or 0 for m in models.values())
        elif isinstance(total, int | float):
            cost = total - self._cost_before
        if isinstance(total, int | float):
            self._cost_before = total
        read = [usage.get(k) for k in ("input_tokens", "cache_read_input_tokens",
                                       "cache_creation_input_tokens")]  # fmt: skip
        turns = result.get("num_turns")
        if not usage and not cost:
            return None
        return spent(
            input_tokens=sum(n for n in read if isinstance(n, int)),
            output_tokens=usage.get("output_tokens"),
            cached_tokens=usage.get("cache_read_input_tokens"),
            cost_usd=cost,
            turns=turns if isinstance(turns, int) and turns >= 0 else 1,
            model=next(reversed(models or _dict(result.get("modelUsage"))), None),
            settled=settled,
        )

    def _denied_unasked(self, denials: Any) -> Report | None:
        """A note for the tool uses claude denied without asking crew (`permission_denials`):
        without `--permission-prompt-tool stdio` it asks no one and denies them all."""
        unasked = [
            d
            for d in denials or []
            if isinstance(d, dict) and str(d.get("tool_use_id")) not in self._asked
        ]
        if not unasked:
            return None
        uses = "; ".join(_action({**d, "input": d.get("tool_input")}) for d in unasked[:5])
        why = (
            ""
            if _PROMPT_TOOL in self.agent.command
            else (f" (its command has no `{_PROMPT_TOOL} stdio`, so it asks no one)")
        )
        text = f"claude denied {len(unasked)} tool use(s) without asking crew{why}: {uses}"
        return Report(ContactType.NOTE, short(text, 1000))

    def _turn_result(self, event: dict[str, Any]) -> Reaction:
        self._owed = False
        reason = event.get("terminal_reason")
        if self._hopeless is not None:
            self._error, self._hopeless = self._hopeless, None
        elif reason in _ABORTED:
            self._error = "aborted"
        elif event.get("is_error") or reason not in {None, "completed"}:
            errors = "; ".join(str(e) for e in event.get("errors") or [])
            self._error = str(event.get("result") or errors or reason or event.get("subtype"))
            if self._logged_out:
                self._error = f"claude: not logged in ({_LOGGED_OUT}): {self._error}"
        self._logged_out = False
        answer = event.get("result")
        self._answer_text = answer if isinstance(answer, str) and answer else None
        if self._states or event.get("queued_turn_count"):
            return Reaction()  # more turns follow, or `idle` will tell
        return self._turn_end()

    def _turn_end(self) -> Reaction:
        """The turn is over: the next held message starts a turn of its own (the failure of
        the one that ended is an error, not the end), or the leader is told claude is idle."""
        error, answer = self._error, self._answer_text
        self._error, self._answer_text, self._settled = None, None, False
        if self._queued:
            begun: list[Signal] = [AgentError(f"claude: {error}")] if error else []  # overtaken
            begun.append(TurnBegun())
            return Reaction(write=self._user(self._queued.pop(0).body), signals=begun)
        self._ended = TurnEnd(error, None if error else answer)
        return Reaction(signals=[self._ended])

    def _request(self, request_id: str, request: dict[str, Any]) -> Reaction:
        subtype = request.get("subtype")
        if subtype != "can_use_tool":
            error = f"crew does not handle {subtype} requests"
            refusal = {"subtype": "error", "request_id": request_id, "error": error}
            return Reaction(write=json_line({"type": "control_response", "response": refusal}))
        tool = str(request.get("tool_name"))
        tool_input = _dict(request.get("input"))
        self._asked.add(str(request.get("tool_use_id")))
        suggested = request.get("permission_suggestions")
        suggestions = [_dict(s) for s in suggested] if isinstance(suggested, list) else []
        if tool == ASK_TOOL:
            contact = _question(tool_input.get("questions"))
        elif self.agent.approvals is Approvals.ASK:
            options = SESSION_OPTIONS if suggestions else []
            contact = Contact(ContactType.NEED_CONFIRMATION, f"Allow {_action(request)}?", options)
        else:
            return self._approve(request_id, request)
        asked = _Request(request_id, tool, tool_input, contact, suggestions)
        reaction = self._requests.ask(asked)
        if reaction.signals:
            self._withdrawn = False
        return reaction

    def _approve(self, request_id: str, request: dict[str, Any]) -> Reaction:
        """`approvals` allow or deny: answer at once, and say so in the event log."""
        approvals = self.agent.approvals
        if approvals is Approvals.ALLOW:
            response = _allow(_dict(request.get("input")))
        else:
            response = _deny(f"Denied by the crew supervisor (approvals = {approvals}).")
        verb = "allowed" if approvals is Approvals.ALLOW else "denied"
        note = Report(ContactType.NOTE, f"{verb} {_action(request)} (approvals = {approvals})")
        return Reaction(write=_response(request_id, response), signals=[note])

    def _withdraw(self, request_id: str) -> Reaction:
        reaction = self._requests.withdraw(request_id, "claude withdrew it")
        if reaction is None:
            return Reaction()
        if any(isinstance(s, Withdrawn) for s in reaction.signals):
            self._withdrawn = True  # an answer that crosses the withdrawal goes nowhere
        return reaction


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _questions(value: Any) -> list[dict[str, Any]]:
    return [q for q in value if isinstance(q, dict)] if isinstance(value, list) else []


def _labels(question: dict[str, Any]) -> list[str]:
    options = question.get("options")
    return [str(_dict(o).get("label")) for o in options] if isinstance(options, list) else []


def _question(value: Any) -> Contact:
    """The question an AskUserQuestion input asks."""
    questions = _questions(value)
    if len(questions) == 1:
        question, labels = questions[0], _labels(questions[0])
        if labels and not question.get("multiSelect"):  # claude always offers "Other" too
            return Contact(
                ContactType.NEED_SELECTION, str(question.get("question")), labels, other=True
            )
        return Contact(ContactType.NEED_INPUT, _describe(question))
    lines = [f"{n}. {_describe(q)}" for n, q in enumerate(questions, 1)]
    return Contact(ContactType.NEED_INPUT, "\n".join([_MULTI_PROMPT, *lines]))


def _describe(question: dict[str, Any]) -> str:
    """`Which features? [Auth|Search] (any of them)`."""
    text = str(question.get("question"))
    labels = _labels(question)
    if labels:
        text += f" [{'|'.join(labels)}]"
    if question.get("multiSelect"):
        text += " (any of them)"
    return text


def _answers(value: Any, body: str) -> dict[str, str]:
    """AskUserQuestion's `answers`, by question text: from a JSON object naming the questions
    (a list of labels answers a multi-select question), or the whole body for every one."""
    # `answers` is a map of strings (the tool's input schema): a list would not validate.
    texts = [str(q.get("question")) for q in _questions(value)]
    try:
        given = json.loads(body)
    except ValueError:
        given = None
    if not isinstance(given, dict) or not any(t in given for t in texts):
        return dict.fromkeys(texts, body)
    return {t: _answer(given[t]) for t in texts if t in given}


def _answer(value: Any) -> str:
    """One answer as AskUserQuestion's schema has it: a string; the labels chosen of a
    multi-select question joined by ", " (as claude's own prompt joins them)."""
    if isinstance(value, list):
        return ", ".join(str(v) for v in value)
    return value if isinstance(value, str) else json.dumps(value)


def _action(request: dict[str, Any]) -> str:
    """What a permission request is for: `Bash: list the files — ls -la`."""
    tool = request.get("display_name") or request.get("tool_name")
    tool_input = _dict(request.get("input"))
    details = (
        request.get("description") or tool_input.get("description"),
        tool_input.get("command"),
    )
    text = " — ".join(dict.fromkeys(str(d) for d in details if d))
    if not text:
        text = clip(json.dumps(tool_input, ensure_ascii=False), 300)
    return f"{tool}: {text}"


def _allow(tool_input: dict[str, Any]) -> dict[str, Any]:
    return {"behavior": "allow", "updatedInput": tool_input}


def _for_session(suggestions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """claude's suggested permission updates, kept for this session only: claude often suggests
    saving a rule in a settings file (`localSettings`), which would outlive the session."""
    return [{**suggestion, "destination": "session"} for suggestion in suggestions]


def _deny(message: str) -> dict[str, Any]:
    return {"behavior": "deny", "message": message}


def _response(request_id: str, response: dict[str, Any]) -> bytes:
    answer = {"subtype": "success", "request_id": request_id, "response": response}
    return json_line({"type": "control_response", "response": answer})
