"""The GitHub Actions job of docs/ci.md, its `run:` steps executed as GitHub would run them.

Each step is a bash script run with `bash --noprofile --norc -eo pipefail` (GitHub's default
shell), with the job's `env`, `${{ … }}` expressions filled in, and step outputs read back from
`$GITHUB_OUTPUT`. The crew is the one the page defines above the job (its `file=` blocks).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from doc_examples import PAGES

CI_PAGE = Path(__file__).parent.parent / "docs" / "ci.md"
RUN_ID = "4242"


def _job() -> dict[str, Any]:
    text = CI_PAGE.read_text()
    block = re.search(r"```yaml\n(.*?)```", text, re.DOTALL)
    assert block is not None, "docs/ci.md has no GitHub Actions job"
    job: dict[str, Any] = yaml.safe_load(block.group(1))["jobs"]["crew"]
    return job


def _page_files() -> dict[str, str]:
    """The files the page has the reader save: `{path: text}`."""
    document = PAGES.parse(CI_PAGE)
    return {
        example.region.lexemes["file"]: example.parsed
        for example in document
        if "file" in example.region.lexemes
    }


def _fill(text: str, outputs: dict[str, dict[str, str]]) -> str:
    """`${{ github.run_id }}` and `${{ steps.ID.outputs.NAME }}` as GitHub would expand them."""

    def value(match: re.Match[str]) -> str:
        expression = match.group(1).strip()
        if expression == "github.run_id":
            return RUN_ID
        step = re.fullmatch(r"steps\.(\w+)\.outputs\.(\w+)", expression)
        assert step is not None, f"the test does not know ${{{{ {expression} }}}}"
        return outputs.get(step.group(1), {}).get(step.group(2), "")

    return re.sub(r"\$\{\{(.*?)\}\}", value, text)


def _run_job(workspace: Path) -> list[tuple[str, int, str]]:
    """Run the job's steps in order until one fails: each step's name, exit status, output."""
    job = _job()
    outputs: dict[str, dict[str, str]] = {}
    env = {k: v for k, v in os.environ.items() if not k.startswith("CREW_")}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), "/usr/bin", "/bin"])
    env["CREW_FSYNC"] = "0"
    env.update({k: _fill(str(v), outputs) for k, v in job.get("env", {}).items()})
    results = []
    for step in job["steps"]:
        script = step.get("run")
        if script is None or "pip install" in script:  # actions, and installing crew itself
            continue
        output_file = workspace.parent / f"output-{len(results)}"
        output_file.touch()
        done = subprocess.run(
            ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", _fill(script, outputs)],
            cwd=workspace,
            env={**env, "GITHUB_OUTPUT": str(output_file)},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        name = step.get("name", script)
        results.append((name, done.returncode, done.stdout + done.stderr))
        if "id" in step:
            lines = output_file.read_text().splitlines()
            outputs[step["id"]] = dict(line.split("=", 1) for line in lines if "=" in line)
        if done.returncode != 0:
            break
    return results


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """A checkout holding the page's crew."""
    checkout = tmp_path / "checkout"
    for name, text in _page_files().items():
        path = checkout / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return checkout


def test_the_job_answers_the_question_and_passes_when_the_run_completes(
    workspace: Path,
) -> None:
    steps = _run_job(workspace)

    assert [(name, code) for name, code, _ in steps] == [
        ("Check the crew definition", 0),
        ("Start the crew", 0),
        ("Approve the deployment question", 0),
        ("Wait for the end, fail on a failed run", 0),
    ], steps
    assert steps[-1][2].startswith("deploy completed\nRun 2026")  # `crew wait`, `crew status`
    assert f"owner ci-{RUN_ID}" in steps[-1][2]  # the job's session owns the run


def test_the_job_stops_at_the_check_when_crew_toml_is_wrong(workspace: Path) -> None:
    (workspace / ".crew" / "crew.toml").write_text("[crew\n")

    steps = _run_job(workspace)

    assert [(name, code) for name, code, _ in steps] == [("Check the crew definition", 2)], steps
    assert steps[0][2].startswith("crew: error: .crew/crew.toml:1:")


def test_the_start_step_fails_when_the_run_cannot_start(workspace: Path) -> None:
    # A crew that checks out but cannot start: its state folder is a file.
    (workspace / ".crew" / "state").write_text("")

    steps = _run_job(workspace)

    assert [(name, code) for name, code, _ in steps][-1][0] == "Start the crew", steps
    assert steps[-1][1] != 0, steps
    assert "crew: error:" in steps[-1][2]


def test_the_last_step_fails_the_job_when_the_run_fails(workspace: Path) -> None:
    (workspace / "deploy.sh").write_text((workspace / "deploy.sh").read_text() + "exit 1\n")

    steps = _run_job(workspace)

    assert [(name, code) for name, code, _ in steps] == [
        ("Check the crew definition", 0),
        ("Start the crew", 0),
        ("Approve the deployment question", 0),
        ("Wait for the end, fail on a failed run", 1),
    ], steps
