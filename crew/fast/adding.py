"""`crew add` without pydantic, in the common case: a person who owns a running run adds a task
for one of its agents, with dependencies that have not failed, under a new idempotency key or
none — or retries an add under the key it was made with, answered with that task, writing
nothing. It writes what crew/domain/adding.py `add` writes (the `task.queued` event carrying
the new task, the task's snapshot, the marker) and prints what the full command prints. Every
other case (--force, a worker adding a task, a run flagged or ended, a refusal, a key used for
another request, a dependency that failed or was cancelled, so that the task would be
cancelled at once) is decided before anything is written, by raising Fallback:
crew/fast/changing.py then runs the library's add.
"""

from __future__ import annotations

import re

from crew.fast import people
from crew.fast.cmdline import Call, Fallback
from crew.fast.committing import commit, event, owned
from crew.fast.output import out, print_json
from crew.fast.runfiles import RunFiles, is_task_id
from crew.fast.shapes import as_crew_writes
from crew.fast.status import INBOUND_BOXES, key_index_path
from crew.store.pending import KeyIndex
from crew.store.taskfiles import task_ids
from crew.text import first_line, short, terminal_safe

TYPE_CHECKING = False  # `typing` costs a fast command a few milliseconds
if TYPE_CHECKING:
    from typing import Any

#: crew/registry.py EventType.TASK_QUEUED.
QUEUED = "task.queued"
#: crew/config.py MAX_TASK_PROMPT and MAX_TITLE, crew/ids.py MAX_ID_LENGTH.
MAX_TASK_PROMPT, MAX_TITLE, MAX_ID_LENGTH = 64 * 1024, 1024, 64
#: crew/domain/tasks.py `_BLOCKING_ENDS`: a dependency that ended so cancels its dependents.
BLOCKING_ENDS = frozenset({"failed", "cancelled"})
#: crew/domain/adding.py `_NOT_ID`.
_NOT_ID = re.compile(r"[^a-z0-9_.-]+")


def add(call: Call, prompt: str) -> int:
    """Add the task, or raise Fallback before anything is written."""
    agent, title = call.options["--agent"], call.options.get("--title")
    asked, key = call.options.get("--id"), call.options.get("--idempotency-key")
    depends_on = call.lists.get("--depends-on", [])
    if "--force" in call.options or (key is not None and not people.plain_text_id(key)):
        raise Fallback
    if len(set(depends_on)) != len(depends_on):
        raise Fallback  # one named twice: the full command keeps it once
    if not all(map(is_task_id, [*depends_on, *([asked] if asked is not None else [])])):
        raise Fallback  # a usage error to explain
    if not _fits(prompt, MAX_TASK_PROMPT) or (title is not None and not _fits(title, MAX_TITLE)):
        raise Fallback
    with owned(call) as begun:
        files, marker, run, who = begun.files, begun.marker, begun.run, begun.who
        if run.get("status") != "running":
            raise Fallback  # ended: refused; flagged: the run's status follows its tasks
        config = run["config"]
        taken = task_ids(files.root)
        if taken is None or agent not in config["agents"]:
            raise Fallback
        if not {t["id"] for t in config["tasks"]} <= taken:
            raise Fallback  # a snapshot missing: the full command rebuilds it from the log
        prior = _keyed(files, run, key) if key is not None else None
        if prior is not None:  # a replay writes nothing (SPEC §5)
            if (prior["agent"], prior["prompt"], prior["dependsOn"]) != (agent, prompt, depends_on):
                raise Fallback  # another request under the key: refused
            if prior.get("parent") is not None or asked not in {None, prior["id"]}:
                raise Fallback
            if not as_crew_writes(prior, "task"):
                raise Fallback  # printed as the models write it
            lease = people.lease(files, float(config["crew"]["leaderStaleAfter"]))
            _print(call, run["runId"], prior, lease.state, replayed=True)
            return 0
        task_id = asked or _new_id(agent, taken)
        if not is_task_id(task_id) or task_id in taken or task_id in depends_on:
            raise Fallback  # a name never to make a file of; taken; a cycle
        if len(taken) >= config["limits"]["maxTasks"]:
            raise Fallback  # refused
        for dependency in depends_on:  # each exists and has not ended so as to cancel this one
            if dependency not in taken:
                raise Fallback
            if files.read_task(run, dependency)["status"] in BLOCKING_ENDS:
                raise Fallback
        at = people.now()
        task = _task(task_id, agent, prompt, title, depends_on, config, at, key)
        said = f"task {task_id} added by {who.name}: {short(task['title'])}"
        data = {**who.stamp(), "task": task}
        queued = event(marker.seq + 1, run["runId"], at, QUEUED, said, data, task_id)
        lease = people.lease(files, float(config["crew"]["leaderStaleAfter"]))  # may hand on
        commit(files, marker, [queued], tasks=[task], added=1)
    _print(call, run["runId"], task, lease.state)
    return 0


def _fits(text: str, limit: int) -> bool:
    """Whether crew/domain/adding.py `check_request` takes the text: some of it not blank (a
    prompt), valid UTF-8, at most `limit` bytes."""
    try:
        return bool(text.strip()) and len(text.encode("utf-8")) <= limit
    except UnicodeEncodeError:
        return False


def _keyed(files: RunFiles, run: dict[str, Any], key: str) -> dict[str, Any] | None:
    """The task added under `key` (crew/domain/adding.py `replay`); None when nothing carries
    it. Fallback when a message does: the full command refuses the key."""
    prior = next((t for t in files.read_tasks(run) if t.get("idempotencyKey") == key), None)
    if prior is not None:
        return prior
    for box in INBOUND_BOXES:
        index = KeyIndex(files.box(box), key_index_path(files, box))
        try:
            index.advance(save=False)  # a lookup never creates it
            if index.carried(key) is not None:
                raise Fallback
        finally:
            index.close()
    return None


def _new_id(agent: str, taken: set[str]) -> str:
    """crew/domain/adding.py `_new_id` for a task a person adds: `<agent>-<n>`."""
    base = (_NOT_ID.sub("-", agent.lower()).strip("-._") or "task")[: MAX_ID_LENGTH - 8]
    number = 1
    while f"{base}-{number}" in taken:
        number += 1
    return f"{base}-{number}"


def _task(
    task_id: str,
    agent: str,
    prompt: str,
    title: str | None,
    depends_on: list[str],
    config: dict[str, Any],
    at: str,
    key: str | None,
) -> dict[str, Any]:
    """The new task as crew/models.py `Task.to_dict` writes it: queued, added now."""
    task: dict[str, Any] = {
        "id": task_id,
        "agent": agent,
        "title": title or first_line(prompt) or task_id,
        "prompt": prompt,
        "status": "queued",
        "dependsOn": depends_on,
        "attempt": 0,
        "maxAttempts": config["agents"][agent]["maxAttempts"],
        "nudges": 0,
        "failures": 0,
        "addedAt": at,
    }
    if key is not None:
        task["idempotencyKey"] = key
    task["waitingFor"] = []
    return task


def _print(
    call: Call, run_id: str, task: dict[str, Any], leader: str, *, replayed: bool = False
) -> None:
    """crew/render.py's view of crew/results/sending.py `Added`."""
    if "--json" in call.options:
        print_json({"runId": run_id, "task": task, "replayed": replayed, "leader": leader})
    elif "--quiet" in call.options or "-q" in call.options:
        out(task["id"])
    elif replayed:
        out(f"Already added as {task['id']} (same idempotency key): nothing new was written.")
    else:
        out(terminal_safe(f"Added task {task['id']} ({task['agent']}) to run {run_id}: queued."))
        if leader != people.ALIVE:
            out(f"No leader is running: it starts once one leads the run (`crew resume {run_id}`).")
