"""What every command returns: one dataclass per kind of result, each with `to_json()`.

The library returns these; the command line hands them to crew.render, which prints the JSON
document or the text view, and the result's warnings and notes on stderr. Whatever the text
view says, the JSON says too. docs/commands.md documents each shape.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from crew.domain.lease import Lease, LeaseState
from crew.errors import CrewError, ExitCode
from crew.models import MailboxMessage, Run, Task
from crew.procs import Stopped
from crew.registry import Box, MessageStatus, RunStatus
from crew.text import format_counts


@dataclass
class Result:
    """Base of every result: the JSON document, stderr lines, and the exit code."""

    #: Printed as one compact line (it ends a stream of JSON lines), not a pretty document.
    json_line = False

    def to_json(self) -> Any:
        raise NotImplementedError

    def warnings(self) -> list[str]:
        """Printed on stderr as `crew: warning: …` (and part of the JSON where it matters)."""
        return []

    def notes(self) -> list[str]:
        """Printed on stderr as `crew: …`: what was done beyond the result itself."""
        return []

    def failure(self) -> CrewError | None:
        """What went wrong after the result was made (printed as `crew: error: …` last)."""
        return None

    @property
    def exit_code(self) -> int:
        failure = self.failure()
        return int(failure.exit_code) if failure is not None else 0


def _overridden_note(owner: str | None) -> list[str]:
    return [f"acted on a run owned by {owner} (--force; recorded)"] if owner else []


# ----------------------------------------------------------------------------- sending


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
        return _overridden_note(self.overridden)

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
        return _overridden_note(self.overridden)

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
        return _overridden_note(self.overridden)

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


# ----------------------------------------------------------------------------- inspecting


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

    @property
    def open_contacts(self) -> list[Task]:
        return [t for t in self.tasks if t.contact is not None and t.contact.answered_at is None]

    @property
    def leader_alive(self) -> bool:
        return self.lease.state is LeaseState.ALIVE and self.lease.leader is not None

    def to_json(self) -> dict[str, Any]:
        leader: dict[str, Any] = {"alive": self.leader_alive}
        if self.lease.leader is not None:
            info = self.lease.leader
            leader.update(pid=info.pid, host=info.host, heartbeatAt=info.heartbeat_at)
        return {
            "run": self.run.to_dict(),
            "tasks": [t.to_dict() for t in self.tasks],
            "pending": self.pending,
            "warnings": self.run_warnings,
            "leader": leader,
        }


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

    def to_json(self) -> list[dict[str, Any]]:
        return [view.to_json() for view in self.messages]


# ----------------------------------------------------------------------------- admin


@dataclass
class Finding:
    """One problem: where it is, what it is, and whether a repair fixed it."""

    run_id: str
    problem: str
    path: Path | None = None
    line: int | None = None
    repairable: bool = True
    repaired: bool = False

    def location(self) -> str:
        if self.path is None:
            return self.run_id
        return f"{self.path}:{self.line}" if self.line is not None else str(self.path)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"runId": self.run_id, "problem": self.problem}
        if self.path is not None:
            data["file"] = str(self.path)
        if self.line is not None:
            data["line"] = self.line
        data["repairable"] = self.repairable
        data["repaired"] = self.repaired
        return data


@dataclass
class DoctorReport(Result):
    """`crew doctor`: the runs it examined and what it found (and repaired)."""

    runs: list[str] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    repair: bool = False

    @property
    def clean(self) -> bool:
        """No problem left: none found, or (after a repair) every one fixed."""
        return all(f.repaired for f in self.findings)

    @property
    def exit_code(self) -> int:
        return 0 if self.clean else 1

    def to_json(self) -> dict[str, Any]:
        return {
            "clean": self.clean,
            "repair": self.repair,
            "runs": self.runs,
            "findings": [f.to_json() for f in self.findings],
        }


@dataclass
class Initialized(Result):
    """`crew init`: the home, and whether it was created (an existing one is left untouched)."""

    home: Path
    config_file: Path
    created: bool

    def notes(self) -> list[str]:
        return [] if self.created else [f"{self.home} already exists; left it untouched."]

    def to_json(self) -> dict[str, Any]:
        return {"home": str(self.home), "config": str(self.config_file), "created": self.created}


@dataclass
class SchemaDoc(Result):
    """`crew schema`: one JSON Schema, or all of them by name."""

    document: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return self.document


# ----------------------------------------------------------------------------- leading


@dataclass
class Waited(Result):
    """`crew wait`: the tasks that made the condition hold."""

    run_id: str
    until: str
    tasks: list[Task]

    def to_json(self) -> dict[str, Any]:
        return {"runId": self.run_id, "for": self.until, "tasks": [t.to_dict() for t in self.tasks]}


@dataclass
class Detached(Result):
    """`crew run --detach`: the run, and the background process that leads it."""

    run_id: str
    pid: int

    def to_json(self) -> dict[str, Any]:
        return {"runId": self.run_id, "pid": self.pid}


@dataclass
class Led(Result):
    """`crew run` and `crew resume` in the foreground: how leading the run ended.

    With --json, the events were printed as JSON lines while the run went; this is the last line.
    """

    run_id: str
    code: ExitCode
    status: RunStatus
    #: How many tasks ended in each status.
    tasks: dict[str, int]

    json_line = True

    @property
    def exit_code(self) -> int:
        return int(self.code)

    @property
    def outcome(self) -> str:
        """`ended`; `interrupted` (Ctrl-C: the run can be resumed); `taken over` (fenced)."""
        if self.code is ExitCode.INTERRUPTED:
            return "interrupted"
        if self.code is ExitCode.REFUSED:
            return "taken over"
        return "ended"

    def notes(self) -> list[str]:
        run = self.run_id
        if self.code is ExitCode.INTERRUPTED:
            return [
                f"stopped leading run {run}; `crew resume {run}` continues it, "
                f"`crew cancel {run}` ends it"
            ]
        if self.code is ExitCode.REFUSED:
            return [f"another leader took over run {run}; this one stopped without writing"]
        return [f"run {run} {self.status}: {format_counts(self.tasks)}"]

    def to_json(self) -> dict[str, Any]:
        return {
            "runId": self.run_id,
            "outcome": self.outcome,
            "status": self.status.value,
            "tasks": self.tasks,
            "exitCode": self.exit_code,
        }
