"""`crew init` without typer: its command line read from the fast path's table, then the
library's crew/scaffold.py `init_home` run and printed as the full command runs and prints it.

It writes, so once it begins nothing goes back to the full command (crew/fast `committed`):
an error on the way is the library's, said by the one renderer.
"""

from __future__ import annotations

from crew.fast import committed
from crew.fast.cmdline import Call, Fallback


def init(call: Call) -> int:
    directory = call.arguments.get("directory")
    if directory == "":
        raise Fallback  # the typer command reads what this becomes
    committed(call, "crew.scaffold")
    from pathlib import Path

    from crew.render import emit
    from crew.scaffold import init_home

    return emit(
        init_home(Path(directory) if directory is not None else None), json="--json" in call.options
    )
