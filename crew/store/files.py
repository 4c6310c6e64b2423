"""Low-level file primitives shared by the JSONL log and the snapshots: durability and modes."""

from __future__ import annotations

import os
from pathlib import Path

from crew import env

#: Files are created 0644 and folders 0755 minus the umask: never group- or world-writable.
FILE_MODE = 0o644
DIR_MODE = 0o755
_NOT_WRITABLE_BY_OTHERS = 0o022


def fsync_enabled() -> bool:
    """Durability policy: fsync appends and snapshots unless CREW_FSYNC=0 (throw-away runs)."""
    return env.FSYNC.enabled(default=True)


def fsync_dir(folder: Path) -> None:
    """Make a creation, rename or removal in `folder` durable."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def make_dirs(folder: Path, *, mode: int = DIR_MODE) -> None:
    """Create `folder` and its parents, never group- or world-writable whatever the umask."""
    missing: list[Path] = []
    current = folder
    while not current.exists():
        missing.append(current)
        current = current.parent
    for path in reversed(missing):
        try:
            path.mkdir(mode=mode & ~_NOT_WRITABLE_BY_OTHERS)
        except FileExistsError:
            continue
        if fsync_enabled():
            fsync_dir(path.parent)


def write_all(fd: int, data: bytes) -> None:
    """Write every byte of `data` (regular files may take it in several writes)."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]
