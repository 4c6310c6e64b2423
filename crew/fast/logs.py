"""`crew logs RUN TASK` without typer or pydantic: a worker's output as crew/render_streams.py
`show_output` prints it — its bytes as stored when piped or with `--raw`, made safe on a
terminal. Following (`-f`) is the full command's: its start-up is nothing beside the wait."""

from __future__ import annotations

import os
import stat
import sys

from crew.fast.cmdline import Call, Fallback
from crew.fast.runfiles import is_task_id, open_run
from crew.fast.status import read_run

TYPE_CHECKING = False  # `typing` costs a fast command a few milliseconds
if TYPE_CHECKING:
    from collections.abc import Callable

_CHUNK = 65536


def logs(call: Call) -> int:
    task_id = call.arguments["task"]
    if not is_task_id(task_id):
        raise Fallback
    files = open_run(call)
    files.clean()
    run = read_run(files)
    files.read_task(run, task_id)  # the run has the task
    try:
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(f"{files.root}/logs/{task_id}.log", flags)
    except FileNotFoundError:
        return 0  # it has printed nothing yet
    except OSError:
        raise Fallback from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise Fallback  # not a file: the full command says so
    with os.fdopen(fd, "rb") as log:
        _show(log.read, raw="--raw" in call.options or not sys.stdout.isatty())
    return 0


def _show(read: Callable[[int], bytes], *, raw: bool) -> None:
    if raw:
        out = sys.stdout.buffer
        while chunk := read(_CHUNK):
            out.write(chunk)
        return
    from crew.text import TerminalStream, colors_wanted  # the standard library only

    stream = TerminalStream(colors=colors_wanted())
    try:
        while chunk := read(_CHUNK):
            sys.stdout.write(stream.feed(chunk))
    finally:
        sys.stdout.write(stream.end())
        sys.stdout.flush()
