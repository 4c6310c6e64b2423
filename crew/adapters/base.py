"""The adapter interface: how the leader speaks to each kind of agent.

The leader's core never knows which adapter a worker uses. It tells the adapter when the worker
starts, gives it each line the worker prints and each message to deliver, and asks it to
interrupt the agent; every time, the adapter answers with a Reaction: bytes to write to the
worker's stdin, and signals for the leader (a question, a report, the end of a turn, an error).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Generic, Protocol, TypeVar

from crew.models import MailboxMessage, Task, Usage
from crew.protocol import (
    EXCERPT,
    MAX_OPTION,
    MAX_OPTIONS,
    MAX_PROMPT,
    Contact,
    Malformed,
    Parsed,
    Report,
    Withdrawn,
)
from crew.registry import ContactType
from crew.text import clip


@dataclass(frozen=True)
class TurnEnd:
    """The agent finished what it was asked and is idle (`error` when the turn failed).

    With no open question and nothing pending for it, the leader closes the agent's stdin; the
    task completes when the agent exits (or fails, if the turn failed).
    """

    error: str | None = None
    #: The agent's final answer: the last text it wrote in the turn (None if it wrote none).
    result: str | None = None


@dataclass(frozen=True)
class AgentError:
    """The agent reported a protocol-level error. `fatal`: it cannot go on (the task fails)."""

    message: str
    fatal: bool = False


@dataclass(frozen=True)
class SessionStarted:
    """The agent named its own session: a later attempt of the task can resume it."""

    session_id: str


@dataclass(frozen=True)
class Spent:
    """The agent said what its model turns cost (made by `spent`, which keeps it sane).

    `settled`: said with the result that ends the agent's turn, before it says it is idle. It
    spends nothing more unless it begins another turn (TurnBegun), so a limit it reached is
    asked about when it is idle, not by stopping a turn that is already over.
    """

    usage: Usage
    settled: bool = False


@dataclass(frozen=True)
class TurnBegun:
    """The agent began a turn the leader did not just hand it (on work its adapter held for
    the end of the last one, or before it said it was idle): a limit reached by then stops it,
    and what is due for it is given as during any turn."""


Signal = Parsed | TurnEnd | AgentError | SessionStarted | Spent | TurnBegun

#: The longest error, turn failure or withdrawal reason kept from an agent, in characters.
MAX_TEXT = 2000
#: The longest session id taken from an agent: anything longer is not one.
MAX_SESSION = 1024
#: The longest final answer kept on a task (the task's log has all of it).
MAX_RESULT = 4096
#: The most tokens (and dollars) one report may claim: past it, a number is not a count.
MAX_COUNT = 10**12
#: The longest model name kept.
MAX_MODEL = 200


def spent(
    *,
    input_tokens: Any = 0,
    output_tokens: Any = 0,
    cached_tokens: Any = 0,
    cost_usd: Any = None,
    turns: int = 1,
    model: Any = None,
    settled: bool = False,
) -> Spent:
    """What an agent reported spending, from its own JSON: anything that is not a count (not a
    number, negative, beyond MAX_COUNT) counts as 0, a model name that is not text as none."""
    cost = _amount(cost_usd, float)
    return Spent(
        Usage(
            input_tokens=_amount(input_tokens, int) or 0,
            output_tokens=_amount(output_tokens, int) or 0,
            cached_tokens=_amount(cached_tokens, int) or 0,
            cost_usd=cost,
            turns=turns,
            model=clip(model, MAX_MODEL) if isinstance(model, str) and model.strip() else None,
        ),
        settled=settled,
    )


def _amount(value: Any, kind: type[int] | type[float]) -> Any:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if not math.isfinite(value) or not 0 <= value <= MAX_COUNT:
        return None
    return kind(value)


def bounded(signal: Signal) -> Signal:
    """`signal` within the bounds crew keeps whoever made it (crew/protocol.py has them): text
    cut to its limit, a question's options de-duplicated and cut to MAX_OPTION. A question with
    more than MAX_OPTIONS options is put as a need_input question naming the first of them (an
    agent cannot be told its question was malformed: it would wait for ever). A session id too
    long to be one is malformed."""
    if isinstance(signal, Contact):
        return _bounded_question(signal)
    if isinstance(signal, Report):
        return replace(signal, text=clip(signal.text, MAX_PROMPT))
    if isinstance(signal, AgentError):
        return replace(signal, message=clip(signal.message, MAX_TEXT))
    if isinstance(signal, TurnEnd) and (signal.error is not None or signal.result is not None):
        error = None if signal.error is None else clip(signal.error, MAX_TEXT)
        result = None if signal.result is None else clip(signal.result, MAX_RESULT)
        return replace(signal, error=error, result=result)
    if isinstance(signal, Withdrawn):
        return replace(signal, reason=clip(signal.reason, MAX_TEXT))
    if isinstance(signal, SessionStarted) and len(signal.session_id) > MAX_SESSION:
        return Malformed(
            f"a session id of {len(signal.session_id)} characters (at most {MAX_SESSION})",
            clip(signal.session_id, EXCERPT),
        )
    return signal


def _bounded_question(question: Contact) -> Contact:
    prompt = clip(question.prompt, MAX_PROMPT)
    options = [o for o in dict.fromkeys(clip(o, MAX_OPTION).strip() for o in question.options) if o]
    if len(options) <= MAX_OPTIONS:
        return Contact(question.type, prompt, options, other=question.other, secret=question.secret)
    listed = ", ".join(options[:MAX_OPTIONS])
    prompt = f"{prompt} (answer with one of its {len(options)} options: {listed}, …)"
    return Contact(ContactType.NEED_INPUT, clip(prompt, MAX_PROMPT), secret=question.secret)


@dataclass
class Reaction:
    """An adapter's answer: bytes for the worker's stdin, signals for the leader."""

    write: bytes = b""
    signals: list[Signal] = field(default_factory=list)
    #: Messages the adapter was given but held back from the agent (work for after its turn),
    #: handed back by an interrupt: the leader keeps them if the task goes on.
    returned: list[MailboxMessage] = field(default_factory=list)

    def __iadd__(self, other: Reaction) -> Reaction:
        self.write += other.write
        self.signals.extend(other.signals)
        self.returned.extend(other.returned)
        return self


class Adapter(Protocol):
    """One worker's side of a protocol (adapters keep per-worker state)."""

    #: Send stderr through stdout's pipe: the log then holds both in exact arrival order, and
    #: lines on either stream are parsed. Protocols that frame stdout (JSON streams) keep them
    #: apart so a stderr write can never land inside a frame.
    merge_stderr: bool
    #: Environment variables the agent needs to speak the protocol crew expects (the agent's
    #: own `env` in crew.toml can still override them).
    environment: dict[str, str]
    #: The worker reads plain lines, so any line is the answer to its open question: while one
    #: is open, nothing but the answer may be written to it.
    answers_only_while_asking: bool

    def command(self, argv: list[str], task: Task) -> list[str]:
        """The command line of this attempt: crew.toml's `argv`, plus whatever makes the agent
        resume its own session (`task.session`, from an earlier attempt) where it can."""

    def start(self, task: Task) -> Reaction:
        """The worker has just started: a handshake, the first prompt, or nothing."""

    def on_line(self, line: str) -> Reaction:
        """One line of the worker's stdout."""

    def deliver(self, message: MailboxMessage) -> Reaction:
        """Deliver a respond, steer, nudge or followUp message in the agent's own terms."""

    def interrupt(self) -> Reaction:
        """Stop what the agent is doing (before the task's worker is stopped, or when its task
        reached a limit); what it held for after the turn is handed back (`returned`)."""


class Question(Protocol):
    """An agent's question as an adapter keeps it: the agent's own id for it, and the contact
    the supervisor is asked."""

    @property
    def id(self) -> Any: ...

    @property
    def contact(self) -> Contact: ...


Q = TypeVar("Q", bound=Question)


class Questions(Generic[Q]):
    """An agent's open questions, put to the supervisor one at a time, in the order asked: one
    that arrives while another is open is asked once that one is answered (or withdrawn)."""

    def __init__(self) -> None:
        self._queue: list[Q] = []

    def __bool__(self) -> bool:
        return bool(self._queue)

    def ask(self, question: Q) -> Reaction:
        """The agent asks: the contact now, or once the open question is settled."""
        self._queue.append(question)
        return Reaction(signals=[question.contact] if len(self._queue) == 1 else [])

    def answered(self) -> tuple[Q, Reaction]:
        """The open question, which an answer settles; the reaction asks the next one."""
        question = self._queue.pop(0)
        return question, self._next()

    def held(self) -> list[Q]:
        """Every question not yet answered, the open one first."""
        return list(self._queue)

    def withdraw(self, ident: Any, reason: str) -> Reaction | None:
        """The agent took back the question `ident`: the next one is asked, or the task no
        longer waits (Withdrawn). None when the question is not held (it was answered)."""
        index = next((i for i, q in enumerate(self._queue) if q.id == ident), None)
        if index is None:
            return None
        del self._queue[index]
        if index > 0:
            return Reaction()  # never asked
        return self._next() if self._queue else Reaction(signals=[Withdrawn(reason)])

    def _next(self) -> Reaction:
        return Reaction(signals=[self._queue[0].contact] if self._queue else [])
