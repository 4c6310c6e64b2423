"""JSON Schemas of the file formats, generated from the models (`crew schema`)."""

from __future__ import annotations

from typing import Any

from pydantic import TypeAdapter

from crew.config import CrewConfig
from crew.errors import UsageError
from crew.models import Event, LeaderInfo, MailboxMessage, Run, SupervisorContact, Task

#: name -> (what it describes, the type)
SCHEMAS: dict[str, tuple[str, Any]] = {
    "manifest": ("`manifest.json`: the run", Run),
    "tasks": ("`tasks.json`: every task of the run, in crew.toml order", list[Task]),
    "task": ("one task", Task),
    "event": ("one line of `events.jsonl`", Event),
    "message": ("one line of `inbox.jsonl`, `outbox.jsonl` or `steering.jsonl`", MailboxMessage),
    "contact": ("a worker's open question (`Task.contact`)", SupervisorContact),
    "leader": ("`.runtime/leader.json`: the leader lease", LeaderInfo),
    "config": ("`crew.toml`: the crew definition", CrewConfig),
}


def schema(name: str) -> dict[str, Any]:
    """The JSON Schema of one file format (UsageError for an unknown name)."""
    try:
        description, kind = SCHEMAS[name]
    except KeyError:
        raise UsageError(
            f"Unknown schema {name!r}: expected one of {', '.join(SCHEMAS)}."
        ) from None
    document = TypeAdapter(kind).json_schema(by_alias=True, mode="serialization")
    document.setdefault("description", description)
    document["title"] = name
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **document}


def all_schemas() -> dict[str, dict[str, Any]]:
    return {name: schema(name) for name in SCHEMAS}
