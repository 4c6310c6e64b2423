"""What the commands that read a run return: runs, status, mailbox."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

from crew.domain.lease import Lease, LeaseState
from crew.models import MailboxMessage, Run, Task, Usage
from crew.registry import Box
from crew.results import Result


@dataclass
class RunSummary:
    """One run in `crew runs`."""

    run_id: str
    run: Run | None
    counts: dict[str, int] = field(default_factory=dict)
    problem: str | None = None

    def to_json(self) -> dict[str, Any]:
        if self.run is None:
            return {"runId": self.run_id, "problem": self.problem}
        data = self.run.to_dict()
        data.pop("config", None)
        data["tasks"] = self.counts
        if self.problem:
            data["problem"] = self.problem
        return data


@dataclass
class RunList(Result):
    """`crew runs`: every run of the home, newest first."""

    runs: list[RunSummary]

    def quiet_lines(self) -> list[str]:
        return [summary.run_id for summary in self.runs]  # as `docker ps -q`

    def to_json(self) -> list[dict[str, Any]]:
        return [summary.to_json() for summary in self.runs]


#: Undelivered messages to each task, by the file that holds them.
PendingCounts = dict[str, dict[str, int]]


@dataclass
class StatusReport(Result):
    """`crew status`: the run, its tasks, what waits for them, and what needs attention."""

    run: Run
    tasks: list[Task]
    pending: PendingCounts
    #: What needs attention: shown under "Warnings", and as `warnings` in the JSON.
    run_warnings: list[str]
    lease: Lease
    #: The file a detached or crashed leader wrote its output and traceback to, if there is one.
    leader_log: str | None = None

    @property
    def open_contacts(self) -> list[Task]:
        return [t for t in self.tasks if t.open_question is not None]

    @property
    def usage(self) -> Usage | None:
        """What the run's agents spent in all (None if none reported any)."""
        spent = [t.usage for t in self.tasks if t.usage is not None]
        return functools.reduce(Usage.plus, spent) if spent else None

    @property
    def leader_alive(self) -> bool:
        return self.lease.state is LeaseState.ALIVE and self.lease.leader is not None

    def to_json(self) -> dict[str, Any]:
        leader: dict[str, Any] = {"alive": self.leader_alive}
        if self.lease.leader is not None:
            info = self.lease.leader
            leader.update(pid=info.pid, host=info.host, heartbeatAt=info.heartbeat_at)
            if info.stopped_reason:
                leader["stoppedReason"] = info.stopped_reason
            if info.degraded:
                leader["degraded"] = info.degraded
        if self.leader_log is not None:
            leader["log"] = self.leader_log
        document = {
            "run": self.run.to_dict(),
            "tasks": [t.to_dict() for t in self.tasks],
            "pending": self.pending,
            "warnings": self.run_warnings,
            "leader": leader,
        }
        usage = self.usage
        if usage is not None:
            document["usage"] = usage.to_dict()
        return document


@dataclass
class MessageView:
    """A message's life: each status it went through, then the worker's attention decisions
    about it (picked, preempted, merged, …) and the outcome it reported."""

    message: MailboxMessage
    box: Box
    history: list[MailboxMessage]
    decisions: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        data = self.message.to_dict()
        data["box"] = self.box.value
        data["history"] = [_history_entry(m) for m in self.history]
        data["decisions"] = self.decisions
        return data


def _history_entry(message: MailboxMessage) -> dict[str, Any]:
    entry: dict[str, Any] = {"status": message.status.value}
    at = message.status_at()
    if at:
        entry["at"] = at
    if message.reason:
        entry["reason"] = message.reason
    return entry


@dataclass
class Timeline(Result):
    """`crew mailbox`: per task, each message in the order sent, and what became of it."""

    messages: list[MessageView]
    #: The lines of the mailbox files no message was read from (as `crew events` says of its).
    skipped: list[str] = field(default_factory=list)

    def to_json(self) -> list[dict[str, Any]]:
        return [view.to_json() for view in self.messages]

    def warnings(self) -> list[str]:
        return [f"skipped {where}" for where in self.skipped]
