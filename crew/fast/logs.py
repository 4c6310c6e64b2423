"""`crew logs RUN TASK` without typer or pydantic: a worker's output as the full command shows
it, with crew/loglines.py, the full command's own code — its bytes as stored when piped or with
`--raw`, made safe on a terminal; or, with `--tail`, `--since`, `--timestamps` or `--json`, its
lines. Following (`-f`) is the full command's: its start-up is nothing beside the wait; so are
the logs of every task or of several, and a `--tail` or `--since` it would refuse.
"""

from __future__ import annotations

import os
import stat
import sys

from crew.errors import UsageError
from crew.fast.cmdline import Call, Fallback
from crew.fast.runfiles import is_task_id, open_run
from crew.fast.status import read_run
from crew.loglines import LineStyle, show_lines, show_output, since_us, tail_count
from crew.output import SETTINGS, Color, colored
from crew.store.logindex import TaskLog, merged

_CHUNK = 65536
#: What --color takes on the fast path (typer takes other cases of them too).
_COLORS = {color.value: color for color in Color}


def logs(call: Call) -> int:
    task_id = call.arguments["task"]
    color = _COLORS.get(call.options.get("--color", "auto"))
    if not is_task_id(task_id) or color is None:
        raise Fallback
    try:
        tail = tail_count(call.options.get("--tail"))
        since = since_us(call.options.get("--since"))
    except UsageError:
        raise Fallback from None  # the full command says why
    SETTINGS.color = color
    files = open_run(call)
    files.clean()
    run = read_run(files)
    files.read_task(run, task_id)  # the run has the task
    path = f"{files.root}/logs/{task_id}.log"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return 0  # it has printed nothing yet
    except OSError:
        raise Fallback from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise Fallback  # not a file: the full command says so
    raw = "--raw" in call.options
    timestamps, json = "--timestamps" in call.options, "--json" in call.options
    with os.fdopen(fd, "rb") as log:
        if tail is None and since is None and not (timestamps or json):
            show_output(iter(lambda: log.read(_CHUNK), b""), raw=raw, flush=False)
            return 0
    from pathlib import Path

    style = LineStyle(
        (task_id,),
        prefixed=False,
        timestamps=timestamps,
        json=json,
        raw=raw or not (sys.stdout.isatty() or color is Color.ALWAYS),
        colour=not json and colored(),
    )
    lines = merged([TaskLog(task_id, Path(path))], final=True, since=since, tail=tail)
    show_lines([lines], style, flush=False)
    return 0
