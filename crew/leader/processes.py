"""The leader's worker processes (crew/leader/worker_process.py is one of them): starting them,
reading them, and stopping them with everything they started. One WorkerProcess per live
attempt; the leader's loop registers its descriptors with its selector and calls back here when
one is ready. A worker can be paused: its output and exit are not looked at until it is resumed
(the leader pauses a worker whose writes a fault holds back; the worker blocks once its pipe is
full, and its exit waits).
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import time
from collections.abc import Collection, Iterator
from typing import Protocol

from crew.adapters.base import Adapter, Reaction, Signal
from crew.executors.base import Executor
from crew.leader import monitors, signals, spawn
from crew.leader.worker_process import WorkerProcess
from crew.models import MailboxMessage
from crew.paths import RunPaths
from crew.procs import tree
from crew.store import logindex
from crew.store.files import open_fd

#: How long a worker gets between SIGTERM and SIGKILL, and to exit once its stdin is closed.
STOP_GRACE = 5.0
#: How long an agent interrupted in its own protocol gets before SIGTERM.
INTERRUPT_GRACE = 2.0


class Listener(Protocol):
    """What the leader is told about its workers."""

    def output(self, worker: WorkerProcess, lines: list[bytes]) -> None:
        """It printed something; `lines` are the stdout lines it completed (maybe none)."""

    def exited(self, worker: WorkerProcess, code: int) -> None:
        """It exited (its last output was given to `output` first)."""

    def stopping(self, worker: WorkerProcess, said: list[Signal]) -> None:
        """As the leader stops leading, it saved its progress (crew/leader/signals.py `saved`)."""

    def delivered(self, worker: WorkerProcess, messages: list[MailboxMessage]) -> None:
        """Its stdin took every byte of these messages."""

    def placed(self, worker: WorkerProcess) -> None:
        """A remote worker was placed: its node and pid there are known."""


class Workers:
    """The leader's live workers, by task, and their descriptors in the leader's selector
    (registered with `(kind, worker)` as data; the leader hands those keys to `handle`)."""

    def __init__(
        self, selector: selectors.BaseSelector, listener: Listener, executor: Executor
    ) -> None:
        self._selector = selector
        self._listener = listener
        self.executor = executor
        self._by_task: dict[str, WorkerProcess] = {}
        self._leftovers: list[tree.Leftovers] = []

    def __iter__(self) -> Iterator[WorkerProcess]:
        return iter(list(self._by_task.values()))

    def __len__(self) -> int:
        return len(self._by_task)

    def __contains__(self, task_id: object) -> bool:
        return task_id in self._by_task

    def running(self) -> Collection[str]:
        """The ids of the tasks with a worker (a view: no copy)."""
        return self._by_task.keys()

    def add(self, worker: WorkerProcess) -> None:
        """Watch a started worker's output and exit."""
        self._by_task[worker.task_id] = worker
        handle = worker.handle
        assert handle.stdout is not None
        self._selector.register(handle.stdout, selectors.EVENT_READ, ("out", worker))
        if handle.stderr is not None:
            self._selector.register(handle.stderr, selectors.EVENT_READ, ("err", worker))
        if handle.exit_fd is not None:
            self._selector.register(handle.exit_fd, selectors.EVENT_READ, ("exit", worker))

    def handle(self, kind: str, worker: WorkerProcess, fd: int) -> None:
        """A descriptor of `worker` is ready."""
        if kind == "exit":
            self._announced(worker)
        elif kind == "in":
            self.write(worker, b"")
        else:
            self._readable(worker, fd, parse=kind == "out")

    def pause(self, worker: WorkerProcess) -> None:
        """Stop looking at a worker's output and exit until `resume` (its stdin is still
        written: what is in flight completes)."""
        if worker.paused is not None:
            return
        keys = [
            key
            for key in self._selector.get_map().values()
            if key.data[1] is worker and key.data[0] != "in"
        ]
        for key in keys:
            self._selector.unregister(key.fileobj)
        worker.paused = [(key.fileobj, key.events, key.data) for key in keys]

    def resume(self, worker: WorkerProcess) -> None:
        """Look at a paused worker's output and exit again (what came meanwhile is there)."""
        held, worker.paused = worker.paused, None
        if held is None or self._by_task.get(worker.task_id) is not worker:
            return
        for fileobj, events, data in held:
            self._selector.register(fileobj, events, data)  # type: ignore[arg-type]  # as it was

    def write(self, worker: WorkerProcess, data: bytes) -> None:
        """Write to a worker's stdin (what the pipe cannot take now waits for it to drain)."""
        stdin = worker.handle.stdin
        if worker.write(data):
            if stdin is not None:
                self._unregister(stdin)
            delivered = worker.take_delivered()
            if delivered:
                self._listener.delivered(worker, delivered)
        elif stdin is not None and not worker.stdin_closed:
            with contextlib.suppress(KeyError, ValueError):
                self._selector.register(stdin, selectors.EVENT_WRITE, ("in", worker))

    def close_stdin(self, worker: WorkerProcess) -> None:
        """End of input: the worker should save and exit."""
        if worker.handle.stdin is not None:
            self._unregister(worker.handle.stdin)
        worker.close_stdin()

    def stop(self, worker: WorkerProcess, now: float, grace: float = STOP_GRACE) -> None:
        """Stop a worker: an agent is first interrupted in its own protocol and given a moment
        to wind down; then SIGTERM; then SIGKILL after `grace`. A worker already reaped is left
        alone (its pid may be another process's now)."""
        if worker.exited:
            return
        try:
            interrupt = worker.adapter.interrupt()
        except Exception:  # a broken adapter must not keep its worker from being stopped
            interrupt = Reaction()
        if interrupt.write and not worker.stdin_closed and not worker.exited:
            with contextlib.suppress(OSError):
                self.write(worker, interrupt.write)
            self.close_stdin(worker)
            worker.term_at = now + INTERRUPT_GRACE
            worker.kill_at = worker.term_at + grace
            return
        worker.signal(signal.SIGTERM)
        worker.kill_at = now + grace

    def escalate(self, now: float) -> None:
        """Send the SIGTERMs and SIGKILLs that fell due."""
        self._leftovers = [left for left in self._leftovers if not left.escalate(now)]
        for worker in self:
            if worker.term_at is not None and now >= worker.term_at:
                worker.term_at = None
                worker.signal(signal.SIGTERM)
            if worker.kill_at is not None and now >= worker.kill_at:
                worker.signal(signal.SIGKILL)
                worker.kill_at = now + 3600  # only once; its exit descriptor tells us when

    def deadlines(self) -> Iterator[float]:
        """When a timer of some worker falls due."""
        for worker in self:
            yield from (t for t in (worker.kill_at, worker.term_at, worker.close_at) if t)
        yield from (left.kill_at for left in self._leftovers)

    def stop_all(self, grace: float = STOP_GRACE) -> None:
        """Stop leading: workers get the end of their input, then SIGTERM, then SIGKILL. Their
        last output is logged, and the progress they save given to the listener's `stopping`."""
        for worker in self:
            self.resume(worker)
            self.close_stdin(worker)
        self._await_exits(time.monotonic() + grace)
        for worker in self:
            worker.signal(signal.SIGTERM)
        self._await_exits(time.monotonic() + grace)
        for worker in self:
            worker.signal(signal.SIGKILL)
            worker.wait()
            self.forget(worker)
            worker.close_log(flush=True)
            self._end_tree(worker, time.monotonic())
        self.settle()

    def settle(self) -> None:
        """Before the leader exits: what ended workers left running gets the rest of its grace
        to exit, then SIGKILL; their cgroups are removed."""
        for left in self._leftovers:
            while not left.killed and time.monotonic() < left.kill_at:
                if not tree.remaining(left.owner):
                    break
                time.sleep(0.05)
            left.finish()
        self._leftovers = []

    def abandon(self) -> None:
        """Fenced out: leave the workers to the new leader (their input ends)."""
        for worker in self:
            self.close_stdin(worker)

    def forget(self, worker: WorkerProcess) -> None:
        """Stop watching a worker and close what the leader holds of its process (its log is
        closed with `close_log`, once what it read is written)."""
        handle = worker.handle
        for stream in (handle.stdin, handle.stdout, handle.stderr):
            if stream is not None:
                self._unregister(stream)
        if handle.exit_fd is not None:
            self._unregister(handle.exit_fd)
        worker.close()
        self._by_task.pop(worker.task_id, None)

    def _readable(self, worker: WorkerProcess, fd: int, *, parse: bool) -> None:
        data = worker.read(fd)
        if data is None:
            self._unregister(fd)
            worker.open_streams -= 1
            if worker.open_streams == 0 and worker.handle.exit_fd is None:
                self._reap(worker)  # no pidfd on this system: end of output is our cue
            return
        if data:
            worker.clock.output(time.monotonic())
            self._listener.output(worker, worker.lines.feed(data) if parse else [])

    def _announced(self, worker: WorkerProcess) -> None:
        """Its exit descriptor is readable: it was placed on a node, or it has ended."""
        ended = worker.handle.settle()
        if worker.handle.node is not None and not worker.placed:
            worker.placed = True
            self._listener.placed(worker)
        if ended:
            self._reap(worker)

    def _reap(self, worker: WorkerProcess) -> None:
        code = worker.wait()
        lines = worker.drain(parse=True) + worker.lines.rest()
        if lines or worker.unlogged:
            self._listener.output(worker, lines)
        self.forget(worker)
        self._end_tree(worker, time.monotonic())
        self._listener.exited(worker, code)

    def _end_tree(self, worker: WorkerProcess, now: float) -> None:
        """A worker exited: what it left running is the task's no longer (SIGTERM now, SIGKILL
        after the grace)."""
        left = worker.handle.leftovers(now)
        if left is not None:
            self._leftovers.append(left)

    def _await_exits(self, deadline: float) -> None:
        """Wait for workers to exit, logging their last output and giving the progress it saves
        to the listener's `stopping`."""
        while len(self) and time.monotonic() < deadline:
            for key, _ in self._selector.select(max(0.0, deadline - time.monotonic())):
                kind, worker = key.data
                if kind in {"out", "err"}:
                    data = worker.read(key.fd)
                    if data is None:
                        self._unregister(key.fd)
                    elif data and kind == "out":
                        self._last_lines(worker, worker.lines.feed(data))
                elif kind == "exit" and worker.handle.settle():
                    self._stopped(worker)
                if worker is not None and worker.log_fd >= 0:
                    with contextlib.suppress(OSError):  # stopping: the log gets what it can
                        worker.flush_log()
            for worker in self:
                if worker.handle.exit_fd is None and worker.handle.poll() is not None:
                    self._stopped(worker)

    def _stopped(self, worker: WorkerProcess) -> None:
        """A worker exited as the leader stops: its last lines told, its log closed."""
        worker.wait()
        self._last_lines(worker, worker.drain(parse=True) + worker.lines.rest())
        self.forget(worker)
        worker.close_log(flush=True)
        self._end_tree(worker, time.monotonic())

    def _last_lines(self, worker: WorkerProcess, lines: list[bytes]) -> None:
        if said := signals.saved(worker.adapter, lines):
            self._listener.stopping(worker, said)

    def _unregister(self, target: int | object) -> None:
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(target)  # type: ignore[arg-type]  # a file or a descriptor


def start_worker(
    executor: Executor,
    launch: spawn.Launch,
    adapter: Adapter,
    paths: RunPaths,
    *,
    task_id: str,
    attempt: int,
    now: float,
    resources: dict[str, float],
) -> WorkerProcess:
    """Start one attempt's worker (OSError when its command cannot be started, ValueError when
    a value cannot be passed to it)."""
    log_fd = open_fd(paths.log(task_id), os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    index_fd, logged = logindex.open_index(paths.log(task_id), log_fd)
    try:
        handle = executor.start(
            launch,
            merge_stderr=adapter.merge_stderr,
            task_id=task_id,
            attempt=attempt,
            resources=resources,
        )
    except BaseException:
        os.close(log_fd)
        if index_fd >= 0:
            os.close(index_fd)
        raise
    return WorkerProcess(
        task_id,
        attempt,
        handle,
        adapter,
        log_fd,
        monitors.Clock(started=now, last_output=now),
        open_streams=1 if handle.stderr is None else 2,
        index_fd=index_fd,
        logged=logged,
    )


def describe_exit(code: int) -> str:
    """How a worker ended, in words: `exited with code 1`, `killed by SIGKILL`."""
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"killed by {name}"
    return f"exited with code {code}"
