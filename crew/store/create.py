"""Creating a run's files: assembled in `runs/.new-<id>/` and renamed into place, so a run
appears whole or not at all."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

from crew.errors import StoreError
from crew.ids import new_run_id
from crew.models import Event
from crew.paths import Home, RunPaths
from crew.registry import Box
from crew.store import eventlog, jsonl
from crew.store.files import FILE_MODE, fsync_dir, fsync_enabled, make_dirs, open_fd, open_read
from crew.store.runstore import RunStore
from crew.store.state import RunState

#: Makes a new run's state and its first events, given the run id chosen for it.
Build = Callable[[str], tuple[RunState, list[Event]]]
#: Adds more files to a new run while it is still being assembled.
Populate = Callable[[RunPaths], None]


def create_run_files(home: Home, build: Build, *, populate: Populate | None = None) -> RunStore:
    """Create a new run in `home` from what `build` makes for a fresh run id (and `populate`
    adds to its folder before it appears)."""
    make_dirs(home.runs_dir, mode=0o700)  # prompts and answers are private to the user
    for _ in range(20):
        run_id = new_run_id()
        staging = home.staging(run_id)
        try:
            made = _populate(staging, *build(run_id))
            if populate is not None:
                populate(staging)
            try:
                os.rename(staging.root, home.runs_dir / run_id)
            except OSError:
                continue  # another run was created at the same instant: take the next one
            if fsync_enabled():
                fsync_dir(home.runs_dir)
            store = RunStore(home.run(run_id))
            store.adopt(made)  # the files it wrote, renamed with their folder
            return store
        finally:
            if staging.root.exists():
                _remove_tree(staging.root)
    raise StoreError(f"Could not create a new run in {home.runs_dir}: no free run id.")


def _populate(paths: RunPaths, state: RunState, events: list[Event]) -> RunStore:
    for folder in (paths.root, paths.mailbox_dir, paths.logs_dir, paths.runtime_dir):
        make_dirs(folder)
    jsonl.append(paths.events, [e.to_line() for e in eventlog.framed(events)])
    for box in Box:
        paths.box(box).touch(mode=FILE_MODE)
    store = RunStore(paths)
    store.snapshots.create(state.run, state.task_list())
    store.write_applied(events[-1].seq if events else 0, tasks=len(state.tasks))
    store.remember(state)
    return store


def copy_file(source: Path, target: Path) -> None:
    """Copy `source` to a new file `target` (nothing if there is no `source`), never through a
    symbolic link at either end."""
    try:
        reader = open_read(source)
    except FileNotFoundError:
        return
    with reader, os.fdopen(open_fd(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL), "wb") as writer:
        shutil.copyfileobj(reader, writer)
        if fsync_enabled():
            writer.flush()
            os.fsync(writer.fileno())


def _remove_tree(root: Path) -> None:
    for folder, dirs, files in os.walk(root, topdown=False):
        for name in files:
            (Path(folder) / name).unlink(missing_ok=True)
        for name in dirs:
            (Path(folder) / name).rmdir()
    root.rmdir()
