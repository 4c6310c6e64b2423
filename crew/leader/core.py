"""The leader: starts workers, reads what they print, delivers what is written to them, watches
over them, and ends when every task has ended.

One thread, one `select` loop over every worker's stdout, stderr and exit descriptor, the run's
folders (file events) and a wake-up pipe; timers (heartbeat, monitors, timeouts) bound how long
it sleeps. Nothing polls on a timer while nothing happens.

Every write goes through a transaction fenced by the leader's epoch: a leader that finds a newer
epoch in the manifest (someone resumed the run over it) stops at once, writing nothing.
"""

from __future__ import annotations

import contextlib
import errno
import os
import selectors
import signal
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from crew import clock, faults, ids, ops
from crew.adapters import (
    Adapter,
    AgentError,
    Reaction,
    Signal,
    TurnEnd,
    Withdrawn,
    adapter_for,
)
from crew.errors import CrewError, StaleLeader, StoreError
from crew.follow import Watcher, watch_folders
from crew.leader import monitors, spawn
from crew.lease import beat, release
from crew.models import Event, LeaderInfo, MailboxMessage, SupervisorContact, Task
from crew.protocol import Ack, Contact, Decision, Malformed, Report
from crew.registry import (
    LIVE_TASK_STATUSES,
    Direction,
    EventType,
    MessageKind,
    MessageStatus,
    Priority,
    RunStatus,
    TaskStatus,
)
from crew.run import RunState, RunStore, Txn
from crew.store import jsonl
from crew.store.files import FILE_MODE, write_all

HEARTBEAT = 1.0
STOP_GRACE = 5.0
#: How long an agent interrupted in its own protocol gets before SIGTERM.
INTERRUPT_GRACE = 2.0
_READ = 65536
_MAX_LINE = 1024 * 1024
_MALFORMED_EVENTS = 10  # per attempt; after that they are only counted
SUPERSEDED = "superseded: worker restarted"
#: Keys of MailboxMessage.data the leader sets: the attempt a message was delivered to, and the
#: message a carried-over copy was made from.
DATA_ATTEMPT = "attempt"
DATA_CARRIED = "carriedFrom"
#: What a new attempt is given again of what the last one received.
_CARRIED = {
    MessageKind.STEER: EventType.AGENT_STEERED,
    MessageKind.FOLLOW_UP: EventType.AGENT_FOLLOWED_UP,
}


class Outcome:
    """How a leader's run ended, as an exit code."""

    COMPLETED = 0
    FAILED = 1
    TIMED_OUT = 3
    FENCED = 4
    INTERRUPTED = 130


@dataclass
class Worker:
    """A live worker process of this leader."""

    task_id: str
    attempt: int
    process: Any  # subprocess.Popen[bytes]
    adapter: Adapter
    log_fd: int
    clock: monitors.Clock
    pidfd: int | None = None
    line: bytearray = field(default_factory=bytearray)
    to_write: bytearray = field(default_factory=bytearray)
    #: Messages whose frames are in `to_write`: delivered once it drains.
    in_flight: list[MailboxMessage] = field(default_factory=list)
    open_streams: int = 2
    exit_code: int | None = None
    kill_at: float | None = None
    malformed: int = 0
    stdin_closed: bool = False
    #: The agent's last turn ended (adapters that speak in turns) and whether it failed.
    turn_ended: bool = False
    turn_error: str | None = None
    fatal: bool = False
    #: When an idle agent's stdin gets closed (agent `keepOpen`), once its turn has ended.
    close_at: float | None = None
    #: When an interrupted agent gets SIGTERM (it was given a moment to wind down first).
    term_at: float | None = None

    @property
    def pid(self) -> int:
        return int(self.process.pid)

    @property
    def exited(self) -> bool:
        return self.exit_code is not None


def requeue(txn: Txn, task: Task, why: str, **changes: Any) -> Task:
    """Put a live task back in the queue for a new attempt (or fail it when attempts are spent).

    Messages still pending for the old attempt: steers and follow-ups stay for the new one;
    answers and nudges are rejected (an answer belongs to a question the old attempt asked).
    The steers and follow-ups the old attempt was given are sent again to the new one, which
    starts over and must not lose them.
    """
    retrying = task.attempt < task.max_attempts
    for message in _messages_to(txn, task.id):
        if message.status is MessageStatus.PENDING:
            if message.kind in {MessageKind.RESPOND, MessageKind.NUDGE}:
                txn.post(
                    message.rejected(SUPERSEDED, txn.at),
                    EventType.MAILBOX_REJECTED,
                    message=f"rejected {message.kind} {message.id} to {task.id}: {SUPERSEDED}",
                )
        elif (
            retrying
            and message.kind in _CARRIED
            and (message.data or {}).get(DATA_ATTEMPT) == task.attempt
        ):
            copy = message.model_copy(
                update={
                    "id": ids.new_message_id(),
                    "status": MessageStatus.PENDING,
                    "sent_at": txn.at,
                    "delivered_at": None,
                    "acknowledged_at": None,
                    "data": {
                        **{k: v for k, v in (message.data or {}).items() if k != DATA_ATTEMPT},
                        DATA_CARRIED: message.id,
                    },
                }
            )
            txn.post(
                copy,
                _CARRIED[message.kind],
                message=f"{message.kind} {message.id} sent again to {task.id}'s next attempt",
            )
    if task.max_attempts > 1:
        why = f"{why} (attempt {task.attempt} of {task.max_attempts})"
    if task.attempt >= task.max_attempts:
        return txn.transition(
            task.id,
            TaskStatus.FAILED,
            message=f"task {task.id} failed: {why}",
            contact=None,
            waiting_since=None,
            error=why,
            **{"ended_at": txn.at, **changes},
        )
    return txn.transition(
        task.id,
        TaskStatus.QUEUED,
        event_type=EventType.TASK_RETRIED,
        message=f"task {task.id} queued for another attempt: {why}",
        contact=None,
        waiting_since=None,
        nudges=0,
        error=why,
        **changes,
    )


def _messages_to(txn: Txn, task_id: str) -> list[MailboxMessage]:
    return [
        m
        for box in (MessageKind.RESPOND.box, MessageKind.STEER.box)
        for m in list(txn.messages(box).values())
        if m.task_id == task_id
    ]


class Leader:
    """Leads one run until every task has ended (or it is stopped, or fenced out)."""

    def __init__(
        self,
        store: RunStore,
        lease: LeaderInfo,
        *,
        home_parent: Path,
        max_parallel: int | None = None,
        run_timeout: float | None = None,
        on_events: Callable[[list[Event]], None] | None = None,
    ) -> None:
        self.store = store
        self.paths = store.paths
        self.lease = lease
        self.epoch = lease.epoch
        self.home_parent = home_parent
        self.on_events = on_events
        self.state: RunState = store.state()
        self.max_parallel = max_parallel or self.state.run.config.crew.max_parallel
        self.run_deadline = None if run_timeout is None else time.monotonic() + run_timeout
        self.run_timeout = run_timeout
        self.workers: dict[str, Worker] = {}
        #: Undelivered messages to each task (the latest line of each), kept up to date from
        #: the mailbox files and our own writes.
        self.pending: dict[str, dict[str, MailboxMessage]] = {}
        self._settled: set[str] = set()
        self._order: dict[str, int] = {}
        self._followers = [
            jsonl.Follower(self.paths.box(box), MailboxMessage)
            for box in (MessageKind.RESPOND.box, MessageKind.STEER.box)
        ]
        self._event_follower = jsonl.Follower(self.paths.events, Event)
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._watcher: Watcher | None = None
        self._stop: str | None = None
        self._dirty = True
        self._next_beat = 0.0
        self._next_flush = 0.0
        self._unflushed: dict[str, str] = {}

    # ------------------------------------------------------------------ public

    def request_stop(self, reason: str = "interrupted") -> None:
        """Ask the leader to stop leading (safe from another thread or a signal handler)."""
        self._stop = reason
        with contextlib.suppress(OSError):
            os.write(self._wake_w, b"!")

    def lead(self) -> int:
        """Run the loop; returns the exit code (see Outcome)."""
        self._watcher = watch_folders([self.paths.root, self.paths.mailbox_dir])
        # leader.json says how this leader notices writes (`crew status` warns about polling).
        self.lease = self.lease.model_copy(update={"watcher": self._watcher.kind})
        self._selector.register(self._wake_r, selectors.EVENT_READ, ("wake", None))
        fd = self._watcher.fileno()
        if fd is not None:
            self._selector.register(fd, selectors.EVENT_READ, ("files", None))
        else:
            threading.Thread(target=self._watch_in_thread, daemon=True).start()
        try:
            return self._loop()
        except StaleLeader:
            self._abandon()
            return Outcome.FENCED
        finally:
            self._close()

    # ------------------------------------------------------------------ the loop

    def _loop(self) -> int:
        timed_out = False
        while True:
            now = time.monotonic()
            if self._stop is not None:
                return self._interrupt()
            if now >= self._next_beat:
                self._heartbeat()
                self._next_beat = now + HEARTBEAT
            if self._dirty:
                self._refresh()
            if (
                self.run_deadline is not None
                and now >= self.run_deadline
                and not self.state.run.status.terminal
            ):
                self._time_out_run()
                timed_out = True
            self._stop_ended_workers(now)
            if not self.state.run.status.terminal:
                self._start_tasks()
            self._deliver()
            self._close_idle_agents(now)
            next_check = self._monitor(now)
            self._flush_output_times(now)
            if self.state.run.status.terminal and not self.workers:
                self._report_events()
                release(self.paths, self.lease)
                if timed_out:
                    return Outcome.TIMED_OUT
                if self.state.run.status is RunStatus.COMPLETED:
                    return Outcome.COMPLETED
                return Outcome.FAILED
            self._report_events()
            wake_at = min(
                t
                for t in (
                    self._next_beat,
                    next_check,
                    self.run_deadline,
                    self._next_flush if self._unflushed else None,
                    *(w.kill_at for w in self.workers.values()),
                    *(w.term_at for w in self.workers.values()),
                    *(w.close_at for w in self.workers.values()),
                )
                if t is not None
            )
            self._wait(max(0.0, wake_at - time.monotonic()))

    def _wait(self, timeout: float) -> None:
        for key, _mask in self._selector.select(timeout):
            kind, worker = key.data
            if kind == "wake":
                with contextlib.suppress(BlockingIOError):
                    os.read(self._wake_r, 4096)
                self._dirty = True
            elif kind == "files":
                assert self._watcher is not None
                drain = getattr(self._watcher, "drain", None)
                if drain is not None:
                    drain()
                self._dirty = True
            elif kind == "out":
                self._read_output(worker, key.fd, parse=True)
            elif kind == "err":
                self._read_output(worker, key.fd, parse=False)
            elif kind == "exit":
                self._reap(worker)
            elif kind == "in":
                self._flush_stdin(worker)

    def _watch_in_thread(self) -> None:
        """For watchers without a descriptor (watchfiles, polling): wake the loop on changes."""
        watcher = self._watcher
        while watcher is not None and self._stop is None:
            try:
                if watcher.wait(1.0):
                    os.write(self._wake_w, b"f")
            except (OSError, RuntimeError):
                return

    # ------------------------------------------------------------------ state

    def _txn(self) -> Any:
        return self.store.transaction(epoch=self.epoch)

    def _refresh(self) -> None:
        """Re-read the snapshots, then whatever the mailbox files gained.

        Writers append events, then mailbox lines, then snapshots; reading the snapshots first
        means the mailbox we read next is at least as new as them. State that exists only in
        the event log (a write in progress, or one a crash cut short) is never acted on: we
        wait for that writer under the run lock (or complete its write) and read again.
        """
        self._dirty = False
        recovery = self.store.load()
        if recovery.unapplied:
            # Wait for the writer holding the lock (or complete a crashed one's write).
            with self._txn() as txn:
                self.state = txn.state
        else:
            self.state = recovery.state
        for follower in self._followers:
            for message in follower.poll().records:
                self._adopt(message)

    def _commit(self, txn: Txn) -> None:
        """After a transaction of ours: adopt its state and its mailbox lines."""
        self.state = txn.state
        for message in txn.staged_mail():
            self._adopt(message)

    def _adopt(self, message: MailboxMessage) -> None:
        """Track the latest state of a message to a worker (a replayed file repeats lines)."""
        if message.direction is not Direction.INBOX:
            return
        self._order.setdefault(message.id, len(self._order))
        waiting = self.pending.setdefault(message.task_id, {})
        if message.status is not MessageStatus.PENDING:
            waiting.pop(message.id, None)
            self._settled.add(message.id)
        elif message.id not in self._settled:  # never back to pending (a file re-read from 0)
            waiting[message.id] = message

    def _heartbeat(self) -> None:
        """Refresh leader.json, after checking no newer leader has taken the run."""
        current = self.store.peek_epoch()
        if current is not None and current != self.epoch:
            raise StaleLeader(f"Run {self.store.run_id} is now led by epoch {current}.")
        self.lease = beat(self.paths, self.lease)

    def _report_events(self) -> None:
        if self.on_events is None:
            return
        events = self._event_follower.poll().records
        if events:
            self.on_events(events)

    # ------------------------------------------------------------------ starting

    def _start_tasks(self) -> None:
        live = len(self.workers)
        for task in self.state.task_list():
            if live >= self.max_parallel:
                return
            if task.status is not TaskStatus.QUEUED or task.id in self.workers:
                continue
            if not all(
                self.state.tasks[d].status is TaskStatus.COMPLETED
                for d in task.depends_on
                if d in self.state.tasks
            ):
                continue
            self._start(task)
            live += 1

    def _start(self, task: Task) -> None:
        run = self.state.run
        agent = run.config.agents[task.agent]
        attempt = task.attempt + 1
        adapter = adapter_for(agent)
        launch = spawn.launch_for(
            run,
            task,
            agent,
            self.paths,
            attempt=attempt,
            home_parent=self.home_parent,
            protocol_env=adapter.environment,
        )
        try:
            process = spawn.start(launch, merge_stderr=adapter.merge_stderr)
        except OSError as exc:
            with self._txn() as txn:
                txn.transition(
                    task.id,
                    TaskStatus.RUNNING,
                    message=f"task {task.id} attempt {attempt} could not start",
                    attempt=attempt,
                    started_at=txn.at,
                )
                requeue(txn, txn.task(task.id), f"cannot start {launch.argv[0]}: {exc.strerror}")
            self._commit(txn)
            return
        now = time.monotonic()
        log_fd = os.open(
            self.paths.log(task.id),
            os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC,
            FILE_MODE,
        )
        worker = Worker(
            task.id,
            attempt,
            process,
            adapter,
            log_fd,
            monitors.Clock(started=now, last_output=now),
            open_streams=1 if process.stderr is None else 2,
        )
        try:
            with self._txn() as txn:
                txn.transition(
                    task.id,
                    TaskStatus.RUNNING,
                    message=f"task {task.id} started (attempt {attempt}, pid {process.pid})",
                    attempt=attempt,
                    pid=process.pid,
                    started_at=txn.at,
                    ended_at=None,
                    exit_code=None,
                    error=None,
                    nudges=0,
                )
        except BaseException:
            _kill_group(process.pid, signal.SIGKILL)
            process.wait()
            os.close(log_fd)
            raise
        self._commit(txn)
        self.workers[task.id] = worker
        assert process.stdout is not None
        self._selector.register(process.stdout, selectors.EVENT_READ, ("out", worker))
        if process.stderr is not None:
            self._selector.register(process.stderr, selectors.EVENT_READ, ("err", worker))
        with contextlib.suppress(OSError, AttributeError):
            worker.pidfd = os.pidfd_open(process.pid)
            self._selector.register(worker.pidfd, selectors.EVENT_READ, ("exit", worker))
        self._react(worker, adapter.start(self.state.tasks[task.id]))

    # ------------------------------------------------------------------ output

    def _read_output(self, worker: Worker, fd: int, *, parse: bool) -> None:
        try:
            data = os.read(fd, _READ)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._close_stream(worker, fd)
            return
        write_all(worker.log_fd, data)
        now = time.monotonic()
        worker.clock.output(now)
        self._unflushed[worker.task_id] = clock.now()
        if not parse:
            return
        worker.line += data
        lines = [bytes(line) for line in worker.line.split(b"\n")]
        worker.line = bytearray(lines.pop())
        if len(worker.line) > _MAX_LINE:  # a huge line without a newline: take it as it is
            lines.append(bytes(worker.line))
            worker.line.clear()
        self._handle_lines(worker, lines)

    def _handle_lines(self, worker: Worker, lines: list[bytes]) -> None:
        reaction = Reaction()
        for raw in lines:
            reaction += worker.adapter.on_line(raw.decode("utf-8", errors="replace"))
        self._react(worker, reaction)

    def _react(self, worker: Worker, reaction: Reaction) -> None:
        """Do what an adapter asked: write to the worker, act on its signals."""
        if reaction.write:
            worker.to_write += reaction.write
            self._flush_stdin(worker)
        said = reaction.signals
        task = self.state.tasks.get(worker.task_id)
        answered_nudge = task is not None and task.nudges > 0
        if not said and not answered_nudge:
            return
        auto: list[tuple[str, SupervisorContact]] = []
        with self._txn() as txn:
            task = txn.task(worker.task_id)
            if task.status not in LIVE_TASK_STATUSES or task.attempt != worker.attempt:
                return
            if task.nudges > 0:
                txn.update_task(
                    task.id,
                    EventType.TASK_ACTIVE,
                    message=f"task {task.id} is active again after {task.nudges} nudge(s)",
                    nudges=0,
                )
            for item in said:
                contact = self._apply(txn, worker, item)
                if contact is not None:
                    auto.append((worker.task_id, contact))
        self._commit(txn)
        for task_id, contact in auto:
            self._auto_respond(task_id, contact)

    def _apply(self, txn: Txn, worker: Worker, item: Signal) -> SupervisorContact | None:
        task = txn.task(worker.task_id)
        if isinstance(item, Contact):
            worker.turn_ended = False
            return self._ask(txn, task, item)
        if isinstance(item, TurnEnd):
            worker.turn_ended = True
            worker.turn_error = item.error
            if item.error:
                txn.record(
                    EventType.AGENT_ERROR,
                    task_id=task.id,
                    message=f"{task.id}'s turn failed: {_short(item.error, 200)}",
                    data={"error": item.error, "turnEnd": True},
                )
            return None
        if isinstance(item, Withdrawn):
            if task.status is TaskStatus.WAITING and task.contact is not None:
                txn.transition(
                    task.id,
                    TaskStatus.RUNNING,
                    event_type=EventType.SUPERVISOR_WITHDRAWN,
                    message=f"{task.id} withdrew its question {task.contact.id}"
                    + (f": {item.reason}" if item.reason else ""),
                    data={"contactId": task.contact.id},
                    contact=None,
                    waiting_since=None,
                )
            return None
        if isinstance(item, AgentError):
            txn.record(
                EventType.AGENT_ERROR,
                task_id=task.id,
                message=f"{task.id}: {_short(item.message, 200)}",
                data={"error": item.message, "fatal": item.fatal},
            )
            if item.fatal:
                worker.turn_error = item.message
                worker.fatal = True
            return None
        if isinstance(item, Report):
            txn.post(
                _outbox(txn, task.id, MessageKind.REPORT, item.text, {"type": item.type.value}),
                EventType.SUPERVISOR_REPORT,
                message=f"{task.id} {item.type}: {_short(item.text)}",
            )
        elif isinstance(item, Ack):
            message = txn.messages(MessageKind.RESPOND.box).get(item.message_id) or txn.messages(
                MessageKind.STEER.box
            ).get(item.message_id)
            if (
                message is not None
                and message.task_id == task.id
                and message.status
                in {
                    MessageStatus.PENDING,
                    MessageStatus.DELIVERED,
                }
            ):
                txn.post(
                    message.model_copy(
                        update={
                            "status": MessageStatus.ACKNOWLEDGED,
                            "delivered_at": message.delivered_at or txn.at,
                            "acknowledged_at": txn.at,
                        }
                    ),
                    EventType.MAILBOX_ACKNOWLEDGED,
                    message=f"{task.id} acknowledged {message.kind} {message.id}",
                )
        elif isinstance(item, Decision):
            self._decision(txn, task, item.data)
        elif isinstance(item, Malformed):
            worker.malformed += 1
            if worker.malformed <= _MALFORMED_EVENTS or worker.malformed % 100 == 0:
                txn.record(
                    EventType.SUPERVISOR_MALFORMED,
                    task_id=task.id,
                    message=f"{task.id} printed a malformed @supervisor line: {item.reason}",
                    data={"reason": item.reason, "count": worker.malformed},
                )
        return None

    def _decision(self, txn: Txn, task: Task, decision: dict[str, Any]) -> None:
        """Record an attention decision; the message it is about keeps it in `data.decisions`,
        so `crew mailbox` shows each message's whole life without reading the event log."""
        action = str(decision.get("action", "?"))
        about = decision.get("item")
        message = None
        if isinstance(about, str):
            for box in (MessageKind.RESPOND.box, MessageKind.STEER.box):
                message = message or txn.messages(box).get(about)
        text = f"{task.id} attention: {_short(action, 20)}"
        if isinstance(about, str):
            text += f" {message.kind if message else 'item'} {_short(about, 40)}"
        if decision.get("reason"):
            text += f" ({_short(str(decision['reason']), 80)})"
        if message is not None and message.task_id == task.id:
            entry = {"at": txn.at, **{k: v for k, v in decision.items() if k != "item"}}
            data = dict(message.data or {})
            data["decisions"] = [*data.get("decisions", []), entry]
            txn.record(
                EventType.ATTENTION_DECISION,
                task_id=task.id,
                message=text,
                data={"decision": decision},  # the worker's JSON, kept apart from crew's keys
                mail=message.model_copy(update={"data": data}),
            )
            return
        txn.record(
            EventType.ATTENTION_DECISION, task_id=task.id, message=text, data={"decision": decision}
        )

    def _ask(self, txn: Txn, task: Task, item: Contact) -> SupervisorContact:
        contact = SupervisorContact(
            id=ids.new_contact_id(),
            task_id=task.id,
            type=item.type,
            prompt=item.prompt,
            options=item.options,
            asked_at=txn.at,
        )
        data: dict[str, Any] = {"contactId": contact.id, "contactType": item.type.value}
        if item.options:
            data["options"] = item.options
        txn.post(
            _outbox(txn, task.id, MessageKind.CONTACT, item.prompt, data),
            EventType.SUPERVISOR_CONTACT,
            message=f"{task.id} asks ({item.type}): {_short(item.prompt)}",
        )
        text = f"{task.id} is waiting for an answer to {contact.id}"
        if task.status is TaskStatus.WAITING:
            txn.update_task(
                task.id, EventType.TASK_WAITING, message=text, contact=contact, waiting_since=txn.at
            )
        else:
            txn.transition(
                task.id, TaskStatus.WAITING, message=text, contact=contact, waiting_since=txn.at
            )
        return contact

    def _auto_respond(self, task_id: str, contact: SupervisorContact) -> None:
        """Answer a question an autoRespond rule matches, through the ordinary respond path."""
        import re

        for index, rule in enumerate(self.state.run.config.auto_respond):
            if rule.type is not contact.type or (rule.task and rule.task != task_id):
                continue
            if rule.match and re.search(rule.match, contact.prompt) is None:
                continue
            try:
                ops.respond(
                    self.store,
                    task_id,
                    rule.answer,
                    session=self.state.run.owner_session_id,
                    contact_id=contact.id,
                    epoch=self.epoch,
                    source=f"autoRespond[{index}]",
                )
            except StaleLeader:
                raise
            except CrewError as exc:  # an answer that does not fit: leave the question open
                with self._txn() as txn:
                    txn.record(
                        EventType.SUPERVISOR_MALFORMED,
                        task_id=task_id,
                        message=f"autoRespond[{index}] could not answer {contact.id}: {exc}",
                        data={"rule": index, "reason": str(exc)},
                    )
                self._commit(txn)
            self._dirty = True
            return

    def _close_stream(self, worker: Worker, fd: int) -> None:
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(fd)
        worker.open_streams -= 1
        if worker.open_streams == 0 and worker.pidfd is None:
            self._reap(worker)  # no pidfd on this system: end of output is our cue

    # ------------------------------------------------------------------ exits

    def _reap(self, worker: Worker) -> None:
        """The worker exited: read what is left, record how it ended."""
        code = int(worker.process.wait())
        worker.exit_code = code if code >= 0 else 128 - code
        self._drain_all(worker, parse=True)
        if worker.line:  # a last line without a newline
            lines = [bytes(worker.line)]
            worker.line.clear()
            self._handle_lines(worker, lines)
        self._forget(worker)
        self._record_exit(worker, code)

    def _drain_all(self, worker: Worker, *, parse: bool = False) -> None:
        """Read whatever output is left once a worker has exited (pipes keep it after exit)."""
        for stream, lines in ((worker.process.stdout, parse), (worker.process.stderr, False)):
            if stream is None or stream.closed:
                continue
            while True:
                try:
                    data = os.read(stream.fileno(), _READ)
                except OSError:  # BlockingIOError: a grandchild still holds the pipe open
                    break
                if not data:
                    break
                write_all(worker.log_fd, data)
                if lines:
                    worker.line += data
                    complete = [bytes(line) for line in worker.line.split(b"\n")]
                    worker.line = bytearray(complete.pop())
                    self._handle_lines(worker, complete)

    def _record_exit(self, worker: Worker, code: int) -> None:
        last_output = self._unflushed.pop(worker.task_id, None)
        with self._txn() as txn:
            task = txn.task(worker.task_id)
            if task.status not in LIVE_TASK_STATUSES or task.attempt != worker.attempt:
                return  # cancelled, timed out or restarted while it ran: already recorded
            changes: dict[str, Any] = {"exit_code": worker.exit_code, "ended_at": txn.at}
            if last_output is not None:
                changes["last_output_at"] = last_output
            if code == 0 and worker.turn_error is None:
                txn.transition(
                    task.id,
                    TaskStatus.COMPLETED,
                    message=f"task {task.id} completed",
                    contact=None,
                    waiting_since=None,
                    **changes,
                )
            else:
                # The agent's own reason beats "exited with code 1" (claude exits 1 after a
                # failed turn).
                why = worker.turn_error or _describe_exit(code)
                requeue(txn, task, why, **changes)
        self._commit(txn)

    def _forget(self, worker: Worker) -> None:
        for stream in (worker.process.stdin, worker.process.stdout, worker.process.stderr):
            if stream is None:
                continue
            with contextlib.suppress(KeyError, ValueError):
                self._selector.unregister(stream)
            with contextlib.suppress(OSError):
                stream.close()
        if worker.pidfd is not None:
            with contextlib.suppress(KeyError, ValueError):
                self._selector.unregister(worker.pidfd)
            os.close(worker.pidfd)
            worker.pidfd = None
        os.close(worker.log_fd)
        self.workers.pop(worker.task_id, None)

    # ------------------------------------------------------------------ stopping

    def _stop_ended_workers(self, now: float) -> None:
        """Stop workers whose task ended under them (a cancel), and kill those out of grace."""
        for worker in list(self.workers.values()):
            task = self.state.tasks.get(worker.task_id)
            ended = (
                task is None
                or task.status not in LIVE_TASK_STATUSES
                or task.attempt != worker.attempt
            )
            if ended and worker.kill_at is None:
                self._terminate(worker, now)
            if worker.term_at is not None and now >= worker.term_at:
                worker.term_at = None
                _kill_group(worker.pid, signal.SIGTERM)
            if worker.kill_at is not None and now >= worker.kill_at:
                _kill_group(worker.pid, signal.SIGKILL)
                worker.kill_at = now + 3600  # only once; its exit descriptor tells us when

    def _terminate(self, worker: Worker, now: float, grace: float = STOP_GRACE) -> None:
        """Stop a worker: an agent is first interrupted in its own protocol and given a moment
        to wind down; then SIGTERM; then SIGKILL after `grace`."""
        interrupt = worker.adapter.interrupt()
        if interrupt.write and not worker.stdin_closed and not worker.exited:
            worker.to_write += interrupt.write
            with contextlib.suppress(OSError):
                self._flush_stdin(worker)
            self._close_stdin(worker)
            worker.term_at = now + INTERRUPT_GRACE
            worker.kill_at = worker.term_at + grace
            return
        _kill_group(worker.pid, signal.SIGTERM)
        worker.kill_at = now + grace

    def _time_out_run(self) -> None:
        assert self.run_timeout is not None
        why = f"run timed out after {clock.format_duration(self.run_timeout)}"
        with self._txn() as txn:
            for task in txn.state.task_list():
                if not task.status.terminal:
                    txn.transition(
                        task.id,
                        TaskStatus.CANCELLED,
                        message=f"task {task.id} cancelled: {why}",
                        ended_at=txn.at,
                        error=why,
                    )
        self._commit(txn)

    def _interrupt(self) -> int:
        """Stop leading: workers get EOF on stdin, then SIGTERM, then SIGKILL; tasks stay live so
        `crew resume` can continue the run."""
        with contextlib.suppress(StaleLeader, StoreError), self._txn() as txn:
            txn.record(
                EventType.LEADER_STOPPED,
                message=f"leader pid {os.getpid()} stopped ({self._stop}); "
                f"`crew resume {self.store.run_id}` continues the run",
                data={"reason": self._stop},
            )
        deadline = time.monotonic() + STOP_GRACE
        for worker in self.workers.values():
            self._close_stdin(worker)
        self._await_exits(deadline)
        for worker in self.workers.values():
            _kill_group(worker.pid, signal.SIGTERM)
        self._await_exits(time.monotonic() + STOP_GRACE)
        for worker in list(self.workers.values()):
            _kill_group(worker.pid, signal.SIGKILL)
            worker.process.wait()
            self._forget(worker)
        self._report_events()
        return Outcome.INTERRUPTED

    def _await_exits(self, deadline: float) -> None:
        """Wait for workers to exit, logging their last output but recording nothing."""
        while self.workers and time.monotonic() < deadline:
            for key, _ in self._selector.select(max(0.0, deadline - time.monotonic())):
                kind, worker = key.data
                if kind in {"out", "err"} and not _drain(key.fd, worker):
                    with contextlib.suppress(KeyError, ValueError):
                        self._selector.unregister(key.fd)
                elif kind == "exit":
                    worker.process.wait()
                    self._drain_all(worker)
                    self._forget(worker)
            for worker in list(self.workers.values()):
                if worker.pidfd is None and worker.process.poll() is not None:
                    self._drain_all(worker)
                    self._forget(worker)

    def _abandon(self) -> None:
        """Fenced out: leave without writing; the new leader owns the workers now."""
        for worker in list(self.workers.values()):
            self._close_stdin(worker)

    def _close(self) -> None:
        for worker in list(self.workers.values()):
            self._forget(worker)
        if self._watcher is not None:
            self._watcher.close()
            self._watcher = None
        self._selector.close()
        for fd in (self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                os.close(fd)

    # ------------------------------------------------------------------ delivery

    def _deliver(self) -> None:
        for worker in self.workers.values():
            task = self.state.tasks.get(worker.task_id)
            if task is None or task.status not in LIVE_TASK_STATUSES or worker.stdin_closed:
                continue
            if worker.to_write or worker.exited or worker.kill_at is not None:
                continue
            due = deliverable(self.pending.get(task.id, {}).values(), task, self._order)
            if not due:
                continue
            reaction = Reaction()
            for message in due:
                reaction += worker.adapter.deliver(message)
            worker.turn_ended = False  # the agent has more to do
            worker.to_write += reaction.write
            worker.in_flight = due
            self._flush_stdin(worker)
            if reaction.signals:
                self._react(worker, Reaction(signals=reaction.signals))

    def _flush_stdin(self, worker: Worker) -> None:
        stdin = worker.process.stdin
        if stdin is None or worker.stdin_closed:
            return
        try:
            while worker.to_write:
                written = os.write(stdin.fileno(), worker.to_write)
                del worker.to_write[:written]
        except BlockingIOError:
            with contextlib.suppress(KeyError, ValueError):
                self._selector.register(stdin, selectors.EVENT_WRITE, ("in", worker))
            return
        except OSError as exc:
            if exc.errno not in {errno.EPIPE, errno.EBADF}:
                raise
            worker.to_write.clear()
            worker.in_flight = []
            worker.stdin_closed = True  # the worker closed its stdin: messages stay pending
            return
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(stdin)
        if worker.in_flight:
            faults.crash_at("deliver")
            delivered, worker.in_flight = worker.in_flight, []
            self._mark_delivered(worker, delivered)

    def _mark_delivered(self, worker: Worker, delivered: list[MailboxMessage]) -> None:
        with self._txn() as txn:
            for message in delivered:
                current = txn.messages(message.kind.box).get(message.id, message)
                if current.status is not MessageStatus.PENDING:
                    continue
                data = {**(current.data or {}), DATA_ATTEMPT: worker.attempt}
                txn.post(
                    current.model_copy(
                        update={
                            "status": MessageStatus.DELIVERED,
                            "delivered_at": txn.at,
                            "data": data,
                        }
                    ),
                    EventType.MAILBOX_DELIVERED,
                    message=f"delivered {message.kind} {message.id} to {worker.task_id}",
                )
        self._commit(txn)

    def _close_idle_agents(self, now: float) -> None:
        """An agent whose turn ended, with no question open and nothing left to give it, is
        done: close its stdin so it exits (after `keepOpen`, if the agent has one)."""
        for worker in self.workers.values():
            if worker.stdin_closed or not (worker.turn_ended or worker.fatal):
                continue
            task = self.state.tasks.get(worker.task_id)
            if task is None or (task.status is not TaskStatus.RUNNING and not worker.fatal):
                worker.close_at = None  # a question is open: the agent waits for its answer
                continue
            busy = worker.to_write or worker.in_flight or self.pending.get(worker.task_id)
            if busy and not worker.fatal:
                worker.close_at = None
                continue
            if worker.close_at is None:
                linger = self.state.run.config.agents[task.agent].keep_open or 0.0
                worker.close_at = now + (0.0 if worker.fatal else linger)
            if now >= worker.close_at:
                worker.close_at = None
                self._close_stdin(worker)

    def _close_stdin(self, worker: Worker) -> None:
        stdin = worker.process.stdin
        if stdin is not None and not worker.stdin_closed:
            with contextlib.suppress(KeyError, ValueError):
                self._selector.unregister(stdin)
            with contextlib.suppress(OSError):
                stdin.close()
        worker.stdin_closed = True

    # ------------------------------------------------------------------ monitors

    def _monitor(self, now: float) -> float | None:
        """Apply the monitors to every live task; returns when to look again."""
        next_check: float | None = None
        for worker in list(self.workers.values()):
            task = self.state.tasks.get(worker.task_id)
            if task is None or task.status not in LIVE_TASK_STATUSES or worker.kill_at:
                continue
            worker.clock.set_waiting(task.status is TaskStatus.WAITING, now)
            agent = self.state.run.config.agents[task.agent]
            nudge_pending = any(
                m.kind is MessageKind.NUDGE for m in self.pending.get(task.id, {}).values()
            )
            verdict = monitors.judge(task, agent, worker.clock, now, nudge_pending=nudge_pending)
            if verdict.action is not None:
                self._act(worker, task, verdict, now)
                verdict = monitors.judge(
                    self.state.tasks[task.id], agent, worker.clock, now, nudge_pending=True
                )
            if verdict.next_check is not None:
                next_check = min(next_check or verdict.next_check, verdict.next_check)
        return next_check

    def _act(self, worker: Worker, task: Task, verdict: monitors.Verdict, now: float) -> None:
        action = verdict.action
        if action is monitors.Action.NUDGE:
            ops.nudge(
                self.store,
                task.id,
                session=self.state.run.owner_session_id,
                epoch=self.epoch,
                source="monitor",
                count=True,
            )
            worker.clock.last_nudge = now
            self._dirty = True
            self._refresh()
        elif action is monitors.Action.TIME_OUT:
            self._terminate(worker, now)
            with self._txn() as txn:
                requeue(txn, txn.task(task.id), verdict.reason)
            self._commit(txn)
        else:
            with self._txn() as txn:
                txn.transition(
                    task.id,
                    TaskStatus.NEEDS_REVIEW,
                    message=f"task {task.id} flagged: {verdict.reason}",
                    error=verdict.reason,
                )
            self._commit(txn)

    def _flush_output_times(self, now: float) -> None:
        """Write lastOutputAt to tasks.json, at most once a second (it changes constantly)."""
        if not self._unflushed or now < self._next_flush:
            return
        times, self._unflushed = self._unflushed, {}
        self._next_flush = time.monotonic() + HEARTBEAT
        with self._txn() as txn:
            for task_id, at in times.items():
                if task_id in txn.state.tasks:
                    txn.refresh(task_id, last_output_at=at)
        self._commit(txn)


# ---------------------------------------------------------------------- helpers


def deliverable(
    messages: Iterable[MailboxMessage], task: Task, order: dict[str, int]
) -> list[MailboxMessage]:
    """The pending messages a live task may be given now, in delivery order: respond, steer,
    nudge, followUp, first-written first within each. A follow-up waits while the task waits for
    an answer (or is flagged): the answer comes first."""
    due = [
        m
        for m in messages
        if m.task_id == task.id
        and m.status is MessageStatus.PENDING
        and (m.kind is not MessageKind.FOLLOW_UP or task.status is TaskStatus.RUNNING)
    ]
    due.sort(key=lambda m: (m.kind.delivery_rank, order.get(m.id, 0)))
    return due


def _outbox(
    txn: Txn, task_id: str, kind: MessageKind, body: str, data: dict[str, Any]
) -> MailboxMessage:
    return MailboxMessage(
        id=ids.new_message_id(),
        direction=Direction.OUTBOX,
        kind=kind,
        from_=task_id,
        to="leader",
        task_id=task_id,
        body=body,
        status=MessageStatus.DELIVERED,
        priority=Priority.HIGH if kind is MessageKind.CONTACT else Priority.NORMAL,
        sent_at=txn.at,
        delivered_at=txn.at,
        data=data,
    )


def _describe_exit(code: int) -> str:
    if code == 0:
        return "exited with code 0"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"killed by {name}"
    return f"exited with code {code}"


def _kill_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def _drain(fd: int, worker: Worker) -> bool:
    """Read and log what a stream has; False at end of file."""
    try:
        data = os.read(fd, _READ)
    except BlockingIOError:
        return True
    except OSError:
        return False
    if data:
        write_all(worker.log_fd, data)
    return bool(data)


def _short(text: str, limit: int = 80) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"
