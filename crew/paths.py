"""Where things live: the crew home, its runs, and every file of a run.

Every path crew touches is built here, and only from validated ids.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from crew import env
from crew.errors import NotFound, UsageError
from crew.ids import LATEST, check_run_ref, check_task_id, is_run_id
from crew.registry import Box

HOME_DIRNAME = ".crew"
CONFIG_FILENAME = "crew.toml"
#: A run is assembled in `runs/.new-<id>/` and renamed into place: it appears whole or not at all.
STAGING_PREFIX = ".new-"
#: A run being removed is first renamed to `runs/.rm-<id>/`: half removed, it is no run at all.
REMOVING_PREFIX = ".rm-"


class _Below:
    """A path below a folder object's `root`: `manifest = _Below("manifest.json")`.

    Made once per object, then kept in its `__dict__` (which a lookup finds first): stores and
    transactions ask for the same paths thousands of times.
    """

    def __init__(self, *parts: str) -> None:
        self._parts = parts
        self._name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name

    def __get__(self, folder: Home | RunPaths, owner: object = None) -> Path:
        path = folder.__dict__[self._name] = folder.root.joinpath(*self._parts)
        return path


@dataclass(frozen=True)
class Home:
    """A crew home: the `.crew` folder holding crew.toml and state/."""

    root: Path

    config_file = _Below(CONFIG_FILENAME)
    state_dir = _Below("state")
    runs_dir = _Below("state", "runs")

    @property
    def project_dir(self) -> Path:
        """The folder that holds the home: where workers run unless their agent names a cwd."""
        return self.root.parent

    def crew_dir(self, recorded: str) -> Path:
        """The folder a run's `crewDir` names: relative to this home (an older crew recorded it
        absolute, which is taken as it is)."""
        if os.path.isabs(recorded):
            return Path(recorded)
        return Path(os.path.normpath(self.root.resolve() / recorded))

    def relative(self, folder: Path) -> str:
        """`folder` as a run records it (`crewDir`): relative to this home, so a run's files are
        the same wherever the project is checked out."""
        return os.path.relpath(folder.resolve(), self.root.resolve())

    def run(self, run_id: str) -> RunPaths:
        """The paths of a run whose id is already known to be a full, valid run id."""
        if not is_run_id(run_id):
            check_run_ref(run_id)
            raise UsageError(f"Invalid run id {run_id!r}: expected a full run id here.")
        return RunPaths(run_id=run_id, root=self.runs_dir / run_id, home=self)

    def staging(self, run_id: str) -> RunPaths:
        return RunPaths(run_id=run_id, root=self.runs_dir / f"{STAGING_PREFIX}{run_id}", home=self)

    def removing(self, run_id: str) -> Path:
        """Where a run is moved while it is being removed (crew/store/removal.py)."""
        return self.runs_dir / f"{REMOVING_PREFIX}{self.run(run_id).run_id}"

    def run_ids(self) -> list[str]:
        """Ids of the runs in this home, oldest first (ids sort by creation time)."""
        try:
            names = os.listdir(self.runs_dir)
        except FileNotFoundError:
            return []
        return sorted(n for n in names if is_run_id(n) and (self.runs_dir / n).is_dir())

    def resolve_run(self, ref: str) -> RunPaths:
        """`latest`, a full id or a unique prefix of one -> the run's paths (NotFound otherwise)."""
        check_run_ref(ref)
        ids = self.run_ids()
        if ref == LATEST:
            if not ids:
                raise NotFound(f"No runs in {self.runs_dir}.", hint="Start one with `crew run`.")
            return self.run(ids[-1])
        if ref in ids:
            return self.run(ref)
        matches = [i for i in ids if i.startswith(ref)]
        if not matches:
            raise NotFound(f"No run matches {ref!r} in {self.runs_dir}.", hint="See `crew runs`.")
        if len(matches) > 1:
            shown = ", ".join(matches[:5]) + (", …" if len(matches) > 5 else "")
            raise UsageError(
                f"Run id {ref!r} is ambiguous: it matches {len(matches)} runs ({shown})."
            )
        return self.run(matches[0])


@dataclass(frozen=True)
class RunPaths:
    """Every file of one run."""

    run_id: str
    root: Path
    #: The crew home the run belongs to.
    home: Home

    manifest = _Below("manifest.json")
    #: One snapshot per task, `tasks/<taskId>.json` (crew/store/taskfiles.py).
    tasks_dir = _Below("tasks")
    #: All tasks in one JSON array: how an older crew kept them (read until converted).
    tasks = _Below("tasks.json")
    events = _Below("events.jsonl")
    mailbox_dir = _Below("mailbox")
    logs_dir = _Below("logs")
    #: The last state each task saved (`@supervisor checkpoint:`), one file per task.
    checkpoints_dir = _Below("checkpoints")
    #: Volatile files: the leader's lease and log, the applied marker. Never needed for history.
    runtime_dir = _Below(".runtime")
    #: The leader lease (leader.json).
    leader = _Below(".runtime", "leader.json")
    #: The lease before its last write, the spare its next write fills (crew/store/snapshot.py).
    leader_spare = _Below(".runtime", "leader.spare.json")
    #: The output of a leader started with --detach.
    leader_log = _Below(".runtime", "leader.log")
    #: How far the snapshots and mailbox are known to reflect the event log (a cache).
    applied = _Below(".runtime", "applied")
    #: The spare of each task's snapshot, which its next write fills (crew/store/snapshot.py).
    task_twins_dir = _Below(".runtime", "tasks")
    #: The run's mutation lock.
    lock = _Below(".lock")

    def box(self, box: Box) -> Path:
        boxes: dict[Box, Path] | None = self.__dict__.get("_boxes")
        if boxes is None:  # made once: a transaction asks for them several times
            boxes = self.__dict__["_boxes"] = {b: self.mailbox_dir / b.filename for b in Box}
        return boxes[box]

    def key_index(self, box: Box) -> Path:
        """The index of the idempotency keys a mailbox file's messages carried (a cache:
        crew/store/pending.py `KeyIndex`)."""
        return self.runtime_dir / f"{box.value}.keys.sqlite"

    def task_file(self, task_id: str) -> Path:
        """A task's snapshot, `tasks/<taskId>.json`."""
        files: dict[str, Path] = self.__dict__.setdefault("_task_files", {})
        path = files.get(task_id)
        if path is None:  # made once per task: the leader writes them constantly
            path = files[task_id] = self.tasks_dir / f"{check_task_id(task_id)}.json"
        return path

    def task_twin(self, task_id: str) -> Path:
        """The spare of a task's snapshot, `.runtime/tasks/<taskId>.json`."""
        return self.task_twins_dir / self.task_file(task_id).name

    def log(self, task_id: str) -> Path:
        return self.logs_dir / f"{check_task_id(task_id)}.log"

    def checkpoint(self, task_id: str) -> Path:
        return self.checkpoints_dir / f"{check_task_id(task_id)}.json"


def find_home(start: Path | None = None, *, explicit: str | os.PathLike[str] | None = None) -> Home:
    """The crew home: `explicit` (--home), else $CREW_HOME, else the nearest `.crew` walking up."""
    named = explicit if explicit is not None else env.HOME.value()
    if named is not None:
        root = Path(named).expanduser()
        if not root.is_dir():
            source = "--home" if explicit is not None else env.HOME.name
            raise NotFound(
                f"No crew home at {root} (from {source}).", hint="Create one with `crew init`."
            )
        return Home(root.resolve())
    try:
        here = (start or Path.cwd()).resolve()
    except FileNotFoundError:
        raise NotFound(
            "The current folder no longer exists, so no crew home can be found from it.",
            hint="Change to a folder that exists, or name the home with --home or CREW_HOME.",
        ) from None
    for folder in (here, *here.parents):
        candidate = folder / HOME_DIRNAME
        if candidate.is_dir():
            return Home(candidate)
    nearby = _homes_in(here)
    hint = "Create one with `crew init`, or name one with --home or CREW_HOME."
    if nearby:
        from shlex import quote

        named = " or ".join(f"--home {quote(name)}" for name in nearby[:3])
        hint = f"This folder keeps runs in {', '.join(nearby)}: add {named}; or create a home "
        hint += "with `crew init`."
    raise NotFound(f"No {HOME_DIRNAME} folder here or in any parent of {here}.", hint=hint)


def _homes_in(folder: Path) -> list[str]:
    """The folders right inside `folder` that hold runs (`crew run .crew-example/crew.toml` keeps
    its runs beside the crew.toml it ran): what a lost user most likely meant."""
    try:
        names = sorted(entry.name for entry in os.scandir(folder) if entry.is_dir())
    except OSError:
        return []
    return [name for name in names if (folder / name / "state" / "runs").is_dir()]


def home_option(home: Home) -> str:
    """How a command typed here reaches `home`, when it would not find it by itself (`crew run
    CONFIG` kept its runs beside CONFIG, or the home was named with --home): `--home PATH`;
    else an empty string."""
    try:
        if find_home().root.resolve() == home.root.resolve():
            return ""
    except NotFound:
        pass
    from shlex import quote

    root = home.root.resolve()
    try:
        where = os.path.relpath(root, Path.cwd().resolve())
    except FileNotFoundError:  # the current folder is gone: only the whole path reaches it
        where = ".."
    return f"--home {quote(str(root) if where.startswith('..') else where)}"


def home_for_run(config: Path | None, *, explicit: str | os.PathLike[str] | None = None) -> Home:
    """The home `crew run CONFIG` keeps its state in: --home, $CREW_HOME or the nearest `.crew`;
    with none of them, the folder that holds CONFIG (`crew run .crew-example/crew.toml`)."""
    try:
        return find_home(explicit=explicit)
    except NotFound:
        if config is None or explicit is not None:
            raise
        return Home(config.resolve().parent)
