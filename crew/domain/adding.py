"""Tasks added to a run as it runs (`crew add`, a worker's `@supervisor spawn:`): the checks a
new task must pass, and its record — the same `task.queued` event and `tasks/<taskId>.json` file
a task of crew.toml gets when the run is created.

An added task is not written into the run's crew definition (manifest.json `config.tasks`): that
copy of crew.toml is carried by every event that changes the run, and must stay small. So a
`crew rerun` runs crew.toml's tasks again, not the ones added (their parents add them again).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from crew import ids
from crew.config import MAX_TASK_PROMPT, MAX_TITLE
from crew.domain import mailbox, tasks
from crew.errors import CrewError, NotFound, Refused, UsageError
from crew.ids import MAX_ID_LENGTH, check_task_id
from crew.models import Task
from crew.protocol import SpawnRequest
from crew.registry import Box, EventType, MessageData, MessageKind, MessageSource, WorkerRight
from crew.store.txn import Txn
from crew.text import first_line, short


@dataclass(frozen=True)
class NewTask:
    """What someone asks to add: the request an idempotency key stands for."""

    agent: str
    prompt: str
    task_id: str | None = None
    depends_on: tuple[str, ...] = ()
    parent: str | None = None
    title: str | None = None


def check_request(request: NewTask) -> None:
    """The checks that need no run: ids, the prompt and title (UsageError, exit 2)."""
    if request.task_id is not None:
        check_task_id(request.task_id)
    for dependency in request.depends_on:
        check_task_id(dependency)
    if request.parent is not None:
        check_task_id(request.parent)
    if not request.prompt.strip():
        raise UsageError("The task's prompt is empty.")
    if _size(request.prompt, "prompt") > MAX_TASK_PROMPT:
        raise UsageError(
            f"The task's prompt is {_size(request.prompt, 'prompt')} bytes; the limit is "
            f"{MAX_TASK_PROMPT} bytes.",
            hint="Write the instructions to a file and give its path in the prompt.",
        )
    if request.title is not None and _size(request.title, "title") > MAX_TITLE:
        raise UsageError(f"The task's title is over {MAX_TITLE} bytes.")


def replay(txn: Txn, key: str, request: NewTask) -> Task | None:
    """The task an earlier request with this idempotency key added, if it was this same request
    (None if the key is new); a different request under the same key is refused."""
    prior = next((t for t in txn.state.task_list() if t.idempotency_key == key), None)
    if prior is None:
        message = mailbox.with_key(txn, key)
        if message is not None:
            raise Refused(
                f"Idempotency key {key!r} was already used for a {message.kind} to "
                f"{message.task_id} ({message.id}).",
                hint="Use a new key for a new task.",
            )
        return None
    same = (
        prior.agent == request.agent
        and prior.prompt == request.prompt
        and prior.depends_on == list(request.depends_on)
        and prior.parent == request.parent
        and request.task_id in {None, prior.id}
    )
    if not same:
        raise Refused(
            f"Idempotency key {key!r} was already used to add task {prior.id}, with a "
            "different request.",
            hint="Use a new key for a new task.",
        )
    return prior


def add(txn: Txn, request: NewTask, *, key: str | None, session: str) -> Task:
    """Check the new task against the run (exit 2, 4 or 5 otherwise) and record it, queued."""
    state, config = txn.state, txn.run.config
    agent = config.agents.get(request.agent)
    if agent is None:
        known, named = ", ".join(config.agents), ids.shown(request.agent)
        raise NotFound(f"Run {txn.run.run_id}'s crew has no agent {named} (agents: {known}).")
    task_id = request.task_id or _new_id(request, state.tasks)
    if task_id in state.tasks:
        raise Refused(
            f"Run {txn.run.run_id} already has a task {task_id!r}.",
            hint="Choose another --id, or leave it out for a generated one.",
        )
    for dependency in request.depends_on:
        if dependency == task_id:
            raise UsageError(f"Task {task_id} cannot depend on itself (a cycle).")
        state.task(dependency)  # NotFound, naming the run's tasks
    depth = 0
    if request.parent is not None:
        depth = _depth(state.tasks, state.task(request.parent)) + 1
    limits = config.limits
    if len(state.tasks) >= limits.max_tasks:
        raise Refused(
            f"Run {txn.run.run_id} has {len(state.tasks)} tasks: its limit is {limits.max_tasks} "
            "([limits] maxTasks in crew.toml).",
        )
    if depth > limits.max_depth:
        raise Refused(
            f"Task {request.parent} is {depth - 1} level(s) below crew.toml's tasks: a task it "
            f"adds would nest {depth} deep, past the limit of {limits.max_depth} "
            "([limits] maxDepth in crew.toml).",
        )
    by = request.parent if request.parent is not None else session
    title = request.title or first_line(request.prompt) or task_id
    return tasks.add(
        txn,
        f"task {task_id} added by {by}: {short(title)}",
        id=task_id,
        agent=request.agent,
        title=title,
        prompt=request.prompt,
        depends_on=list(request.depends_on),
        max_attempts=agent.max_attempts,
        parent=request.parent,
        idempotency_key=key,
    )


def _depth(known: dict[str, Task], task: Task) -> int:
    """How many spawns below crew.toml's tasks `task` is (parents always exist: checked)."""
    depth, seen = 0, {task.id}
    while task.parent is not None and task.parent in known and task.parent not in seen:
        task = known[task.parent]
        seen.add(task.id)
        depth += 1
    return depth


def descendants(known: dict[str, Task], task_id: str) -> list[str]:
    """The tasks spawned by `task_id`, by those, and so on (in the run's order)."""
    found: set[str] = {task_id}
    grew = True
    while grew:
        more = {t.id for t in known.values() if t.parent in found and t.id not in found}
        found |= more
        grew = bool(more)
    return [t for t in known if t in found and t != task_id]


_NOT_ID = re.compile(r"[^a-z0-9_.-]+")


def _new_id(request: NewTask, taken: dict[str, Task]) -> str:
    """A readable id no task has: `<parent>.<n>` for a spawn, else `<agent>-<n>`."""
    if request.parent is not None:
        base, sep = request.parent, "."
    else:
        base, sep = _NOT_ID.sub("-", request.agent.lower()).strip("-._") or "task", "-"
    base = base[: MAX_ID_LENGTH - 8]
    number = 1
    while f"{base}{sep}{number}" in taken:
        number += 1
    return f"{base}{sep}{number}"


def _size(text: str, what: str) -> int:
    try:
        return len(text.encode("utf-8"))
    except UnicodeEncodeError:
        raise UsageError(f"The task's {what} is not valid UTF-8 text.") from None


# ----------------------------------------------------------------------------- a worker's spawn


def spawn(txn: Txn, parent: str, request: SpawnRequest, *, unnamed: int = 0) -> Task | None:
    """The worker of `parent` printed a spawn line (the leader's transaction): its agent needs
    `may = ["spawn"]`. A refused spawn writes no task: the refusal is recorded, and the worker is
    told in a children message (so a worker that waits for the child is not left waiting).

    A spawn that names a child an earlier attempt made, or the `unnamed`-th spawn without an id
    of this attempt where the `unnamed`-th of an earlier one made a child for the same agent
    and prompt (its key, `spawn:<parent>#<n>`, says so), gets that child again: a worker
    restarted (the leader was gone, the attempt failed) repeats its spawns, and would
    otherwise run each child twice."""
    task = txn.task(parent)
    key = f"spawn:{parent}#{unnamed}" if request.task_id is None and unnamed else None
    if request.task_id is not None:
        again = txn.state.tasks.get(request.task_id)
    else:
        again = next((t for t in txn.state.task_list() if key and t.idempotency_key == key), None)
    asked = (parent, request.agent, request.prompt)
    same = again is not None and (again.parent, again.agent, again.prompt) == asked
    if again is not None and same and (request.task_id is not None or _before(again, task)):
        return _again(txn, parent, again, wait=request.wait)
    if again is not None:
        key = None  # an earlier attempt's n-th asked for another child: this one has no key
    new = NewTask(request.agent, request.prompt, request.task_id, parent=parent)
    try:
        if WorkerRight.SPAWN not in txn.run.config.agents[task.agent].may:
            raise Refused(
                f'Task {parent} may not add tasks: add "spawn" to `may` in [agents.{task.agent}].'
            )
        check_request(new)
        child = add(txn, new, key=key, session=ids.worker_session(parent))
    except CrewError as error:
        txn.record(
            EventType.AGENT_ERROR,
            task_id=parent,
            message=f"{parent}'s spawn was refused: {error.message}",
            data={"error": error.message, "spawn": True},
        )
        refused: dict[str, Any] = {"id": request.task_id, "agent": request.agent}
        refused["status"] = "refused"
        refused["wait"] = request.wait  # a spawn that waits takes no refusal of one that did not
        _tell(txn, parent, [{**refused, "error": error.message}], f"Refused: {error.message}")
        return None
    if request.wait and not child.status.terminal:
        tasks.wait_for_children(txn, parent, [child.id])
    return child


def _before(child: Task, parent: Task) -> bool:
    """Whether `child` was added before `parent`'s current attempt started (by an earlier one)."""
    added, started = child.added_at, parent.started_at
    return added is not None and started is not None and added < started


def _again(txn: Txn, parent: str, child: Task, *, wait: bool) -> Task:
    """A spawn asked again for the child it names, which an earlier attempt of `parent` made
    (the leader was gone, the attempt failed): the same child, waited for (or told of) again,
    never a second one nor a refusal."""
    if wait and child.status.terminal:
        _tell(txn, parent, [_result(txn, child)], f"Your task {child.id} has ended.")
    elif wait:
        tasks.wait_for_children(txn, parent, [child.id])
    return child


def results_to_parents(txn: Txn) -> None:
    """A task that waits for the tasks it spawned is given their results once all have ended
    (settled with every change: whoever ends the last child, the leader or a `crew cancel`)."""
    ended = tasks.ended(txn)
    if not any(t.parent is not None for t in ended):
        return
    for parent_id in dict.fromkeys(t.parent for t in ended if t.parent is not None):
        parent = txn.state.tasks.get(parent_id)
        if parent is None or parent.status.terminal or not parent.waiting_for:
            continue
        children = [txn.state.tasks[c] for c in parent.waiting_for if c in txn.state.tasks]
        if not all(c.status.terminal for c in children):
            continue
        results = [_result(txn, c) for c in children]
        lines = [f"- {r['id']} ({r['status']}): {r.get('result') or r.get('error') or ''}"
                 for r in results]  # fmt: skip
        _tell(txn, parent_id, results, "Your tasks have ended:\n" + "\n".join(lines), ended=True)


def _result(txn: Txn, child: Task) -> dict[str, Any]:
    """What a parent is told of a child: its status, the agent's final answer or the worker's
    last report, and why it failed or was cancelled."""
    found: dict[str, Any] = {"id": child.id, "agent": child.agent, "status": child.status.value}
    result = child.result
    if result is None:
        report = txn.last_of_task(Box.OUTBOX, child.id, MessageKind.REPORT)
        result = report.body if report is not None else None
    if result is not None:
        found["result"] = result
    if child.error is not None:
        found["error"] = child.error
    return found


def _tell(
    txn: Txn, parent: str, children: list[dict[str, Any]], body: str, *, ended: bool = False
) -> None:
    """A children message to `parent` (a follow-up: given while it runs); `ended`: the tasks
    it waited for have, and it runs again."""
    data: dict[str, Any] = {
        MessageData.SOURCE: MessageSource.CHILDREN.value,
        MessageData.CHILDREN: children,
    }
    message = mailbox.compose(txn, MessageKind.FOLLOW_UP, parent, body, data)
    if ended:
        tasks.children_ended(txn, parent, message)
    else:
        mailbox.post(txn, message, EventType.AGENT_FOLLOWED_UP, f"{parent} told: {short(body)}")
