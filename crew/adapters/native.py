"""crew's own protocol: `@supervisor` lines out, JSON frames (or plain lines) in."""

from __future__ import annotations

from crew.models import MailboxMessage, Task
from crew.protocol import Parsed, json_frame, parse_line, text_frame


class CrewAdapter:
    """The worker protocol as documented in docs/worker-protocol.md: JSON frames on stdin."""

    merge_stderr = True

    def opening(self, task: Task) -> bytes:
        return b""  # the prompt reaches the worker through {prompt} in its command

    def frame(self, message: MailboxMessage) -> bytes:
        return json_frame(message)

    def parse(self, line: str) -> Parsed | None:
        return parse_line(line)


class TextAdapter(CrewAdapter):
    """For programs that read plain lines: each message is its body, on one sanitized line."""

    def frame(self, message: MailboxMessage) -> bytes:
        return text_frame(message)
