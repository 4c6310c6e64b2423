"""The leader's loop: one thread, one `select` over every worker's pipes and exit descriptor, the
run's folders (file events) and a wake-up pipe; timers (heartbeat, monitors, timeouts) bound how
long it sleeps. Nothing polls on a timer while nothing happens.

Each turn of the loop reads what changed, then starts what is ready, delivers what is due,
closes agents that are done, applies the monitors, and sleeps until the next thing can happen.
Every write goes through a transaction fenced by the leader's epoch: a leader that finds a newer
epoch in the manifest (someone resumed the run over it) stops at once, writing nothing.

Nothing a worker does stops the leader: a bug handling one fails its task only (leader/guard.py);
a fault (a full disk, no descriptor left, a busy lock) degrades it, retrying (leader/health.py).
"""

from __future__ import annotations

import contextlib
import selectors
import time
from collections.abc import Iterator
from functools import partial

from crew import clock, faults
from crew.adapters import adapter_for
from crew.adapters import factory as adapter_factory
from crew.adapters.base import Adapter, Reaction, Signal
from crew.domain import mailbox, runs, tasks
from crew.domain.lease import release
from crew.errors import ExitCode, LeaderCrashed, StaleLeader
from crew.executors.base import Executor
from crew.leader import answers, autorespond, limits, schedule, secret_delivery, signals, spawn
from crew.leader.degraded import SPAWN_FAULTS, fault_of
from crew.leader.exits import Exits
from crew.leader.guard import Step, WorkerGuard
from crew.leader.health import Health, StopLeading
from crew.leader.notify import Notifier
from crew.leader.processes import Workers, start_worker
from crew.leader.supervision import Supervision
from crew.leader.versions import Versions
from crew.leader.view import OnEvents, RunView
from crew.leader.wakeups import Wakeups
from crew.leader.worker_process import WorkerProcess
from crew.models import LeaderInfo, MailboxMessage, SupervisorContact, Task
from crew.procs import raise_open_files, tree
from crew.registry import LIVE_TASK_STATUSES, RunStatus
from crew.store.lock import patience
from crew.store.runstore import RunStore
from crew.store.state import RunState
from crew.store.txn import Txn


class Leader:
    """Leads one run until every task has ended (or it is stopped, or fenced out)."""

    def __init__(
        self,
        store: RunStore,
        lease: LeaderInfo,
        executor: Executor,
        *,
        max_parallel: int | None = None,
        run_timeout: float | None = None,
        on_events: OnEvents | None = None,
        events_from: int = 0,
    ) -> None:
        self.store = store
        self.paths = store.paths
        self.epoch = lease.epoch
        self.view = RunView(store, lease.epoch, on_events, events_from=events_from)
        self.health = Health(store, self.view, lease, stopping=lambda: self._stop is not None)
        self.max_parallel = max_parallel or self.state.run.config.crew.max_parallel
        self.run_timeout = run_timeout
        self.run_deadline = None if run_timeout is None else time.monotonic() + run_timeout
        self._selector = selectors.DefaultSelector()
        self.workers = Workers(self._selector, self, executor)
        self.wakeups = Wakeups(self._selector, [self.paths.root, self.paths.mailbox_dir])
        self.notifier = Notifier(
            self.paths, self.state.run, lease.epoch, self.wakeups.wake, events_from=events_from
        )
        self._stop: str | None = None
        self._dirty = True
        self._timed_out = False
        self._next_check: float | None = None
        #: The last turn left ready tasks queued (schedule.START_BATCH): no sleep before the next.
        self._starting = False
        self.guard = WorkerGuard(self.workers, self.health, self.view)
        self.versions = Versions(self.wakeups.wake)
        self.supervision = Supervision(store, self.view, self.workers, self.guard, lease.epoch)
        self.exits = Exits(self.view, self.guard, self._last_words)

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
        raise_open_files()
        self.wakeups.start()
        # leader.json says how this leader notices writes (`crew status` warns about polling).
        self.health.lease = self.health.lease.model_copy(update={"watcher": self.wakeups.kind})
        try:
            with patience(self.health.lock_busy):
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
            with self._riding_out("leading the run"):
                self.health.beat(now)
                ended = self._turn(now)
                if ended is not None:
                    return ended
            with self._riding_out("reading the workers"):
                self._wait(max(0.0, self._wake_at() - time.monotonic()))

    @contextlib.contextmanager
    def _riding_out(self, what: str) -> Iterator[None]:
        """A fault in the block degrades the leader, which goes on (anything else is a crash);
        a stop asked for while it waited for the run lock is seen at the top of the loop."""
        try:
            yield
        except StopLeading:
            pass
        except Exception as error:
            if fault_of(error) is None:
                raise
            self.health.fault(what, error, time.monotonic())

    def _turn(self, now: float) -> ExitCode | None:
        """Read what changed, start what is ready, deliver what is due, close agents that are
        done, apply the monitors; the exit code once the run has ended."""
        retrying = self.health.degraded.due(now)
        faults_before = self.health.degraded.faults
        if retrying:
            self.guard.retry()
        self.exits.record()
        if self._dirty:
            self.view.refresh()
            self._dirty = False
        self._note_watcher_failure()
        self.versions.record(self.view)
        self._time_out_run(now)
        self._stop_ended_workers(now)
        self._starting = False
        if not self.state.run.status.terminal and (retrying or not self.health.degraded.active):
            ready = list(schedule.ready(self.state, self.workers.running(), self.max_parallel))
            if ready:
                self._start(ready, now)
        self._deliver()
        self._close_idle_agents(now)
        self._next_check = self.supervision.apply(now)
        self._record_folded_reports(now)
        self.view.flush_output_times(now)
        self.view.report_events()
        self.notifier.notice(self.view)  # [[notify]] commands run in the background
        failed = self.health.degraded.faults > faults_before
        self.health.settle(now, retrying=retrying, held=bool(self.guard), failed=failed)
        if self.state.run.status.terminal and not len(self.workers) and not self.guard:
            release(self.paths, self.health.lease)
            return self._outcome()
        return None

    def _wake_at(self) -> float:
        if self._starting:
            return time.monotonic()
        times = (
            self.health.next_beat,
            self._next_check,
            self.run_deadline,
            self.view.next_flush(),
            self.health.degraded.wake_at(),
            *self.workers.deadlines(),
            *(w.agent.reports.due() for w in self.workers if not self.guard.holds(w.task_id)),
        )
        return min(t for t in times if t is not None)

    def _outcome(self) -> ExitCode:
        if self._timed_out:
            return ExitCode.TIMEOUT
        return ExitCode.OK if self.state.run.status is RunStatus.COMPLETED else ExitCode.FAILED

    def _wait(self, timeout: float) -> None:
        """Sleep until a worker, the wake-up pipe or another's write needs the leader."""
        deadline = time.monotonic() + timeout
        while True:
            woken = False
            with tree.one_scan():  # the exits of one wake-up look for their leftovers together
                for key, _mask in self._selector.select(timeout):
                    kind, worker = key.data
                    if worker is not None:
                        woken = True
                        with self.guard.guarding(worker):
                            self.workers.handle(kind, worker, key.fd)
                        continue
                    # The leader's own writes wake the watcher too: slept through, not read again.
                    self.wakeups.handle(kind)
                    self._dirty = self._dirty or self.view.stale()
                    woken = woken or self._dirty or kind != "files" or self.wakeups.failed
            timeout = deadline - time.monotonic()
            if woken or timeout <= 0:
                self.exits.record()
                return

    def _note_watcher_failure(self) -> None:
        """Say that the file watcher failed and the leader polls now: an event, leader.json."""
        if (failure := self.wakeups.failure()) is not None:
            self.health.watcher_failed(*failure, now_using=self.wakeups.kind)

    # ------------------------------------------------------------------ workers

    def _record_folded_reports(self, now: float) -> None:
        """Record the reports folded by the rate limit whose window has ended."""
        for worker in self.workers:
            due = worker.agent.reports.due()
            if due is not None and now >= due and not self.guard.holds(worker.task_id):
                with self.guard.guarding(worker):
                    self.guard.record(worker, partial(self._record_signals, worker, []))

    def _start(self, ready: list[Task], now: float) -> None:
        """Start the next attempt of the tasks that are ready, recorded in one transaction, as
        many as schedule.START_BATCH and START_SLICE allow (the rest, next turn); a fault
        holds back the task it hit and those after it (they stay queued for the retry)."""
        run = self.state.run
        started: list[tuple[WorkerProcess, Adapter]] = []
        held: tuple[str, Exception] | None = None
        cut_at = time.monotonic() + schedule.START_SLICE
        for protocol in {run.config.agents[task.agent].protocol for task in ready}:
            adapter_factory(protocol)  # an adapter's first import, before the lock is taken
        try:
            # Started under the run lock: a worker's own first `crew` command waits for the
            # lock, so it finds its task running, with its secret's hash recorded.
            with self.view.change() as txn:
                for index, task in enumerate(ready):
                    if index == schedule.START_BATCH or (index and time.monotonic() >= cut_at):
                        self._starting = True  # the lock is let go; the rest, next turn
                        break
                    if limits.held_at_start(txn, task):
                        continue
                    adapter = adapter_for(run.config.agents[task.agent])
                    try:
                        worker = self._spawn(txn, task, adapter, task.attempt + 1)
                    except Exception as error:
                        if fault_of(error, SPAWN_FAULTS) is None:
                            raise
                        held = (task.id, error)  # nothing of it was recorded
                        break
                    if worker is not None:
                        started.append((worker, adapter))
        except BaseException as error:
            for worker, _ in started:
                worker.discard()
            if isinstance(error, Exception) and fault_of(error, SPAWN_FAULTS) is not None:
                self.health.fault("starting tasks", error, now)
                return  # nothing was recorded: they stay queued for the retry
            raise
        if held is not None:
            self.health.fault(f"starting {held[0]}", held[1], now)
        for worker, adapter in started:
            self.workers.add(worker)
            with self.guard.guarding(worker):
                self._heard(worker, adapter.start(self.state.task(worker.task_id)))

    def _spawn(self, txn: Txn, task: Task, adapter: Adapter, attempt: int) -> WorkerProcess | None:
        """Start a worker and record it in `txn`; None (and recorded) if it cannot start. A
        fault (no descriptor or process left for now) is raised, to be retried."""
        run = txn.run
        agent = run.config.agents[task.agent]
        try:
            launch = spawn.launch_for(run, task, agent, self.paths, adapter, attempt=attempt)
            worker = start_worker(
                self.workers.executor,
                launch,
                adapter,
                self.paths,
                task_id=task.id,
                attempt=attempt,
                now=time.monotonic(),
                resources=agent.resources.as_dict(),
            )
        except (OSError, ValueError) as exc:  # no value can stop the run: the attempt fails
            if isinstance(exc, OSError) and fault_of(exc, SPAWN_FAULTS) is not None:
                raise
            tasks.not_started(txn, task.id, attempt=attempt, why=spawn.failure(agent, exc))
            return None
        version = self.versions.of(task, agent.protocol, launch)
        try:
            tasks.start(txn, task.id, attempt=attempt, pid=worker.pid, token_hash=launch.token_hash)
            if version is not None:
                tasks.remember_version(txn, task.id, version)
        except BaseException:
            worker.discard()
            raise
        return worker

    def output(self, worker: WorkerProcess, lines: list[bytes]) -> None:
        """The worker printed something (Workers calls this): its log gets every byte."""
        self.view.printed(worker.task_id, clock.now())
        self.guard.record(worker, worker.flush_log)
        faults.fail_at("worker")
        reaction = Reaction()
        for raw in lines:
            reaction += worker.adapter.on_line(raw.decode("utf-8", errors="replace"))
        self._heard(worker, reaction)

    def stopping(self, worker: WorkerProcess, said: list[Signal]) -> None:
        """The progress a worker saved as the leader stops (Workers calls this): recorded."""
        with contextlib.suppress(Exception, StopLeading):  # stopping: what it can
            self._record_signals(worker, said)

    def _heard(self, worker: WorkerProcess, reaction: Reaction) -> None:
        """Do what an adapter asked: write to the worker, record what it said."""
        if reaction.write:
            self.workers.write(worker, reaction.write)
        self.guard.record(worker, partial(self._record_signals, worker, reaction.signals))
        if reaction.returned:  # what an adapter held gave back when its turn was stopped
            self.guard.record(worker, partial(limits.carry_back, self.view, reaction.returned))

    def _record_signals(
        self, worker: WorkerProcess, said: list[Signal], final: bool = False
    ) -> list[Step]:
        """Record what a worker said (`final`: all it will say); then answer what an
        autoRespond rule answers."""
        now = time.monotonic()
        agent = worker.agent.copy()  # what the record changes, kept once it is written
        task = self.state.tasks.get(worker.task_id)
        if not signals.worth_recording(task, said, agent, now=now, final=final):
            return []
        with self.view.change() as txn:
            asked = signals.apply(
                txn, worker.task_id, worker.attempt, agent, said, now=now, final=final
            )
        worker.agent = agent
        if agent.to_interrupt:  # a limit reached mid-turn: the agent stops, crew asks
            agent.interrupting = True
            self._heard(worker, worker.adapter.interrupt())
        return [partial(self._auto_respond, question) for question in asked]

    def _last_words(self, worker: WorkerProcess) -> Step:
        """The step that records what an exited worker said last (folded reports)."""
        return partial(self._record_signals, worker, [], True)

    def _auto_respond(self, question: SupervisorContact) -> None:
        """Answer a question an autoRespond rule matches, through the ordinary respond verb."""
        autorespond.answer(self.store, self.view, question, epoch=self.epoch)
        self._dirty = True

    def exited(self, worker: WorkerProcess, code: int) -> None:
        """The worker exited (Workers calls this): how its attempt ended is recorded once the
        leader has read everything that woke it (leader/exits.py)."""
        self.health.degraded.freed(time.monotonic())
        self.exits.add(worker, code)

    def placed(self, worker: WorkerProcess) -> None:
        """A remote worker was placed on a node (Workers calls this): record where it runs."""
        node, pid = worker.handle.node, worker.handle.pid
        assert node is not None and pid is not None
        self.guard.record(worker, partial(self._record_placement, worker, node, pid))

    def _record_placement(self, worker: WorkerProcess, node: str, pid: int) -> None:
        with self.view.change() as txn:
            tasks.placed(txn, worker.task_id, worker.attempt, node=node, pid=pid)

    def _stop_ended_workers(self, now: float) -> None:
        """Stop workers whose task ended under them (a cancel); kill those out of grace."""
        for worker in self.workers:
            task = self.state.tasks.get(worker.task_id)
            ended = task is None or not tasks.live_attempt(task, worker.attempt)
            if ended and not worker.stopping:
                with self.guard.guarding(worker):
                    self.workers.stop(worker, now)
        self.workers.escalate(now)

    def _time_out_run(self, now: float) -> None:
        """`crew run --timeout`: when it passes, what is left is cancelled and the run fails."""
        ended = self.state.run.status.terminal  # in time
        if self.run_deadline is None or now < self.run_deadline or self._timed_out or ended:
            return
        assert self.run_timeout is not None
        with self.view.change() as txn:
            runs.time_out(txn, self.run_timeout)
        self._timed_out = True

    # ------------------------------------------------------------------ delivery

    def _deliver(self) -> None:
        """Give each live worker what is due to it, in the agent's own terms (not to one whose
        writes a fault holds back: its delivery is not recorded yet)."""
        for worker in self.workers:
            if not self.guard.holds(worker.task_id):
                with self.guard.guarding(worker):
                    self._deliver_to(worker)

    def _deliver_to(self, worker: WorkerProcess) -> None:
        task = self.state.tasks.get(worker.task_id)
        if task is None or task.status not in LIVE_TASK_STATUSES or worker.stdin_closed:
            return
        if worker.to_write or worker.exited or worker.stopping or worker.agent.interrupting:
            return
        if worker.agent.settled:  # its turn is over, and it says it is idle next: work waits
            return
        plain = worker.adapter.answers_only_while_asking
        due = answers.due(self.view, task, plain=plain)
        if not due or (worker.agent.turn_ended and self._paused_at_limit(task)):
            return
        due, given, asked = secret_delivery.reveal_due(self.paths, self.view, due)
        reaction = Reaction(signals=[*asked])  # secret answers the machine lost: asked again
        for message in given:
            reaction += worker.adapter.deliver(answers.naming_question(self.view, message))
        if due:
            worker.agent.turn_ended = False  # the agent has more to do
            worker.in_flight = due
            self.workers.write(worker, reaction.write)
        if reaction.signals:
            self._heard(worker, Reaction(signals=reaction.signals))

    def _paused_at_limit(self, task: Task) -> bool:
        """An idle agent whose task reached a limit is given no more work: crew asks first."""
        question = limits.pause_if_reached(self.view, task)
        if question is not None:
            self._auto_respond(question)
        return question is not None

    def delivered(self, worker: WorkerProcess, messages: list[MailboxMessage]) -> None:
        """The worker's stdin took these messages (Workers calls this)."""
        self.guard.record(worker, partial(self._record_delivery, worker.attempt, messages))

    def _record_delivery(self, attempt: int, messages: list[MailboxMessage]) -> None:
        with self.view.change() as txn:
            mailbox.deliver(txn, messages, attempt=attempt)
        secret_delivery.forget_delivered(self.paths, messages)

    def _close_idle_agents(self, now: float) -> None:
        """Close the stdin of agents that are done, so that they exit (schedule.idle_close_at)."""
        for worker in self.workers:
            if worker.stdin_closed or self.guard.holds(worker.task_id):
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

    # ------------------------------------------------------------------ stopping

    def _interrupt(self) -> ExitCode:
        """Stop leading: workers get EOF on stdin, then SIGTERM, then SIGKILL; tasks stay live so
        `crew resume` can continue the run."""
        with contextlib.suppress(StopLeading):  # the exits read last, if the lock is free
            self.exits.record()
        self.health.stopped(f"{self._stop}")
        self.wakeups.quiet()
        self.workers.stop_all()
        self.view.report_events()
        return ExitCode.INTERRUPTED

    def _crashed(self, error: Exception) -> LeaderCrashed:
        """The leader cannot go on: say why, stop the workers; the run stays resumable."""
        crashed = self.health.crashed(error)
        with contextlib.suppress(Exception):
            self.wakeups.quiet()
            self.workers.stop_all()
        return crashed

    def _close(self) -> None:
        for worker in self.workers:
            self.workers.forget(worker)
            worker.close_log(flush=True)
        for worker in [*self.guard.held_workers(), *self.exits.workers()]:
            worker.close_log(flush=True)
        self.workers.settle()
        self.workers.executor.close()
        self.notifier.close(self.view)
        self.health.close()
        self.wakeups.close()
        self._selector.close()
