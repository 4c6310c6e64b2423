"""Recording how workers ended: the exits the leader reads in one wake-up, in one transaction.

Many workers ending at once (a crew of short tasks) would otherwise cost a transaction each:
the run lock, an fsync of events.jsonl, the marker. Batched, they share those, and each exit
still writes its own task file.

The guard's promise holds (leader/guard.py): what goes wrong with one worker stays with it. A
worker whose writes a fault holds back, or that has last words to record first (folded
reports, a nudge answered by its output), is recorded on its own, as before. If the batch's
transaction fails — a fault, or an error crew did not expect — nothing of it was written, and
each exit is recorded again on its own, where the guard holds back or fails that worker alone.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial

from crew import faults
from crew.domain import tasks
from crew.errors import StaleLeader
from crew.leader import signals
from crew.leader.guard import Step, WorkerGuard
from crew.leader.processes import describe_exit
from crew.leader.view import RunView
from crew.leader.worker_process import WorkerProcess
from crew.store.txn import Txn

#: A worker's last words: the step that records what it said but had not been recorded.
LastWords = Callable[[WorkerProcess], Step]


class Exits:
    """The exits read but not recorded yet, and their recording."""

    def __init__(self, view: RunView, guard: WorkerGuard, last_words: LastWords) -> None:
        self._view = view
        self._guard = guard
        self._last_words = last_words
        self._waiting: list[tuple[WorkerProcess, int]] = []

    def __bool__(self) -> bool:
        return bool(self._waiting)

    def add(self, worker: WorkerProcess, code: int) -> None:
        """The worker exited with `code` (recorded at the next `record`)."""
        self._waiting.append((worker, code))

    def workers(self) -> list[WorkerProcess]:
        """The workers whose exits wait to be recorded."""
        return [worker for worker, _ in self._waiting]

    def record(self) -> None:
        """Record every exit waiting: together where that is safe, on its own where not."""
        waiting, self._waiting = self._waiting, []
        together: list[tuple[WorkerProcess, int]] = []
        for worker, code in waiting:
            if len(waiting) > 1 and self._plain(worker):
                together.append((worker, code))
            else:
                self._alone(worker, code)
        if not together:
            return
        try:
            with self._view.change() as txn:
                for worker, code in together:
                    self._record(txn, worker, code)
                faults.fail_at("exits")
        except StaleLeader:
            raise
        except Exception:  # nothing was written: each again on its own, kept apart by the guard
            for worker, code in together:
                self._alone(worker, code)
            return
        except BaseException:  # asked to stop while waiting for the lock: recorded by no one
            self._waiting = together + self._waiting
            raise
        for worker, _ in together:
            self._view.take_output_time(worker.task_id)
            with self._guard.guarding(worker):
                self._guard.record(worker, worker.close_log)

    def _plain(self, worker: WorkerProcess) -> bool:
        """Whether the worker's exit is all there is to record for it now."""
        if self._guard.holds(worker.task_id):
            return False
        task = self._view.state.tasks.get(worker.task_id)
        now = time.monotonic()
        return not signals.worth_recording(task, [], worker.agent, now=now, final=True)

    def _alone(self, worker: WorkerProcess, code: int) -> None:
        with self._guard.guarding(worker):
            self._guard.record(worker, self._last_words(worker), partial(self._one, worker, code))

    def _one(self, worker: WorkerProcess, code: int) -> None:
        with self._view.change() as txn:
            self._record(txn, worker, code)
        self._view.take_output_time(worker.task_id)
        worker.close_log()

    def _record(self, txn: Txn, worker: WorkerProcess, code: int) -> None:
        # The agent's own reason beats "exited with code 1" (claude exits 1 after a failed turn).
        failure = worker.handle.failure or worker.agent.turn_error
        failure = failure or (describe_exit(code) if code else None)
        tasks.exited(
            txn,
            worker.task_id,
            worker.attempt,
            exit_code=worker.exit_code,
            failure=failure,
            last_output_at=self._view.output_time(worker.task_id),
            lost=worker.handle.lost,
        )
