"""`crew run`, `crew resume` and `crew rerun` on the fast path (crew/fast/leading.py): real
leaders, each case run both ways (CREW_FAST=0 for the full command) in twin folders, printing,
writing and exiting the same; what the fast path leaves to the full command, and an error once
a run exists, which never makes a second run."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import snapshot_files
from leaders import write_crew
from test_fast import typer_free

from crew import fast
from crew.fast import runfiles
from crew.paths import Home
from crew.store.runstore import RunStore

MakeRun = Callable[..., RunStore]


@pytest.fixture(autouse=True)
def _fresh_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runfiles, "wrote", False)  # as in a fresh process, and put back after


#: What differs between two equal runs: run ids, times, pids, ids of events and messages.
_VARYING = [
    (re.compile(r"\d{8}-\d{6}-[0-9a-f]{4}"), "RUN"),
    (re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z"), "TIME"),
    (re.compile(r"\b\d\d:\d\d:\d\d\b"), "CLOCK"),
    (re.compile(r"(pid\"?:? ?)\d+"), r"\1PID"),
    (re.compile(r"(evt|msg)_[0-9a-f]{16}"), r"\1_ID"),
    (re.compile(r"\"(durationMs|seq)\": ?\d+"), r'"\1": N'),
    (re.compile(r"\"tokenHash\": ?\"[0-9a-f]{64}\""), '"tokenHash": "HASH"'),
]


def _normal(text: str, folder: Path) -> str:
    text = text.replace(str(folder), "FOLDER")
    for pattern, replacement in _VARYING:
        text = pattern.sub(replacement, text)
    return text


def _crew(folder: Path, *args: str, full: bool) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CREW_FAST": "0" if full else "1"}
    return subprocess.run(
        [sys.executable, "-m", "crew", *args, "--home", str(folder / ".crew")],
        cwd=folder, env=env, capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip


def _twins(tmp_path: Path, tasks: list[dict[str, object]]) -> tuple[Path, Path]:
    folders = tmp_path / "full", tmp_path / "fast"
    for folder in folders:
        (folder / ".crew").mkdir(parents=True)
        write_crew(folder, tasks)
    return folders


def _same(full: subprocess.CompletedProcess[str], quick: subprocess.CompletedProcess[str],
          folders: tuple[Path, Path]) -> None:  # fmt: skip
    assert quick.returncode == full.returncode
    assert _normal(quick.stdout, folders[1]) == _normal(full.stdout, folders[0])
    assert _normal(quick.stderr, folders[1]) == _normal(full.stderr, folders[0])


def _events(folder: Path) -> list[tuple[str, str | None]]:
    home = Home(folder / ".crew")
    (run_id,) = [p.name for p in home.runs_dir.iterdir()]
    store = RunStore(home.run(run_id))
    return [(e.type.value, e.task_id) for e in store.events().records]


TASKS: list[dict[str, object]] = [
    {"id": "a", "prompt": "say:hello ; exit:0"},
    {"id": "b", "prompt": "say:no ; exit:3", "dependsOn": ["a"]},
]


@pytest.mark.parametrize("args", [("--no-input",), ("--json",), ("--max-parallel", "1", "-q")])
def test_a_run_prints_writes_and_exits_as_the_full_command_does(
    tmp_path: Path, args: tuple[str, ...]
) -> None:
    folders = _twins(tmp_path, TASKS)

    full = _crew(folders[0], "run", "crew.toml", *args, full=True)
    quick = _crew(folders[1], "run", "crew.toml", *args, full=False)

    assert full.returncode == 1  # b failed
    _same(full, quick, folders)
    assert _events(folders[1]) == _events(folders[0])
    if "--json" in args:
        assert json.loads(quick.stdout.splitlines()[-1])["status"] == "failed"


def test_a_resume_prints_writes_and_exits_as_the_full_command_does(
    make_run: MakeRun, tmp_path: Path
) -> None:
    store = make_run()  # created, never led: its leader is gone
    folders = tmp_path / "full", tmp_path / "fast"
    for folder in folders:
        shutil.copytree(store.paths.home.root, folder / ".crew", symlinks=True)

    full = _crew(folders[0], "resume", store.run_id, "--no-input", full=True)
    quick = _crew(folders[1], "resume", store.run_id, "--no-input", full=False)

    assert full.returncode == 0
    _same(full, quick, folders)
    assert _events(folders[1]) == _events(folders[0])


@pytest.mark.parametrize(
    "args",
    [
        ("--no-input",),
        ("--failed", "--json"),
        ("b", "--max-parallel", "1", "--no-input"),
        ("a", "--failed"),  # both: 2
        ("nope", "--no-input"),  # no such task: 5
        ("Bad/Id",),  # 2
    ],
)
def test_a_rerun_prints_writes_and_exits_as_the_full_command_does(
    tmp_path: Path, args: tuple[str, ...]
) -> None:
    first = _twins(tmp_path / "first", TASKS)[0]
    _crew(first, "run", "crew.toml", "--no-input", full=True)  # b failed: the run ended
    twins = tmp_path / "full", tmp_path / "fast"
    for folder in twins:
        shutil.copytree(first, folder, symlinks=True)

    full = _crew(twins[0], "rerun", "latest", *args, full=True)
    quick = _crew(twins[1], "rerun", "latest", *args, full=False)

    _same(full, quick, twins)
    ran = [sorted(p.name for p in (folder / ".crew/state/runs").iterdir()) for folder in twins]
    assert len(ran[0]) == len(ran[1]) == (2 if full.returncode in {0, 1} else 1)


@pytest.mark.parametrize(
    "args",
    [
        ("run", "missing.toml"),
        ("run", "crew.toml", "--timeout", "forever"),
        ("run", "crew.toml", "--session", "two\nlines"),
        ("resume", "1999"),
        ("resume", "../x"),
        ("resume", "latest", "--session", " padded "),
    ],
)
def test_a_refusal_is_the_full_commands_and_writes_nothing(
    make_run: MakeRun, tmp_path: Path, args: tuple[str, ...]
) -> None:
    store = make_run()
    folders = tmp_path / "full", tmp_path / "fast"
    for folder in folders:
        shutil.copytree(store.paths.home.root, folder / ".crew", symlinks=True)
        write_crew(folder, TASKS)
    before = snapshot_files(folders[1])

    full = _crew(folders[0], *args, full=True)
    quick = _crew(folders[1], *args, full=False)

    assert full.returncode in {2, 5} and full.stderr.startswith("crew: error: ")
    _same(full, quick, folders)
    assert snapshot_files(folders[1]) == before


@pytest.mark.parametrize(
    "args",
    [
        ("run", "crew.toml", "--max-parallel", "0"),  # the full command explains its minimum
        ("run", "crew.toml", "--max-parallel", "+2"),
        ("run", "crew.toml", "--color", "never"),
        ("run", "crew.toml", "--jq", ".status"),
        ("run", "crew.toml", "--max-parallel=2"),
        ("run", ""),
        ("run", "a.toml", "b.toml"),
        ("resume",),
        ("resume", "latest", "--help"),
    ],
)
def test_what_the_fast_path_leaves_to_the_full_command(
    tmp_path: Path, home: Home, args: tuple[str, ...]
) -> None:
    write_crew(tmp_path, TASKS)
    before = snapshot_files(tmp_path)

    assert fast.fast(list(args)) is None

    assert snapshot_files(tmp_path) == before and not runfiles.wrote


def test_an_error_once_the_run_exists_is_reported_never_run_again(
    tmp_path: Path, home: Home, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The fast path hands a command it cannot take to the full command; once `crew run` has
    made its run it must not, or the run would be made twice."""
    import crew.leader

    def broken(*args: object, **kwargs: object) -> int:
        raise ValueError("a bug in the leader")

    monkeypatch.setattr(crew.leader, "lead", broken)
    write_crew(tmp_path, TASKS)

    code = fast.fast(["run", str(tmp_path / "crew.toml"), "--no-input"])

    assert code == 1
    assert capsys.readouterr().err.endswith(
        "crew: internal error: ValueError: a bug in the leader\n"
        "Set CREW_DEBUG=1 to see the traceback, and please report it.\n"
    )
    assert len(list(home.runs_dir.iterdir())) == 1


def test_a_leader_on_the_fast_path_imports_no_typer(tmp_path: Path) -> None:
    write_crew(tmp_path, TASKS[:1])
    assert typer_free(["run", str(tmp_path / "crew.toml"), "-q", "--no-input"]) == (0, [])
    assert typer_free(["rerun", "latest", "--no-input", "--home", str(tmp_path / ".crew")]) == (
        0,
        [],
    )
