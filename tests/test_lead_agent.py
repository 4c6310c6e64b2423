"""Real Claude Code as the lead of .crew-example/lead (`-m agents`): given the example's MCP
config, it calls crew's tools because the fake model's scripted turns ask for those calls, and
the run goes as the lead's prompt says. Skipped without the CLIs of `make agents`."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
from conftest import AgentClis
from fake_model import Model, Tool, text
from leaders import toml_value
from test_lead_example import EXAMPLE, LEAD_BLOCK

from crew.paths import Home
from crew.registry import EventType, RunStatus, TaskStatus
from crew.store.runstore import RunStore

pytestmark = pytest.mark.agents
if importlib.util.find_spec("mcp") is None:  # an optional extra
    pytest.skip("needs the mcp extra", allow_module_level=True)


def crew_tool(name: str, **arguments: Any) -> Tool:
    """A call of crew's MCP tool `name`, as Claude Code names it (server `crew`)."""
    return Tool((f"mcp__crew__{name}",), arguments)


def with_real_claude(copy: Path, clis: AgentClis, model: Model) -> None:
    """The copy's lead runs the installed claude against the fake model: the example's own
    arguments, MCP config and rights; only the program's path and the model's address differ."""
    toml = copy / "crew.toml"
    text_ = toml.read_text()
    lead = tomllib.loads(text_)["agents"]["lead"]
    config = copy / ".claude-home"
    env = {
        "HOME": str(config),
        "CLAUDE_CONFIG_DIR": str(config / ".claude"),
        "ANTHROPIC_BASE_URL": model.url,
        "ANTHROPIC_API_KEY": "sk-ant-dummy",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
    }
    block = "\n".join(
        [
            "[agents.lead]",
            f"command = {toml_value([str(clis.bin / 'claude'), *lead['command'][1:]])}",
            f"protocol = {toml_value(lead['protocol'])}",
            f"may = {toml_value(lead['may'])}",
            f"env = {toml_value(env)}",
        ]
    )
    toml.write_text(LEAD_BLOCK.sub(lambda _: block + "\n\n", text_, count=1))


def test_claude_code_leads_the_example_crew_through_crew_mcp(
    agent_clis: AgentClis, tmp_path: Path, home: Home
) -> None:
    copy = tmp_path / "lead"
    shutil.copytree(EXAMPLE, copy)
    with Model() as model:
        with_real_claude(copy, agent_clis, model)
        # "latest": the script is written before the run has an id (the home holds only it).
        model.script(
            [crew_tool("wait", run="latest", until="waiting", task="survey")],
            [crew_tool("respond", run="latest", task="survey", body="the parser")],
            [crew_tool("wait", run="latest", until="started", task="draft")],
            [crew_tool("steer", run="latest", task="draft", body="Keep it short.")],
            [
                crew_tool(
                    "add_task",
                    run="latest",
                    agent="checker",
                    task_id="check",
                    depends_on=["survey", "draft"],
                    prompt="Check the notes.",
                )
            ],
            [crew_tool("wait", run="latest", until="done", task="check", timeout=60)],
            [text("survey, draft and check completed.")],
        )
        path = os.pathsep.join([agent_clis.path(), str(Path(sys.executable).parent)])
        env = {k: v for k, v in os.environ.items() if k.startswith("CREW_")}
        done = subprocess.run(
            [sys.executable, "-m", "crew", "run", str(copy / "crew.toml"), "--no-input",
             "--timeout", "150s"],
            cwd=tmp_path, env=env | {"PATH": path, "LANG": "C.UTF-8", "HOME": str(tmp_path)},
            capture_output=True, text=True, timeout=200, check=False,
        )  # fmt: skip
        requests = model.scripted()
    (run_id,) = home.run_ids()
    store = RunStore(home.run(run_id))
    log = store.paths.log("lead")
    context = done.stderr + (log.read_text()[-4000:] if log.exists() else "")
    assert done.returncode == 0, context
    state = store.state()
    assert state.run.status is RunStatus.COMPLETED
    assert {t.id: t.status for t in state.task_list()} == dict.fromkeys(
        ["lead", "survey", "draft", "check"], TaskStatus.COMPLETED
    )
    assert state.tasks["check"].parent == "lead"
    assert state.tasks["lead"].result == "survey, draft and check completed."
    # Claude defers MCP tools (found by its ToolSearch): the first request names them all the
    # same, as listed by the `crew mcp` the example's config starts.
    assert all(f"mcp__crew__{t}" in requests[0].dump for t in ("add_task", "respond", "steer"))
    (answer,) = [e for e in store.events().records if e.type is EventType.TASK_RESPONDED]
    assert (answer.task_id, (answer.data or {}).get("session")) == ("survey", "task:lead")
    assert "steered: Keep it short." in store.paths.log("draft").read_text()
