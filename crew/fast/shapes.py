"""Whether a record read from a run's files is as crew's models write it today, so that the fast
path may write it again as it is: its fields in the models' order, every field the models always
write present (a run an older crew made may lack one a newer crew added with a default, which
the models fill in), none null, nothing the models do not have, and each value of the JSON type
its field has — all the way down (a task's question, the manifest's crew definition).

The shapes are the models' own JSON schemas (crew/schemas.py), of what this module reads of
them, in `shapes.json` beside it, which `python -m crew.docgen` writes (and a test keeps
current): a fourth of `schemas.json`, which every command that checks a record would parse. A
record of any other shape is the full command's: it reads it through the models and writes
what they make of it. Values are checked for their JSON type only (and an enum's values); a
pattern or a bound is the models' to check, and no record crew wrote breaks one.
"""

from __future__ import annotations

import json
import os

TYPE_CHECKING = False  # `typing` costs a fast command a few milliseconds
if TYPE_CHECKING:
    from typing import Any

SHAPES = os.path.join(os.path.dirname(__file__), "shapes.json")
#: JSON Schema's scalar types, as Python's json reads them (a bool is no number).
_SCALARS: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
}
_schemas: dict[str, Any] = {}


def as_crew_writes(record: object, kind: str) -> bool:
    """Whether `record` is a `kind` (a name of `schemas.json`: manifest, task, …) exactly as the
    models would write it again."""
    if not _schemas:
        with open(SHAPES, "rb") as handle:
            _schemas.update(json.loads(handle.read()))
    schema = _schemas[kind]
    return _fits(record, schema, schema.get("$defs", {}))


def _fits(value: object, node: dict[str, Any], defs: dict[str, Any]) -> bool:
    ref = node.get("$ref")
    if ref is not None:
        node = defs[ref.rpartition("/")[2]]
    if "properties" in node:
        return _fits_model(value, node["properties"], defs)
    if "anyOf" in node:
        if value is None:
            return any(branch.get("type") == "null" for branch in node["anyOf"])
        return any(_fits(value, branch, defs) for branch in node["anyOf"])
    if "enum" in node and value not in node["enum"]:
        return False
    kind = node.get("type")
    if kind == "array":
        items = node.get("items", {})
        return isinstance(value, list) and all(_fits(item, items, defs) for item in value)
    if kind == "object":
        values = node.get("additionalProperties", {})
        if not isinstance(value, dict):
            return False
        return values is True or all(_fits(each, values, defs) for each in value.values())
    if kind in _SCALARS:
        return isinstance(value, _SCALARS[kind]) and (kind == "boolean") == isinstance(value, bool)
    return kind != "null" or value is None


def _fits_model(value: object, fields: dict[str, Any], defs: dict[str, Any]) -> bool:
    if not isinstance(value, dict) or list(value) != [key for key in fields if key in value]:
        return False  # not an object; a field the models lack; out of their order
    for key, field in fields.items():
        if key in value:
            if value[key] is None or not _fits(value[key], field, defs):
                return False  # the models leave out a null field
        elif not _may_be_left_out(field):
            return False  # the models would write it (its default, at least)
    return True


def _may_be_left_out(field: dict[str, Any]) -> bool:
    """Whether the models may leave the field out: it may be null (they leave out nulls)."""
    if "default" in field:
        return field["default"] is None
    return any(branch.get("type") == "null" for branch in field.get("anyOf", ()))
