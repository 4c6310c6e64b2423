"""The one place worker processes are started: command, placeholders, cwd, env, process group."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from crew.config import AgentConfig
from crew.models import Run, Task
from crew.paths import HOME_ENV, RunPaths
from crew.procs import ATTEMPT_ENV, RUN_ID_ENV, TASK_ID_ENV

_PLACEHOLDER_RE = re.compile(r"\{(prompt|task|run|crewDir|python)\}")


@dataclass(frozen=True)
class Launch:
    """Everything needed to start one attempt of a task."""

    argv: list[str]
    cwd: Path
    env: dict[str, str]


def launch_for(
    run: Run,
    task: Task,
    agent: AgentConfig,
    paths: RunPaths,
    *,
    attempt: int,
    home_parent: Path,
    protocol_env: dict[str, str] | None = None,
) -> Launch:
    """The command line, folder and environment of a task's worker."""
    values = {
        "prompt": task.prompt,
        "task": task.id,
        "run": run.run_id,
        "crewDir": run.crew_dir,
        "python": sys.executable,  # the interpreter that runs crew: it can import crew.worker
    }
    argv = [_PLACEHOLDER_RE.sub(lambda m: values[m.group(1)], arg) for arg in agent.command]
    crew_dir = Path(run.crew_dir)
    cwd = (crew_dir / agent.cwd) if agent.cwd is not None else home_parent
    env = {
        **os.environ,
        HOME_ENV: str(paths.root.parents[2]),  # a worker's own `crew` commands find its run
        **(protocol_env or {}),
        **agent.env,
        RUN_ID_ENV: run.run_id,
        TASK_ID_ENV: task.id,
        ATTEMPT_ENV: str(attempt),
        "CREW_STATE_DIR": str(paths.root),
        "CREW_PROTOCOL": "1",
    }
    return Launch(argv, cwd, env)


def start(launch: Launch, *, merge_stderr: bool) -> subprocess.Popen[bytes]:
    """Start a worker in its own session and process group, with pipes for its streams
    (stderr shares stdout's pipe with `merge_stderr`, keeping their exact order).

    Raises OSError (e.g. FileNotFoundError) when the command cannot be started.
    """
    process = subprocess.Popen(
        launch.argv,
        cwd=launch.cwd,
        env=launch.env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT if merge_stderr else subprocess.PIPE,
        start_new_session=True,
        close_fds=True,
        bufsize=0,
    )
    for stream in (process.stdin, process.stdout, process.stderr):
        if stream is not None:
            os.set_blocking(stream.fileno(), False)
    return process
