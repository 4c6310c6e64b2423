"""`crew doctor` without typer: its command line read from the fast path's table; when every
run it examines is plainly sound (crew/fast/examining.py tells so with the standard library
alone, in a fraction of the models' import), "no problems found", printed as crew/render.py
prints it; otherwise the library's doctor (crew/doctor.py), run and printed as the full command
runs and prints it. `--repair` is always the library's.

The library's doctor needs pydantic: its checks are the store's recovery through the models.
What it is spared here is typer — its import and the adapters it builds for each option — and,
when it only examines, filelock's import: it pins each run under the fast path's own `flock`
of the run's lock (crew/fast/runfiles.py `RunLock`); a lock kept busy hands the command to the
full one, which waits its turn (nothing was written or printed before). A repair takes the
lock as the library does. Its errors are the library's, printed by the one renderer; an
exception the fast path hands on (a file of a shape it did not expect) runs the full command,
whose doctor finds the same and says so (a repair done twice repairs nothing the second time).
"""

from __future__ import annotations

import os

from crew.fast import pause_collector, resume_collector
from crew.fast.cmdline import Call, Fallback
from crew.fast.examining import sound
from crew.fast.output import out, print_json, reader_may_go
from crew.fast.runfiles import (
    CORRUPT_SUFFIX,
    STAGING_PREFIX,
    RunFiles,
    RunLock,
    find_home,
    resolve_run,
    run_ids,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from crew.store.runstore import RunStore


def doctor(call: Call) -> int:
    runs = None if "--repair" in call.options else _sound_runs(call)
    if runs is not None:
        with reader_may_go():
            _no_problems(runs, call)
        return 0
    pause_collector()  # building the models: 76 collections, 21 ms, in a doctor of a small run
    try:
        from crew.doctor import doctor as examine
        from crew.output import SETTINGS
        from crew.paths import find_home
        from crew.render import emit
    finally:
        resume_collector()
    SETTINGS.quiet = "--quiet" in call.options or "-q" in call.options
    home = find_home(explicit=call.options.get("--home"))
    if "--repair" in call.options:
        report = examine(home, call.arguments.get("run"), repair=True)
    else:
        report = examine(home, call.arguments.get("run"), lock=_flock)
    return emit(report, json="--json" in call.options)


def _flock(store: RunStore) -> RunLock:
    return RunLock(str(store.paths.root))


def _sound_runs(call: Call) -> list[str] | None:
    """The runs the command examines, if the standard library can tell each one sound (None:
    the library's doctor looks, and says what it finds)."""
    try:
        home = find_home(call.options.get("--home"))
        ref = call.arguments.get("run")
        if ref is not None:
            ids = [resolve_run(home, ref)]
        elif _half_created(home):
            return None
        else:
            ids = run_ids(home)
    except (Fallback, OSError):  # no home, no such run, no runs folder: the library's to say
        return None
    return ids if all(sound(RunFiles(home, run_id)) for run_id in ids) else None


def _half_created(home: str) -> bool:
    """Whether the home holds a run whose creation was interrupted (crew/doctor.py
    `_staging_leftovers`)."""
    names = os.listdir(f"{home}/state/runs")
    return any(n.startswith(STAGING_PREFIX) and not n.endswith(CORRUPT_SUFFIX) for n in names)


def _no_problems(runs: list[str], call: Call) -> None:
    """crew/render.py's output of a DoctorReport with no findings."""
    if "--json" in call.options:
        print_json({"clean": True, "repair": False, "runs": runs, "findings": []})
    elif not ("--quiet" in call.options or "-q" in call.options):
        out(f"Checked {len(runs)} run{'s' * (len(runs) != 1)}: no problems found.")
