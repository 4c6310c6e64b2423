"""Who is acting: the session recorded as a run's owner and checked by every mutating command,
and, for a command that runs inside a worker, the credentials that make it act as its task.

A person is whoever `--session`, else $CREW_SESSION_ID, else `<user>@<host>` says: sessions keep
people from acting on each other's runs by mistake, they are not passwords. A worker is told who
it is by the leader (CREW_RUN_ID, CREW_TASK_ID and the secret CREW_WORKER_TOKEN, whose hash the
run keeps); its commands act as `task:<taskId>`, and nothing it passes can make them act as
anyone else. Sessions starting with `task:` are reserved for workers.
"""

from __future__ import annotations

import contextlib
import getpass
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from crew import env
from crew.errors import Refused, UsageError
from crew.ids import (
    check_session,
    is_run_id,
    is_task_id,
    parse_worker_session,
    worker_session,
)
from crew.procs.liveness import host
from crew.registry import LEADER, EventData

#: What the leader gives every worker, all of which a worker's command needs to act as its task.
_WORKER_VARIABLES = (env.WORKER_TOKEN.name, env.RUN_ID.name, env.TASK_ID.name)


@dataclass(frozen=True)
class WorkerCredentials:
    """What the leader gave a worker: the run and task it works for, and its secret."""

    run_id: str
    task_id: str
    token: str
    #: The worker's crew home (its CREW_HOME), which holds its run.
    home: Path | None = None

    @property
    def names(self) -> frozenset[str]:
        """The sessions that name this worker: `task:<taskId>`, and `task:<taskId>@<runId>`
        (how any other run names it)."""
        return frozenset({worker_session(self.task_id), self.qualified})

    @property
    def qualified(self) -> str:
        return worker_session(self.task_id, self.run_id)

    def session_in(self, run_id: str) -> str:
        """The worker's session as run `run_id` names it."""
        return worker_session(self.task_id) if run_id == self.run_id else self.qualified


@dataclass(frozen=True)
class Actor:
    """Who acts: a session, and for a worker its credentials (checked against its run)."""

    session: str
    worker: WorkerCredentials | None = None
    #: The caller's own session, when --session named another one (recorded with what it does).
    default: str | None = None

    def name_in(self, run_id: str) -> str:
        """The session this actor acts as in run `run_id`."""
        return self.worker.session_in(run_id) if self.worker is not None else self.session

    def party_in(self, run_id: str) -> str:
        """Who a message this actor sends in run `run_id` is `from`: its task, for a worker of
        that run; else "leader", the party that delivers every message to a worker."""
        worker = self.worker
        return worker.task_id if worker is not None and worker.run_id == run_id else LEADER

    @property
    def owner_name(self) -> str:
        """The session a run this actor starts is owned by (a worker's names its run)."""
        return self.worker.qualified if self.worker is not None else self.session

    def stamp(self, run_id: str) -> dict[str, str]:
        """What every event this actor causes in run `run_id` records about who acted."""
        who = {EventData.SESSION.value: self.name_in(run_id)}
        if self.default is not None:
            who[EventData.DEFAULT_SESSION.value] = self.default
        return who


def as_actor(session: str | Actor) -> Actor:
    """An Actor from what a library caller passed: a session id, or an Actor already."""
    return session if isinstance(session, Actor) else Actor(check_session(session))


def current_actor(explicit: str | None = None, *, home: Path | None = None) -> Actor:
    """Who runs this command: the worker whose credentials its environment holds (or, when
    acting on `home`, the worker it runs below), else the person `explicit` (--session),
    $CREW_SESSION_ID or `<user>@<host>` names. Refused: a worker naming another session, and
    anyone else naming a worker's (`task:…`)."""
    if explicit is not None:
        check_session(explicit, "--session")
        parse_worker_session(explicit)
    from_env = env.SESSION.value()
    if from_env is not None:
        check_session(from_env, env.SESSION.name)
    worker = _credentials(os.environ)
    if worker is None and home is not None:
        worker = _inherited_credentials(home) or _group_credentials(home)
    if worker is not None:
        return _worker(worker, explicit, from_env)
    mine = from_env or _user_at_host()
    if from_env is None and not _is_session(mine):  # a user name no session id can be
        if explicit is None:
            check_session(mine, f"from {_user_source()}; set {env.SESSION.name} or --session")
        mine = explicit or mine  # not recorded as the default of a session named
    session = explicit if explicit is not None else mine
    reserved = parse_worker_session(session)
    if reserved is not None:
        source = "--session" if explicit is not None else env.SESSION.name
        raise Refused(
            f"Session {session!r} ({source}) is reserved: only the worker crew started for task "
            f"{reserved[0]} acts as it."
        )
    return Actor(session, default=mine if session != mine else None)


def _worker(worker: WorkerCredentials, explicit: str | None, from_env: str | None) -> Actor:
    """A worker's actor; a worker that names another session is refused."""
    own = worker_session(worker.task_id)
    for source, named in (("--session", explicit), (env.SESSION.name, from_env)):
        if named is not None and named not in worker.names:
            raise Refused(
                f"This command runs in the worker of task {worker.task_id} (run "
                f"{worker.run_id}), which acts as {own!r}: {source} cannot make it {named!r}."
            )
    return Actor(own, worker)


def _credentials(variables: Mapping[str, str]) -> WorkerCredentials | None:
    """A worker's credentials from an environment that holds them all, else None."""
    token, run_id, task_id = (variables.get(name) for name in _WORKER_VARIABLES)
    if not token or not run_id or not task_id:
        return None
    if not is_run_id(run_id):
        raise UsageError(f"{env.RUN_ID.name} is not a run id: {run_id!r}.")
    if not is_task_id(task_id):
        raise UsageError(f"{env.TASK_ID.name} is not a task id: {task_id!r}.")
    home = variables.get(env.HOME.name)
    return WorkerCredentials(run_id, task_id, token, Path(home) if home else None)


def _inherited_credentials(home: Path) -> WorkerCredentials | None:
    """The credentials of the nearest worker this command runs below that works on `home`: a
    command that dropped the worker's variables from its environment is still that worker, and
    so is one below a crew that worker runs in another home."""
    from crew.procs import inherited_environs

    for found in inherited_environs((*_WORKER_VARIABLES, env.HOME.name)):
        worker = _credentials(found)
        if worker is not None and worker.home is not None and _same_folder(worker.home, home):
            return worker
    return None


def _group_credentials(home: Path) -> WorkerCredentials | None:
    """The credentials of the worker whose cgroup this command runs in, read from a process of
    that group that was started with them: a command that left the worker's process tree and
    dropped its variables is still that worker. Refused if none of the group has them (the
    worker is gone, or cleared its own): it may not pass for a person."""
    from crew.procs import worker_environ
    from crew.procs.cgroup import own_worker_group

    mine = own_worker_group()
    if mine is None:
        return None
    for pid in sorted(mine.group.pids()):
        with contextlib.suppress(OSError, UsageError):  # unreadable, or not a worker's
            found = _credentials(worker_environ(pid) or {})
            if found is not None and (found.run_id, found.task_id) == (mine.run_id, mine.task_id):
                same = found.home is not None and _same_folder(found.home, home)
                return found if same else None
    raise Refused(
        f"This command runs in the worker of task {mine.task_id} (run {mine.run_id}; its "
        "cgroup), without that worker's credentials: it may act as no one.",
        hint="Run it from the worker itself, with the variables crew gave it.",
    )


def _same_folder(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _is_session(value: str) -> bool:
    try:
        check_session(value)
    except UsageError:
        return False
    return True


def _user_source() -> str:
    """Where the default session's user name came from (getpass's order), for its error."""
    names = ("LOGNAME", "USER", "LNAME", "USERNAME")
    return next((name for name in names if os.environ.get(name)), "the user database")


def _user_at_host() -> str:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    return f"{user}@{host()}"
