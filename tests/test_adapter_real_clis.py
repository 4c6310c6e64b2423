"""The adapters against the real agent CLIs, offline: each must get as far as the agent goes
without credentials. Skipped where the CLI is not installed (`pi`, `claude`, `codex` on PATH)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from leaders import Leader, store_of, write_crew

from crew.models import Event
from crew.paths import Home
from crew.registry import EventType, TaskStatus
from crew.store import jsonl


def _run_agent(tmp_path: Path, home: Home, command: list[str], **agent: Any) -> Any:
    binary = shutil.which(command[0])
    if binary is None:
        pytest.skip(f"{command[0]} is not installed")
    agent_home = tmp_path / "agent-home"
    agent_home.mkdir()
    write_crew(
        tmp_path,
        [{"id": "t", "prompt": "Say hi"}],
        command=[binary, *command[1:]],
        agent={"env": {"HOME": str(agent_home)}, **agent},
    )
    leader = Leader("run", "crew.toml", cwd=tmp_path)
    assert leader.finish(timeout=120) == 1
    return store_of(home, leader.run_id)


def test_pi_refuses_the_prompt_without_credentials(tmp_path: Path, home: Home) -> None:
    store = _run_agent(
        tmp_path, home, ["pi", "--mode", "rpc", "--no-session", "--offline"], protocol="pi"
    )

    task = store.state().tasks["t"]
    assert task.status is TaskStatus.FAILED
    assert task.error is not None and task.error.startswith("pi refused the prompt: No API key")


def test_claude_reports_that_it_is_not_logged_in(tmp_path: Path, home: Home) -> None:
    command = ["claude", "-p", "--input-format", "stream-json", "--output-format", "stream-json",
               "--verbose", "--permission-prompt-tool", "stdio"]  # fmt: skip
    store = _run_agent(tmp_path, home, command, protocol="claude-code")

    task = store.state().tasks["t"]
    assert task.status is TaskStatus.FAILED
    assert task.error is not None and task.error.startswith("claude: not logged in")
    assert '"subtype":"init"' in store.paths.log("t").read_text()  # the turn really started


def test_codex_completes_its_handshake_then_retries_offline(tmp_path: Path, home: Home) -> None:
    store = _run_agent(tmp_path, home, ["codex", "app-server"], protocol="codex", timeout="8s")

    log = store.paths.log("t").read_text()
    assert '"userAgent"' in log  # initialize answered
    assert '"method":"turn/started"' in log  # the handshake reached the first turn
    task = store.state().tasks["t"]
    assert task.status is TaskStatus.FAILED and task.error == "timed out after 8s of running"
    events = jsonl.read(store.paths.events, Event).records
    assert any(
        e.type is EventType.SUPERVISOR_REPORT and "retrying" in (e.message or "") for e in events
    )
