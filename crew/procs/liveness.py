"""What /proc says of a process: whether it lives, and whose child it is; and the host a pid
means something on."""

from __future__ import annotations

import os


def host() -> str:
    """This machine's name: the kernel's node name, what `gethostname` returns (without the
    `socket` module's import)."""
    return os.uname().nodename


def stat_fields(pid: int) -> list[bytes] | None:
    """The fields of /proc/<pid>/stat after the command name (state, ppid, …); None if gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return handle.read().rsplit(b")", 1)[-1].split()
    except OSError:
        return None


def started(pid: int) -> int | None:
    """When the process started, in clock ticks after boot (None if it is gone): with its pid,
    what tells it from a later process the kernel gave the same pid."""
    fields = stat_fields(pid)
    try:
        return int(fields[19]) if fields is not None else None
    except (IndexError, ValueError):
        return None


def parent_of(pid: int) -> int | None:
    """The parent's pid (None if the process is gone)."""
    fields = stat_fields(pid)
    try:
        return int(fields[1]) if fields is not None else None
    except (IndexError, ValueError):
        return None


def is_zombie(pid: int) -> bool:
    """Dead, awaiting its parent (or gone)."""
    fields = stat_fields(pid)
    return fields is None or (bool(fields) and fields[0] in {b"Z", b"X"})


def is_alive(pid: int) -> bool:
    """Whether `pid` is a live process (a zombie awaiting its parent is not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return not is_zombie(pid)
