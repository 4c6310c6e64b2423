"""Real crews for the benchmarks: homes in temp folders, generated workers, leaders that stop.

Every leader a benchmark starts is stopped in a `finally`: the run is cancelled (which stops its
workers), then the leader is given a few seconds to exit before it is terminated, then killed.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from crew import verbs
from crew.errors import CrewError
from crew.paths import Home
from crew.registry import TaskStatus
from crew.store.runstore import RunStore

SESSION = "bench"
PYTHON = sys.executable

#: Forwards new lines of mailbox files to stdout, checking them every INTERVAL seconds: what an
#: orchestrator that polls does. `poller.py INTERVAL FILE...`
POLLER = """\
import os, sys, time

interval = float(sys.argv[1])
offsets = {path: 0 for path in sys.argv[2:]}
out = sys.stdout.buffer
while True:
    time.sleep(interval)
    for path, offset in offsets.items():
        try:
            size = os.stat(path).st_size
        except FileNotFoundError:
            continue
        if size > offset:
            with open(path, "rb") as handle:
                handle.seek(offset)
                data = handle.read()
            end = data.rfind(b"\\n") + 1
            offsets[path] = offset + end
            out.write(data[:end])
            out.flush()
"""


@contextlib.contextmanager
def environment(**values: str) -> Iterator[None]:
    """Set environment variables of this process for the block (library calls read them)."""
    previous = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in previous.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def crew_env(home: Home) -> dict[str, str]:
    """The environment of every crew process a benchmark starts: no fsync, one session."""
    return {
        **os.environ,
        "CREW_FSYNC": "0",
        "CREW_SESSION_ID": SESSION,
        "CREW_HOME": str(home.root),
    }


#: The `crew` command as a user types it: the console script installed beside this interpreter
#: (`python -m crew` would cost every fresh process runpy's imports on top, ~2% of a send).
CREW = Path(PYTHON).with_name("crew")


def crew_argv(*args: str) -> list[str]:
    """The real `crew` command, run by this interpreter."""
    if CREW.is_file():
        return [str(CREW), *args]
    return [PYTHON, "-m", "crew", *args]


def new_home(folder: Path) -> Home:
    """An empty crew home in `folder`."""
    home = Home(folder / ".crew")
    home.root.mkdir(parents=True)
    return home


def write_script(folder: Path, name: str, source: str) -> Path:
    path = folder / name
    path.write_text(source)
    return path


def write_crew(
    folder: Path, argv: list[str], *, tasks: int, max_parallel: int = 50, name: str = "crew.toml"
) -> Path:
    """A crew.toml with one agent `w` running `argv`, and tasks t1…tN."""
    lines = [
        "[crew]",
        'name = "bench"',
        f"maxParallel = {max_parallel}",
        "",
        "[agents.w]",
        f"command = {json.dumps(argv)}",
    ]
    for index in range(1, tasks + 1):
        lines += ["", "[[tasks]]", f'id = "t{index}"', 'agent = "w"', f'prompt = "task {index}"']
    path = folder / name
    path.write_text("\n".join(lines) + "\n")
    return path


def new_run(home: Home, known: frozenset[str] = frozenset(), *, timeout: float = 30.0) -> RunStore:
    """The newest run of a home that is not one of `known`, once it has been created."""
    deadline = time.monotonic() + timeout
    while not (ids := [i for i in home.run_ids() if i not in known]):
        if time.monotonic() > deadline:
            raise TimeoutError(f"no new run appeared in {home.runs_dir}")
        time.sleep(0.02)
    return RunStore(home.run(ids[-1]))


def wait_all(store: RunStore, status: TaskStatus, *, timeout: float = 120.0) -> None:
    """Poll until every task of the run has `status` (setup only: never inside a timing)."""
    deadline = time.monotonic() + timeout
    while True:
        tasks = store.state().task_list()
        if all(t.status is status for t in tasks):
            return
        if time.monotonic() > deadline:
            counts = {str(t.status) for t in tasks}
            raise TimeoutError(f"tasks of {store.run_id} still {counts}, not all {status}")
        time.sleep(0.05)


def process_gone(pid: int) -> bool:
    """True once `pid` has exited (a zombie waiting for its parent counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
    except FileNotFoundError:
        return True
    return stat[stat.rfind(b")") + 2 :].startswith(b"Z")


def cpu_ns(pid: int) -> int:
    """Nanoseconds on a CPU so far, all threads of a live process: the first field of each
    thread's /proc schedstat (the scheduler's own count, not 10 ms clock ticks)."""
    total = 0
    for thread in os.listdir(f"/proc/{pid}/task"):
        with (
            contextlib.suppress(FileNotFoundError),
            open(f"/proc/{pid}/task/{thread}/schedstat") as f,
        ):
            total += int(f.read().split()[0])
    return total


def final_cpu_seconds(process: subprocess.Popen[bytes], *, timeout: float = 600.0) -> float:
    """Wait for a child to exit and return its own CPU time (user + system, every thread, not
    its children's), read from /proc while it is a zombie; then reap it."""
    deadline = time.monotonic() + timeout
    while not process_gone(process.pid):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{process.args!r} still running after {timeout:g}s")
        time.sleep(0.005)
    with open(f"/proc/{process.pid}/stat", "rb") as handle:
        stat = handle.read()
    fields = stat[stat.rfind(b")") + 2 :].split()
    seconds = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    process.wait()
    return seconds


def stop_run(store: RunStore | None, pid: int, *, child: subprocess.Popen[bytes] | None) -> None:
    """Cancel the run (its workers stop), then make sure its leader `pid` has exited."""
    if store is not None:
        with contextlib.suppress(CrewError, OSError):
            verbs.cancel(store, session=SESSION, grace=2.0)
    for sig in (None, signal.SIGTERM, signal.SIGKILL):
        if sig is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline:
            if child is not None and child.poll() is not None:
                return
            if child is None and process_gone(pid):
                return
            time.sleep(0.02)


@dataclass
class Detached:
    """A run led by a background leader (`crew run --detach`)."""

    store: RunStore
    pid: int


@contextlib.contextmanager
def detached_run(home: Home, crew_toml: Path) -> Iterator[Detached]:
    """`crew run --detach --json`; the run is cancelled and its leader gone after the block."""
    done = subprocess.run(
        crew_argv("run", str(crew_toml), "--detach", "--json"),
        env=crew_env(home),
        cwd=crew_toml.parent,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"crew run --detach failed: {done.stderr.strip()}")
    started = json.loads(done.stdout)
    run = Detached(RunStore.open(home, started["runId"]), int(started["pid"]))
    try:
        yield run
    finally:
        stop_run(run.store, run.pid, child=None)


@contextlib.contextmanager
def foreground_run(home: Home, crew_toml: Path) -> Iterator[tuple[RunStore, int]]:
    """`crew run --no-input` as a child process; yields its run and the leader's pid."""
    log = crew_toml.parent / "leader.out"
    known = frozenset(home.run_ids())
    with log.open("ab") as out:
        child = subprocess.Popen(
            crew_argv("run", str(crew_toml), "--no-input"),
            env=crew_env(home),
            cwd=crew_toml.parent,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    store: RunStore | None = None
    try:
        store = new_run(home, known)
        yield store, child.pid
    finally:
        stop_run(store, child.pid, child=child)


class Fifo:
    """A named pipe that workers write lines to and the benchmark reads, with a timeout.

    It is held open for writing too, so the reader never sees end of file between writers.
    """

    def __init__(self, path: Path) -> None:
        os.mkfifo(path)
        self.path = path
        self._fd = os.open(path, os.O_RDWR | os.O_NONBLOCK)
        self._buffer = b""

    def readline(self, timeout: float = 10.0) -> str:
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"nothing arrived on {self.path} within {timeout:g}s")
            ready, _, _ = select.select([self._fd], [], [], remaining)
            if ready:
                with contextlib.suppress(BlockingIOError):
                    self._buffer += os.read(self._fd, 65536)
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line.decode()

    def close(self) -> None:
        os.close(self._fd)


def kill(process: subprocess.Popen[bytes]) -> None:
    """Stop a helper process this benchmark started, and reap it."""
    if process.poll() is None:
        process.kill()
    process.wait()
