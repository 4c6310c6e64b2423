"""A flat leader and flat transactions: what one costs must not grow with the number of tasks or
workers. Checked by what is read and written, not by timing: a transaction writes only the
snapshots of the tasks it changed, each through its spare, creating no file after the first; a
leader's view is not stale after its own writes; ending an exited worker's processes reads only
its cgroup."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import SESSION

from crew import verbs
from crew.domain import change, tasks
from crew.domain.lease import new_lease, read_lease, release, write_lease
from crew.leader.view import RunView
from crew.procs import tree
from crew.procs.cgroup import Cgroup
from crew.registry import TaskStatus
from crew.store import exchange, snapshot
from crew.store.runstore import RunStore

MakeRun = Callable[..., RunStore]


def test_a_transaction_rewrites_only_the_snapshots_it_changed(
    make_run: MakeRun, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = make_run()
    written: list[str] = []
    atomic, by_twin = snapshot.write_atomic, snapshot.write_by_twin

    def spy(path, data, *args, **kwargs):  # type: ignore[no-untyped-def]
        written.append(path.name)
        (by_twin if args else atomic)(path, data, *args, **kwargs)

    monkeypatch.setattr(snapshot, "write_atomic", spy)
    monkeypatch.setattr(snapshot, "write_by_twin", spy)
    with change(store) as txn:
        tasks.transition(txn, "plan", TaskStatus.RUNNING, attempt=1)
    verbs.follow_up(store, "plan", "also the parser", session=SESSION)

    assert written == ["plan.json"]  # not "build", not the whole list, not the manifest


def test_a_view_is_not_stale_after_its_own_writes_and_is_after_anyone_elses(
    make_run: MakeRun,
) -> None:
    store = make_run()
    view = RunView(store, store.state().run.leader_epoch)
    with view.change() as txn:
        tasks.transition(txn, "plan", TaskStatus.RUNNING, attempt=1)
    assert not view.stale()  # its own write: nothing to read again

    verbs.follow_up(RunStore(store.paths), "plan", "from a shell", session=SESSION)
    assert view.stale()  # another process's write
    view.refresh()
    assert not view.stale()

    verbs.nudge(store, "plan", session=SESSION)  # this process, past the view
    assert view.stale()


def test_ending_a_worker_with_a_cgroup_reads_only_the_cgroup(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class Group(Cgroup):
        def pids(self) -> list[int]:
            return [4242]

    def every_process() -> list[int]:
        raise AssertionError("scanned every process on the machine")

    monkeypatch.setattr(tree, "_pids", every_process)
    owner = tree.Owner("20261130-034100-7f3a", "plan", root=4242, cgroup=Group(path=None))  # type: ignore[arg-type]
    assert tree.candidates(owner) == {4242}


def test_the_run_ends_by_counting_its_tasks_not_scanning_them(make_run: MakeRun) -> None:
    store = make_run()
    with change(store) as txn:
        tasks.transition(txn, "plan", TaskStatus.RUNNING, attempt=1)
        tasks.transition(txn, "plan", TaskStatus.COMPLETED)
    state = store.state()
    assert state.counts()[TaskStatus.COMPLETED] == 1
    with change(store) as txn:
        tasks.transition(txn, "build", TaskStatus.RUNNING, attempt=1)
        tasks.transition(txn, "build", TaskStatus.COMPLETED)
        assert txn.state.counts()[TaskStatus.COMPLETED] == 2
    assert store.state().run.status.terminal


def test_a_new_run_and_its_leader_read_no_task_file_again(
    make_run: MakeRun, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run's creator knows what it wrote, and a leader's store starts from what the command's
    store read: neither validates every task file again (2 x 500 at the start of a crew of 500).
    What changed outside them is still read."""
    from crew.store.snapshots import Snapshots

    reads: list[int] = []
    read = Snapshots.read

    def counted(self, manifest, tasks, legacy):  # type: ignore[no-untyped-def]
        reads.append(len(tasks or {}))
        return read(self, manifest, tasks, legacy)

    monkeypatch.setattr(Snapshots, "read", counted)
    store = make_run()
    assert store.state().tasks["plan"].status is TaskStatus.QUEUED
    leader = RunStore(store.paths, lean_mail=True)
    leader.adopt(store)
    with change(leader) as txn:
        tasks.transition(txn, "plan", TaskStatus.RUNNING, attempt=1)
    assert reads == []

    RunStore(store.paths).state()  # a store that knows nothing reads them all
    assert reads == [2]
    with change(RunStore(store.paths)) as txn:  # another process's change: read to write
        tasks.transition(txn, "build", TaskStatus.CANCELLED)
    assert store.state().tasks["build"].status is TaskStatus.CANCELLED
    assert reads == [2, 2, 2]  # the change, then that store seeing it


def test_a_send_brings_its_mailbox_up_to_date_once_and_reads_none_of_its_own_lines(
    make_run: MakeRun, monkeypatch: pytest.MonkeyPatch
) -> None:
    from crew.store import jsonl
    from crew.store.fold import MailboxFold

    store = make_run()
    verbs.follow_up(store, "plan", "first", session=SESSION)
    polls: list[str] = []
    reads: list[str] = []
    current, read = MailboxFold.current, jsonl.read

    def polled(self):  # type: ignore[no-untyped-def]
        polls.append(self.path.name)
        return current(self)

    monkeypatch.setattr(MailboxFold, "current", polled)
    monkeypatch.setattr(
        jsonl, "read", lambda path, *a, **k: reads.append(path.name) or read(path, *a, **k)
    )
    verbs.follow_up(store, "plan", "second", session=SESSION)
    verbs.follow_up(store, "plan", "third", session=SESSION)

    assert polls == ["inbox.jsonl", "inbox.jsonl"]  # once a transaction, however often asked
    assert "inbox.jsonl" not in reads  # what its transactions wrote is not read back
    verbs.follow_up(RunStore(store.paths), "plan", "from a shell", session=SESSION)
    reads.clear()
    assert "from a shell" in [m.body for m in store.messages()]
    assert reads == ["inbox.jsonl"]  # another process's line is read


def test_the_task_snapshots_are_read_with_the_standard_library_alone(make_run: MakeRun) -> None:
    import json

    from crew.store.taskfiles import read_task_snapshots

    store = make_run()
    (store.paths.tasks_dir / ".plan.json.123.abcd.tmp").write_text("{")  # a write in progress
    (store.paths.tasks_dir / "plan.json.corrupt-20261130T000000Z").write_text("{")  # set aside
    found = read_task_snapshots(store.paths.root)

    assert found is not None and sorted(found) == ["build", "plan"]
    assert json.loads(found["plan"]) == store.state().tasks["plan"].to_dict()
    store.paths.task_file("build").unlink()
    store.paths.task_file("plan").unlink()
    store.paths.tasks_dir.joinpath(".plan.json.123.abcd.tmp").unlink()
    store.paths.tasks_dir.joinpath("plan.json.corrupt-20261130T000000Z").unlink()
    store.paths.tasks_dir.rmdir()
    assert read_task_snapshots(store.paths.root) is None  # an older run: tasks.json


# ------------------------------------------------------------------ a task's snapshot and spare


def test_a_snapshot_written_by_its_spare_creates_no_file_after_the_first(tmp_path: Path) -> None:
    path, twin = tmp_path / "tasks" / "a.json", tmp_path / ".runtime" / "tasks" / "a.json"
    path.parent.mkdir()
    path.write_bytes(b"0\n")
    inodes = set()
    for n in range(1, 6):
        snapshot.write_by_twin(path, f"{n}\n".encode() * n, twin)
        assert path.read_bytes() == f"{n}\n".encode() * n
        assert twin.read_bytes() == f"{n - 1}\n".encode() * max(n - 1, 1)  # the one before
        inodes |= {path.stat().st_ino, twin.stat().st_ino}
    assert len(inodes) == 2  # the two files, swapped each time: none made after the first


def test_a_heartbeat_creates_no_file_after_the_first(make_run: MakeRun) -> None:
    store = make_run()
    lease = new_lease(SESSION, 1)
    inodes = set()
    for beat in range(4):
        lease = lease.model_copy(update={"epoch": beat + 1})
        write_lease(store.paths, lease)
        inodes |= {store.paths.leader.stat().st_ino}
        assert read_lease(store.paths, stale_after=60).leader == lease
    inodes |= {store.paths.leader_spare.stat().st_ino}
    assert len(inodes) == 2
    release(store.paths, lease)  # a clean end leaves neither
    assert not store.paths.leader.exists() and not store.paths.leader_spare.exists()


def test_a_reader_of_a_snapshot_keeps_what_it_opened_over_the_next_write(tmp_path: Path) -> None:
    path, twin = tmp_path / "a.json", tmp_path / "spare" / "a.json"
    snapshot.write_by_twin(path, b'{"v": 1}\n', twin)
    snapshot.write_by_twin(path, b'{"v": 2}\n', twin)
    with path.open("rb") as reader:
        snapshot.write_by_twin(path, b'{"v": 3, "longer": true}\n', twin)
        assert reader.read() == b'{"v": 2}\n'
    assert path.read_bytes() == b'{"v": 3, "longer": true}\n'


def test_where_names_cannot_be_swapped_a_snapshot_is_renamed_into_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(exchange, "_unsupported", True)
    path, twin = tmp_path / "a.json", tmp_path / "spare" / "a.json"
    path.write_bytes(b"old\n")
    with path.open("rb") as reader:
        snapshot.write_by_twin(path, b"new\n", twin)
        snapshot.write_by_twin(path, b"newer\n", twin)
        assert reader.read() == b"old\n"
    assert path.read_bytes() == b"newer\n"
    assert not twin.exists()  # each write's twin was renamed into place


def test_a_spare_on_another_file_system_gives_way_to_a_rename(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def across(a: str, b: str) -> bool:
        raise OSError(errno.EXDEV, os.strerror(errno.EXDEV), a, None, b)

    monkeypatch.setattr(exchange, "exchange", across)
    path, twin = tmp_path / "a.json", tmp_path / "spare" / "a.json"
    path.write_bytes(b"old\n")
    snapshot.write_by_twin(path, b"new\n", twin)
    assert path.read_bytes() == b"new\n"


def test_two_names_are_swapped_and_a_missing_one_is_an_error(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.write_text("A")
    b.write_text("B")
    if not exchange.exchange(str(a), str(b)):
        pytest.skip("this system cannot swap two names")
    assert (a.read_text(), b.read_text()) == ("B", "A")
    with pytest.raises(FileNotFoundError):
        exchange.exchange(str(a), str(tmp_path / "absent"))
    assert a.read_text() == "B"


@pytest.mark.parametrize("sent", ["report", "steer"])
def test_a_leaders_memory_does_not_grow_with_the_messages_it_let_go_of(
    make_run: MakeRun, sent: str
) -> None:
    # What the leader's fold knows of a message not waiting to be delivered (a worker's report,
    # a steer delivered to an agent, which never acknowledges it) is on disk
    # (crew/store/spill.py), and the message is not held: ~280 bytes a message stayed in crew's
    # own indexes before, and a steer delivered was held whole. Measured by what Python
    # allocates outside pydantic (whose cache of strings fills up to ~1 MB, then stays).
    import gc
    import tracemalloc

    from crew.models import MailboxMessage
    from crew.registry import Box, Direction, MessageKind, MessageStatus, Priority
    from crew.store import jsonl

    store = make_run()
    report = sent == "report"
    box = Box.OUTBOX if report else Box.STEERING
    path = store.paths.box(box)
    line = MailboxMessage(
        id="msg_0000000000000000",
        direction=Direction.OUTBOX if report else Direction.INBOX,
        kind=MessageKind.REPORT if report else MessageKind.STEER,
        from_="plan" if report else "leader",
        to="leader" if report else "plan",
        task_id="plan",
        body="progress",
        status=MessageStatus.DELIVERED,
        priority=Priority.NORMAL,
        sent_at="2026-12-01T00:00:00.000000Z",
        delivered_at=None if report else "2026-12-01T00:00:01.000000Z",
    ).to_line()

    def held_after(count: int) -> int:
        first = len(jsonl.read(path, MailboxMessage).records)
        ids = (f"{n:016x}".encode() for n in range(first, first + count))
        jsonl.append(path, [line.replace(b"0" * 16, i) for i in ids])
        leader = RunStore(store.paths, lean_mail=True)
        gc.collect()
        tracemalloc.start()
        try:
            fold = leader.mail(box)
            gc.collect()
            crews = tracemalloc.take_snapshot().filter_traces(
                [tracemalloc.Filter(False, "*pydantic*")]
            )
        finally:
            tracemalloc.stop()
        assert fold.size() == first + count and not list(fold.kept()) and not fold.pending
        assert fold.get(f"msg_{first:016x}") is not None  # read back from the file
        return sum(stat.size for stat in crews.statistics("filename"))

    small, large = held_after(1_000), held_after(4_000)  # the file: 1,000, then 5,000
    assert large - small < 4_000 * 10, (small, large)
