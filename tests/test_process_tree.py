"""Cancel, a timeout and a task's end stop the worker's whole process tree: children that left its
process group (`setsid`, a daemon's double fork) included, with or without a cgroup."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import SESSION
from leaders import Leader, eventually, store_of, write_crew

from crew import verbs
from crew.leader import spawn
from crew.leader.spawn import Launch
from crew.paths import Home
from crew.procs import cgroup, is_alive, tree
from crew.procs.cgroup import Cgroup, CgroupHome, cgroup_path
from crew.procs.stopping import is_worker
from crew.registry import TaskStatus

#: A child in a session of its own, still carrying the worker's environment.
SETSID = "setsid sleep 1000 & echo $! > {pids}/a"
#: A daemon: double fork, a session of its own, an empty environment; its parent exits at once.
DAEMON = "(setsid sh -c 'echo $$ > {pids}/b; exec env -i sleep 1000' &)"

CGROUPS = CgroupHome.find() is not None


@pytest.fixture(params=["cgroup", "proc"])
def mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "cgroup" and not CGROUPS:
        pytest.skip("this system does not let crew make cgroups")
    if request.param == "proc":
        monkeypatch.setenv("CREW_FAULT", "no-cgroups")
    return str(request.param)


@pytest.fixture
def pids(tmp_path: Path) -> Iterator[Path]:
    folder = tmp_path / "pids"
    folder.mkdir()
    yield folder
    for path in folder.iterdir():  # a failed test leaves no sleeper behind
        pid = int(path.read_text())
        if _sleeper(pid):
            os.kill(pid, signal.SIGKILL)


def _sleeper(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes() == b"sleep\x001000\x00" and is_alive(pid)
    except OSError:
        return False


def _started(folder: Path, *names: str) -> list[int]:
    """The pids the worker wrote, once they are the sleepers (each execs right after)."""
    paths = [folder / name for name in names]
    eventually(lambda: all(p.is_file() and p.read_text().strip() for p in paths), timeout=30)
    found = [int(p.read_text()) for p in paths]
    eventually(lambda: all(_sleeper(pid) for pid in found), timeout=30)
    return found


def _crew(tmp_path: Path, script: str, **agent: object) -> None:
    write_crew(
        tmp_path, [{"id": "t", "prompt": script}], command=["sh", "-c", "{prompt}"], agent=agent
    )


def test_cancel_stops_a_child_in_a_session_of_its_own(
    tmp_path: Path, home: Home, mode: str, pids: Path
) -> None:
    _crew(tmp_path, SETSID.format(pids=pids) + "; echo ready; sleep 1000")
    leader = Leader("run", "crew.toml", cwd=tmp_path)
    store = store_of(home, leader.run_id)
    (child,) = _started(pids, "a")

    verbs.cancel(store, session=SESSION, grace=2.0)

    assert leader.finish(timeout=60) == 1
    assert store.state().tasks["t"].status is TaskStatus.CANCELLED
    eventually(lambda: not _sleeper(child), timeout=10)


def test_a_timeout_stops_a_child_in_a_session_of_its_own(
    tmp_path: Path, home: Home, mode: str, pids: Path
) -> None:
    _crew(tmp_path, SETSID.format(pids=pids) + "; sleep 1000", timeout="1s")
    leader = Leader("run", "crew.toml", cwd=tmp_path)
    (child,) = _started(pids, "a")

    assert leader.finish(timeout=60) == 1
    assert store_of(home, leader.run_id).state().tasks["t"].status is TaskStatus.FAILED
    eventually(lambda: not _sleeper(child), timeout=10)


def test_a_task_that_ends_leaves_nothing_running(
    tmp_path: Path, home: Home, mode: str, pids: Path
) -> None:
    _crew(tmp_path, SETSID.format(pids=pids) + "; sleep 0.2; echo done")
    leader = Leader("run", "crew.toml", cwd=tmp_path)

    assert leader.finish(timeout=60) == 0
    (child,) = [int((pids / "a").read_text())]
    assert store_of(home, leader.run_id).state().tasks["t"].status is TaskStatus.COMPLETED
    eventually(lambda: not _sleeper(child), timeout=10)


def test_a_daemon_that_cleared_its_environment_is_stopped_through_its_cgroup(
    tmp_path: Path, home: Home, pids: Path
) -> None:
    if not CGROUPS:
        pytest.skip("this system does not let crew make cgroups")
    _crew(tmp_path, DAEMON.format(pids=pids) + "; sleep 1000")
    leader = Leader("run", "crew.toml", cwd=tmp_path)
    store = store_of(home, leader.run_id)
    (daemon,) = _started(pids, "b")

    verbs.cancel(store, session=SESSION, grace=2.0)

    assert leader.finish(timeout=60) == 1
    eventually(lambda: not _sleeper(daemon), timeout=10)
    cgroups = CgroupHome.find()
    assert cgroups is not None
    assert [p.name for p in cgroups.path.iterdir() if leader.run_id in p.name] == []


def _sleep(environ: dict[str, str], script: str = "exec sleep 1000") -> subprocess.Popen[bytes]:
    return subprocess.Popen(["sh", "-c", script], env={"PATH": os.environ["PATH"], **environ})


def test_a_process_not_proven_the_tasks_is_never_signalled() -> None:
    others = [
        _sleep({"CREW_RUN_ID": "other-run", "CREW_TASK_ID": "t"}),
        _sleep({"CREW_RUN_ID": "r1", "CREW_TASK_ID": "other-task"}),
        _sleep({"CREW_RUN_ID": "r1", "CREW_TASK_ID": "t", "CREW_ATTEMPT": "1"}),
    ]
    try:
        eventually(lambda: all(_sleeper(p.pid) for p in others))
        assert tree.signal_tree(tree.Owner("r1", "t", attempt=2), signal.SIGKILL) == set()
        assert all(p.poll() is None for p in others)
        assert tree.signal_tree(tree.Owner("r1", "t", attempt=1), signal.SIGKILL) == {others[2].pid}
    finally:
        for process in others:
            process.kill()
            process.wait()


def test_a_run_of_the_same_id_in_another_home_is_never_signalled(tmp_path: Path) -> None:
    # Run ids are unique in a home only: two test leaders started runs of the same id in the
    # same instant, and one's cleanup killed the other's agent (exit 143).
    ours, theirs = tmp_path / "ours" / "runs" / "r1", tmp_path / "theirs" / "runs" / "r1"
    ids = {"CREW_RUN_ID": "r1", "CREW_TASK_ID": "t", "CREW_ATTEMPT": "1"}
    other = _sleep({**ids, "CREW_STATE_DIR": str(theirs)})
    mine = _sleep({**ids, "CREW_STATE_DIR": str(ours)})
    try:
        eventually(lambda: _sleeper(other.pid) and _sleeper(mine.pid))
        (tmp_path / "link").symlink_to(tmp_path / "ours")  # the same folder by another name
        owner = tree.Owner("r1", "t", attempt=1, state_dir=str(tmp_path / "link" / "runs" / "r1"))
        assert tree.signal_tree(owner, signal.SIGKILL) == {mine.pid}
        assert other.poll() is None
        assert not is_worker(other.pid, "r1", "t", 1, state_dir=str(ours))
        assert is_worker(other.pid, "r1", "t", 1, state_dir=str(theirs))
    finally:
        for process in (other, mine):
            process.kill()
            process.wait()


def test_a_child_that_cleared_its_environment_is_found_through_its_parent(pids: Path) -> None:
    marker = pids / "child"
    worker = _sleep(
        {"CREW_RUN_ID": "r1", "CREW_TASK_ID": "t"},
        f"env -i sh -c 'echo $$ > {marker}; exec sleep 1000' & wait",
    )
    try:
        (child,) = _started(pids, "child")
        assert tree.signal_tree(tree.Owner("r1", "t"), signal.SIGCONT) == {worker.pid}
        found = tree.signal_tree(tree.Owner("r1", "t", root=worker.pid), signal.SIGTERM)
        assert found == {worker.pid, child}
        eventually(lambda: not _sleeper(child))
    finally:
        worker.kill()
        worker.wait()


def test_the_leftovers_of_reaped_workers_are_found_in_one_reading_of_the_processes(
    pids: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without cgroups, a worker's exit is followed by a look at every process for what it left
    running. Workers already reaped are no one's parent, so no parent is read; and the exits of
    one wake-up share one reading of /proc (per exit, 500 workers made the leader O(N²))."""
    workers = [
        _sleep(
            {"CREW_RUN_ID": "r1", "CREW_TASK_ID": task},
            f"setsid sleep 1000 & echo $! > {pids}/{task}",
        )
        for task in ("t1", "t2")
    ]
    for worker in workers:
        worker.wait()  # reaped: their children went to init, still carrying the marks
    left = _started(pids, "t1", "t2")
    readings, parents = [], []
    pids_of, parent_of = tree._pids, tree.parent_of
    monkeypatch.setattr(tree, "_pids", lambda: readings.append(1) or pids_of())
    monkeypatch.setattr(tree, "parent_of", lambda pid: parents.append(pid) or parent_of(pid))
    owners = [tree.Owner("r1", t, root=w.pid) for t, w in zip(("t1", "t2"), workers, strict=True)]

    with tree.one_scan():
        found = [tree.signal_tree(owner, signal.SIGTERM) for owner in owners]

    assert found == [{left[0]}, {left[1]}]
    assert len(readings) == 1
    assert parents == [w.pid for w in workers]  # each gone worker's own, no other
    eventually(lambda: not any(_sleeper(pid) for pid in left))
    assert tree.signal_tree(owners[0], signal.SIGKILL) == set()  # outside: read afresh
    assert len(readings) == 2


def test_groups_left_by_a_leader_that_died_are_removed_by_the_next(tmp_path: Path) -> None:
    cgroups = CgroupHome.find()
    if cgroups is None:
        pytest.skip("this system does not let crew make cgroups")
    dead = subprocess.Popen(["true"])
    dead.wait()  # its pid names a leader that is gone
    left = cgroups.make(f"{tmp_path.name}-t-1-{dead.pid}")
    mine = cgroups.make(f"{tmp_path.name}-t-1-{os.getpid()}")
    assert left is not None and mine is not None
    try:
        cgroups.clear_dead()
        assert not left.path.exists()
        assert mine.path.exists()  # a live leader's group stays
    finally:
        left.remove()
        mine.remove()


def test_a_worker_is_in_its_cgroup_before_its_program_runs(tmp_path: Path, home: Home) -> None:
    # The worker's first act reads its own cgroup: it is already the task's group (the join
    # happens before the program's exec, so nothing the program starts is ever outside).
    if not CGROUPS:
        pytest.skip("this system does not let crew make cgroups")
    seen = tmp_path / "cgroup"
    _crew(tmp_path, f"cat /proc/self/cgroup > {seen}; echo done")
    leader = Leader("run", "crew.toml", cwd=tmp_path)
    assert leader.finish(timeout=60) == 0
    unified = [line for line in seen.read_text().splitlines() if line.startswith("0::")]
    assert unified and f"/crew-{leader.run_id}-t-1-" in unified[0]


@pytest.fixture
def group(tmp_path: Path) -> Iterator[Cgroup]:
    """A worker's group in this process's cgroup, removed after the test."""
    home = CgroupHome.find()
    if home is None:
        pytest.skip("this system does not let crew make cgroups")
    made = home.make(f"{tmp_path.name}-t-1-{os.getpid()}")
    assert made is not None
    yield made
    made.kill()
    eventually(made.remove, timeout=10)


def _launch(tmp_path: Path, *argv: str) -> Launch:
    return Launch(list(argv), tmp_path, dict(os.environ), "0" * 64)


def test_a_worker_is_born_in_its_group_and_the_leader_stays_in_its_own(
    tmp_path: Path, group: Cgroup
) -> None:
    own = cgroup_path(os.getpid())
    process = spawn.start(_launch(tmp_path, "sleep", "1000"), merge_stderr=True, group=group)
    try:
        assert group.holds(process.pid)
        assert cgroup_path(os.getpid()) == own == group.path.parent
    finally:
        process.kill()
        process.wait()


def test_no_other_child_of_the_leader_is_born_in_a_workers_group(
    tmp_path: Path, group: Cgroup, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A notify command (or a version check) started from another thread while the leader is
    # inside a worker's group for a start waits for the leader to be back in its own.
    inside, go = threading.Event(), threading.Event()
    born_in: dict[str, Path | None] = {}
    popen = subprocess.Popen

    def held_popen(argv: list[str], **options: Any) -> subprocess.Popen[bytes]:
        born_in[argv[0]] = cgroup_path(os.getpid())
        if argv[0] == "sleep":  # the worker: hold the leader inside its group
            inside.set()
            assert go.wait(timeout=30)
        return popen(argv, **options)

    monkeypatch.setattr(spawn.subprocess, "Popen", held_popen)
    started: list[subprocess.Popen[bytes]] = []
    worker = threading.Thread(
        target=lambda: started.append(
            spawn.start(_launch(tmp_path, "sleep", "1000"), merge_stderr=True, group=group)
        )
    )
    worker.start()
    assert inside.wait(timeout=30)
    notify = threading.Thread(
        target=lambda: started.append(
            spawn.start_command(
                ["true"],
                cwd=tmp_path,
                env=dict(os.environ),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
    )
    notify.start()
    notify.join(timeout=0.5)  # without the lock it would have been started by now, inside
    go.set()
    worker.join(timeout=30)
    notify.join(timeout=30)
    for process in started:
        process.kill()
        process.wait()
    assert born_in == {"sleep": group.path, "true": group.path.parent}


def test_a_leader_that_cannot_leave_a_workers_group_kills_the_child(
    tmp_path: Path, group: Cgroup, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = group.path.parent / "cgroup.procs"
    move = cgroup._move_self
    monkeypatch.setattr(cgroup, "_move_self", lambda procs: procs != home and move(procs))
    popen = subprocess.Popen
    started: list[subprocess.Popen[bytes]] = []

    def kept_popen(argv: list[str], **options: Any) -> subprocess.Popen[bytes]:
        started.append(popen(argv, **options))
        return started[-1]

    monkeypatch.setattr(spawn.subprocess, "Popen", kept_popen)
    try:
        with pytest.raises(OSError, match="could not move back"):
            spawn.start(_launch(tmp_path, "sleep", "1000"), merge_stderr=True, group=group)
    finally:
        assert move(home)  # this test's own process goes home
    assert [p.returncode for p in started] == [-signal.SIGKILL]
