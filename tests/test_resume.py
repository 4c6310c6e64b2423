"""Resuming a run: the new attempt gets what the old one was given, in the order accepted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from conftest import SESSION
from leaders import Leader, eventually, store_of, write_crew

from crew import verbs
from crew.paths import Home
from crew.registry import Box, EventType, MessageStatus, TaskStatus

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

    def delivered_all() -> bool:
        return all(m.status is not MessageStatus.PENDING for m in store.messages(Box.STEERING))

    eventually(delivered)
    leader.process.kill()  # kill -9: s0…s3 were given to the attempt that dies
    leader.finish()
    for n in range(4, 9):
        verbs.steer(store, "t", f"s{n}", session=SESSION)  # pending: no leader

    got: dict[int, list[str]] = {}
    for attempt in (2, 3, 4):  # each attempt is given them all again, then killed
        resumed = Leader("resume", leader.run_id, cwd=tmp_path)
        after = f"attempt {attempt}\n"
        eventually(lambda: _log(store).partition(after)[2].count("got steer") == 9)  # noqa: B023
        eventually(delivered_all)
        if attempt < 4:
            resumed.process.kill()
        else:
            verbs.cancel(store, session=SESSION, grace=0.1)
        resumed.finish()
        log = _log(store).partition(after)[2].partition(f"attempt {attempt + 1}\n")[0]
        got[attempt] = [line for line in log.splitlines() if "got steer" in line]

    assert got == {a: [f"got steer s{n}" for n in range(9)] for a in (2, 3, 4)}
    steers = store.messages(Box.STEERING)
    assert [m.body for m in steers] == [f"s{n}" for n in range(9)]  # carried, never copied
    assert [m.carried for m in steers] == [3] * 4 + [2] * 5


def test_a_resumed_run_shows_what_happens_from_the_resume_on(tmp_path: Path, home: Home) -> None:
    go = tmp_path / "go"
    write_crew(tmp_path, [{"id": "t", "prompt": f"say:hi ; until:{go} ; say:done ; exit:0"}])
    leader = Leader("run", "crew.toml", cwd=tmp_path)
    store = store_of(home, leader.run_id)
    eventually(lambda: store.state().tasks["t"].status is TaskStatus.RUNNING)
    leader.process.kill()
    leader.finish()
    history = store.events().records[-1].seq
    go.touch()

    resumed = Leader("resume", leader.run_id, "--json", cwd=tmp_path)
    assert resumed.finish() == 0, resumed.err

    lines = [json.loads(line) for line in resumed.out.splitlines()]
    shown = [line for line in lines if "seq" in line]  # the events; the outcome comes last
    assert shown[0]["seq"] == history + 1  # the resume's own events, not the run's history
    assert [e["seq"] for e in shown] == list(range(history + 1, history + 1 + len(shown)))
    assert EventType.RUN_RESUMED in [e["type"] for e in shown]
    assert shown[-1]["type"] == EventType.RUN_ENDED


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
