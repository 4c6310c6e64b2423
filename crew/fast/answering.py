"""What `crew respond` adds to a send on the fast path: the question it closes, and the task
that runs again (crew/verbs.py `_answers`, crew/domain/tasks.py `answer`). The common case
only — a plain question of a waiting task; a selection the answer is not one of, a secret, a
question crew asked about a limit, a flagged task: the full command's."""

from __future__ import annotations

from crew.fast.cmdline import Fallback
from crew.fast.shapes import as_crew_writes

TYPE_CHECKING = False  # `typing` costs a fast command a few milliseconds
if TYPE_CHECKING:
    from typing import Any

#: crew/models.py SupervisorContact's fields as written, in order.
CONTACT_FIELDS = (
    "id",
    "taskId",
    "type",
    "prompt",
    "options",
    "other",
    "secret",
    "askedAt",
    "answeredAt",
    "answerId",
    "limit",
)
NEED_SELECTION = "need_selection"


def question(task: dict[str, Any], body: str, pinned: str | None = None) -> dict[str, Any]:
    """The open question an answer closes, once the answer fits it (and is the question
    `pinned` names, with --contact)."""
    contact = task.get("contact")
    if not isinstance(contact, dict) or task.get("status") != "waiting":
        raise Fallback
    if pinned is not None and contact.get("id") != pinned:
        raise Fallback  # the worker asked another question since: the full command says so
    if contact.get("secret") or contact.get("limit") is not None or "answeredAt" in contact:
        raise Fallback
    if set(contact) - set(CONTACT_FIELDS):
        raise Fallback
    options = contact.get("options") or []
    chooses = contact.get("type") == NEED_SELECTION and options and not contact.get("other")
    if chooses and body not in options:
        raise Fallback  # a usage error, the full command's to word
    return contact


def message_data(contact: dict[str, Any]) -> dict[str, Any]:
    """What the answer's message records of the question."""
    return {"contactId": contact["id"], "contactType": contact["type"]}


def answered(
    task: dict[str, Any], contact: dict[str, Any], message: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The question closed by `message`, and the task running again without it."""
    update = {"answeredAt": message["sentAt"], "answerId": message["id"]}
    closed = {key: update.get(key, contact.get(key)) for key in CONTACT_FIELDS}
    closed = {key: value for key, value in closed.items() if value is not None}
    if not as_crew_writes(task, "task"):
        raise Fallback  # it is written anew, as `Task.to_dict` writes it
    running = {key: value for key, value in task.items() if key not in {"contact", "waitingSince"}}
    running["status"] = "running"
    running["nudges"] = 0
    return closed, running


def event_text(task_id: str, contact: dict[str, Any], short_body: str) -> str:
    return f"answered {task_id}'s question {contact['id']}: {short_body}"
