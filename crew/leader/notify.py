"""`[[notify]]`: the commands the leader runs for the events of its run, in the background.

At the end of each turn the leader hands `Notifier.notice` its view of the run; the notifier
reads the events appended since (whoever wrote them: the leader, or a command such as `crew
cancel`) and, for each `[[notify]]` entry whose `on` names an event's type, queues a job: the
entry's command, run with the event as one JSON document on its stdin. The jobs run on a few
threads of their own (at most MAX_RUNNING commands at once, the rest waiting in order), so a slow
or hanging command never holds up the loop, which only queues. A command's stdin and stderr are
files, not pipes: nothing can block on them, and a command that never reads its stdin still
gets it. What went wrong — a command that exited non-zero, ran past its timeout (its process
group is killed), could not be started, or was never run because the queue was full or the
leader stopped first — comes back to the loop, which records it as a `notify.failed` event in
its own transaction. A failed notification is never retried, and never fails the run.

Each event is notified at most once per leader: the notifier remembers the last seq it handled.
A leader notifies the events from its own claim on (its `leader.started`, and what a takeover
recorded); the run's first leader also the events before it (`run.created`). After a resume the
events a previous leader handled are not notified again: its commands ran then, or died with it.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import tempfile
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_for
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from crew import clock, env
from crew.leader import spawn
from crew.leader.processes import describe_exit
from crew.leader.view import RunView
from crew.models import Event, Run
from crew.notify_config import NotifyConfig
from crew.paths import RunPaths
from crew.procs import signal_group
from crew.registry import EventType
from crew.store import eventlog, jsonl
from crew.text import json_safe, short

#: Commands run at once; the others wait their turn, in the order of their events.
MAX_RUNNING = 4
#: Commands waiting for a turn; beyond it a notification is not run, and that is recorded.
MAX_QUEUED = 256
#: The end of a failed command's stderr kept in its `notify.failed` event.
STDERR_LINES = 10
STDERR_BYTES = 4096
#: The leader's own variables a command does not inherit: they would make it pass for a worker.
_WORKER_ONLY = env.FOR_WORKERS - {env.SESSION.name}


@dataclass(frozen=True)
class Job:
    """One notification: the `[[notify]]` entry (its index and config) and the event."""

    index: int
    config: NotifyConfig
    event: Event


@dataclass(frozen=True)
class Failure:
    """A notification that failed (`why`, in words), with the details its event records."""

    job: Job
    why: str
    details: dict[str, Any] = field(default_factory=dict)


class Notifier:
    """Runs a run's `[[notify]]` commands for the events its leader sees."""

    def __init__(
        self,
        paths: RunPaths,
        run: Run,
        epoch: int,
        wake: Callable[[], None],
        *,
        events_from: int = 0,
    ) -> None:
        """`events_from`: where in events.jsonl this leader's events may begin (its claim's,
        for a resumed run): what comes before is not read."""
        self.paths = paths
        self.run_id = run.run_id
        self._wake = wake
        self._rules = [(i, rule, rule.events()) for i, rule in enumerate(run.config.notify)]
        self._follower = eventlog.Follower(paths.events, offset=events_from)
        #: Events up to this seq are not this leader's to notify (or were notified already).
        self._after = _claimed_after(paths.events, epoch) if self._rules else 0
        self._pool: ThreadPoolExecutor | None = None
        #: The jobs given to the threads and not known to be done yet.
        self._jobs: list[tuple[Job, Future[None]]] = []
        self._failures: list[Failure] = []
        self._lock = threading.Lock()

    def notice(self, view: RunView) -> None:
        """Queue the commands for the events appended since the last call; record the
        notifications that failed meanwhile."""
        if not self._rules:
            return
        for event in self._follower.poll().records:
            if event.seq <= self._after:
                continue  # before this leader, or read again after a repair of the log
            self._after = event.seq
            for index, rule, events in self._rules:
                if event.type in events:
                    self._queue(Job(index, rule, event))
        self._record(view)

    def close(self, view: RunView) -> None:
        """At the leader's end: the commands queued and running are given their time (the
        queue at most the longest timeout, each command its own), then what failed is
        recorded; what never got to run is recorded as not run."""
        if self._pool is None:
            return
        longest = max(rule.timeout for _, rule, _ in self._rules)
        wait_for([future for _, future in self._jobs], timeout=longest)
        for job, future in self._jobs:
            if future.cancel():
                self._failed(job, "not run: the leader stopped first")
        self._pool.shutdown(wait=True)
        with contextlib.suppress(Exception):  # a leader fenced out, a full disk: nothing to do
            self._record(view)

    # ------------------------------------------------------------------ the loop's side

    def _queue(self, job: Job) -> None:
        self._jobs = [(j, future) for j, future in self._jobs if not future.done()]
        if len(self._jobs) >= MAX_RUNNING + MAX_QUEUED:
            self._failed(job, f"not run: {len(self._jobs)} notifications were already waiting")
            return
        if self._pool is None:
            self._pool = ThreadPoolExecutor(MAX_RUNNING, thread_name_prefix="crew-notify")
        self._jobs.append((job, self._pool.submit(self._run, job)))

    def _record(self, view: RunView) -> None:
        """Record the failed notifications as `notify.failed` events (kept for the next turn
        if the write fails)."""
        with self._lock:
            failures = list(self._failures)
        if not failures:
            return
        with view.change() as txn:
            for failure in failures:
                job = failure.job
                program = os.path.basename(job.config.command[0])
                said = failure.details.get("stderr", "").rpartition("\n")[2]
                said = f" ({short(said, 200)})" if said.strip() else ""
                txn.record(
                    EventType.NOTIFY_FAILED,
                    task_id=job.event.task_id,
                    message=f"notify[{job.index}] ({program}) for event #{job.event.seq} "
                    f"{job.event.type} failed: {failure.why}{said}",
                    data={
                        "notify": job.index,
                        "command": job.config.command,
                        "event": {"id": job.event.id, "seq": job.event.seq,
                                  "type": job.event.type.value},
                        "reason": failure.why,
                        **failure.details,
                    },
                )  # fmt: skip
        with self._lock:
            del self._failures[: len(failures)]

    def _failed(self, job: Job, why: str, **details: Any) -> None:
        with self._lock:
            self._failures.append(Failure(job, why, details))
        self._wake()

    # ------------------------------------------------------------------ the threads' side

    def _run(self, job: Job) -> None:
        """Run one command to its end or its timeout; a failure goes back to the loop (crew's
        own errors too: raised in a thread, they would be lost)."""
        ready = False
        try:
            with tempfile.TemporaryFile() as stdin, tempfile.TemporaryFile() as stderr:
                stdin.write(event_document(job.event).encode())
                stdin.flush()
                stdin.seek(0)
                ready = True
                self._run_with(job, stdin, stderr)
        except Exception as error:  # before `ready`: no temporary file (a full disk)
            what = short(str(error) or type(error).__name__, 200)
            self._failed(job, f"{'crew could not follow it' if ready else 'not run'}: {what}")

    def _run_with(self, job: Job, stdin: IO[bytes], stderr: IO[bytes]) -> None:
        argv, timeout = job.config.command, job.config.timeout
        try:
            process = spawn.start_command(
                argv,
                cwd=self.paths.home.project_dir,
                env=self._environment(job.event),
                stdin=stdin.fileno(),
                stdout=subprocess.DEVNULL,
                stderr=stderr.fileno(),
            )
        except OSError as error:
            what = error.strerror or str(error) or type(error).__name__
            self._failed(job, f"cannot start {argv[0]!r}: {what}")
            return
        code = exit_within(process, timeout)
        timed_out = code is None
        if code is None:
            signal_group(process.pid, signal.SIGKILL)  # not reaped yet: the pid is still its
            code = process.wait()
        if code == 0 and not timed_out:
            return
        why = (
            f"timed out after {clock.format_duration(timeout)}: killed"
            if timed_out
            else describe_exit(code)
        )
        self._failed(job, why, exitCode=code, timedOut=timed_out, stderr=stderr_tail(stderr))

    def _environment(self, event: Event) -> dict[str, str]:
        variables = {k: v for k, v in os.environ.items() if k not in _WORKER_ONLY}
        variables[env.HOME.name] = str(self.paths.home.root)
        variables[env.RUN_ID.name] = self.run_id
        variables[env.STATE_DIR.name] = str(self.paths.root)
        variables[env.EVENT_TYPE.name] = event.type.value
        if event.task_id is not None:
            variables[env.TASK_ID.name] = event.task_id
        return variables


def exit_within(process: subprocess.Popen[bytes], timeout: float) -> int | None:
    """The process's exit code (reaped) once it exits, or None if it still runs after `timeout`
    seconds. Woken by the exit itself through a pidfd; Popen's own wait, which polls, only
    where the system has no pidfds."""
    try:
        pidfd = os.pidfd_open(process.pid)
    except (OSError, AttributeError):
        try:
            return process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None
    try:
        exited, _, _ = select.select([pidfd], [], [], timeout)
    finally:
        os.close(pidfd)
    return process.wait() if exited else None


def event_document(event: Event) -> str:
    """The event as a notify command reads it: the line `crew events --json` prints for it."""
    return json_safe(event.model_dump_json(exclude_none=True)) + "\n"


def stderr_tail(stderr: IO[bytes]) -> str:
    """The last lines a command wrote to its stderr (at most STDERR_LINES, STDERR_BYTES)."""
    size = stderr.seek(0, os.SEEK_END)
    stderr.seek(max(0, size - STDERR_BYTES))
    text = stderr.read().decode("utf-8", errors="replace")
    return "\n".join(text.splitlines()[-STDERR_LINES:])


def _claimed_after(events: Path, epoch: int) -> int:
    """The seq just before this leader's claim (its `leader.started`); 0 for the run's first
    leader, which notifies the run's creation too."""
    if epoch <= 1:
        return 0
    for event in jsonl.read_backwards(events, Event):
        if event.type is EventType.LEADER_STARTED:
            return event.seq - 1
    return 0
