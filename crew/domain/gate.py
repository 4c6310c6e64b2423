"""The gate: what every change someone asks for must pass, under the run lock, before anything
is written. Checked in this order (SPEC §5):

1. the run exists (exit 5), and the task (exit 5);
2. the caller may act on the run (exit 4): a person owns it, or forces it, which is recorded; a
   worker acts on its own run as its task, within what its agent's `may` allows (below);
3. an idempotency key already used for the same request replays its first result (exit 0);
4. the run has not ended (exit 4);
5. the verb's own precondition: the task's status (exit 4);
6. the body is not empty and fits the size limit (exit 2);
7. backpressure: beyond the limit, the oldest pending message of the same class is dropped.

A refused request writes nothing.

Workers (a command whose environment holds the credentials the leader gave a worker) act as
`task:<taskId>`, once their secret matches the hash the task records and the task is live. On
their own run, any worker may steer, follow up and nudge any task and cancel its own; answering
questions, cancelling other tasks or the run, handing the run over, adding tasks (`spawn`) and
--force need its agent's `may`. A worker may act on another run only if that run is owned by it
(`task:<taskId>@<runId>`).
"""

from __future__ import annotations

from dataclasses import dataclass

from crew.domain import mailbox
from crew.errors import NotFound, Refused, UsageError
from crew.ids import token_hash
from crew.models import MailboxMessage, Run, Task
from crew.paths import Home
from crew.registry import (
    LIVE_TASK_STATUSES,
    EventType,
    MessageData,
    MessageKind,
    TaskStatus,
    WorkerRight,
)
from crew.session import Actor, WorkerCredentials
from crew.store.runstore import RunStore
from crew.store.txn import Txn


@dataclass(frozen=True)
class Verb:
    """What distinguishes one sending verb from another."""

    name: str  # as typed on the command line
    noun: str  # what it sends, in words
    kind: MessageKind
    event: EventType
    allowed: frozenset[TaskStatus]
    needs: str  # the precondition, in words, for the refusal message


RESPOND = Verb(
    "respond",
    "answer",
    MessageKind.RESPOND,
    EventType.TASK_RESPONDED,
    frozenset({TaskStatus.WAITING, TaskStatus.NEEDS_REVIEW}),
    "waiting for an answer (or flagged needs_review)",
)
STEER = Verb(
    "steer",
    "steer",
    MessageKind.STEER,
    EventType.AGENT_STEERED,
    LIVE_TASK_STATUSES,
    "running or waiting",
)
FOLLOW_UP = Verb(
    "follow-up",
    "follow-up",
    MessageKind.FOLLOW_UP,
    EventType.AGENT_FOLLOWED_UP,
    frozenset({TaskStatus.QUEUED, *LIVE_TASK_STATUSES}),
    "not finished",
)
NUDGE = Verb(
    "nudge",
    "nudge",
    MessageKind.NUDGE,
    EventType.AGENT_NUDGED,
    LIVE_TASK_STATUSES,
    "running or waiting",
)

#: Kinds that share a backpressure limit: steers and nudges together, follow-ups alone.
_CLASSES = (
    frozenset({MessageKind.STEER, MessageKind.NUDGE}),
    frozenset({MessageKind.FOLLOW_UP}),
)


#: What a worker needs to do something to its own run beyond steering, following up and
#: nudging (None: any worker may), and that act in words: verb -> (right, act).
_WORKER_NEEDS: dict[str, tuple[WorkerRight, str]] = {
    "respond": (WorkerRight.RESPOND, "answer questions"),
    "cancel": (WorkerRight.CANCEL, "cancel another task"),
    "cancel run": (WorkerRight.CANCEL, "cancel the whole run"),
    "handoff": (WorkerRight.HANDOFF, "hand the run over"),
    "add": (WorkerRight.SPAWN, "add tasks"),
    "resume": (WorkerRight.FORCE, "lead the run"),
}


def admit(
    txn: Txn, actor: Actor, verb: str, *, task_id: str | None = None, force: bool = False
) -> str | None:
    """Let `actor` do `verb` (to `task_id`, or to the whole run) or refuse it (exit 4), and mark
    the transaction's events with who acted. Returns the owner a --force overrides, if any (the
    caller records it with `record_override` once every other check has passed)."""
    overridden = _judge(txn, actor, verb, task_id, force)
    txn.caused_by(actor.stamp(txn.run.run_id))
    return overridden


def _judge(txn: Txn, actor: Actor, verb: str, task_id: str | None, force: bool) -> str | None:
    run, worker = txn.run, actor.worker
    if worker is None:
        return check_owner(run, actor.session, force)
    if worker.run_id != run.run_id:
        if run.owner_session_id != worker.qualified:
            raise Refused(
                f"Task {worker.task_id} is a worker of run {worker.run_id}, not of run "
                f"{run.run_id}: it may act there only if that run's owner hands it over with "
                f"`crew handoff {run.run_id} {worker.qualified}`."
            )
        check_worker(worker, txn.store.paths.home)
        return None
    task = _verified(txn.state.tasks.get(worker.task_id), worker)
    if run.owner_session_id in worker.names:
        return None  # the run was handed to this worker: it is the owner
    if verb == "cancel" and task_id is None:
        verb = "cancel run"
    needs = None if verb == "cancel" and task_id == worker.task_id else _WORKER_NEEDS.get(verb)
    if needs is None:
        return None
    right, act = needs
    may = run.config.agents[task.agent].may
    if right is not WorkerRight.FORCE and right in may:
        return None
    if force and WorkerRight.FORCE in may:
        return run.owner_session_id
    only = "only with --force where" if right is WorkerRight.FORCE else "only where"
    raise Refused(
        f"Task {task.id} is a worker of run {run.run_id}, and a worker may {act} {only} "
        f'crew.toml allows it: add "{right}" to `may` in [agents.{task.agent}].',
        hint="Its agent may use --force: pass it to act anyway (recorded)."
        if WorkerRight.FORCE in may and not force
        else None,
    )


def check_worker(worker: WorkerCredentials, home: Home) -> None:
    """Refuse credentials that are not those of a live worker of their run (read from
    `worker.home`, else `home`): a stale, copied or made-up CREW_WORKER_TOKEN."""
    own_home = Home(worker.home) if worker.home is not None else home
    try:
        task = RunStore(own_home.run(worker.run_id)).state().tasks.get(worker.task_id)
    except NotFound:
        task = None
    _verified(task, worker)


def _verified(task: Task | None, worker: WorkerCredentials) -> Task:
    """The worker's task, once its secret matches the task's record and the task is live."""
    import hmac  # here: only a worker's command checks credentials

    expected = task.token_hash if task is not None else None
    if (
        task is None
        or expected is None
        or not hmac.compare_digest(expected, token_hash(worker.token))
    ):
        raise Refused(
            f"This command's worker credentials (CREW_WORKER_TOKEN) are not those of the current "
            f"worker of task {worker.task_id} of run {worker.run_id}."
        )
    if task.status not in LIVE_TASK_STATUSES:
        raise Refused(
            f"Task {task.id} of run {worker.run_id} is {task.status}: its worker may no longer "
            "act on runs."
        )
    return task


def check_owner(run: Run, session: str, force: bool) -> str | None:
    """Refuse a session that does not own the run, unless forced; returns the overridden owner."""
    if run.owner_session_id == session:
        return None
    if not force:
        raise Refused(
            f"Run {run.run_id} is owned by session {run.owner_session_id!r}, and you are "
            f"session {session!r}.",
            hint="Use --force to act anyway (it is recorded), or ask the owner to "
            f"`crew handoff {run.run_id} {session}`.",
        )
    return run.owner_session_id


def record_override(
    txn: Txn, owner: str, session: str, verb: str, *, task_id: str | None = None
) -> None:
    """`session` acted with --force on a run `owner` owns: say so in the event log."""
    txn.record(
        EventType.OWNERSHIP_OVERRIDDEN,
        task_id=task_id,
        message=f"{session} used --force on a run owned by {owner} ({verb})",
        data={"owner": owner, "session": session, "verb": verb},
    )


def check_live(run: Run, what: str = "messages") -> None:
    """Refuse a run that has ended (it takes no more `what`)."""
    if run.status.terminal:
        raise Refused(f"Run {run.run_id} has ended ({run.status}): it takes no more {what}.")


def check_status(task: Task, verb: Verb) -> None:
    """Refuse a task whose status the verb cannot act on."""
    if verb is RESPOND and task.waiting_for and task.contact is None:
        raise Refused(
            f"Task {task.id} is waiting for its task(s) {', '.join(task.waiting_for)}, not for "
            "an answer: it asked nothing.",
            hint="It runs again once they end; `crew steer` or `crew follow-up` reaches it.",
        )
    if task.status in verb.allowed:
        return
    hint = None
    if task.status is TaskStatus.QUEUED and verb is not FOLLOW_UP:
        hint = "It has not started yet; `crew follow-up` queues work for it."
    elif task.status is TaskStatus.RUNNING and verb is RESPOND:
        hint = (
            "It asks nothing now (a question it asked was answered, by someone else perhaps, or "
            "taken back); `crew steer` redirects a running task."
        )
    elif task.status.terminal:
        hint = "It has finished; `crew rerun RUN TASK` runs it again in a new run."
    raise Refused(
        f"Task {task.id} is {task.status}: {verb.name} needs a task that is {verb.needs}.",
        hint=hint,
    )


def check_body(body: str, limit: int) -> str:
    """A body must have some text and fit the size limit (exit 2 otherwise)."""
    if not body.strip():
        raise UsageError("The message body is empty.")
    try:
        size = len(body.encode("utf-8"))
    except UnicodeEncodeError:
        raise UsageError("The message body is not valid UTF-8 text.") from None
    if size > limit:
        raise UsageError(
            f"The message body is {size} bytes; the limit is {limit} bytes.",
            hint="Write the content to a file and send its path instead.",
        )
    return body


def replay(txn: Txn, key: str, verb: Verb, task_id: str, body: str) -> MailboxMessage | None:
    """The message an earlier request with this idempotency key sent, if it was the same
    request (None if the key is new); a different request under the same key is refused."""
    prior = mailbox.with_key(txn, key)
    if prior is None:
        added = next((t for t in txn.state.task_list() if t.idempotency_key == key), None)
        if added is not None:  # keys share one namespace per run (crew/domain/adding.py)
            raise Refused(
                f"Idempotency key {key!r} was already used to add task {added.id}.",
                hint="Use a new key for a new message.",
            )
        return None
    # A secret answer is not kept, so a retry of one cannot be compared: its key decides.
    same_body = prior.body == body or bool((prior.data or {}).get(MessageData.SECRET))
    if prior.kind is not verb.kind or prior.task_id != task_id or not same_body:
        same_request = prior.kind is verb.kind and prior.task_id == task_id
        raise Refused(
            f"Idempotency key {key!r} was already used for a {prior.kind} to {prior.task_id} "
            f"({prior.id}){' with a different body' if same_request else ''}.",
            hint="Use a new key for a new message.",
        )
    return prior


def pressure_class(kind: MessageKind) -> frozenset[MessageKind]:
    """The kinds whose pending messages count against the same limit as `kind`."""
    return next((c for c in _CLASSES if kind in c), frozenset({kind}))


def limit_for(txn: Txn, kind: MessageKind) -> int | None:
    """How many messages of `kind`'s class may wait for a task (None: no limit)."""
    limits = txn.run.config.limits
    if kind is MessageKind.FOLLOW_UP:
        return limits.max_pending_follow_ups
    if kind in {MessageKind.STEER, MessageKind.NUDGE}:
        return limits.max_pending_steers
    return None  # answers are never dropped


def make_room(txn: Txn, task_id: str, kind: MessageKind) -> list[MailboxMessage]:
    """Backpressure: drop the oldest pending messages of `kind`'s class beyond the limit."""
    cap = limit_for(txn, kind)
    if cap is None:
        return []
    return mailbox.drop_oldest(txn, task_id, pressure_class(kind), cap)
