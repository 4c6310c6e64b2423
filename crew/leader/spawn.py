"""The one place child processes are started — workers (command, placeholders, cwd, env, process
group) and `[[notify]]` commands."""

from __future__ import annotations

import errno
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from crew import env, faults, ids
from crew.adapters.base import Adapter
from crew.config import PLACEHOLDERS, AgentConfig
from crew.models import Run, Task
from crew.paths import RunPaths

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


#: Run by /bin/sh in a worker's process before the worker's program: it moves itself into the
#: worker's cgroup (writing 0 to `cgroup.procs` moves the writer), then becomes the program. No
#: process exists between the two, so nothing the worker starts is ever outside the group.
SHELL = "/bin/sh"
_JOIN_THEN_EXEC = 'echo 0 > "$0" 2>/dev/null; exec "$@"'


def start(
    launch: Launch, *, merge_stderr: bool, join: Path | None = None
) -> subprocess.Popen[bytes]:
    """Start a worker in its own session and process group, with pipes for its streams
    (stderr shares stdout's pipe with `merge_stderr`, keeping their exact order); with `join`
    (a cgroup's `cgroup.procs`), the worker's process joins that group before its program runs.

    No Python runs between fork and exec, so Python can vfork: a fork of the leader, whose
    pages would all be mapped again, costs it about 3 ms a worker (docs/performance.md). To
    join a group first, the process execs /bin/sh, which joins and execs the program; the
    program is found first, as Popen would find it, so a missing one fails here, as before.

    Raises OSError (e.g. FileNotFoundError) when the command cannot be started.
    """
    faults.out_of_files_at("spawn")
    argv = launch.argv
    if join is not None and os.access(SHELL, os.X_OK):
        argv = [SHELL, "-c", _JOIN_THEN_EXEC, str(join), executable(launch), *argv[1:]]
    process = subprocess.Popen(
        argv,
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


def start_command(
    argv: list[str], *, cwd: Path, env: dict[str, str], stdin: int, stderr: int
) -> subprocess.Popen[bytes]:
    """Start a command that is not a worker (a `[[notify]]` command) in its own session and
    process group, reading `stdin` and writing `stderr` (descriptors of files: no pipe the
    leader would have to tend), its stdout discarded. Raises OSError when it cannot start."""
    return subprocess.Popen(
        argv,
        cwd=cwd,
        env=env,
        stdin=stdin,
        stdout=subprocess.DEVNULL,
        stderr=stderr,
        start_new_session=True,
        close_fds=True,
    )


def executable(launch: Launch) -> str:
    """The program `launch` runs, found as Popen finds it (a name with a `/` from the worker's
    folder, else on the worker's PATH); FileNotFoundError or PermissionError as Popen raises
    them when it cannot be run."""
    name = launch.argv[0]
    if "/" in name:
        candidates = [os.path.join(launch.cwd, name)]
    else:
        folders = os.get_exec_path(launch.env)
        candidates = [os.path.join(folder, name) for folder in folders]
    denied = False
    for path in candidates:
        if os.path.isfile(path):
            if os.access(path, os.X_OK):
                return path
            denied = True
    if denied:
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), name)
    raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), name)


def failure(agent: AgentConfig, error: OSError | ValueError) -> str:
    """Why a worker could not be started, in words: `cannot start python3 in /x: No such file or
    directory: /x`, `cannot start sh: embedded null byte`."""
    program = agent.command[0] if agent.command else "the command"
    if isinstance(error, OSError):
        what = error.strerror or str(error) or type(error).__name__
        where = f": {error.filename}" if error.filename is not None else ""
        return f"cannot start {program!r}: {what}{where}"
    return f"cannot start {program!r}: {error}"
