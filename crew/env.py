"""Every environment variable crew reads or sets, in one registry.

The table in docs/exit-codes.md is generated from it. No `CREW_*` name is spelled anywhere else
in the code: read a variable through its entry here.
"""

from __future__ import annotations

import os
from enum import StrEnum
from typing import NamedTuple

_OFF = frozenset({"", "0", "false", "no", "off"})


class Scope(StrEnum):
    """Who sets a variable."""

    USER = "you"
    LEADER = "the leader, for each worker"
    NOTIFY = "the leader, for each [[notify]] command"


class Variable(NamedTuple):
    """One environment variable: its name, who sets it, and what it does. (A named tuple, not a
    dataclass: a fast command that waits imports this module, and `dataclasses` costs it ~6 ms.)"""

    name: str
    #: Who sets it: you, the leader for each worker, or both (CREW_HOME).
    scopes: frozenset[Scope]
    meaning: str

    def value(self) -> str | None:
        """The variable's value, or None when it is unset or empty."""
        return os.environ.get(self.name) or None

    def enabled(self, *, default: bool = False) -> bool:
        """A switch: on unless unset (then `default`) or one of 0, false, no, off."""
        raw = os.environ.get(self.name)
        if raw is None:
            return default
        return raw.strip().lower() not in _OFF


HOME = Variable(
    "CREW_HOME",
    frozenset({Scope.USER, Scope.LEADER, Scope.NOTIFY}),
    "the crew home (`.crew` folder) to use, instead of searching upwards from the current folder "
    "(a worker gets its run's home, so its own `crew` commands reach its run)",
)
SESSION = Variable(
    "CREW_SESSION_ID",
    frozenset({Scope.USER, Scope.LEADER}),
    "who is acting (default `<user>@<host>`); runs are owned by the session that started them. "
    "A worker gets `task:<taskId>`: its own `crew` commands act as its task, not as you",
)
FSYNC = Variable(
    "CREW_FSYNC",
    frozenset({Scope.USER}),
    "`0` stops fsyncing appends and snapshots (throw-away runs, benchmarks)",
)
LOCK_TIMEOUT = Variable(
    "CREW_LOCK_TIMEOUT",
    frozenset({Scope.USER}),
    "seconds to wait for a run's lock before giving up with exit 3 (default 10; a duration such "
    "as `500ms` works too; a value that is not a finite number from 0 up is a usage error, exit 2)",
)
FORCE_POLLING = Variable(
    "CREW_FORCE_POLLING",
    frozenset({Scope.USER}),
    "`1` watches files by polling their status, for filesystems without file events",
)
DEBUG = Variable("CREW_DEBUG", frozenset({Scope.USER}), "`1` prints tracebacks")
FAST = Variable(
    "CREW_FAST",
    frozenset({Scope.USER}),
    "`0` turns off the fast path of `status`, `runs`, `mailbox`, `steer`, `follow-up`, `nudge`, "
    "`respond`, `logs`, `events`, `wait`, `schema`, `--version`, `add`, `handoff`, `cancel`, "
    "`rm` and `prune` (the same command without typer and pydantic; the last five in their "
    "common case), of `doctor` (of a sound run, without pydantic either) and of `validate`, "
    "`init`, `run`, `resume` and `rerun` (without typer); see docs/design.md",
)
SECRETS_DIR = Variable(
    "CREW_SECRETS_DIR",
    frozenset({Scope.USER}),
    "where answers to secret questions wait for the leader, outside the run's files (default "
    "`/dev/shm/crew-secrets-<uid>`, a tmpfs); an absolute path to a folder only you may read",
)
FAULT = Variable(
    "CREW_FAULT",
    frozenset({Scope.USER}),
    "crash tests only: kill the process at a named write (see crew/faults.py)",
)
RUN_ID = Variable(
    "CREW_RUN_ID",
    frozenset({Scope.LEADER, Scope.NOTIFY}),
    "the run the worker belongs to (a notify command: the run of the event)",
)
TASK_ID = Variable(
    "CREW_TASK_ID",
    frozenset({Scope.LEADER, Scope.NOTIFY}),
    "the task the worker runs (a notify command: the event's task; unset for an event of the "
    "whole run)",
)
ATTEMPT = Variable(
    "CREW_ATTEMPT", frozenset({Scope.LEADER}), "which attempt of the task this is (1, 2, …)"
)
STATE_DIR = Variable(
    "CREW_STATE_DIR",
    frozenset({Scope.LEADER, Scope.NOTIFY}),
    "the run's folder (`state/runs/<runId>`)",
)
CHECKPOINT = Variable(
    "CREW_CHECKPOINT",
    frozenset({Scope.LEADER}),
    "the file holding the last checkpoint an earlier attempt of the task saved (JSON), when one "
    "did; unset otherwise",
)
PROTOCOL = Variable("CREW_PROTOCOL", frozenset({Scope.LEADER}), "the worker protocol version: `1`")
WORKER_TOKEN = Variable(
    "CREW_WORKER_TOKEN",
    frozenset({Scope.LEADER}),
    "the secret that makes the worker's `crew` commands count as its task's (the run keeps only "
    "its hash); new for every attempt",
)
EVENT_TYPE = Variable(
    "CREW_EVENT_TYPE",
    frozenset({Scope.NOTIFY}),
    "the type of the event the command is run for (the whole event is on its stdin, as JSON)",
)

VARIABLES: tuple[Variable, ...] = (
    HOME,
    SESSION,
    FSYNC,
    LOCK_TIMEOUT,
    FORCE_POLLING,
    DEBUG,
    FAST,
    SECRETS_DIR,
    FAULT,
    RUN_ID,
    TASK_ID,
    ATTEMPT,
    STATE_DIR,
    CHECKPOINT,
    PROTOCOL,
    WORKER_TOKEN,
    EVENT_TYPE,
)

#: The variables the leader sets for each worker: what makes a process one of a task's.
FOR_WORKERS = frozenset(v.name for v in VARIABLES if Scope.LEADER in v.scopes)
