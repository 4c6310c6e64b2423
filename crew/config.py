"""crew.toml: its model, and loading it with errors that name the file, the key and the fix."""

from __future__ import annotations

import re
import shlex
import tomllib
from pathlib import Path
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    WithJsonSchema,
    field_validator,
)
from pydantic.alias_generators import to_camel

from crew.clock import parse_duration
from crew.errors import UsageError
from crew.ids import TASK_ID_PATTERN
from crew.registry import (
    BLOCKING_CONTACTS,
    AgentInput,
    AgentProtocol,
    Approvals,
    ContactType,
    WorkerRight,
)

#: Seconds; written in crew.toml as "500ms", "30s", "2m", "1h" or a number of seconds.
Duration = Annotated[
    float,
    BeforeValidator(parse_duration),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "string", "pattern": r"^\d+(\.\d+)?(ms|s|m|h|d)?$"},
                {"type": "number", "minimum": 0},
            ],
            "description": "a duration: '500ms', '30s', '2m', '1h', or a number of seconds",
        }
    ),
]

DEFAULT_BODY_LIMIT = 64 * 1024
#: The largest body limit crew.toml may set: its worst-case JSON escaping (six bytes a byte),
#: inside an event that records it, still fits the store's 1 MiB line limit.
MAX_BODY_LIMIT = 128 * 1024
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"


def _split_command(value: Any) -> Any:
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


class CrewSection(ConfigModel):
    """`[crew]`: the crew as a whole."""

    name: Annotated[str, Field(pattern=NAME_PATTERN)] = "crew"
    max_parallel: Annotated[int, Field(ge=1, le=10_000)] = 4
    """How many tasks run at once."""
    leader_stale_after: Duration = 10.0
    """A leader whose heartbeat is older than this is gone (`crew resume` may take over)."""


class AgentConfig(ConfigModel):
    """`[agents.<name>]`: a program that runs tasks."""

    command: Annotated[list[str], BeforeValidator(_split_command), Field(min_length=1)]
    """Argument list with {prompt}, {task}, {run}, {crewDir} placeholders; a string is split
    like a shell would, but never run through one."""
    protocol: AgentProtocol = AgentProtocol.CREW
    """How crew talks to it: crew (the worker protocol), text, pi, claude-code, codex."""
    input: AgentInput = AgentInput.JSONL
    """jsonl: messages arrive as JSON frames; text: as single sanitized lines."""
    cwd: str | None = None
    """Working folder, relative to crew.toml's folder; default: the folder holding the home."""
    env: dict[str, str] = Field(default_factory=dict)
    """Extra environment variables."""
    timeout: Duration | None = None
    """Stop and fail a task that runs longer than this."""
    stall_after: Duration | None = None
    """Nudge a running task that prints nothing for this long."""
    max_nudges: Annotated[int, Field(ge=0)] = 2
    """Automatic nudges before a silent task is flagged needs_review."""
    max_attempts: Annotated[int, Field(ge=1)] = 1
    """Failed attempts a task may have in all (1: no retry). An attempt cut short by the
    leader's end (a crash, Ctrl-C, a takeover) is interrupted, not failed: it does not count."""
    wait_timeout: Duration | None = None
    """Flag a task that waits for an answer longer than this."""
    keep_open: Duration | None = None
    """Agents that work in turns (pi, claude-code, codex): after a turn ends with nothing left
    to do, wait this long for follow-ups before closing the agent's stdin (default: close at
    once, and the task completes)."""
    approvals: Approvals = Approvals.ASK
    """Agents that ask to run tools: `ask` turns each request into a need_confirmation question,
    `allow` and `deny` answer every request that way without asking (recorded as events)."""
    may: list[WorkerRight] = Field(default_factory=list)
    """What its workers may do to their own run besides steering, following up and nudging its
    tasks and cancelling their own: `respond`, `cancel` (other tasks, the run), `handoff`,
    `force` (with --force, anything the owner may; recorded)."""


class TaskConfig(ConfigModel):
    """`[[tasks]]`: one task, run by an agent."""

    id: Annotated[str, Field(pattern=TASK_ID_PATTERN)]
    agent: str
    """The `[agents.<name>]` that runs it."""
    prompt: str
    """The task's instructions: `{prompt}` in the agent's command."""
    title: str | None = None
    depends_on: list[str] = Field(default_factory=list)
    """Tasks that must complete first; if one fails or is cancelled, this one is cancelled."""
    max_attempts: Annotated[int, Field(ge=1)] | None = None
    """Overrides the agent's maxAttempts."""


class LimitsConfig(ConfigModel):
    """Backpressure and size limits, per task."""

    max_pending_steers: Annotated[int, Field(ge=1)] = 50
    """Undelivered steer + nudge messages per task; beyond it the oldest is dropped."""
    max_pending_follow_ups: Annotated[int, Field(ge=1)] = 50
    """Undelivered followUp messages per task; beyond it the oldest is dropped."""
    warn_pending: Annotated[int, Field(ge=0)] = 20
    """Warn when a task has more undelivered messages than this."""
    max_body_bytes: Annotated[int, Field(ge=1, le=MAX_BODY_LIMIT)] = DEFAULT_BODY_LIMIT
    """The largest message body, in UTF-8 bytes."""


class AutoRespondRule(ConfigModel):
    """Answer a matching question unattended, through the ordinary respond path."""

    type: ContactType
    """The question type it answers: need_confirmation, need_input or need_selection."""
    match: str = ""
    """A regular expression searched in the question (empty: any question)."""
    answer: str
    task: str | None = None
    """Only questions of this task."""

    @field_validator("type")
    @classmethod
    def _blocking_only(cls, value: ContactType) -> ContactType:
        if value not in BLOCKING_CONTACTS:
            kinds = ", ".join(sorted(BLOCKING_CONTACTS))
            raise ValueError(f"autoRespond answers questions only: one of {kinds}")
        return value

    @field_validator("match")
    @classmethod
    def _valid_regex(cls, value: str) -> str:
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"not a valid regular expression: {exc}") from None
        return value

    @field_validator("answer")
    @classmethod
    def _non_empty_answer(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("an answer must not be empty")
        return value


class CrewConfig(ConfigModel):
    """crew.toml: the whole crew definition."""

    crew: CrewSection = Field(default_factory=CrewSection)
    agents: dict[str, AgentConfig]
    tasks: Annotated[list[TaskConfig], Field(min_length=1)]
    limits: LimitsConfig = Field(default_factory=LimitsConfig)
    auto_respond: list[AutoRespondRule] = Field(default_factory=list)

    def agent_for(self, task: TaskConfig) -> AgentConfig:
        return self.agents[task.agent]

    def max_attempts_for(self, task: TaskConfig) -> int:
        return task.max_attempts or self.agent_for(task).max_attempts


def load_config(path: Path) -> CrewConfig:
    """Read and validate crew.toml; any problem is a UsageError naming file, key and expectation."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file.", hint="Create one with `crew init`.") from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot read it ({exc.strerror}).") from None
    try:
        document = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise UsageError(f"{path}: not UTF-8 text.") from None
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{path}: not valid TOML: {exc}.") from None
    return parse_config(document, source=str(path))


def parse_config(document: dict[str, Any], *, source: str = "crew.toml") -> CrewConfig:
    """Validate an already-parsed crew definition (also used to re-read a manifest's config)."""
    try:
        config = CrewConfig.model_validate(document)
    except ValidationError as exc:
        problems = [_describe(error) for error in exc.errors(include_url=False)]
        raise _config_error(source, problems) from None
    problems = _reference_problems(config)
    if problems:
        raise _config_error(source, problems)
    return config


def _config_error(source: str, problems: list[str]) -> UsageError:
    first = problems[0]
    more = f" (and {len(problems) - 1} more problem{'s' * (len(problems) > 2)})" * (
        len(problems) > 1
    )
    hint = "\n".join(f"  {p}" for p in problems) if len(problems) > 1 else None
    return UsageError(f"{source}: {first}{more}", hint=hint)


def _describe(error: Any) -> str:
    path = _key_path(error["loc"])
    kind = error["type"]
    if kind == "extra_forbidden":
        return f"{path}: unknown key"
    if kind == "missing":
        return f"{path}: required key is missing"
    message = str(error["msg"])
    message = message.removeprefix("Value error, ")
    got = error.get("input")
    shown = f" (got {got!r})" if isinstance(got, str | int | float | bool) else ""
    return f"{path}: {message}{shown}" if path else f"{message}{shown}"


def _key_path(loc: tuple[int | str, ...]) -> str:
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif part not in {"function-before[_split_command(), list[str]]"}:
            path += f".{part}" if path else str(part)
    return path


def _reference_problems(config: CrewConfig) -> list[str]:
    problems: list[str] = []
    seen: set[str] = set()
    for index, task in enumerate(config.tasks):
        where = f"tasks[{index}]"
        if task.id in seen:
            problems.append(f"{where}.id: duplicate task id {task.id!r}")
        seen.add(task.id)
        if task.agent not in config.agents:
            known = ", ".join(sorted(config.agents)) or "none defined"
            problems.append(f"{where}.agent: unknown agent {task.agent!r} (agents: {known})")
    for index, task in enumerate(config.tasks):
        for dep in task.depends_on:
            if dep == task.id:
                problems.append(f"tasks[{index}].dependsOn: a task cannot depend on itself")
            elif dep not in seen:
                problems.append(f"tasks[{index}].dependsOn: unknown task {dep!r}")
    cycle = _find_cycle(config)
    if cycle:
        problems.append(f"tasks: dependency cycle {' -> '.join(cycle)}")
    for index, rule in enumerate(config.auto_respond):
        if rule.task is not None and rule.task not in seen:
            problems.append(f"autoRespond[{index}].task: unknown task {rule.task!r}")
    return problems


def _find_cycle(config: CrewConfig) -> list[str] | None:
    deps = {t.id: [d for d in t.depends_on if d != t.id] for t in config.tasks}
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for dep in deps.get(node, []):
            if state.get(dep) == 1:
                return [*path[path.index(dep) :], dep]
            if dep in deps and dep not in state:
                found = visit(dep)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for task_id in deps:
        if task_id not in state:
            found = visit(task_id)
            if found:
                return found
    return None
