"""The leader lease: who leads a run, and whether that leader is still alive."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from enum import StrEnum

from crew import clock
from crew.errors import Corrupt
from crew.models import LeaderAdapter, LeaderInfo
from crew.paths import RunPaths
from crew.store import snapshot


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


def pid_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # it exists, owned by someone else
    return True


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
    # A pid means something only on its own host; elsewhere the heartbeat alone decides.
    if info.host == socket.gethostname() and not pid_exists(info.pid):
        return Lease(LeaseState.STALE, info, f"leader pid {info.pid} on {info.host} is gone")
    if age > stale_after:
        return Lease(
            LeaseState.STALE,
            info,
            f"leader pid {info.pid} on {info.host} last beat {clock.format_duration(age)} ago",
        )
    return Lease(LeaseState.ALIVE, info)
