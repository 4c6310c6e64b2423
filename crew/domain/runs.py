"""A run's life: created from crew.toml, led by one leader epoch after another, owned by one
session at a time, and ended once every task has ended. Every change of the run record is made
here.

Its status follows its tasks: `needs_review` while any task is flagged, else `running`; once
every task has ended, `completed` if all completed, `cancelled` if it was cancelled, else
`failed`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from crew import clock
from crew.config import CrewConfig
from crew.domain import tasks
from crew.domain.tasks import new_task
from crew.ids import new_event_id
from crew.models import Event, LeaderInfo, Run, Task
from crew.paths import Home, RunPaths
from crew.registry import EventData, EventType, RunStatus, TaskStatus
from crew.session import Actor, as_actor
from crew.store.create import copy_file, create_run_files
from crew.store.runstore import RunStore
from crew.store.state import RunState
from crew.store.txn import Txn


@dataclass(frozen=True)
class Rerun:
    """What a run that runs an earlier one again takes from it (crew/domain/rerun.py)."""

    #: The earlier run.
    source: RunPaths
    #: Its tasks that do not run again, as they ended there (worker pid and secret cleared).
    carried: list[Task]


def create_run(
    home: Home,
    config: CrewConfig,
    *,
    crew_dir: Path,
    session: str | Actor,
    rerun: Rerun | None = None,
) -> RunStore:
    """Create a run from a validated config, owned by `session`, its tasks queued (a worker's
    run is owned by `task:<taskId>@<its runId>`). A `rerun` carries the tasks it names, and
    their logs, from the earlier run instead."""
    actor = as_actor(session)
    session = actor.owner_name
    carried = {t.id: t for t in rerun.carried} if rerun is not None else {}

    def build(run_id: str) -> tuple[RunState, list[Event]]:
        at = clock.now()
        run = Run(
            run_id=run_id,
            crew=config.crew.name,
            status=RunStatus.RUNNING,
            owner_session_id=session,
            leader_epoch=0,
            created_at=at,
            rerun_of=rerun.source.run_id if rerun is not None else None,
            crew_dir=home.relative(crew_dir),
            config=config,
        )
        tasks = [carried.get(t.id) or new_task(config, t) for t in config.tasks]
        created = f"run of crew {run.crew} created by {session}"
        if run.rerun_of is not None:
            created += f" to run {run.rerun_of} again"
        data: dict[str, object] = {**actor.stamp(run_id), EventData.RUN: run.to_dict()}
        events = [_event(run, 1, EventType.RUN_CREATED, created, data)]
        for task in tasks:
            kind, what = EventType.TASK_QUEUED, "queued"
            if task.id in carried:
                kind = EventType.TASK_CARRIED
                what = f"carried from run {run.rerun_of} ({task.status})"
            events.append(
                _event(
                    run,
                    len(events) + 1,
                    kind,
                    f"task {task.id} {what}",
                    {EventData.TASK: task.to_dict()},
                    task_id=task.id,
                )
            )
        return RunState(run, {t.id: t for t in tasks}), events

    def copy_logs(paths: RunPaths) -> None:
        assert rerun is not None
        for task_id in carried:
            copy_file(rerun.source.log(task_id), paths.log(task_id))

    return create_run_files(home, build, populate=copy_logs if carried else None)


def _event(
    run: Run,
    seq: int,
    kind: EventType,
    message: str,
    data: dict[str, object],
    *,
    task_id: str | None = None,
) -> Event:
    return Event(
        id=new_event_id(),
        seq=seq,
        run_id=run.run_id,
        at=run.created_at,
        type=kind,
        task_id=task_id,
        message=message,
        data=data,
    )


def follow_tasks(txn: Txn) -> None:
    """The run's status follows its tasks: ended when all have ended, flagged when any is."""
    run = txn.run
    if run.status.terminal:
        return
    counts = txn.state.counts()
    total = len(txn.state.tasks)
    if total and sum(n for status, n in counts.items() if status.terminal) == total:
        completed = counts[TaskStatus.COMPLETED] == total
        end(txn, RunStatus.COMPLETED if completed else RunStatus.FAILED)
        return
    flagged = counts[TaskStatus.NEEDS_REVIEW] > 0
    wanted = RunStatus.NEEDS_REVIEW if flagged else RunStatus.RUNNING
    if run.status is not wanted:
        txn.record(
            EventType.RUN_FLAGGED if flagged else EventType.RUN_CLEARED,
            message="a task needs review" if flagged else "no task needs review",
            run=run.revised(status=wanted),
        )


def end(txn: Txn, status: RunStatus) -> Run:
    """The run has ended (`status` is terminal)."""
    ended = txn.run.revised(status=status, ended_at=txn.at)
    txn.record(EventType.RUN_ENDED, message=f"run {status}", run=ended)
    return ended


def time_out(txn: Txn, limit: float) -> None:
    """`crew run --timeout`: the run took longer than `limit` seconds. What is left is
    cancelled, so the run ends (failed, unless everything had completed)."""
    why = f"run timed out after {clock.format_duration(limit)}"
    for task in txn.state.task_list():
        if not task.status.terminal:
            tasks.cancel(txn, task.id, why)


def claim(txn: Txn, lease: LeaderInfo) -> Run:
    """A new leader takes the run: the epoch goes up, fencing out any earlier leader."""
    claimed = txn.run.revised(leader_epoch=lease.epoch)
    txn.record(
        EventType.LEADER_STARTED,
        message=f"leader pid {lease.pid} on {lease.host} leads (epoch {lease.epoch})",
        data={"pid": lease.pid, "host": lease.host, "session": lease.session},
        run=claimed,
    )
    return claimed


def hand_over(txn: Txn, owner: str, *, by: str) -> Run:
    """Ownership passes to session `owner` (`by` is the session that did it)."""
    previous = txn.run.owner_session_id
    handed = txn.run.revised(owner_session_id=owner)
    txn.record(
        EventType.OWNERSHIP_TRANSFERRED,
        message=f"ownership passed from {previous} to {owner} by {by}",
        data={"from": previous, "to": owner, "by": by},
        run=handed,
    )
    return handed
