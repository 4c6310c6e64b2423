"""`crew status RUN` without typer or pydantic: the same document as crew/views.py `run_status`
rendered by crew/render.py — as JSON, or as text by the renderer both use (crew/textviews.py) —
for a run that needs no recovery and has nothing to warn about (anything to say goes to the full
command, which says it)."""

from __future__ import annotations

import os
import sys

from crew.fast import people
from crew.fast.cmdline import Call, Fallback
from crew.fast.output import print_json
from crew.fast.runfiles import RunFiles, open_run
from crew.fast.shapes import as_crew_writes
from crew.store.pending import PendingIndex

TYPE_CHECKING = False  # `typing` costs a fast command a few milliseconds
if TYPE_CHECKING:
    from typing import Any

#: crew/models.py STATE_VERSION: a run of a newer version is the full command's (to refuse).
STATE_VERSION = 2
TERMINAL_RUN_STATUSES = frozenset({"completed", "failed", "cancelled"})
INBOUND_BOXES = ("inbox", "steering")


def status(call: Call) -> int:
    color = colored(call)
    files = open_run(call)
    before = files.clean()
    run, tasks = read_state(files)
    pending, indexes = pending_counts(files, tasks)
    if files.clean() != before:
        raise Fallback  # a write came between the reads: the full command waits for it
    limits, crew = run["config"]["limits"], run["config"]["crew"]
    lease = people.lease(files, float(crew["leaderStaleAfter"]))
    if _warnings(run, tasks, lease) or any(
        count > limits["warnPending"] for boxes in pending.values() for count in boxes.values()
    ):
        raise Fallback
    document = _document(files, run, tasks, pending, lease)
    if "--json" in call.options:
        print_json(document)
    else:
        from crew.textviews import terminal_width, write_status  # a send imports none of it

        write_status(document, color=color, width=terminal_width())
    for index in indexes:  # a cache, written only by a command that did its work
        index.save_if_behind()
    return 0


def as_written(run: dict[str, Any], tasks: list[dict[str, Any]]) -> bool:
    """Whether the manifest and the tasks, printed as found, are what the full command prints
    of them: as the models write them (a run an older crew made may lack a field a newer one
    added with a default, which the models fill in: crew/fast/shapes.py)."""
    return as_crew_writes(run, "manifest") and all(as_crew_writes(t, "task") for t in tasks)


def colored(call: Call) -> bool:
    """crew/output.py `colored`, as `--color` says (a value it does not take: the full command,
    which explains)."""
    choice = call.options.get("--color", "auto")
    if choice not in ("auto", "always", "never"):
        raise Fallback
    if choice != "auto":
        return choice == "always"
    from crew.text import colors_wanted  # a send imports none of crew's text views

    return colors_wanted() and sys.stdout.isatty()


def read_state(files: RunFiles) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """manifest.json and the tasks, in crew.toml order, each as the models write it (else the
    full command reads them: it warns of what they hold that no crew wrote, and shows the
    state the event log says)."""
    run = read_run(files)
    tasks = files.read_tasks(run)
    if not as_written(run, tasks):
        raise Fallback
    return run, tasks


def read_run(files: RunFiles) -> dict[str, Any]:
    """manifest.json, if it is a run of this crew's format."""
    run = files.read_json(files.manifest)
    if not isinstance(run, dict):
        raise Fallback
    version = run.get("stateVersion")
    if not isinstance(version, int) or version > STATE_VERSION or run.get("runId") != files.run_id:
        raise Fallback
    if not os.path.isdir(f"{files.root}/tasks"):
        raise Fallback  # a run an older crew made: its next writer converts it
    return run


def pending_counts(
    files: RunFiles, tasks: list[dict[str, Any]]
) -> tuple[dict[str, dict[str, int]], list[PendingIndex]]:
    """Undelivered messages to each task, by mailbox file (crew/views.py `pending_counts`),
    and the indexes that told."""
    found = {t["id"]: dict.fromkeys(INBOUND_BOXES, 0) for t in tasks}
    indexes = [
        PendingIndex(files.box(box), pending_index_path(files, box)) for box in INBOUND_BOXES
    ]
    for box, index in zip(INBOUND_BOXES, indexes, strict=True):
        for task_id, _kind in index.current(save=False).values():
            if task_id not in found:
                raise Fallback
            found[task_id][box] += 1
    return found, indexes


def pending_index_path(files: RunFiles, box: str) -> str:
    return f"{files.root}/.runtime/{box}.pending.json"


def key_index_path(files: RunFiles, box: str) -> str:
    return f"{files.root}/.runtime/{box}.keys.sqlite"


def _warnings(run: dict[str, Any], tasks: list[dict[str, Any]], lease: people.Lease) -> bool:
    """Whether crew/views.py `run_status` would warn about the leader."""
    if run["status"] in TERMINAL_RUN_STATUSES:
        return False
    if lease.state == people.STALE:
        return True
    if lease.state == people.ABSENT:
        return any(t["status"] != "queued" for t in tasks)
    info = lease.leader or {}
    return info.get("watcher") == "poll" or bool(info.get("degraded"))


def _document(
    files: RunFiles,
    run: dict[str, Any],
    tasks: list[dict[str, Any]],
    pending: dict[str, dict[str, int]],
    lease: people.Lease,
) -> dict[str, Any]:
    """crew/results/reading.py `StatusReport.to_json`."""
    leader: dict[str, Any] = {"alive": lease.state == people.ALIVE and lease.leader is not None}
    info = lease.leader
    if info is not None:
        leader.update(pid=info["pid"], host=info["host"], heartbeatAt=info["heartbeatAt"])
        if info.get("stoppedReason"):
            leader["stoppedReason"] = info["stoppedReason"]
        if info.get("degraded"):
            leader["degraded"] = info["degraded"]
    if os.path.isfile(files.leader_log):
        leader["log"] = files.leader_log
    document = {"run": run, "tasks": tasks, "pending": pending, "warnings": [], "leader": leader}
    spent = [t["usage"] for t in tasks if t.get("usage") is not None]
    if spent:
        total = spent[0]
        for more in spent[1:]:
            total = _plus(total, more)
        document["usage"] = total
    return document


def _plus(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """crew/models.py `Usage.plus`, on the JSON form."""
    counted = ("inputTokens", "outputTokens", "cachedTokens")
    total: dict[str, Any] = {key: a.get(key, 0) + b.get(key, 0) for key in counted}
    if a.get("costUsd") is not None or b.get("costUsd") is not None:
        total["costUsd"] = round((a.get("costUsd") or 0.0) + (b.get("costUsd") or 0.0), 9)
    total["turns"] = a.get("turns", 0) + b.get("turns", 0)
    model = b.get("model") or a.get("model")
    if model is not None:
        total["model"] = model
    return total
