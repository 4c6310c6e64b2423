"""`crew mailbox RUN` without typer or pydantic: the same timeline as crew/views.py
`mailbox_view` rendered by crew/render.py — as JSON, or as text by the renderer both use
(crew/textviews.py) — for a clean run whose every mailbox line is one crew wrote (anything
else, a task the run does not have, a value an option does not take: the full command)."""

from __future__ import annotations

import json

from crew.fast.cmdline import Call, Fallback
from crew.fast.output import print_json
from crew.fast.runfiles import BOXES, open_run, read_file, task_option
from crew.fast.shapes import as_crew_writes
from crew.fast.status import colored, read_state
from crew.textviews import terminal_width, write_timeline

TYPE_CHECKING = False  # `typing` costs a fast command a few milliseconds
if TYPE_CHECKING:
    from typing import Any

#: crew/models.py MailboxMessage's fields as written, in order.
MESSAGE_FIELDS = (
    "id", "direction", "kind", "from", "to", "taskId", "body", "status", "priority", "sentAt",
    "deliveredAt", "acknowledgedAt", "reason", "data",
)  # fmt: skip
#: The fields of a message a change may name (crew/models.py CHANGEABLE).
CHANGEABLE = ("deliveredAt", "acknowledgedAt", "reason", "data")
#: crew/registry.py MessageStatus.
MESSAGE_STATUSES = ("pending", "delivered", "acknowledged", "rejected")
#: crew/registry.py REDIRECTING_DECISIONS: a decision that is also one about its `focus`.
REDIRECTING = frozenset({"preempt", "merge", "cancel"})


def mailbox(call: Call) -> int:
    color = colored(call)
    task_id = task_option(call)
    box, status = call.options.get("--box"), call.options.get("--status")
    if (box is not None and box not in BOXES) or (
        status is not None and status not in MESSAGE_STATUSES
    ):
        raise Fallback  # the full command names the values it takes
    files = open_run(call)
    before = files.clean()
    _run, tasks = read_state(files)
    lines = {name: _lines(files.box(name)) for name in ([box] if box else BOXES)}
    if files.clean() != before:
        raise Fallback  # a write came between the reads: the full command waits for it
    order = {t["id"]: index for index, t in enumerate(tasks)}  # crew.toml's, then added ones
    if task_id is not None and task_id not in order:
        raise Fallback  # the full command says the run has no such task
    views: list[dict[str, Any]] = []
    for name, found in lines.items():
        for history in _histories(found).values():
            latest = history[-1]
            if task_id is not None and latest["taskId"] != task_id:
                continue
            if status is not None and latest["status"] != status:
                continue
            views.append(_view(latest, name, history))
    _attach_decisions(views)
    views.sort(key=lambda v: (order.get(v["taskId"], len(order)), v["sentAt"]))
    if "--json" in call.options:
        print_json(views)
    else:
        write_timeline(views, color=color, width=terminal_width())
    return 0


def _lines(path: str) -> list[dict[str, Any]]:
    """Every line of a mailbox file, each one crew wrote (Fallback otherwise)."""
    data = read_file(path)
    if data and not data.endswith(b"\n"):
        raise Fallback  # cut short: the full command reads around it
    return [checked(raw) for raw in data.splitlines()]


def checked(raw: bytes) -> dict[str, Any]:
    """A mailbox line as crew writes it: a whole message, or a change (Fallback otherwise)."""
    line = json.loads(raw)
    if not isinstance(line, dict) or not as_crew_writes(
        line, "message" if "body" in line else "change"
    ):
        raise Fallback  # the full command skips a line no crew wrote
    return line


def merged(base: dict[str, Any] | None, line: dict[str, Any]) -> dict[str, Any] | None:
    """A message's state after `line` (crew/store/mailfile.py `Merger`), from its state before
    (None: never seen); None for a change to a message never seen."""
    if "body" in line:
        return line
    if base is None:
        return None
    changed = {f: line[f] for f in CHANGEABLE if f in line}
    return {**base, "status": line["status"], **changed}


def as_written(message: dict[str, Any]) -> dict[str, Any]:
    """crew/models.py `MailboxMessage.to_dict` of a state: its fields in order, none null."""
    return {key: message[key] for key in MESSAGE_FIELDS if message.get(key) is not None}


def _histories(lines: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Each message's states, line by line (crew/store/mailfile.py `states`), first seen first."""
    latest: dict[str, dict[str, Any]] = {}
    histories: dict[str, list[dict[str, Any]]] = {}
    for line in lines:
        state = merged(latest.get(line["id"]), line)
        if state is None:
            continue  # a change to a message never seen
        latest[state["id"]] = state
        histories.setdefault(state["id"], []).append(state)
    return histories


def _view(message: dict[str, Any], box: str, history: list[dict[str, Any]]) -> dict[str, Any]:
    """crew/results/reading.py `MessageView.to_json`."""
    data = as_written(message)
    kept: list[dict[str, Any]] = []
    for line in history:  # the lines where the status changed
        if not kept or kept[-1]["status"] != line["status"]:
            kept.append(line)
    data["box"] = box
    data["history"] = [_entry(line) for line in kept]
    data["decisions"] = []
    return data


def _entry(line: dict[str, Any]) -> dict[str, Any]:
    entry: dict[str, Any] = {"status": line["status"]}
    at = _status_at(line)
    if at:
        entry["at"] = at
    if line.get("reason"):
        entry["reason"] = line["reason"]
    return entry


def _status_at(line: dict[str, Any]) -> str | None:
    """crew/models.py `MailboxMessage.status_at`, on the JSON form."""
    if line["status"] == "rejected":
        at = (line.get("data") or {}).get("rejectedAt")
        return at if isinstance(at, str) else None
    key = {"pending": "sentAt", "delivered": "deliveredAt", "acknowledged": "acknowledgedAt"}
    return line.get(key[line["status"]])


def _attach_decisions(views: list[dict[str, Any]]) -> None:
    """crew/views.py `_attach_decisions`, on the JSON form."""
    by_id = {v["id"]: v for v in views}
    for view in views:
        for decision in (view.get("data") or {}).get("decisions", []):
            if not isinstance(decision, dict):
                continue
            view["decisions"].append(decision)
            focus = by_id.get(str(decision.get("focus", "")))
            if focus is not None and decision.get("action") in REDIRECTING:
                focus["decisions"].append({**decision, "by": view["id"]})
    for view in views:
        view["decisions"].sort(key=lambda d: (str(d.get("at", "")), _seq(d)))


def _seq(decision: dict[str, Any]) -> int:
    seq = decision.get("seq")
    return seq if isinstance(seq, int) else 0
