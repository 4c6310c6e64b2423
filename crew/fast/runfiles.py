"""A run's files as the fast path reads and writes them: plain JSON documents, no models.

The formats are crew/models.py's; the rules of where things live are crew/paths.py's, of how
the files are written crew/store's. This module keeps to the common case of each and raises
Fallback on anything else (a link, a torn or unapplied write, a file to be created, a busy
lock), so the full command handles the rest. tests/test_fast.py checks every constant here
against the definition it mirrors, and the records written against the models.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import stat
import time
import zlib

from crew.fast.cmdline import Call, Fallback, plain_seconds
from crew.store.taskfiles import SUFFIX, TASKS_DIR, is_snapshot, read_task_snapshots

TYPE_CHECKING = False  # `typing` costs a fast command a few milliseconds
if TYPE_CHECKING:
    from typing import Any

HOME_DIRNAME = ".crew"
RUN_ID_PATTERN = r"^[0-9]{8}-[0-9]{6}-[0-9a-f]{4,16}$"
RUN_PREFIX_PATTERN = r"^[0-9a-f-]{1,64}$"
TASK_ID_PATTERN = r"^[a-z0-9][a-z0-9_.-]{0,63}$"
LATEST = "latest"
#: The mailbox files, in the order the applied marker lists their sizes.
BOXES = ("inbox", "outbox", "steering")
FILE_MODE = 0o644
NOT_WRITABLE_BY_OTHERS = 0o022
LINE_LIMIT = 1024 * 1024
OFF = frozenset({"", "0", "false", "no", "off"})
#: The folders of a run that must not be links (crew/store/runstore.py `_check_folders`).
FOLDERS = ("tasks", "mailbox", "logs", "checkpoints", ".runtime")
#: crew/paths.py: a run being created; crew/store/jsonl.py: what a repair set aside.
STAGING_PREFIX = ".new-"
CORRUPT_SUFFIX = ".corrupt"
MARKER_FORMAT = b"3"
#: crew/store/marker.py `_UNCOUNTED`: the format before the task count, read and kept.
UNCOUNTED_FORMAT = b"2"
BOOT_ID_FILE = "/proc/sys/kernel/random/boot_id"
BOOT_ID_WIDTH = 36
#: crew/store/lock.py's: how often a busy lock is tried again, and how long a waiter waits
#: before it claims the next turn (the fast path claims none: it goes to the full command).
POLL_INTERVAL = 0.002
HAND_AFTER = 0.25

_RUN_ID_RE = re.compile(RUN_ID_PATTERN)
_RUN_PREFIX_RE = re.compile(RUN_PREFIX_PATTERN)
_TASK_ID_RE = re.compile(TASK_ID_PATTERN)
#: Set once this process has begun to write a run's files (or, leading, may make a run): from
#: then on, falling back to the full command would do the change twice.
wrote = False


def is_task_id(value: str) -> bool:
    return _TASK_ID_RE.fullmatch(value) is not None


def _is_dir(path: str) -> bool:
    """`Path.is_dir`: a folder one may not look into is the full command's (it raises there)."""
    try:
        return stat.S_ISDIR(os.stat(path).st_mode)
    except OSError as error:
        if error.errno in (errno.ENOENT, errno.ENOTDIR, errno.EBADF, errno.ELOOP):
            return False
        raise Fallback from None


def find_home(explicit: str | None) -> str:
    """The crew home, found as crew/paths.py `find_home` finds it."""
    named = explicit if explicit is not None else os.environ.get("CREW_HOME") or None
    if named is not None:
        root = os.path.expanduser(named)
        if not os.path.isdir(root):
            raise Fallback
        return os.path.realpath(root)
    try:
        here = os.path.realpath(os.getcwd())
    except FileNotFoundError:  # the current folder was deleted: the full command says so
        raise Fallback from None
    while True:
        candidate = os.path.join(here, HOME_DIRNAME)
        if _is_dir(candidate):
            return candidate
        parent = os.path.dirname(here)
        if parent == here:
            raise Fallback
        here = parent


def resolve_run(home: str, ref: str) -> str:
    """The id of the run `ref` names (`latest`, an id, or a unique prefix of one)."""
    if ref != LATEST and _RUN_PREFIX_RE.fullmatch(ref) is None:
        raise Fallback
    try:
        ids = run_ids(home)
    except OSError:
        raise Fallback from None
    matches = ids[-1:] if ref == LATEST else [ref] if ref in ids else _prefixed(ids, ref)
    if len(matches) != 1:
        raise Fallback
    return matches[0]


def run_ids(home: str) -> list[str]:
    """crew/paths.py `Home.run_ids`: the runs of the home, oldest first (OSError when their
    folder cannot be listed)."""
    runs = f"{home}/state/runs"
    names = os.listdir(runs)
    return sorted(n for n in names if _RUN_ID_RE.fullmatch(n) and os.path.isdir(f"{runs}/{n}"))


def _prefixed(ids: list[str], ref: str) -> list[str]:
    return [i for i in ids if i.startswith(ref)]


def open_run(call: Call) -> RunFiles:
    """The run the command line names (`latest` when it names none), once RunStore would take
    its folders (crew/cli/common.py `open_run`)."""
    home = find_home(call.options.get("--home"))
    files = RunFiles(home, resolve_run(home, call.arguments.get("run", LATEST)))
    files.check_folders()
    return files


def task_option(call: Call) -> str | None:
    """The `--task` a command line names, if it is a task id (Fallback otherwise)."""
    task_id = call.options.get("--task")
    if task_id is not None and not is_task_id(task_id):
        raise Fallback
    return task_id


class RunFiles:
    """The files of one run, and what the fast path needs of them."""

    def __init__(self, home: str, run_id: str) -> None:
        self.home = home
        self.run_id = run_id
        self.root = root = f"{home}/state/runs/{run_id}"
        self.manifest = f"{root}/manifest.json"
        self.events = f"{root}/events.jsonl"
        self.applied = f"{root}/.runtime/applied"
        self.leader = f"{root}/.runtime/leader.json"
        self.leader_log = f"{root}/.runtime/leader.log"

    def box(self, name: str) -> str:
        return f"{self.root}/mailbox/{name}.jsonl"

    def check_folders(self) -> None:
        """What RunStore refuses (links, folders others may write to) is the full command's."""
        state = f"{self.home}/state"
        for folder in (state, f"{state}/runs", self.root):  # a link: where it leads
            if _mode(folder, follow=True) & NOT_WRITABLE_BY_OTHERS:
                raise Fallback
        for name in FOLDERS:
            if stat.S_ISLNK(_mode(f"{self.root}/{name}")):
                raise Fallback
        if stat.S_ISLNK(_mode(self.root)):
            raise Fallback

    def read_json(self, path: str) -> Any:
        """A JSON document of the run (Fallback if it is missing, a link or unreadable)."""
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            raise Fallback from None
        try:
            with os.fdopen(fd, "rb") as handle:
                return json.loads(handle.read().decode())  # UTF-8 only, as the models read
        except ValueError:
            raise Fallback from None

    def clean(self) -> Marker:
        """What the applied marker says, when the files reflect the whole event log: the marker
        was written in this boot, events.jsonl and the mailbox files are the sizes it names,
        and the tasks folder holds as many snapshots as it counts (crew/store/runstore.py's
        clean check). Fallback when recovery is the full path's."""
        marker = self._marker()
        if marker.boot != boot_id() or _size(self.events) != marker.events_size:
            raise Fallback
        if self.mailbox_sizes() != marker.sizes:
            raise Fallback
        if marker.tasks is not None:
            found = self._task_files()
            if found is not None and found != marker.tasks:
                raise Fallback  # a task file deleted or put there: the log says which
        return marker

    def _task_files(self) -> int | None:
        """How many task snapshots `tasks/` holds (None: no such folder), each a file: a link
        or a folder in a snapshot's place makes the full command refuse the run (or name what
        it cannot read), whichever task the command is about, so it is the full command's."""
        try:
            entries = os.scandir(f"{self.root}/{TASKS_DIR}")
        except FileNotFoundError:
            return None
        except OSError:  # a link, an unreadable folder: the full command names it
            raise Fallback from None
        count = 0
        with entries:
            for entry in entries:
                if not is_snapshot(entry.name):
                    continue
                if not entry.is_file(follow_symlinks=False):
                    raise Fallback
                count += 1
        return count

    def mailbox_sizes(self) -> tuple[int, ...]:
        return tuple(_size(self.box(name)) for name in BOXES)

    def _marker(self) -> Marker:
        """crew/store/marker.py `read`, for a marker with a known boot (Fallback otherwise)."""
        try:
            fd = os.open(self.applied, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            raise Fallback from None
        try:
            raw = os.read(fd, 256)
        finally:
            os.close(fd)
        fields, _, check = raw.partition(b"\n")[0].rpartition(b" ")
        parts = fields.split(b" ")
        counted = parts[0] == MARKER_FORMAT
        if len(parts) != 5 + counted + len(BOXES) or not (counted or parts[0] == UNCOUNTED_FORMAT):
            raise Fallback
        boot_at = 4 + counted
        numbers = [*parts[1:boot_at], *parts[boot_at + 1 :]]
        if check != b"%08x" % zlib.crc32(fields) or not all(n.isdigit() for n in numbers):
            raise Fallback
        seq, events_size, writes, *rest = (int(n) for n in numbers)
        tasks = rest.pop(0) if counted else None
        boot = parts[boot_at].decode("ascii", "replace")
        return Marker(seq, events_size, writes, boot, tuple(rest), tasks)

    def read_tasks(self, run: dict[str, Any]) -> list[dict[str, Any]]:
        """The tasks, in crew.toml order then added ones' (crew/store/state.py `ordered`), from
        their snapshot files (a run an older crew made keeps them in tasks.json: the full
        command's)."""
        try:
            found = read_task_snapshots(self.root)
        except OSError:  # a link, an unreadable file: the full command names it
            raise Fallback from None
        order = [t["id"] for t in run["config"]["tasks"]]
        if found is None or not set(order) <= set(found):
            raise Fallback
        loaded = {task_id: json.loads(data) for task_id, data in found.items()}
        if not all(isinstance(t, dict) and t.get("id") == i for i, t in loaded.items()):
            raise Fallback
        # Tasks added as the run ran come after crew.toml's, in the order they were added.
        added = sorted(set(loaded) - set(order), key=lambda i: (loaded[i].get("addedAt") or "", i))
        return [loaded[task_id] for task_id in [*order, *added]]

    def read_task(self, run: dict[str, Any], task_id: str) -> dict[str, Any]:
        """One task, from its snapshot file: a send reads only the task it is for."""
        if not is_task_id(task_id):
            raise Fallback  # never a path made of an id not checked
        defined = any(t["id"] == task_id for t in run["config"]["tasks"])
        # Missing (no such task: the full command's to say so), a link or unreadable: Fallback.
        task = self.read_json(f"{self.root}/{TASKS_DIR}/{task_id}{SUFFIX}")
        if not isinstance(task, dict) or task.get("id") != task_id:
            raise Fallback
        if not defined and not task.get("addedAt"):
            raise Fallback  # neither in crew.toml nor added (`crew add`): the full command's
        return task

    def write_task(self, task: dict[str, Any]) -> None:
        """Replace a task's snapshot (crew/store/taskfiles.py); it is derived from the event
        log, so not fsynced."""
        replace(f"{self.root}/{TASKS_DIR}/{task['id']}{SUFFIX}", _snapshot(task))

    def write_manifest(self, run: dict[str, Any]) -> None:
        """Replace manifest.json (crew/store/snapshots.py `write`), not fsynced either."""
        replace(self.manifest, _snapshot(run))

    def write_marker(
        self, before: Marker, seq: int, events_size: int, ends: dict[str, int], *, added: int
    ) -> None:
        """Record that the files reflect the log up to `seq` (crew/store/marker.py `write`):
        the sizes the appends ended at, one more write than the marker the change began on,
        and `added` more task snapshots (a marker that did not count them still does not)."""
        sizes = tuple(ends.get(name, size) for name, size in zip(BOXES, before.sizes, strict=True))
        numbers = [seq, events_size, before.writes + 1]
        if before.tasks is not None:
            numbers.append(before.tasks + added)
        fields = b" ".join(
            [
                MARKER_FORMAT if before.tasks is not None else UNCOUNTED_FORMAT,
                *(b"%020d" % n for n in numbers),
                before.boot.encode(),
                *(b"%020d" % n for n in sizes),
            ]
        )
        flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(self.applied, flags, FILE_MODE)
        try:
            os.pwrite(fd, fields + b" %08x\n" % zlib.crc32(fields), 0)
        finally:
            os.close(fd)


class Marker:
    """What `.runtime/applied` says (crew/store/marker.py `Applied`)."""

    __slots__ = ("boot", "events_size", "seq", "sizes", "tasks", "writes")

    def __init__(
        self,
        seq: int,
        events_size: int,
        writes: int,
        boot: str,
        sizes: tuple[int, ...],
        tasks: int | None,
    ) -> None:
        self.seq, self.events_size, self.writes, self.boot = seq, events_size, writes, boot
        self.sizes, self.tasks = sizes, tasks

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Marker) and self.key() == other.key()

    def __hash__(self) -> int:
        return hash(self.key())

    def key(self) -> tuple[object, ...]:
        return (self.seq, self.events_size, self.writes, self.boot, self.sizes, self.tasks)


_boot: list[str | None] = []


def read_file(path: str, *, at: int = 0) -> bytes:
    """A run file's bytes from offset `at` on; none if it is missing. Fallback if it is a link
    (crew never follows one: the full command says so) or cannot be read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return b""
    except OSError:
        raise Fallback from None
    try:
        with os.fdopen(fd, "rb") as handle:
            handle.seek(at)
            return handle.read()
    except OSError:
        raise Fallback from None


def boot_id() -> str | None:
    """crew/store/files.py `boot_id`: None where the system does not say (then the fast path
    never finds a marker clean, since every file would need an fsync)."""
    if not _boot:
        try:
            with open(BOOT_ID_FILE, "rb") as handle:
                text = handle.read(64).decode("ascii", "replace").strip()
        except OSError:
            text = ""
        _boot.append(text if len(text) == BOOT_ID_WIDTH and " " not in text else None)
    return _boot[0]


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return 0


class RunLock:
    """The run lock (crew/store/lock.py), taken while no one waits for it with a hand up: a
    holder keeps it for milliseconds, so a busy lock is tried again as the full command tries
    it, until HAND_AFTER; a longer wait, with its turn-taking, is the full command's."""

    def __init__(self, root: str) -> None:
        self.root = root  # the run's folder
        self._lock = f"{root}/.lock"
        self._hand = f"{root}/.next.lock"
        self._fd = -1

    def __enter__(self) -> RunLock:
        if os.path.islink(self._lock):
            raise Fallback
        try:
            self._fd = os.open(
                self._lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, FILE_MODE
            )
        except OSError:
            raise Fallback from None
        deadline = None
        while not os.path.lexists(self._hand):
            try:
                fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return self
            except BlockingIOError:
                now = time.monotonic()
                deadline = deadline or now + min(HAND_AFTER, _lock_timeout())
                if now >= deadline:
                    break
                time.sleep(POLL_INTERVAL)
            except OSError:
                break
        os.close(self._fd)
        raise Fallback

    def __exit__(self, *exc: object) -> None:
        os.close(self._fd)  # closing the descriptor releases the flock


def _lock_timeout() -> float:
    """$CREW_LOCK_TIMEOUT in seconds, as crew/store/lock.py reads it (the fast path takes only a
    plain one: crew/fast `_left_to_the_full_command`); infinity when unset. A wait for the lock
    shorter than HAND_AFTER ends with it, and the full command times out as it says."""
    raw = os.environ.get("CREW_LOCK_TIMEOUT")
    if raw is None:
        return float("inf")
    return plain_seconds(raw)


def open_append(path: str) -> int:
    """A descriptor to append to an existing file that ends in a whole line (Fallback if it is
    missing, a link, or ends in a torn write: crew/store/jsonl.py `append` handles those)."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        raise Fallback from None
    size = os.fstat(fd).st_size
    if size and os.pread(fd, 1, size - 1) != b"\n":
        os.close(fd)
        raise Fallback
    return fd


def write_lines(fd: int, data: bytes, *, fsync: bool) -> int:
    """Append whole lines with one `write()`; on failure take them back and raise OSError
    (`wrote` stays as it was: nothing was written, and the full command may do the change).
    Returns the file's size after them."""
    global wrote  # noqa: PLW0603  # one process, one command
    start = os.fstat(fd).st_size
    try:
        written = os.write(fd, data)
        if written != len(data):
            raise OSError(errno.ENOSPC, "No space left on device")
        if fsync:
            os.fsync(fd)
    except OSError:
        try:
            os.ftruncate(fd, start)
        except OSError:
            wrote = True  # what was written stays: never done again by the full command
            raise
        raise
    wrote = True
    return start + len(data)


def _snapshot(record: dict[str, Any]) -> bytes:
    """A snapshot as crew/store/snapshot.py `dump_model` writes one."""
    return json.dumps(record, ensure_ascii=False, indent=2).encode() + b"\n"


def replace(path: str, data: bytes) -> None:
    """Replace a file derived from the event log atomically, without fsync (crew/store/files.py
    `fsync_derived`: the fast path runs only where the boot is known). Its temp file is named as
    crew/store/snapshot.py names them, so recovery removes one a killed writer left. Raises
    OSError, the file left as it was."""
    folder, name = os.path.split(path)
    temp = f"{folder}/.{name}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, FILE_MODE)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
        os.replace(temp, path)
    finally:
        if os.path.lexists(temp):
            os.unlink(temp)


def fsync_enabled() -> bool:
    return os.environ.get("CREW_FSYNC", "1").strip().lower() not in OFF


def _mode(path: str, *, follow: bool = False) -> int:
    try:
        return os.stat(path, follow_symlinks=follow).st_mode
    except FileNotFoundError:
        return 0
    except OSError:
        raise Fallback from None
