"""Helpers shared by the adapter tests: run a fake agent CLI from tests/fakes under `crew run`
(and kill its leader, then resume the run), read what it received, and build the lines and
messages the line-by-line tests feed an adapter."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from leaders import Leader, store_of, write_crew

from crew import clock, ids
from crew.models import MailboxMessage
from crew.paths import Home
from crew.registry import Box, Direction, MessageKind, MessageStatus, Priority
from crew.store.runstore import RunStore

FAKES = Path(__file__).parent / "fakes"


@dataclass
class Launch:
    """One start of a fake agent: its arguments, and what it received, in order."""

    argv: list[str]
    sent: list[dict[str, Any]] = field(default_factory=list)


class FakeAgent:
    """tests/fakes/<name>.py, run as the one task `t` of a crew speaking `protocol`."""

    def __init__(self, name: str, protocol: str) -> None:
        self.script = FAKES / f"{name}.py"
        self.protocol = protocol
        self.marker = f"fake-{name} got "  # each fake echoes what it received on stderr
        self.launched = f"fake-{name} argv "  # and, first of all, its arguments

    def start(
        self, tmp_path: Path, home: Home, prompt: str, *, args: tuple[str, ...] = (), **agent: Any
    ) -> tuple[Leader, RunStore]:
        write_crew(
            tmp_path,
            [{"id": "t", "prompt": prompt}],
            command=[sys.executable, str(self.script), *args],
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

    def launches(self, store: RunStore) -> list[Launch]:
        """Each start of the fake (one per attempt), in order."""
        found: list[Launch] = []
        for line in lines(store):
            if line.startswith(self.launched):
                found.append(Launch(json.loads(line.removeprefix(self.launched))))
            elif line.startswith(self.marker):
                found[-1].sent.append(json.loads(line.removeprefix(self.marker)))
        return found


def killed_and_resumed(leader: Leader, store: RunStore, cwd: Path) -> Leader:
    """SIGKILL the leader (its agent keeps running, cut off), then `crew resume` the run."""
    leader.process.kill()
    leader.finish()
    assert not store.state().tasks["t"].status.terminal  # cut off mid-conversation
    return Leader("resume", leader.run_id, cwd=cwd)


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
