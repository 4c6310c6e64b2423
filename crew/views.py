"""Read-only views of runs for the inspection commands; each returns data, never renders."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from crew.errors import CrewError, NotFound, UsageError
from crew.lease import Lease, LeaseState, read_lease
from crew.models import Event, MailboxMessage, Run, Task
from crew.paths import Home
from crew.registry import Box, Direction, EventType, MessageStatus, RunStatus, TaskStatus
from crew.run import RunStore


@dataclass
class RunSummary:
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


def list_runs(home: Home, *, status: RunStatus | None = None) -> list[RunSummary]:
    """Every run of the home, newest first, optionally only those with `status`."""
    summaries: list[RunSummary] = []
    for run_id in reversed(home.run_ids()):
        store = RunStore(home.run(run_id))
        try:
            recovery = store.load()
        except CrewError as exc:
            if status is None:
                summaries.append(RunSummary(run_id, None, problem=exc.message))
            continue
        run = recovery.state.run
        if status is not None and run.status is not status:
            continue
        counts = Counter(str(t.status) for t in recovery.state.task_list())
        problem = "; ".join(recovery.warnings()) or None
        summaries.append(RunSummary(run_id, run, dict(counts), problem))
    return summaries


PendingCounts = dict[str, dict[str, int]]


@dataclass
class StatusReport:
    run: Run
    tasks: list[Task]
    pending: PendingCounts
    warnings: list[str]
    lease: Lease

    def to_json(self) -> dict[str, Any]:
        return {
            "run": self.run.to_dict(),
            "tasks": [t.to_dict() for t in self.tasks],
            "pending": self.pending,
            "warnings": self.warnings,
        }

    @property
    def open_contacts(self) -> list[Task]:
        return [t for t in self.tasks if t.contact is not None and t.contact.answered_at is None]


def pending_counts(tasks: list[Task], messages: list[MailboxMessage]) -> PendingCounts:
    """Undelivered messages to each task, by the file that holds them."""
    counts: PendingCounts = {t.id: {Box.INBOX.value: 0, Box.STEERING.value: 0} for t in tasks}
    for message in messages:
        if message.direction is Direction.INBOX and message.status is MessageStatus.PENDING:
            per_task = counts.setdefault(
                message.task_id, {Box.INBOX.value: 0, Box.STEERING.value: 0}
            )
            per_task[message.kind.box.value] += 1
    return counts


def run_status(store: RunStore) -> StatusReport:
    """The run, its tasks, pending message counts and anything that needs attention."""
    recovery = store.load()
    state = recovery.state
    tasks = state.task_list()
    messages = store.messages(Box.INBOX) + store.messages(Box.STEERING)
    warnings = recovery.warnings()
    lease = read_lease(store.paths, stale_after=state.run.config.crew.leader_stale_after)
    if not state.run.status.terminal:
        if lease.state is LeaseState.STALE:
            warnings.append(
                f"the leader is gone ({lease.reason}): run `crew resume {state.run.run_id}` "
                "to lead the run again"
            )
        elif lease.state is LeaseState.ABSENT and any(
            t.status is not TaskStatus.QUEUED for t in tasks
        ):
            warnings.append(
                f"no leader is running: run `crew resume {state.run.run_id}` to lead the run"
            )
        elif lease.leader is not None and lease.leader.watcher == "poll":
            warnings.append(
                "file events are unavailable here: the leader polls the mailbox instead"
            )
    warnings.extend(_backlog_warnings(state.run, pending_counts(tasks, messages)))
    return StatusReport(state.run, tasks, pending_counts(tasks, messages), warnings, lease)


def _backlog_warnings(run: Run, pending: PendingCounts) -> list[str]:
    limit = run.config.limits.warn_pending
    return [
        f"task {task_id} has {count} pending {box} message(s) (warning above {limit})"
        for task_id, boxes in pending.items()
        for box, count in boxes.items()
        if count > limit
    ]


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


def mailbox_view(
    store: RunStore,
    *,
    task: str | None = None,
    box: Box | None = None,
    status: MessageStatus | None = None,
) -> list[MessageView]:
    """The mailbox as a timeline: per task (crew.toml order), each message in the order sent."""
    state = store.state()
    if task is not None and task not in state.tasks:
        known = ", ".join(state.tasks)
        raise NotFound(f"Run {state.run.run_id} has no task {task!r} (tasks: {known}).")
    views: list[MessageView] = []
    for each in [box] if box is not None else list(Box):
        lines = store.history(each)
        histories: dict[str, list[MailboxMessage]] = {}
        for line in lines:
            histories.setdefault(line.id, []).append(line)
        for history in histories.values():
            latest = history[-1]
            if task is not None and latest.task_id != task:
                continue
            if status is not None and latest.status is not status:
                continue
            views.append(MessageView(latest, each, _status_changes(history)))
    _attach_decisions(views)
    order = {task_id: index for index, task_id in enumerate(state.tasks)}
    views.sort(key=lambda v: (order.get(v.message.task_id, len(order)), v.message.sent_at))
    return views


def _status_changes(history: list[MailboxMessage]) -> list[MailboxMessage]:
    """The lines where the status changed (decisions and repeated writes keep the status)."""
    kept: list[MailboxMessage] = []
    for line in history:
        if not kept or kept[-1].status is not line.status:
            kept.append(line)
    return kept


def _attach_decisions(views: list[MessageView]) -> None:
    """Each message's own decisions, and those that preempted or merged into it (`by`)."""
    by_id = {v.message.id: v for v in views}
    for view in views:
        for decision in (view.message.data or {}).get("decisions", []):
            if not isinstance(decision, dict):
                continue
            view.decisions.append(decision)
            focus = by_id.get(str(decision.get("focus", "")))
            if focus is not None and decision.get("action") in {"preempt", "merge", "cancel"}:
                focus.decisions.append({**decision, "by": view.message.id})
    for view in views:
        view.decisions.sort(key=lambda d: str(d.get("at", "")))


def event_filter(type_name: str | None, task: str | None) -> Any:
    """A predicate for `crew events --type/--task`: a type matches exactly or by family prefix."""
    family: str | None = None
    if type_name is not None:
        wanted = type_name.rstrip(".")
        names = {t.value for t in EventType}
        families = {name.split(".")[0] for name in names}
        if wanted not in names and wanted not in families:
            raise UsageError(
                f"Unknown event type {type_name!r}: expected one of {', '.join(sorted(families))}"
                " or a full type such as task.started (see `crew schema event`)."
            )
        family = wanted

    def matches(event: Event) -> bool:
        if task is not None and event.task_id != task:
            return False
        if family is None:
            return True
        return event.type.value == family or event.type.value.startswith(family + ".")

    return matches
