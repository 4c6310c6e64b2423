"""`crew doctor`: find what is damaged in a run's files, and repair what can be repaired.

Nothing is ever deleted: bad lines and torn tails go to `<file>.corrupt`, corrupt snapshots to
`<file>.corrupt-<timestamp>`, and snapshots are rebuilt from events.jsonl.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from contextlib import AbstractContextManager
from functools import partial
from pathlib import Path

from crew.domain.lease import LeaseState, read_lease
from crew.errors import CrewError, from_os_error
from crew.models import CheckedEvent, Event, MailboxLine
from crew.paths import STAGING_PREFIX, Home, RunPaths
from crew.registry import Box
from crew.results.admin import DoctorReport, Finding
from crew.store import jsonl, pin, snapshot
from crew.store.mailfile import Line
from crew.store.pin import Pin
from crew.store.runstore import RunStore
from crew.store.state import LogsRead, Recovery, describe_cut, listed

#: How many times an examination reads a run again when a writer rewrote a log meanwhile.
PIN_ATTEMPTS = 3
#: How an examination takes a run's lock: the run lock as RunStore takes it, unless the caller
#: takes the same `flock` its own way (the fast path, crew/fast/doctor.py).
TakeLock = Callable[[RunStore], AbstractContextManager[object]]


def doctor(
    home: Home, ref: str | None = None, *, repair: bool = False, lock: TakeLock = RunStore.lock
) -> DoctorReport:
    """Examine one run (`ref`) or every run of the home; with `repair`, fix what can be fixed."""
    report = DoctorReport(repair=repair)
    if ref is None:
        report.findings.extend(_staging_leftovers(home, repair=repair))
        run_ids = home.run_ids()
    else:
        run_ids = [home.resolve_run(ref).run_id]
    for run_id in run_ids:
        report.runs.append(run_id)
        try:
            store = RunStore(home.run(run_id))
            report.findings.extend(examine_run(store, repair=repair, lock=lock))
        except CrewError as exc:  # a run crew refuses to read (a link, a busy lock, …)
            report.findings.append(Finding(run_id, exc.message, repairable=False))
        except OSError as exc:  # one it cannot read (a folder where a file should be, …)
            report.findings.append(Finding(run_id, from_os_error(exc).message, repairable=False))
    return report


def examine_run(
    store: RunStore, *, repair: bool = False, lock: TakeLock = RunStore.lock
) -> list[Finding]:
    """Every problem of one run, found (and with `repair`, fixed).

    A repair works under the run lock throughout. An examination only pins the run under the
    lock and reads it unlocked (crew/store/pin.py), so that however big the run, the leader and
    the run's writers are held up for a moment only.
    """
    if repair:
        with lock(store):
            return _check_temp_files(store, repair=True) + _examine(store, None, repair=True)
    for _ in range(PIN_ATTEMPTS):
        with lock(store):
            temps = _check_temp_files(store, repair=False)
            pinned = pin.take(store.paths)
        findings = temps + _examine(store, pinned, repair=False)
        if pin.holds(pinned):
            return findings
    with lock(store):  # rewritten under every read: look once more, holding the lock
        return _check_temp_files(store, repair=False) + _examine(store, None, repair=False)


def _examine(store: RunStore, pinned: Pin | None, *, repair: bool) -> list[Finding]:
    run_id = store.run_id
    findings, events, mail = _check_logs(store.paths, run_id, pinned, repair=repair)
    try:
        recovery = store.recover(full=True, pin=pinned, read=LogsRead(events, mail))
    except CrewError as exc:
        findings.append(Finding(run_id, exc.message, repairable=False))
        return findings
    state_findings = _state_findings(store, recovery, run_id)
    if repair:
        for box, ids in recovery.unrecorded.items():  # first: the marker measures the files
            jsonl.rewrite_clean(store.paths.box(box), MailboxLine, partial(_one_of, set(ids)))
        store.apply_recovery(recovery)  # and the marker, for files the checks rewrote
        for finding in state_findings:
            finding.repaired = finding.repairable
    findings.extend(state_findings)
    findings.extend(_duplicate_seqs(store.paths, run_id, events))
    run = recovery.state.run
    if not run.status.terminal:
        lease = read_lease(store.paths, stale_after=run.config.crew.leader_stale_after)
        if lease.state is LeaseState.STALE:
            findings.append(
                Finding(
                    run_id,
                    f"the run is {run.status} but its leader is gone ({lease.reason}): "
                    f"`crew resume {run_id}` leads it again, `crew cancel {run_id}` ends it",
                    path=store.paths.leader,
                    repairable=False,
                )
            )
    return findings


def _check_logs(
    paths: RunPaths, run_id: str, pinned: Pin | None, *, repair: bool
) -> tuple[list[Finding], list[Event], dict[Box, list[Line]]]:
    """Bad lines and torn tails of the logs; and the events and mailbox lines read (for the
    other checks: each file is read once)."""
    findings: list[Finding] = []
    events: list[Event] = []
    mail: dict[Box, list[Line]] = {}
    logs: list[tuple[Path, type[Event] | type[MailboxLine], Box | None]] = [
        (paths.events, CheckedEvent, None)
    ]
    logs.extend((paths.box(b), MailboxLine, b) for b in Box)
    for path, model, box in logs:
        end = pinned.end(path) if pinned is not None else None
        result = jsonl.read(path, model, end=end)
        if box is None:
            events = [e for e in result.records if isinstance(e, Event)]
        else:
            mail[box] = [r.root for r in result.records if isinstance(r, MailboxLine)]
        found = [Finding(run_id, bad.reason, path=path, line=bad.line) for bad in result.bad]
        if result.tail_bytes:
            found.append(
                Finding(
                    run_id,
                    f"torn tail: {result.tail_bytes} byte(s) after the last complete line "
                    "(a write cut short by a crash)",
                    path=path,
                    line=result.line,
                )
            )
        if repair and found:
            jsonl.rewrite_clean(path, model)
            for finding in found:
                finding.repaired = True
        findings.extend(found)
    return findings, events, mail


def _state_findings(store: RunStore, recovery: Recovery, run_id: str) -> list[Finding]:
    findings = [
        Finding(
            run_id,
            f"snapshot is {why}" if why == "missing" else f"corrupt snapshot: {why}",
            path=path,
        )
        for path, why in recovery.broken
    ]
    if recovery.cut:
        findings.append(
            Finding(
                run_id,
                f"{describe_cut(recovery.cut)} ends the log: it is not part of the run "
                "(repair sets it aside)",
                path=store.paths.events,
            )
        )
    if recovery.mismatch:
        findings.append(
            Finding(
                run_id,
                "the task files or manifest.json disagree with the state events.jsonl describes",
                path=store.paths.tasks_dir,
            )
        )
    lost = recovery.history_missing
    if lost is not None:
        findings.append(
            Finding(
                run_id,
                f"{lost}: some of the run's history is missing, and no command may change the "
                f"run (`crew rerun {run_id}` starts its tasks again in a new run)",
                path=store.paths.events,
                repairable=False,
            )
        )
    for box, missing in recovery.gaps.items():
        findings.append(
            Finding(
                run_id,
                f"{len(missing)} message update(s) recorded in events.jsonl are missing here "
                f"({listed([m.id for m in missing])})",
                path=store.paths.box(box),
            )
        )
    for box, ids in recovery.unrecorded.items():
        findings.append(
            Finding(
                run_id,
                f"lines of {len(ids)} message(s) that events.jsonl does not record here "
                f"({listed(ids)}): no crew command wrote them (a hand edit, or lines copied from "
                f"another run or file; repair sets them aside to {box.value}.jsonl.corrupt)",
                path=store.paths.box(box),
            )
        )
    return findings


def _one_of(ids: set[str], line: MailboxLine) -> bool:
    return line.root.id in ids


def _duplicate_seqs(paths: RunPaths, run_id: str, events: list[Event]) -> list[Finding]:
    seqs = Counter(e.seq for e in events)
    duplicated = sorted(seq for seq, count in seqs.items() if count > 1)
    if not duplicated:
        return []
    shown = ", ".join(str(s) for s in duplicated[:5]) + (", …" if len(duplicated) > 5 else "")
    return [
        Finding(
            run_id,
            f"{len(duplicated)} event seq number(s) appear more than once ({shown}); "
            "two copies of the log were merged",
            path=paths.events,
            repairable=False,
        )
    ]


def _check_temp_files(store: RunStore, *, repair: bool) -> list[Finding]:
    """Temp files of atomic writes whose writer was killed: never a record, safe to remove."""
    findings: list[Finding] = []
    for temp in snapshot.leftovers(*store.temp_folders()):
        finding = Finding(store.run_id, "leftover temp file of an interrupted write", path=temp)
        if repair:
            temp.unlink(missing_ok=True)
            finding.repaired = True
        findings.append(finding)
    return findings


def _staging_leftovers(home: Home, *, repair: bool) -> list[Finding]:
    """Half-created runs (a crash during `crew run` before the run was published)."""
    findings: list[Finding] = []
    if not home.runs_dir.is_dir():
        return findings
    for folder in sorted(home.runs_dir.glob(f"{STAGING_PREFIX}*")):
        if folder.name.endswith(jsonl.CORRUPT_SUFFIX):
            continue  # set aside by an earlier repair
        finding = Finding(
            folder.name.removeprefix(STAGING_PREFIX),
            "a run whose creation was interrupted (it never started)",
            path=folder,
        )
        if repair:
            aside = folder.with_name(folder.name + jsonl.CORRUPT_SUFFIX)
            folder.rename(aside)
            finding.repaired = True
        findings.append(finding)
    return findings
