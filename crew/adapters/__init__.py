"""Adapters: how the leader speaks to each kind of agent, behind one interface.

The leader's core never knows which adapter a worker uses. It asks the adapter what to write when
the worker starts, how to write a message to it, and what each line the worker prints means.
"""

from __future__ import annotations

from typing import Protocol

from crew.config import AgentConfig
from crew.errors import UsageError
from crew.models import MailboxMessage, Task
from crew.protocol import Parsed
from crew.registry import AgentInput, AgentProtocol


class Adapter(Protocol):
    """One worker's side of a protocol (adapters may keep per-worker state)."""

    #: Send stderr through stdout's pipe: the log then holds both in exact arrival order, and
    #: lines on either stream are parsed. Protocols that frame stdout (JSON streams) keep them
    #: apart so a stderr write can never land inside a frame.
    merge_stderr: bool

    def opening(self, task: Task) -> bytes:
        """What to write to the worker's stdin as soon as it starts (may be empty)."""

    def frame(self, message: MailboxMessage) -> bytes:
        """The bytes that deliver `message` to the worker."""

    def parse(self, line: str) -> Parsed | None:
        """What one line of the worker's stdout says to the supervisor (None: plain output)."""


def adapter_for(agent: AgentConfig) -> Adapter:
    """A fresh adapter for a worker of this agent."""
    from crew.adapters.native import CrewAdapter, TextAdapter

    if agent.protocol is AgentProtocol.TEXT or (
        agent.protocol is AgentProtocol.CREW and agent.input is AgentInput.TEXT
    ):
        return TextAdapter()
    if agent.protocol is AgentProtocol.CREW:
        return CrewAdapter()
    raise UsageError(f"Agent protocol {agent.protocol!r} is not supported by this crew yet.")


def check_supported(agent: AgentConfig) -> None:
    """Refuse (before a run is created) an agent whose protocol has no adapter."""
    adapter_for(agent)
