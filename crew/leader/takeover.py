"""Becoming a run's leader: claiming the lease, and taking over an interrupted run (`resume`)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from crew import domain
from crew.domain import gate, runs, tasks
from crew.domain.lease import LeaseState, new_lease, read_lease, refuse_if_led, write_lease
from crew.errors import CrewTimeout, Refused
from crew.models import LeaderInfo
from crew.procs import Stopped
from crew.procs.stopping import stop_workers
from crew.registry import LIVE_TASK_STATUSES, EventType, RunStatus
from crew.session import Actor, as_actor
from crew.store import snapshot
from crew.store.runstore import RunStore


@dataclass
class Takeover:
    """What becoming the leader involved."""

    lease: LeaderInfo
    #: Tasks put back in the queue for a new attempt (resume).
    requeued: list[str] = field(default_factory=list)
    #: Workers of the previous leader that were still running, and how they were stopped.
    stopped: list[Stopped] = field(default_factory=list)
    #: Where the claim's own events begin in events.jsonl: what happened from then on.
    events_at: int = 0


def claim(
    store: RunStore, *, session: str | Actor, force: bool = False, resume: bool = False
) -> Takeover:
    """Take the leader lease of a run: refused while another leader is alive (exit 4).

    The epoch goes up by one, so a previous leader that is merely hung stops at its next write.
    With `resume`, every task that was running, waiting or flagged goes back to the queue for a
    new attempt: its attempt was interrupted, which does not count against `maxAttempts` (one
    whose next attempt waits for crew's question about a limit has no worker: it keeps waiting,
    its question open). The previous leader's workers are stopped — each only after checking its
    pid still belongs to that task's attempt.
    """
    orphans: list[tuple[str, int, int | None]] = []
    actor = as_actor(session)
    with _naming_a_hung_leader(store), domain.change(store) as txn:
        run = txn.run
        overridden = gate.admit(txn, actor, "resume", force=force)
        session = actor.name_in(run.run_id)
        if run.status.terminal:
            raise Refused(
                f"Run {run.run_id} has ended ({run.status}): there is nothing to lead.",
                hint=_rerun_hint(run.run_id, run.status),
            )
        refuse_if_led(
            read_lease(store.paths, stale_after=run.config.crew.leader_stale_after), run.run_id
        )
        if overridden is not None:
            gate.record_override(txn, overridden, session, "resume")
        lease = new_lease(session, run.leader_epoch + 1)
        runs.claim(txn, lease)
        result = Takeover(lease)
        if resume:
            for task in txn.state.task_list():
                if task.status not in LIVE_TASK_STATUSES or tasks.waits_to_start(task):
                    continue
                if task.pid is not None and task.node is None:  # Ray ends a remote one
                    orphans.append((task.id, task.pid, task.attempt))
                tasks.interrupt(txn, task.id, "the leader stopped while it ran")
                result.requeued.append(task.id)
            txn.record(
                EventType.RUN_RESUMED,
                message=f"run resumed by {session}: {len(result.requeued)} task(s) queued again",
                data={"requeued": result.requeued},
            )
        write_lease(store.paths, lease)  # under the run lock: a second claimant sees it
        snapshot.remove_leftovers(*store.temp_folders())  # of the writers that are gone
    result.events_at = txn.events_at or 0
    result.stopped = stop_workers(store.run_id, orphans, state_dir=str(store.paths.root))
    return result


def _rerun_hint(run_id: str, status: RunStatus) -> str:
    if status is RunStatus.COMPLETED:
        return f"`crew rerun {run_id}` runs it again as a new run."
    return f"`crew rerun {run_id} --failed` runs what did not complete again, as a new run."


@contextmanager
def _naming_a_hung_leader(store: RunStore) -> Iterator[None]:
    """A run lock that stays busy while the lease is stale is most likely held by the hung
    leader being replaced (stopped mid-transaction): say which process, so it can be stopped."""
    try:
        yield
    except CrewTimeout as busy:
        stale_after = store.state().run.config.crew.leader_stale_after
        lease = read_lease(store.paths, stale_after=stale_after)
        if lease.state is not LeaseState.STALE or lease.leader is None:
            raise
        hung = lease.leader
        raise CrewTimeout(
            f"{busy.message} The run's last leader may be hung holding it: {lease.reason}.",
            hint=f"Stop that process (`kill {hung.pid}` on {hung.host}), then resume again.",
        ) from None
