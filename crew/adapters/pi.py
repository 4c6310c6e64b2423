"""pi in RPC mode (`pi --mode rpc`): JSON lines in both directions.

- The task prompt is the first `prompt` command; a steer, follow-up or nudge is a `prompt` with
  `streamingBehavior` `steer` or `followUp` while a run is in progress, a plain `prompt` (a new
  run) when pi is idle. Plain `steer`/`follow_up` commands are never used: while idle they would
  sit in pi's queue and leak into the next run.
- Questions come from extensions as `extension_ui_request` (`select` → need_selection with its
  options, `confirm` → need_confirmation, `input`/`editor` → need_input) and are answered with
  `extension_ui_response`. pi has no permission prompts of its own. A second question that
  arrives while one is open waits until the first is answered.
- `agent_settled` ends a turn, unless a message crew sent is still unanswered (it reached pi as
  the run ended, and pi starts a new run for it after settling); an assistant message with
  `stopReason: "error"` makes it a failed turn, unless pi retries it (`auto_retry_start`,
  reported as a note): then only a retry that fails for good (`auto_retry_end` with
  `success: false`) fails the turn. A refused task prompt
  (no model, no API key), or a message refused while pi is idle, is fatal: no run will ever
  start. A message refused mid-run (while pi compacts) is a note, and is sent again once the run
  settles, which then goes on.
- Cancel: `clear_queue`, then `abort`.
- Session: pi keeps each conversation in a JSONL session file (by default under
  `~/.pi/agent/sessions/--<cwd>--/`, or `--session-dir`, or `$PI_CODING_AGENT_DIR`). RPC mode
  announces nothing about it, so after the prompt crew asks `get_state`, whose result names
  `sessionFile` (and `sessionId`); the file is reported as the session. A later attempt runs the
  same command plus `--session <file>`: pi loads that file and the conversation goes on, and the
  first prompt is `continuation()` instead of the task prompt. The file is the session's
  unambiguous name: an id would be looked up among sessions, and one found in another project
  makes pi ask (on the terminal) whether to fork it. pi writes the file only once the first
  assistant message exists; given a path that does not exist, it starts a new session there, so
  a resumed attempt never fails for want of the file. With `--no-session` (in memory, nothing
  saved) `get_state` has no `sessionFile`: nothing is reported and a new attempt starts over; so
  too with anything but a `.jsonl` file (pi's experimental SQLite store keeps sessions in one
  database, not a file each).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from crew.adapters.base import AgentError, Questions, Reaction, SessionStarted, TurnEnd, spent
from crew.adapters.wire import confirms, continuation, json_line, json_object
from crew.config import AgentConfig
from crew.models import MailboxMessage, Task
from crew.protocol import Contact, Report
from crew.registry import ContactType, MessageKind
from crew.text import short

#: How pi's session files end; `--session` opens an argument that ends so as a file.
_SESSION_FILE = ".jsonl"
_TOO_OLD = (
    "pi is older than 1.0 (its prompt responses carry no disposition), and such a pi never says "
    "a run has ended: crew needs pi 1.x, which needs Node 22.19 or later (under an older Node, "
    "npm installs pi 0.x)"
)
#: Events that show pi went on: a dialog still open then has expired inside pi.
_GONE_ON = frozenset({"tool_execution_end", "message_start", "agent_end", "agent_settled"})
_DIALOGS = {
    "select": ContactType.NEED_SELECTION,
    "confirm": ContactType.NEED_CONFIRMATION,
    "input": ContactType.NEED_INPUT,
    "editor": ContactType.NEED_INPUT,
}


@dataclass
class _Dialog:
    id: str
    method: str
    contact: Contact
    #: pi dismisses the dialog by itself after a while (`timeout`).
    expires: bool = False


@dataclass
class PiAdapter:
    agent: AgentConfig
    merge_stderr: bool = False
    answers_only_while_asking: bool = False  # questions are answered in the protocol's terms
    environment: dict[str, str] = field(default_factory=dict)
    busy: bool = False
    _count: int = 0
    _dialogs: Questions[_Dialog] = field(default_factory=Questions)
    _error: str | None = None
    #: The last assistant text of the run: its final answer.
    _answer_text: str | None = None
    #: A run is under way (`agent_start` came, `agent_settled` not yet).
    _running: bool = False
    #: Messages sent as prompts and not yet accepted, by command id: (text, behaviour).
    _unanswered: dict[str, tuple[str, str]] = field(default_factory=dict)
    #: Messages pi refused for now (while it compacts, say): sent again once its run settles.
    _refused: list[tuple[str, str]] = field(default_factory=list)
    #: The session file the leader knows (from an earlier attempt, or reported by this one).
    _session: str | None = None
    #: Messages sent while a run was under way: in pi's own queue until pi takes them.
    _queued: list[MailboxMessage] = field(default_factory=list)

    # ------------------------------------------------------------------ to pi

    def command(self, argv: list[str], task: Task) -> list[str]:
        if task.session is None:
            return argv
        return [*argv, "--session", task.session]

    def start(self, task: Task) -> Reaction:
        self._session = task.session
        prompt = task.prompt if task.session is None else continuation(task)
        return Reaction(write=self._prompt(prompt) + self._command("get_state"))

    def deliver(self, message: MailboxMessage) -> Reaction:
        if message.kind is MessageKind.RESPOND and self._dialogs:
            return self._answer(message.body)
        if self.busy:  # it waits in pi's queue until pi takes it: `clear_queue` gives it back
            self._queued.append(message)
        if message.kind is MessageKind.STEER:
            return Reaction(write=self._prompt(message.body, "steer"))
        return Reaction(write=self._prompt(message.body, "followUp"))  # followUp, nudge, prose

    def interrupt(self) -> Reaction:
        return Reaction(write=self._command("clear_queue") + self._command("abort"))

    def _prompt(self, text: str, behaviour: str | None = None) -> bytes:
        fields: dict[str, Any] = {"message": text}
        if behaviour is not None and self.busy:
            fields["streamingBehavior"] = behaviour  # while idle pi starts a new run instead
        self.busy = True
        line = self._command("prompt", **fields)
        if behaviour is not None:  # a message, not the task's prompt: sent again if refused
            self._unanswered[f"crew-{self._count}"] = (text, behaviour)
        return line

    def _command(self, kind: str, **fields: Any) -> bytes:
        self._count += 1
        return json_line({"id": f"crew-{self._count}", "type": kind, **fields})

    def _answer(self, body: str) -> Reaction:
        dialog, reaction = self._dialogs.answered()
        if dialog.method == "confirm":
            reply: dict[str, Any] = {"confirmed": confirms(body)}
        else:
            reply = {"value": body}
        reaction.write = json_line({"type": "extension_ui_response", "id": dialog.id, **reply})
        return reaction

    # ------------------------------------------------------------------ from pi

    def on_line(self, line: str) -> Reaction:
        event = json_object(line)
        if event is None:
            return Reaction()
        kind = event.get("type")
        if kind == "response":
            return self._response(event)
        if kind in _GONE_ON and self._dialogs:
            reaction = self._expired()
            reaction += self._from_pi(event, kind)
            return reaction
        return self._from_pi(event, kind)

    def _from_pi(self, event: dict[str, Any], kind: Any) -> Reaction:
        if kind == "agent_start":
            self.busy = self._running = True
        elif kind == "message_end" and isinstance(event.get("message"), dict):
            return self._message_end(event["message"])
        elif kind == "auto_retry_start":  # the failure is not the turn's: pi tries again
            self._error = None
            return Reaction(signals=[Report(ContactType.NOTE, _retrying(event))])
        elif kind == "auto_retry_end" and event.get("success") is False:
            self._error = str(event.get("finalError") or "retries failed")
        elif kind == "agent_settled":
            self.busy = self._running = False
            self._queued.clear()  # pi's queue is empty once it settles
            error, self._error = self._error, None
            if event.get("aborted"):
                error = error or "aborted"
            if self._refused and error is None:  # pi can take them now: the turn goes on
                again, self._refused = self._refused, []
                return Reaction(write=b"".join(self._prompt(t, b) for t, b in again))
            if self._unanswered and error is None:  # sent as the run ended: pi runs it next
                self.busy = True
                return Reaction()
            answer, self._answer_text = self._answer_text, None
            return Reaction(signals=[TurnEnd(error, None if error else answer)])
        elif kind == "extension_ui_request":
            return self._dialog(event)
        elif kind == "extension_error":
            return Reaction(signals=[AgentError(f"pi extension error: {event.get('error')}")])
        return Reaction()

    def _cleared(self, data: Any) -> list[MailboxMessage]:
        """The messages whose text pi's `clear_queue` took out of its queue: never seen by the
        model, they are crew's again."""
        cleared = data if isinstance(data, dict) else {}
        texts = [t for key in ("steering", "followUp") for t in cleared.get(key) or []]
        returned = []
        for message in list(self._queued):
            if message.body in texts:
                texts.remove(message.body)
                self._queued.remove(message)
                returned.append(message)
        return returned

    def _message_end(self, message: dict[str, Any]) -> Reaction:
        """A message is complete: an assistant's is a model turn, with its answer (or error)
        and what it cost."""
        if message.get("role") != "assistant":
            return Reaction()
        if message.get("stopReason") == "error":
            self._error = str(message.get("errorMessage") or "the model call failed")
        else:
            self._answer_text = _text_of(message) or self._answer_text
        usage = message.get("usage")
        if not isinstance(usage, dict) or not usage.get("totalTokens"):
            return Reaction()  # a call that failed before the model answered: nothing spent
        cost = usage.get("cost")
        return Reaction(
            signals=[
                spent(
                    input_tokens=sum(
                        n
                        for k in ("input", "cacheRead", "cacheWrite")
                        if isinstance(n := usage.get(k), int)
                    ),
                    output_tokens=usage.get("output"),
                    cached_tokens=usage.get("cacheRead"),
                    cost_usd=cost.get("total") if isinstance(cost, dict) else None,
                    model=message.get("model"),
                )
            ]
        )

    def _response(self, event: dict[str, Any]) -> Reaction:
        message = self._unanswered.pop(str(event.get("id")), None)
        if event.get("success") is not False:
            if event.get("command") == "get_state":
                return self._state(event.get("data"))
            if event.get("command") == "clear_queue":
                return Reaction(returned=self._cleared(event.get("data")))
            if event.get("command") == "prompt":
                return self._accepted(event)
            return Reaction()
        error = str(event.get("error") or "unknown error")
        command = event.get("command")
        if command == "prompt" and message is not None and self._running:
            self._refused.append(message)  # refused mid-run (compacting): kept for its end
            note = f"pi refused a message for now ({short(error, 200)}): it is sent again later"
            return Reaction(signals=[Report(ContactType.NOTE, note)])
        if command == "prompt":
            self.busy = False
            return Reaction(signals=[AgentError(f"pi refused the prompt: {error}", fatal=True)])
        return Reaction(signals=[AgentError(f"pi: {command}: {error}")])

    def _accepted(self, event: dict[str, Any]) -> Reaction:
        """pi took a prompt. pi 1.x says what it did with it (`disposition`); a pi without it is
        older than 1.0, which never says a run has ended (no `agent_settled`): refused."""
        disposition = _disposition(event)
        if disposition is None:
            return Reaction(signals=[AgentError(_TOO_OLD, fatal=True)])
        return self._handled() if disposition == "handled" else Reaction()

    def _handled(self) -> Reaction:
        """An extension command took the prompt (`/hello`): no run starts, and no
        `agent_settled` comes for it; while idle, that is the end of the turn."""
        if self._running:
            return Reaction()
        self.busy = False
        return Reaction(signals=[TurnEnd(None)])

    def _state(self, state: Any) -> Reaction:
        """pi's state names its session file (none when it keeps no session)."""
        session = state.get("sessionFile") if isinstance(state, dict) else None
        if not isinstance(session, str) or not session.endswith(_SESSION_FILE):
            return Reaction()
        if session == self._session:
            return Reaction()
        self._session = session
        return Reaction(signals=[SessionStarted(session)])

    def _dialog(self, event: dict[str, Any]) -> Reaction:
        method = str(event.get("method"))
        if method == "notify":
            return Reaction(signals=[Report(ContactType.NOTE, str(event.get("message", "")))])
        kind = _DIALOGS.get(method)
        if kind is None:  # setStatus, setWidget, setTitle, set_editor_text: nothing to answer
            return Reaction()
        title = str(event.get("title") or "pi asks")
        prompt = f"{title}: {event['message']}" if event.get("message") else title
        options = [str(o) for o in event.get("options") or []] if method == "select" else []
        contact = Contact(kind if options or method != "select" else ContactType.NEED_INPUT,
                          prompt, options)  # fmt: skip
        expires = isinstance(event.get("timeout"), int | float)
        return self._dialogs.ask(_Dialog(str(event.get("id")), method, contact, expires))

    def _expired(self) -> Reaction:
        """pi went on while dialogs with a timeout were open: they expired inside pi, which
        answers them no more (an answer now would be lost)."""
        reaction = Reaction()
        for dialog in self._dialogs.held():
            if dialog.expires:
                reaction += self._dialogs.withdraw(dialog.id, "pi's dialog timed out") or Reaction()
        return reaction


def _retrying(event: dict[str, Any]) -> str:
    """pi's auto-retry, in words: `pi: retrying in 2s (attempt 1 of 3) after 503 …`."""
    delay = event.get("delayMs")
    when = f" in {delay / 1000:g}s" if isinstance(delay, int | float) else ""
    attempt, most = event.get("attempt"), event.get("maxAttempts")
    count = f" (attempt {attempt} of {most})" if attempt and most else ""
    cause = short(str(event.get("errorMessage") or "an error"), 200)
    return f"pi: retrying{when}{count} after {cause}"


def _disposition(response: dict[str, Any]) -> str | None:
    """What pi did with a prompt (pi 1.x): `started`, `queued` or `handled`."""
    data = response.get("data")
    value = data.get("disposition") if isinstance(data, dict) else None
    return value if isinstance(value, str) else None


def _text_of(message: dict[str, Any]) -> str | None:
    """The text of an assistant message (its text blocks), None if it has none."""
    content = message.get("content")
    blocks = content if isinstance(content, list) else []
    text = "".join(
        str(b.get("text")) for b in blocks if isinstance(b, dict) and b.get("type") == "text"
    )
    return text or None
