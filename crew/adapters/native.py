"""crew's own protocol: `@supervisor` lines out, JSON frames (or plain lines) in."""

from __future__ import annotations

from collections.abc import Callable

from crew.adapters.base import Reaction
from crew.config import AgentConfig
from crew.models import MailboxMessage, Task
from crew.protocol import json_frame, parse_line, text_frame
from crew.registry import AgentInput


class CrewAdapter:
    """The worker protocol (docs/worker-protocol.md): JSON frames on stdin, or with the agent's
    `input = "text"`, each message's body on one sanitized line."""

    merge_stderr = True
    environment: dict[str, str] = {}  # noqa: RUF012  # never changed: the protocol needs nothing

    def __init__(self, agent: AgentConfig) -> None:
        plain = agent.input is AgentInput.TEXT
        self._frame: Callable[[MailboxMessage], bytes] = text_frame if plain else json_frame
        self.answers_only_while_asking = plain

    def command(self, argv: list[str], task: Task) -> list[str]:
        return argv

    def start(self, task: Task) -> Reaction:
        return Reaction()  # the prompt reaches the worker through {prompt} in its command

    def on_line(self, line: str) -> Reaction:
        parsed = parse_line(line)
        return Reaction(signals=[parsed] if parsed is not None else [])

    def deliver(self, message: MailboxMessage) -> Reaction:
        return Reaction(write=self._frame(message))

    def interrupt(self) -> Reaction:
        return Reaction()  # a crew worker is stopped by signals


class TextAdapter(CrewAdapter):
    """`protocol = "text"`: the crew protocol with plain lines in, whatever `input` says."""

    def __init__(self, agent: AgentConfig) -> None:
        super().__init__(agent)
        self._frame = text_frame
        self.answers_only_while_asking = True
