"""Low-level file primitives shared by the JSONL log and the snapshots: durability, modes, and
never following a symbolic link.

A run folder can come from anywhere a git checkout can (a pull, a clone, an archive), and git
stores symbolic links: an `events.jsonl` that is a link to `~/.bashrc` would have crew append to
it. So crew opens every file of a run with O_NOFOLLOW, refuses a run whose folders are links, and
refuses a state folder other users may write to (they could plant such links).
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import BinaryIO

from crew import env
from crew.errors import Refused, link_refused

#: Files are created 0644 and folders 0755 minus the umask: never group- or world-writable.
FILE_MODE = 0o644
DIR_MODE = 0o755
_NOT_WRITABLE_BY_OTHERS = 0o022


def fsync_enabled() -> bool:
    """Durability policy: fsync appends and snapshots unless CREW_FSYNC=0 (throw-away runs)."""
    return env.FSYNC.enabled(default=True)


#: Where Linux names the current boot: a new value after every reboot (and so every power cut).
_BOOT_ID_FILE = "/proc/sys/kernel/random/boot_id"
_boot_id: list[str | None] = []


def boot_id() -> str | None:
    """This boot's id (None where the system does not say: then every file is fsynced).

    Files written after the commit point (mailbox lines, snapshots, checkpoints, the marker)
    are never fsynced where this is known: within one boot the page cache is what every reader
    sees, even after the writer was killed, so only a crash of the whole system can lose them,
    and the marker names the boot it was written in. A marker of another boot sends the next
    reader to check every such file against the event log (docs/design.md, "Durability").
    """
    if not _boot_id:
        try:
            with open(_BOOT_ID_FILE, "rb") as handle:
                text = handle.read(64).decode("ascii", "replace").strip()
        except OSError:
            text = ""
        _boot_id.append(text if len(text) == BOOT_ID_WIDTH and " " not in text else None)
    return _boot_id[0]


#: A boot id's length (a UUID).
BOOT_ID_WIDTH = 36


def fsync_derived() -> bool:
    """Whether files derived from the event log are fsynced: only where the boot cannot be told
    (see `boot_id`), and never with CREW_FSYNC=0. The event log itself follows `fsync_enabled`."""
    return fsync_enabled() and boot_id() is None


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


def open_fd(path: Path, flags: int, mode: int = FILE_MODE) -> int:
    """`os.open` that never follows a symbolic link at `path` (Refused if it is one)."""
    try:
        return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise link_refused(path) from None
        raise


def open_read(path: Path) -> BinaryIO:
    """A file opened for reading, never through a symbolic link."""
    fd = open_fd(path, os.O_RDONLY)
    try:
        if stat.S_ISDIR(os.fstat(fd).st_mode):  # else its first read fails, naming no file
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR))
        return os.fdopen(fd, "rb")
    except OSError as exc:  # a folder where a file should be: name the path, not the fd
        os.close(fd)
        raise OSError(exc.errno, exc.strerror, str(path)) from None


def read_bytes(path: Path) -> bytes:
    """The whole content of a file, never read through a symbolic link."""
    with open_read(path) as handle:
        return handle.read()


def refuse_link(path: Path) -> None:
    """Refused if `path` is a symbolic link (for files opened by a library, e.g. the lock)."""
    if path.is_symlink():
        raise link_refused(path)


def refuse_writable_by_others(folder: Path) -> None:
    """Refused if users other than the owner may write to `folder` (if it exists). A link is
    judged by the folder it leads to (a state folder kept on another disk): the link itself
    could only be made by whoever may write the folder that holds it, and crew refuses the
    links inside a run folder on their own (`refuse_link`)."""
    try:
        mode = stat.S_IMODE(os.stat(folder).st_mode)
    except FileNotFoundError:
        return
    if mode & _NOT_WRITABLE_BY_OTHERS:
        raise Refused(
            f"{folder} can be written by other users (mode {mode:04o}), who could change a "
            "run's files or plant links in them.",
            hint=f"Make it yours alone: `chmod go-w {folder}`.",
        )


def write_all(fd: int, data: bytes) -> None:
    """Write every byte of `data` (regular files may take it in several writes)."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]
