"""`[[notify]]` in crew.toml: which events run which command (crew/leader/notify.py runs them)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator, field_validator

from crew.config_base import ConfigModel, Duration, split_command
from crew.registry import UNNOTIFIABLE_EVENTS, EventType, NotifyTrigger, notify_event

#: How long a notify command may run before it is killed, unless its `timeout` says.
NOTIFY_TIMEOUT = 30.0


def _listed(value: Any) -> Any:
    return [value] if isinstance(value, str) else value


def _trigger(name: str) -> str:
    event = notify_event(name)
    if event is None:
        triggers = ", ".join(t.value for t in NotifyTrigger)
        raise ValueError(
            f"unknown trigger: use {triggers}, or an event type such as run.ended "
            "(docs/file-formats.md lists them)"
        )
    if event in UNNOTIFIABLE_EVENTS:
        raise ValueError("cannot trigger a notification: a failing command would notify itself")
    return name


class NotifyConfig(ConfigModel):
    """`[[notify]]`: a command the leader runs, in the background, for events of the run."""

    on: Annotated[list[Annotated[str, AfterValidator(_trigger)]], BeforeValidator(_listed)]
    """What it is run for: `contact` (a worker asked a question), `flagged` (a task was flagged
    needs_review), `failed` (a task failed for good), or any event type such as `run.ended`;
    one name or a list."""
    command: Annotated[list[str], BeforeValidator(split_command)]
    """Argument list run with the event on its stdin, as one JSON document (the line `crew
    events --json` prints for it); a string is split like a shell would, but never run through
    one."""
    timeout: Duration = NOTIFY_TIMEOUT
    """Kill the command (its whole process group) once it has run this long (more than 0)."""

    @field_validator("on")
    @classmethod
    def _some_trigger(cls, value: list[str]) -> list[str]:
        if not value:
            raise ValueError("name at least one trigger")
        return value

    @field_validator("command")
    @classmethod
    def _runnable(cls, value: list[str]) -> list[str]:
        if not value or not value[0].strip():
            raise ValueError("must name the program to run (an argument list, or a string)")
        if any("\0" in arg for arg in value):
            raise ValueError("contains a NUL character, which no program can be given")
        return value

    @field_validator("timeout")
    @classmethod
    def _positive(cls, value: float) -> float:
        if value <= 0:
            raise ValueError("must be more than 0")
        return value

    def events(self) -> frozenset[EventType]:
        """The event types it is run for."""
        return frozenset(e for e in map(notify_event, self.on) if e is not None)
