"""The verbs that act on a run: respond, steer, follow-up, nudge, cancel, handoff, add.

Anyone calls them — a person at the command line, a CI job, a lead agent, the live view, and the
leader itself (automatic nudges and autoRespond answers go through the same verbs). Each passes
the gate (crew/domain/gate.py) under the run lock before anything is written, and returns a
result (crew/results.py). None of them needs a running leader: they write the run's files, and
the leader, when one runs, delivers what they wrote.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Required, TypedDict, Unpack

from crew import domain, ids
from crew.domain import budget, gate, mailbox, tasks
from crew.domain.gate import FOLLOW_UP, NUDGE, RESPOND, STEER, Verb
from crew.domain.lease import LeaseState, read_lease
from crew.errors import Refused, UsageError
from crew.models import MailboxMessage, Run, Task
from crew.procs import DEFAULT_GRACE
from crew.procs.stopping import stop_workers
from crew.registry import (
    LEADER,
    LIVE_TASK_STATUSES,
    ContactType,
    MessageData,
    MessageSource,
    RunStatus,
)
from crew.results.sending import Added, Cancelled, HandedOff, Sent
from crew.session import Actor, as_actor
from crew.store import secret_answers
from crew.store.runstore import RunStore
from crew.store.txn import Txn
from crew.text import clip, short

DEFAULT_NUDGE = "Please report your current status, blocker, or smallest next step."

#: Checks a verb makes of its own, once the gate has passed: returns data keys to record.
Check = Callable[[Txn, Task, str], dict[str, Any]]
#: Records the composed message (with whatever else changes with it).
Record = Callable[[Txn, MailboxMessage], None]


class Sender(TypedDict, total=False):
    """Who sends, and how: what every sending verb takes besides the task and the body."""

    #: Who acts: a session id, or an Actor (crew.session: a worker's carries its credentials).
    session: Required[str | Actor]
    #: Act on a run another session owns (recorded as ownership.overridden).
    force: bool
    #: Send at most once per key in the run: a retry returns the first message.
    idempotency_key: str | None
    #: The leader's epoch when the leader itself sends: a leader taken over writes nothing.
    epoch: int | None


def respond(
    store: RunStore,
    task_id: str,
    body: str,
    *,
    contact_id: str | None = None,
    source: str | None = None,
    **sender: Unpack[Sender],
) -> Sent:
    """Answer a waiting task's open question (or clear a flagged task): the task runs again.

    `contact_id` pins the question being answered: if the worker has since asked another one,
    the answer is refused instead of answering the wrong question.
    """

    def check(txn: Txn, task: Task, text: str) -> dict[str, Any]:
        return _answers(task, text, contact_id)

    def record(txn: Txn, message: MailboxMessage) -> None:
        question = txn.task(task_id).contact
        tasks.answer(txn, task_id, message)
        if question is not None and question.limit is not None:  # crew's own question
            budget.answered(txn, task_id, question, message)

    data: dict[str, Any] | None = {MessageData.SOURCE: source} if source else None
    return _send(store, RESPOND, task_id, body, sender, data=data, check=check, record=record)


def steer(store: RunStore, task_id: str, body: str, **sender: Unpack[Sender]) -> Sent:
    """Redirect a running or waiting task; delivered ahead of everything but answers."""
    return _send(store, STEER, task_id, body, sender)


def follow_up(store: RunStore, task_id: str, body: str, **sender: Unpack[Sender]) -> Sent:
    """Queue more work for a task; delivered when it is running and not waiting on a question."""
    return _send(store, FOLLOW_UP, task_id, body, sender)


def nudge(
    store: RunStore,
    task_id: str,
    body: str | None = None,
    *,
    source: MessageSource = MessageSource.NUDGE,
    **sender: Unpack[Sender],
) -> Sent:
    """Ask a task for a status report (default body: DEFAULT_NUDGE).

    The stall monitor's nudges (`source` MONITOR) count in the task's `nudges`.
    """

    def counted(txn: Txn, message: MailboxMessage) -> None:
        tasks.nudged(txn, task_id, message, f"nudge {task_id}: {short(message.body)}")

    text = DEFAULT_NUDGE if body is None else body
    data: dict[str, Any] = {MessageData.SOURCE: source.value}
    record = counted if source is MessageSource.MONITOR else None
    return _send(store, NUDGE, task_id, text, sender, data=data, record=record)


# Long: the gate's checks in order, then the write (and the secret answer's, undone on failure).
def _send(
    store: RunStore,
    verb: Verb,
    task_id: str,
    body: str,
    sender: Sender,
    *,
    data: dict[str, Any] | None = None,
    check: Check | None = None,
    record: Record | None = None,
) -> Sent:
    """The gate and the write that respond, steer, follow-up and nudge share."""
    actor, force = as_actor(sender["session"]), sender.get("force", False)
    idempotency_key = sender.get("idempotency_key")
    if idempotency_key is not None:
        ids.check_idempotency_key(idempotency_key)
    sealed_id: str | None = None  # a secret answer kept outside the run's files
    try:
        with domain.change(store, epoch=sender.get("epoch")) as txn:
            task = txn.task(task_id)
            overridden = gate.admit(txn, actor, verb.name, task_id=task_id, force=force)
            session = actor.name_in(txn.run.run_id)
            replayed = _replayed(txn, idempotency_key, verb, task_id, body)
            if replayed is not None:
                return replayed
            gate.check_live(txn.run)
            gate.check_status(task, verb)
            limits = txn.run.config.limits
            gate.check_body(body, limits.max_body_bytes)
            kept: dict[str, Any] = {MessageData.SESSION: session, **(data or {})}
            if check is not None:
                kept.update(check(txn, task, body))
            if idempotency_key is not None:
                kept[MessageData.IDEMPOTENCY_KEY] = idempotency_key
            dropped = gate.make_room(txn, task_id, verb.kind)
            if overridden is not None:
                gate.record_override(txn, overridden, session, verb.name, task_id=task_id)
            sender_party = actor.party_in(txn.run.run_id)
            sealed = bool(kept.get(MessageData.SECRET))  # the run's files get a stand-in
            stored = secret_answers.REDACTED if sealed else body
            message = mailbox.compose(txn, verb.kind, task_id, stored, kept, sender=sender_party)
            if sealed:  # kept before the commit point, so an answer taken is never without it
                secret_answers.keep(store.paths, message.id, body)
                sealed_id = message.id
            if record is not None:
                record(txn, message)
                message = mailbox.inbound(txn, message.id) or message  # crew may take it at once
            else:
                by = f" by {session}" if message.from_ != LEADER else ""
                mailbox.post(txn, message, verb.event, f"{verb.name} {task_id}{by}: {short(body)}")
            waiting = mailbox.pending_count(txn, task_id, gate.pressure_class(verb.kind))
            run = txn.run
    except BaseException:  # not committed: the secret answer goes with it
        if sealed_id is not None:
            secret_answers.forget(store.paths, sealed_id)
        raise
    return Sent(
        run.run_id,
        verb.noun,
        message,
        dropped=dropped,
        pending=waiting,
        warn_pending=limits.warn_pending,
        max_pending=gate.limit_for(txn, verb.kind) or 0,
        overridden=overridden,
        leader=_leader(store, run),
    )


def _replayed(txn: Txn, key: str | None, verb: Verb, task_id: str, body: str) -> Sent | None:
    """What an earlier request with this idempotency key sent, if it was this same request."""
    prior = gate.replay(txn, key, verb, task_id, body) if key is not None else None
    if prior is None:
        return None
    waiting = mailbox.pending_count(txn, task_id, gate.pressure_class(verb.kind))
    leader = _leader(txn.store, txn.run)
    return Sent(txn.run.run_id, verb.noun, prior, replayed=True, pending=waiting, leader=leader)


def _answers(task: Task, text: str, contact_id: str | None) -> dict[str, Any]:
    """The question an answer closes (the data keys that name it), after checking the answer
    fits it: the pinned question is still the open one, a selection is one of the options."""
    contact = task.contact
    if contact_id is not None and (contact is None or contact.id != contact_id):
        current = f"its open question is {contact.id}" if contact else "it has no open question"
        raise Refused(
            f"Task {task.id} is not waiting on {clip(contact_id, 65)}: {current}.",
            hint="The question was answered or replaced; look at `crew status`.",
        )
    if contact is None:
        return {}
    selection = contact.type is ContactType.NEED_SELECTION and contact.options
    if selection and not contact.other and text not in contact.options:
        raise UsageError(
            f"{text!r} is not one of the options of question {contact.id}: "
            f"{', '.join(contact.options)}."
        )
    found: dict[str, Any] = {
        MessageData.CONTACT_ID: contact.id,
        MessageData.CONTACT_TYPE: contact.type.value,
    }
    if contact.secret:
        found[MessageData.SECRET] = True
    return found


def cancel(
    store: RunStore,
    task_id: str | None = None,
    *,
    session: str | Actor,
    force: bool = False,
    grace: float = DEFAULT_GRACE,
) -> Cancelled:
    """Cancel one task or the whole run, reject what was pending for it, stop its workers."""
    targets: list[tuple[str, int, int | None]] = []
    actor = as_actor(session)
    with domain.change(store) as txn:
        task = txn.task(task_id) if task_id is not None else None
        overridden = gate.admit(txn, actor, "cancel", task_id=task_id, force=force)
        session = actor.name_in(txn.run.run_id)
        result = Cancelled(txn.run.run_id, task_id, run_status=txn.run.status)
        if txn.run.status.terminal:
            result.already = f"run {txn.run.run_id} already ended ({txn.run.status})"
            return result
        if task is not None and task.status.terminal:
            result.already = f"task {task.id} already ended ({task.status})"
            return result
        if overridden is not None:
            gate.record_override(txn, overridden, session, "cancel", task_id=task_id)
        from crew.domain import adding  # here: the sending verbs never load it

        reason = f"cancelled by {session}"
        chosen = [task] if task is not None else txn.state.task_list()
        # What a cancelled task spawned is cancelled with it: nothing is left to take its result.
        spawned = adding.descendants(txn.state.tasks, task.id) if task is not None else []
        for each in [*chosen, *(txn.state.tasks[i] for i in spawned)]:
            if each.status.terminal:
                continue
            # A worker on a Ray node (`node`) is another machine's pid: its leader stops it.
            if each.status in LIVE_TASK_STATUSES and each.pid is not None and each.node is None:
                targets.append((each.id, each.pid, None))
            why = reason if each is task or task is None else f"parent {task.id} {reason}"
            tasks.cancel(txn, each.id, why, message=f"task {each.id} {why}")
        if task is None:  # the whole run: it ends cancelled, not failed
            from crew.domain import runs  # here: the sending verbs never load run creation

            mailbox.reject_undeliverable(txn, tasks.ended(txn))
            runs.end(txn, RunStatus.CANCELLED)
        domain.settle(txn)
        result.tasks = [t.id for t in tasks.ended(txn)]
        result.rejected = mailbox.rejected_in(txn)
        result.overridden = overridden
        result.run_status = txn.run.status
    here = str(store.paths.root)
    result.stopped = stop_workers(store.run_id, targets, state_dir=here, grace=grace)
    return result


def handoff(
    store: RunStore, new_owner: str, *, session: str | Actor, force: bool = False
) -> HandedOff:
    """Transfer ownership of a run to another session (the owner, or anyone with --force).

    A worker's session names one of the run's tasks (`task:<taskId>`) or a task of another run
    (`task:<taskId>@<runId>`): that worker then owns the run.
    """
    ids.check_session(new_owner, "SESSION")
    worker = ids.parse_worker_session(new_owner)
    actor = as_actor(session)
    with domain.change(store) as txn:
        if worker is not None and worker[1] in {None, txn.run.run_id}:
            new_owner = ids.worker_session(txn.task(worker[0]).id)  # NotFound: no such task
        overridden = gate.admit(txn, actor, "handoff", force=force)
        session = actor.name_in(txn.run.run_id)
        gate.check_live(txn.run)
        previous = txn.run.owner_session_id
        if previous == new_owner:
            return HandedOff(txn.run.run_id, previous, new_owner)
        if overridden is not None:
            gate.record_override(txn, overridden, session, "handoff")
        from crew.domain import runs

        runs.hand_over(txn, new_owner, by=session)
        return HandedOff(txn.run.run_id, previous, new_owner, overridden)


def add_task(
    store: RunStore,
    *,
    agent: str,
    prompt: str,
    task_id: str | None = None,
    depends_on: Sequence[str] = (),
    session: str | Actor,
    force: bool = False,
    idempotency_key: str | None = None,
    parent: str | None = None,
    title: str | None = None,
) -> Added:
    """Add a task to a run that has not ended: queued, it starts once its dependencies complete
    (a live leader starts it; a leaderless run, on `crew resume`). A worker of the run needs its
    agent's `may = ["spawn"]`, and what it adds is recorded as its task's child (`parent`)."""
    from crew.domain import adding  # here: the sending verbs never load it

    actor = as_actor(session)
    if idempotency_key is not None:
        ids.check_idempotency_key(idempotency_key)
    worker = actor.worker
    if parent is None and worker is not None and worker.run_id == store.run_id:
        parent = worker.task_id  # a worker's task is the parent of what it adds
    deps = tuple(dict.fromkeys(depends_on))  # a task named twice is one dependency
    request = adding.NewTask(agent, prompt, task_id, deps, parent, title)
    adding.check_request(request)
    with domain.change(store) as txn:
        overridden = gate.admit(txn, actor, "add", force=force)
        who = actor.name_in(txn.run.run_id)
        if idempotency_key is not None:
            prior = adding.replay(txn, idempotency_key, request)
            if prior is not None:
                return Added(txn.run.run_id, prior, replayed=True, leader=_leader(store, txn.run))
        gate.check_live(txn.run, "tasks")
        task = adding.add(txn, request, key=idempotency_key, session=who)
        if overridden is not None:
            gate.record_override(txn, overridden, who, "add", task_id=task.id)
    task = txn.state.task(task.id)  # as settled: cancelled if a dependency had failed
    return Added(txn.run.run_id, task, overridden=overridden, leader=_leader(store, txn.run))


def _leader(store: RunStore, run: Run) -> LeaseState:
    return read_lease(store.paths, stale_after=run.config.crew.leader_stale_after).state
