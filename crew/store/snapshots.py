"""A run's snapshot files — manifest.json and one `tasks/<taskId>.json` per task — read and
written for one RunStore: each file validated once per content, and only the tasks a
transaction changed rewritten, so a transaction costs the same in a run of 10 tasks or 2,000.

A run an older crew made keeps its tasks in `tasks.json` (one JSON array); it is read as before,
and the first writer converts it: every task file written, then `tasks.json` removed. A
conversion cut short leaves task files missing, which recovery rebuilds from the event log like
any missing snapshot.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Iterable
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter

from crew.errors import Corrupt, Refused, link_refused
from crew.models import STATE_VERSION, Run, RunAdapter, Task, TaskList
from crew.paths import RunPaths
from crew.store import snapshot
from crew.store.files import fsync_derived, make_dirs, read_bytes
from crew.store.taskfiles import SUFFIX, read_task_snapshots, task_ids

_TASK = TypeAdapter(Task)
#: A snapshot found unreadable or missing, and why.
Broken = tuple[Path, str]
#: What identifies the snapshot files' content cheaply: (inode, size, mtime) of manifest.json
#: and of the tasks folder (every task file is renamed into it, which changes its mtime).
Identity = tuple[tuple[int, int, int], ...]


class Snapshots:
    """The snapshot files of one run, as one store reads and writes them."""

    def __init__(self, paths: RunPaths) -> None:
        self.paths = paths
        #: The last bytes read or written of each file, and the model they hold: an unchanged
        #: file is not validated again (a long-lived leader reads them constantly).
        self._cache: dict[Path, tuple[bytes, Any]] = {}
        #: Whether the run keeps its tasks in tasks.json (made by an older crew).
        self.legacy = False

    def identity(self) -> Identity | None:
        """The files' identity now (None if one is missing)."""
        try:
            found = [os.stat(self.paths.manifest), os.stat(self.paths.tasks_dir)]
        except FileNotFoundError:
            return None
        return tuple((s.st_ino, s.st_size, s.st_mtime_ns) for s in found)

    def read(
        self, manifest: bytes | None, tasks: dict[str, bytes] | None, legacy: bytes | None
    ) -> tuple[Run | None, list[Task] | None, list[Broken]]:
        """Validate the files' bytes (as `read_raw` or a pin found them): the run, its tasks,
        and the files that are missing or unreadable."""
        broken: list[Broken] = []
        run: Run | None = None
        try:
            run = self._model(self.paths.manifest, manifest, RunAdapter)
            _check_version(self.paths.manifest, run)
        except FileNotFoundError:
            broken.append((self.paths.manifest, "missing"))
        except Corrupt as exc:
            broken.append((self.paths.manifest, _detail(exc)))
        self.legacy = tasks is None
        if tasks is None:
            try:
                return run, self._model(self.paths.tasks, legacy, TaskList), broken
            except FileNotFoundError:
                broken.append((self.paths.tasks, "missing"))
            except Corrupt as exc:
                broken.append((self.paths.tasks, _detail(exc)))
            return run, None, broken
        found = self._tasks(tasks, broken)
        if run is not None:
            broken.extend(
                (self.paths.task_file(t.id), "missing")
                for t in run.config.tasks
                if t.id not in tasks  # a file there but unreadable is said so, once
            )
        return run, (list(found.values()) if not broken else None), broken

    def read_raw(self) -> tuple[bytes | None, dict[str, bytes] | None, bytes | None]:
        """The files' bytes: manifest.json, the task files by id (None: none, an older run),
        and that older run's tasks.json (None: missing or not needed)."""
        manifest = _maybe(self.paths.manifest)
        try:
            tasks = read_task_snapshots(self.paths.root)
        except OSError as exc:
            if exc.filename is not None and os.path.islink(exc.filename):
                raise link_refused(Path(exc.filename)) from None
            raise
        return manifest, tasks, (_maybe(self.paths.tasks) if tasks is None else None)

    def write(self, run: Run | None, tasks: Iterable[Task], *, every_task: bool) -> None:
        """Replace manifest.json (if `run`) and the files of `tasks`; `every_task`: `tasks` are
        all of them (a new run, a repair), and an older run's tasks.json is converted."""
        durable = fsync_derived()
        if every_task or self.legacy:
            make_dirs(self.paths.tasks_dir)
        for task in tasks:
            path = self.paths.task_file(task.id)
            data = snapshot.dump_model(task)
            twin = self.paths.task_twin(task.id)
            snapshot.write_by_twin(path, data, twin, durable=durable, label=f"tasks/{task.id}.json")
            self._cache[path] = (data, task)
        if run is not None:
            data = snapshot.dump_model(run)
            snapshot.write_atomic(self.paths.manifest, data, durable=durable)
            self._cache[self.paths.manifest] = (data, run)
        if every_task and self.legacy:
            self.paths.tasks.unlink(missing_ok=True)
            self.legacy = False

    def create(self, run: Run, tasks: Iterable[Task]) -> None:
        """Write manifest.json and every task's file in a run being assembled, where none exists
        and no reader looks yet (crew/store/create.py)."""
        durable = fsync_derived()
        make_dirs(self.paths.tasks_dir)
        make_dirs(self.paths.task_twins_dir)  # where their spares go: no folder made later
        written = [(self.paths.task_file(t.id), t) for t in tasks] + [(self.paths.manifest, run)]
        for path, model in written:
            data = snapshot.dump_model(model)
            snapshot.write_new(path, data, durable=durable)
            self._cache[path] = (data, model)

    def set_aside_strays(self, known: Collection[str]) -> list[str]:
        """Set aside the task files of no task in `known` (the state rebuilt from the log): a
        file copied or made by hand, which every reader would otherwise count against the
        marker. Returns what was repaired."""
        repairs = []
        for task_id in sorted((task_ids(self.paths.root) or set()) - set(known)):
            moved = snapshot.quarantine(self.paths.tasks_dir / f"{task_id}{SUFFIX}")
            repairs.append(
                f"tasks/{task_id}.json holds no task of the run; set it aside as {moved.name}"
            )
        return repairs

    def _tasks(self, raw: dict[str, bytes], broken: list[Broken]) -> dict[str, Task]:
        found: dict[str, Task] = {}
        for task_id, data in raw.items():
            path = self.paths.tasks_dir / f"{task_id}.json"
            try:
                task = self._model(path, data, _TASK)
            except Corrupt as exc:
                broken.append((path, _detail(exc)))
                continue
            if task.id != task_id:
                broken.append((path, f"it holds task {task.id!r}"))
                continue
            found[task_id] = task
        return found

    def _model(self, path: Path, raw: bytes | None, adapter: Any) -> Any:
        if raw is None:
            raise FileNotFoundError(path)
        cached = self._cache.get(path)
        if cached is not None and cached[0] == raw:
            return cached[1]
        model = snapshot.parse(raw, adapter, path)
        self._cache[path] = (raw, model)
        return model


def _maybe(path: Path) -> bytes | None:
    try:
        return read_bytes(path)
    except FileNotFoundError:
        return None


def _detail(exc: Corrupt) -> str:
    text = exc.message
    start, end = text.find("("), text.rfind(")")
    return text[start + 1 : end] if 0 <= start < end else text


def _check_version(path: Path, run: Run) -> None:
    if run.state_version > STATE_VERSION:
        raise Refused(
            f"{path} was written by a newer crew (state version {run.state_version}; "
            f"this crew reads up to {STATE_VERSION}).",
            hint="Upgrade crew to work with this run.",
        )
