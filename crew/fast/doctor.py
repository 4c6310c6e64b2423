"""`crew doctor` without typer: its command line read from the fast path's table, then the
library's doctor (crew/doctor.py) run and printed as the full command runs and prints it.

Unlike the other fast commands this one imports pydantic: its checks are the store's recovery
through the models. What it is spared is typer — its import and the adapters it builds for each
option: by CPU, 1.38 times the typer floor became 1.26 (docs/performance.md) — and, when it only
examines, filelock's import: it pins each run under the fast path's own `flock` of the run's
lock (crew/fast/runfiles.py `RunLock`); a lock kept busy hands the command to the full one,
which waits its turn (nothing was written or printed before). A repair takes the lock as the
library does. Its errors are the library's, printed by the one renderer; an exception the fast
path hands on (a file of a shape it did not expect) runs the full command, whose doctor finds
the same and says so (a repair done twice repairs nothing the second time).
"""

from __future__ import annotations

from crew.fast import pause_collector, resume_collector
from crew.fast.cmdline import Call
from crew.fast.runfiles import RunLock

TYPE_CHECKING = False
if TYPE_CHECKING:
    from crew.store.runstore import RunStore


def doctor(call: Call) -> int:
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
