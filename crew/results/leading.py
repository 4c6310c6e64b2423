"""What leading a run returns: run, resume (in the foreground or detached), wait."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from crew.errors import ExitCode
from crew.models import Task
from crew.registry import RunStatus, TaskStatus
from crew.results import Result
from crew.text import format_counts


def outcome_code(status: RunStatus | TaskStatus) -> ExitCode:
    """The exit code of a command that returns because a run (or a task) ended, as `crew run`'s:
    0 when it completed, 1 when it failed or was cancelled."""
    return ExitCode.OK if status in (RunStatus.COMPLETED, TaskStatus.COMPLETED) else ExitCode.FAILED


@dataclass
class Waited(Result):
    """`crew wait`: the tasks that made the condition hold."""

    run_id: str
    until: str
    tasks: list[Task]
    #: With `--for done`: how the run (or the task waited for) ended, which sets the exit code.
    ended: RunStatus | TaskStatus | None = None

    @property
    def exit_code(self) -> int:
        return 0 if self.ended is None else int(outcome_code(self.ended))

    def to_json(self) -> dict[str, Any]:
        return {"runId": self.run_id, "for": self.until, "tasks": [t.to_dict() for t in self.tasks]}


@dataclass
class Detached(Result):
    """`crew run --detach`: the run, and the background process that leads it."""

    run_id: str
    pid: int
    #: `--home PATH` when a command typed here would not find the run's home by itself.
    home_option: str = ""

    def notes(self) -> list[str]:
        if not self.home_option:
            return []
        return [
            f"other commands reach it with {self.home_option}: `crew status {self.run_id} "
            f"{self.home_option}`"
        ]

    def quiet_lines(self) -> list[str]:
        return [self.run_id]

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
    #: `--home PATH` when a command typed here would not find the run's home by itself: the
    #: commands the notes suggest carry it.
    home_option: str = ""

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
        run, home = self.run_id, f" {self.home_option}" if self.home_option else ""
        if self.code is ExitCode.INTERRUPTED:
            # One command a line: a narrow terminal wraps a line, never a command in two.
            return [
                f"stopped leading run {run}",
                f"continue it with `crew resume {run}{home}`",
                f"end it with `crew cancel {run}{home}`",
            ]
        if self.code is ExitCode.REFUSED:
            return [f"another leader took over run {run}; this one stopped without writing"]
        ended = [f"run {run} {self.status}: {format_counts(self.tasks)}"]
        if self.status in {RunStatus.FAILED, RunStatus.CANCELLED}:
            ended.append(f"run what did not complete again with `crew rerun {run} --failed{home}`")
        elif home:
            ended.append(f"see it again with `crew status {run}{home}`")
        return ended

    def to_json(self) -> dict[str, Any]:
        return {
            "runId": self.run_id,
            "outcome": self.outcome,
            "status": self.status.value,
            "tasks": self.tasks,
            "exitCode": self.exit_code,
        }
