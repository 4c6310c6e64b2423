"""The parts of an invalid crew definition that are valid on their own, for the checks that look
across it (references, cycles, placeholders) to run in the same pass as the schema's.

Generic over crew.config's models: a new table of crew.toml needs nothing here.
"""

from __future__ import annotations

import types
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError

from crew.config import CrewConfig


def salvaged(document: dict[str, Any]) -> CrewConfig:
    """`document` as a CrewConfig of its valid parts: a key whose value is invalid keeps its
    default (an empty one if it has none), and each table of a list or a dict is salvaged the
    same way, so that indices and names stay those of the file."""
    config = _salvage_model(CrewConfig, document)
    assert isinstance(config, CrewConfig)
    return config


def known_keys(loc: tuple[int | str, ...]) -> list[str]:
    """The keys the table at `loc` (a pydantic error location) may have, as written in crew.toml."""
    annotation: Any = CrewConfig
    for part in loc:
        annotation = _unwrap(annotation)
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            name = _field_name(annotation, part)
            if name is None:
                return []
            annotation = annotation.model_fields[name].annotation
        elif get_origin(annotation) in {dict, list}:
            annotation = get_args(annotation)[-1]
        else:
            return []
    annotation = _unwrap(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [field.alias or name for name, field in annotation.model_fields.items()]
    return []


def _salvage_model(model: type[BaseModel], value: Any) -> BaseModel:
    empty = {
        name: _empty(field.annotation)
        for name, field in model.model_fields.items()
        if field.is_required()
    }
    instance = model.model_construct(**empty)
    if not isinstance(value, dict):
        return instance
    validator = model.__pydantic_validator__
    for key, item in value.items():
        name = _field_name(model, key)
        if name is None:
            continue
        try:
            validator.validate_assignment(instance, name, item)
        except ValidationError:
            part = _salvage(model.model_fields[name].annotation, item)
            if part is not _INVALID:
                object.__setattr__(instance, name, part)
    return instance


_INVALID = object()


def _salvage(annotation: Any, value: Any) -> Any:
    """The valid parts of a value that is invalid as a whole, or _INVALID when there are none."""
    annotation = _unwrap(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return _salvage_model(annotation, value)
    origin, args = get_origin(annotation), get_args(annotation)
    inner = _unwrap(args[-1]) if args else None
    if not (isinstance(inner, type) and issubclass(inner, BaseModel)):
        return _INVALID  # a list of strings, a number: valid as a whole or not at all
    if origin is list and isinstance(value, list):
        return [_salvage_model(inner, item) for item in value]
    if origin is dict and isinstance(value, dict):
        return {str(key): _salvage_model(inner, item) for key, item in value.items()}
    return _INVALID


def _unwrap(annotation: Any) -> Any:
    """`X | None` -> X."""
    if get_origin(annotation) in {Union, types.UnionType}:
        kept = [arg for arg in get_args(annotation) if arg is not type(None)]
        return kept[0] if len(kept) == 1 else annotation
    return annotation


def _empty(annotation: Any) -> Any:
    """A stand-in for a required key that is missing or invalid: checks read it as nothing."""
    origin = get_origin(_unwrap(annotation))
    if origin is list:
        return []
    if origin is dict:
        return {}
    return ""


def _field_name(model: type[BaseModel], key: object) -> str | None:
    """The field a crew.toml key names (by its camelCase alias or its Python name)."""
    for name, field in model.model_fields.items():
        if key in {name, field.alias}:
            return name
    return None
