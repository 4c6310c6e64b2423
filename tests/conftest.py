"""Shared fixtures: every test gets its own crew home; no test touches real state."""

from __future__ import annotations

import io
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from crew.config import CrewConfig, parse_config
from crew.domain.runs import create_run
from crew.paths import Home
from crew.store.runstore import RunStore

SESSION = "tester@ci"


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """Point CREW_HOME at a fresh folder, fix the session, and drop any other CREW_* setting."""
    for name in list(os.environ):
        if name.startswith("CREW_"):
            monkeypatch.delenv(name)
    home = tmp_path / ".crew"
    home.mkdir()
    monkeypatch.setenv("CREW_HOME", str(home))
    monkeypatch.setenv("CREW_FSYNC", "0")
    monkeypatch.setenv("CREW_SESSION_ID", SESSION)
    monkeypatch.setenv("CREW_SECRETS_DIR", str(tmp_path / "secrets"))  # outside the home
    monkeypatch.chdir(tmp_path)
    yield


@pytest.fixture
def home(tmp_path: Path) -> Home:
    return Home(tmp_path / ".crew")


def config(**overrides: Any) -> CrewConfig:
    """A small valid crew: plan -> build, one agent."""
    document: dict[str, Any] = {
        "crew": {"name": "test"},
        "agents": {"coder": {"command": ["python3", "-c", "pass"]}},
        "tasks": [
            {"id": "plan", "agent": "coder", "prompt": "Write a plan"},
            {"id": "build", "agent": "coder", "prompt": "Build it", "dependsOn": ["plan"]},
        ],
    }
    document.update(overrides)
    return parse_config(document)


@pytest.fixture
def make_run(home: Home, tmp_path: Path) -> Callable[..., RunStore]:
    def make(cfg: CrewConfig | None = None, *, session: str = SESSION) -> RunStore:
        return create_run(home, cfg or config(), crew_dir=tmp_path, session=session)

    return make


@dataclass
class CliResult:
    code: int
    out: str
    err: str


@pytest.fixture
def cli(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> Callable[..., CliResult]:
    """Run the crew command in-process: `cli("status", "--json")`."""
    from crew.cli import app
    from crew.cli.common import run_app

    def invoke(*args: str, stdin: str | None = None) -> CliResult:
        capsys.readouterr()
        if stdin is not None:
            monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
        code = run_app(app, list(args))
        captured = capsys.readouterr()
        return CliResult(code, captured.out, captured.err)

    return invoke


def snapshot_files(root: Path) -> dict[str, bytes]:
    """Every file under `root` (but the lock file) with its bytes: to prove nothing was written."""
    files: dict[str, bytes] = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and path.name not in {".lock"}:
            files[str(path.relative_to(root))] = path.read_bytes()
    return files
