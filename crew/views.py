"""Read-only views of runs for the inspection commands: each returns a result, never renders."""

from __future__ import annotations

from collections.abc import Callable

from crew.domain.lease import Lease, LeaseState, read_lease
from crew.errors import CrewError, UsageError
from crew.ids import shown
from crew.models import Event, MailboxMessage, Run, Task
from crew.paths import Home
from crew.registry import (
    INBOUND_BOXES,
    REDIRECTING_DECISIONS,
    Box,
    Direction,
    EventType,
    MessageData,
    MessageStatus,
    RunStatus,
    TaskStatus,
    WatcherKind,
)
from crew.results.reading import (
    MessageView,
    PendingCounts,
    RunList,
    RunSummary,
    StatusReport,
    Timeline,
)
from crew.store.jsonl import BadLine
from crew.store.runstore import RunStore
from crew.store.state import RunState
from crew.text import counts


def list_runs(home: Home, *, status: RunStatus | None = None) -> RunList:
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
        tally = counts(t.status for t in recovery.state.task_list())
        problem = "; ".join(recovery.warnings()) or None
        summaries.append(RunSummary(run_id, run, tally, problem))
    return RunList(summaries)


def pending_counts(tasks: list[Task], messages: list[MailboxMessage]) -> PendingCounts:
    """Undelivered messages to each task, by the file that holds them."""

    def empty() -> dict[str, int]:
        return {box.value: 0 for box in INBOUND_BOXES}

    found: PendingCounts = {t.id: empty() for t in tasks}
    for message in messages:
        if message.direction is Direction.INBOX and message.status is MessageStatus.PENDING:
            found.setdefault(message.task_id, empty())[message.kind.box.value] += 1
    return found


def pending_messages(store: RunStore) -> list[MailboxMessage]:
    """The messages to the run's workers that wait to be delivered (the latest line of each)."""
    return [m for box in INBOUND_BOXES for m in store.mail(box).pending.values()]


def run_status(store: RunStore) -> StatusReport:
    """The run, its tasks, pending message counts and anything that needs attention."""
    recovery = store.load()
    state = recovery.state
    tasks = state.task_list()
    pending = pending_counts(tasks, pending_messages(store))
    lease = read_lease(store.paths, stale_after=state.run.config.crew.leader_stale_after)
    warnings = recovery.warnings() + leader_warnings(store, state, lease)
    warnings.extend(_backlog_warnings(state.run, pending))
    log = store.paths.leader_log
    leader_log = str(log) if log.is_file() else None
    return StatusReport(state.run, tasks, pending, warnings, lease, leader_log)


def leader_warnings(store: RunStore, state: RunState, lease: Lease | None = None) -> list[str]:
    """What to say of the leader of a run that has not ended: gone, never started, polling
    for want of file events, degraded (`lease`: as read just now, else read here)."""
    if state.run.status.terminal:
        return []
    if lease is None:
        lease = read_lease(store.paths, stale_after=state.run.config.crew.leader_stale_after)
    warnings: list[str] = []
    if lease.state is LeaseState.STALE:
        crashed = lease.leader is not None and (lease.leader.stopped_reason or "").startswith(
            "crashed"
        )
        log = store.paths.leader_log
        warnings.append(
            f"the leader is gone ({lease.reason}): run `crew resume {state.run.run_id}` "
            "to lead the run again" + (f"; its traceback is in {log}" if crashed else "")
        )
    elif lease.state is LeaseState.ABSENT and any(
        t.status is not TaskStatus.QUEUED for t in state.task_list()
    ):
        warnings.append(
            f"no leader is running: run `crew resume {state.run.run_id}` to lead the run"
        )
    elif lease.leader is not None and lease.leader.watcher is WatcherKind.POLL:
        warnings.append("file events are unavailable here: the leader polls the mailbox instead")
    if lease.state is LeaseState.ALIVE and lease.leader is not None and lease.leader.degraded:
        warnings.append(
            f"the leader is degraded ({lease.leader.degraded}): it holds back what failed "
            "and retries, and goes on once that clears"
        )
    return warnings


def _backlog_warnings(run: Run, pending: PendingCounts) -> list[str]:
    limit = run.config.limits.warn_pending
    return [
        f"task {task_id} has {count} pending {box} message(s) (warning above {limit})"
        for task_id, boxes in pending.items()
        for box, count in boxes.items()
        if count > limit
    ]


def mailbox_view(
    store: RunStore,
    *,
    task: str | None = None,
    box: Box | None = None,
    status: MessageStatus | None = None,
) -> Timeline:
    """The mailbox as a timeline: per task (crew.toml order), each message in the order sent."""
    state = store.state()
    if task is not None:
        state.task(task)  # NotFound for a task the run does not have
    views: list[MessageView] = []
    skipped: list[BadLine] = []
    for each in [box] if box is not None else list(Box):
        histories: dict[str, list[MailboxMessage]] = {}
        for line in store.history(each, skipped):
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
    return Timeline(views, skipped=[bad.describe() for bad in skipped])


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
        for decision in (view.message.data or {}).get(MessageData.DECISIONS, []):
            if not isinstance(decision, dict):
                continue
            view.decisions.append(decision)
            focus = by_id.get(str(decision.get("focus", "")))
            if focus is not None and decision.get("action") in REDIRECTING_DECISIONS:
                focus.decisions.append({**decision, "by": view.message.id})
    for view in views:
        view.decisions.sort(key=lambda d: (str(d.get("at", "")), _seq(d)))


def _seq(decision: dict[str, object]) -> int:
    seq = decision.get("seq")
    return seq if isinstance(seq, int) else 0


def event_filter(type_name: str | None, task: str | None) -> Callable[[Event], bool]:
    """A predicate for `crew events --type/--task`: a type matches exactly or by family prefix."""
    family: str | None = None
    if type_name is not None:
        wanted = type_name.rstrip(".")
        names = {t.value for t in EventType}
        families = {name.split(".")[0] for name in names}
        if wanted not in names and wanted not in families:
            raise UsageError(
                f"Unknown event type {shown(type_name)}: expected one of "
                f"{', '.join(sorted(families))} or a full type such as task.started"
                " (see `crew schema event`)."
            )
        family = wanted

    def matches(event: Event) -> bool:
        if task is not None and event.task_id != task:
            return False
        if family is None:
            return True
        return event.type.value == family or event.type.value.startswith(family + ".")

    return matches
