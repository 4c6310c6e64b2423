"""cgroup v2 groups for workers, where crew may make them: every process a worker starts stays in
its group, whatever it does (`setsid`, double forks, a cleared environment), and the kernel
kills the whole group at once (`cgroup.kill`).

crew makes a worker's group inside the leader's own cgroup, named
`crew-<runId>-<taskId>-<attempt>-<leader pid>`. That needs a cgroup v2 hierarchy and write access
to the leader's cgroup: root has it, and so does a user whose session delegates its cgroup
(systemd's user@.service). Elsewhere `CgroupHome.find()` is None, and workers are tracked
through /proc alone (crew.procs.tree). Nothing here raises on a system without cgroups.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from crew import faults
from crew.ids import is_run_id, is_task_id
from crew.procs.liveness import is_alive

PREFIX = "crew-"
#: The file systems and files cgroup v2 is read from.
_MOUNTINFO = "/proc/self/mountinfo"
_OWN = "/proc/self/cgroup"


@dataclass(frozen=True)
class Cgroup:
    """One worker's group."""

    path: Path

    @property
    def name(self) -> str:
        return self.path.name

    def add(self, pid: int) -> bool:
        """Move a process into the group; False when the kernel refuses."""
        try:
            (self.path / "cgroup.procs").write_text(f"{pid}\n")
        except OSError:
            return False
        return True

    def pids(self) -> set[int]:
        """The live processes in the group (none once it is gone)."""
        try:
            text = (self.path / "cgroup.procs").read_text()
        except OSError:
            return set()
        return {int(line) for line in text.split() if line.isdigit()}

    def holds(self, pid: int) -> bool:
        """Whether `pid` is in this group now."""
        return cgroup_path(pid) == self.path

    @property
    def procs(self) -> Path:
        """The file a process writes 0 to, to join the group."""
        return self.path / "cgroup.procs"

    def kill(self) -> None:
        """SIGKILL every process in the group, atomically where the kernel can (5.14+)."""
        try:
            (self.path / "cgroup.kill").write_text("1\n")
            return
        except OSError:
            pass
        for pid in self.pids():  # an older kernel: each process, while it is still a member
            with contextlib.suppress(OSError):
                fd = os.pidfd_open(pid)
                try:
                    if self.holds(pid):
                        signal.pidfd_send_signal(fd, signal.SIGKILL)
                finally:
                    os.close(fd)

    def remove(self) -> bool:
        """Remove the group once it is empty; True when it is gone."""
        try:
            self.path.rmdir()
        except FileNotFoundError:
            return True
        except OSError:
            return False
        return True


@dataclass(frozen=True)
class CgroupHome:
    """The cgroup this process is in, where it may make groups for its workers."""

    path: Path

    @classmethod
    def find(cls) -> CgroupHome | None:
        """This process's own cgroup v2 folder, if it may make groups in it (else None)."""
        if faults.active("no-cgroups"):
            return None
        own = cgroup_path(os.getpid())
        if own is None or not os.access(own, os.W_OK | os.X_OK):
            return None
        if not os.access(own / "cgroup.procs", os.W_OK):
            return None
        return cls(own)

    def clear_dead(self) -> None:
        """Remove the empty groups left by leaders that died (each name ends with its leader's
        pid; a group that still holds a process is never removed: rmdir refuses)."""
        with contextlib.suppress(OSError):
            for path in self.path.iterdir():
                leader = path.name.rpartition("-")[2]
                gone = leader.isascii() and leader.isdigit() and not is_alive(int(leader))
                if path.name.startswith(PREFIX) and gone:
                    with contextlib.suppress(OSError):
                        path.rmdir()

    def make(self, name: str) -> Cgroup | None:
        """A new, empty group named `name` (None when it cannot be made)."""
        path = self.path / f"{PREFIX}{name}"
        try:
            path.mkdir()
        except FileExistsError:
            pass  # left by a leader of the same pid that died: reuse it
        except OSError:
            return None
        return Cgroup(path)


@contextlib.contextmanager
def inside(group: Cgroup) -> Iterator[bool]:
    """This process in `group` for the block, then back in its own cgroup (the group's parent,
    where crew makes every worker's group): a child it starts meanwhile is born in the group,
    with no moment outside it. Yields False, and stays where it is, when the kernel will not
    move it in. Raises OSError when it cannot move back, the block done.

    Moving a process moves all of its threads: the caller makes sure that no other thread
    starts a process meanwhile (crew/leader/spawn.py).
    """
    if not _move_self(group.procs):
        yield False
        return
    try:
        yield True
    finally:
        home = group.path.parent
        if not _move_self(home / "cgroup.procs"):
            raise OSError(f"could not move back into cgroup {home} from {group.path}")


def _move_self(procs: Path) -> bool:
    """Move this process into the group of `procs` (writing 0 moves the writer); False when
    the kernel refuses."""
    try:
        fd = os.open(procs, os.O_WRONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        os.write(fd, b"0")
    except OSError:
        return False
    finally:
        os.close(fd)
    return True


def cgroup_path(pid: int) -> Path | None:
    """The cgroup v2 folder a process is in, or None (no cgroup v2, or nothing readable)."""
    try:
        with open(f"/proc/{pid}/cgroup") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return None
    unified = [line[3:] for line in lines if line.startswith("0::")]
    mount = _unified_mount()
    if not unified or mount is None:
        return None
    root, point = mount
    inside = unified[0]
    if inside.endswith(" (deleted)") or not inside.startswith(root):
        return None
    relative = inside[len(root) :].lstrip("/")
    return point / relative if relative else point


def crew_cgroup_of(pid: int, prefix: str) -> Cgroup | None:
    """The group crew made that `pid` is in, when its name starts with `prefix` (a run's and a
    task's: `crew-<runId>-<taskId>-`)."""
    path = cgroup_path(pid)
    if path is None or not path.name.startswith(PREFIX + prefix):
        return None
    return Cgroup(path)


@dataclass(frozen=True)
class WorkerGroup:
    """The group crew made for one attempt's worker, as its name says."""

    group: Cgroup
    run_id: str
    task_id: str
    attempt: int


def own_worker_group() -> WorkerGroup | None:
    """The worker's group this process is in (the innermost: a crew run inside a worker makes
    its workers' groups inside that worker's), if it is in one. Whatever a process does — a
    new session, a double fork, a cleared environment — it stays in its worker's group."""
    path = cgroup_path(os.getpid())
    if path is None or not path.name.startswith(PREFIX):
        return None
    # crew-<runId>-<taskId>-<attempt>-<leader pid>: a run id is three words, a task id may
    # hold dashes of its own.
    words = path.name[len(PREFIX) :].split("-")
    if len(words) < 6 or not (words[-1].isdigit() and words[-2].isdigit()):
        return None
    run_id, task_id = "-".join(words[:3]), "-".join(words[3:-2])
    if not is_run_id(run_id) or not is_task_id(task_id):
        return None
    return WorkerGroup(Cgroup(path), run_id, task_id, int(words[-2]))


_mount: tuple[str, Path] | bool | None = False


def _unified_mount() -> tuple[str, Path] | None:
    """Where cgroup v2 is mounted: the root of the hierarchy it shows, and its mount point."""
    global _mount  # noqa: PLW0603  # read once per process: mounts do not move under crew
    if _mount is False:
        _mount = None
        with contextlib.suppress(OSError), open(_MOUNTINFO) as handle:
            for line in handle:
                fields = line.split()
                if " - " not in line or len(fields) < 5:
                    continue
                fstype = line.split(" - ", 1)[1].split()[0]
                if fstype == "cgroup2":
                    _mount = (_unescape(fields[3]), Path(_unescape(fields[4])))
                    break
    return _mount if isinstance(_mount, tuple) else None


def _unescape(field: str) -> str:
    """mountinfo writes spaces, tabs, newlines and backslashes as octal escapes."""
    for code in ("040", "011", "012", "134"):
        field = field.replace("\\" + code, chr(int(code, 8)))
    return field
