"""The leader lease: who leads a run, and whether that leader is still alive."""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass
from enum import StrEnum

from crew import clock
from crew.errors import Corrupt, Refused, StoreError
from crew.models import LeaderAdapter, LeaderInfo
from crew.paths import RunPaths
from crew.procs import is_alive
from crew.procs.liveness import host
from crew.store import snapshot
from crew.store.files import make_dirs

#: The size leader.json is padded to: room to write it again in place (see write_lease).
LEASE_ROOM = 1024


class LeaseState(StrEnum):
    ALIVE = "alive"
    STALE = "stale"  # the pid is gone, or its heartbeat is older than leaderStaleAfter
    ABSENT = "absent"  # no leader has ever written .runtime/leader.json (or it was removed)


@dataclass(frozen=True)
class Lease:
    state: LeaseState
    leader: LeaderInfo | None
    #: Why a lease is stale, in words.
    reason: str = ""


def read_lease(paths: RunPaths, *, stale_after: float) -> Lease:
    """The lease of a run: ALIVE only while the pid exists and its heartbeat is fresh."""
    try:
        info = snapshot.load(paths.leader, LeaderAdapter)
    except FileNotFoundError:
        return Lease(LeaseState.ABSENT, None)
    except Corrupt:
        return Lease(LeaseState.STALE, None, "its leader.json is unreadable")
    try:
        age = clock.seconds_since(info.heartbeat_at)
    except ValueError:
        return Lease(LeaseState.STALE, info, "its heartbeat time is unreadable")
    if info.stopped_reason:
        return Lease(
            LeaseState.STALE,
            info,
            f"leader pid {info.pid} on {info.host} stopped: {info.stopped_reason}",
        )
    # A pid means something only on its own host; elsewhere the heartbeat alone decides.
    if info.host == host() and not is_alive(info.pid):
        return Lease(LeaseState.STALE, info, f"leader pid {info.pid} on {info.host} is gone")
    if age > stale_after:
        return Lease(
            LeaseState.STALE,
            info,
            f"leader pid {info.pid} on {info.host} last beat {clock.format_duration(age)} ago",
        )
    return Lease(LeaseState.ALIVE, info)


def refuse_if_led(lease: Lease, run_id: str) -> None:
    """A second leader is refused while the first is alive (exit 4), naming it."""
    if lease.state is LeaseState.ALIVE and lease.leader is not None:
        leader = lease.leader
        raise Refused(
            f"Run {run_id} is already led by pid {leader.pid} on {leader.host} "
            f"(session {leader.session}) since {leader.started_at}.",
            hint="Stop that leader first; a leader that stops beating for "
            "leaderStaleAfter counts as gone.",
        )


def write_lease(paths: RunPaths, info: LeaderInfo) -> None:
    """Write .runtime/leader.json (volatile: no fsync), through its spare: a heartbeat a second
    creates no file and frees none (crew/store/snapshot.py `write_by_twin`).

    Only the leader that holds the lease, or one claiming it under the run lock, writes it. It
    is padded with spaces to LEASE_ROOM bytes, so that on a full disk, where no new file can be
    written, the leader can still write its heartbeat in place: in the spare, or, before there
    is one, over the lease itself.
    """
    make_dirs(paths.runtime_dir)
    data = snapshot.dump_model(info)
    data = data[:-1] + b" " * (LEASE_ROOM - len(data)) + data[-1:]
    try:
        snapshot.write_by_twin(paths.leader, data, paths.leader_spare, durable=False)
    except StoreError as error:
        if error.errno not in {errno.ENOSPC, errno.EDQUOT} or not snapshot.overwrite(
            paths.leader, data
        ):
            raise


def new_lease(session: str, epoch: int) -> LeaderInfo:
    at = clock.now()
    return LeaderInfo(
        pid=os.getpid(),
        host=host(),
        session=session,
        epoch=epoch,
        started_at=at,
        heartbeat_at=at,
    )


def beat(paths: RunPaths, info: LeaderInfo) -> LeaderInfo:
    """Refresh the heartbeat."""
    info = info.model_copy(update={"heartbeat_at": clock.now()})
    write_lease(paths, info)
    return info


def stop(paths: RunPaths, info: LeaderInfo, reason: str) -> LeaderInfo:
    """Say in leader.json that this leader has stopped leading, and why (if it is still ours)."""
    stopped = info.model_copy(update={"stopped_reason": reason, "heartbeat_at": clock.now()})
    try:
        current = snapshot.load(paths.leader, LeaderAdapter)
    except (FileNotFoundError, Corrupt):
        return info
    if current.pid == info.pid and current.epoch == info.epoch:
        write_lease(paths, stopped)
    return stopped


def release(paths: RunPaths, info: LeaderInfo) -> None:
    """Remove leader.json, and its spare, if it is still ours (a leader that ended the run
    cleanly)."""
    try:
        current = snapshot.load(paths.leader, LeaderAdapter)
    except (FileNotFoundError, Corrupt):
        return
    if current.pid == info.pid and current.epoch == info.epoch:
        paths.leader.unlink(missing_ok=True)
        paths.leader_spare.unlink(missing_ok=True)
