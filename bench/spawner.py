"""Fresh processes timed from the outside: wall time from spawn to exit, and peak memory.

A command's cost as a user pays it is a fresh interpreter, start to exit. The benchmark process
itself is large (it has imported crew and built runs), and a child it forks inherits its memory
high-water mark in `ru_maxrss`; so every command is started by a small helper process instead
(SPAWNER, stdlib only, about 9 MB): it reads a job as a JSON line, takes `time.monotonic_ns()`,
starts the command with `posix_spawn`, reaps it with `wait4` and reports the times, the exit
code and the child's `ru_maxrss`. Its clock is CLOCK_MONOTONIC, the same a worker reads, so a
spawn time and a worker's read time can be subtracted.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.crews import PYTHON

SPAWNER = """\
import json, os, sys, time

for line in sys.stdin:
    job = json.loads(line)
    err = os.open(job["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    actions = [
        (os.POSIX_SPAWN_OPEN, 0, "/dev/null", os.O_RDONLY, 0),
        (os.POSIX_SPAWN_OPEN, 1, job["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600),
        (os.POSIX_SPAWN_DUP2, err, 2),
    ]
    os.chdir(job["cwd"])
    started = time.monotonic_ns()
    pid = os.posix_spawn(job["argv"][0], job["argv"], job["env"], file_actions=actions)
    _, status, usage = os.wait4(pid, 0)
    ended = time.monotonic_ns()
    os.close(err)
    report = {"code": os.waitstatus_to_exitcode(status), "startedNs": started,
              "endedNs": ended, "maxrssKB": usage.ru_maxrss}
    sys.stdout.write(json.dumps(report) + "\\n")
    sys.stdout.flush()
"""


@dataclass(frozen=True)
class Spawned:
    """One finished command: when it was started and reaped (monotonic ns), and its peak RSS."""

    code: int
    started_ns: int
    ended_ns: int
    maxrss_kb: int

    @property
    def seconds(self) -> float:
        return (self.ended_ns - self.started_ns) / 1e9


@dataclass(frozen=True)
class Command:
    """What to run: an argument list (argv[0] a path), its environment and folder."""

    argv: list[str]
    env: Mapping[str, str]
    cwd: Path


class Spawner:
    """The helper process, and the files a command's output goes to."""

    def __init__(self, folder: Path) -> None:
        script = folder / "spawner.py"
        script.write_text(SPAWNER)
        self._stdout, self._stderr = folder / "spawned.out", folder / "spawned.err"
        self._process = subprocess.Popen(
            [PYTHON, "-S", "-I", str(script)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def run(self, command: Command) -> Spawned:
        """Run `command` to its end; a non-zero exit is an error (no benchmark expects one)."""
        assert self._process.stdin is not None and self._process.stdout is not None
        job = {
            "argv": command.argv,
            "env": dict(command.env),
            "cwd": str(command.cwd),
            "stdout": str(self._stdout),
            "stderr": str(self._stderr),
        }
        self._process.stdin.write(json.dumps(job) + "\n")
        self._process.stdin.flush()
        line = self._process.stdout.readline()
        if not line:
            raise RuntimeError("the spawner exited")
        report = json.loads(line)
        done = Spawned(report["code"], report["startedNs"], report["endedNs"], report["maxrssKB"])
        if done.code != 0:
            raise RuntimeError(f"{command.argv} exited {done.code}: {self.stderr().strip()}")
        return done

    def stderr(self) -> str:
        """What the last command wrote to stderr: the reason it failed."""
        return self._stderr.read_text()

    def close(self) -> None:
        if self._process.stdin is not None:
            self._process.stdin.close()
        self._process.wait(timeout=10)


@contextlib.contextmanager
def spawner(folder: Path) -> Iterator[Spawner]:
    """A spawner for the block, stopped after it."""
    started = Spawner(folder)
    try:
        yield started
    finally:
        started.close()


def interleaved(
    spawn: Spawner,
    commands: Mapping[Any, Command],
    *,
    rounds: int,
    warmup: int = 1,
    setup: Mapping[Any, Callable[[], object]] | None = None,
) -> dict[Any, list[Spawned]]:
    """Each command once per round, in turn, round after round: drift hits all alike.

    `setup[key]`, if given, runs before each run of `commands[key]` (untimed: the spawner
    times only the command).
    """
    prepare = setup or {}
    results: dict[Any, list[Spawned]] = {key: [] for key in commands}
    for index in range(warmup + rounds):
        for key, command in commands.items():
            if key in prepare:
                prepare[key]()
            done = spawn.run(command)
            if index >= warmup:
                results[key].append(done)
    return results
