"""Handling each worker on its own: its writes made in order, held back (and the worker paused)
while a fault lasts, and any error crew did not expect kept to that worker's task.

A write for a worker is a `Step`: a function that makes one transaction and returns the steps
that follow from it (an automatic answer to the question it recorded), to be made next.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial

from crew.domain import tasks
from crew.errors import StaleLeader
from crew.leader.degraded import fault_of
from crew.leader.health import Health
from crew.leader.processes import Workers
from crew.leader.view import RunView
from crew.leader.worker_process import WorkerProcess
from crew.text import short

Step = Callable[[], "list[Step] | None"]


@dataclass
class _Held:
    worker: WorkerProcess
    steps: list[Step] = field(default_factory=list)


class WorkerGuard:
    """The leader's workers, each handled so that what goes wrong with one stays with it."""

    def __init__(self, workers: Workers, health: Health, view: RunView) -> None:
        self._workers = workers
        self._health = health
        self._view = view
        #: Writes a fault holds back, per task, in the order they are to be made.
        self._held: dict[str, _Held] = {}

    def __bool__(self) -> bool:
        """Whether writes are held back."""
        return bool(self._held)

    def holds(self, task_id: str) -> bool:
        return task_id in self._held

    def held_workers(self) -> list[WorkerProcess]:
        return [held.worker for held in self._held.values()]

    @contextlib.contextmanager
    def guarding(self, worker: WorkerProcess) -> Iterator[None]:
        """Whatever goes wrong in the block fails the worker's task, not the leader; a fault
        (a full disk: the leader waits it out) and a newer leader go on up."""
        try:
            yield
        except StaleLeader:
            raise
        except Exception as error:
            if fault_of(error) is not None:
                raise
            self._failed(worker, error)

    def record(self, worker: WorkerProcess, *steps: Step) -> None:
        """Make writes for a worker, in order. A fault holds them back (and what comes after
        them for that worker, which is paused meanwhile) until `retry` makes them."""
        if worker.task_id in self._held:
            self._held[worker.task_id].steps.extend(steps)
            return
        self._held[worker.task_id] = _Held(worker, list(steps))
        error = self._run(worker.task_id)
        if error is not None:
            self._workers.pause(worker)
            self._health.fault(f"recording for {worker.task_id}", error, time.monotonic())

    def retry(self) -> None:
        """Make the writes a fault held back; a worker whose writes are all made goes on."""
        for held in list(self._held.values()):
            error = None
            with self.guarding(held.worker):
                error = self._run(held.worker.task_id)
            if error is not None:
                self._health.fault(f"recording for {held.worker.task_id}", error, time.monotonic())
                return
            self._workers.resume(held.worker)

    def _run(self, task_id: str) -> BaseException | None:
        """Make the task's held steps; a fault stops them (and is returned), any other error
        drops them (and is raised)."""
        queue = self._held[task_id].steps
        while queue:
            try:
                more = queue[0]()
            except Exception as error:
                if fault_of(error) is None:
                    del self._held[task_id]
                    raise
                return error
            queue[0:1] = more or []
        del self._held[task_id]
        return None

    def _failed(self, worker: WorkerProcess, error: Exception) -> None:
        """An error crew did not expect while handling a worker: its attempt fails (the reason
        in the event log, the traceback in the leader log), and it is stopped."""
        log = self._health.paths.leader_log
        self._health.log(f"handling the worker of {worker.task_id} failed:", error)
        self._held.pop(worker.task_id, None)
        self._workers.resume(worker)
        if worker.task_id in self._workers and not worker.stopping:
            self._workers.stop(worker, time.monotonic())
        reason = f"{type(error).__name__}: {short(str(error), 300)}"
        why = f"crew could not handle its worker ({reason}; see {log})"
        self.record(worker, partial(self._fail_attempt, worker, why))

    def _fail_attempt(self, worker: WorkerProcess, why: str) -> None:
        with self._view.change() as txn:
            task = txn.task(worker.task_id)
            if tasks.live_attempt(task, worker.attempt):
                tasks.requeue(txn, task.id, why)
