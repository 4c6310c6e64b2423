"""`crew rm` and `crew prune` without pydantic, in the common case: runs whose files need no
recovery. They check what crew/housekeeping.py checks, remove as crew/store/removal.py removes
(each run's folder renamed to `runs/.rm-<id>` under its lock, then deleted) and print what the
full command prints. Every other case (a run `rm` refuses, a run whose files need recovery or
cannot be read, --force, a link, a lock held long) is decided before anything is removed, by
raising Fallback: the full command then does all of it, and explains.

Each run is looked at twice, as the full command looks: once to decide, then again under its
lock just before it is set aside, so a leader that started meanwhile is seen alive and its run
kept. A run that ended stays ended (no change makes it live again), so the second look reads
the lease alone. `prune` takes the locks of every run it removes before it removes any (the
full command takes them one run at a time): a lock it cannot have is then still a Fallback
with nothing written.
"""

from __future__ import annotations

import contextlib
import os
import re

from crew.fast import people, runfiles
from crew.fast.cmdline import Call, Fallback
from crew.fast.output import json_text
from crew.fast.runfiles import RunFiles, RunLock, find_home, fsync_enabled, resolve_run, run_ids
from crew.fast.shapes import as_crew_writes
from crew.fast.status import TERMINAL_RUN_STATUSES, read_run
from crew.store.deletion import delete
from crew.text import terminal_safe

TYPE_CHECKING = False  # `typing` costs a fast command a few milliseconds
if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import Any

#: crew/paths.py REMOVING_PREFIX: a run folder being removed.
REMOVING_PREFIX = ".rm-"
#: A --keep the typer command surely reads as this number (click's int takes more).
_COUNT = re.compile(r"[0-9]{1,9}")


def rm(call: Call) -> int:
    """`crew rm RUN...`: every run named, or (Fallback: the full command refuses) none."""
    if not call.rest:
        raise Fallback  # the typer command says a run is missing
    home = find_home(call.options.get("--home"))
    named = {run_id: RunFiles(home, run_id) for run_id in [resolve_run(home, r) for r in call.rest]}
    runs: dict[str, dict[str, Any]] = {}
    with contextlib.ExitStack() as held:
        for run_id in sorted(named):  # one order for every remover: no two wait on each other
            files = named[run_id]
            held.enter_context(_locked(files))
            run = _look(files)
            if run["status"] not in TERMINAL_RUN_STATUSES or _led(files, run) is not None:
                raise Fallback  # refused
            runs[run_id] = run
        dry_run = "--dry-run" in call.options
        report = _report(call, [runs[run_id] for run_id in named], [], dry_run=dry_run)
        aside = [] if dry_run else [_set_aside(files) for files in named.values()]
    for folder in aside:
        delete(folder)
    _print(report, [] if dry_run else _sweep(home))
    return 0


def prune(call: Call) -> int:
    """`crew prune [--keep N] [--older-than DURATION]`: the ended runs beyond the newest N and
    (with both) that ended longer ago than the duration; the others named as kept, and why."""
    keep, older_than = _keep(call.options.get("--keep")), _duration(call)
    if keep is None and older_than is None:
        raise Fallback  # the full command says why not
    home = find_home(call.options.get("--home"))
    try:
        ids = run_ids(home)
    except OSError:
        raise Fallback from None
    looked: list[tuple[RunFiles, dict[str, Any], str | None]] = []  # each run, and why it is kept
    for run_id in ids[: max(len(ids) - keep, 0)] if keep is not None else ids:
        files = RunFiles(home, run_id)
        run = _look(files)
        if older_than is not None and people.seconds_since(_ended(run)) < older_than:
            continue
        looked.append((files, run, _kept(files, run)))
    if "--dry-run" in call.options:
        removable = [r for _, r, why in looked if why is None]
        _print(_report(call, removable, _why(looked), dry_run=True), [])
        return 0
    with contextlib.ExitStack() as held:
        for files, _, why in sorted(looked, key=lambda each: each[0].run_id):
            if why is None:
                held.enter_context(_locked(files))
        looked = [(f, r, _led(f, r) if why is None else why) for f, r, why in looked]
        report = _report(call, [r for _, r, why in looked if why is None], _why(looked))
        leftovers = _sweep(home)  # as the full command: before it removes any
        aside = [_set_aside(files) for files, _, why in looked if why is None]
    for folder in aside:
        delete(folder)
    _print(report, leftovers)
    return 0


def _keep(text: str | None) -> int | None:
    if text is None:
        return None
    if not _COUNT.fullmatch(text):
        raise Fallback  # the typer command reads (or refuses) what it becomes
    return int(text)


def _duration(call: Call) -> float | None:
    """--older-than in seconds (Fallback for one the full command refuses)."""
    text = call.options.get("--older-than")
    if text is None:
        return None
    from crew.clock import parse_duration

    try:
        return parse_duration(text)
    except ValueError:
        raise Fallback from None


def _look(files: RunFiles) -> dict[str, Any]:
    """The run, read as the full command reads it when its files need no recovery (Fallback
    when they do, or when it cannot be read: the full command says why)."""
    if os.path.islink(files.root):
        raise Fallback
    files.check_folders()
    files.clean()
    run = read_run(files)
    if not as_crew_writes(run, "manifest"):
        raise Fallback  # what the full command reads of it is what the models make of it
    return run


def _kept(files: RunFiles, run: dict[str, Any]) -> str | None:
    """Why crew/housekeeping.py `_look` keeps the run (None: it may be removed)."""
    led = _led(files, run)
    if led is not None:
        return led
    if run["status"] not in TERMINAL_RUN_STATUSES:
        return f"it has not ended ({run['status']})"
    return None


def _led(files: RunFiles, run: dict[str, Any]) -> str | None:
    """Why a run whose leader is alive is kept (None when it is not)."""
    lease = people.lease(files, float(run["config"]["crew"]["leaderStaleAfter"]))
    if lease.state != people.ALIVE or lease.leader is None:
        return None
    return f"its leader, pid {lease.leader['pid']} on {lease.leader['host']}, is alive"


@contextlib.contextmanager
def _locked(files: RunFiles) -> Iterator[None]:
    """The run's lock, held while its folder is still there (Fallback when it went: another
    removal, which the full command names). A link is refused before its lock file is opened:
    nothing is made through one."""
    if os.path.islink(files.root):
        raise Fallback
    files.check_folders()
    with RunLock(files.root):
        if not os.path.isdir(files.root) or os.path.islink(files.root):
            raise Fallback
        yield


def _set_aside(files: RunFiles) -> str:
    """crew/store/removal.py `set_aside`: the run folder renamed out of the runs folder (the
    caller holds its lock). Returns where it went. From here on the command never goes back to
    the full one (`runfiles.wrote`): it would not find the run."""
    runfiles.wrote = True
    runs = os.path.dirname(files.root)
    target = f"{runs}/{REMOVING_PREFIX}{files.run_id}"
    os.rename(files.root, target)
    if fsync_enabled():
        fd = os.open(runs, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    return target


def _sweep(home: str) -> list[str]:
    """crew/housekeeping.py `_sweep`: what removals cut short left behind, deleted; its names."""
    runs = f"{home}/state/runs"
    try:
        names = sorted(n for n in os.listdir(runs) if n.startswith(REMOVING_PREFIX))
    except FileNotFoundError:
        return []
    for name in names:
        delete(f"{runs}/{name}")
    return names


def _ended(run: dict[str, Any]) -> str:
    """When the run ended (or, if it has not, was created): crew/housekeeping.py `_age`."""
    return str(run.get("endedAt") or run["createdAt"])


def _why(looked: list[tuple[RunFiles, dict[str, Any], str | None]]) -> list[tuple[str, str]]:
    return [(files.run_id, why) for files, _, why in looked if why is not None]


class _Report:
    """What the command prints, made before anything is removed (a run's fields it cannot print
    are then still a Fallback): its notes on stderr, then the runs on stdout."""

    __slots__ = ("notes", "out")

    def __init__(self, notes: list[str], out: str) -> None:
        self.notes, self.out = notes, out


def _report(
    call: Call,
    removed: list[dict[str, Any]],
    kept: list[tuple[str, str]],
    *,
    dry_run: bool = False,
) -> _Report:
    """crew/render.py's view of crew/results/admin.py `Removed`."""
    notes = [f"kept run {run_id}: {why}" for run_id, why in kept]
    if "--json" in call.options:
        document = {
            "dryRun": dry_run,
            "removed": [_removed(run) for run in removed],
            "kept": [{"runId": run_id, "reason": why} for run_id, why in kept],
        }
        return _Report(notes, json_text(document))
    lines = []
    if not removed:
        lines.append("No run would be removed." if dry_run else "No run was removed.")
    for run in removed:
        ended = f", ended {_ago(run['endedAt'])}" if run.get("endedAt") else ""
        what = f"run {run['runId']} ({run['status']}, crew {run['crew']}{ended})"
        lines.append(f"{'Would remove' if dry_run else 'Removed'} {what}")
    return _Report(notes, "".join(f"{terminal_safe(line)}\n" for line in lines))


def _print(report: _Report, leftovers: list[str]) -> None:
    """The report, with a note for each leftover of a removal cut short that was deleted."""
    import sys

    cut_short = [f"deleted {name}, left by a removal that was cut short" for name in leftovers]
    for note in [*report.notes, *cut_short]:
        sys.stderr.write(f"crew: {terminal_safe(note)}\n")
    sys.stdout.write(report.out)


def _removed(run: dict[str, Any]) -> dict[str, Any]:
    """crew/results/admin.py `RemovedRun.to_json`."""
    found = {"runId": run["runId"], "crew": run["crew"], "status": run["status"]}
    found["createdAt"] = run["createdAt"]
    if run.get("endedAt"):
        found["endedAt"] = run["endedAt"]
    return found


def _ago(timestamp: str) -> str:
    from crew.textviews import ago

    return ago(timestamp)
