"""Rule-based monitors: stalled, over-time, and waited-too-long tasks (no model, just clocks).

- A `running` task silent for `stallAfter` (no output at all) is nudged; any output answers the
  nudge; silent for another `stallAfter` after the last nudge, it is nudged again while
  `nudges < maxNudges`, else flagged `needs_review` (its worker keeps running). A second
  automatic nudge is never queued while an earlier nudge is still undelivered.
- A task that has run longer than `timeout` (not counting time spent waiting for an answer) is
  stopped and failed.
- A `waiting` task is never judged stalled; waiting longer than `waitTimeout`, it is flagged.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from crew.clock import format_duration
from crew.config import AgentConfig
from crew.models import Task
from crew.registry import TaskStatus


class Action(StrEnum):
    NUDGE = "nudge"
    FLAG_STALLED = "flag stalled"
    TIME_OUT = "time out"
    FLAG_WAITING = "flag waiting"


@dataclass
class Clock:
    """What the leader knows about one live task's timing (monotonic seconds)."""

    #: When the attempt started.
    started: float
    #: When the worker last printed anything.
    last_output: float
    #: Time spent waiting for answers in all: not counted against `timeout`.
    waited: float = 0.0
    #: Since when the task waits for an answer (None while it does not).
    waiting_since: float | None = None
    #: When the stall monitor last nudged it.
    last_nudge: float | None = None
    #: The task was flagged needs_review when last observed.
    flagged: bool = False

    def output(self, now: float) -> None:
        self.last_output = now

    def running_time(self, now: float) -> float:
        waiting = now - self.waiting_since if self.waiting_since is not None else 0.0
        return now - self.started - self.waited - waiting

    def observe(self, status: TaskStatus, now: float) -> None:
        """The task's status now: time spent waiting is set aside, and a flag cleared by a
        person starts the silence clock again (it is not stalled again a moment later)."""
        waiting = status is TaskStatus.WAITING
        if waiting and self.waiting_since is None:
            self.waiting_since = now
        elif not waiting and self.waiting_since is not None:
            self.waited += now - self.waiting_since
            self.waiting_since = None
        if self.flagged and status is not TaskStatus.NEEDS_REVIEW:
            self.last_output, self.last_nudge = now, None
        self.flagged = status is TaskStatus.NEEDS_REVIEW


@dataclass(frozen=True)
class Verdict:
    action: Action | None
    #: When this task next needs looking at (monotonic), if ever.
    next_check: float | None
    reason: str = ""


def judge(
    task: Task, agent: AgentConfig, clock: Clock, now: float, *, nudge_pending: bool
) -> Verdict:
    """What, if anything, the monitors do about a live task now."""
    checks: list[float] = []
    if agent.timeout is not None and task.status is not TaskStatus.WAITING:
        deadline = now + (agent.timeout - clock.running_time(now))
        if now >= deadline:
            return Verdict(
                Action.TIME_OUT, None, f"timed out after {_seconds(agent.timeout)} of running"
            )
        checks.append(deadline)
    if task.status is TaskStatus.WAITING:
        # Waiting for the tasks it spawned is not waiting for an answer: nobody is to blame.
        asking = task.contact is not None or not task.waiting_for
        if agent.wait_timeout is not None and clock.waiting_since is not None and asking:
            deadline = clock.waiting_since + agent.wait_timeout
            if now >= deadline:
                return Verdict(
                    Action.FLAG_WAITING,
                    None,
                    f"waited more than {_seconds(agent.wait_timeout)} for an answer",
                )
            checks.append(deadline)
    elif task.status is TaskStatus.RUNNING and agent.stall_after is not None:
        quiet_since = max(clock.last_output, clock.last_nudge or clock.last_output)
        deadline = quiet_since + agent.stall_after
        if now >= deadline:
            silent = _seconds(now - clock.last_output)
            if task.nudges < agent.max_nudges:
                if nudge_pending:
                    checks.append(now + agent.stall_after)  # the last one is not delivered yet
                else:
                    return Verdict(Action.NUDGE, None, f"no output for {silent}")
            else:
                nudged = f" after {task.nudges} nudge(s)" if task.nudges else ""
                return Verdict(
                    Action.FLAG_STALLED, None, f"stalled: no output for {silent}{nudged}"
                )
        else:
            checks.append(deadline)
    return Verdict(None, min(checks) if checks else None)


def _seconds(value: float) -> str:
    """A duration as crew.toml may give it: `1.5s` is not rounded to `2s`."""
    if 1 <= value < 60 and value != int(value):
        return f"{value:.3g}s"
    return format_duration(value)
