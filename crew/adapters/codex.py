"""The codex adapter (not written yet)."""

from __future__ import annotations

from crew.adapters import Reaction
from crew.config import AgentConfig
from crew.errors import UsageError
from crew.models import MailboxMessage, Task


class CodexAdapter:
    merge_stderr = False

    def __init__(self, agent: AgentConfig) -> None:
        raise UsageError("Agent protocol 'codex' is not supported yet.")

    def start(self, task: Task) -> Reaction:
        raise NotImplementedError

    def on_line(self, line: str) -> Reaction:
        raise NotImplementedError

    def deliver(self, message: MailboxMessage) -> Reaction:
        raise NotImplementedError

    def interrupt(self) -> Reaction:
        raise NotImplementedError
