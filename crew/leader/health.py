"""The leader's health: its lease kept alive by the heartbeat, and the faults that degrade it.

The heartbeat outlives the faults it can: on a full disk leader.json is written over itself in
place (crew/domain/lease.py), with no file descriptor left a spare one is given up for it, and
while the run lock is busy the leader beats as it waits. A degraded leader says so in leader.json
(`degraded`, which `crew status` warns about) and its log at once, and in the event log
(`leader.degraded`, then `leader.recovered`) once it can write there.
"""

from __future__ import annotations

import contextlib
import errno
import os
import time
import traceback
from collections.abc import Callable

from crew import clock
from crew.config import HEARTBEAT_INTERVAL
from crew.domain.lease import stop, write_lease
from crew.errors import CrewError, CrewTimeout, LeaderCrashed, StaleLeader
from crew.leader.degraded import Degradation, Reserve, fault_of
from crew.leader.view import RunView
from crew.models import LeaderInfo
from crew.registry import EventType, WatcherKind
from crew.store.files import open_fd
from crew.store.lock import lock_timeout
from crew.store.runstore import RunStore
from crew.text import short

_APPEND = os.O_WRONLY | os.O_CREAT | os.O_APPEND


class StopLeading(BaseException):
    """Raised out of a wait for the run lock when the leader is asked to stop meanwhile (a
    BaseException: nothing on the way may take it for a worker's failure)."""


class Health:
    """One leader's lease and heartbeat, and whether it is degraded."""

    def __init__(
        self, store: RunStore, view: RunView, lease: LeaderInfo, *, stopping: Callable[[], bool]
    ) -> None:
        self.store = store
        #: Whether the leader was asked to stop.
        self._stopping = stopping
        self.paths = store.paths
        self.view = view
        self.lease = lease
        self.degraded = Degradation()
        self.next_beat = 0.0
        self._reserve = Reserve()

    # ------------------------------------------------------------------ the lease

    def beat(self, now: float) -> None:
        """Refresh leader.json when due, after checking that no newer leader took the run
        (StaleLeader if one did)."""
        if now < self.next_beat:
            return
        self.next_beat = now + HEARTBEAT_INTERVAL
        current = self.store.peek_epoch()
        if current is not None and current != self.lease.epoch:
            raise StaleLeader(f"Run {self.store.run_id} is now led by epoch {current}.")
        self.update(heartbeat_at=clock.now())

    def update(self, **changes: object) -> None:
        """Change the lease and write it (a fault in writing it degrades the leader)."""
        changes.setdefault("degraded", self.degraded.reason)
        self.lease = self.lease.model_copy(update=changes)
        try:
            try:
                write_lease(self.paths, self.lease)
            except Exception as error:
                if fault_of(error) not in {errno.EMFILE, errno.ENFILE}:
                    raise
                with self._reserve.released():
                    write_lease(self.paths, self.lease)
        except Exception as error:
            if fault_of(error) is None:
                raise
            self.fault("writing the heartbeat", error, time.monotonic())

    def lock_busy(self, waited: float) -> None:
        """The run lock is busy (crew.store.lock.patience): the heartbeat goes on while the
        leader waits for it, since the leader is alive, and a new one would need the same lock.
        Busy for long, it degrades the leader; asked to stop, the leader stops waiting."""
        if self._stopping():
            raise StopLeading
        now = time.monotonic()
        self.beat(now)
        if waited >= lock_timeout():
            held = CrewTimeout(f"another process has held it for {waited:.0f}s")
            self.fault("waiting for the run lock", held, now)

    def watcher_failed(self, kind: WatcherKind, error: str, *, now_using: WatcherKind) -> None:
        """The file watcher failed and the leader polls now: leader.json and an event say so."""
        self.update(watcher=now_using)
        with self.view.change() as txn:
            txn.record(
                EventType.LEADER_ERROR,
                message=f"the {kind} file watcher failed ({error}); the leader polls the run's "
                "files instead",
                data={"watcher": kind.value, "error": error},
            )

    # ------------------------------------------------------------------ faults

    def fault(self, what: str, error: BaseException, now: float) -> None:
        """A fault held `what` back: say so where it can be said now, and retry later."""
        before = self.degraded.reason
        first = self.degraded.failed(what, error, now)
        if first:
            self.log(f"degraded: {self.degraded.reason}; what it held back is retried")
        if self.degraded.reason != before:
            self.update()

    def settle(self, now: float, *, retrying: bool, held: bool, failed: bool) -> None:
        """At the end of a turn that went through: a degraded leader says so in the event log
        once it can. It has recovered when nothing is `held` back and the turn was a retry that
        met no fault (`failed`), or when all it waited for was the run lock (it has it now)."""
        state = self.degraded
        incomplete = self.view.take_incomplete()
        if incomplete is not None:  # the log has a change whose other files lag behind
            self.fault("completing a write", incomplete, now)
            return
        waited_for_lock = state.errno is None
        if not state.active or not (retrying or waited_for_lock):
            return
        recovered = not held and (waited_for_lock or not failed)
        if state.announced and not recovered:
            return
        try:
            with self.view.change() as txn:
                if not state.announced:
                    txn.record(
                        EventType.LEADER_DEGRADED,
                        message=f"the leader is degraded ({state.reason}); it holds back what "
                        "failed and retries",
                        data={"reason": state.reason, "since": state.since},
                    )
                if recovered:
                    lasted = now - state.started
                    txn.record(
                        EventType.LEADER_RECOVERED,
                        message=f"the leader recovered after {clock.format_duration(lasted)} "
                        f"degraded ({state.faults} fault(s)); what was held back is done",
                        data={"reason": state.reason, "seconds": round(lasted, 3),
                              "faults": state.faults},
                    )  # fmt: skip
        except Exception as error:
            if fault_of(error) is None:
                raise
            self.fault("recording that the leader is degraded", error, now)
            return
        state.announced = True
        if recovered:
            self.log(f"recovered after {clock.format_duration(state.clear(now))}")
            self.update()

    # ------------------------------------------------------------------ stopping

    def stopped(self, why: str) -> None:
        """The leader stops leading (`why`: the signal): an event, and leader.json says so."""
        run_id = self.store.run_id
        with contextlib.suppress(CrewError, StopLeading), self.view.change() as txn:
            txn.record(
                EventType.LEADER_STOPPED,
                message=f"leader pid {os.getpid()} stopped ({why}); `crew resume {run_id}` "
                "continues the run",
                data={"reason": why},
            )
        with contextlib.suppress(Exception):
            self.lease = stop(self.paths, self.lease, f"interrupted by {why}")

    def crashed(self, error: Exception) -> LeaderCrashed:
        """The leader cannot go on: say why wherever a person will look — an event, leader.json,
        the traceback in the leader log. Each is tried on its own: the error may be the very
        disk they write to."""
        run_id = self.store.run_id
        reason = f"{type(error).__name__}: {short(str(error), 300)}"
        log = self.paths.leader_log
        self.log("crashed:", error)
        with contextlib.suppress(Exception), self.view.change() as txn:
            txn.record(
                EventType.LEADER_CRASHED,
                message=f"leader pid {os.getpid()} crashed ({reason}); `crew resume {run_id}` "
                "continues the run",
                data={"reason": reason, "log": str(log)},
            )
        with contextlib.suppress(Exception):
            self.lease = stop(self.paths, self.lease, f"crashed: {reason}")
        return LeaderCrashed(
            f"The leader of run {run_id} crashed ({reason}); its workers were stopped.",
            hint=f"`crew resume {run_id}` continues the run; the traceback is in {log}.",
        )

    # ------------------------------------------------------------------ the leader log

    def log(self, text: str, error: BaseException | None = None) -> None:
        """A line in .runtime/leader.log (with `error`'s traceback); never fails."""
        with (
            contextlib.suppress(Exception),
            os.fdopen(open_fd(self.paths.leader_log, _APPEND), "a") as handle,
        ):
            handle.write(f"{clock.now()} leader pid {os.getpid()}: {text}\n")
            if error is not None:
                traceback.print_exception(error, file=handle)

    def close(self) -> None:
        self._reserve.close()
