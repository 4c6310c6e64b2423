"""`crew steer`, `crew follow-up` and `crew nudge` without typer or pydantic: the gate of
crew/domain/gate.py and the transaction of crew/store/txn.py for the common case — a person who
owns the run, a task that takes the message, room in its queue, a run whose files need no
recovery — writing the same event and mailbox line crew/verbs.py writes; and under an
idempotency key, looked up in the key index (crew/store/pending.py), either a new message or the
replay of the one a retried request sent. Every other case (a refusal, a warning, a key used for
another request, --force, a worker's credentials) is decided before anything is written, by
falling back to the full command.
"""

from __future__ import annotations

import contextlib
import os
import sys

from crew.fast import answering, people
from crew.fast.cmdline import Call, Fallback, is_plain_duration, plain_seconds, stdin_text
from crew.fast.committing import commit, event
from crew.fast.output import formats_apart, out, print_json, reader_may_go
from crew.fast.runfiles import (
    Marker,
    RunFiles,
    RunLock,
    is_task_id,
    open_run,
    read_file,
)
from crew.fast.shapes import as_crew_writes
from crew.fast.status import INBOUND_BOXES, key_index_path, pending_index_path, read_run
from crew.store.pending import BadLine, KeyIndex, PendingIndex
from crew.store.taskfiles import SUFFIX, TASKS_DIR, task_ids

TYPE_CHECKING = False  # `typing` costs a fast command a few milliseconds
if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import Any

LIVE = frozenset({"running", "waiting", "needs_review"})
#: crew/verbs.py DEFAULT_NUDGE.
DEFAULT_NUDGE = "Please report your current status, blocker, or smallest next step."
ELLIPSIS = "…"


class Verb:
    """crew/domain/gate.py's Verb, with what the registry says of its kind."""

    __slots__ = ("allowed", "box", "event", "kind", "limit", "name", "noun", "pressure", "priority")

    def __init__(
        self,
        name: str,
        noun: str,
        kind: str,
        event: str,
        allowed: frozenset[str],
        box: str,
        priority: str,
        limit: str | None,
        pressure: frozenset[str],
    ) -> None:
        self.name, self.noun, self.kind, self.event = name, noun, kind, event
        self.allowed, self.box, self.priority = allowed, box, priority
        #: The limit of pending messages of its class (`limits` in crew.toml), and the class.
        self.limit, self.pressure = limit, pressure


_STEERS = frozenset({"steer", "nudge"})
VERBS = {
    "steer": Verb(
        "steer", "steer", "steer", "agent.steered", LIVE, "steering", "high", "maxPendingSteers",
        _STEERS,
    ),
    "follow-up": Verb(
        "follow-up", "follow-up", "followUp", "agent.followed_up", LIVE | {"queued"}, "inbox",
        "normal", "maxPendingFollowUps", frozenset({"followUp"}),
    ),
    "nudge": Verb(
        "nudge", "nudge", "nudge", "agent.nudged", LIVE, "steering", "normal",
        "maxPendingSteers", _STEERS,
    ),
    "respond": Verb(
        "respond", "answer", "respond", "task.responded", frozenset({"waiting", "needs_review"}),
        "inbox", "high", None, frozenset({"respond"}),
    ),
}  # fmt: skip


def send(call: Call) -> int:
    """Send, or raise Fallback before anything is written."""
    verb = VERBS[call.command]
    task_id = call.arguments["task"]
    body = stdin_text(call.arguments.get("body", DEFAULT_NUDGE))
    key = call.options.get("--idempotency-key")
    if not is_task_id(task_id) or (key is not None and not people.plain_text_id(key)):
        raise Fallback
    timeout = call.options.get("--timeout")
    if timeout is not None and not is_plain_duration(timeout):
        raise Fallback  # the full command reads it, or says why not
    who = people.session(call.options.get("--session"))
    files = open_run(call)
    index = PendingIndex(files.box(verb.box), pending_index_path(files, verb.box))
    keys = [KeyIndex(files.box(b), key_index_path(files, b)) for b in INBOUND_BOXES] if key else []
    with RunLock(files.root), _closing(keys):
        marker = files.clean()
        run, task = _admitted(files, verb, task_id, who, body)
        lease = people.lease(files, float(run["config"]["crew"]["leaderStaleAfter"]))
        prior = _carried(keys, key) if key is not None else None
        if key is not None and prior is None and _added_under(files, run, key):
            raise Fallback  # the full command refuses a key a task was added under
        index.current(save=False)
        waiting = sum(n for kind, n in index.counts(task_id).items() if kind in verb.pressure)
        if prior is not None:  # a replay writes nothing, the key index included (SPEC §5)
            message, at = _replayed(*prior, verb, task_id, body), prior[2]
        else:
            pinned = call.options.get("--contact")
            message, at = _sent(files, marker, verb, (run, task), who, (body, pinned), key, waiting)
            waiting += 1
            for each in keys:  # under the lock, as every use of a key index
                each.advance()  # and saved, with the line just written
    replayed = prior is not None
    if not replayed:
        with contextlib.suppress(BadLine):  # a cache: the next reader folds what this one did not
            index.current()  # the pending index, saved with the line just written
    if "--wait" not in call.options and "--wait-ack" not in call.options:
        with reader_may_go():
            _print(call, run["runId"], verb, message, waiting, lease, replayed=replayed)
        return 0
    until = "acknowledged" if "--wait-ack" in call.options else "delivered"
    message, failure = _waited(files, verb.box, (message, at), until, call.options)
    waited = Waited(until, failure)
    with reader_may_go():  # the wait's outcome stands (crew/render.py `emit`)
        _print(call, run["runId"], verb, message, waiting, lease, replayed=replayed, waited=waited)
    if failure is None:
        return 0
    from crew.text import terminal_safe

    sys.stderr.write(f"crew: error: {terminal_safe(failure[1])}\n")
    return failure[0]


#: crew/errors.py exit codes of a wait that fails: it timed out, or the message was rejected.
TIMED_OUT, REFUSED = 3, 4


class Waited:
    """What a wait for the message came to: the status waited for, and why it failed (exit
    code and sentence; None once the message reached it)."""

    __slots__ = ("failure", "until")

    def __init__(self, until: str, failure: tuple[int, str] | None) -> None:
        self.until, self.failure = until, failure


def _waited(
    files: RunFiles,
    box: str,
    sent: tuple[dict[str, Any], int],
    until: str,
    options: dict[str, str],
) -> tuple[dict[str, Any], tuple[int, str] | None]:
    """crew/waiting.py `wait_for_message` on the fast path: the message's state once it is
    `until` (delivered also takes acknowledged), read from its line (`sent`: the message and
    the byte its line begins at) of its mailbox file on, woken by the mailbox folder's changes
    (inotify: crew/store/watch.py); and what failed (a timeout, a rejection) — the message as it
    is then. A line the fast path does not read hands the rest of the wait to the library (the
    message is sent: the command must not go back to the full one, which would send it again)."""
    import time

    from crew.store.watch import watch_folders

    path = files.box(box)
    wanted = {"acknowledged"} if until == "acknowledged" else {"delivered", "acknowledged"}
    timeout = _seconds(options.get("--timeout"))
    deadline = None if timeout is None else time.monotonic() + timeout
    # Before the first read, so no change is missed: the mailbox, and the run (its task's end).
    watcher = watch_folders([os.path.dirname(path), files.root])
    state, offset = sent
    try:
        while True:
            try:
                state, offset = _read_on(path, state, offset)
                ended = _ended(files, state["taskId"]) if state["status"] == "delivered" else None
                if ended is not None:  # acknowledged just before? Its line is written by then
                    state, offset = _read_on(path, state, offset)
            except (Fallback, ValueError):
                return _waited_by_the_library(files, state, until, (deadline, timeout))
            if state["status"] in wanted:
                return state, None
            if state["status"] == "rejected":
                return state, (
                    REFUSED,
                    f"Message {state['id']} was rejected: {state.get('reason')}.",
                )
            if ended is not None:  # crew/waiting.py `_not_ended`
                return state, (
                    REFUSED,
                    f"Message {state['id']} was delivered to {state['taskId']}, which ended "
                    f"({ended}) without acknowledging it.",
                )
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return state, (TIMED_OUT, _still(state, until, timeout or 0.0))
            watcher.wait(remaining)
    finally:
        watcher.close()


def _ended(files: RunFiles, task_id: str) -> str | None:
    """The status of a task that has ended, from its snapshot (None while it is live)."""
    if not is_task_id(task_id):
        raise Fallback  # never a path made of an id not checked
    task = files.read_json(f"{files.root}/{TASKS_DIR}/{task_id}{SUFFIX}")
    if not isinstance(task, dict) or task.get("id") != task_id:
        raise Fallback
    status = task.get("status")
    return status if status in ("completed", "failed", "cancelled") else None


def _waited_by_the_library(
    files: RunFiles,
    message: dict[str, Any],
    until: str,
    limits: tuple[float | None, float | None],
) -> tuple[dict[str, Any], tuple[int, str] | None]:
    """The rest of `_waited`, by crew/waiting.py `wait_for_message` through the models, until
    the deadline (`limits`: the deadline and the whole timeout it came from)."""
    import time
    from pathlib import Path

    from crew.errors import CrewTimeout, Refused
    from crew.models import MailboxMessage
    from crew.paths import Home
    from crew.registry import MessageStatus
    from crew.store.runstore import RunStore
    from crew.waiting import wait_for_message

    deadline, timeout = limits
    store = RunStore.open(Home(Path(files.home)), files.run_id)
    sent = MailboxMessage.model_validate(message)
    remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
    try:
        reached = wait_for_message(store, sent, until=MessageStatus(until), timeout=remaining)
    except (CrewTimeout, Refused) as failed:
        latest = store.fold(sent.kind.box).get(sent.id, sent).to_dict()
        if isinstance(failed, Refused):
            return latest, (REFUSED, failed.message)
        return latest, (TIMED_OUT, _still(latest, until, timeout or 0.0))
    return reached.to_dict(), None


def _read_on(path: str, state: dict[str, Any], offset: int) -> tuple[dict[str, Any], int]:
    """The message's state after the whole lines from `offset` on that are its own (as
    crew/models.py writes it: its fields in order), and the offset after them."""
    from crew.fast.mailbox import as_written, checked, merged

    data = read_file(path, at=offset)
    whole = data.rfind(b"\n") + 1
    needle = b'"id":"%s"' % state["id"].encode()
    found = data.find(needle, 0, whole)
    while found >= 0:
        start, stop = data.rfind(b"\n", 0, found) + 1, data.index(b"\n", found) + 1
        line = checked(data[start:stop])
        if line["id"] == state["id"]:
            state = merged(state, line) or state
        found = data.find(needle, stop, whole)
    return as_written(state), offset + whole


def _seconds(text: str | None) -> float | None:
    """A --timeout the fast path takes (PLAIN_DURATION), in seconds."""
    if text is None:
        return None
    return plain_seconds(text)  # checked before anything was written


def _still(message: dict[str, Any], until: str, timeout: float) -> str:
    """crew/waiting.py `_still`."""
    from crew.clock import format_duration

    waited = format_duration(timeout)
    if message["status"] == "pending":
        return (
            f"Message {message['id']} to {message['taskId']} is still pending after {waited}; "
            "it stays queued and is delivered as soon as the task can take it."
        )
    return (
        f"Message {message['id']} to {message['taskId']} was delivered but not {until} after "
        f"{waited}."
    )


def _sent(
    files: RunFiles,
    marker: Marker,
    verb: Verb,
    state: tuple[dict[str, Any], dict[str, Any]],
    who: people.Session,
    said: tuple[str, str | None],
    key: str | None,
    waiting: int,
) -> tuple[dict[str, Any], int]:
    """The new message, written (Fallback first if the full command would make room or warn),
    and where its line begins in its mailbox file."""
    run, task = state
    body, pinned = said  # the body, and the question --contact pins
    task_id = task["id"]
    limits = run["config"]["limits"]
    room = limits[verb.limit] if verb.limit is not None else waiting + 1
    if waiting + 1 > min(room, limits["warnPending"]):
        raise Fallback  # room to make, or a warning to give
    data: dict[str, Any] = {"session": who.name}
    if verb.kind == "nudge":
        data["source"] = "nudge"
    if verb.kind == "respond":
        contact = answering.question(task, body, pinned)
        data.update(answering.message_data(contact))
    if key is not None:
        data["idempotencyKey"] = key
    message = _message(verb, task_id, body, data)
    event = _event(marker.seq + 1, run["runId"], verb, who, message)
    if verb.kind == "respond":
        closed, running = answering.answered(task, contact, message)
        event["message"] = answering.event_text(task_id, contact, _short(body))
        event["data"] = {**who.stamp(), "contact": closed, "task": running, **event["data"]}
    else:
        running = None
    changed = [running] if running is not None else []
    at = commit(files, marker, [event], mail=(verb.box, message), tasks=changed)
    assert at is not None  # a mailbox line was written
    return message, at


def _carried(keys: list[KeyIndex], key: str) -> tuple[str, str, int] | None:
    """The message of the run that first carried `key`, as crew/domain/mailbox.py `with_key`
    finds it (its mailbox file, its id, where the line that carried the key begins); None if no
    message did."""
    for index in keys:
        index.advance(save=False)
        found = index.carried(key)
        if found is not None:
            return (index.mailbox, *found)
    return None


def _added_under(files: RunFiles, run: dict[str, Any], key: str) -> bool:
    """Whether a task was added under `key` (keys share one namespace per run: crew/domain/
    gate.py `replay`). Only an added task may carry one, so only theirs are read."""
    found = task_ids(files.root)
    if found is None:
        raise Fallback
    added = found - {task["id"] for task in run["config"]["tasks"]}
    return any(files.read_task(run, task_id).get("idempotencyKey") == key for task_id in added)


def _replayed(
    path: str, message_id: str, at: int, verb: Verb, task_id: str, body: str
) -> dict[str, Any]:
    """crew/domain/gate.py `replay`: the message an earlier request under the key sent, as it
    is now, when this request is the same one (Fallback otherwise: a refusal to explain, a
    secret answer, a line the fast path does not read). Read from the line that carried the
    key on, taking only that message's lines: a retry comes soon after its first try."""
    from crew.fast.mailbox import as_written, checked, merged

    data = read_file(path, at=at)
    data = data[: data.rfind(b"\n") + 1]  # a line being written is not yet the message's
    needle = b'"id":"%s"' % message_id.encode()
    state: dict[str, Any] | None = None
    found = data.find(needle)
    while found >= 0:
        start, stop = data.rfind(b"\n", 0, found) + 1, data.index(b"\n", found) + 1
        line = checked(data[start:stop])
        if line["id"] == message_id:  # not one that names it inside (a decision's focus)
            state = merged(state, line)
            if state is None:
                raise Fallback  # its first line is before the key's: the full command's
        found = data.find(needle, stop)
    if state is None or (state["kind"], state["taskId"], state["body"]) != (
        verb.kind,
        task_id,
        body,
    ):
        raise Fallback
    if (state.get("data") or {}).get("secret") or formats_apart(state):
        raise Fallback
    return as_written(state)


@contextlib.contextmanager
def _closing(keys: list[KeyIndex]) -> Iterator[None]:
    try:
        yield
    finally:
        for index in keys:
            index.close()


def _admitted(
    files: RunFiles, verb: Verb, task_id: str, who: people.Session, body: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The run and the task, once crew/domain/gate.py would let the message through (the
    question an answer closes is crew/fast/answering.py's to check)."""
    run = read_run(files)
    task = files.read_task(run, task_id)
    if not (as_crew_writes(run, "manifest") and as_crew_writes(task, "task")):
        raise Fallback  # edited by hand: the full command reads the state the log says
    if run.get("ownerSessionId") != who.name:
        raise Fallback
    if run.get("status") != "running" or task.get("status") not in verb.allowed:
        raise Fallback  # an ended run; a run flagged needs_review may follow its tasks
    try:
        size = len(body.encode("utf-8"))
    except UnicodeEncodeError:
        raise Fallback from None
    if not body.strip() or size > run["config"]["limits"]["maxBodyBytes"]:
        raise Fallback
    return run, task


def _message(verb: Verb, task_id: str, body: str, data: dict[str, Any]) -> dict[str, Any]:
    """A new pending message, as crew/models.py `MailboxMessage.to_dict` writes it."""
    return {
        "id": f"msg_{os.urandom(8).hex()}",
        "direction": "inbox",
        "kind": verb.kind,
        "from": "leader",
        "to": task_id,
        "taskId": task_id,
        "body": body,
        "status": "pending",
        "priority": verb.priority,
        "sentAt": people.now(),
        "data": data,
    }


def _event(
    seq: int, run_id: str, verb: Verb, who: people.Session, message: dict[str, Any]
) -> dict[str, Any]:
    """The event that records the message (crew/domain/mailbox.py `post`)."""
    said = f"{verb.name} {message['taskId']}: {_short(message['body'])}"
    data = {**who.stamp(), "mailboxMessage": message}
    return event(seq, run_id, message["sentAt"], verb.event, said, data, message["taskId"])


def _print(
    call: Call,
    run_id: str,
    verb: Verb,
    message: dict[str, Any],
    pending: int,
    lease: people.Lease,
    *,
    replayed: bool,
    waited: Waited | None = None,
) -> None:
    """crew/render.py's view of crew/results/sending.py `Sent`."""
    if "--json" in call.options:
        document = {
            **message,
            "runId": run_id,
            "replayed": replayed,
            "dropped": [],
            "pending": pending,
            "leader": lease.state,
            "warnings": [],
        }
        if waited is not None:
            document["waitedFor"] = waited.until
            if waited.failure is not None:
                document["error"] = waited.failure[1]
        print_json(document)
        return
    if "--quiet" in call.options or "-q" in call.options:
        return  # crew/render.py `emit`: no text view, and a `Sent` keeps nothing of it
    if replayed:
        out(f"Already sent as {message['id']} (same idempotency key): nothing new was written.")
    else:
        out(f"Sent {verb.noun} {message['id']} to {message['taskId']} in run {run_id}.")
    if lease.state != people.ALIVE and message["status"] == "pending":
        out(
            "No leader is running: it is delivered once one leads the run "
            f"(`crew resume {run_id}`)."
        )
    if waited is not None:
        out(f"{message['id']} {message['status']}.")


def _short(text: str, limit: int = 80) -> str:
    """crew/text.py `short`."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + ELLIPSIS
