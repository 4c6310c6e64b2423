"""The versions of the agent CLIs a run uses (pi, Claude Code, Codex): `<command> --version`, once
per agent and leader, run in a thread because a Node CLI takes a second to start; each task of
the agent records it (`agentVersion`, event `agent.version`), so a report names what ran.

Only the agent protocols are asked: any other program might take `--version` for work to do. A
CLI that gives no answer in time, or fails, leaves the version unknown; the run goes on.
"""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Callable
from pathlib import Path

from crew import env
from crew.domain import tasks
from crew.leader import spawn
from crew.leader.spawn import Launch
from crew.leader.view import RunView
from crew.models import Task
from crew.registry import AgentProtocol
from crew.text import first_line

#: The protocols of the agent CLIs, which all answer `--version`.
ASKED = frozenset({AgentProtocol.PI, AgentProtocol.CLAUDE_CODE, AgentProtocol.CODEX})
#: How long a CLI gets to say its version.
PATIENCE = 60.0
#: The longest version text kept.
MAX_VERSION = 100


class Versions:
    """Each agent's version as its CLI says it, found in the background."""

    def __init__(self, wake: Callable[[], None]) -> None:
        self._wake = wake
        self._lock = threading.Lock()
        #: By agent name: its version, once found.
        self._known: dict[str, str] = {}
        #: By agent name, once asked: the tasks started while it was asked (None once answered,
        #: or when it could not be told).
        self._waiting: dict[str, list[str] | None] = {}
        #: Agents whose version was found and is not yet recorded on those tasks.
        self._found: list[str] = []

    def of(self, task: Task, protocol: AgentProtocol, launch: Launch) -> str | None:
        """The version of the task's agent, if known; the first time, it is asked for (in the
        background, with the command, folder and environment of the task's worker `launch`), and
        recorded on the tasks it started meanwhile once it is known."""
        if protocol not in ASKED:
            return None
        agent = task.agent
        with self._lock:
            if agent in self._known:
                return self._known[agent]
            if agent in self._waiting:  # already asked
                waiting = self._waiting[agent]
                if waiting is not None:
                    waiting.append(task.id)
                return None
            self._waiting[agent] = [task.id]
        # Not a worker: none of crew's variables (no secret, and no task's marks, which would
        # make it one of the task's processes for `crew cancel` and the leader).
        quiet = {k: v for k, v in launch.env.items() if k not in env.FOR_WORKERS}
        args = (agent, launch.argv[0], launch.cwd, quiet)
        threading.Thread(target=self._ask, args=args, name=f"version-{agent}", daemon=True).start()
        return None

    def record(self, view: RunView) -> None:
        """Record the versions found since the last call on the tasks started meanwhile."""
        with self._lock:
            found = [(self._known[a], self._waiting[a] or []) for a in self._found]
            self._waiting.update(dict.fromkeys(self._found))
            self._found.clear()
        if not found:
            return
        with view.change() as txn:
            for version, started in found:
                for task_id in started:
                    tasks.remember_version(txn, task_id, version)

    def _ask(self, agent: str, program: str, cwd: Path, variables: dict[str, str]) -> None:
        version = _version_of(program, cwd, variables)
        with self._lock:
            if version is None:
                self._waiting[agent] = None  # unknown: no task waits for it any longer
                return
            self._known[agent] = version
            self._found.append(agent)
        self._wake()


def _version_of(program: str, cwd: Path, variables: dict[str, str]) -> str | None:
    """The first line `program --version` prints (None if it fails or says nothing)."""
    try:
        process = spawn.start_command(
            [program, "--version"],
            cwd=cwd,
            env=variables,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
    except OSError:
        return None
    try:
        out, _ = process.communicate(timeout=PATIENCE)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        return None
    if process.returncode != 0:
        return None
    return first_line(out.decode("utf-8", errors="replace"), MAX_VERSION) or None
