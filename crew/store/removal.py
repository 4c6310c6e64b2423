"""Removing a run's folder for good (`crew rm`, `crew prune`).

Under the run's lock (`hold`), once the caller has checked that no leader leads it, `set_aside`
renames the folder to `runs/.rm-<id>/`: one atomic step, after which the run is gone from every
listing and no command can open it. crew/store/deletion.py `delete` then removes what that
folder holds. A removal cut
short (a crash, a full disk) leaves a `.rm-` folder, never a run with half its files; the next
removal deletes such `leftovers`. Nothing here follows a symbolic link: a linked run folder is
refused, and a link inside one is removed, not what it points to.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from crew.errors import NotFound, StoreError
from crew.paths import REMOVING_PREFIX, Home, RunPaths
from crew.store.files import fsync_dir, fsync_enabled, refuse_link
from crew.store.lock import locked


@contextmanager
def hold(paths: RunPaths) -> Iterator[None]:
    """The run's lock, for a removal: NotFound if the run went meanwhile (another removal)."""
    refuse_link(paths.root)
    lock = locked(paths.lock)
    try:
        lock.__enter__()
    except StoreError as error:
        if error.errno == errno.ENOENT:  # its folder, where the lock file was, has gone
            raise _gone(paths) from None
        raise
    try:
        if not paths.root.is_dir():
            raise _gone(paths)
        yield
    finally:
        lock.__exit__(None, None, None)


def _gone(paths: RunPaths) -> NotFound:
    return NotFound(f"Run {paths.run_id} is gone: another process removed it meanwhile.")


def set_aside(paths: RunPaths) -> Path:
    """Move the run out of the runs folder (the caller holds its lock): from now on it is no
    run at all. Returns where it went, for `delete`."""
    refuse_link(paths.root)
    target = paths.home.removing(paths.run_id)
    os.rename(paths.root, target)
    if fsync_enabled():
        fsync_dir(paths.home.runs_dir)
    return target


def leftovers(home: Home) -> list[Path]:
    """Folders that removals cut short left behind (`runs/.rm-<id>`)."""
    try:
        names = os.listdir(home.runs_dir)
    except FileNotFoundError:
        return []
    return [home.runs_dir / n for n in sorted(names) if n.startswith(REMOVING_PREFIX)]
