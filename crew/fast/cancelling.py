"""`crew cancel` without pydantic, in the common case: a person who owns a run that has not
ended cancels it, or one of its tasks that has not ended, where nothing is pending for the
tasks it ends and none of them was spawned by another. It writes what crew/verbs.py `cancel`
writes — a `task.cancelled` event for each task it ends (a queued task whose dependency it
cancelled included, as crew/domain/tasks.py `cancel_dependents` cancels them), the run's end
or change of status as crew/domain/runs.py `follow_tasks` has it, the tasks' snapshots,
manifest.json, the marker — then stops the workers of the tasks it ended (crew/procs
`stop_workers`, the standard library's) and prints what the full command prints. Every other
case (--force, a worker's credentials, a run or task that already ended, messages to reject,
a parent to tell) is decided before anything is written, by raising Fallback: crew/fast/
changing.py then runs the library's cancel.
"""

from __future__ import annotations

from crew.fast import people
from crew.fast.cmdline import Call, Fallback
from crew.fast.committing import commit, event, owned
from crew.fast.handing import RUN_FIELDS
from crew.fast.output import out, print_json
from crew.fast.runfiles import RunFiles, is_task_id
from crew.fast.sending import LIVE
from crew.fast.shapes import as_crew_writes
from crew.fast.status import INBOUND_BOXES, TERMINAL_RUN_STATUSES, pending_index_path
from crew.store.pending import PendingIndex

TYPE_CHECKING = False  # `typing` costs a fast command a few milliseconds
if TYPE_CHECKING:
    from typing import Any

#: crew/models.py Task's fields as a task's snapshot has them, in order.
TASK_FIELDS = (
    "id", "agent", "title", "prompt", "status", "dependsOn", "attempt", "maxAttempts", "pid",
    "node", "tokenHash", "startedAt", "endedAt", "waitingSince", "lastOutputAt", "exitCode",
    "contact", "nudges", "failures", "session", "error", "result", "agentVersion", "usage",
    "limits", "addedAt", "parent", "idempotencyKey", "waitingFor",
)  # fmt: skip
#: crew/registry.py TaskStatus's terminal statuses, and those a dependency blocks with
#: (crew/domain/tasks.py `_BLOCKING_ENDS`).
TERMINAL = frozenset({"completed", "failed", "cancelled"})
BLOCKING = frozenset({"failed", "cancelled"})
#: crew/registry.py EventType's of the changes a cancel makes.
CANCELLED, ENDED = "task.cancelled", "run.ended"
FLAGGED, CLEARED = "run.flagged", "run.cleared"


def cancel(call: Call, grace: float) -> int:
    """Cancel, or raise Fallback before anything is written."""
    task_id = call.arguments.get("task")
    if "--force" in call.options or (task_id is not None and not is_task_id(task_id)):
        raise Fallback
    with owned(call) as begun:
        files, marker, run, who = begun.files, begun.marker, begun.run, begun.who
        if run.get("status") in TERMINAL_RUN_STATUSES:
            raise Fallback  # nothing to cancel: the full command says so
        tasks = {t["id"]: t for t in files.read_tasks(run)}
        if task_id is not None and tasks.get(task_id, {}).get("status", "completed") in TERMINAL:
            raise Fallback  # no such task, or one that ended
        if task_id is not None and any(t.get("parent") is not None for t in tasks.values()):
            raise Fallback  # what it spawned is cancelled with it (crew/verbs.py `cancel`)
        if not as_crew_writes(run, "manifest"):
            raise Fallback  # written anew (the run it ends), as the models write it
        change = _Change(files, marker.seq, run, tasks, who)
        reason = f"cancelled by {who.name}"
        for each in [tasks[task_id]] if task_id is not None else list(tasks.values()):
            if each["status"] not in TERMINAL:
                change.cancel(each["id"], reason, f"task {each['id']} {reason}")
        if task_id is None:
            change.end_run("cancelled")
        change.settle()
        stop = _stopper() if change.stopping else None  # loaded before the commit, see `_stopper`
        commit(files, marker, change.events, tasks=change.changed(), run=change.run_changed())
    stopped = stop(files.run_id, change.stopping, state_dir=files.root, grace=grace) if stop else []
    _print(call, files.run_id, task_id, change, stopped)
    return 0


class _Change:
    """The events of one cancel, as crew/store/txn.py `record` makes them: one time for all,
    numbered from the marker's seq, each carrying the state it brings."""

    def __init__(
        self,
        files: RunFiles,
        seq: int,
        run: dict[str, Any],
        tasks: dict[str, dict[str, Any]],
        who: people.Session,
    ) -> None:
        self.files, self.seq, self.run, self.tasks, self.who = files, seq, run, tasks, who
        self.at = people.now()
        self.events: list[dict[str, Any]] = []
        self.ended: list[str] = []  # the tasks it cancelled, in the order cancelled
        self.stopping: list[tuple[str, int, None]] = []
        self._run_changed = False

    def cancel(self, task_id: str, why: str, message: str) -> None:
        """crew/domain/tasks.py `cancel`, and the worker to stop (crew/verbs.py `cancel`)."""
        task = self.tasks[task_id]
        if task.get("parent") is not None:
            raise Fallback  # its parent may be told (crew/domain/adding.py `results_to_parents`)
        if not as_crew_writes(task, "task"):
            raise Fallback  # it is written anew, as `Task.to_dict` writes it
        if task["status"] in LIVE and task.get("pid") is not None and task.get("node") is None:
            self.stopping.append((task_id, task["pid"], None))
        merged = {**task, "status": "cancelled", "endedAt": self.at, "error": why}
        self.tasks[task_id] = {k: merged[k] for k in TASK_FIELDS if merged.get(k) is not None}
        self.ended.append(task_id)
        self._record(CANCELLED, message, {"task": self.tasks[task_id]}, task_id)

    def end_run(self, status: str) -> None:
        """crew/domain/runs.py `end`."""
        self.run = {**self.run, "status": status, "endedAt": self.at}
        self.run = {k: self.run[k] for k in RUN_FIELDS if k in self.run}
        self._run_changed = True
        self._record(ENDED, f"run {status}", {"run": self.run})

    def settle(self) -> None:
        """crew/domain settle: the queued dependents of what was cancelled, cancelled in turn;
        nothing pending left for a task that ended; the run's status following its tasks."""
        changed = True
        while changed:
            changed = False
            for task in list(self.tasks.values()):
                if task["status"] != "queued":
                    continue
                blocker = next(
                    (self.tasks[d] for d in task["dependsOn"]
                     if d in self.tasks and self.tasks[d]["status"] in BLOCKING),
                    None,
                )  # fmt: skip
                if blocker is not None:
                    why = f"dependency {blocker['id']} {blocker['status']}"
                    self.cancel(task["id"], why, f"task {task['id']} cancelled: its {why}")
                    changed = True
        self._nothing_pending()
        if self.run["status"] not in TERMINAL_RUN_STATUSES:
            self._follow_tasks()

    def changed(self) -> list[dict[str, Any]]:
        """The tasks it ended, in the run's task order (crew/domain/tasks.py `ended`)."""
        return [task for task_id, task in self.tasks.items() if task_id in self.ended]

    def run_changed(self) -> dict[str, Any] | None:
        return self.run if self._run_changed else None

    def _nothing_pending(self) -> None:
        """Fallback when a message is pending for a task this cancel ended: the full command
        rejects it (crew/domain/mailbox.py `reject_undeliverable`)."""
        for box in INBOUND_BOXES:
            index = PendingIndex(self.files.box(box), pending_index_path(self.files, box))
            if any(task_id in self.ended for task_id, _ in index.current(save=False).values()):
                raise Fallback

    def _follow_tasks(self) -> None:
        """crew/domain/runs.py `follow_tasks`, for a run that has not ended."""
        statuses = [task["status"] for task in self.tasks.values()]
        if statuses and all(status in TERMINAL for status in statuses):
            self.end_run("completed" if set(statuses) == {"completed"} else "failed")
            return
        flagged = "needs_review" in statuses
        wanted = "needs_review" if flagged else "running"
        if self.run["status"] != wanted:
            self.run = {**self.run, "status": wanted}
            self._run_changed = True
            said = "a task needs review" if flagged else "no task needs review"
            self._record(FLAGGED if flagged else CLEARED, said, {"run": self.run})

    def _record(
        self, kind: str, message: str, carried: dict[str, Any], task_id: str | None = None
    ) -> None:
        seq, data = self.seq + len(self.events) + 1, {**self.who.stamp(), **carried}
        self.events.append(event(seq, self.run["runId"], self.at, kind, message, data, task_id))


def _stopper() -> Any:
    """crew/procs `stop_workers`, which crew/verbs.py `cancel` calls once it committed, for the
    workers of the tasks it ended. Imported before the commit: a live leader that sees the
    cancel stops those workers too, and the few milliseconds of the import after it let the
    leader be first, and this command report its workers as already gone."""
    from crew.procs.stopping import stop_workers

    return stop_workers


def _print(
    call: Call, run_id: str, task_id: str | None, change: _Change, stopped: list[Any]
) -> None:
    """crew/render.py's view of crew/results/sending.py `Cancelled`."""
    status = change.run["status"]
    if "--json" in call.options:
        print_json(
            {
                "runId": run_id,
                "task": task_id,
                "cancelled": [task["id"] for task in change.changed()],
                "rejected": [],
                "stopped": [
                    {"task": s.task_id, "pid": s.pid, "outcome": s.outcome.value} for s in stopped
                ],
                "runStatus": status,
            }
        )
        return
    if "--quiet" in call.options or "-q" in call.options:
        return
    ended = [task["id"] for task in change.changed()]
    out(f"Cancelled {', '.join(ended) or 'nothing'} in run {run_id}.")
    for each in stopped:
        out(f"Worker of {each.task_id} (pid {each.pid}): {each.outcome}.")
    if status in TERMINAL_RUN_STATUSES:
        out(f"The run has ended ({status}).")
