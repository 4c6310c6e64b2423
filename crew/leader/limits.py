"""The leader's side of a task's limits (crew/domain/budget.py has the rules): an agent that
reached one mid-turn is stopped, and an idle one is given no more work, until crew's question
about it is answered."""

from __future__ import annotations

from crew.domain import budget, mailbox
from crew.leader.processes import Workers
from crew.leader.view import RunView
from crew.leader.worker_process import WorkerProcess
from crew.models import SupervisorContact, Task


def stop_turn(workers: Workers, view: RunView, worker: WorkerProcess) -> None:
    """Interrupt the agent's turn (its task reached a limit): crew asks once the turn is over.
    What its adapter held for after the turn is pending again in crew, for after the answer."""
    worker.agent.interrupting = True
    stop = worker.adapter.interrupt()
    workers.write(worker, stop.write)
    if stop.returned:
        with view.change() as txn:
            mailbox.carry_back(txn, stop.returned)


def pause_if_reached(view: RunView, task: Task) -> SupervisorContact | None:
    """Before an idle agent is given more work: crew's question, if its task reached a limit."""
    reached = budget.reached(view.state.run, task)
    if reached is None:
        return None
    with view.change() as txn:
        return budget.pause(txn, task.id, reached, interrupted=False)
