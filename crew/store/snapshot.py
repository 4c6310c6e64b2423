"""Atomic JSON snapshots (a temp file renamed into place, or a spare swapped with the file), with
fsync where asked; corrupt ones quarantined."""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from crew import clock, faults
from crew.errors import Corrupt, StoreError
from crew.procs import is_alive
from crew.store import exchange
from crew.store.files import (
    FILE_MODE,
    fsync_dir,
    fsync_enabled,
    make_dirs,
    open_fd,
    read_bytes,
    write_all,
)

if TYPE_CHECKING:  # pydantic is imported where a snapshot is parsed: `crew init` writes files
    from pydantic import BaseModel, TypeAdapter  # and parses none

T = TypeVar("T")


def write_atomic(
    path: Path, data: bytes, *, durable: bool = True, label: str | None = None
) -> None:
    """Replace `path` with `data` so a reader sees the old content or the new, never a mix.

    `durable` fsyncs the file and its folder (when the CREW_FSYNC policy allows); the run's
    snapshots are derived from the event log and are not (crew/store/files.py says why).
    `label` names the file in fault points (default: its name; `tasks/<taskId>.json` for a
    task's snapshot, which a checkpoint's name would otherwise share).
    """
    durable = durable and fsync_enabled()
    folder, name = os.path.split(os.fspath(path))
    temp = os.path.join(folder, f".{name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
    replaced = False
    try:
        with _left_as_it_was(path):
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, FILE_MODE)
            _fill(fd, data, durable=durable)
            faults.crash_at(f"temp:{label or name}")
            os.replace(temp, path)
            replaced = True
            if durable:
                fsync_dir(path.parent)
            faults.crash_at(f"replace:{label or name}")
    finally:
        if not replaced:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temp)


def write_by_twin(
    path: Path, data: bytes, twin: Path, *, durable: bool = True, label: str | None = None
) -> None:
    """Replace `path` with `data` as `write_atomic` does, through `twin`, a second file kept for
    it: the twin is overwritten in place and the two names swapped in one step, so the old
    content becomes the next write's twin. After the first write no file is created.

    Why: on ext4, renaming a new file over an existing one makes the kernel write the new
    file's blocks out at once (auto_da_alloc), and the writer sleeps on it, on a busy machine
    for milliseconds (docs/performance.md). A swap does not. The price: a reader that opened
    `path` and reads it after two more writes may read the newer content, or a mix of two; crew's
    readers check the run did not change meanwhile (docs/design.md). Where names cannot be
    swapped (crew/store/exchange.py), or `path` does not exist yet, it is a rename.
    """
    durable = durable and fsync_enabled()
    name = label or path.name
    with _left_as_it_was(path):
        try:
            fd = open_fd(twin, os.O_WRONLY | os.O_CREAT)
        except FileNotFoundError:
            make_dirs(twin.parent)
            fd = open_fd(twin, os.O_WRONLY | os.O_CREAT)
        _fill(fd, data, durable=durable)
        faults.crash_at(f"temp:{name}")
        try:
            swapped = exchange.exchange(os.fspath(twin), os.fspath(path))
        except FileNotFoundError:
            swapped = False  # no `path` yet: the twin becomes it
        except OSError as exc:
            if exc.errno != errno.EXDEV:
                raise
            write_atomic(path, data, durable=durable, label=label)  # the twin is elsewhere
            return
        if not swapped:
            os.replace(twin, path)
        if durable:
            fsync_dir(path.parent)
            fsync_dir(twin.parent)
        faults.crash_at(f"replace:{name}")


def write_new(path: Path, data: bytes, *, durable: bool = True) -> None:
    """Create `path` holding `data`, in a folder no reader sees yet (a run being assembled,
    which appears whole by a rename): nothing to replace, so no temp file and no spare."""
    durable = durable and fsync_enabled()
    with _left_as_it_was(path):
        _fill(open_fd(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL), data, durable=durable)


def _fill(fd: int, data: bytes, *, durable: bool) -> None:
    """Write `data` as the whole content of the file open at `fd` (cut to its length), fsync
    it if `durable`, and close it."""
    try:
        write_all(fd, data)
        os.ftruncate(fd, len(data))
        if durable:
            os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def _left_as_it_was(path: Path) -> Iterator[None]:
    """An OSError in the block, as the StoreError of a write of `path` that did not happen."""
    try:
        yield
    except OSError as exc:
        raise StoreError(
            f"Could not write {path}: {exc.strerror}. It was left as it was.", errno=exc.errno
        ) from None


def leftovers(*folders: Path) -> list[Path]:
    """Temp files of atomic writes whose writer is gone: killed between writing the temp file
    and renaming it. Never a record (the write did not happen), so safe to remove. A temp file
    names its writer's pid; one whose writer is alive is a write in progress, and is left."""
    found: list[Path] = []
    for folder in folders:
        try:
            entries = list(os.scandir(folder))
        except (FileNotFoundError, NotADirectoryError):
            continue
        for entry in entries:
            name = entry.name
            if not (name.startswith(".") and name.endswith(".tmp")):
                continue
            if not entry.is_file(follow_symlinks=False):
                continue  # a folder or a link so named is no temp file crew wrote
            writer = name.removesuffix(".tmp").rsplit(".", 2)[-2:-1]
            pid = int(writer[0]) if writer and writer[0].isascii() and writer[0].isdigit() else None
            if pid is None or (pid != os.getpid() and not is_alive(pid)):
                found.append(Path(entry.path))
    return sorted(found)


def remove_leftovers(*folders: Path) -> list[Path]:
    """Remove the temp files of writers that are gone (see `leftovers`); returns them."""
    removed = leftovers(*folders)
    for path in removed:
        path.unlink(missing_ok=True)
    return removed


def overwrite(path: Path, data: bytes) -> bool:
    """Write `data` over the start of an existing file, in place, when the file is at least as
    long (the rest becomes spaces): no new block or inode is needed, so it works on a full disk.
    False when the file is missing or too short. Not atomic, so only for a file whose readers
    can bear that (leader.json, whose heartbeat must go on while the disk is full)."""
    try:
        fd = open_fd(path, os.O_WRONLY)
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise StoreError(f"Could not write {path}: {exc.strerror}.", errno=exc.errno) from None
    try:
        size = os.fstat(fd).st_size
        if size < len(data):
            return False
        padded = data[:-1] + b" " * (size - len(data)) + data[-1:] if data else b" " * size
        if os.pwrite(fd, padded, 0) != size:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    except OSError as exc:
        raise StoreError(f"Could not write {path}: {exc.strerror}.", errno=exc.errno) from None
    finally:
        os.close(fd)
    return True


def dump_model(model: BaseModel) -> bytes:
    """Pretty JSON, 2-space indent, keys in schema order, trailing newline."""
    return model.model_dump_json(indent=2, exclude_none=True).encode() + b"\n"


def dump_list(adapter: TypeAdapter[list[T]], items: list[T]) -> bytes:
    return adapter.dump_json(items, indent=2, exclude_none=True) + b"\n"


def load(path: Path, adapter: TypeAdapter[T]) -> T:
    """Read and validate a snapshot; FileNotFoundError if absent, Corrupt if unreadable."""
    return parse(read_bytes(path), adapter, path)


def parse(raw: bytes, adapter: TypeAdapter[T], path: Path) -> T:
    """Validate the bytes of a snapshot read from `path` (Corrupt if they are not valid)."""
    from pydantic import ValidationError

    try:
        return adapter.validate_json(raw)
    except ValidationError as exc:
        error = exc.errors(include_url=False, include_input=False)[0]
        where = ".".join(str(p) for p in error["loc"])
        detail = f"{where}: {error['msg']}" if where else str(error["msg"])
        raise Corrupt(
            f"{path} is corrupt ({detail}).",
            hint="`crew doctor --repair` sets it aside and rebuilds it from events.jsonl.",
        ) from None


def quarantine(path: Path) -> Path:
    """Move a corrupt snapshot aside as `<file>.corrupt-<timestamp>`; it is never deleted."""
    stamp = clock.now().replace(":", "").replace("-", "")
    target = path.with_name(f"{path.name}.corrupt-{stamp}")
    os.replace(path, target)
    if fsync_enabled():
        fsync_dir(path.parent)
    return target
