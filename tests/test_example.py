"""The example crew (what `make demo` runs) finishes unattended and shows every feature."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from crew.models import Event
from crew.paths import Home
from crew.registry import EventType, RunStatus, TaskStatus
from crew.store import jsonl
from crew.store.runstore import RunStore

EXAMPLE = Path(__file__).resolve().parent.parent / ".crew-example"


def test_the_example_crew_runs_to_completion_unattended(tmp_path: Path) -> None:
    copy = tmp_path / "example"
    shutil.copytree(EXAMPLE, copy, ignore=shutil.ignore_patterns("state"))
    env = {k: v for k, v in os.environ.items() if k != "CREW_HOME"}
    (tmp_path / ".crew").rmdir()  # as in a fresh clone: no crew home above the example

    done = subprocess.run(
        [sys.executable, "-m", "crew", "run", str(copy / "crew.toml"), "--no-input"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip

    assert done.returncode == 0, done.stdout + done.stderr
    home = Home(copy)  # no .crew found: the folder of crew.toml is the home
    (run_id,) = home.run_ids()
    store = RunStore(home.run(run_id))
    state = store.state()
    assert state.run.status is RunStatus.COMPLETED
    assert all(t.status is TaskStatus.COMPLETED for t in state.task_list())
    events = jsonl.read(store.paths.events, Event).records
    answers = [e for e in events if e.type is EventType.TASK_RESPONDED]
    assert len(answers) == 3  # a selection and two confirmations, all by autoRespond
    decisions = [
        e.data["decision"] for e in events if e.type is EventType.ATTENTION_DECISION and e.data
    ]
    assert any(d["action"] == "preempt" and d["kind"] == "steer" for d in decisions)
    assert "draft attention: preempt steer" in done.stdout
    assert (
        "pausing the draft for: Make the intro friendlier" in store.paths.log("draft").read_text()
    )
    assert "uploaded to staging" in store.paths.log("publish").read_text()
    shown = subprocess.run(
        [sys.executable, "-m", "crew", "mailbox", run_id, "--json"],
        env={**env, "CREW_HOME": str(copy)}, capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert any(
        m["kind"] == "steer" and m["status"] == "acknowledged" for m in json.loads(shown.stdout)
    )
