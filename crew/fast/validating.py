"""`crew validate` without typer: its command line read from the fast path's table, then the
library's check (crew/validation.py) run and printed as the full command runs and prints it.

Like `doctor`, it needs pydantic: its check is crew's config models. What it is spared is typer.
It writes nothing, so an exception the fast path hands on (a file of a shape it did not expect)
is the full command's to meet again and explain.
"""

from __future__ import annotations

from crew.fast import pause_collector, resume_collector
from crew.fast.cmdline import Call, Fallback


def validate(call: Call) -> int:
    crew_toml = call.arguments.get("crew_toml")
    if crew_toml == "":
        raise Fallback  # the typer command reads what this becomes
    pause_collector()  # building the models (crew/fast `pause_collector`)
    try:
        from pathlib import Path

        from crew.paths import find_home
        from crew.render import emit
        from crew.validation import validate as check
    finally:
        resume_collector()
    if crew_toml is not None:
        path = Path(crew_toml)
    else:
        path = find_home(explicit=call.options.get("--home")).config_file
    return emit(check(path), json="--json" in call.options)
