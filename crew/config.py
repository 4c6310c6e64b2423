"""crew.toml: its model, and loading it with errors that name the file, the key and the fix."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Annotated, Any

from pydantic import (
    BeforeValidator,
    Field,
    ValidationError,
    field_validator,
)
from pydantic.alias_generators import to_camel

from crew.clock import format_duration
from crew.config_base import ConfigModel, Duration
from crew.config_base import split_command as _split_command
from crew.errors import UsageError
from crew.ids import TASK_ID_PATTERN
from crew.notify_config import NotifyConfig
from crew.registry import (
    BLOCKING_CONTACTS,
    AgentInput,
    AgentProtocol,
    ApprovalPolicy,
    Approvals,
    ContactType,
    WorkerRight,
)
from crew.text import clip

DEFAULT_BODY_LIMIT = 64 * 1024
#: The largest body limit crew.toml may set: its worst-case JSON escaping (six bytes a byte),
#: inside an event that records it, still fits the store's 1 MiB line limit.
MAX_BODY_LIMIT = 128 * 1024
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
#: The largest task prompt, in UTF-8 bytes. `{prompt}` puts it in one command-line argument,
#: which Linux caps at 128 KiB, and every event about the task carries it.
MAX_TASK_PROMPT = 64 * 1024
#: The longest task title, in UTF-8 bytes: a title is a short name for people.
MAX_TITLE = 1024
#: The largest crew definition, as JSON: the run's manifest holds it, and every event that
#: changes the run carries it, on one line of at most 1 MiB.
MAX_DEFINITION = 768 * 1024
#: How deeply crew.toml may nest tables and arrays; crew's own keys need four levels.
MAX_NESTING = 16
#: How often a leader refreshes its heartbeat, in seconds.
HEARTBEAT_INTERVAL = 1.0
#: The shortest `leaderStaleAfter`: three missed heartbeats. Shorter, a leader that is merely
#: slow (a loaded machine, a long fsync) would be taken for gone and replaced.
MIN_LEADER_STALE_AFTER = 3 * HEARTBEAT_INTERVAL


class CrewSection(ConfigModel):
    """`[crew]`: the crew as a whole."""

    name: Annotated[str, Field(pattern=NAME_PATTERN)] = "crew"
    max_parallel: Annotated[int, Field(ge=1, le=10_000)] = 4
    """How many tasks run at once."""
    leader_stale_after: Duration = 10.0
    """A leader whose heartbeat is older than this is gone (`crew resume` may take over); at
    least 3s, since the heartbeat is refreshed every second."""


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
    """Extra environment variables (a name is non-empty, without `=`)."""
    timeout: Duration | None = None
    """Stop and fail a task that runs longer than this (more than 0)."""
    stall_after: Duration | None = None
    """Nudge a running task that prints nothing for this long (more than 0)."""
    max_nudges: Annotated[int, Field(ge=0)] = 2
    """Automatic nudges before a silent task is flagged needs_review."""
    max_attempts: Annotated[int, Field(ge=1)] = 1
    """Failed attempts a task may have in all (1: no retry). An attempt cut short by the
    leader's end (a crash, Ctrl-C, a takeover) is interrupted, not failed: it does not count."""
    wait_timeout: Duration | None = None
    """Flag a task that waits for an answer longer than this (more than 0)."""
    keep_open: Duration | None = None
    """Agents that work in turns (pi, claude-code, codex): after a turn ends with nothing left
    to do, wait this long for follow-ups before closing the agent's stdin (default: close at
    once, and the task completes)."""
    approvals: Approvals = Approvals.ASK
    """Agents that ask to run tools: `ask` turns each request into a need_confirmation question,
    `allow` and `deny` answer every request that way without asking (recorded as events)."""
    approval_policy: ApprovalPolicy | None = None
    """Codex: the approval policy its threads run with (`untrusted`, `on-failure`, `on-request`,
    `never`). Unset, Codex's own configuration decides; crew never changes it."""
    max_turns: Annotated[int, Field(ge=1)] | None = None
    """Agents that report usage (pi, claude-code, codex): model turns a task may take before it
    is paused to ask whether it may go on (the answer can raise the limit)."""
    max_tokens: Annotated[int, Field(ge=1)] | None = None
    """The same for tokens, input and output together."""
    max_cost_usd: Annotated[float, Field(gt=0)] | None = None
    """The same for the agent's own cost estimate in US dollars (Claude Code, pi)."""
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
    """The task's instructions: `{prompt}` in the agent's command; at most 64 KiB."""
    title: str | None = None
    """A short title (at most 1 KiB); default: the prompt's first line."""
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
    notify: list[NotifyConfig] = Field(default_factory=list)

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
        text = raw.decode("utf-8")
        document = tomllib.loads(text)
    except UnicodeDecodeError:
        raise UsageError(f"{path}: not UTF-8 text.") from None
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{path}: not valid TOML: {exc}.") from None
    except RecursionError:  # arrays or inline tables nested hundreds deep
        line, key = _deepest_line(text)
        raise _config_error(
            str(path), [f"line {line} ({key}): nested more than {MAX_NESTING} levels deep"]
        ) from None
    return parse_config(document, source=str(path))


def parse_config(document: dict[str, Any], *, source: str = "crew.toml") -> CrewConfig:
    """Validate an already-parsed crew definition: its schema, its references, and everything
    starting its workers needs, so that no value can stop a run once it has started."""
    deep = _too_deep(document)
    if deep is not None:
        raise _config_error(source, [f"{deep}: nested more than {MAX_NESTING} levels deep"])
    try:
        config = CrewConfig.model_validate(document)
    except ValidationError as exc:
        problems = [_describe(error) for error in exc.errors(include_url=False)]
        raise _config_error(source, problems) from None
    problems = _reference_problems(config) + _launch_problems(config) + _size_problems(config)
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
    shown = f" (got {clip(repr(got), 60)})" if isinstance(got, str | int | float | bool) else ""
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


# ----------------------------------------------------------------------------- what workers need


def _launch_problems(config: CrewConfig) -> list[str]:
    """Values the schema accepts but no worker could be started with, and timings that would
    make the monitors act at once and over again."""
    problems: list[str] = []
    for name, agent in config.agents.items():
        where = f"agents.{name}"
        problems += [
            f"{where}.command[{i}]: {_NUL}" for i, arg in enumerate(agent.command) if "\0" in arg
        ]
        if agent.cwd is not None and "\0" in agent.cwd:
            problems.append(f"{where}.cwd: {_NUL}")
        for key, value in agent.env.items():
            if not key or "=" in key or "\0" in key:
                problems.append(
                    f"{where}.env: {clip(repr(key), 60)} is not an environment variable name "
                    "(it must be non-empty, without '=' or NUL)"
                )
            elif "\0" in value:
                problems.append(f"{where}.env.{key}: {_NUL}")
        for key in ("timeout", "stall_after", "wait_timeout"):
            if getattr(agent, key) == 0:
                problems.append(
                    f"{where}.{to_camel(key)}: must be more than 0 (leave it out for none)"
                )
    stale = config.crew.leader_stale_after
    if stale < MIN_LEADER_STALE_AFTER:
        problems.append(
            f"crew.leaderStaleAfter: must be at least {format_duration(MIN_LEADER_STALE_AFTER)} "
            f"(got {format_duration(stale)}): a leader refreshes its heartbeat every "
            f"{format_duration(HEARTBEAT_INTERVAL)}, and a live one must not be taken for gone"
        )
    for index, task in enumerate(config.tasks):
        if "\0" in task.prompt:
            problems.append(f"tasks[{index}].prompt: {_NUL}")
        if task.title is not None and "\0" in task.title:
            problems.append(f"tasks[{index}].title: {_NUL}")
    return problems


_NUL = "contains a NUL character, which no program can be given"


def _size_problems(config: CrewConfig) -> list[str]:
    """Text too large to pass to a worker or to store in the run's events."""
    problems: list[str] = []
    for index, task in enumerate(config.tasks):
        for key, value, limit in (
            ("prompt", task.prompt, MAX_TASK_PROMPT),
            ("title", task.title, MAX_TITLE),
        ):
            size = len(value.encode("utf-8", errors="surrogatepass")) if value else 0
            if size > limit:
                problems.append(
                    f"tasks[{index}].{key}: {size} bytes, over the limit of {limit} "
                    "(put long instructions in a file and name it in the prompt)"
                )
    for index, rule in enumerate(config.auto_respond):
        size = len(rule.answer.encode("utf-8", errors="surrogatepass"))
        if size > config.limits.max_body_bytes:
            problems.append(
                f"autoRespond[{index}].answer: {size} bytes, over limits.maxBodyBytes "
                f"({config.limits.max_body_bytes})"
            )
    if not problems:
        size = len(config.model_dump_json().encode("utf-8", errors="surrogatepass"))
        if size > MAX_DEFINITION:
            problems.append(
                f"tasks: the crew definition takes {size} bytes as JSON, over the limit of "
                f"{MAX_DEFINITION} (put long prompts in files and name them in the prompts)"
            )
    return problems


def _too_deep(document: Any) -> str | None:
    """The key path of the first table or array nested more than MAX_NESTING levels deep."""
    stack: list[tuple[Any, str, int]] = [(document, "", 0)]
    while stack:
        value, path, depth = stack.pop()
        if isinstance(value, dict):
            items = [(f"{path}.{k}" if path else str(k), v) for k, v in value.items()]
        elif isinstance(value, list):
            items = [(f"{path}[{i}]", v) for i, v in enumerate(value)]
        else:
            continue
        if depth >= MAX_NESTING:
            return clip(path, 120)
        stack += [(v, p, depth + 1) for p, v in items]
    return None


def _deepest_line(text: str) -> tuple[int, str]:
    """Where brackets and braces first nest more than MAX_NESTING deep in TOML text: the line,
    and the key on it (strings and comments are skipped)."""
    depth, line, key = 0, 1, "?"
    quote = ""
    i = 0
    while i < len(text):
        char = text[i]
        if quote:
            if char == "\\" and quote in {'"', '"""'}:
                i += 2
                continue
            if text.startswith(quote, i):
                i += len(quote)
                quote = ""
                continue
        elif char in "\"'":
            quote = text[i : i + 3] if text.startswith(char * 3, i) else char
            i += len(quote)
            continue
        elif char == "#":
            while i < len(text) and text[i] != "\n":
                i += 1
            continue
        elif char == "=" and depth == 0:
            key = text[text.rfind("\n", 0, i) + 1 : i].strip() or "?"
        elif char in "[{":
            depth += 1
            if depth > MAX_NESTING:
                return line, clip(key, 60)
        elif char in "]}":
            depth = max(0, depth - 1)
        line += char == "\n"
        i += 1
    return line, clip(key, 60)
