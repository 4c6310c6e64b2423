"""Helpers to run real leaders and workers in tests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from crew.paths import Home
from crew.store.runstore import RunStore

WORKER = Path(__file__).parent / "workers" / "scripted.py"


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {toml_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(value)


def write_crew(
    folder: Path,
    tasks: list[dict[str, Any]],
    *,
    agent: dict[str, Any] | None = None,
    crew: dict[str, Any] | None = None,
    auto_respond: list[dict[str, Any]] | None = None,
    limits: dict[str, Any] | None = None,
    command: list[str] | None = None,
) -> Path:
    """A crew.toml whose single agent `w` runs `command` (default: the scripted worker, whose
    script is each task's prompt)."""
    command = command or [sys.executable, str(WORKER), "{prompt}"]
    lines = ["[crew]", 'name = "test"']
    lines += [f"{k} = {toml_value(v)}" for k, v in (crew or {}).items()]
    lines += ["", "[agents.w]", f"command = {toml_value(command)}"]
    lines += [f"{k} = {toml_value(v)}" for k, v in (agent or {}).items()]
    for task in tasks:
        lines += ["", "[[tasks]]", 'agent = "w"']
        lines += [f"{k} = {toml_value(v)}" for k, v in task.items()]
    for rule in auto_respond or []:
        lines += ["", "[[autoRespond]]"] + [f"{k} = {toml_value(v)}" for k, v in rule.items()]
    if limits:
        lines += ["", "[limits]"] + [f"{k} = {toml_value(v)}" for k, v in limits.items()]
    path = folder / "crew.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


class Leader:
    """`crew run` (or `crew resume`) in a real background process."""

    def __init__(self, *args: str, cwd: Path, env: Mapping[str, str] | None = None) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "crew", *args, "--no-input"],
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=os.environ if env is None else env,
        )
        assert self.process.stderr is not None
        first = self.process.stderr.readline()
        if not first.startswith("crew: run "):
            out, err = self.process.communicate(timeout=10)
            raise AssertionError(f"leader did not start: {first}{err}\n{out}")
        self.run_id = first.split()[2]
        self.out = ""
        self.err = ""

    @property
    def pid(self) -> int:
        return self.process.pid

    def finish(self, timeout: float = 30) -> int:
        out, err = self.process.communicate(timeout=timeout)
        self.out += out
        self.err += err
        return self.process.returncode


def store_of(home: Home, run_id: str) -> RunStore:
    return RunStore(home.run(run_id))


def eventually(check: Callable[[], Any], timeout: float = 10.0) -> Any:
    """Retry `check` until it returns something truthy (tests only: observing another process)."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        time.sleep(0.02)
