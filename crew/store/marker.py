"""`.runtime/applied`: how far the snapshots and mailbox files reflect the event log.

Every transaction ends by recording the last seq the files now reflect, the size events.jsonl
and each mailbox file had then, a count of the writes that made it, how many task snapshots
the files hold, and the boot it was written in. A reader compares them with the files (a few
`stat` calls and a listing of `tasks/`, no read of the log): equal, and the files need no
checking (O(1) in the length of the history); a log longer than recorded is a write in
progress or cut short, whose tail is rolled forward; a mailbox file whose size changed, or a
task file gone, outside a transaction (truncated, deleted, edited by hand) is checked against
the whole log, and so is everything when the marker was written in another boot: the files
written after the commit point are not fsynced, so a power cut may have lost their last writes.

The marker is overwritten in place, fixed width, with a checksum a reader verifies; no fsync and
no atomic replace (which costs ~0.5 ms a transaction on ext4): a marker lost or torn only makes
the next reader or writer check more.
"""

from __future__ import annotations

import os
import zlib
from dataclasses import dataclass, replace

from crew import faults
from crew.paths import RunPaths
from crew.registry import Box
from crew.store.files import BOOT_ID_WIDTH, boot_id, make_dirs, open_fd

#: The marker's format: its first field (an older crew's marker has none, and is not trusted).
_FORMAT = b"3"
#: The format before the task count: still read (its count unknown), and written back so by a
#: writer that does not know the count either (the fast path's, crew/fast/runfiles.py).
_UNCOUNTED = b"2"
#: Stands for the boot id where the system does not say (then every file is fsynced).
_NO_BOOT = b"-" * BOOT_ID_WIDTH
_LENGTH = 256


@dataclass(frozen=True)
class Applied:
    """What the marker says."""

    seq: int
    #: events.jsonl's size in bytes once that seq was written.
    events_size: int
    #: How many transactions wrote the marker (one that changed only volatile fields too).
    writes: int
    #: The boot the marker was written in (None: unknown).
    boot: str | None
    #: Each mailbox file's size in bytes, in `Box` order (a missing file has size 0).
    sizes: tuple[int, ...]
    #: How many task snapshots the files hold (None: a marker of format 2, which does not say):
    #: a task file deleted by hand is then seen, where nothing else names the tasks added.
    tasks: int | None

    @property
    def key(self) -> tuple[int, int, int]:
        """What names the state the files held when the marker was written."""
        return (self.seq, self.events_size, self.writes)


def mailbox_sizes(paths: RunPaths) -> tuple[int, ...]:
    """The mailbox files' sizes now, in `Box` order."""
    sizes = []
    for box in Box:
        try:
            sizes.append(os.stat(paths.box(box)).st_size)
        except FileNotFoundError:
            sizes.append(0)
    return tuple(sizes)


def describes(applied: Applied, paths: RunPaths, seq: int, tasks: int) -> bool:
    """Whether the marker says the files hold the log up to `seq` (the last seq events.jsonl
    holds) as they are: written in this boot, the mailbox files of the sizes it names, and as
    many task snapshots as it counts (`tasks`, where it counts them)."""
    return (
        applied.seq == seq
        and applied.boot == boot_id()
        and applied.sizes == mailbox_sizes(paths)
        and applied.tasks in (None, tasks)
    )


def file_size(path: os.PathLike[str]) -> int:
    """A file's size (0 if it is missing)."""
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return 0


def write(paths: RunPaths, applied: Applied) -> None:
    """Record that the files are as `applied` says. Caller holds the lock."""
    boot = applied.boot.encode() if applied.boot is not None else _NO_BOOT
    numbers = [applied.seq, applied.events_size, applied.writes]
    if applied.tasks is not None:
        numbers.append(applied.tasks)
    form = _FORMAT if applied.tasks is not None else _UNCOUNTED
    fields = b" ".join(
        [form, *(b"%020d" % n for n in numbers), boot, *(b"%020d" % n for n in applied.sizes)]
    )
    data = fields + b" %08x\n" % zlib.crc32(fields)
    try:
        fd = open_fd(paths.applied, os.O_WRONLY | os.O_CREAT)
    except FileNotFoundError:
        make_dirs(paths.runtime_dir)
        fd = open_fd(paths.applied, os.O_WRONLY | os.O_CREAT)
    try:
        os.pwrite(fd, data, 0)
    finally:
        os.close(fd)
    faults.crash_at("write:applied")


def advanced(
    base: Applied, seq: int, events_size: int, ends: dict[Box, int], tasks: int
) -> Applied:
    """The marker after a transaction that began on `base` (checked true) and whose appends
    ended at `events_size` and `ends` (the mailbox files it wrote): nothing is measured."""
    sizes = tuple(ends.get(box, size) for box, size in zip(Box, base.sizes, strict=True))
    return Applied(seq, events_size, base.writes + 1, boot_id(), sizes, tasks)


def measured(paths: RunPaths, seq: int, old: Applied | None, tasks: int) -> Applied:
    """A marker for `seq` describing the files as they are now, counted one write on from
    `old` unless it says nothing new (then it is written back as it was)."""
    applied = now(paths, seq, old.writes if old is not None else 1, tasks)
    return applied if applied == old else replace(applied, writes=applied.writes + 1)


def now(paths: RunPaths, seq: int, writes: int, tasks: int) -> Applied:
    """A marker for `seq` describing the files as they are now (their sizes read), which hold
    `tasks` task snapshots."""
    return Applied(seq, file_size(paths.events), writes, boot_id(), mailbox_sizes(paths), tasks)


def read(paths: RunPaths) -> Applied | None:
    """What the marker says (None: missing, torn, or from an older crew — check everything)."""
    try:
        fd = open_fd(paths.applied, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        raw = os.read(fd, _LENGTH)
    finally:
        os.close(fd)
    fields, _, check = raw.partition(b"\n")[0].rpartition(b" ")  # what follows: an older line
    parts = fields.split(b" ")
    counted = 1 if parts[0] == _FORMAT else 0 if parts[0] == _UNCOUNTED else None
    if counted is None or len(parts) != 5 + counted + len(Box):
        return None
    if check != b"%08x" % zlib.crc32(fields):
        return None
    boot_at = 4 + counted
    numbers = [*parts[1:boot_at], *parts[boot_at + 1 :]]
    if not all(n.isdigit() for n in numbers):
        return None
    seq, events_size, writes, *rest = (int(n) for n in numbers)
    tasks = rest.pop(0) if counted else None
    boot = None if parts[boot_at] == _NO_BOOT else parts[boot_at].decode("ascii", "replace")
    return Applied(seq, events_size, writes, boot, tuple(rest), tasks)
