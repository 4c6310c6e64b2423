"""`crew wait` without typer or pydantic, when what it waits for already holds: the same tasks
crew/waiting.py `wait_for_run` returns, printed as crew/render.py prints them. A wait that must
block goes to the full command (whose start-up the wait itself hides)."""

from __future__ import annotations

from crew.fast.cmdline import Call, Fallback
from crew.fast.output import out, print_json
from crew.fast.runfiles import open_run, task_option
from crew.fast.sending import LIVE
from crew.fast.status import TERMINAL_RUN_STATUSES, read_state

TYPE_CHECKING = False  # `typing` costs a fast command a few milliseconds
if TYPE_CHECKING:
    from typing import Any

TERMINAL_TASK_STATUSES = frozenset({"completed", "failed", "cancelled"})


def wait(call: Call) -> int:
    until = call.options.get("--for", "done")
    task_id = task_option(call)
    files = open_run(call)
    before = files.clean()
    run, tasks = read_state(files)
    if files.clean() != before:
        raise Fallback
    if task_id is not None:
        tasks = [t for t in tasks if t["id"] == task_id]
        if not tasks:
            raise Fallback
    matching = _matching(until, run, tasks, task_id)
    if not matching:
        raise Fallback  # not yet (the full command waits), or never (it says why)
    code = _exit_code(until, run, matching, task_id)
    if "--json" in call.options:
        print_json({"runId": files.run_id, "for": until, "tasks": matching})
        return code
    if any(_asking(t) for t in matching):
        raise Fallback  # a question's line is crew/render.py's (before anything is printed)
    for task in matching:
        out(f"{task['id']} {task['status']}")
    return code


def _exit_code(
    until: str, run: dict[str, Any], matching: list[dict[str, Any]], task_id: str | None
) -> int:
    """crew/results/leading.py `Waited.exit_code`: the run's (or task's) outcome once it ended."""
    if until != "done":
        return 0
    ended = matching[0]["status"] if task_id is not None else run["status"]
    return 0 if ended == "completed" else 1


def _matching(
    until: str, run: dict[str, Any], tasks: list[dict[str, Any]], task_id: str | None
) -> list[dict[str, Any]]:
    """crew/waiting.py `wait_for_run`'s first look."""
    if until == "done":
        ended = tasks[0]["status"] if task_id is not None else run["status"]
        return tasks if ended in (TERMINAL_TASK_STATUSES | TERMINAL_RUN_STATUSES) else []
    if until == "started":
        return [
            t
            for t in tasks
            if t["status"] in LIVE or (t["status"] in TERMINAL_TASK_STATUSES and t["attempt"] > 0)
        ]
    if until == "waiting":
        return [t for t in tasks if t["status"] == "waiting" or _asking(t)]
    raise Fallback


def _asking(task: dict[str, Any]) -> bool:
    """A question open: waiting, or flagged for waiting too long (crew/waiting.py `_waiting`)."""
    return task.get("contact") is not None and task["status"] not in TERMINAL_TASK_STATUSES
