"""Whether a record read from a run's files is as crew's models write it today, so that the fast
path may write it again as it is: its fields in the models' order, every field the models always
write present (a run an older crew made may lack one a newer crew added with a default, which
the models fill in), none null, nothing the models do not have, and each value of the JSON type
its field has — all the way down (a task's question, the manifest's crew definition).

The shapes are the models' own JSON schemas (crew/schemas.py), of what this module reads of
them, in `shapes.json` beside it, which `python -m crew.docgen` writes (and a test keeps
current): a fourth of `schemas.json`, which every command that checks a record would parse. A
record of any other shape is the full command's: it reads it through the models and writes
what they make of it. Values are checked as the schemas say (their JSON type, an enum's
values, a string's pattern and length, a number's bounds, an array's length) and as JSON the
models read (no lone surrogate, which pydantic takes for invalid JSON). What a model's own
validator checks beyond its schema (a crew definition's references) is the full command's:
no record crew wrote breaks it, and one edited by hand so is read by the models once it is.

Each shape is made once into a tree of checks (a function for each node of the schema), which
checks a record in about half the time a walk of the schema takes.
"""

from __future__ import annotations

import json
import os
import re

TYPE_CHECKING = False  # `typing` costs a fast command a few milliseconds
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    Check = Callable[[Any], bool]

SHAPES = os.path.join(os.path.dirname(__file__), "shapes.json")
#: JSON Schema's scalar types, as Python's json reads them (a bool is no number).
_SCALARS: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
}
#: A lone surrogate: searched for in non-ASCII text only (compiled then, by `re`'s cache).
_SURROGATE = "[\ud800-\udfff]"
#: A number's bounds: the keyword, and whether the value is within it.
_BOUNDS: dict[str, Callable[[Any, Any], bool]] = {
    "minimum": lambda value, bound: value >= bound,
    "maximum": lambda value, bound: value <= bound,
    "exclusiveMinimum": lambda value, bound: value > bound,
    "exclusiveMaximum": lambda value, bound: value < bound,
}
_checks: dict[str, Check] = {}
#: shapes.json, once read (a send checks three kinds of record).
_schemas: dict[str, Any] = {}


def as_crew_writes(record: object, kind: str) -> bool:
    """Whether `record` is a `kind` (a name of `schemas.json`: manifest, task, …) exactly as the
    models would write it again."""
    check = _checks.get(kind)
    if check is None:
        if not _schemas:
            with open(SHAPES, "rb") as handle:
                _schemas.update(json.loads(handle.read()))
        schema = _schemas[kind]
        check = _checks[kind] = _Shape(schema.get("$defs", {})).check(schema)
    return check(record)


class _Shape:
    """Makes the checks of one schema, each of its definitions once."""

    def __init__(self, defs: dict[str, Any]) -> None:
        self.defs = defs
        self.made: dict[str, Check] = {}

    def check(self, node: dict[str, Any]) -> Check:
        ref = node.get("$ref")
        if ref is not None:
            return self._defined(ref.rpartition("/")[2])
        if "properties" in node:
            return self._model(node["properties"])
        if "anyOf" in node:
            return self._any_of(node["anyOf"])
        typed = self._typed(node)
        if "enum" not in node:
            return typed
        values = tuple(node["enum"])
        return lambda value: value in values and typed(value)

    def _defined(self, name: str) -> Check:
        made = self.made.get(name)
        if made is None:  # no definition of crew's models refers to itself
            made = self.made[name] = self.check(self.defs[name])
        return made

    def _any_of(self, branches: list[dict[str, Any]]) -> Check:
        nullable = any(branch.get("type") == "null" for branch in branches)
        checks = [self.check(branch) for branch in branches]

        def any_of(value: object) -> bool:
            if value is None:
                return nullable
            return any(check(value) for check in checks)

        return any_of

    def _model(self, properties: dict[str, Any]) -> Check:
        names = list(properties)
        fields = [
            (key, self.check(field), _may_be_left_out(field)) for key, field in properties.items()
        ]

        def model(value: object) -> bool:
            if not isinstance(value, dict) or list(value) != [key for key in names if key in value]:
                return False  # not an object; a field the models lack; out of their order
            for key, check, optional in fields:
                if key in value:
                    if value[key] is None or not check(value[key]):
                        return False  # the models leave out a null field
                elif not optional:
                    return False  # the models would write it (its default, at least)
            return True

        return model

    def _typed(self, node: dict[str, Any]) -> Check:
        kind = node.get("type")
        if kind == "array":
            return self._array(node)
        if kind == "object":
            return self._object(node)
        if kind == "string":
            return _string(node)
        if kind in _SCALARS:
            return _scalar(kind, node)
        if kind == "null":
            return lambda value: value is None
        return lambda value: True

    def _array(self, node: dict[str, Any]) -> Check:
        each = self.check(node.get("items", {}))
        low, high = node.get("minItems", 0), node.get("maxItems")

        def array(value: object) -> bool:
            if not isinstance(value, list) or len(value) < low:
                return False
            return (high is None or len(value) <= high) and all(map(each, value))

        return array

    def _object(self, node: dict[str, Any]) -> Check:
        values = node.get("additionalProperties", {})
        each = None if values is True else self.check(values)

        def mapping(value: object) -> bool:
            if not isinstance(value, dict) or not all(map(_text, value)):
                return False
            return each is None or all(map(each, value.values()))

        return mapping


def _text(value: str) -> bool:
    """Whether a string is one the models read: JSON with no lone surrogate (`\\udcff`)."""
    return value.isascii() or re.search(_SURROGATE, value) is None


def _string(node: dict[str, Any]) -> Check:
    low, high, pattern = node.get("minLength", 0), node.get("maxLength"), node.get("pattern")
    if pattern is not None:  # `$` as the models' regex engine takes it: the very end
        # compiled (and cached by `re`) at the first value it checks: a field no record has
        # costs nothing, and a pattern is a tenth of a millisecond to compile
        anchored = pattern[:-1] + r"\Z" if pattern.endswith("$") else pattern
    if pattern is None and not low and high is None:  # the common case
        return lambda value: isinstance(value, str) and _text(value)

    def string(value: object) -> bool:
        if not isinstance(value, str) or not _text(value) or len(value) < low:
            return False
        if high is not None and len(value) > high:
            return False
        return pattern is None or re.search(anchored, value) is not None

    return string


def _scalar(kind: str, node: dict[str, Any]) -> Check:
    types, boolean = _SCALARS[kind], kind == "boolean"
    bounds = [(_BOUNDS[key], node[key]) for key in _BOUNDS if key in node]

    def scalar(value: object) -> bool:
        if not isinstance(value, types) or boolean != isinstance(value, bool):
            return False
        return all(within(value, bound) for within, bound in bounds)

    return scalar


def _may_be_left_out(field: dict[str, Any]) -> bool:
    """Whether the models may leave the field out: it may be null (they leave out nulls)."""
    if "default" in field:
        return field["default"] is None
    return any(branch.get("type") == "null" for branch in field.get("anyOf", ()))
