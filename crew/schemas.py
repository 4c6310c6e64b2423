"""JSON Schemas of the file formats, generated from the models (`crew schema`).

Field descriptions are the attribute docstrings in crew/models.py and crew/config.py. pydantic can
read those itself (`use_attribute_docstrings`), but that parses the source of every model each
time crew starts; here they are read only when a schema is printed.
"""

from __future__ import annotations

import ast
import inspect
import itertools
from typing import Any

from pydantic import BaseModel, TypeAdapter

from crew import config, models
from crew.config import CrewConfig
from crew.errors import UsageError
from crew.ids import shown
from crew.models import (
    Checkpoint,
    Event,
    LeaderInfo,
    MailboxChange,
    MailboxMessage,
    Run,
    SupervisorContact,
    Task,
)
from crew.results.admin import SchemaDoc

#: name -> (what it describes, the type)
SCHEMAS: dict[str, tuple[str, Any]] = {
    "manifest": ("`manifest.json`: the run", Run),
    "tasks": (
        "`tasks.json` of a run an older crew made: every task, in crew.toml order",
        list[Task],
    ),
    "task": ("`tasks/<taskId>.json`: one task", Task),
    "event": ("one line of `events.jsonl`", Event),
    "message": (
        "a whole line of `inbox.jsonl`, `outbox.jsonl` or `steering.jsonl`: a message as sent, or "
        "as it is after a change (older crews wrote every change whole); a line without `body` "
        "is a `change`",
        MailboxMessage,
    ),
    "change": (
        "a line of a mailbox file that records only what changed of a message written before "
        "(no `body`): merged into the message's latest state, in file order",
        MailboxChange,
    ),
    "contact": ("a worker's open question (`Task.contact`)", SupervisorContact),
    "checkpoint": ("`checkpoints/<taskId>.json`: the last state a task saved", Checkpoint),
    "leader": ("`.runtime/leader.json`: the leader lease", LeaderInfo),
    "config": ("`crew.toml`: the crew definition", CrewConfig),
}


def schema(name: str) -> dict[str, Any]:
    """The JSON Schema of one file format (UsageError for an unknown name)."""
    try:
        description, kind = SCHEMAS[name]
    except KeyError:
        raise UsageError(
            f"Unknown schema {shown(name)}: expected one of {', '.join(SCHEMAS)}."
        ) from None
    document = TypeAdapter(kind).json_schema(by_alias=True, mode="serialization")
    _describe(document, kind)
    document.setdefault("description", description)
    document["title"] = name
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **document}


def all_schemas() -> dict[str, dict[str, Any]]:
    return {name: schema(name) for name in SCHEMAS}


def schema_doc(name: str | None = None) -> SchemaDoc:
    """`crew schema [NAME]`: one schema, or all of them by name."""
    return SchemaDoc(schema(name) if name is not None else all_schemas())


def _describe(document: dict[str, Any], kind: Any) -> None:
    """Add each field's docstring as its description, in the root and in every $defs entry."""
    classes = _model_classes()
    root = kind if isinstance(kind, type) and issubclass(kind, BaseModel) else None
    targets: list[tuple[dict[str, Any], type[BaseModel] | None]] = [(document, root)]
    targets += [(node, classes.get(name)) for name, node in document.get("$defs", {}).items()]
    for node, cls in targets:
        if cls is None:
            continue
        docs = field_docstrings(cls)
        for field_name, field in cls.model_fields.items():
            text = docs.get(field_name)
            key = field.serialization_alias or field.alias or field_name
            if text and key in node.get("properties", {}):
                node["properties"][key]["description"] = text


def _model_classes() -> dict[str, type[BaseModel]]:
    found: dict[str, type[BaseModel]] = {}
    for module in (models, config):
        for name, value in vars(module).items():
            if isinstance(value, type) and issubclass(value, BaseModel):
                found[name] = value
    return found


def field_docstrings(cls: type[BaseModel]) -> dict[str, str]:
    """`field: type` followed by a string literal, in the class body: the field's docstring."""
    try:
        tree = ast.parse(inspect.cleandoc("\n" + inspect.getsource(cls)))
    except (OSError, TypeError, SyntaxError):
        return {}
    body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
    docs: dict[str, str] = {}
    for statement, following in itertools.pairwise(body):
        if (
            isinstance(statement, ast.AnnAssign)
            and isinstance(statement.target, ast.Name)
            and isinstance(following, ast.Expr)
            and isinstance(following.value, ast.Constant)
            and isinstance(following.value.value, str)
        ):
            docs[statement.target.id] = inspect.cleandoc(following.value.value)
    return docs
