"""Helpers shared by the adapter tests: run a fake agent CLI from tests/fakes under `crew run`,
read what it received, and build the lines and messages the line-by-line tests feed an adapter."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from leaders import Leader, store_of, write_crew

from crew import clock, ids
from crew.models import MailboxMessage
from crew.paths import Home
from crew.registry import Box, Direction, MessageKind, MessageStatus, Priority
from crew.store.runstore import RunStore

FAKES = Path(__file__).parent / "fakes"


class FakeAgent:
    """tests/fakes/<name>.py, run as the one task `t` of a crew speaking `protocol`."""

    def __init__(self, name: str, protocol: str) -> None:
        self.script = FAKES / f"{name}.py"
        self.protocol = protocol
        self.marker = f"fake-{name} got "  # each fake echoes what it received on stderr

    def start(
        self, tmp_path: Path, home: Home, prompt: str, **agent: Any
    ) -> tuple[Leader, RunStore]:
        write_crew(
            tmp_path,
            [{"id": "t", "prompt": prompt}],
            command=[sys.executable, str(self.script)],
            agent={"protocol": self.protocol, **agent},
        )
        leader = Leader("run", "crew.toml", cwd=tmp_path)
        return leader, store_of(home, leader.run_id)

    def sent(self, store: RunStore) -> list[dict[str, Any]]:
        """What the fake received, in order."""
        return [
            json.loads(line.removeprefix(self.marker))
            for line in lines(store)
            if line.startswith(self.marker)
        ]


def log(store: RunStore) -> str:
    path = store.paths.log("t")
    return path.read_text() if path.exists() else ""


def lines(store: RunStore) -> list[str]:
    """The log's complete lines (the leader may be writing the last one)."""
    return log(store).split("\n")[:-1]


def notes(store: RunStore) -> list[str]:
    """The bodies of the reports the task sent."""
    return [m.body for m in store.messages(Box.OUTBOX) if m.kind is MessageKind.REPORT]


def message(kind: MessageKind, body: str) -> MailboxMessage:
    """A pending inbox message for task `t`, as the leader would deliver it."""
    return MailboxMessage(
        id=ids.new_message_id(),
        direction=Direction.INBOX,
        kind=kind,
        from_="leader",
        to="t",
        task_id="t",
        body=body,
        status=MessageStatus.PENDING,
        priority=Priority.NORMAL,
        sent_at=clock.now(),
    )


def line(**fields: Any) -> str:
    """One JSON line, as an agent CLI prints it."""
    return json.dumps(fields)
