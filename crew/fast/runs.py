"""`crew runs` without typer or pydantic: the same list as crew/views.py `list_runs` rendered
by crew/render.py — as JSON, as ids (`-q`), or as text by the renderer both use
(crew/textviews.py) — when every run of the home is clean (a run that needs recovery, or that
the full command would warn about or could not read, sends the whole list to the full command,
which says why)."""

from __future__ import annotations

from crew.fast.cmdline import Call, Fallback
from crew.fast.output import out, print_json
from crew.fast.runfiles import RunFiles, find_home, run_ids
from crew.fast.status import colored, read_state
from crew.textviews import terminal_width, write_runs

TYPE_CHECKING = False  # `typing` costs a fast command a few milliseconds
if TYPE_CHECKING:
    from typing import Any

#: crew/registry.py RunStatus: what `--status` takes.
RUN_STATUSES = ("running", "needs_review", "completed", "failed", "cancelled")


def runs(call: Call) -> int:
    color = colored(call)
    wanted = call.options.get("--status")
    if wanted is not None and wanted not in RUN_STATUSES:
        raise Fallback  # the full command names the values it takes
    home = find_home(call.options.get("--home"))
    listed = []
    try:
        found = run_ids(home)
    except FileNotFoundError:
        found = []  # no run yet
    except OSError:
        raise Fallback from None
    for run_id in reversed(found):
        summary = _summary(RunFiles(home, run_id))
        if wanted is None or summary["status"] == wanted:
            listed.append(summary)
    if "--json" in call.options:
        print_json(listed)
    elif "--quiet" in call.options or "-q" in call.options:
        for summary in listed:
            out(summary["runId"])  # as `docker ps -q`
    else:
        write_runs(listed, color=color, width=terminal_width())
    return 0


def _summary(files: RunFiles) -> dict[str, Any]:
    """crew/results/reading.py `RunSummary.to_json` of a clean run."""
    files.check_folders()
    before = files.clean()
    run, tasks = read_state(files)
    if files.clean() != before:
        raise Fallback  # a write came between the reads: the full command waits for it
    summary = {key: value for key, value in run.items() if key != "config"}
    counted: dict[str, int] = {}
    for task in tasks:
        counted[task["status"]] = counted.get(task["status"], 0) + 1
    summary["tasks"] = counted
    return summary
