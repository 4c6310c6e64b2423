"""Removing runs: `crew rm` (the runs named) and `crew prune` (ended runs beyond the newest N,
or that ended longer ago than a duration).

A run whose leader is alive is never removed, whatever the options. A run that has not ended
(its leader is gone: `crew resume` could still lead it) is removed only by `crew rm --force`;
`crew prune` always keeps it, and says so. Each run is checked again under its lock just before
it is set aside (crew/store/removal.py), so a leader that starts meanwhile is never removed
from under: either it took the lock first and is seen alive, or it finds the run gone.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass

from crew import clock
from crew.config import CrewSection
from crew.domain.lease import LeaseState, read_lease
from crew.errors import CrewError, Refused, UsageError
from crew.models import Run
from crew.paths import Home, RunPaths
from crew.results.admin import KeptRun, Removed, RemovedRun
from crew.store import removal
from crew.store.deletion import delete
from crew.store.runstore import RunStore

#: How old a heartbeat may be, for a run whose crew.toml cannot be read.
DEFAULT_STALE_AFTER = CrewSection().leader_stale_after


@dataclass(frozen=True)
class _Look:
    """A run as a removal finds it: the run (None if unreadable), and why it may not be removed
    (None if it may)."""

    run: Run | None
    why: str | None = None
    #: Refused because its leader is alive (which no option overrides).
    led: bool = False


def remove_runs(
    home: Home, refs: Sequence[str], *, force: bool = False, dry_run: bool = False
) -> Removed:
    """Remove the runs named (`latest`, ids or unique prefixes): all of them, or — if any is
    refused (its leader is alive; without `force`, it has not ended) — none. With `dry_run`,
    the same checks, and only say which would go."""
    named: dict[str, RunPaths] = {}
    for ref in refs:
        paths = home.resolve_run(ref)
        named[paths.run_id] = paths
    removed: dict[str, RemovedRun] = {}
    with ExitStack() as held:
        for run_id in sorted(named):  # one order for every remover: no two wait on each other
            held.enter_context(removal.hold(named[run_id]))
            look = _look(named[run_id], force=force)
            if look.why is not None:
                raise Refused(
                    f"Run {run_id} was not removed, nor any other run named: {look.why}.",
                    hint=_hint(run_id, look),
                )
            removed[run_id] = _removed(run_id, look.run)
        if dry_run:
            return Removed(removed=[removed[r] for r in named], dry_run=True)
        set_aside = [removal.set_aside(paths) for paths in named.values()]
    for folder in set_aside:
        delete(folder)
    return Removed(removed=[removed[r] for r in named], leftovers=_sweep(home))


def prune_runs(
    home: Home,
    *,
    keep: int | None = None,
    older_than: float | None = None,
    dry_run: bool = False,
) -> Removed:
    """Remove the ended runs beyond the `keep` newest runs and (both when both are given) that
    ended more than `older_than` seconds ago; with `dry_run`, only say which."""
    if keep is None and older_than is None:
        raise UsageError(
            "crew prune needs --keep N, --older-than DURATION or both: "
            "it never removes every run unasked."
        )
    if keep is not None and keep < 0:
        raise UsageError(f"--keep: expected a number of runs from 0 up, got {keep}.")
    ids = home.run_ids()  # oldest first
    candidates = ids[: max(len(ids) - keep, 0)] if keep is not None else ids
    result = Removed(dry_run=dry_run, leftovers=[] if dry_run else _sweep(home))
    for run_id in candidates:
        paths = home.run(run_id)
        look = _look(paths, force=False)
        if older_than is not None and look.run is not None and _age(look.run) < older_than:
            continue
        if look.why is None and not dry_run:
            look = _remove_one(paths)
        if look.why is not None:
            result.kept.append(KeptRun(run_id, look.why))
        else:
            result.removed.append(_removed(run_id, look.run))
    return result


def _remove_one(paths: RunPaths) -> _Look:
    """Remove one run if it may still be removed once its lock is held."""
    try:
        with removal.hold(paths):
            look = _look(paths, force=False)
            if look.why is not None:
                return look
            folder = removal.set_aside(paths)
    except CrewError as error:
        return _Look(None, error.message)
    delete(folder)
    return look


def _look(paths: RunPaths, *, force: bool) -> _Look:
    if paths.root.is_symlink():  # read nothing through it (`crew rm` refuses it as it locks it)
        return _Look(None, "its folder is a symbolic link, which crew never follows")
    problem = ""
    try:
        run: Run | None = RunStore(paths).state().run
    except CrewError as error:
        run, problem = None, error.message
    stale_after = run.config.crew.leader_stale_after if run is not None else DEFAULT_STALE_AFTER
    lease = read_lease(paths, stale_after=stale_after)
    if lease.state is LeaseState.ALIVE and lease.leader is not None:
        leader = lease.leader
        return _Look(run, f"its leader, pid {leader.pid} on {leader.host}, is alive", led=True)
    if force:
        return _Look(run)
    if run is None:
        return _Look(None, f"it cannot be read: {problem.rstrip('.')}")
    if not run.status.terminal:
        return _Look(run, f"it has not ended ({run.status})")
    return _Look(run)


def _hint(run_id: str, look: _Look) -> str:
    if look.led:
        return f"crew never removes a run that is being led: `crew cancel {run_id}` ends it first."
    return f"`crew cancel {run_id}` ends it; `crew rm --force {run_id}` removes it anyway."


def _age(run: Run) -> float:
    """Seconds since the run ended (or, if it has not, since it was created)."""
    try:
        return clock.seconds_since(run.ended_at or run.created_at)
    except ValueError:
        return 0.0


def _removed(run_id: str, run: Run | None) -> RemovedRun:
    if run is None:
        return RemovedRun(run_id)
    return RemovedRun(run_id, run.crew, run.status.value, run.created_at, run.ended_at)


def _sweep(home: Home) -> list[str]:
    """Delete what removals cut short left behind; their names."""
    found = removal.leftovers(home)
    for folder in found:
        delete(folder)
    return [folder.name for folder in found]
