"""`crew logs RUN [TASK]...` without typer or pydantic: workers' output as the full command
shows it, with crew/loglines.py, the full command's own code — one task's bytes as stored when
piped or with `--raw`, made safe on a terminal; or, with `--tail`, `--since`, `--timestamps` or
`--json`, its lines; and every task's, or several tasks', lines after their task ids.
Following (`-f`) is the full command's: its start-up is nothing beside the wait; so is a
`--tail` or `--since` it would refuse, or a task the run lacks.
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

_CHUNK = 65536
#: What --color takes on the fast path (typer takes other cases of them too).
_COLORS = {color.value: color for color in Color}


def logs(call: Call) -> int:
    named = list(dict.fromkeys(call.rest))
    color = _COLORS.get(call.options.get("--color", "auto"))
    if not all(map(is_task_id, named)) or color is None:
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
    if len(named) == 1:
        files.read_task(run, named[0])  # the run has the task
        shown = named
    else:  # the tasks named, prefixed, or every task of the run, in its order
        every = [task["id"] for task in files.read_tasks(run)]
        if not set(named) <= set(every):
            raise Fallback  # a task the run lacks: the full command says so
        shown = named or every
    paths = {task_id: f"{files.root}/logs/{task_id}.log" for task_id in shown}
    raw = "--raw" in call.options
    timestamps, json = "--timestamps" in call.options, "--json" in call.options
    if len(named) == 1 and tail is None and since is None and not (timestamps or json):
        return _output(paths[named[0]], raw=raw)
    for path in paths.values():
        _regular(path)
    from pathlib import Path

    from crew.store.logindex import TaskLog, merged

    style = LineStyle(
        tuple(shown),
        prefixed=len(named) != 1,
        timestamps=timestamps,
        json=json,
        raw=raw or not (sys.stdout.isatty() or color is Color.ALWAYS),
        colour=not json and colored(),
    )
    read = [TaskLog(task_id, Path(path)) for task_id, path in paths.items()]
    show_lines([merged(read, final=True, since=since, tail=tail)], style, flush=False)
    return 0


def _output(path: str, *, raw: bool) -> int:
    """One task's output, as stored or made safe (crew/loglines.py `show_output`)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return 0  # it has printed nothing yet
    except OSError:
        raise Fallback from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise Fallback  # not a file: the full command says so
    with os.fdopen(fd, "rb") as log:
        show_output(iter(lambda: log.read(_CHUNK), b""), raw=raw, flush=False)
    return 0


def _regular(path: str) -> None:
    """A log that is there is a file (not a link, a folder…: the full command's to refuse)."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    except OSError:  # `logs/` not a folder, unreadable: the full command names what
        raise Fallback from None
    if not stat.S_ISREG(mode):
        raise Fallback
