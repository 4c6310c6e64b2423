"""What a worker is given, as the SDK reads it: the JSON frames on its stdin (crew/protocol.py
writes them), and the checkpoint an earlier attempt of its task saved."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from crew.registry import MessageData, MessageKind, MessageSource, Priority
from crew.text import first_line

#: What a worker can be given, in the order it takes them: respond, steer, nudge, followUp.
WORKER_INBOUND = frozenset(
    {MessageKind.RESPOND, MessageKind.STEER, MessageKind.NUDGE, MessageKind.FOLLOW_UP}
)


@dataclass
class Message:
    """A message a worker was given (the SDK's view of a frame)."""

    id: str
    kind: MessageKind
    body: str
    priority: str = Priority.NORMAL
    data: dict[str, Any] = field(default_factory=dict)
    #: Ids of messages merged into this one (it stands for all of them).
    merged: list[str] = field(default_factory=list)

    @property
    def summary(self) -> str:
        """The first line of the body, with `(+N)` when N more messages were merged in."""
        first = first_line(self.body)
        return f"{first} (+{len(self.merged)})" if self.merged else first

    @property
    def ids(self) -> list[str]:
        return [self.id, *self.merged]


def is_children(message: Message) -> bool:
    """Whether a message holds the results of spawned tasks (never merged: `spawn` takes it)."""
    return message.data.get(MessageData.SOURCE) == MessageSource.CHILDREN


def child_told(message: Message, request: tuple[str, str | None]) -> dict[str, Any] | None:
    """What a children message says of the child a spawn that waits asked for (its agent, and
    its id if it named one): None when it is about others (the refusal of a spawn that did not
    wait, say)."""
    agent, task_id = request
    children = message.data.get(MessageData.CHILDREN) if is_children(message) else None
    for child in children or []:
        named = isinstance(child, dict) and task_id in (None, child.get("id"))
        if named and child.get("agent") == agent and child.get("wait") is not False:
            return {k: v for k, v in child.items() if k != "wait"}
    return None


def priority_rank(priority: str) -> int:
    """How urgent a priority a frame named is (unknown ones count as low)."""
    try:
        return Priority(priority).rank
    except ValueError:
        return 0


def parse_frame(line: bytes) -> Message | None:
    try:
        frame = json.loads(line)
        kind = MessageKind(frame["type"])
    except (ValueError, KeyError, TypeError):
        return None  # not a frame (a text-mode line, or noise): ignored
    if kind not in WORKER_INBOUND:
        return None
    data = frame.get("data")
    return Message(
        id=str(frame.get("id", "")),
        kind=kind,
        body=str(frame.get("body", "")),
        priority=str(frame.get("priority", Priority.NORMAL)),
        data=data if isinstance(data, dict) else {},
    )


def read_checkpoint(path: str | os.PathLike[str] | None, task_id: str) -> tuple[bool, Any]:
    """Whether `$CREW_CHECKPOINT`'s file holds a state saved for `task_id`, and the state (a
    saved None is None: crew's files leave null fields out). Missing or unreadable: not found."""
    try:
        saved = json.loads(Path(path).read_bytes()) if path is not None else None
    except (OSError, ValueError, RecursionError):
        return False, None
    if not isinstance(saved, dict) or saved.get("taskId") != task_id:
        return False, None
    return True, saved.get("state")
