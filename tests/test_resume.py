"""Resuming a run: the new attempt gets what the old one was given, in the order accepted."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from conftest import SESSION
from leaders import Leader, eventually, store_of, write_crew

from crew import verbs
from crew.paths import Home
from crew.registry import Box, MessageStatus, TaskStatus

#: Acknowledges every steer it reads, prints it, and never ends on its own.
READER = "drain"


def test_steers_reach_a_resumed_task_in_the_order_they_were_accepted(
    tmp_path: Path, home: Home
) -> None:
    write_crew(tmp_path, [{"id": "t", "prompt": READER}])
    leader = Leader("run", "crew.toml", cwd=tmp_path)
    store = store_of(home, leader.run_id)
    eventually(lambda: store.state().tasks["t"].status is TaskStatus.RUNNING)
    for n in range(4):
        verbs.steer(store, "t", f"s{n}", session=SESSION)

    def delivered() -> bool:
        steers = store.messages(Box.STEERING)
        return len(steers) == 4 and all(m.status is not MessageStatus.PENDING for m in steers)

    eventually(delivered)
    leader.process.kill()  # kill -9: s0…s3 were given to the attempt that dies
    leader.finish()
    for n in range(4, 9):
        verbs.steer(store, "t", f"s{n}", session=SESSION)  # pending: no leader

    resumed = Leader("resume", leader.run_id, cwd=tmp_path)
    second = "attempt 2\n"
    eventually(lambda: _log(store).partition(second)[2].count("got steer") == 9)
    verbs.cancel(store, session=SESSION, grace=0.1)
    resumed.finish()

    got = [line for line in _log(store).partition(second)[2].splitlines() if "got steer" in line]
    assert got == [f"got steer s{n}" for n in range(9)]


def test_a_refused_resume_says_nothing_else(tmp_path: Path, home: Home) -> None:
    write_crew(tmp_path, [{"id": "t", "prompt": READER}])
    leader = Leader("run", "crew.toml", cwd=tmp_path)
    try:
        second = subprocess.run(
            [sys.executable, "-m", "crew", "resume", leader.run_id, "--no-input"],
            cwd=tmp_path, capture_output=True, text=True, check=False,
        )  # fmt: skip
    finally:
        verbs.cancel(store_of(home, leader.run_id), session=SESSION, grace=0.1)
        leader.finish()

    assert second.returncode == 4
    assert "resumed" not in second.stderr and second.stdout == ""
    assert second.stderr.startswith(f"crew: error: Run {leader.run_id} is already led by pid ")


def _log(store: object) -> str:
    path = store.paths.log("t")  # type: ignore[attr-defined]
    return path.read_text() if path.exists() else ""
