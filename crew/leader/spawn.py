"""The one place child processes are started — workers (command, placeholders, cwd, env, process
group) and `[[notify]]` commands."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

from crew import env, faults, ids
from crew.adapters.base import Adapter
from crew.config import PLACEHOLDERS, AgentConfig
from crew.models import Run, Task
from crew.paths import RunPaths
from crew.procs import cgroup
from crew.procs.cgroup import Cgroup

#: The worker protocol this leader speaks (docs/worker-protocol.md).
PROTOCOL_VERSION = "1"
_PLACEHOLDER_RE = re.compile(r"\{(" + "|".join(PLACEHOLDERS) + r")\}")


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
    crew_dir = paths.home.crew_dir(run.crew_dir)
    values = {
        "prompt": task.prompt,
        "task": task.id,
        "run": run.run_id,
        "crewDir": str(crew_dir),
        "python": sys.executable,  # the interpreter that runs crew: it can import crew.worker
    }
    argv = [_PLACEHOLDER_RE.sub(lambda m: values[m.group(1)], arg) for arg in agent.command]
    argv = adapter.command(argv, task)
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


#: Held while a process is started: a worker is started with the leader inside the worker's
#: cgroup for that moment, and no other thread's child may be born there.
_STARTING = threading.Lock()


def start(
    launch: Launch, *, merge_stderr: bool, group: Cgroup | None = None
) -> subprocess.Popen[bytes]:
    """Start a worker in its own session and process group, with pipes for its streams
    (stderr shares stdout's pipe with `merge_stderr`, keeping their exact order); with `group`,
    the worker's process is born in that cgroup, before its program runs.

    No Python runs between fork and exec, so Python can vfork: a fork of the leader, whose
    pages would all be mapped again, costs it about 3 ms a worker (docs/performance.md). A child
    is born in its parent's cgroup, so the leader moves itself into the worker's group for the
    moment of the start, and back: no shell or hook has to run in the child to join it.

    Raises OSError (e.g. FileNotFoundError) when the command cannot be started, or when the
    leader could not leave the group (the child is then killed: it never ran as a worker).
    """
    faults.out_of_files_at("spawn")

    def popen() -> subprocess.Popen[bytes]:
        return subprocess.Popen(
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

    with _STARTING:
        if group is None:
            process = popen()
        else:
            started: list[subprocess.Popen[bytes]] = []
            try:
                with cgroup.inside(group):
                    started.append(popen())
            except BaseException:
                for child in started:  # started, but the leader is stuck in its group
                    child.kill()
                    child.wait()
                raise
            process = started[0]
    for stream in (process.stdin, process.stdout, process.stderr):
        if stream is not None:
            os.set_blocking(stream.fileno(), False)
    return process


def start_command(
    argv: list[str], *, cwd: Path, env: dict[str, str], stdin: int, stdout: int, stderr: int
) -> subprocess.Popen[bytes]:
    """Start a command that is not a worker (a `[[notify]]` command, an agent's `--version`) in
    its own session and process group, with the given descriptors for its streams (files,
    pipes or DEVNULL). Raises OSError when it cannot start."""
    with _STARTING:
        return subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdin=stdin,
            stdout=stdout,
            stderr=stderr,
            start_new_session=True,
            close_fds=True,
        )


def failure(agent: AgentConfig, error: OSError | ValueError) -> str:
    """Why a worker could not be started, in words: `cannot start python3 in /x: No such file or
    directory: /x`, `cannot start sh: embedded null byte`."""
    program = agent.command[0] if agent.command else "the command"
    if isinstance(error, OSError):
        what = error.strerror or str(error) or type(error).__name__
        where = f": {error.filename}" if error.filename is not None else ""
        return f"cannot start {program!r}: {what}{where}"
    return f"cannot start {program!r}: {error}"
