"""Checking a crew definition: every problem at once, each with its key, a sentence and a fix.

`crew validate` lists them; `crew run` refuses with them before it writes anything. The schema
(crew.config's models) catches wrong types and values; the checks here catch what a schema cannot
see: references between tables, dependency cycles, placeholders no worker would be given, values
no worker could start with, sizes no run could store. When the schema fails, the parts that are
valid on their own are still checked (crew.config_salvage), so one pass names every problem.
"""

from __future__ import annotations

import difflib
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from pydantic.alias_generators import to_camel

from crew.clock import format_duration
from crew.config import (
    HEARTBEAT_INTERVAL,
    MAX_DEFINITION,
    MAX_NESTING,
    MAX_TASK_PROMPT,
    MAX_TITLE,
    MIN_LEADER_STALE_AFTER,
    PLACEHOLDERS,
    CrewConfig,
)
from crew.config_salvage import known_keys, salvaged
from crew.errors import UsageError
from crew.registry import RayWorkspace
from crew.text import clip


@dataclass(frozen=True)
class ConfigProblem:
    """One problem of a crew definition: where it is, what is wrong, and how to fix it."""

    #: The dotted key path (`agents.coder.command[2]`, `tasks[1].dependsOn`); empty for a
    #: problem of the file as a whole (not TOML, not UTF-8).
    key: str
    message: str
    hint: str | None = None
    line: int | None = None
    column: int | None = None

    def describe(self, source: str) -> str:
        """The problem on one line: `crew.toml:3:7: key: message`."""
        where = source + "".join(f":{n}" for n in (self.line, self.column) if n is not None)
        return f"{where}: {self.key}: {self.message}" if self.key else f"{where}: {self.message}"

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"key": self.key, "message": self.message, "hint": self.hint}
        if self.line is not None:
            data["line"] = self.line
        if self.column is not None:
            data["column"] = self.column
        return data


class InvalidConfig(UsageError):
    """A crew definition with problems (exit 2): `problems` lists every one of them."""

    def __init__(self, source: str, problems: list[ConfigProblem]) -> None:
        self.source = source
        self.problems = problems
        first = problems[0]
        extra = len(problems) - 1
        more = f" (and {extra} more problem{'s' * (extra > 1)})" if extra else ""
        hint = "\n".join(f"  {p.describe(source)}" for p in problems) if extra else first.hint
        super().__init__(first.describe(source) + more, hint=hint)


@dataclass(frozen=True)
class Checked:
    """What checking a crew definition found: the definition when it is valid, and the problems."""

    config: CrewConfig | None
    problems: list[ConfigProblem]


#: The most of a crew.toml crew reads: a crew of ten thousand tasks is a megabyte or two, and
#: a path that never ends (`crew validate /dev/zero`) must not fill the memory.
MAX_CREW_TOML = 16 * 1024 * 1024


def check_file(path: Path) -> Checked:
    """Read crew.toml and check it; a missing, unreadable or endless file is a UsageError."""
    try:
        with path.open("rb") as handle:
            raw = handle.read(MAX_CREW_TOML + 1)
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file.", hint="Create one with `crew init`.") from None
    except IsADirectoryError:
        raise UsageError(f"{path}: a folder, not a file.") from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot read it ({exc.strerror}).") from None
    if len(raw) > MAX_CREW_TOML:
        raise UsageError(
            f"{path}: more than the {MAX_CREW_TOML // 2**20} MiB crew reads of a crew.toml."
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        return Checked(None, [ConfigProblem("", "not UTF-8 text", line=line)])
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        return Checked(None, [_toml_problem(exc)])
    except RecursionError:  # arrays or inline tables nested hundreds deep
        return _nested_too_deep(text, Checked(None, [ConfigProblem("", _TOO_DEEP)]))
    checked = check_document(document)
    if checked.problems and checked.problems[0].message == _TOO_DEEP:
        return _nested_too_deep(text, checked)
    return checked


def _nested_too_deep(text: str, otherwise: Checked) -> Checked:
    """A definition nested too deep, named by the line where its brackets go too deep, whether
    the parser stopped there or not: it meets its recursion limit sooner from a deeper call
    stack (typer's), so where it stops says nothing. `otherwise` where no bracket does (the
    tables of dotted keys nest without them)."""
    found = _deepest_line(text)
    if found is None:
        return otherwise
    line, key = found
    return Checked(None, [ConfigProblem(key, _TOO_DEEP, line=line)])


def check_document(document: dict[str, Any]) -> Checked:
    """Check an already-parsed crew definition: its schema, its references, and everything
    starting its workers needs, so that no value can stop a run once it has started."""
    deep = _too_deep(document)
    if deep is not None:
        return Checked(None, [ConfigProblem(deep, _TOO_DEEP)])
    try:
        config: CrewConfig | None = CrewConfig.model_validate(document)
    except ValidationError as exc:
        config = None
        schema = [_describe(error) for error in exc.errors(include_url=False)]
    else:
        schema = []
    checked = config if config is not None else salvaged(document)
    found = (
        _reference_problems(checked)
        + _placeholder_problems(checked)
        + _launch_problems(checked)
        + _size_problems(checked)
        + _workspace_problems(checked)
    )
    # A key the schema refused is not reported again from what it was left at.
    found = [p for p in found if not any(_within(p.key, s.key) for s in schema)]
    problems = sorted(schema + found, key=lambda p: _rank(document, p.key))
    if not problems and config is not None:
        problems = _definition_size(config)
    return Checked(config if not problems else None, problems)


def _rank(document: dict[str, Any], key: str) -> tuple[int, int]:
    """Where a key is in the file (its table, then its agent or task), for problems in order."""
    found = re.match(r"([^.\[]*)[.\[]?(.*)", key)
    head, rest = (found[1], found[2]) if found else ("", "")
    tables = list(document)
    table = tables.index(head) if head in tables else len(tables)
    section = document.get(head)
    if isinstance(section, dict):
        names = [str(name) for name in section]
        entry = next((i for i, n in enumerate(names) if rest == n or rest.startswith(f"{n}.")), 0)
    else:
        index = re.match(r"\d+", rest)
        entry = int(index[0]) if index else 0
    if not rest:  # about the table as a whole (a dependency cycle): after its entries
        entry = len(section) if isinstance(section, dict | list) else 0
    return table, entry


def _within(key: str, outer: str) -> bool:
    return key == outer or key.startswith((f"{outer}.", f"{outer}["))


_TOO_DEEP = f"nested more than {MAX_NESTING} levels deep"
_TOML_AT = re.compile(r"^(?P<message>.*?) \(at line (?P<line>\d+), column (?P<column>\d+)\)$")


def _toml_problem(exc: tomllib.TOMLDecodeError) -> ConfigProblem:
    """A TOML syntax error with its line and column (Python 3.11 has them in the message only)."""
    text = str(exc)
    found = _TOML_AT.match(text)
    message = found["message"] if found else text.removesuffix(" (at end of document)")
    line = int(found["line"]) if found else None
    column = int(found["column"]) if found else None
    return ConfigProblem(
        "",
        f"not valid TOML: {message[:1].lower()}{message[1:]}",
        hint="see https://toml.io for the syntax",
        line=line,
        column=column,
    )


def _describe(error: Any) -> ConfigProblem:
    loc = error["loc"]
    key = _key_path(loc)
    kind = error["type"]
    if kind == "extra_forbidden":
        return ConfigProblem(key, "unknown key", _did_you_mean(loc[-1], known_keys(loc[:-1])))
    if kind == "missing":
        return ConfigProblem(key, "required key is missing")
    message = str(error["msg"]).removeprefix("Value error, ")
    message = _MODEL_NAME.sub("", message)  # crew.toml's readers know tables, not our classes
    got = error.get("input")
    shown = ""
    # A message that already quotes the text (a bad duration does) does not quote it again.
    quoted = isinstance(got, str) and repr(got) in message
    if isinstance(got, str | int | float | bool) and not quoted:
        shown = f" (got {clip(repr(got), 60)})"
    return ConfigProblem(key, f"{message}{shown}")


_MODEL_NAME = re.compile(r" or instance of \w+")


def _did_you_mean(word: object, choices: list[str], *, shown: str = "{}") -> str | None:
    """`did you mean X?` for the closest of `choices`, if one is close enough."""
    close = difflib.get_close_matches(str(word), choices, n=1) if choices else []
    return f"did you mean {shown.format(close[0])}?" if close else None


def _key_path(loc: tuple[int | str, ...]) -> str:
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif not part.startswith("function-"):  # a validator's own step, not a key
            path += f".{part}" if path else str(part)
    return path


def _reference_problems(config: CrewConfig) -> list[ConfigProblem]:
    problems: list[ConfigProblem] = []
    ids = [task.id for task in config.tasks]
    seen: set[str] = set()
    agents = sorted(config.agents)
    for index, task in enumerate(config.tasks):
        where = f"tasks[{index}]"
        if task.id in seen:
            hint = "give each task an id of its own"
            problems.append(ConfigProblem(f"{where}.id", f"duplicate task id {task.id!r}", hint))
        seen.add(task.id)
        if task.agent not in config.agents:
            known = ", ".join(agents) or "none defined"
            hint = _did_you_mean(task.agent, agents, shown="{!r}") or (
                f"define it as [agents.{task.agent}], or name one of the agents"
            )
            message = f"unknown agent {task.agent!r} (agents: {known})"
            problems.append(ConfigProblem(f"{where}.agent", message, hint))
    for index, task in enumerate(config.tasks):
        key = f"tasks[{index}].dependsOn"
        for dep in task.depends_on:
            if dep == task.id:
                hint = f"remove {dep!r} from its dependsOn"
                problems.append(ConfigProblem(key, "a task cannot depend on itself", hint))
            elif dep not in seen:
                hint = _did_you_mean(dep, ids, shown="{!r}") or "name the id of a task listed here"
                problems.append(ConfigProblem(key, f"unknown task {dep!r}", hint))
    cycle = _find_cycle(config)
    if cycle:
        message = f"dependency cycle {' -> '.join(cycle)}"
        problems.append(ConfigProblem("tasks", message, "remove one of these dependsOn entries"))
    for index, rule in enumerate(config.auto_respond):
        if rule.task is not None and rule.task not in seen:
            hint = _did_you_mean(rule.task, ids, shown="{!r}") or "name the id of a task"
            message = f"unknown task {rule.task!r}"
            problems.append(ConfigProblem(f"autoRespond[{index}].task", message, hint))
    return problems


def _workspace_problems(config: CrewConfig) -> list[ConfigProblem]:
    """A task's git ref means something only where workers clone a repository."""
    if config.ray.workspace is RayWorkspace.GIT:
        return []
    hint = 'set [ray] workspace = "git" and its repo, or remove the ref'
    return [
        ConfigProblem(f"tasks[{index}].ref", 'a ref is for [ray] workspace = "git"', hint)
        for index, task in enumerate(config.tasks)
        if task.ref is not None
    ]


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


#: `{word}` in a command argument; `${word}` (a shell's) and `{{word}}` (a template's) are not
#: crew's, and braces around anything but one word (`{a,b}`, `{ x }`, `{}`) are left alone.
_PLACEHOLDER = re.compile(r"(?<![{$])\{([A-Za-z_][A-Za-z0-9_]*)\}(?!\})")


def _placeholder_problems(config: CrewConfig) -> list[ConfigProblem]:
    """`{promt}`: a placeholder crew does not know would reach the worker as literal text."""
    problems: list[ConfigProblem] = []
    names = [f"{{{name}}}" for name in PLACEHOLDERS]
    for agent_name, agent in config.agents.items():
        for index, arg in enumerate(agent.command):
            for found in _PLACEHOLDER.finditer(arg):
                if found[1] in PLACEHOLDERS:
                    continue
                guess = _did_you_mean(found[0], names)
                listed = f"the placeholders are {', '.join(names)}"
                hint = (
                    f"{guess} ({listed})"
                    if guess
                    else f"{listed}; to pass braces on as they are, put spaces inside them: "
                    f"`{{ {found[1]} }}`"
                )
                key = f"agents.{agent_name}.command[{index}]"
                message = f"unknown placeholder {found[0]} (it would reach the worker as it is)"
                problems.append(ConfigProblem(key, message, hint))
    return problems


# ----------------------------------------------------------------------------- what workers need


def _launch_problems(config: CrewConfig) -> list[ConfigProblem]:
    """Values the schema accepts but no worker could be started with, and timings that would
    make the monitors act at once and over again."""
    problems: list[ConfigProblem] = []
    for name, agent in config.agents.items():
        where = f"agents.{name}"
        problems += [
            ConfigProblem(f"{where}.command[{i}]", _NUL)
            for i, arg in enumerate(agent.command)
            if "\0" in arg
        ]
        if agent.cwd is not None and "\0" in agent.cwd:
            problems.append(ConfigProblem(f"{where}.cwd", _NUL))
        for key, value in agent.env.items():
            if not key or "=" in key or "\0" in key:
                message = (
                    f"{clip(repr(key), 60)} is not an environment variable name "
                    "(it must be non-empty, without '=' or NUL)"
                )
                problems.append(ConfigProblem(f"{where}.env", message))
            elif "\0" in value:
                problems.append(ConfigProblem(f"{where}.env.{key}", _NUL))
        for key in ("timeout", "stall_after", "wait_timeout"):
            if getattr(agent, key) == 0:
                message = "must be more than 0 (leave it out for none)"
                problems.append(ConfigProblem(f"{where}.{to_camel(key)}", message))
    stale = config.crew.leader_stale_after
    if stale < MIN_LEADER_STALE_AFTER:
        message = (
            f"must be at least {format_duration(MIN_LEADER_STALE_AFTER)} "
            f"(got {format_duration(stale)}): a leader refreshes its heartbeat every "
            f"{format_duration(HEARTBEAT_INTERVAL)}, and a live one must not be taken for gone"
        )
        problems.append(ConfigProblem("crew.leaderStaleAfter", message))
    for index, task in enumerate(config.tasks):
        if "\0" in task.prompt:
            problems.append(ConfigProblem(f"tasks[{index}].prompt", _NUL))
        if task.title is not None and "\0" in task.title:
            problems.append(ConfigProblem(f"tasks[{index}].title", _NUL))
    return problems


_NUL = "contains a NUL character, which no program can be given"


def _size_problems(config: CrewConfig) -> list[ConfigProblem]:
    """Text too large to pass to a worker or to store in the run's events."""
    problems: list[ConfigProblem] = []
    for index, task in enumerate(config.tasks):
        for key, value, limit in (
            ("prompt", task.prompt, MAX_TASK_PROMPT),
            ("title", task.title, MAX_TITLE),
        ):
            size = len(value.encode("utf-8", errors="surrogatepass")) if value else 0
            if size > limit:
                message = (
                    f"{size} bytes, over the limit of {limit} "
                    "(put long instructions in a file and name it in the prompt)"
                )
                problems.append(ConfigProblem(f"tasks[{index}].{key}", message))
    for index, rule in enumerate(config.auto_respond):
        size = len(rule.answer.encode("utf-8", errors="surrogatepass"))
        if size > config.limits.max_body_bytes:
            message = f"{size} bytes, over limits.maxBodyBytes ({config.limits.max_body_bytes})"
            problems.append(ConfigProblem(f"autoRespond[{index}].answer", message))
    return problems


def _definition_size(config: CrewConfig) -> list[ConfigProblem]:
    """The whole definition too large for the run's manifest (checked once all else is valid)."""
    size = len(config.model_dump_json().encode("utf-8", errors="surrogatepass"))
    if size <= MAX_DEFINITION:
        return []
    message = (
        f"the crew definition takes {size} bytes as JSON, over the limit of {MAX_DEFINITION} "
        "(put long prompts in files and name them in the prompts)"
    )
    return [ConfigProblem("tasks", message)]


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


def _deepest_line(text: str) -> tuple[int, str] | None:
    """Where brackets and braces first nest more than MAX_NESTING deep in TOML text: the line,
    and the key on it (strings and comments are skipped); None if they never do (the tables
    of dotted keys nest without them)."""
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
    return None
