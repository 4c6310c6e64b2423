"""crew.toml: its model, and loading it with errors that name the file, the key and the fix."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any

from pydantic import (
    BeforeValidator,
    ByteSize,
    Field,
    field_validator,
    model_validator,
)

from crew.config_base import ConfigModel, Duration
from crew.config_base import split_command as _split_command
from crew.ids import TASK_ID_PATTERN
from crew.notify_config import NotifyConfig
from crew.registry import (
    BLOCKING_CONTACTS,
    AgentInput,
    AgentProtocol,
    ApprovalPolicy,
    Approvals,
    ContactType,
    ExecutorKind,
    RayWorkspace,
    WorkerRight,
)

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


#: The placeholders of an agent's command, and what each becomes (crew.leader.spawn fills them
#: in; crew.config_checks refuses any other `{word}`).
PLACEHOLDERS: dict[str, str] = {
    "prompt": "the task's prompt",
    "task": "the task id",
    "run": "the run id",
    "crewDir": "the folder that holds crew.toml",
    "python": "the Python interpreter running crew (it can `import crew.worker`)",
}


class CrewSection(ConfigModel):
    """`[crew]`: the crew as a whole."""

    name: Annotated[str, Field(pattern=NAME_PATTERN)] = "crew"
    max_parallel: Annotated[int, Field(ge=1, le=10_000)] = 4
    """How many tasks run at once."""
    leader_stale_after: Duration = 10.0
    """A leader whose heartbeat is older than this is gone (`crew resume` may take over); at
    least 3s, since the heartbeat is refreshed every second."""
    executor: ExecutorKind = ExecutorKind.LOCAL
    """What runs the workers: `local` (child processes of the leader) or `ray` (the nodes of a
    Ray cluster; see `[ray]` and docs/scale-out.md)."""


class RaySection(ConfigModel):
    """`[ray]`: the Ray cluster of `[crew] executor = "ray"`."""

    address: str | None = None
    """The cluster to join (`auto`, `ray://host:10001`, `host:6379`); RAY_ADDRESS overrides
    it. Neither set: the leader starts a Ray instance of its own, on its machine."""
    workspace: RayWorkspace = RayWorkspace.SHARED
    """How a worker gets its files: `shared` (the same paths on every node), `upload` (the
    agent's folder is copied to the node), `git` (a clone of `repo` at `ref`)."""
    repo: str | None = None
    """workspace = "git": the repository each worker clones (a URL or a path on the nodes)."""
    ref: str = "HEAD"
    """workspace = "git": the branch, tag or commit it checks out."""

    @model_validator(mode="after")
    def _git_needs_a_repo(self) -> RaySection:
        if self.workspace is RayWorkspace.GIT and not self.repo:
            raise ValueError('workspace = "git" needs `repo`, the repository to clone')
        return self


class Resources(ConfigModel):
    """`[agents.<name>.resources]`: what one of its workers needs of a Ray node (placement);
    the local executor ignores them."""

    cpus: Annotated[float, Field(ge=0)] = 1.0
    """Cores (Ray's `num_cpus`); a fraction packs several workers on one core."""
    gpus: Annotated[float, Field(ge=0)] = 0.0
    memory: ByteSize | None = None
    """Memory to reserve on the node: bytes, or a size such as "4GiB"."""
    custom: dict[str, Annotated[float, Field(ge=0)]] = Field(default_factory=dict)
    """Resources of the cluster's own naming (a licence, a kind of machine): how many."""

    def as_dict(self) -> dict[str, float]:
        """Ray's names for them: CPU, GPU, memory (bytes) and the custom ones."""
        wanted = {"CPU": self.cpus, "GPU": self.gpus, **self.custom}
        if self.memory is not None:
            wanted["memory"] = float(self.memory)
        return wanted


class AgentConfig(ConfigModel):
    """`[agents.<name>]`: a program that runs tasks."""

    command: Annotated[list[str], BeforeValidator(_split_command), Field(min_length=1)]
    """Argument list with {prompt}, {task}, {run}, {crewDir}, {python} placeholders; a string is
    split like a shell would, but never run through one."""
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
    resources: Resources = Field(default_factory=Resources)
    """What one of its workers needs of a Ray node (`[crew] executor = "ray"`)."""
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
    ref: str | None = None
    """`[ray] workspace = "git"`: the branch, tag or commit its workers check out (default: the
    `[ray] ref`)."""


class LimitsConfig(ConfigModel):
    """Backpressure and size limits, per task; how many tasks a run may grow to."""

    max_pending_steers: Annotated[int, Field(ge=1)] = 50
    """Undelivered steer + nudge messages per task; beyond it the oldest is dropped."""
    max_pending_follow_ups: Annotated[int, Field(ge=1)] = 50
    """Undelivered followUp messages per task; beyond it the oldest is dropped."""
    warn_pending: Annotated[int, Field(ge=0)] = 20
    """Warn when a task has more undelivered messages than this."""
    max_body_bytes: Annotated[int, Field(ge=1, le=MAX_BODY_LIMIT)] = DEFAULT_BODY_LIMIT
    """The largest message body, in UTF-8 bytes."""
    max_tasks: Annotated[int, Field(ge=1, le=100_000)] = 200
    """Tasks a run may hold in all, crew.toml's and those added as it runs (`crew add`, spawns)."""
    max_depth: Annotated[int, Field(ge=0, le=100)] = 3
    """How deeply spawned tasks nest: a worker's spawn is one level below its task (crew.toml's
    tasks, and those a person adds, are level 0)."""


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
    ray: RaySection = Field(default_factory=RaySection)

    def agent_for(self, task: TaskConfig) -> AgentConfig:
        return self.agents[task.agent]

    def max_attempts_for(self, task: TaskConfig) -> int:
        return task.max_attempts or self.agent_for(task).max_attempts


def load_config(path: Path) -> CrewConfig:
    """Read and check crew.toml; an InvalidConfig (a UsageError) lists every problem, each with
    its key and a fix (crew.config_checks)."""
    from crew.config_checks import InvalidConfig, check_file

    checked = check_file(path)
    if checked.config is None:
        raise InvalidConfig(str(path), checked.problems)
    return checked.config


def parse_config(document: dict[str, Any], *, source: str = "crew.toml") -> CrewConfig:
    """Check an already-parsed crew definition, as load_config does a file."""
    from crew.config_checks import InvalidConfig, check_document

    checked = check_document(document)
    if checked.config is None:
        raise InvalidConfig(source, checked.problems)
    return checked.config
