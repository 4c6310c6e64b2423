"""Every kind of name crew writes to disk, each in one registry.

No string literal for a task status, run status, message kind, message status, contact type or
event type appears anywhere else in the code: import the enum member from here.
"""

from __future__ import annotations

from enum import StrEnum


class TaskStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    WAITING = "waiting"
    COMPLETED = "completed"
    FAILED = "failed"
    NEEDS_REVIEW = "needs_review"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL_TASK_STATUSES


TERMINAL_TASK_STATUSES = frozenset({TaskStatus.COMPLETED, TaskStatus.FAILED, TaskStatus.CANCELLED})
#: A worker process exists (or should) for a task in these statuses.
LIVE_TASK_STATUSES = frozenset({TaskStatus.RUNNING, TaskStatus.WAITING, TaskStatus.NEEDS_REVIEW})

_S = TaskStatus

#: The one transition table. A status not listed as a key has no way out (terminal).
#: `-> queued` from a live status is a retry or a restart of the worker (new attempt).
#: `queued -> waiting` is a task whose spending reached a limit before its next attempt started:
#: it asks first (crew/domain/budget.py), with no worker.
TASK_TRANSITIONS: dict[TaskStatus, frozenset[TaskStatus]] = {
    _S.QUEUED: frozenset({_S.RUNNING, _S.WAITING, _S.FAILED, _S.CANCELLED}),
    _S.RUNNING: frozenset(
        {_S.WAITING, _S.NEEDS_REVIEW, _S.COMPLETED, _S.FAILED, _S.CANCELLED, _S.QUEUED}
    ),
    _S.WAITING: frozenset(
        {_S.RUNNING, _S.NEEDS_REVIEW, _S.COMPLETED, _S.FAILED, _S.CANCELLED, _S.QUEUED}
    ),
    _S.NEEDS_REVIEW: frozenset(
        {_S.RUNNING, _S.WAITING, _S.COMPLETED, _S.FAILED, _S.CANCELLED, _S.QUEUED}
    ),
}


def can_transition(current: TaskStatus, new: TaskStatus) -> bool:
    """Whether the transition table allows `current -> new`."""
    return new in TASK_TRANSITIONS.get(current, frozenset())


class RunStatus(StrEnum):
    RUNNING = "running"
    NEEDS_REVIEW = "needs_review"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL_RUN_STATUSES


TERMINAL_RUN_STATUSES = frozenset({RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED})


class Direction(StrEnum):
    INBOX = "inbox"
    OUTBOX = "outbox"


class Box(StrEnum):
    """The three mailbox files of a run."""

    INBOX = "inbox"
    OUTBOX = "outbox"
    STEERING = "steering"

    @property
    def filename(self) -> str:
        return f"{self.value}.jsonl"


#: The files that hold messages to workers (respond and followUp; steer and nudge).
INBOUND_BOXES = (Box.INBOX, Box.STEERING)
#: The party on the other side of every message: `from` of inbound ones, `to` of outbound ones.
LEADER = "leader"


class MessageKind(StrEnum):
    RESPOND = "respond"
    FOLLOW_UP = "followUp"
    STEER = "steer"
    NUDGE = "nudge"
    CONTACT = "contact"
    REPORT = "report"
    ACK = "ack"

    @property
    def direction(self) -> Direction:
        return Direction.OUTBOX if self in _OUTBOX_KINDS else Direction.INBOX

    @property
    def box(self) -> Box:
        """The mailbox file that holds messages of this kind."""
        return _KIND_BOX[self]

    @property
    def default_priority(self) -> Priority:
        return _KIND_PRIORITY.get(self, Priority.NORMAL)

    @property
    def delivery_rank(self) -> int:
        """Delivery order to a worker: respond, steer, nudge, followUp (lower goes first)."""
        return _DELIVERY_ORDER.index(self) if self in _DELIVERY_ORDER else len(_DELIVERY_ORDER)


class MessageStatus(StrEnum):
    PENDING = "pending"
    DELIVERED = "delivered"
    ACKNOWLEDGED = "acknowledged"
    REJECTED = "rejected"


class Priority(StrEnum):
    LOW = "low"
    NORMAL = "normal"
    HIGH = "high"

    @property
    def rank(self) -> int:
        """Higher is more urgent."""
        return _PRIORITY_ORDER.index(self)


_PRIORITY_ORDER = (Priority.LOW, Priority.NORMAL, Priority.HIGH)


_OUTBOX_KINDS = frozenset({MessageKind.CONTACT, MessageKind.REPORT, MessageKind.ACK})
_KIND_BOX = {
    MessageKind.RESPOND: Box.INBOX,
    MessageKind.FOLLOW_UP: Box.INBOX,
    MessageKind.STEER: Box.STEERING,
    MessageKind.NUDGE: Box.STEERING,
    MessageKind.CONTACT: Box.OUTBOX,
    MessageKind.REPORT: Box.OUTBOX,
    MessageKind.ACK: Box.OUTBOX,
}
_KIND_PRIORITY = {MessageKind.RESPOND: Priority.HIGH, MessageKind.STEER: Priority.HIGH}
_DELIVERY_ORDER = (MessageKind.RESPOND, MessageKind.STEER, MessageKind.NUDGE, MessageKind.FOLLOW_UP)


class ContactType(StrEnum):
    """What a worker can say on an `@supervisor <type>: <text>` line."""

    NEED_CONFIRMATION = "need_confirmation"
    NEED_INPUT = "need_input"
    NEED_SELECTION = "need_selection"
    STATUS = "status"
    PROGRESS = "progress"
    NOTE = "note"
    ACK = "ack"
    DECISION = "decision"
    CHECKPOINT = "checkpoint"
    SPAWN = "spawn"  # add a task to the run, as this task's child (`wait`: until it ends)
    WITHDRAW = "withdraw"  # the worker takes its open question back: it no longer waits

    @property
    def blocking(self) -> bool:
        """Blocking contacts put the task in `waiting` until someone responds."""
        return self in BLOCKING_CONTACTS

    @property
    def report(self) -> bool:
        return self in REPORT_CONTACTS


BLOCKING_CONTACTS = frozenset(
    {ContactType.NEED_CONFIRMATION, ContactType.NEED_INPUT, ContactType.NEED_SELECTION}
)
REPORT_CONTACTS = frozenset({ContactType.STATUS, ContactType.PROGRESS, ContactType.NOTE})


class MessageData(StrEnum):
    """Keys crew itself puts in `MailboxMessage.data` (a worker's own keys live beside them)."""

    SESSION = "session"  # who sent it
    SOURCE = "source"  # what sent it: a MessageSource
    IDEMPOTENCY_KEY = "idempotencyKey"
    CONTACT_ID = "contactId"  # the question an answer (or a contact) is about
    CONTACT_TYPE = "contactType"
    OPTIONS = "options"  # of a need_selection contact
    REPORT_TYPE = "type"  # of a report: status, progress or note
    FOLDED = "folded"  # a report standing for this many (rate limit): the task's log has them all
    LENGTH = "length"  # a progress line kept as an excerpt: its length as printed (the log has it)
    ATTEMPT = "attempt"  # the task attempt it was delivered to
    CARRIED = "carried"  # how many times it went back to pending for a task's next attempt
    AWAITS_QUESTION = "awaitsQuestion"  # an answer held for a restarted task: the question it fits
    DECISIONS = "decisions"  # the worker's attention decisions about it
    SECRET = "secret"  # a secret question, or its answer (whose body stands in for it)
    CHILDREN = "children"  # of a children message: [{id, agent, status, result?, error?}]
    REJECTED_AT = "rejectedAt"
    QUESTION = "question"  # in an answer's frame only: the question it answers, as asked


class MessageSource(StrEnum):
    """What sent a message, when it was not a person typing a verb (`data.source`)."""

    NUDGE = "nudge"  # `crew nudge`
    MONITOR = "monitor"  # the stall monitor's automatic nudge
    AUTO_RESPOND = "autoRespond"  # an autoRespond rule; written `autoRespond[<index>]`
    LIMIT = "limit"  # a task's limit was raised: crew tells the agent to go on
    CHILDREN = "children"  # the results of the tasks a task spawned (or why a spawn was refused)


class EventData(StrEnum):
    """Keys of `Event.data` that crew reads back: the new state an event carries, and details."""

    RUN = "run"
    TASK = "task"
    MESSAGE = "mailboxMessage"
    DECISION = "decision"  # an attention decision, as the worker printed it
    CONTACT = "contact"  # the question an answer closed
    CONTACT_ID = "contactId"  # the question a withdrawal took back
    CHECKPOINT = "checkpoint"  # a task's saved state: {taskId, attempt, savedAt, state}
    SESSION = "session"  # who acted: every event a command causes carries it
    DEFAULT_SESSION = "defaultSession"  # who the caller is, when --session named someone else


class DecisionAction(StrEnum):
    """What a worker's attention loop decided (`@supervisor decision: {"action": …}`)."""

    PICK = "pick"  # focus on the next queued item
    CONTINUE = "continue"  # keep the current focus; the new item waits
    PREEMPT = "preempt"  # set the current focus aside (it resurfaces) for the new item
    CANCEL = "cancel"  # drop the current focus for the new item
    MERGE = "merge"  # fold the new item into the current focus
    DEFER = "defer"  # put the new item aside until nothing else is queued
    DONE = "done"  # the current focus is finished


#: Decisions that change what a worker does about another item: shown as that item's history.
REDIRECTING_DECISIONS = frozenset(
    {DecisionAction.PREEMPT, DecisionAction.MERGE, DecisionAction.CANCEL}
)


class WatcherKind(StrEnum):
    """How a process notices writes to a run's files."""

    INOTIFY = "inotify"
    WATCHFILES = "watchfiles"
    POLL = "poll"  # no file events: file status is polled


class EventType(StrEnum):
    """Every event type crew records in events.jsonl."""

    RUN_CREATED = "run.created"
    RUN_FLAGGED = "run.flagged"
    RUN_CLEARED = "run.cleared"
    RUN_RESUMED = "run.resumed"
    RUN_ENDED = "run.ended"
    LEADER_STARTED = "leader.started"
    LEADER_STOPPED = "leader.stopped"
    LEADER_ERROR = "leader.error"
    LEADER_CRASHED = "leader.crashed"
    LEADER_DEGRADED = "leader.degraded"  # a fault (full disk, no descriptors) holds work back
    LEADER_RECOVERED = "leader.recovered"  # the fault cleared: what it held back is done
    TASK_QUEUED = "task.queued"
    TASK_CARRIED = "task.carried"  # `crew rerun`: a task that ended in the earlier run, as it ended
    TASK_STARTED = "task.started"
    TASK_PLACED = "task.placed"  # a remote worker runs: on which node, with which pid there
    TASK_WAITING = "task.waiting"
    TASK_RESPONDED = "task.responded"
    TASK_FLAGGED = "task.flagged"
    TASK_ACTIVE = "task.active"
    TASK_RETRIED = "task.retried"
    TASK_COMPLETED = "task.completed"
    TASK_FAILED = "task.failed"
    TASK_CANCELLED = "task.cancelled"
    TASK_INTERRUPTED = "task.interrupted"
    TASK_CHECKPOINTED = "task.checkpointed"
    SUPERVISOR_CONTACT = "supervisor.contact"
    SUPERVISOR_REPORT = "supervisor.report"
    SUPERVISOR_MALFORMED = "supervisor.malformed"
    SUPERVISOR_WITHDRAWN = "supervisor.withdrawn"
    AGENT_STEERED = "agent.steered"
    AGENT_FOLLOWED_UP = "agent.followed_up"
    AGENT_NUDGED = "agent.nudged"
    AGENT_ERROR = "agent.error"
    AGENT_SESSION = "agent.session"
    AGENT_RESULT = "agent.result"
    AGENT_USAGE = "agent.usage"
    AGENT_VERSION = "agent.version"
    TASK_LIMIT_REACHED = "task.limit_reached"
    TASK_LIMIT_RAISED = "task.limit_raised"
    MAILBOX_DELIVERED = "mailbox.delivered"
    MAILBOX_ACKNOWLEDGED = "mailbox.acknowledged"
    MAILBOX_REJECTED = "mailbox.rejected"
    MAILBOX_DROPPED = "mailbox.dropped"
    MAILBOX_HELD = "mailbox.held"
    MAILBOX_CARRIED = "mailbox.carried"
    OWNERSHIP_OVERRIDDEN = "ownership.overridden"
    OWNERSHIP_TRANSFERRED = "ownership.transferred"
    ATTENTION_DECISION = "attention.decision"
    STATE_REPAIRED = "state.repaired"
    NOTIFY_FAILED = "notify.failed"  # a [[notify]] command failed, timed out, or was not run


#: The event recorded when a task enters each status.
TASK_STATUS_EVENT: dict[TaskStatus, EventType] = {
    TaskStatus.QUEUED: EventType.TASK_QUEUED,
    TaskStatus.RUNNING: EventType.TASK_STARTED,
    TaskStatus.WAITING: EventType.TASK_WAITING,
    TaskStatus.NEEDS_REVIEW: EventType.TASK_FLAGGED,
    TaskStatus.COMPLETED: EventType.TASK_COMPLETED,
    TaskStatus.FAILED: EventType.TASK_FAILED,
    TaskStatus.CANCELLED: EventType.TASK_CANCELLED,
}


class NotifyTrigger(StrEnum):
    """Short names a `[[notify]]` entry's `on` may use besides any event type."""

    CONTACT = "contact"  # a worker asked a question
    FLAGGED = "flagged"  # a task was flagged needs_review
    FAILED = "failed"  # a task failed for good (no attempt left)

    @property
    def event(self) -> EventType:
        return _TRIGGER_EVENT[self]


_TRIGGER_EVENT = {
    NotifyTrigger.CONTACT: EventType.SUPERVISOR_CONTACT,
    NotifyTrigger.FLAGGED: EventType.TASK_FLAGGED,
    NotifyTrigger.FAILED: EventType.TASK_FAILED,
}
#: Events no notification is run for: a failing command would notify of its own failure.
UNNOTIFIABLE_EVENTS = frozenset({EventType.NOTIFY_FAILED})


def notify_event(name: str) -> EventType | None:
    """The event type a `[[notify]]` trigger names (a NotifyTrigger or an event type), if any."""
    if name in NotifyTrigger.__members__.values():
        return NotifyTrigger(name).event
    if name in EventType.__members__.values():
        return EventType(name)
    return None


class AgentInput(StrEnum):
    """How the leader writes messages to a worker's stdin."""

    JSONL = "jsonl"
    TEXT = "text"


class AgentProtocol(StrEnum):
    """The adapter that speaks to an agent."""

    CREW = "crew"
    TEXT = "text"
    PI = "pi"
    CLAUDE_CODE = "claude-code"
    CODEX = "codex"


class ExecutorKind(StrEnum):
    """What runs the workers (crew.toml `[crew] executor`; crew/executors)."""

    LOCAL = "local"
    """Child processes of the leader, on its machine."""
    RAY = "ray"
    """Processes on the nodes of a Ray cluster, one Ray actor each (the `crew[ray]` extra)."""


class RayWorkspace(StrEnum):
    """How a worker on a Ray node gets the files it works on (`[ray] workspace`)."""

    SHARED = "shared"
    """The nodes see the leader's folders at the same paths (one machine, a shared disk)."""
    UPLOAD = "upload"
    """The agent's folder is uploaded to each node (Ray's `working_dir`): a copy; what the
    worker changes stays on its node."""
    GIT = "git"
    """Each worker clones `[ray] repo` at `ref` into a folder of its own on its node."""


class ApprovalPolicy(StrEnum):
    """When Codex asks before it acts (its own setting, passed through when crew.toml sets it)."""

    UNTRUSTED = "untrusted"
    ON_FAILURE = "on-failure"
    ON_REQUEST = "on-request"
    NEVER = "never"


class Approvals(StrEnum):
    """What an agent adapter does with the agent's requests to run tools."""

    ASK = "ask"  # each request becomes a need_confirmation question
    ALLOW = "allow"
    DENY = "deny"


class WorkerRight(StrEnum):
    """What a worker may do to its own run beyond steering, following up and nudging its tasks
    and cancelling its own (crew.toml: `may = [...]` of its agent)."""

    RESPOND = "respond"  # answer questions (a lead agent answering its workers)
    CANCEL = "cancel"  # cancel other tasks, or the whole run
    HANDOFF = "handoff"  # give the run to another session
    SPAWN = "spawn"  # add tasks to the run (`crew add`, `@supervisor spawn:`)
    FORCE = "force"  # with --force, do anything the owner may (recorded as ownership.overridden)
