"""A task's life: every change of a task is made here, over a transaction, and every change of
status is checked against the transition table in crew.registry.

    queued -> running -> completed
                      -> waiting -> running         (answered, or the question withdrawn)
                      -> needs_review -> running    (a person answers or clears the flag)
                      -> failed, or queued again    (a new attempt, while attempts are left)
    any live status -> cancelled

A queued task whose dependency failed or was cancelled is cancelled with it.
"""

from __future__ import annotations

from typing import Any

from crew.config import CrewConfig, TaskConfig
from crew.domain import mailbox
from crew.errors import Refused
from crew.models import Checkpoint, MailboxMessage, SupervisorContact, Task
from crew.protocol import MAX_CHECKPOINT
from crew.registry import (
    LIVE_TASK_STATUSES,
    TASK_STATUS_EVENT,
    EventData,
    EventType,
    TaskStatus,
    can_transition,
)
from crew.store.txn import Txn
from crew.text import first_line, short

#: The changes that close a task's open question (if it has one).
_NO_QUESTION: dict[str, Any] = {"contact": None, "waiting_since": None}
#: A task with an open question: waiting for its answer, or flagged for waiting too long.
_ASKING = frozenset({TaskStatus.WAITING, TaskStatus.NEEDS_REVIEW})
#: A dependency that ends in one of these can never complete: its dependents are cancelled.
_BLOCKING_ENDS = frozenset({TaskStatus.FAILED, TaskStatus.CANCELLED})
#: The statuses a transaction must give a task before a dependent may need cancelling.
_CAN_BLOCK = _BLOCKING_ENDS | {TaskStatus.QUEUED}


def live_attempt(task: Task, attempt: int) -> bool:
    """Whether `attempt` is the task's, and live: neither ended nor moved on to another."""
    return task.status in LIVE_TASK_STATUSES and task.attempt == attempt


def new_task(config: CrewConfig, task: TaskConfig) -> Task:
    """The initial state of a task defined in crew.toml."""
    return Task(
        id=task.id,
        agent=task.agent,
        title=task.title or first_line(task.prompt) or task.id,
        prompt=task.prompt,
        status=TaskStatus.QUEUED,
        depends_on=list(task.depends_on),
        attempt=0,
        max_attempts=config.max_attempts_for(task),
    )


def add(txn: Txn, message: str, **fields: Any) -> Task:
    """A task added to the run as it runs (crew.domain.adding checked it): queued."""
    task = Task(status=TaskStatus.QUEUED, added_at=txn.at, **fields)
    txn.record(EventType.TASK_QUEUED, message=message, task=task)
    return task


# ----------------------------------------------------------------------------- the worker's life


def start(
    txn: Txn, task_id: str, *, attempt: int, pid: int | None, token_hash: str | None = None
) -> Task:
    """The worker of a new attempt started, holding the secret whose hash is `token_hash` (a
    remote worker's pid and node are known once it is placed: `placed`)."""
    where = f"pid {pid}" if pid is not None else "to be placed on a node"
    return transition(
        txn,
        task_id,
        TaskStatus.RUNNING,
        message=f"task {task_id} started (attempt {attempt}, {where})",
        attempt=attempt,
        pid=pid,
        node=None,
        token_hash=token_hash,
        started_at=txn.at,
        ended_at=None,
        exit_code=None,
        error=None,
        nudges=0,
    )


def placed(txn: Txn, task_id: str, attempt: int, *, node: str, pid: int) -> Task | None:
    """The remote worker of `attempt` runs on `node` as `pid` (nothing for an attempt that has
    ended meanwhile)."""
    task = txn.task(task_id)
    if not live_attempt(task, attempt):
        return None
    said = f"task {task_id} runs on node {node} (pid {pid})"
    return _update(txn, task, EventType.TASK_PLACED, message=said, node=node, pid=pid)


def not_started(txn: Txn, task_id: str, *, attempt: int, why: str) -> Task:
    """The worker of a new attempt could not be started: the attempt counts, and failed."""
    transition(
        txn,
        task_id,
        TaskStatus.RUNNING,
        message=f"task {task_id} attempt {attempt} could not start",
        attempt=attempt,
        started_at=txn.at,
    )
    return requeue(txn, task_id, why)


def complete(txn: Txn, task_id: str, **changes: Any) -> Task:
    """The worker exited 0 (and its agent's last turn did not fail)."""
    return transition(
        txn,
        task_id,
        TaskStatus.COMPLETED,
        message=f"task {task_id} completed",
        **_NO_QUESTION,
        **changes,
    )


def exited(
    txn: Txn,
    task_id: str,
    attempt: int,
    *,
    exit_code: int | None,
    failure: str | None,
    last_output_at: str | None = None,
    lost: str | None = None,
) -> Task | None:
    """The worker of `attempt` exited: the task completes, or (`failure` says why) the attempt
    failed, or (`lost` says why: its node went away) it was interrupted. Nothing changes for a
    task that ended or moved on meanwhile (cancelled, timed out, restarted: that was recorded
    then)."""
    task = txn.task(task_id)
    if not live_attempt(task, attempt):
        return None
    if lost is not None:  # not the task's failure: it does not count against maxAttempts
        return interrupt(txn, task_id, lost)
    changes: dict[str, Any] = {"exit_code": exit_code, "ended_at": txn.at}
    if last_output_at is not None:
        changes["last_output_at"] = last_output_at
    if failure is None:
        return complete(txn, task_id, **changes)
    return requeue(txn, task_id, failure, **changes)


def requeue(txn: Txn, task_id: str, why: str, **changes: Any) -> Task:
    """The attempt failed (`why`): queue a new attempt, or fail the task when `maxAttempts`
    failures are spent. What was pending for the old attempt is settled (crew.domain.mailbox)."""
    task = txn.task(task_id)
    failures = task.failures + 1
    retrying = failures < task.max_attempts
    mailbox.restart(txn, task, retrying=retrying)
    if task.max_attempts > 1:
        why = f"{why} (failed attempt {failures} of {task.max_attempts})"
    changes["failures"] = failures
    changes["waiting_for"] = []  # the next attempt spawns what it waits for again
    # The next attempt starts a new agent session: resuming the one that failed (a session the
    # agent lost, a conversation gone wrong) would most likely fail again the same way.
    changes["session"] = None
    if not retrying:
        return transition(
            txn,
            task_id,
            TaskStatus.FAILED,
            message=f"task {task_id} failed: {why}",
            **_NO_QUESTION,
            error=why,
            **{"ended_at": txn.at, **changes},
        )
    return transition(
        txn,
        task_id,
        TaskStatus.QUEUED,
        event_type=EventType.TASK_RETRIED,
        message=f"task {task_id} queued for another attempt: {why}",
        **_NO_QUESTION,
        nudges=0,
        error=why,
        **changes,
    )


def interrupt(txn: Txn, task_id: str, why: str) -> Task:
    """The attempt was cut short by the leader's end (a crash, a kill, Ctrl-C, a takeover): not
    the task's failure, so it does not count against `maxAttempts`. The task is queued for its
    next attempt, which is given what the interrupted one was (crew.domain.mailbox.restart)."""
    task = txn.task(task_id)
    mailbox.restart(txn, task, retrying=True)
    return transition(
        txn,
        task_id,
        TaskStatus.QUEUED,
        event_type=EventType.TASK_INTERRUPTED,
        message=f"task {task_id}'s attempt {task.attempt} was interrupted ({why}): queued again",
        **_NO_QUESTION,
        nudges=0,
        waiting_for=[],  # the next attempt spawns what it waits for again
    )


def cancel(txn: Txn, task_id: str, why: str, *, message: str | None = None) -> Task:
    """Cancel a task that has not ended (`why` says by whom or what; `message` describes it)."""
    return transition(
        txn,
        task_id,
        TaskStatus.CANCELLED,
        message=message or f"task {task_id} cancelled: {why}",
        ended_at=txn.at,
        error=why,
    )


# ----------------------------------------------------------------------------- children


def wait_for_children(txn: Txn, task_id: str, children: list[str]) -> Task:
    """The task spawned `children` and waits for them: `waiting`, with no question open."""
    task = txn.task(task_id)
    waited = [*task.waiting_for, *(c for c in children if c not in task.waiting_for)]
    text = f"{task_id} is waiting for its task(s) {', '.join(waited)}"
    if task.status is TaskStatus.WAITING:
        return _update(txn, task, EventType.TASK_WAITING, message=text, waiting_for=waited)
    return transition(
        txn, task_id, TaskStatus.WAITING, message=text, waiting_for=waited, waiting_since=txn.at
    )


def children_ended(txn: Txn, task_id: str, message: MailboxMessage) -> Task:
    """The tasks it waited for have all ended: their results (`message`, recorded with this
    change) are given to it, and it runs again."""
    task = txn.task(task_id)
    text = f"{task_id}'s task(s) {', '.join(task.waiting_for)} ended: it runs again"
    if task.status is not TaskStatus.WAITING or task.contact is not None:
        return _update(
            txn, task, EventType.AGENT_FOLLOWED_UP, message=text, mail=message, waiting_for=[]
        )
    return transition(
        txn,
        task_id,
        TaskStatus.RUNNING,
        event_type=EventType.AGENT_FOLLOWED_UP,
        message=text,
        mail=message,
        waiting_for=[],
        waiting_since=None,
    )


# ----------------------------------------------------------------------------- questions


def wait(txn: Txn, question: SupervisorContact, *, unstarted: bool = False) -> Task:
    """The worker asked a question: the task waits for the answer (a newer question replaces
    an open one). `unstarted`: crew asks before the task's next attempt starts, which waits,
    with no worker (nor the secret a worker of an earlier attempt could still act with)."""
    task = txn.task(question.task_id)
    text = f"{task.id} is waiting for an answer to {question.id}"
    gone = dict.fromkeys(("pid", "node", "token_hash")) if unstarted else {}
    changes: dict[str, Any] = {"message": text, "contact": question, "waiting_since": txn.at}
    if task.status is TaskStatus.WAITING:
        return _update(txn, task, EventType.TASK_WAITING, **changes)
    return transition(txn, task.id, TaskStatus.WAITING, **changes, **gone)


def waits_to_start(task: Task) -> bool:
    """Whether the task's next attempt waits for the answer to crew's question about a limit
    (crew/domain/budget.py): no worker runs for it."""
    limit = task.contact.limit if task.contact is not None else None
    return limit is not None and limit.before_start


def answer(txn: Txn, task_id: str, message: MailboxMessage) -> Task:
    """A respond was sent (`message`, recorded with this change): the task runs again, its
    question answered, or its flag cleared — a person has looked at it, so the count of
    automatic nudges starts again (and the leader's silence clock with it). A task whose next
    attempt waited for the answer (crew/domain/budget.py) is queued for it."""
    task = txn.task(task_id)
    question = task.contact
    data: dict[str, Any] = {}
    changes: dict[str, Any] = {**_NO_QUESTION, "nudges": 0}
    if question is not None:
        closed = question.model_copy(update={"answered_at": txn.at, "answer_id": message.id})
        data[EventData.CONTACT] = closed.to_dict()
    if task.status is TaskStatus.NEEDS_REVIEW:
        changes["error"] = None  # why it was flagged: no longer true
    what = f"question {question.id}" if question else "flag"
    return transition(
        txn,
        task_id,
        TaskStatus.QUEUED if waits_to_start(task) else TaskStatus.RUNNING,
        event_type=EventType.TASK_RESPONDED,
        message=f"answered {task_id}'s {what}: {short(message.body)}",
        data=data,
        mail=message,
        **changes,
    )


def withdraw(txn: Txn, task_id: str, reason: str) -> Task | None:
    """The worker took its open question back: the task runs again, flagged for its wait or not
    (None if none was open; a question crew asks for it, at one of its limits, is not the
    worker's to take back)."""
    task = txn.task(task_id)
    if task.status not in _ASKING or task.contact is None or task.contact.limit is not None:
        return None
    flag = {"error": None} if task.status is TaskStatus.NEEDS_REVIEW else {}
    return transition(
        txn,
        task_id,
        TaskStatus.RUNNING,
        event_type=EventType.SUPERVISOR_WITHDRAWN,
        message=f"{task_id} withdrew its question {task.contact.id}"
        + (f": {reason}" if reason else ""),
        data={EventData.CONTACT_ID: task.contact.id},
        **_NO_QUESTION,
        **flag,
    )


def checkpoint(txn: Txn, task_id: str, state: Any) -> Checkpoint | None:
    """The worker saved its progress: the task's next attempt gets it back. A state too large to
    keep (over MAX_CHECKPOINT bytes of JSON) is refused, and the refusal recorded."""
    task = txn.task(task_id)
    saved = Checkpoint(task_id=task_id, attempt=max(task.attempt, 1), saved_at=txn.at, state=state)
    size = len(saved.to_line())
    if size > MAX_CHECKPOINT:
        txn.record(
            EventType.AGENT_ERROR,
            task_id=task_id,
            message=f"{task_id}'s checkpoint was not kept: {size} bytes, over the "
            f"{MAX_CHECKPOINT}-byte limit",
            data={"error": "checkpoint too large", "bytes": size},
        )
        return None
    txn.record(
        EventType.TASK_CHECKPOINTED,
        task_id=task_id,
        message=f"{task_id} saved a checkpoint (attempt {saved.attempt})",
        checkpoint=saved,
    )
    return saved


def remember_session(txn: Txn, task_id: str, session_id: str) -> Task | None:
    """The agent named its own session: a later attempt resumes it (None if already known)."""
    said = f"{task_id}'s agent session is {session_id}"
    return _remember(txn, task_id, EventType.AGENT_SESSION, said, session=session_id)


def remember_version(txn: Txn, task_id: str, version: str) -> Task | None:
    """The version of the agent CLI that runs the task (None if it is the one already known)."""
    said = f"{task_id}'s agent is {version}"
    return _remember(txn, task_id, EventType.AGENT_VERSION, said, agent_version=version)


def remember_result(txn: Txn, task_id: str, text: str) -> Task | None:
    """The agent's final answer of a turn (None if it is the one already known)."""
    said = f"{task_id}'s agent answered: {short(text, 120)}"
    return _remember(txn, task_id, EventType.AGENT_RESULT, said, result=text)


def _remember(txn: Txn, task_id: str, event: EventType, message: str, **fields: Any) -> Task | None:
    """What the agent said of itself, kept on the task (None when the task knew it already)."""
    task = txn.task(task_id)
    if all(getattr(task, name) == value for name, value in fields.items()):
        return None
    return _update(txn, task, event, message=message, **fields)


# ----------------------------------------------------------------------------- monitors


def flag(txn: Txn, task_id: str, why: str) -> Task:
    """A monitor flagged the task (stalled, waited too long): a person should look at it."""
    return transition(
        txn,
        task_id,
        TaskStatus.NEEDS_REVIEW,
        message=f"task {task_id} flagged: {why}",
        error=why,
    )


def nudged(txn: Txn, task_id: str, message: MailboxMessage, text: str) -> Task:
    """The stall monitor sent an automatic nudge (`message`, recorded with this change)."""
    task = txn.task(task_id)
    return _update(
        txn, task, EventType.AGENT_NUDGED, message=text, mail=message, nudges=task.nudges + 1
    )


def active(txn: Txn, task_id: str) -> Task | None:
    """The worker printed something after automatic nudges: they are answered."""
    task = txn.task(task_id)
    if task.nudges == 0:
        return None
    return _update(
        txn,
        task,
        EventType.TASK_ACTIVE,
        message=f"task {task_id} is active again after {task.nudges} nudge(s)",
        nudges=0,
    )


# ----------------------------------------------------------------------------- settling


def ended(txn: Txn) -> list[Task]:
    """Tasks that reached a terminal status in this transaction."""
    before = txn.before.tasks
    return [
        t
        for t in txn.changed_tasks()
        if t.status.terminal and not (t.id in before and before[t.id].status.terminal)
    ]


def cancel_dependents(txn: Txn) -> None:
    """A queued task whose dependency failed or was cancelled can never start: cancel it (and,
    in turn, its own dependents)."""
    if not any(t.status in _CAN_BLOCK for t in txn.changed_tasks()):
        return  # no task ended so as to block others, and none was queued
    changed = True
    while changed:
        changed = False
        for task in txn.state.task_list():
            if task.status is not TaskStatus.QUEUED:
                continue
            blocker = next(
                (
                    txn.state.tasks[d]
                    for d in task.depends_on
                    if d in txn.state.tasks and txn.state.tasks[d].status in _BLOCKING_ENDS
                ),
                None,
            )
            if blocker is not None:
                why = f"dependency {blocker.id} {blocker.status}"
                cancel(txn, task.id, why, message=f"task {task.id} cancelled: its {why}")
                changed = True


# ----------------------------------------------------------------------------- any change


def transition(
    txn: Txn,
    task_id: str,
    status: TaskStatus,
    *,
    message: str | None = None,
    data: dict[str, Any] | None = None,
    event_type: EventType | None = None,
    mail: MailboxMessage | None = None,
    **changes: Any,
) -> Task:
    """Move a task to `status`, checked against the transition table, with other changes (the
    named changes above are made of this; an illegal transition is refused: nothing is written).
    """
    current = txn.task(task_id)
    if not can_transition(current.status, status):
        raise Refused(f"Task {task_id} cannot go from {current.status} to {status}.")
    updated = current.revised(status=status, **changes)
    txn.record(
        event_type or TASK_STATUS_EVENT[status],
        task_id=task_id,
        message=message or f"task {task_id} {status}",
        data=data,
        task=updated,
        mail=mail,
    )
    return updated


def _update(
    txn: Txn,
    task: Task,
    event_type: EventType,
    *,
    message: str,
    mail: MailboxMessage | None = None,
    **changes: Any,
) -> Task:
    """Change a task's fields, not its status."""
    updated = task.revised(**changes)
    txn.record(event_type, task_id=task.id, message=message, task=updated, mail=mail)
    return updated
