"""The example crew (what `make demo` runs) finishes unattended and shows every feature."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from crew.fast import examining
from crew.fast.runfiles import RunFiles
from crew.models import Event
from crew.paths import Home
from crew.registry import EventType, RunStatus, TaskStatus
from crew.store import jsonl
from crew.store.runstore import RunStore

EXAMPLE = Path(__file__).resolve().parent.parent / ".crew-example"


def run_example(tmp_path: Path, late: str | None = None) -> subprocess.CompletedProcess[str]:
    """`crew run` on a copy of the example; `late` names an agent that starts 2 s late."""
    copy = tmp_path / "example"
    shutil.copytree(EXAMPLE, copy, ignore=shutil.ignore_patterns("state"))
    if late is not None:
        toml = copy / "crew.toml"
        start = f"[agents.{late}]\ncommand = ["
        assert start in toml.read_text()
        toml.write_text(toml.read_text().replace(start, start + LATE, 1))
    env = {k: v for k, v in os.environ.items() if k != "CREW_HOME"}
    (tmp_path / ".crew").rmdir()  # as in a fresh clone: no crew home above the example
    return subprocess.run(
        [sys.executable, "-m", "crew", "run", str(copy / "crew.toml"), "--no-input"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


#: A command prefix that starts the agent after a pause.
LATE = '"sh", "-c", "sleep 2; exec \\"$0\\" \\"$@\\"", '


def test_the_example_crew_runs_to_completion_unattended(tmp_path: Path) -> None:
    done = run_example(tmp_path)

    assert done.returncode == 0, done.stdout + done.stderr
    copy = tmp_path / "example"
    env = {k: v for k, v in os.environ.items() if k != "CREW_HOME"}
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
    # Every kind of message a leader writes, delivered and acknowledged: a sound run, which
    # `crew doctor` tells so without the models (crew/fast/examining.py).
    assert examining.sound(RunFiles(str(home.root), run_id))
    # No home is found from here: the run says how to reach it, and that command works.
    assert f"crew: run {run_id} (other commands reach it with --home example)" in done.stderr
    (suggested,) = re.findall(r"see it again with `crew (status .*)`", done.stderr)
    assert suggested == f"status {run_id} --home example"
    again = subprocess.run(
        [sys.executable, "-m", "crew", *shlex.split(suggested)],
        cwd=tmp_path, env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert again.returncode == 0 and "publish" in again.stdout, again.stderr
    shown = subprocess.run(
        [sys.executable, "-m", "crew", "mailbox", run_id, "--json"],
        env={**env, "CREW_HOME": str(copy)}, capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert any(
        m["kind"] == "steer" and m["status"] == "acknowledged" for m in json.loads(shown.stdout)
    )


@pytest.mark.parametrize("late", ["editor", "writer"])
def test_the_example_steers_the_draft_whichever_agent_gets_going_first(
    tmp_path: Path, late: str
) -> None:
    """Nothing in the example races: an editor that starts late still finds the draft waiting
    for its steer (before, the draft had finished and the steer was refused), and a steer that
    arrives before the writer reads its input is honoured at the first checkpoint."""
    done = run_example(tmp_path, late)

    assert done.returncode == 0, done.stdout + done.stderr
    assert "draft attention: preempt steer" in done.stdout
