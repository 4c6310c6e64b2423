"""Pydantic models of every file crew writes (SPEC §3): JSON names are camelCase.

Field order is the order keys appear on disk, so a `git diff` of a snapshot shows only what changed.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter
from pydantic.alias_generators import to_camel

from crew.clock import TIMESTAMP_PATTERN
from crew.config import CrewConfig
from crew.ids import RUN_ID_PATTERN, TASK_ID_PATTERN
from crew.registry import (
    ContactType,
    Direction,
    EventType,
    MessageKind,
    MessageStatus,
    Priority,
    RunStatus,
    TaskStatus,
)

#: The version of the snapshot format this code writes; older ones are read forward.
STATE_VERSION = 1

Timestamp = Annotated[str, Field(pattern=TIMESTAMP_PATTERN)]
TaskId = Annotated[str, Field(pattern=TASK_ID_PATTERN)]
RunId = Annotated[str, Field(pattern=RUN_ID_PATTERN)]
#: A task id, or "leader" for the leader side of a message.
Party = Annotated[str, Field(pattern=r"^(leader|[a-z0-9][a-z0-9_.-]{0,63})$")]


class StateModel(BaseModel):
    """Base of the state-file models: camelCase on disk, snake_case in Python."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
        extra="ignore",
    )

    def to_line(self) -> bytes:
        """One compact JSON line ending in `\\n`; keys in schema order, no empty optionals."""
        return self.model_dump_json(exclude_none=True).encode() + b"\n"

    def to_dict(self) -> dict[str, Any]:
        """The JSON form as a dict (camelCase keys, optional fields left out)."""
        return self.model_dump(mode="json", exclude_none=True)


class SupervisorContact(StateModel):
    """A question a worker asked; answered exactly once."""

    id: Annotated[str, Field(pattern=r"^q_[0-9a-z]{1,32}$")]
    task_id: TaskId
    type: ContactType
    prompt: str
    options: list[str] = Field(default_factory=list)
    asked_at: Timestamp
    answered_at: Timestamp | None = None
    answer_id: str | None = None


class Task(StateModel):
    id: TaskId
    agent: str
    title: str
    prompt: str
    status: TaskStatus
    depends_on: list[TaskId] = Field(default_factory=list)
    attempt: Annotated[int, Field(ge=0)] = 0
    max_attempts: Annotated[int, Field(ge=1)] = 1
    pid: int | None = None
    started_at: Timestamp | None = None
    ended_at: Timestamp | None = None
    waiting_since: Timestamp | None = None
    last_output_at: Timestamp | None = None
    exit_code: int | None = None
    contact: SupervisorContact | None = None
    nudges: Annotated[int, Field(ge=0)] = 0
    error: str | None = None


class MailboxMessage(StateModel):
    """One line of a mailbox file; a later line with the same id supersedes it."""

    id: Annotated[str, Field(pattern=r"^msg_[0-9a-z]{1,32}$")]
    direction: Direction
    kind: MessageKind
    from_: Annotated[Party, Field(alias="from")]
    to: Party
    task_id: TaskId
    body: str
    status: MessageStatus
    priority: Priority
    sent_at: Timestamp
    delivered_at: Timestamp | None = None
    acknowledged_at: Timestamp | None = None
    reason: str | None = None
    data: dict[str, Any] | None = None


class Run(StateModel):
    """manifest.json: the run."""

    run_id: RunId
    crew: str
    status: RunStatus
    owner_session_id: str
    leader_epoch: Annotated[int, Field(ge=0)] = 0
    created_at: Timestamp
    ended_at: Timestamp | None = None
    #: The folder that held crew.toml: `{crewDir}` and agents' relative `cwd` resolve against it.
    crew_dir: str
    config: CrewConfig
    state_version: int = STATE_VERSION


class Event(StateModel):
    """One line of events.jsonl. State-changing events carry the new state in `data`."""

    id: Annotated[str, Field(pattern=r"^evt_[0-9a-z]{1,32}$")]
    seq: Annotated[int, Field(ge=1)]
    run_id: RunId
    at: Timestamp
    type: EventType
    task_id: TaskId | None = None
    message: str | None = None
    data: dict[str, Any] | None = None


class LeaderInfo(StateModel):
    """.runtime/leader.json: who leads the run, refreshed every second."""

    pid: int
    host: str
    session: str
    epoch: int
    started_at: Timestamp
    heartbeat_at: Timestamp
    #: How the leader notices mailbox writes: "watch" (file events) or "poll" (stat fallback).
    delivery: str = "watch"


TaskList = TypeAdapter(list[Task])
RunAdapter = TypeAdapter(Run)
LeaderAdapter = TypeAdapter(LeaderInfo)
