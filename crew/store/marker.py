"""`.runtime/applied`: how far the snapshots and mailbox files reflect the event log.

Every transaction ends by recording the last seq the files now reflect and the size each mailbox
file had then. A reader compares them with the log's last seq and the files' sizes: equal, and
the files need no checking (O(1) in the length of the history); a seq behind the log is a write
in progress or cut short; a mailbox file whose size changed outside a transaction (truncated,
deleted, edited by hand) is checked against the whole log.

The marker is overwritten in place, fixed width, with a checksum a reader verifies; no fsync and
no atomic replace (which costs ~0.5 ms a transaction on ext4): a marker lost or torn only makes
the next reader or writer check more.
"""

from __future__ import annotations

import os
import zlib
from dataclasses import dataclass

from crew import faults
from crew.paths import RunPaths
from crew.registry import Box
from crew.store.files import make_dirs, open_fd, read_bytes


@dataclass(frozen=True)
class Applied:
    """What the marker says."""

    seq: int
    #: Each mailbox file's size in bytes, in `Box` order (a missing file has size 0).
    sizes: tuple[int, ...]


def mailbox_sizes(paths: RunPaths) -> tuple[int, ...]:
    """The mailbox files' sizes now, in `Box` order."""
    sizes = []
    for box in Box:
        try:
            sizes.append(os.stat(paths.box(box)).st_size)
        except FileNotFoundError:
            sizes.append(0)
    return tuple(sizes)


def write(paths: RunPaths, seq: int) -> None:
    """Record that the files reflect the log up to `seq`, as they are now. Caller holds the lock."""
    fields = b" ".join(b"%020d" % n for n in (seq, *mailbox_sizes(paths)))
    data = fields + b" %08x\n" % zlib.crc32(fields)
    make_dirs(paths.runtime_dir)
    fd = open_fd(paths.applied, os.O_WRONLY | os.O_CREAT)
    try:
        os.pwrite(fd, data, 0)
    finally:
        os.close(fd)
    faults.crash_at(f"write:{paths.applied.name}")


def read(paths: RunPaths) -> Applied | None:
    """What the marker says (None: missing, torn, or from an older crew — check everything)."""
    try:
        raw = read_bytes(paths.applied)
    except FileNotFoundError:
        return None
    fields, _, check = raw.strip().rpartition(b" ")
    numbers = fields.split(b" ")
    if (
        len(numbers) != 1 + len(Box)
        or not all(n.isdigit() for n in numbers)
        or check != b"%08x" % zlib.crc32(fields)
    ):
        return None
    seq, *sizes = (int(n) for n in numbers)
    return Applied(seq, tuple(sizes))
