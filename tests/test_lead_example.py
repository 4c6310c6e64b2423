"""The example crew led by an agent (.crew-example/lead): valid as shipped, and its workers led
to the end through `crew mcp` started exactly as its MCP config says, by the MCP SDK's own
client standing in for Claude Code (tests/mcp_lead.py, run as the lead task's worker)."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from leaders import toml_value

from crew.models import Event
from crew.paths import Home
from crew.registry import EventType, RunStatus, TaskStatus
from crew.store import jsonl
from crew.store.runstore import RunStore

if importlib.util.find_spec("mcp") is None:  # an optional extra
    pytest.skip("needs the mcp extra", allow_module_level=True)

EXAMPLE = Path(__file__).resolve().parent.parent / ".crew-example" / "lead"
STAND_IN = Path(__file__).resolve().parent / "mcp_lead.py"
LEAD_BLOCK = re.compile(r"^\[agents\.lead\]\n.*?\n\n", re.DOTALL | re.MULTILINE)


def test_the_lead_example_is_valid_as_shipped(cli: Callable[..., Any]) -> None:
    result = cli("validate", str(EXAMPLE / "crew.toml"))
    assert result.code == 0, result.err
    config = tomllib.loads((EXAMPLE / "crew.toml").read_text())
    lead = config["agents"]["lead"]
    assert lead["command"][0] == "claude" and lead["protocol"] == "claude-code"
    assert "{crewDir}/crew-mcp.json" in lead["command"]  # the config the example ships


def with_stand_in(copy: Path) -> None:
    """The copy's lead agent runs the stand-in lead instead of `claude`, with the same rights
    and the same MCP config (the rest of crew.toml is the example's, byte for byte)."""
    toml = copy / "crew.toml"
    text = toml.read_text()
    lead = tomllib.loads(text)["agents"]["lead"]
    config = lead["command"][lead["command"].index("--mcp-config") + 1]
    block = (
        "[agents.lead]\n"
        f"command = {toml_value(['{python}', str(STAND_IN), config])}\n"
        f"may = {toml_value(lead['may'])}\n\n"
    )
    assert LEAD_BLOCK.search(text), "the example's [agents.lead] table ends at a blank line"
    toml.write_text(LEAD_BLOCK.sub(lambda _: block, text, count=1))


def test_a_lead_on_the_mcp_client_answers_steers_adds_a_task_and_sees_the_run_end(
    tmp_path: Path, home: Home
) -> None:
    copy = tmp_path / "lead"
    shutil.copytree(EXAMPLE, copy)
    with_stand_in(copy)
    # `crew` as the MCP config names it: the one installed next to this Python.
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    # --timeout: a lead that fails leaves survey waiting for its answer; the run ends anyway.
    done = subprocess.run(
        [sys.executable, "-m", "crew", "run", str(copy / "crew.toml"), "--no-input", "--timeout", "90s"],
        cwd=tmp_path, env={**os.environ, "PATH": path}, capture_output=True, text=True,
        timeout=150, check=False,
    )  # fmt: skip
    (run_id,) = home.run_ids()
    store = RunStore(home.run(run_id))
    lead_log = store.paths.log("lead").read_text() if store.paths.log("lead").exists() else ""
    assert done.returncode == 0, done.stdout + done.stderr + lead_log
    state = store.state()
    assert state.run.status is RunStatus.COMPLETED
    tasks = {t.id: t for t in state.task_list()}
    assert {i: t.status for i, t in tasks.items()} == dict.fromkeys(
        ["lead", "survey", "draft", "check"], TaskStatus.COMPLETED
    )
    assert tasks["check"].parent == "lead"  # added by the lead, as its worker
    calls = [json.loads(line)["tool"] for line in lead_log.splitlines() if line.startswith("{")]
    assert [c for c in calls if c != "wait"] == ["respond", "steer", "add_task", "status"]
    assert "question: Which part of the code should I survey first?" in lead_log
    assert "check: completed" in lead_log
    events = jsonl.read(store.paths.events, Event).records
    (answer,) = [e for e in events if e.type is EventType.TASK_RESPONDED]
    assert answer.task_id == "survey"
    assert (answer.data or {}).get("session") == "task:lead"  # the lead's own rights, no --force
    assert "survey: the parser is where the risk is" in store.paths.log("survey").read_text()
    assert "steered: Keep the notes to three bullet points." in store.paths.log("draft").read_text()
    assert "checked: Check the notes against the survey." in store.paths.log("check").read_text()
