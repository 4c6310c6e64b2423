"""Running a run again (`crew rerun`): a new run of the same crew definition, linked to the old
one by `rerunOf`, in which only the chosen tasks run again.

Which tasks run again: those named (with `failed`, every task that did not complete; with
neither, all of them), every task that depends on one of them, and every dependency of theirs
that did not complete — until nothing more is added. Every other task is carried into the new
run as it ended there, a completed one with its exit code, result, usage and log, so its
dependents start at once. The old run is only read: it must have ended, and no leader may be
leading it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from crew.domain.lease import read_lease, refuse_if_led
from crew.domain.runs import Rerun, create_run
from crew.errors import NotFound, Refused
from crew.ids import check_task_id
from crew.paths import Home
from crew.registry import TaskStatus
from crew.session import Actor
from crew.store.runstore import RunStore
from crew.store.state import RunState


@dataclass(frozen=True)
class RerunPlan:
    """Which tasks of an ended run run again, and which are carried as they ended."""

    run_id: str
    #: The tasks that run again, in crew.toml order.
    again: list[str]
    #: The tasks carried from the old run, in crew.toml order.
    carried: list[str]


def plan_rerun(state: RunState, names: Sequence[str] = (), *, failed: bool = False) -> RerunPlan:
    """The tasks of an ended run that run again (see the module docstring); NotFound for a name
    the crew definition lacks, Refused for `failed` when every task completed."""
    run = state.run
    defined = [t.id for t in run.config.tasks]
    for name in names:
        if check_task_id(name) not in defined:
            raise NotFound(f"Run {run.run_id} has no task {name!r} in its crew definition.")
    completed = {
        t for t in defined if t in state.tasks and state.tasks[t].status is TaskStatus.COMPLETED
    }
    if failed:
        names = [t for t in defined if t not in completed]
        if not names:
            raise Refused(
                f"Every task of run {run.run_id} completed: --failed has nothing to run again.",
                hint=f"Name the tasks to run again: `crew rerun {run.run_id} TASK…`.",
            )
    again = set(names or defined)
    dependents: dict[str, set[str]] = {t: set() for t in defined}
    needs = {t.id: set(t.depends_on) for t in run.config.tasks}
    for task, deps in needs.items():
        for dep in deps:
            dependents[dep].add(task)
    grown = True
    while grown:
        more = set[str]().union(*(dependents[t] | (needs[t] - completed) for t in again)) - again
        again |= more
        grown = bool(more)
    return RerunPlan(
        run.run_id,
        again=[t for t in defined if t in again],
        carried=[t for t in defined if t not in again],
    )


def check_rerunnable(store: RunStore) -> RunState:
    """The state of a run that may be run again: refused while a leader leads it, or before it
    has ended (`crew resume` continues an interrupted run)."""
    state = store.state()
    run = state.run
    refuse_if_led(
        read_lease(store.paths, stale_after=run.config.crew.leader_stale_after), run.run_id
    )
    if not run.status.terminal:
        raise Refused(
            f"Run {run.run_id} has not ended ({run.status}): only an ended run can be run again.",
            hint=f"`crew resume {run.run_id}` continues it; `crew cancel {run.run_id}` ends it.",
        )
    return state


def rerun(
    home: Home, store: RunStore, names: Sequence[str] = (), *, failed: bool, session: Actor
) -> tuple[RunStore, RerunPlan]:
    """Create the new run that runs `store`'s run again (nothing is created if refused)."""
    state = check_rerunnable(store)
    plan = plan_rerun(state, names, failed=failed)
    carried = [
        state.tasks[t].model_copy(update={"pid": None, "token_hash": None})
        for t in plan.carried
        if t in state.tasks
    ]
    run = state.run
    new = create_run(
        home,
        run.config,
        crew_dir=home.crew_dir(run.crew_dir),
        session=session,
        rerun=Rerun(store.paths, carried),
    )
    return new, plan
