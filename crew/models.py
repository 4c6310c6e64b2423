"""Pydantic models of every file crew writes: JSON names are camelCase, and field order is the
order keys appear on disk, so a `git diff` of a snapshot shows only what changed."""

from __future__ import annotations

from typing import Annotated, Any, Self

from pydantic import (
    ConfigDict,
    Discriminator,
    Field,
    PrivateAttr,
    RootModel,
    Tag,
    TypeAdapter,
    ValidationError,
    model_validator,
)

from crew.clock import TIMESTAMP_PATTERN
from crew.config import CrewConfig
from crew.config_base import CamelModel
from crew.errors import Corrupt
from crew.ids import RUN_ID_PATTERN, TASK_ID_PATTERN
from crew.registry import (
    ContactType,
    Direction,
    EventData,
    EventType,
    MessageData,
    MessageKind,
    MessageStatus,
    Priority,
    RunStatus,
    TaskStatus,
    WatcherKind,
)

#: The version of the snapshot format this code writes; older ones are read forward.
STATE_VERSION = 2

Timestamp = Annotated[str, Field(pattern=TIMESTAMP_PATTERN)]
TaskId = Annotated[str, Field(pattern=TASK_ID_PATTERN)]
RunId = Annotated[str, Field(pattern=RUN_ID_PATTERN)]
#: A task id, or "leader" for the leader side of a message.
Party = Annotated[str, Field(pattern=r"^(leader|[a-z0-9][a-z0-9_.-]{0,63})$")]


class StateModel(CamelModel):
    """Base of the state-file models: keys a newer crew added are ignored, not refused."""

    model_config = ConfigDict(extra="ignore")

    def to_line(self) -> bytes:
        """One compact JSON line ending in `\\n`; keys in schema order, no empty optionals."""
        return self.model_dump_json(exclude_none=True).encode() + b"\n"

    def to_dict(self) -> dict[str, Any]:
        """The JSON form as a dict (camelCase keys, optional fields left out)."""
        return self.model_dump(mode="json", exclude_none=True)

    def revised(self, **changes: Any) -> Self:
        """A copy with `changes` (snake_case names), validated like anything read from disk."""
        return self.model_validate({**self.model_dump(by_alias=False), **changes})


NonNegative = Annotated[int, Field(ge=0)]


class Usage(StateModel):
    """What an agent spent, as it reports it: one model turn's worth in an `agent.usage` event,
    a task's total on the task."""

    input_tokens: NonNegative = 0
    """Tokens the model read, those read from the provider's cache included."""
    output_tokens: NonNegative = 0
    """Tokens the model wrote (reasoning included)."""
    cached_tokens: NonNegative = 0
    """How many of the input tokens came from the provider's cache."""
    cost_usd: Annotated[float, Field(ge=0)] | None = None
    """The agent's own estimate of the cost in US dollars (Claude Code, pi; Codex reports none)."""
    turns: NonNegative = 0
    """Model turns: requests to the model, each answered."""
    model: str | None = None
    """The model that answered last."""

    @property
    def tokens(self) -> int:
        """Input and output tokens: what a token limit counts."""
        return self.input_tokens + self.output_tokens

    def summary(self) -> str:
        """'12,345 tokens, $0.0123, 3 model turns'."""
        parts = [f"{self.tokens:,} tokens"]
        if self.cost_usd is not None:
            parts.append(f"${self.cost_usd:,.4f}")
        parts.append(f"{self.turns:,} model turn{'s' if self.turns != 1 else ''}")
        return ", ".join(parts)

    def plus(self, more: Usage) -> Usage:
        """This and `more` together (the model of `more` if it names one)."""
        cost = None
        if self.cost_usd is not None or more.cost_usd is not None:
            cost = round((self.cost_usd or 0.0) + (more.cost_usd or 0.0), 9)
        return Usage(
            input_tokens=self.input_tokens + more.input_tokens,
            output_tokens=self.output_tokens + more.output_tokens,
            cached_tokens=self.cached_tokens + more.cached_tokens,
            cost_usd=cost,
            turns=self.turns + more.turns,
            model=more.model or self.model,
        )


class Limits(StateModel):
    """How much a task may spend before it is paused to ask whether it may go on (unset: no
    limit). A task's own are those raised for it; the rest are its agent's (crew.toml)."""

    max_turns: Annotated[int, Field(ge=1)] | None = None
    max_tokens: Annotated[int, Field(ge=1)] | None = None
    max_cost_usd: Annotated[float, Field(gt=0)] | None = None


class LimitReached(StateModel):
    """Which limit a task reached, and what a yes raises it to."""

    key: str
    """Its crew.toml key: maxTurns, maxTokens or maxCostUsd."""
    raise_to: Annotated[int, Field(gt=0)] | Annotated[float, Field(gt=0)]
    interrupted: bool = False
    """The agent was stopped in the middle of its turn: a yes tells it to go on."""
    before_start: bool = False
    """Reached before the task's next attempt started: a yes starts it, else it is cancelled."""


class SupervisorContact(StateModel):
    """A question a worker asked; answered exactly once."""

    id: Annotated[str, Field(pattern=r"^q_[0-9a-z]{1,32}$")]
    """Contact id, `q_…`."""
    task_id: TaskId
    """The task that asked."""
    type: ContactType
    """need_confirmation, need_input or need_selection."""
    prompt: str
    """The question, as the worker wrote it."""
    options: list[str] = Field(default_factory=list)
    """The allowed answers of a need_selection question."""
    other: bool | None = None
    """A need_selection question that takes an answer of one's own too (an agent's "Other")."""
    secret: bool | None = None
    """Its answer is a secret: the mailbox and the event log keep only a stand-in for it."""
    asked_at: Timestamp
    answered_at: Timestamp | None = None
    answer_id: str | None = None
    """The respond message that answered it."""
    limit: LimitReached | None = None
    """Set on the question crew asks, not the worker, when the task reached one of its limits:
    a yes raises it (crew/domain/budget.py)."""


class Task(StateModel):
    """One task of a run, defined in crew.toml or added as the run ran."""

    id: TaskId
    """Task id from crew.toml."""
    agent: str
    """The agent (crew.toml `[agents.<name>]`) that runs it."""
    title: str
    """A short title: crew.toml `title`, else the first line of the prompt."""
    prompt: str
    status: TaskStatus
    """queued, running, waiting, needs_review, or terminal: completed, failed, cancelled."""
    depends_on: list[TaskId] = Field(default_factory=list)
    """Tasks that must complete before this one starts."""
    attempt: Annotated[int, Field(ge=0)] = 0
    """Which attempt runs (or ran) last, 0 before the first; `failures` counts failed ones."""
    max_attempts: Annotated[int, Field(ge=1)] = 1
    pid: int | None = None
    """The worker's process id (its process group id too) while it runs, on its node."""
    node: str | None = None
    """The Ray node it runs on, `<node id, 8 hex digits>@<address>` (None: the leader's)."""
    token_hash: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")] | None = None
    """SHA-256 of the secret the leader gave the worker of the current attempt
    (CREW_WORKER_TOKEN): a `crew` command acts as `task:<id>` only with that secret."""
    started_at: Timestamp | None = None
    ended_at: Timestamp | None = None
    waiting_since: Timestamp | None = None
    """When the open question was asked."""
    last_output_at: Timestamp | None = None
    """When the worker last printed anything."""
    exit_code: int | None = None
    contact: SupervisorContact | None = None
    """The open question, while the task waits for an answer."""
    nudges: Annotated[int, Field(ge=0)] = 0
    """Automatic nudges sent since the worker last printed anything."""
    failures: Annotated[int, Field(ge=0)] = 0
    """Attempts that failed (non-zero exit, timeout, protocol error): retried while fewer than
    maxAttempts. An attempt the leader's end cut short is interrupted, not failed."""
    session: str | None = None
    """The agent's own session id (Claude Code, Codex, pi), so that the next attempt resumes the
    conversation instead of starting it again."""
    error: str | None = None
    """Why the task failed, was cancelled or was flagged."""
    result: str | None = None
    """The agent's final answer (agents that work in turns): the last text of its last turn,
    up to 4 KiB."""
    agent_version: str | None = None
    """The version its agent CLI gives (`--version`: pi, Claude Code, Codex), as last run."""
    usage: Usage | None = None
    """What its agent spent, over every attempt (agents that report it: pi, Claude Code, Codex)."""
    limits: Limits | None = None
    """Limits raised for this task when it reached them (the others are its agent's)."""
    added_at: Timestamp | None = None
    """When it was added to the run as it ran (`crew add`, a worker's spawn); None for a task of
    crew.toml. Added tasks come after crew.toml's, in the order they were added."""
    parent: TaskId | None = None
    """The task whose worker added it (a spawn), if any."""
    idempotency_key: str | None = None
    """The key it was added under: adding again with it returns this task, writing nothing."""
    waiting_for: list[TaskId] = Field(default_factory=list)
    """The tasks it spawned and waits for (status `waiting`, no question open): once they have
    all ended, it is given their results in one message and runs again."""

    @property
    def open_question(self) -> SupervisorContact | None:
        """The question that waits for an answer: none once the task has ended (a cancelled
        task keeps its last question on record, but nobody can answer it any more)."""
        contact = self.contact
        if contact is None or contact.answered_at is not None or self.status.terminal:
            return None
        return contact

    def since(self) -> str | None:
        """When the task entered its current status (as far as the task records it)."""
        if self.status is TaskStatus.WAITING:
            return self.waiting_since
        if self.status.terminal:
            return self.ended_at
        return self.started_at


class MailboxMessage(StateModel):
    """A message to or from a worker, whole: its first line in a mailbox file (a later whole line
    with the same id supersedes it; a MailboxChange line records only what changed)."""

    id: Annotated[str, Field(pattern=r"^msg_[0-9a-z]{1,32}$")]
    """Message id, `msg_…`: the key of the upsert log."""
    direction: Direction
    """inbox (to a worker) or outbox (from a worker)."""
    kind: MessageKind
    from_: Annotated[Party, Field(alias="from")]
    """A task id, or "leader"."""
    to: Party
    """A task id, or "leader"."""
    task_id: TaskId
    """The task the message concerns."""
    body: str
    status: MessageStatus
    """pending, delivered, acknowledged or rejected."""
    priority: Priority
    sent_at: Timestamp
    delivered_at: Timestamp | None = None
    acknowledged_at: Timestamp | None = None
    reason: str | None = None
    """Why the message was rejected."""
    data: dict[str, Any] | None = None
    """Free-form details: source, contactId, idempotencyKey, contactType, rejectedAt, …"""

    @property
    def carried(self) -> int:
        """How many times the message went back to `pending` for a task's next attempt: its
        lines are in rounds (a line of a later round is newer, whatever its status)."""
        count = (self.data or {}).get(MessageData.CARRIED, 0)
        return count if isinstance(count, int) else 0

    def status_at(self) -> str | None:
        """When the message reached its current status."""
        if self.status is MessageStatus.REJECTED:
            at = (self.data or {}).get(MessageData.REJECTED_AT)
            return at if isinstance(at, str) else None
        return {
            MessageStatus.PENDING: self.sent_at,
            MessageStatus.DELIVERED: self.delivered_at,
            MessageStatus.ACKNOWLEDGED: self.acknowledged_at,
        }[self.status]


class MailboxChange(StateModel):
    """A later line of a mailbox file that records only what changed of a message written before
    (a status change, a decision): no body. It is told from a whole message by having no `body`;
    a reader merges it into the message's latest state. A field it names replaces the message's
    (null clears it); a field it leaves out is unchanged."""

    id: Annotated[str, Field(pattern=r"^msg_[0-9a-z]{1,32}$")]
    """The message it changes."""
    kind: MessageKind
    """The message's kind (unchanged; here so the line names its box and class alone)."""
    task_id: TaskId
    """The task the message concerns (unchanged; here for the same reason)."""
    status: MessageStatus
    """The message's status after the change."""
    delivered_at: Timestamp | None = None
    """Set when it changed; null clears it (a message carried to a task's next attempt)."""
    acknowledged_at: Timestamp | None = None
    """Set when it changed; null clears it."""
    reason: str | None = None
    """Why the message was rejected (set when it changed)."""
    data: dict[str, Any] | None = None
    """The message's whole `data` after the change (when it changed)."""

    def to_line(self) -> bytes:
        """One compact JSON line: the fields set, a cleared one as null."""
        return self.model_dump_json(exclude_unset=True).encode() + b"\n"

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_unset=True)


#: The fields of a message a change line may name besides those it always names.
CHANGEABLE = ("delivered_at", "acknowledged_at", "reason", "data")


def _line_kind(value: Any) -> str:
    """A mailbox line with a body is a whole message; one without, a change."""
    return "message" if isinstance(value, dict) and "body" in value else "change"


class MailboxLine(
    RootModel[
        Annotated[
            Annotated[MailboxMessage, Tag("message")] | Annotated[MailboxChange, Tag("change")],
            Discriminator(_line_kind),
        ]
    ]
):
    """Any line of a mailbox file: a whole message, or a change to one."""

    def to_line(self) -> bytes:
        return self.root.to_line()


class Checkpoint(StateModel):
    """checkpoints/<taskId>.json: the last state a task saved, given to its next attempt."""

    task_id: TaskId
    attempt: Annotated[int, Field(ge=1)]
    """The attempt that saved it."""
    saved_at: Timestamp
    state: Any = None
    """Whatever the worker saved: any JSON value (left out of the file when it is null)."""


class Run(StateModel):
    """manifest.json: the run."""

    run_id: RunId
    crew: str
    """The crew's name (crew.toml `[crew] name`)."""
    status: RunStatus
    """running or needs_review while live; completed, failed or cancelled once ended."""
    owner_session_id: str
    """The session allowed to change the run (others need --force)."""
    leader_epoch: Annotated[int, Field(ge=0)] = 0
    """Incremented each time a leader takes the run: fences out a stale leader."""
    created_at: Timestamp
    ended_at: Timestamp | None = None
    rerun_of: RunId | None = None
    """The run this one runs again (`crew rerun`); the tasks it did not run again were carried
    from that run as they had ended."""
    crew_dir: str
    """The folder that held crew.toml, relative to the crew home (`.` when it is the home; an
    older crew wrote it absolute, which still reads): `{crewDir}` and agents' relative `cwd`
    resolve against it."""
    config: CrewConfig
    """The crew definition as resolved when the run started."""
    state_version: int = STATE_VERSION
    """The format version of the state files; a newer one is refused."""


class Event(StateModel):
    """One line of events.jsonl. State-changing events carry the new state in `data`."""

    id: Annotated[str, Field(pattern=r"^evt_[0-9a-z]{1,32}$")]
    seq: Annotated[int, Field(ge=1)]
    """1, 2, 3, … per run, in order, unique."""
    run_id: RunId
    at: Timestamp
    type: EventType
    task_id: TaskId | None = None
    message: str | None = None
    """A one-line description for people."""
    data: dict[str, Any] | None = None
    """Details; `task` and `run` hold the new state of what changed, `mailboxMessage` the line
    the mailbox file got (a whole message, or what changed of one: see `change`)."""
    end_seq: Annotated[int, Field(ge=1)] | None = None
    """On every event but the last of a transaction of several: the seq of its last event, so a
    transaction cut short by a crash is told apart from a whole one (crew/store/eventlog.py)."""

    _carried: dict[str, Any] = PrivateAttr(default_factory=dict)

    @property
    def task_state(self) -> Task | None:
        """The new state of the task this event changed."""
        state: Task | None = self._state(EventData.TASK)
        return state

    @property
    def run_state(self) -> Run | None:
        """The new state of the run, if this event changed it."""
        state: Run | None = self._state(EventData.RUN)
        return state

    @property
    def mail_state(self) -> MailboxMessage | MailboxChange | None:
        """The mailbox line this event recorded: a whole message, or what changed of one."""
        state: MailboxLine | None = self._state(EventData.MESSAGE)
        return None if state is None else state.root

    @property
    def checkpoint_state(self) -> Checkpoint | None:
        """The checkpoint this event recorded."""
        state: Checkpoint | None = self._state(EventData.CHECKPOINT)
        return state

    def _state(self, key: str) -> Any:
        """The state carried under `key`, validated when first asked for (most readers never
        ask: it would make reading 2.6 times slower). Corrupt if it is not valid state."""
        if key not in self._carried:
            try:
                self._carried[key] = _carried_state(self.data, key)
            except ValidationError as exc:
                raise Corrupt(
                    f"Event {self.seq} of events.jsonl carries invalid state: "
                    f"{_invalid(key, exc)}.",
                    hint="`crew doctor --repair` sets the line aside.",
                ) from None
        return self._carried[key]


class CheckedEvent(Event):
    """An event whose carried state is validated as it is read: a line carrying invalid state
    is then a bad line, which the reader skips (the full check of a run, `crew doctor`)."""

    @model_validator(mode="after")
    def _check_carried(self) -> Self:
        carried, data = self._carried, self.data  # a private attribute is slow to reach
        for key in _CARRIED:
            try:
                carried[key] = _carried_state(data, key)
            except ValidationError as exc:
                raise ValueError(_invalid(key, exc)) from None
        return self


def _carried_state(data: dict[str, Any] | None, key: str) -> Any:
    raw = (data or {}).get(key)
    return None if raw is None else _CARRIED[key].model_validate(raw)


def _invalid(key: str, exc: ValidationError) -> str:
    error = exc.errors(include_url=False, include_input=False)[0]
    where = ".".join(str(part) for part in error["loc"])
    what = f"{where}: {error['msg']}" if where else error["msg"]
    return f"data.{key} is not valid ({what})"


#: What an event's `data` may carry as new state, and the model each must be.
_CARRIED: dict[str, type[StateModel] | type[MailboxLine]] = {
    EventData.TASK: Task,
    EventData.RUN: Run,
    EventData.MESSAGE: MailboxLine,
    EventData.CHECKPOINT: Checkpoint,
}


class LeaderInfo(StateModel):
    """.runtime/leader.json: who leads the run, refreshed every second."""

    pid: int
    host: str
    session: str
    epoch: int
    """The leader epoch this leader holds (see Run.leaderEpoch)."""
    started_at: Timestamp
    heartbeat_at: Timestamp
    """Refreshed every second; older than leaderStaleAfter means the leader is gone."""
    watcher: WatcherKind = WatcherKind.INOTIFY
    """How the leader notices mailbox writes: inotify, watchfiles, or poll (no file events)."""
    stopped_reason: str | None = None
    """Why the leader stopped leading (`interrupted by SIGINT`, `crashed: …`): set as it stops,
    so readers know at once that it is gone."""
    degraded: str | None = None
    """While a fault holds the leader's work back (a full disk, no file descriptor left, the run
    lock held elsewhere for long): what failed, and how. It retries, and goes on once it clears."""


TaskList = TypeAdapter(list[Task])
RunAdapter = TypeAdapter(Run)
LeaderAdapter = TypeAdapter(LeaderInfo)
