"""Who runs a fast command, and whether its run's leader is alive: crew/session.py's and
crew/domain/lease.py's answers for the common case (a person; a leader that beats), and
Fallback for the rest (a worker's credentials, however they reach the command, are the full
command's to check)."""

from __future__ import annotations

import os
import time

from crew.fast.cmdline import Fallback
from crew.fast.runfiles import RunFiles
from crew.fast.shapes import as_crew_writes

#: crew/ids.py MAX_TEXT_ID_LENGTH.
MAX_TEXT_ID_LENGTH = 256
WORKER_SESSION_PREFIX = "task:"
#: The variables that make a command a worker's (crew/env.py): any of them, here or in an
#: ancestor's starting environment, sends the command to the full path.
WORKER_VARIABLES = ("CREW_WORKER_TOKEN", "CREW_RUN_ID", "CREW_TASK_ID")
_ANCESTORS = 64
#: How the cgroups crew makes for workers are named (crew/procs/cgroup.py PREFIX).
CGROUP_PREFIX = b"crew-"


class Session:
    """The session a person acts as, and their default one when --session names another."""

    __slots__ = ("default", "name")

    def __init__(self, name: str, default: str | None) -> None:
        self.name = name
        self.default = default

    def stamp(self) -> dict[str, str]:
        """What the events this session causes record about it (crew/session.py `stamp`)."""
        who = {"session": self.name}
        if self.default is not None:
            who["defaultSession"] = self.default
        return who


def session(explicit: str | None) -> Session:
    """The person running this command (Fallback for a worker, or a session to refuse)."""
    if any(os.environ.get(name) for name in WORKER_VARIABLES) or _below_a_worker():
        raise Fallback
    if _in_a_worker_group():
        raise Fallback
    from_env = os.environ.get("CREW_SESSION_ID") or None
    for value in (explicit, from_env):
        if value is not None and not plain_session(value):
            raise Fallback
    mine = from_env or f"{_user()}@{os.uname().nodename}"
    if not plain_session(mine):
        raise Fallback  # a user name no session id can be: the full command says so, or not
    name = explicit if explicit is not None else mine
    return Session(name, mine if name != mine else None)


def plain_session(value: str) -> bool:
    """Whether `value` is a person's session crew/ids.py takes (not a worker's)."""
    return plain_text_id(value) and not value.startswith(WORKER_SESSION_PREFIX)


def plain_text_id(value: str) -> bool:
    """Whether crew/ids.py takes `value` as a session id or an idempotency key: one line of
    printable UTF-8 text, with no space at either end."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return 0 < len(value) <= MAX_TEXT_ID_LENGTH and value.isprintable() and value == value.strip()


def _user() -> str:
    """getpass.getuser(), without importing it."""
    for name in ("LOGNAME", "USER", "LNAME", "USERNAME"):
        user = os.environ.get(name)
        if user:
            return user
    import pwd

    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return str(os.getuid())


def _in_a_worker_group() -> bool:
    """Whether this process is in a cgroup crew made for a worker (crew/procs/cgroup.py): it
    is that worker's, wherever it went in the process tree."""
    try:
        with open("/proc/self/cgroup", "rb") as handle:
            own = handle.read()
    except OSError:
        return False
    return any(
        line.startswith(b"0::") and line.rpartition(b"/")[2].startswith(CGROUP_PREFIX)
        for line in own.splitlines()
    )


def _below_a_worker() -> bool:
    """Whether an ancestor started with a worker's credentials (crew/procs
    `inherited_environs`): an ancestor that cannot be read counts as one."""
    pid = os.getppid()
    for _ in range(_ANCESTORS):
        if pid <= 1:
            return False
        try:
            with open(f"/proc/{pid}/environ", "rb") as handle:
                environ = b"\0" + handle.read()
            with open(f"/proc/{pid}/stat", "rb") as handle:
                parent = int(handle.read().rpartition(b")")[2].split()[1])
        except PermissionError:
            return True
        except (OSError, ValueError, IndexError):
            return False
        if any(b"\0" + name.encode() + b"=" in environ for name in WORKER_VARIABLES):
            return True
        pid = parent
    return False


# ----------------------------------------------------------------------------- the leader


ALIVE, STALE, ABSENT = "alive", "stale", "absent"


class Lease:
    """What crew/domain/lease.py `read_lease` says of a run's leader."""

    __slots__ = ("leader", "state")

    def __init__(self, state: str, leader: dict[str, object] | None) -> None:
        self.state = state
        self.leader = leader


def lease(files: RunFiles, stale_after: float) -> Lease:
    """The run's lease (Fallback if leader.json is unreadable: the full path says why)."""
    if not os.path.lexists(files.leader):
        return Lease(ABSENT, None)
    info = files.read_json(files.leader)
    if not as_crew_writes(info, "leader"):
        raise Fallback  # the models read it otherwise (a lease they cannot read is stale)
    pid, host, beat = info["pid"], info["host"], info["heartbeatAt"]
    if info.get("stoppedReason"):
        return Lease(STALE, info)
    if host == os.uname().nodename and not _alive(pid):
        return Lease(STALE, info)
    if seconds_since(beat) > stale_after:
        return Lease(STALE, info)
    return Lease(ALIVE, info)


def now() -> str:
    """crew/clock.py `now`: the time in UTC to the microsecond, as crew writes it (without
    importing `datetime`, which would cost a send a twentieth of its instructions)."""
    seconds, micros = divmod(time.time_ns() // 1000, 1_000_000)
    return f"{time.strftime('%Y-%m-%dT%H:%M:%S', time.gmtime(seconds))}.{micros:06d}Z"


#: Days before each month of a common year, and in each month.
_DAYS_BEFORE = (0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334)
_DAYS_IN = (31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
#: Days from 0001-01-01 to 1970-01-01 (`date(1970, 1, 1).toordinal() - 1`).
_EPOCH_DAYS = 719_162
#: Where a timestamp crew writes has its separators: `YYYY-MM-DDTHH:MM:SS.ffffffZ`.
_SEPARATORS = ((4, "-"), (7, "-"), (10, "T"), (13, ":"), (16, ":"), (19, "."), (26, "Z"))


def seconds_since(stamp: str) -> float:
    """How long ago a timestamp crew wrote was; Fallback for any other text (a date that does
    not exist too, as `datetime` refuses it)."""
    if len(stamp) != 27 or any(stamp[at] != sep for at, sep in _SEPARATORS):
        raise Fallback
    fields = (stamp[0:4], stamp[5:7], stamp[8:10], stamp[11:13], stamp[14:16], stamp[17:19])
    if not all(field.isascii() and field.isdigit() for field in (*fields, stamp[20:26])):
        raise Fallback
    year, month, day, hour, minute, second = map(int, fields)
    leap = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
    if not (year >= 1 and 1 <= month <= 12 and hour < 24 and minute < 60 and second < 60):
        raise Fallback
    if not 1 <= day <= _DAYS_IN[month - 1] + (month == 2 and leap):
        raise Fallback
    before = year - 1
    days = before * 365 + before // 4 - before // 100 + before // 400
    days += _DAYS_BEFORE[month - 1] + (month > 2 and leap) + day - 1 - _EPOCH_DAYS
    moment = days * 86_400 + hour * 3_600 + minute * 60 + second + int(stamp[20:26]) / 1e6
    return time.time() - moment


def _alive(pid: int) -> bool:
    """crew/procs `is_alive`: the pid exists and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            state = handle.read().rpartition(b")")[2].split()[0]
    except FileNotFoundError:
        return False
    except (OSError, IndexError):
        raise Fallback from None
    return state not in {b"Z", b"X"}
