"""The one place worker processes are started: command, placeholders, cwd, env, process group."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from crew import env, faults, ids
from crew.adapters.base import Adapter
from crew.config import AgentConfig
from crew.models import Run, Task
from crew.paths import RunPaths

#: The worker protocol this leader speaks (docs/worker-protocol.md).
PROTOCOL_VERSION = "1"
_PLACEHOLDER_RE = re.compile(r"\{(prompt|task|run|crewDir|python)\}")


@dataclass(frozen=True)
class Launch:
    """Everything needed to start one attempt of a task."""

    argv: list[str]
    cwd: Path
    env: dict[str, str]
    #: SHA-256 of the worker's secret (CREW_WORKER_TOKEN in `env`): the task records it.
    token_hash: str


def launch_for(
    run: Run,
    task: Task,
    agent: AgentConfig,
    paths: RunPaths,
    adapter: Adapter,
    *,
    attempt: int,
) -> Launch:
    """The command line, folder and environment of a task's worker (the adapter adds what its
    protocol needs, and what resumes the agent's own session).

    The worker acts as `task:<taskId>`, whatever session the leader's environment named: its
    own `crew` commands prove it with a secret made for this attempt, of which the task keeps
    only the hash.
    """
    token = ids.new_worker_token()
    values = {
        "prompt": task.prompt,
        "task": task.id,
        "run": run.run_id,
        "crewDir": run.crew_dir,
        "python": sys.executable,  # the interpreter that runs crew: it can import crew.worker
    }
    argv = [_PLACEHOLDER_RE.sub(lambda m: values[m.group(1)], arg) for arg in agent.command]
    argv = adapter.command(argv, task)
    crew_dir = Path(run.crew_dir)
    cwd = (crew_dir / agent.cwd) if agent.cwd is not None else paths.home.project_dir
    variables = {
        **os.environ,
        env.HOME.name: str(paths.home.root),  # a worker's own `crew` commands find its run
        **adapter.environment,
        **agent.env,
        env.RUN_ID.name: run.run_id,
        env.TASK_ID.name: task.id,
        env.ATTEMPT.name: str(attempt),
        env.STATE_DIR.name: str(paths.root),
        env.PROTOCOL.name: PROTOCOL_VERSION,
        env.SESSION.name: ids.worker_session(task.id),
        env.WORKER_TOKEN.name: token,
    }
    checkpoint = paths.checkpoint(task.id)
    if checkpoint.is_file():  # an earlier attempt saved its progress
        variables[env.CHECKPOINT.name] = str(checkpoint)
    else:
        variables.pop(env.CHECKPOINT.name, None)
    return Launch(argv, cwd, variables, ids.token_hash(token))


def start(
    launch: Launch, *, merge_stderr: bool, join: Callable[[], None] | None = None
) -> subprocess.Popen[bytes]:
    """Start a worker in its own session and process group, with pipes for its streams
    (stderr shares stdout's pipe with `merge_stderr`, keeping their exact order); `join` runs in
    the child before exec (it joins the worker's cgroup).

    Raises OSError (e.g. FileNotFoundError) when the command cannot be started.
    """
    faults.out_of_files_at("spawn")
    process = subprocess.Popen(
        launch.argv,
        cwd=launch.cwd,
        env=launch.env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT if merge_stderr else subprocess.PIPE,
        start_new_session=True,
        close_fds=True,
        preexec_fn=join,  # noqa: PLW1509  # writes to one open descriptor: no lock, no import
        bufsize=0,
    )
    for stream in (process.stdin, process.stdout, process.stderr):
        if stream is not None:
            os.set_blocking(stream.fileno(), False)
    return process


def failure(agent: AgentConfig, error: OSError | ValueError) -> str:
    """Why a worker could not be started, in words: `cannot start python3 in /x: No such file or
    directory: /x`, `cannot start sh: embedded null byte`."""
    program = agent.command[0] if agent.command else "the command"
    if isinstance(error, OSError):
        what = error.strerror or str(error) or type(error).__name__
        where = f": {error.filename}" if error.filename is not None else ""
        return f"cannot start {program!r}: {what}{where}"
    return f"cannot start {program!r}: {error}"
