"""crew's own protocol: `@supervisor` lines out, JSON frames (or plain lines) in."""

from __future__ import annotations

from crew.adapters import Reaction
from crew.models import MailboxMessage, Task
from crew.protocol import json_frame, parse_line, text_frame


class CrewAdapter:
    """The worker protocol (docs/worker-protocol.md): JSON frames on stdin."""

    merge_stderr = True
    environment: dict[str, str] = {}  # noqa: RUF012  # never changed: the protocol needs nothing

    def start(self, task: Task) -> Reaction:
        return Reaction()  # the prompt reaches the worker through {prompt} in its command

    def on_line(self, line: str) -> Reaction:
        parsed = parse_line(line)
        return Reaction(signals=[parsed] if parsed is not None else [])

    def deliver(self, message: MailboxMessage) -> Reaction:
        return Reaction(write=json_frame(message))

    def interrupt(self) -> Reaction:
        return Reaction()  # a crew worker is stopped by signals


class TextAdapter(CrewAdapter):
    """For programs that read plain lines: each message is its body, on one sanitized line."""

    def deliver(self, message: MailboxMessage) -> Reaction:
        return Reaction(write=text_frame(message))
