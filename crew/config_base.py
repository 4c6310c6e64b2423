"""The building blocks of crew.toml's models: camelCase models that refuse unknown keys,
durations, and commands written as a list or as one string."""

from __future__ import annotations

import shlex
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, WithJsonSchema
from pydantic.alias_generators import to_camel

from crew.clock import parse_duration

#: Seconds; written in crew.toml as "500ms", "30s", "2m", "1h" or a number of seconds.
Duration = Annotated[
    float,
    BeforeValidator(parse_duration),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "string", "pattern": r"^[0-9]+(\.[0-9]+)?(ms|s|m|h|d)?$"},
                {"type": "number", "minimum": 0},
            ],
            "description": "a duration: '500ms', '30s', '2m', '1h', or a number of seconds",
        }
    ),
]


def split_command(value: Any) -> Any:
    """A command written as one string becomes its argument list, split like a shell would."""
    return shlex.split(value) if isinstance(value, str) else value


class CamelModel(BaseModel):
    """Base of every model of a file crew reads: camelCase in the file, snake_case in Python."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
    )


class ConfigModel(CamelModel):
    """Base of crew.toml's sections: an unknown key is an error (most likely a typo)."""

    model_config = ConfigDict(extra="forbid")
