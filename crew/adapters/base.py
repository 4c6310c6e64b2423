"""The adapter interface: how the leader speaks to each kind of agent.

The leader's core never knows which adapter a worker uses. It tells the adapter when the worker
starts, gives it each line the worker prints and each message to deliver, and asks it to
interrupt the agent; every time, the adapter answers with a Reaction: bytes to write to the
worker's stdin, and signals for the leader (a question, a report, the end of a turn, an error).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Protocol

from crew.models import MailboxMessage, Task
from crew.protocol import Parsed


@dataclass(frozen=True)
class TurnEnd:
    """The agent finished what it was asked and is idle (`error` when the turn failed).

    With no open question and nothing pending for it, the leader closes the agent's stdin; the
    task completes when the agent exits (or fails, if the turn failed).
    """

    error: str | None = None


@dataclass(frozen=True)
class AgentError:
    """The agent reported a protocol-level error. `fatal`: it cannot go on (the task fails)."""

    message: str
    fatal: bool = False


@dataclass(frozen=True)
class Withdrawn:
    """The agent took its open question back: the task no longer waits for an answer."""

    reason: str = ""


Signal = Parsed | TurnEnd | AgentError | Withdrawn


@dataclass
class Reaction:
    """An adapter's answer: bytes for the worker's stdin, signals for the leader."""

    write: bytes = b""
    signals: list[Signal] = field(default_factory=list)

    def __iadd__(self, other: Reaction) -> Reaction:
        self.write += other.write
        self.signals.extend(other.signals)
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

    def start(self, task: Task) -> Reaction:
        """The worker has just started: a handshake, the first prompt, or nothing."""

    def on_line(self, line: str) -> Reaction:
        """One line of the worker's stdout."""

    def deliver(self, message: MailboxMessage) -> Reaction:
        """Deliver a respond, steer, nudge or followUp message in the agent's own terms."""

    def interrupt(self) -> Reaction:
        """Stop what the agent is doing (before the task's worker is stopped)."""


#: Answers that approve a yes/no question put to an agent's supervisor; anything else declines.
YES = frozenset({"y", "yes", "true", "ok", "okay", "sure", "approve", "approved", "confirm"})


def confirms(answer: str) -> bool:
    """Whether an answer to a yes/no question says yes (only an explicit yes does)."""
    return answer.strip().lower() in YES


def json_object(line: str) -> dict[str, Any] | None:
    """A line an agent printed, if it is a JSON object (anything else is plain output)."""
    try:
        value = json.loads(line)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def json_line(payload: dict[str, Any]) -> bytes:
    """One compact JSON line: what every JSON-lines agent protocol reads."""
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"
