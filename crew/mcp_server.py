"""`crew mcp`: the verbs as the tools of an MCP server, and a run's files as its resources.

Each tool is a thin call of the library function the same command calls (crew/cli/*.py), as
the server's own session, so a lead agent passes the same gate as a person: ownership, `force`,
idempotency keys. A tool returns the document `--json` prints; a CrewError becomes a tool error
carrying crew's sentence, its hint and the exit code's name. Built on the `mcp` SDK's MCPServer,
which makes each tool's input schema from its signature (pydantic) and speaks the protocol.
Imported only by `crew mcp`: nothing else loads the SDK.
"""

# No `from __future__ import annotations`: the SDK reads the tools' signatures at runtime.

import functools
import inspect
import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import anyio
import anyio.to_thread
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ToolError
from mcp_types import CallToolResult, TextContent, ToolAnnotations
from pydantic import Field, ValidationError

from crew import __version__, ids, verbs
from crew.errors import CrewError, ExitCode, UsageError, error_for, from_os_error
from crew.paths import Home
from crew.registry import Box, MessageStatus, RunStatus
from crew.render_streams import event_json
from crew.session import Actor, current_actor
from crew.store.runstore import RunStore
from crew.views import list_runs, mailbox_view, run_status
from crew.waiting import Until, wait_for_run

#: The longest a `wait` call blocks: a tool call is a request a client holds open.
MAX_WAIT = 60.0
#: How many calls of `wait` may block at once, each on a thread of its own: on the threads the
#: other tools run on (anyio's 40), forty of them held every other call up, any client's.
MAX_WAITS = 200
#: The most events one `events` call returns (the cursor pages through the rest).
MAX_EVENTS = 500

RunRef = Annotated[
    str,
    Field(description="Run id, a unique prefix of one, or 'latest'.", max_length=64),
]
TaskId = Annotated[str, Field(description="The task id.", max_length=64)]
OnlyTask = Annotated[str | None, Field(description="Only this task.", max_length=64)]
Body = Annotated[str, Field(description="The message (UTF-8 text, at most the run's limit).")]
Key = Annotated[
    str | None,
    Field(description="Send at most once per key in this run: a retry returns the first message."),
]
Force = Annotated[bool, Field(description="Act on a run owned by another session (recorded).")]

#: The tools that only read: all a `--read-only` server offers.
READING = ("runs", "status", "mailbox", "events", "wait")


class CrewServer(MCPServer):
    """The SDK's server, with arguments that fail a tool's schema reported as crew reports a
    usage error: one sentence naming each wrong argument, and the exit code's name."""

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        tool = self._tool_manager.get_tool(name)
        known = tool.parameters.get("properties", {}) if tool is not None else None
        unknown = [key for key in arguments if known is not None and key not in known]
        if unknown:  # the SDK drops them: a key misspelled would go unnoticed (once, twice…)
            listed = ", ".join(repr(key) for key in unknown)
            return tool_error(
                UsageError(f"Invalid arguments for {name}: no such argument {listed}.")
            )
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as error:
            cause = error.__cause__
            if not isinstance(cause, ValidationError):
                raise
            wrong = "; ".join(
                f"{'.'.join(str(p) for p in each['loc'])}: {each['msg']}" for each in cause.errors()
            )
            return tool_error(UsageError(f"Invalid arguments for {name}: {wrong}."))


@dataclass(frozen=True)
class Crew:
    """What every tool call shares: the crew home, and who acts (the server's session)."""

    home: Home
    actor: Actor
    #: The session named by `crew mcp --session`, handed on to the `crew run` of `start_run`.
    session: str | None

    def open(self, run: str) -> RunStore:
        """The run a tool names (validated as the command line validates it)."""
        return RunStore.open(self.home, run)


def build_server(home: Home, *, session: str | None, read_only: bool) -> MCPServer:
    """The MCP server of `crew mcp`: the reading tools, the acting ones unless `read_only`,
    and the run files as resources."""
    crew = Crew(home, current_actor(session, home=home.root), session)
    server = CrewServer(
        "crew",
        version=__version__,
        instructions="Lead crew runs: read their state, answer and steer their workers.",
        log_level="WARNING",
    )
    for name, tool in _tools(crew).items():
        if read_only and name not in READING:
            continue
        hint = ToolAnnotations(read_only_hint=name in READING, open_world_hint=False)
        made = _waiting(_as_tool(tool)) if name == "wait" else _as_tool(tool)
        server.add_tool(made, name=name, annotations=hint)
    _resources(server, crew)
    return server


# Long: one small closure per verb, each the body of a command of crew/cli/.
def _tools(crew: Crew) -> dict[str, Callable[..., Any]]:
    """Every tool, by name: thin calls of the library, as the commands make them."""

    def runs(
        status: Annotated[
            RunStatus | None, Field(description="Only runs with this status.")
        ] = None,
    ) -> Any:
        """List runs, newest first."""
        return list_runs(crew.home, status=status)

    def status(run: RunRef = "latest") -> Any:
        """A run: its tasks, open questions, pending messages and warnings."""
        return run_status(crew.open(run))

    def mailbox(
        run: RunRef,
        task: OnlyTask = None,
        box: Annotated[Box | None, Field(description="Only this mailbox file.")] = None,
        status: Annotated[
            MessageStatus | None, Field(description="Only messages in this status.")
        ] = None,
    ) -> Any:
        """The mailbox as a timeline per task: each message and what became of it."""
        if task is not None:
            ids.check_task_id(task)
        return mailbox_view(crew.open(run), task=task, box=box, status=status)

    def events(
        run: RunRef,
        since: Annotated[int, Field(ge=0, description="Only events after this seq.")] = 0,
        limit: Annotated[
            int, Field(ge=1, le=MAX_EVENTS, description="At most this many events.")
        ] = 100,
    ) -> Any:
        """The run's events after the cursor `since` (a seq); `cursor` is the next one."""
        return _events(crew.open(run), since, limit)

    def wait(
        run: RunRef,
        until: Annotated[
            Until,
            Field(
                description="started: some task (or `task`) has started; waiting: it waits for "
                "an answer; done: the run (or `task`) has ended."
            ),
        ] = Until.DONE,
        task: OnlyTask = None,
        timeout: Annotated[
            float, Field(gt=0, le=MAX_WAIT, description="Give up after this many seconds.")
        ] = 30.0,
    ) -> Any:
        """Block until a task starts or waits for an answer, or the run (or task) ends;
        a TIMEOUT error after `timeout` seconds."""
        if task is not None:
            ids.check_task_id(task)
        return wait_for_run(crew.open(run), until, task_id=task, timeout=timeout)

    def respond(
        run: RunRef,
        task: TaskId,
        body: Body,
        contact: Annotated[
            str | None, Field(description="Answer only if this is still the open question.")
        ] = None,
        idempotency_key: Key = None,
        force: Force = False,
    ) -> Any:
        """Answer a task that is waiting on a question (the task runs again)."""
        return _send(verbs.respond, run, task, body, idempotency_key, force, contact_id=contact)

    def steer(
        run: RunRef, task: TaskId, body: Body, idempotency_key: Key = None, force: Force = False
    ) -> Any:
        """Redirect a running or waiting task (delivered ahead of everything but answers)."""
        return _send(verbs.steer, run, task, body, idempotency_key, force)

    def follow_up(
        run: RunRef, task: TaskId, body: Body, idempotency_key: Key = None, force: Force = False
    ) -> Any:
        """Queue more work for a task (delivered when it is running and not waiting)."""
        return _send(verbs.follow_up, run, task, body, idempotency_key, force)

    def nudge(
        run: RunRef,
        task: TaskId,
        body: Annotated[str | None, Field(description="Default: ask for a status.")] = None,
        idempotency_key: Key = None,
        force: Force = False,
    ) -> Any:
        """Ask a running or waiting task for a status report."""
        return _send(verbs.nudge, run, task, body, idempotency_key, force)

    def cancel(
        run: RunRef,
        task: Annotated[str | None, Field(description="Default: the whole run.")] = None,
        force: Force = False,
        grace: Annotated[
            float,
            Field(
                ge=0, le=MAX_WAIT, description="Seconds a worker gets between SIGTERM and SIGKILL."
            ),
        ] = 5.0,
    ) -> Any:
        """Cancel a task or the whole run: reject what was pending, stop the workers."""
        if task is not None:
            ids.check_task_id(task)
        return verbs.cancel(crew.open(run), task, session=crew.actor, force=force, grace=grace)

    def start_run(
        crew_toml: Annotated[
            str | None,
            Field(
                description="The crew definition, relative to the project or else to the crew "
                "home (default: the home's crew.toml)."
            ),
        ] = None,
        max_parallel: Annotated[
            int | None, Field(ge=1, description="Run at most this many tasks at once.")
        ] = None,
        timeout: Annotated[str | None, Field(description="e.g. 30m: cancel what is left.")] = None,
    ) -> Any:
        """Start a run of a crew, led from a background process (`crew run --detach`)."""
        return _start_run(crew, crew_toml, max_parallel, timeout)

    def _send(
        verb: Callable[..., Any],
        run: str,
        task: str,
        body: str | None,
        key: str | None,
        force: bool,
        **extra: Any,
    ) -> Any:
        ids.check_task_id(task)
        if key is not None:
            ids.check_idempotency_key(key, "idempotency_key")
        store = crew.open(run)
        return verb(
            store, task, body, session=crew.actor, force=force, idempotency_key=key, **extra
        )

    found: list[Callable[..., Any]] = [runs, status, mailbox, events, wait, respond, steer]
    found += [follow_up, nudge, cancel, start_run, _add_task(crew)]
    return {tool.__name__: tool for tool in found}


def _add_task(crew: Crew) -> Callable[..., Any]:
    """The `add_task` tool, over `crew.verbs.add_task` (`crew add`)."""

    def add_task(
        run: RunRef,
        agent: Annotated[str, Field(description="The agent of crew.toml to run it.")],
        prompt: Annotated[str, Field(description="What the task is to do.")],
        task_id: Annotated[
            str | None, Field(description="Its id (default: one is made).", max_length=64)
        ] = None,
        depends_on: Annotated[
            tuple[str, ...], Field(description="Tasks that must complete before it starts.")
        ] = (),
        title: Annotated[str | None, Field(description="A short title.")] = None,
        idempotency_key: Key = None,
        force: Force = False,
    ) -> Any:
        """Add a task to a live or leaderless run; the leader starts it when it is ready."""
        if idempotency_key is not None:
            ids.check_idempotency_key(idempotency_key, "idempotency_key")
        return verbs.add_task(
            crew.open(run),
            agent=agent,
            prompt=prompt,
            task_id=task_id,
            depends_on=depends_on,
            session=crew.actor,
            force=force,
            idempotency_key=idempotency_key,
            title=title,
        )

    return add_task


def _events(store: RunStore, since: int, limit: int) -> dict[str, Any]:
    """A page of the event log after `since`, as `crew events --json` prints each event."""
    after = [e for e in store.events().records if e.seq > since]
    page = after[:limit]
    return {
        "runId": store.run_id,
        "events": [json.loads(event_json(e)) for e in page],
        "cursor": page[-1].seq if page else since,
        "more": len(after) > limit,
    }


def _start_run(
    crew: Crew, crew_toml: str | None, max_parallel: int | None, timeout: str | None
) -> dict[str, Any]:
    """`crew run --detach` in a fresh process: a server serving calls on threads must not fork
    a leader from itself. The crew definition must lie inside the project."""
    args = ["run", "--detach", "--json", "--home", str(crew.home.root)]
    if crew_toml is not None:
        project = crew.home.project_dir.resolve()
        path = (project / crew_toml).resolve()
        if not path.is_relative_to(project):
            raise UsageError(f"crew_toml {crew_toml!r} is outside the project folder {project}.")
        in_home = (crew.home.root / crew_toml).resolve()  # where `crew init` keeps crew.toml
        if not path.exists() and in_home.exists() and in_home.is_relative_to(project):
            path = in_home
        args.append(str(path))
    if max_parallel is not None:
        args += ["--max-parallel", str(max_parallel)]
    if timeout is not None:
        args += ["--timeout", timeout]
    if crew.session is not None:
        args += ["--session", crew.session]
    done = subprocess.run(
        [sys.executable, "-m", "crew", *args],
        capture_output=True,
        text=True,
        check=False,
        cwd=crew.home.project_dir,
        env={**os.environ, "CREW_FAST": "0"},
    )
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines() or ["crew run failed."]
        failure = error_for(done.returncode, lines[0].removeprefix("crew: error: "))
        failure.hint = "\n".join(lines[1:]) or None
        raise failure
    document: dict[str, Any] = json.loads(done.stdout)
    return document


def _as_tool(fn: Callable[..., Any]) -> Callable[..., CallToolResult]:
    """`fn` as an MCP tool: its result as the `--json` document, a CrewError as a tool error."""

    @functools.wraps(fn)
    def call(**arguments: Any) -> CallToolResult:
        try:
            result = fn(**arguments)
        except CrewError as error:
            return tool_error(error)
        except OSError as error:  # a read-only folder, a full disk: as the CLI reports it
            return tool_error(from_os_error(error))
        except ValueError as error:  # what no path or command may hold (a NUL): a usage error
            return tool_error(UsageError(f"Invalid arguments for {fn.__name__}: {error}."))
        if isinstance(result, dict):
            return _document(result)
        failure = result.failure()
        return tool_error(failure) if failure is not None else _document(result.to_json())

    signature = inspect.signature(fn, eval_str=True)
    call.__signature__ = signature.replace(return_annotation=CallToolResult)  # type: ignore[attr-defined]  # read by the SDK
    return call


def _waiting(call: Callable[..., CallToolResult]) -> Callable[..., Any]:
    """A tool that blocks (`wait`) on threads of its own, let go of as soon as its client
    cancels the call or goes (the thread ends at the wait's timeout: it only reads)."""
    limiter: list[anyio.CapacityLimiter] = []  # made in the server's event loop, once

    @functools.wraps(call)
    async def waiting(**arguments: Any) -> CallToolResult:
        if not limiter:
            limiter.append(anyio.CapacityLimiter(MAX_WAITS))
        blocking = functools.partial(call, **arguments)
        return await anyio.to_thread.run_sync(blocking, limiter=limiter[0], abandon_on_cancel=True)

    waiting.__signature__ = inspect.signature(call)  # type: ignore[attr-defined]  # read by the SDK
    return waiting


def _document(document: Any) -> CallToolResult:
    text = json.dumps(document, ensure_ascii=False)
    structured = document if isinstance(document, dict) else {"items": document}
    return CallToolResult(
        content=[TextContent(type="text", text=text)], structured_content=structured
    )


def tool_error(error: CrewError) -> CallToolResult:
    """A CrewError as an MCP tool error: crew's sentence, its hint, the exit code's name."""
    name = ExitCode(int(error.exit_code)).name
    text = f"crew: error: {error.message}" + (f"\n{error.hint}" if error.hint else "")
    data = {"error": error.message, "hint": error.hint, "exitCode": name}
    return CallToolResult(
        content=[TextContent(type="text", text=f"{text}\n(exit code {name})")],
        structured_content=data,
        is_error=True,
    )


# ----------------------------------------------------------------------------- resources

_BOXES = {box.value: box for box in Box}


def _resources(server: MCPServer, crew: Crew) -> None:
    """A run's files as resources, `crew://runs/<runId>/…`: each id validated before it
    names a path, each file one of a fixed set."""

    def read(run: str, task: str | None, path: Callable[[RunStore], Path]) -> str:
        try:
            store = crew.open(run)
            if task is not None:
                store.state().task(ids.check_task_id(task))  # NotFound: no such task
            return path(store).read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return ""
        except CrewError as error:
            name = ExitCode(int(error.exit_code)).name
            raise ResourceError(f"crew: error: {error.message} ({name})") from None

    def manifest(run: str) -> str:
        return read(run, None, lambda store: store.paths.manifest)

    def events(run: str) -> str:
        return read(run, None, lambda store: store.paths.events)

    def task(run: str, task: str) -> str:
        return read(run, task, lambda store: store.paths.task_file(task))

    def log(run: str, task: str) -> str:
        return read(run, task, lambda store: store.paths.log(task))

    def mailbox(run: str, box: str) -> str:
        chosen = _BOXES.get(box)
        if chosen is None:
            raise ResourceError(
                f"crew: error: No mailbox {box!r}: expected one of {', '.join(_BOXES)}."
            )
        return read(run, None, lambda store: store.paths.box(chosen))

    readers: list[tuple[str, Callable[..., str], str]] = [
        ("crew://runs/{run}/manifest.json", manifest, "application/json"),
        ("crew://runs/{run}/events.jsonl", events, "application/jsonl"),
        ("crew://runs/{run}/tasks/{task}", task, "application/json"),
        ("crew://runs/{run}/logs/{task}", log, "text/plain"),
        ("crew://runs/{run}/mailbox/{box}", mailbox, "application/jsonl"),
    ]
    for uri, reader, mime in readers:
        server.resource(uri, name=reader.__name__, mime_type=mime)(reader)
