"""`tasks/<taskId>.json`: one snapshot file per task, so a transaction rewrites only the tasks it
changed (docs/design.md, "One file per task").

Each file holds one Task exactly as an element of the old `tasks.json` array did: pretty JSON,
2-space indent, keys in schema order, trailing newline, written atomically (through a spare in
`.runtime/tasks/` whose name is swapped with it: crew/store/snapshot.py `write_by_twin`). The
run's task order (crew.toml's) is the order of `config.tasks` in manifest.json. A run made by an
older crew has no `tasks/` folder and keeps its tasks in `tasks.json`, which is read as before
until the next writer converts it.

This module uses the standard library only: a command's fast path reads the tasks with
`read_task_snapshots` and `json.loads`, before anything heavier is imported.
"""

from __future__ import annotations

import os

#: The folder of the task snapshots, in a run's folder.
TASKS_DIR = "tasks"
#: A task snapshot's name is its task id and this.
SUFFIX = ".json"
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC


def task_ids(run_dir: str | os.PathLike[str]) -> set[str] | None:
    """The ids of the tasks whose snapshots `read_task_snapshots` reads, without reading them
    (None: the run has no `tasks/` folder)."""
    try:
        entries = os.scandir(os.path.join(run_dir, TASKS_DIR))
    except FileNotFoundError:
        return None
    with entries:
        return {entry.name[: -len(SUFFIX)] for entry in entries if is_snapshot(entry.name)}


def is_snapshot(name: str) -> bool:
    """Not a temp file of a write in progress, nor one set aside as corrupt."""
    return not name.startswith(".") and name.endswith(SUFFIX)


def read_task_snapshots(run_dir: str | os.PathLike[str]) -> dict[str, bytes] | None:
    """The bytes of every task snapshot of the run in `run_dir`, by task id, in no particular
    order (None: the run has no `tasks/` folder — an older run, whose tasks are the JSON array
    in `tasks.json`). Temp files of writes in progress, and files set aside as corrupt
    (`<taskId>.json.corrupt-<timestamp>`), are not task snapshots. A link raises OSError (ELOOP):
    crew never follows one inside a run folder."""
    try:
        entries = os.scandir(os.path.join(run_dir, TASKS_DIR))
    except FileNotFoundError:
        return None
    found: dict[str, bytes] = {}
    with entries:
        for entry in entries:
            name = entry.name
            if not is_snapshot(name):
                continue
            try:
                fd = os.open(entry.path, _READ_FLAGS)
            except FileNotFoundError:  # set aside just now (a rename never leaves a gap)
                continue
            try:
                found[name[: -len(SUFFIX)]] = _read_all(fd)
            finally:
                os.close(fd)
    return found


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 1 << 16):
        chunks.append(chunk)
    return b"".join(chunks)
