"""The leader's loop: one thread, one `select` over every worker's pipes and exit descriptor, the
run's folders (file events) and a wake-up pipe; timers (heartbeat, monitors, timeouts) bound how
long it sleeps. Nothing polls on a timer while nothing happens.

Each turn of the loop reads what changed, then starts what is ready, delivers what is due,
closes agents that are done, applies the monitors, and sleeps until the next thing can happen.
Every write goes through a transaction fenced by the leader's epoch: a leader that finds a newer
epoch in the manifest (someone resumed the run over it) stops at once, writing nothing.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import time
import traceback

from crew import clock, faults, verbs
from crew.adapters import adapter_for
from crew.adapters.base import Adapter, Reaction
from crew.config import HEARTBEAT_INTERVAL
from crew.domain import mailbox, runs, tasks
from crew.domain.lease import beat, release, stop, write_lease
from crew.errors import CrewError, ExitCode, LeaderCrashed, StaleLeader, StoreError
from crew.leader import monitors, schedule, signals, spawn
from crew.leader.processes import WorkerProcess, Workers, describe_exit, start_worker
from crew.leader.view import OnEvents, RunView
from crew.leader.wakeups import Wakeups
from crew.models import LeaderInfo, MailboxMessage, SupervisorContact, Task
from crew.registry import (
    LIVE_TASK_STATUSES,
    EventType,
    MessageKind,
    MessageSource,
    RunStatus,
)
from crew.store.files import open_fd
from crew.store.runstore import RunStore
from crew.store.state import RunState
from crew.store.txn import Txn
from crew.text import short


class Leader:
    """Leads one run until every task has ended (or it is stopped, or fenced out)."""

    def __init__(
        self,
        store: RunStore,
        lease: LeaderInfo,
        *,
        max_parallel: int | None = None,
        run_timeout: float | None = None,
        on_events: OnEvents | None = None,
    ) -> None:
        self.store = store
        self.paths = store.paths
        self.lease = lease
        self.epoch = lease.epoch
        self.view = RunView(store, lease.epoch, on_events)
        self.max_parallel = max_parallel or self.state.run.config.crew.max_parallel
        self.run_timeout = run_timeout
        self.run_deadline = None if run_timeout is None else time.monotonic() + run_timeout
        self._selector = selectors.DefaultSelector()
        self.workers = Workers(self._selector, self)
        self.wakeups = Wakeups(self._selector, [self.paths.root, self.paths.mailbox_dir])
        self._stop: str | None = None
        self._dirty = True
        self._timed_out = False
        self._next_beat = 0.0

    @property
    def state(self) -> RunState:
        return self.view.state

    # ------------------------------------------------------------------ public

    def request_stop(self, reason: str = "interrupted") -> None:
        """Ask the leader to stop leading (safe from another thread or a signal handler)."""
        self._stop = reason
        self.wakeups.wake()

    def lead(self) -> ExitCode:
        """Run the loop until the run ends; returns the exit code."""
        self.wakeups.start()
        # leader.json says how this leader notices writes (`crew status` warns about polling).
        self.lease = self.lease.model_copy(update={"watcher": self.wakeups.kind})
        try:
            return self._loop()
        except StaleLeader:
            self.workers.abandon()
            return ExitCode.REFUSED
        except Exception as error:  # a bug, or an OS error the loop cannot go on from
            raise self._crashed(error) from error
        finally:
            self._close()

    # ------------------------------------------------------------------ the loop

    def _loop(self) -> ExitCode:
        while True:
            faults.fail_at("leader")
            now = time.monotonic()
            if self._stop is not None:
                return self._interrupt()
            if now >= self._next_beat:
                self._heartbeat()
                self._next_beat = now + HEARTBEAT_INTERVAL
            if self._dirty:
                self._dirty = False
                self.view.refresh()
            self._note_watcher_failure()
            self._time_out_run(now)
            self._stop_ended_workers(now)
            if not self.state.run.status.terminal:
                for task in schedule.ready(self.state, self.workers.running(), self.max_parallel):
                    self._start(task)
            self._deliver()
            self._close_idle_agents(now)
            next_check = self._monitor(now)
            self.view.flush_output_times(now)
            self.view.report_events()
            if self.state.run.status.terminal and not len(self.workers):
                release(self.paths, self.lease)
                return self._outcome()
            wake_at = min(
                t
                for t in (
                    self._next_beat,
                    next_check,
                    self.run_deadline,
                    self.view.next_flush(),
                    *self.workers.deadlines(),
                )
                if t is not None
            )
            self._wait(max(0.0, wake_at - time.monotonic()))

    def _outcome(self) -> ExitCode:
        if self._timed_out:
            return ExitCode.TIMEOUT
        if self.state.run.status is RunStatus.COMPLETED:
            return ExitCode.OK
        return ExitCode.FAILED

    def _wait(self, timeout: float) -> None:
        for key, _mask in self._selector.select(timeout):
            kind, worker = key.data
            if worker is None:
                self.wakeups.handle(kind)
                self._dirty = True
            else:
                self.workers.handle(kind, worker, key.fd)

    def _note_watcher_failure(self) -> None:
        """Say that the file watcher failed and the leader polls now: an event, leader.json."""
        failure = self.wakeups.failure()
        if failure is None:
            return
        kind, error = failure
        self.lease = self.lease.model_copy(update={"watcher": self.wakeups.kind})
        write_lease(self.paths, self.lease)
        with self.view.change() as txn:
            txn.record(
                EventType.LEADER_ERROR,
                message=f"the {kind} file watcher failed ({error}); the leader polls the run's "
                "files instead",
                data={"watcher": kind.value, "error": error},
            )

    # ------------------------------------------------------------------ the run's state

    def _heartbeat(self) -> None:
        """Refresh leader.json, after checking no newer leader has taken the run."""
        current = self.store.peek_epoch()
        if current is not None and current != self.epoch:
            raise StaleLeader(f"Run {self.store.run_id} is now led by epoch {current}.")
        self.lease = beat(self.paths, self.lease)

    # ------------------------------------------------------------------ workers

    def _start(self, task: Task) -> None:
        run = self.state.run
        attempt = task.attempt + 1
        adapter = adapter_for(run.config.agents[task.agent])
        worker: WorkerProcess | None = None
        try:
            # Started under the run lock: the worker's own first `crew` command waits for the
            # lock, so it finds its task running, with its secret's hash recorded.
            with self.view.change() as txn:
                worker = self._spawn(txn, task, adapter, attempt)
        except BaseException:
            if worker is not None:
                _discard(worker)
            raise
        if worker is None:
            return
        self.workers.add(worker)
        self._heard(worker, adapter.start(self.state.task(task.id)))

    def _spawn(self, txn: Txn, task: Task, adapter: Adapter, attempt: int) -> WorkerProcess | None:
        """Start a worker and record it in `txn`; None (and recorded) if it cannot start."""
        run = txn.run
        agent = run.config.agents[task.agent]
        try:
            launch = spawn.launch_for(run, task, agent, self.paths, adapter, attempt=attempt)
            worker = start_worker(
                launch, adapter, self.paths, task_id=task.id, attempt=attempt, now=time.monotonic()
            )
        except (OSError, ValueError) as exc:  # no value can stop the run: the attempt fails
            tasks.not_started(txn, task.id, attempt=attempt, why=spawn.failure(agent, exc))
            return None
        try:
            tasks.start(txn, task.id, attempt=attempt, pid=worker.pid, token_hash=launch.token_hash)
        except BaseException:
            _discard(worker)
            raise
        return worker

    def output(self, worker: WorkerProcess, lines: list[bytes]) -> None:
        """The worker printed something (Workers calls this)."""
        self.view.printed(worker.task_id, clock.now())
        reaction = Reaction()
        for raw in lines:
            reaction += worker.adapter.on_line(raw.decode("utf-8", errors="replace"))
        self._heard(worker, reaction)

    def _heard(self, worker: WorkerProcess, reaction: Reaction) -> None:
        """Do what an adapter asked: write to the worker, record what it said."""
        if reaction.write:
            self.workers.write(worker, reaction.write)
        if not signals.worth_recording(self.state.tasks.get(worker.task_id), reaction.signals):
            return
        with self.view.change() as txn:
            asked = signals.apply(
                txn, worker.task_id, worker.attempt, worker.agent, reaction.signals
            )
        for question in asked:
            self._auto_respond(question)

    def _auto_respond(self, question: SupervisorContact) -> None:
        """Answer a question an autoRespond rule matches, through the ordinary respond verb."""
        found = signals.auto_answer(self.state.run.config.auto_respond, question)
        if found is None:
            return
        index, rule = found
        try:
            verbs.respond(
                self.store,
                question.task_id,
                rule.answer,
                session=self.state.run.owner_session_id,
                contact_id=question.id,
                epoch=self.epoch,
                source=f"{MessageSource.AUTO_RESPOND}[{index}]",
            )
        except StaleLeader:
            raise
        except CrewError as exc:  # an answer that does not fit: leave the question open
            with self.view.change() as txn:
                txn.record(
                    EventType.SUPERVISOR_MALFORMED,
                    task_id=question.task_id,
                    message=f"autoRespond[{index}] could not answer {question.id}: {exc}",
                    data={"rule": index, "reason": str(exc)},
                )
        self._dirty = True

    def exited(self, worker: WorkerProcess, code: int) -> None:
        """The worker exited (Workers calls this): record how its attempt ended."""
        last_output = self.view.take_output_time(worker.task_id)
        # The agent's own reason beats "exited with code 1" (claude exits 1 after a failed turn).
        failure = worker.agent.turn_error or (describe_exit(code) if code else None)
        with self.view.change() as txn:
            tasks.exited(
                txn,
                worker.task_id,
                worker.attempt,
                exit_code=worker.exit_code,
                failure=failure,
                last_output_at=last_output,
            )

    def _stop_ended_workers(self, now: float) -> None:
        """Stop workers whose task ended under them (a cancel); kill those out of grace."""
        for worker in self.workers:
            task = self.state.tasks.get(worker.task_id)
            ended = (
                task is None
                or task.status not in LIVE_TASK_STATUSES
                or task.attempt != worker.attempt
            )
            if ended and not worker.stopping:
                self.workers.stop(worker, now)
        self.workers.escalate(now)

    def _time_out_run(self, now: float) -> None:
        """`crew run --timeout`: when it passes, what is left is cancelled and the run fails."""
        if self.run_deadline is None or now < self.run_deadline or self._timed_out:
            return
        if self.state.run.status.terminal:
            return
        assert self.run_timeout is not None
        with self.view.change() as txn:
            runs.time_out(txn, self.run_timeout)
        self._timed_out = True

    # ------------------------------------------------------------------ delivery

    def _deliver(self) -> None:
        """Give each live worker what is due to it, in the agent's own terms."""
        for worker in self.workers:
            task = self.state.tasks.get(worker.task_id)
            if task is None or task.status not in LIVE_TASK_STATUSES or worker.stdin_closed:
                continue
            if worker.to_write or worker.exited or worker.stopping:
                continue
            plain = worker.adapter.answers_only_while_asking
            due = self.view.pending.due(task, answers_only_while_asking=plain)
            if not due:
                continue
            reaction = Reaction()
            for message in due:
                reaction += worker.adapter.deliver(message)
            worker.agent.turn_ended = False  # the agent has more to do
            worker.in_flight = due
            self.workers.write(worker, reaction.write)
            if reaction.signals:
                self._heard(worker, Reaction(signals=reaction.signals))

    def delivered(self, worker: WorkerProcess, messages: list[MailboxMessage]) -> None:
        """The worker's stdin took these messages (Workers calls this)."""
        with self.view.change() as txn:
            mailbox.deliver(txn, messages, attempt=worker.attempt)

    def _close_idle_agents(self, now: float) -> None:
        """Close the stdin of agents that are done, so that they exit (schedule.idle_close_at)."""
        for worker in self.workers:
            if worker.stdin_closed:
                continue
            task = self.state.tasks.get(worker.task_id)
            waiting = self.view.pending.any_for(worker.task_id)
            busy = bool(worker.to_write or worker.in_flight) or waiting
            linger = self.state.run.config.agents[task.agent].keep_open if task else None
            worker.close_at = schedule.idle_close_at(
                worker.agent, task, busy=busy, linger=linger or 0.0, scheduled=worker.close_at,
                now=now,
            )  # fmt: skip
            if worker.close_at is not None and now >= worker.close_at:
                worker.close_at = None
                self.workers.close_stdin(worker)

    # ------------------------------------------------------------------ monitors

    def _monitor(self, now: float) -> float | None:
        """Apply the monitors to every live task; returns when to look again."""
        checks: list[float] = []
        for worker in self.workers:
            task = self.state.tasks.get(worker.task_id)
            if task is None or task.status not in LIVE_TASK_STATUSES or worker.stopping:
                continue
            worker.clock.observe(task.status, now)
            agent = self.state.run.config.agents[task.agent]
            nudging = self.view.pending.any_for(task.id, MessageKind.NUDGE)
            verdict = monitors.judge(task, agent, worker.clock, now, nudge_pending=nudging)
            if verdict.action is not None:
                self._act(worker, task, verdict, now)
                # What was done is not in flight any more: judged again, a pending nudge.
                task = self.state.task(task.id)
                verdict = monitors.judge(task, agent, worker.clock, now, nudge_pending=True)
            if verdict.next_check is not None:
                checks.append(verdict.next_check)
        return min(checks, default=None)

    def _act(
        self, worker: WorkerProcess, task: Task, verdict: monitors.Verdict, now: float
    ) -> None:
        if verdict.action is monitors.Action.NUDGE:
            verbs.nudge(
                self.store,
                task.id,
                session=self.state.run.owner_session_id,
                epoch=self.epoch,
                source=MessageSource.MONITOR,
            )
            worker.clock.last_nudge = now
            self.view.refresh()
            return
        if verdict.action is monitors.Action.TIME_OUT:
            self.workers.stop(worker, now)
        with self.view.change() as txn:
            if verdict.action is monitors.Action.TIME_OUT:
                tasks.requeue(txn, task.id, verdict.reason)
            else:
                tasks.flag(txn, task.id, verdict.reason)

    # ------------------------------------------------------------------ stopping

    def _interrupt(self) -> ExitCode:
        """Stop leading: workers get EOF on stdin, then SIGTERM, then SIGKILL; tasks stay live so
        `crew resume` can continue the run."""
        with contextlib.suppress(StaleLeader, StoreError), self.view.change() as txn:
            txn.record(
                EventType.LEADER_STOPPED,
                message=f"leader pid {os.getpid()} stopped ({self._stop}); "
                f"`crew resume {self.store.run_id}` continues the run",
                data={"reason": self._stop},
            )
        self.lease = stop(self.paths, self.lease, f"interrupted by {self._stop}")
        self.wakeups.quiet()
        self.workers.stop_all()
        self.view.report_events()
        return ExitCode.INTERRUPTED

    def _crashed(self, error: Exception) -> LeaderCrashed:
        """The leader cannot go on: say why wherever a person will look — an event, leader.json,
        the traceback in the leader log — and stop the workers; the run stays resumable. Each
        step is tried on its own: the error may be the very disk they write to."""
        run_id = self.store.run_id
        reason = f"{type(error).__name__}: {short(str(error), 300)}"
        log = self.paths.leader_log
        with (
            contextlib.suppress(Exception),
            os.fdopen(open_fd(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND), "a") as handle,
        ):
            handle.write(f"{clock.now()} the leader (pid {os.getpid()}) crashed:\n")
            traceback.print_exception(error, file=handle)
        with contextlib.suppress(Exception), self.view.change() as txn:
            txn.record(
                EventType.LEADER_CRASHED,
                message=f"leader pid {os.getpid()} crashed ({reason}); `crew resume {run_id}` "
                "continues the run",
                data={"reason": reason, "log": str(log)},
            )
        with contextlib.suppress(Exception):
            self.lease = stop(self.paths, self.lease, f"crashed: {reason}")
        with contextlib.suppress(Exception):
            self.wakeups.quiet()
            self.workers.stop_all()
        return LeaderCrashed(
            f"The leader of run {run_id} crashed ({reason}); its workers were stopped.",
            hint=f"`crew resume {run_id}` continues the run; the traceback is in {log}.",
        )

    def _close(self) -> None:
        for worker in self.workers:
            self.workers.forget(worker)
        self.workers.settle()
        self.wakeups.close()
        self._selector.close()


def _discard(worker: WorkerProcess) -> None:
    """Kill a worker whose start could not be recorded: nothing may run unrecorded."""
    worker.signal(signal.SIGKILL)
    worker.wait()
    worker.close()
