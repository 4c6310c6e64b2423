"""What the verbs that change a run return: respond, steer, follow-up, nudge, cancel, handoff,
add."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from crew.domain.lease import LeaseState
from crew.errors import CrewError
from crew.models import MailboxMessage, Task
from crew.procs import Stopped
from crew.registry import MessageStatus, RunStatus
from crew.results import Result, overridden_note


@dataclass
class Sent(Result):
    """What respond, steer, follow-up and nudge did."""

    run_id: str
    #: What was sent, as the text view names it: answer, steer, follow-up, nudge.
    what: str
    #: The message (with --wait, as it was once the wait ended).
    message: MailboxMessage
    #: True when an idempotency key matched an earlier call: nothing was written.
    replayed: bool = False
    #: Older pending messages rejected to make room (backpressure).
    dropped: list[MailboxMessage] = field(default_factory=list)
    #: Undelivered messages of the same class for the task, this one included.
    pending: int = 0
    warn_pending: int = 20
    max_pending: int = 50
    #: The owner session that --force acted over, if any.
    overridden: str | None = None
    #: Whether a leader is running to deliver the message.
    leader: LeaseState = LeaseState.ABSENT
    #: The status the command waited for (--wait, --wait-ack), if it did.
    waited_for: str | None = None
    #: Why the wait ended without it: a timeout (the message stays queued), or a rejection.
    wait_failed: CrewError | None = None

    def failure(self) -> CrewError | None:
        return self.wait_failed

    @property
    def over_warning(self) -> bool:
        """More messages of this class wait for the task than the warning threshold."""
        return self.pending > self.warn_pending and not self.replayed

    @property
    def undelivered_without_leader(self) -> bool:
        return self.leader is not LeaseState.ALIVE and self.message.status is MessageStatus.PENDING

    def warnings(self) -> list[str]:
        found = [
            f"dropped the oldest pending {d.kind} {d.id} to {d.task_id}: more than "
            f"{self.max_pending} were waiting (backpressure)"
            for d in self.dropped
        ]
        if self.over_warning:
            found.append(
                f"task {self.message.task_id} has {self.pending} undelivered message(s) of this "
                f"kind (warning above {self.warn_pending}; beyond {self.max_pending} the oldest "
                "is dropped)"
            )
        return found

    def notes(self) -> list[str]:
        return overridden_note(self.overridden)

    def to_json(self) -> dict[str, Any]:
        data = self.message.to_dict()
        data.update(
            runId=self.run_id,
            replayed=self.replayed,
            dropped=[m.id for m in self.dropped],
            pending=self.pending,
            leader=self.leader.value,
            warnings=self.warnings(),
        )
        if self.overridden:
            data["overridden"] = self.overridden
        if self.waited_for:
            data["waitedFor"] = self.waited_for
        if self.wait_failed is not None:
            data["error"] = self.wait_failed.message
        return data


@dataclass
class Cancelled(Result):
    """What a cancel did."""

    run_id: str
    task_id: str | None
    #: Tasks this cancel ended (dependents cancelled with them included).
    tasks: list[str] = field(default_factory=list)
    #: Pending messages rejected because their task ended.
    rejected: list[MailboxMessage] = field(default_factory=list)
    #: Worker processes this cancel signalled, and how each one ended.
    stopped: list[Stopped] = field(default_factory=list)
    #: Set when there was nothing to cancel: the run (or task) had already ended.
    already: str | None = None
    run_status: RunStatus = RunStatus.RUNNING
    overridden: str | None = None

    def notes(self) -> list[str]:
        return overridden_note(self.overridden)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "runId": self.run_id,
            "task": self.task_id,
            "cancelled": self.tasks,
            "rejected": [m.id for m in self.rejected],
            "stopped": [
                {"task": s.task_id, "pid": s.pid, "outcome": s.outcome.value} for s in self.stopped
            ],
            "runStatus": self.run_status.value,
        }
        if self.already:
            data["already"] = self.already
        if self.overridden:
            data["overridden"] = self.overridden
        return data


@dataclass
class HandedOff(Result):
    """What a handoff did."""

    run_id: str
    previous: str
    owner: str
    overridden: str | None = None

    @property
    def changed(self) -> bool:
        return self.previous != self.owner

    def notes(self) -> list[str]:
        return overridden_note(self.overridden)

    def to_json(self) -> dict[str, Any]:
        data = {
            "runId": self.run_id,
            "previous": self.previous,
            "owner": self.owner,
            "changed": self.changed,
        }
        if self.overridden:
            data["overridden"] = self.overridden
        return data


@dataclass
class Added(Result):
    """What an add did: the task, as it was recorded."""

    run_id: str
    task: Task
    #: True when an idempotency key matched an earlier add: nothing was written.
    replayed: bool = False
    overridden: str | None = None
    #: Whether a leader is running to start the task.
    leader: LeaseState = LeaseState.ABSENT

    def notes(self) -> list[str]:
        return overridden_note(self.overridden)

    def quiet_lines(self) -> list[str]:
        return [self.task.id]

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "runId": self.run_id,
            "task": self.task.to_dict(),
            "replayed": self.replayed,
            "leader": self.leader.value,
        }
        if self.overridden:
            data["overridden"] = self.overridden
        return data
