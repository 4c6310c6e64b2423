"""Shell completion of run ids and task ids from the state folder: the completion functions
themselves, and through the protocol a shell's completion script speaks to `crew`."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from crew.cli.common import complete_run, complete_task
from crew.store.runstore import RunStore

MakeRun = Callable[..., RunStore]


def context(**params: Any) -> Any:
    """What a completion function reads of click's context: the parameters parsed so far."""
    return SimpleNamespace(params=params)


def complete(line: str, **env: str) -> list[str]:
    """What bash completion offers for the last word of `line` (typer's bash protocol)."""
    words = line.split(" ")
    done = subprocess.run(
        [sys.executable, "-m", "crew"],
        env={
            **os.environ,
            **env,
            "_CREW_COMPLETE": "complete_bash",
            "COMP_WORDS": line,
            "COMP_CWORD": str(len(words) - 1),
        },
        capture_output=True,
        text=True,
        check=False,
    )
    assert (done.returncode, done.stderr) == (0, "")
    return [word for word in done.stdout.splitlines() if word]


def test_runs_complete_newest_first_after_latest(make_run: MakeRun) -> None:
    older, newer = make_run(), make_run()

    assert complete_run(context(), "") == ["latest", newer.run_id, older.run_id]
    assert complete_run(context(), older.run_id[:-1]) == [older.run_id]
    assert complete_run(context(), "lat") == ["latest"]
    assert complete_run(context(), "nope") == []


def test_runs_complete_from_the_home_given_with_home(make_run: MakeRun, tmp_path: Path) -> None:
    make_run()
    other = tmp_path / "other" / ".crew"
    other.mkdir(parents=True)

    assert complete_run(context(home=other), "") == ["latest"]
    assert complete_run(context(home=tmp_path / "missing"), "") == []


def test_tasks_complete_from_the_run_typed_before_them(make_run: MakeRun) -> None:
    store = make_run()

    assert complete_task(context(run=store.run_id), "") == ["plan", "build"]
    assert complete_task(context(), "b") == ["build"]  # the latest run
    assert complete_task(context(run="19990101"), "") == []  # no such run
    assert complete_task(context(run="../etc"), "") == []  # never a path


def test_completion_through_the_shell_protocol(make_run: MakeRun) -> None:
    store = make_run()

    assert complete("crew status ") == ["latest", store.run_id]
    assert complete(f"crew steer {store.run_id[:9]} ") == ["plan", "build"]
    assert complete(f"crew respond {store.run_id} p") == ["plan"]
    assert complete(f"crew wait {store.run_id} --task b") == ["build"]
    assert complete("crew cancel latest ") == ["plan", "build"]
    assert complete("crew logs latest ") == ["plan", "build"]
    assert complete("crew doctor l") == ["latest"]


def test_completion_outside_a_crew_home_offers_nothing(tmp_path: Path) -> None:
    assert complete("crew status ", CREW_HOME=str(tmp_path / "nowhere")) == []
