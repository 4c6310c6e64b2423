"""The leader survives whatever a worker prints, and faults degrade it instead of stopping it.

Real leaders and workers: hostile output, a bug while handling one worker, a full disk (a real
tmpfs when this machine lets the test mount one), a run lock held for long, no file descriptor
left at a spawn, a flood of progress lines.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest
from conftest import SESSION
from leaders import Leader, eventually, store_of, write_crew

from crew import verbs
from crew.leader.throttle import REPORTS_PER_WINDOW
from crew.models import Event, LeaderInfo
from crew.paths import Home
from crew.registry import Box, EventType, MessageKind, MessageStatus, RunStatus, TaskStatus
from crew.store import jsonl
from crew.store.lock import locked
from crew.store.runstore import RunStore
from crew.views import run_status

#: How late a heartbeat may be: it is due every second.
LATE = 1.0


def events_of(store: RunStore) -> list[Event]:
    read = jsonl.read(store.paths.events, Event)
    assert not read.bad, read.bad  # whatever crew wrote, crew reads back
    return read.records


def of_type(store: RunStore, kind: EventType) -> list[Event]:
    return [e for e in events_of(store) if e.type is kind]


def _seconds(at: str) -> float:
    return datetime.fromisoformat(at.replace("Z", "+00:00")).timestamp()


class Heartbeats:
    """Reads leader.json every 50 ms, in a thread: the heartbeats seen, and how old the latest
    one ever was when read (it is due every second)."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self.seen: list[float] = []
        self.oldest = 0.0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while not self._done.wait(0.05):
            with contextlib.suppress(OSError, ValueError):
                info = LeaderInfo.model_validate_json(self._path.read_bytes())
                if info.stopped_reason is not None:
                    continue
                at = _seconds(info.heartbeat_at)
                self.oldest = max(self.oldest, time.time() - at)
                if not self.seen or at != self.seen[-1]:
                    self.seen.append(at)

    def stop(self) -> float:
        """How late the heartbeat ever was: the longest gap between two heartbeats seen, or the
        age of the latest one when it was read, whichever is longer."""
        self._done.set()
        self._thread.join()
        gaps = [b - a for a, b in zip(self.seen, self.seen[1:], strict=False)]
        return max([self.oldest, *gaps])


@contextlib.contextmanager
def heartbeats(store: RunStore) -> Iterator[Heartbeats]:
    eventually(store.paths.leader.exists)
    watch = Heartbeats(store.paths.leader)
    try:
        yield watch
    finally:
        watch.stop()


# ----------------------------------------------------------------------------- hostile output


def test_hostile_output_leaves_the_leader_up_beating_and_steering_the_others(
    tmp_path: Path, home: Home
) -> None:
    write_crew(
        tmp_path,
        [
            {"id": "hostile", "prompt": "hostile:100000", "maxAttempts": 3},
            {"id": "steered", "prompt": "read ; ack ; read ; ack ; read ; ack ; exit:0"},
        ],
    )
    leader = Leader("run", "crew.toml", cwd=tmp_path)
    store = store_of(home, leader.run_id)

    with heartbeats(store) as watch:
        eventually(lambda: store.state().tasks["steered"].status is TaskStatus.RUNNING)
        for n in range(3):
            verbs.steer(store, "steered", f"steer {n}", session=SESSION)
        assert leader.finish(timeout=60) == 0, leader.err
        longest = watch.stop()

    assert longest <= 1.0 + LATE, f"a heartbeat came {longest:.2f}s after the one before"
    state = store.state()
    assert state.run.status is RunStatus.COMPLETED
    # The innocent task ran once: nothing it printed failed it or stopped the leader.
    assert state.tasks["hostile"].attempt == 1 and state.tasks["hostile"].failures == 0
    steers = [m for m in store.messages() if m.task_id == "steered" and m.kind is MessageKind.STEER]
    assert [m.status for m in steers] == [MessageStatus.ACKNOWLEDGED] * 3
    malformed = of_type(store, EventType.SUPERVISOR_MALFORMED)
    reasons = " ".join(str(e.data) for e in malformed)
    for why in ("deeper than", "characters (the limit", "50000 options (at most"):
        assert why in reasons, why
    assert all(e.data and len(e.data["excerpt"]) <= 80 for e in malformed)
    assert len(of_type(store, EventType.SUPERVISOR_REPORT)) < 100  # ~21,000 reports printed
    assert store.paths.log("hostile").stat().st_size > 6 * 1024 * 1024  # the log has every byte


def test_a_bug_handling_one_worker_fails_its_task_and_the_others_go_on(
    tmp_path: Path, home: Home
) -> None:
    write_crew(
        tmp_path,
        [
            {"id": "first", "prompt": "say:hello ; sleep:0.2 ; exit:0"},
            {"id": "second", "prompt": f"until:{tmp_path / 'go'} ; say:done ; exit:0"},
        ],
    )
    os.environ["CREW_FAULT"] = "raise:worker"  # the first output the leader handles
    try:
        leader = Leader("run", "crew.toml", cwd=tmp_path)
    finally:
        del os.environ["CREW_FAULT"]
    store = store_of(home, leader.run_id)
    failed = eventually(
        lambda: [t for t in store.state().tasks.values() if t.status is TaskStatus.FAILED]
    )
    (tmp_path / "go").touch()

    assert leader.finish() == 1, leader.err
    (bad,) = failed
    other = "second" if bad.id == "first" else "first"
    state = store.state()
    assert state.tasks[other].status is TaskStatus.COMPLETED
    assert bad.error is not None and "RuntimeError: injected failure at worker" in bad.error
    log = store.paths.leader_log.read_text()
    assert "Traceback" in log and "injected failure at worker" in log
    assert not of_type(store, EventType.LEADER_CRASHED)


# ----------------------------------------------------------------------------- faults


def test_a_progress_flood_is_folded_in_the_event_log_and_kept_whole_in_the_log(
    tmp_path: Path, home: Home
) -> None:
    flood = "import sys\nfor i in range(20000): print(f'@supervisor progress: {i}')"
    (tmp_path / "flood.py").write_text(flood)
    write_crew(tmp_path, [{"id": "flood", "prompt": "flood.py"}], command=["python3", "{prompt}"])
    leader = Leader("run", "crew.toml", cwd=tmp_path)
    store = store_of(home, leader.run_id)

    assert leader.finish() == 0, leader.err
    reports = [m for m in store.messages(Box.OUTBOX) if m.task_id == "flood"]
    assert REPORTS_PER_WINDOW <= len(reports) <= 3 * REPORTS_PER_WINDOW
    folded = sum(int((m.data or {}).get("folded", 0)) for m in reports)
    assert folded + sum(1 for m in reports if not (m.data or {}).get("folded")) == 20000
    assert reports[-1].body == "19999"  # the latest is never lost
    assert len(events_of(store)) < 100
    assert store.paths.log("flood").read_text().count("@supervisor progress:") == 20000


def run_with_fault(tmp_path: Path, home: Home, fault: str) -> RunStore:
    """`crew run` of the crew.toml in `tmp_path` with CREW_FAULT armed, led to its end (exit 0)."""
    os.environ["CREW_FAULT"] = fault
    try:
        leader = Leader("run", "crew.toml", cwd=tmp_path)
    finally:
        del os.environ["CREW_FAULT"]
    assert leader.finish() == 0, leader.err
    return store_of(home, leader.run_id)


@pytest.mark.parametrize(
    ("fault", "named"),
    [
        ("emfile:spawn", "EMFILE"),  # this process is out of file descriptors
        ("enfile:spawn", "ENFILE"),  # the whole system is
        ("eio:events.jsonl@3", "EIO"),  # the disk failed a write: the task's start, recorded
        ("edquot:events.jsonl@3", "EDQUOT"),  # over the user's disk quota
    ],
)
def test_a_fault_while_starting_is_waited_out_not_a_failure(
    tmp_path: Path, home: Home, fault: str, named: str
) -> None:
    write_crew(tmp_path, [{"id": "only", "prompt": "say:hi ; exit:0"}])
    store = run_with_fault(tmp_path, home, fault)
    task = store.state().tasks["only"]
    assert task.status is TaskStatus.COMPLETED and task.attempt == 1 and task.failures == 0
    (degraded,) = of_type(store, EventType.LEADER_DEGRADED)
    assert degraded.data is not None and f"({named})" in degraded.data["reason"]
    assert of_type(store, EventType.LEADER_RECOVERED)


def test_a_fault_amid_a_turns_starts_keeps_those_started_and_retries_the_rest(
    tmp_path: Path, home: Home
) -> None:
    names = ["a", "b", "c"]
    write_crew(tmp_path, [{"id": name, "prompt": "say:hi ; exit:0"} for name in names])
    store = run_with_fault(tmp_path, home, "emfile:spawn@2")  # the second of three at once
    tasks = store.state().tasks
    assert all(tasks[n].status is TaskStatus.COMPLETED for n in names)
    assert all(tasks[n].attempt == 1 and tasks[n].failures == 0 for n in names)
    (degraded,) = of_type(store, EventType.LEADER_DEGRADED)
    assert degraded.data is not None and "starting b" in degraded.data["reason"]
    # a started in the turn the fault hit; b and c together, once the leader retried.
    started = of_type(store, EventType.TASK_STARTED)
    assert [e.task_id for e in started] == names
    assert started[0].end_seq is None and started[1].end_seq == started[2].seq


def test_a_crew_starting_at_once_starts_in_transactions_of_a_few_letting_the_lock_go(
    tmp_path: Path, home: Home
) -> None:
    """Workers start under the run lock. Thousands in one transaction on a busy machine held it
    past the 10 s a person's `crew steer` waits (and the heartbeat past the lease); now a
    transaction starts at most START_BATCH of them, the rest start in the next turn."""
    from crew.leader.schedule import START_BATCH

    names = [f"t{i}" for i in range(START_BATCH + 3)]
    write_crew(
        tmp_path,
        [{"id": name, "prompt": "say:hi ; exit:0"} for name in names],
        crew={"maxParallel": len(names)},
    )
    leader = Leader("run", "crew.toml", cwd=tmp_path)
    assert leader.finish() == 0, leader.err
    store = store_of(home, leader.run_id)
    started = of_type(store, EventType.TASK_STARTED)
    assert sorted(e.task_id for e in started) == sorted(names)
    sizes = list(Counter(e.end_seq or e.seq for e in started).values())  # by transaction
    assert len(sizes) >= 2 and max(sizes) <= START_BATCH, sizes


def _state(pid: int) -> bytes:
    """The process's state letter in /proc (b"" once it is gone)."""
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/stat").read_bytes().rpartition(b")")[2].split()[0]
    return b""


def _zombie(pid: int) -> bool:
    return _state(pid) == b"Z"


def transactions(events: list[Event]) -> set[int]:
    """The transactions the events were written in, each named by its last seq (crew/store/
    eventlog.py: every event of a transaction but its last carries that seq as `endSeq`)."""
    return {e.end_seq or e.seq for e in events}


def ended_together(tmp_path: Path, home: Home, env: dict[str, str] | None = None) -> RunStore:
    """A run of three workers that end while their leader is stopped (SIGSTOP): it reads all
    three exits in one wake-up once it goes on."""
    go = tmp_path / "go"
    names = ["a", "b", "c"]
    write_crew(tmp_path, [{"id": n, "prompt": f"until:{go} ; say:done ; exit:0"} for n in names])
    leader = Leader("run", "crew.toml", cwd=tmp_path, env={**os.environ, **(env or {})})
    store = store_of(home, leader.run_id)
    running = lambda: [t.pid for t in store.state().tasks.values() if t.pid]  # noqa: E731
    pids = eventually(lambda: len(running()) == len(names) and running())
    os.kill(leader.pid, signal.SIGSTOP)
    try:
        eventually(lambda: _state(leader.pid) == b"T")  # stopped, not about to be
        go.touch()
        eventually(lambda: all(_zombie(pid) for pid in pids))
    finally:
        os.kill(leader.pid, signal.SIGCONT)
    assert leader.finish() == 0, leader.err
    tasks = store.state().tasks
    assert all(tasks[n].status is TaskStatus.COMPLETED and tasks[n].failures == 0 for n in names)
    return store


def test_workers_that_end_together_are_recorded_in_one_transaction(
    tmp_path: Path, home: Home
) -> None:
    completed = of_type(ended_together(tmp_path, home), EventType.TASK_COMPLETED)
    # One transaction as a rule. Once, in a full suite under heavy load, one exit came in a
    # wake-up of its own and the other two together: at least two together, always (before:
    # one transaction each).
    assert len(completed) == 3 and len(transactions(completed)) < 3


def test_a_failure_recording_exits_together_records_each_on_its_own(
    tmp_path: Path, home: Home
) -> None:
    store = ended_together(tmp_path, home, {"CREW_FAULT": "raise:exits"})
    completed = of_type(store, EventType.TASK_COMPLETED)
    assert len(completed) == 3 and len(transactions(completed)) == 3
    assert not of_type(store, EventType.LEADER_DEGRADED)


def test_a_run_lock_held_for_long_is_waited_for_with_the_heartbeat_going(
    tmp_path: Path, home: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_crew(tmp_path, [{"id": "only", "prompt": f"until:{tmp_path / 'go'} ; say:done ; exit:0"}])
    monkeypatch.setenv("CREW_LOCK_TIMEOUT", "0.5")
    leader = Leader("run", "crew.toml", cwd=tmp_path)
    store = store_of(home, leader.run_id)
    eventually(lambda: store.state().tasks["only"].status is TaskStatus.RUNNING)

    with heartbeats(store) as watch, locked(store.paths.lock, timeout=5):
        (tmp_path / "go").touch()  # the leader needs the lock to record what it prints
        eventually(lambda: len(watch.seen) >= 4)  # 3 s: six times the lock timeout
        info = LeaderInfo.model_validate_json(store.paths.leader.read_bytes())
        assert leader.process.poll() is None
        assert info.degraded is not None and "run lock" in info.degraded
        assert "the leader is degraded" in " ".join(run_status(store).run_warnings)
    longest = watch.stop()

    assert leader.finish() == 0, leader.err
    assert longest <= 1.0 + LATE
    assert of_type(store, EventType.LEADER_DEGRADED) and of_type(store, EventType.LEADER_RECOVERED)
    assert "run lock" in store.paths.leader_log.read_text()


@pytest.fixture
def small_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A 4 MiB tmpfs as CREW_HOME (root only; skipped where it cannot be mounted)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)],
        capture_output=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    (mount / ".crew").mkdir()
    monkeypatch.setenv("CREW_HOME", str(mount / ".crew"))
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(disk: Path) -> Path:
    """Fill `disk` to the last byte; the file that fills it."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
    try:
        for size in (65536, 4096, 1):  # down to the last byte of a partial block
            with contextlib.suppress(OSError):
                while os.write(fd, b"\0" * size):
                    pass
    finally:
        os.close(fd)
    return filler


def test_a_full_disk_under_a_live_run_holds_the_delivery_back_until_it_clears(
    tmp_path: Path, small_disk: Path
) -> None:
    write_crew(
        tmp_path,
        [{"id": "only", "prompt": f"until:{tmp_path / 'go'} ; read ; ack ; read ; ack ; exit:0"}],
    )
    leader = Leader("run", "crew.toml", cwd=tmp_path)
    store = store_of(Home(small_disk / ".crew"), leader.run_id)
    eventually(lambda: store.state().tasks["only"].status is TaskStatus.RUNNING)
    # More than a pipe holds: their delivery is recorded only once the worker reads them.
    body = "x" * 60_000
    sent = [verbs.steer(store, "only", body, session=SESSION).message.id for _ in range(2)]

    filler = fill(small_disk)
    (tmp_path / "go").touch()
    eventually(lambda: LeaderInfo.model_validate_json(store.paths.leader.read_bytes()).degraded)
    assert "No space left on device" in " ".join(run_status(store).run_warnings)
    assert leader.process.poll() is None
    filler.unlink()

    assert leader.finish() == 0, leader.err
    steers = [m for m in store.messages() if m.id in sent]
    assert [m.status for m in steers] == [MessageStatus.ACKNOWLEDGED] * 2
    assert all(m.body == body for m in steers)
    degraded = of_type(store, EventType.LEADER_DEGRADED)
    assert degraded and "ENOSPC" in json.dumps(degraded[0].data)
    assert of_type(store, EventType.LEADER_RECOVERED)
