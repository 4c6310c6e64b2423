"""The leader's monitors, applied: each live task judged against its agent's limits of silence,
time and waiting (crew/leader/monitors.py decides; this acts: a nudge, a flag, a time-out)."""

from __future__ import annotations

from crew import verbs
from crew.domain import tasks
from crew.leader import monitors
from crew.leader.guard import WorkerGuard
from crew.leader.processes import Workers
from crew.leader.view import RunView
from crew.leader.worker_process import WorkerProcess
from crew.models import Task
from crew.registry import LIVE_TASK_STATUSES, MessageKind, MessageSource
from crew.store.runstore import RunStore


class Supervision:
    """Applies the monitors to the leader's live workers."""

    def __init__(
        self, store: RunStore, view: RunView, workers: Workers, guard: WorkerGuard, epoch: int
    ) -> None:
        self.store = store
        self.view = view
        self.workers = workers
        self.guard = guard
        self.epoch = epoch

    def apply(self, now: float) -> float | None:
        """Apply the monitors to every live task; returns when to look again."""
        checks: list[float | None] = []
        for worker in self.workers:
            task = self.view.state.tasks.get(worker.task_id)
            if task is None or task.status not in LIVE_TASK_STATUSES or worker.stopping:
                continue
            with self.guard.guarding(worker):
                checks.append(self._judge(worker, task, now))
        return min((c for c in checks if c is not None), default=None)

    def _judge(self, worker: WorkerProcess, task: Task, now: float) -> float | None:
        """Apply the monitors to one live task; returns when to look again."""
        worker.clock.observe(task.status, now)
        agent = self.view.state.run.config.agents[task.agent]
        nudging = self.view.pending.any_for(task.id, MessageKind.NUDGE)
        verdict = monitors.judge(task, agent, worker.clock, now, nudge_pending=nudging)
        if verdict.action is not None:
            self._act(worker, task, verdict, now)
            # Judged again as it is now (a flag it raised observed at once), a nudge pending.
            worker.clock.observe((task := self.view.state.task(task.id)).status, now)
            verdict = monitors.judge(task, agent, worker.clock, now, nudge_pending=True)
        return verdict.next_check

    def _act(
        self, worker: WorkerProcess, task: Task, verdict: monitors.Verdict, now: float
    ) -> None:
        if verdict.action is monitors.Action.NUDGE:
            verbs.nudge(
                self.store,
                task.id,
                session=self.view.state.run.owner_session_id,
                epoch=self.epoch,
                source=MessageSource.MONITOR,
            )
            worker.clock.last_nudge = now
            self.view.refresh()
            return
        if verdict.action is monitors.Action.TIME_OUT:
            self.workers.stop(worker, now)
        with self.view.change() as txn:
            if verdict.action is monitors.Action.TIME_OUT:
                tasks.requeue(txn, task.id, verdict.reason)
            else:
                tasks.flag(txn, task.id, verdict.reason)
