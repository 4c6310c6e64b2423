"""`crew mcp` driven by the MCP SDK's own stdio client: a lead agent's view of the verbs."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from conftest import SESSION, snapshot_files
from leaders import write_crew
from test_verbs import ask, start

from crew.paths import Home
from crew.registry import Box, RunStatus, TaskStatus
from crew.store.runstore import RunStore

if importlib.util.find_spec("mcp") is None:  # an optional extra (imported where it is used:
    pytest.skip("needs the mcp extra", allow_module_level=True)  # 1.4 s, for each test process)
if TYPE_CHECKING:
    from mcp.client.session import ClientSession

MakeRun = Callable[..., RunStore]
READING = {"runs", "status", "mailbox", "events", "wait"}
ACTING = {"respond", "steer", "follow_up", "nudge", "cancel", "start_run", "add_task"}


@asynccontextmanager
async def client(*args: str, session: str = SESSION) -> AsyncIterator[ClientSession]:
    """A client of a `crew mcp` started as a subprocess, acting as `session`."""
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    env = {**os.environ, "CREW_SESSION_ID": session}
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "crew", "mcp", *args], env=env
    )
    # The server's stderr to fd 2, which pytest captures (its default, bound when the SDK is
    # imported, is whatever sys.stderr was then).
    errlog = sys.__stderr__
    async with stdio_client(params, errlog) as (read, write), ClientSession(read, write) as mcp:
        await mcp.initialize()
        yield mcp


def run(scenario: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(scenario())


async def call(mcp: ClientSession, tool: str, **arguments: Any) -> Any:
    """A tool's document (the JSON `--json` prints); fails the test on a tool error."""
    result = await mcp.call_tool(tool, arguments)
    assert not result.is_error, result.content
    return json.loads(result.content[0].text)  # type: ignore[union-attr]  # a text block


async def refused(mcp: ClientSession, tool: str, **arguments: Any) -> dict[str, Any]:
    """A tool error's data: crew's sentence, its hint, the exit code's name."""
    result = await mcp.call_tool(tool, arguments)
    assert result.is_error, result.content
    return result.structured_content or {"text": result.content[0].text}  # type: ignore[union-attr]


def test_the_tools_are_listed_with_schemas_and_read_only_keeps_the_readers() -> None:
    async def scenario() -> None:
        async with client() as mcp:
            tools = {t.name: t for t in (await mcp.list_tools()).tools}
        async with client("--read-only") as watcher:
            watching = {t.name for t in (await watcher.list_tools()).tools}
        assert set(tools) == READING | ACTING
        steer = tools["steer"].input_schema
        assert steer["required"] == ["run", "task", "body"]
        assert set(steer["properties"]) == {"run", "task", "body", "idempotency_key", "force"}
        assert tools["wait"].input_schema["properties"]["timeout"]["maximum"] == 60
        assert watching == READING

    run(scenario)


def test_a_lead_answers_one_worker_steers_another_adds_a_task_and_waits_for_the_run(
    tmp_path: Path, home: Home
) -> None:
    write_crew(
        tmp_path,
        [
            {"id": "ask", "prompt": "ask:need_input:Ship it? ; await:respond ; exit:0"},
            {"id": "steered", "prompt": "await:steer ; say:steered ; exit:0"},
        ],
    )

    async def scenario() -> None:
        async with client() as mcp:
            started = await call(mcp, "start_run", crew_toml="crew.toml")
            run_id = started["runId"]
            waiting = await call(mcp, "wait", run=run_id, until="waiting", task="ask")
            assert waiting["tasks"][0]["contact"]["prompt"] == "Ship it?"
            await call(mcp, "wait", run=run_id, until="started", task="steered")
            # Added while `ask` still waits for its answer: the run cannot have ended yet.
            added = await call(
                mcp,
                "add_task",
                run=run_id,
                agent="w",
                prompt="say:added ; exit:0",
                task_id="later",
                depends_on=["ask"],
            )
            answer = await call(mcp, "respond", run=run_id, task="ask", body="yes")
            steer = await call(mcp, "steer", run=run_id, task="steered", body="go on")
            done = await call(mcp, "wait", run=run_id, until="done")
            status = await call(mcp, "status", run=run_id)
            events = await call(mcp, "events", run=run_id, since=0, limit=500)
            later = await call(mcp, "events", run=run_id, since=events["cursor"])
            log = await mcp.read_resource(f"crew://runs/{run_id}/logs/steered")
        assert (answer["kind"], answer["body"], steer["kind"]) == ("respond", "yes", "steer")
        assert done["runId"] == run_id
        assert status["run"]["status"] == RunStatus.COMPLETED
        assert added["task"]["id"] == "later"
        assert {t["id"]: t["status"] for t in status["tasks"]} == dict.fromkeys(
            ["ask", "steered", "later"], TaskStatus.COMPLETED
        )  # the task the lead added ran, after the one it waited for
        assert [e["seq"] for e in events["events"]] == list(range(1, events["cursor"] + 1))
        assert later["events"] == [] and later["cursor"] == events["cursor"]
        assert "steered" in log.contents[0].text  # type: ignore[union-attr]  # a text resource

    run(scenario)


def test_another_session_is_refused_as_the_cli_refuses_it(
    make_run: MakeRun, cli: Callable[..., Any]
) -> None:
    store = make_run()
    start(store)
    before = snapshot_files(store.paths.root)
    shell = cli("steer", store.run_id, "plan", "x", "--session", "intruder@elsewhere")

    async def scenario() -> None:
        async with client(session="intruder@elsewhere") as mcp:
            error = await refused(mcp, "steer", run=store.run_id, task="plan", body="x")
            assert snapshot_files(store.paths.root) == before
            forced = await call(mcp, "steer", run=store.run_id, task="plan", body="x", force=True)
        sentence, hint = shell.err.removeprefix("crew: error: ").rstrip("\n").split("\n")
        assert shell.code == 4
        assert error == {"error": sentence, "hint": hint, "exitCode": "REFUSED"}
        assert forced["kind"] == "steer"

    run(scenario)


def test_a_replayed_idempotency_key_writes_nothing(make_run: MakeRun) -> None:
    store = make_run()
    ask(store)

    async def scenario() -> None:
        async with client() as mcp:
            args = {"run": store.run_id, "task": "plan", "body": "Postgres"}
            first = await call(mcp, "respond", idempotency_key="k1", **args)
            after_first = snapshot_files(store.paths.root)
            again = await call(mcp, "respond", idempotency_key="k1", **args)
        assert again["id"] == first["id"]
        assert snapshot_files(store.paths.root) == after_first
        assert [m.id for m in store.messages(Box.INBOX)] == [first["id"]]

    run(scenario)


#: Each bad call: the tool, its arguments, the exit code's name, crew's sentence.
BAD_CALLS = [
    ("steer", {"run": "1999", "task": "plan", "body": "x"}, "NOT_FOUND", "No run matches '1999' in {runs}."),
    ("steer", {"run": "../x", "task": "plan", "body": "x"}, "USAGE", "Invalid run id '../x': expected a run id such as 20261130-034100-7f3a, a unique prefix of one, or 'latest'."),
    ("steer", {"run": "latest", "task": "../plan", "body": "x"}, "USAGE", "Invalid task id '../plan': expected 1-64 characters of a-z, 0-9, '_', '.', '-' starting with a letter or digit."),
    ("steer", {"run": "latest", "task": "deploy", "body": "x"}, "NOT_FOUND", "Run {run} has no task 'deploy' (tasks: plan, build)."),
    ("steer", {"run": "latest", "task": "plan", "body": "x" * 70000}, "USAGE", "The message body is 70000 bytes; the limit is 65536 bytes."),
    ("steer", {"run": "latest", "task": "plan", "body": "x", "idempotency_key": "a\nb"}, "USAGE", "Invalid idempotency key 'a\\nb' (idempotency_key): expected one line of 1-256 printable characters, with no space at either end."),
    ("start_run", {"crew_toml": "../elsewhere/crew.toml"}, "USAGE", "crew_toml '../elsewhere/crew.toml' is outside the project folder {project}."),
    ("respond", {"run": "latest", "task": "plan", "body": "x"}, "REFUSED", "Task plan is running: respond needs a task that is waiting for an answer (or flagged needs_review)."),
    ("steer", {"run": "{run}", "task": 7, "body": ["x"]}, "USAGE", "Invalid arguments for steer: task: Input should be a valid string; body: Input should be a valid string."),
    ("wait", {"run": "{run}", "timeout": 3600}, "USAGE", "Invalid arguments for wait: timeout: Input should be less than or equal to 60."),
    # An argument no tool has was dropped: a key misspelled sent twice what a retry repeated.
    ("steer", {"run": "{run}", "task": "plan", "body": "x", "idempotencyKey": "k1", "contactId": "q"}, "USAGE", "Invalid arguments for steer: no such argument 'idempotencyKey', 'contactId'."),
    # What no path may hold was a traceback on the server's stderr, "Error executing tool".
    ("start_run", {"crew_toml": "a\u0000b"}, "USAGE", "Invalid arguments for start_run: embedded null byte."),
    ("start_run", {"timeout": "1\u0000s"}, "USAGE", "Invalid arguments for start_run: embedded null byte."),
]  # fmt: skip


def test_bad_input_is_a_tool_error_that_writes_nothing(make_run: MakeRun, home: Home) -> None:
    """Every bad call, and every bad resource, to one server (each server costs its SDK's
    import, ~1.5 s of CPU): each refused with crew's sentence, none writing a byte."""
    store = make_run()
    start(store)
    before = snapshot_files(home.root)
    project = home.project_dir.resolve()

    def filled(value: Any) -> Any:
        return value.replace("{run}", store.run_id) if isinstance(value, str) else value

    async def scenario() -> None:
        async with client() as mcp:
            for tool, arguments, code, error in BAD_CALLS:
                found = await refused(mcp, tool, **{k: filled(v) for k, v in arguments.items()})
                expected = error.format(run=store.run_id, runs=home.runs_dir, project=project)
                assert (found["error"], found["exitCode"]) == (expected, code), tool
                if error.startswith("Invalid arguments"):  # the SDK's check, in crew's words
                    assert found["hint"] is None
                assert snapshot_files(home.root) == before, (tool, arguments)
            manifest = await mcp.read_resource(f"crew://runs/{store.run_id}/manifest.json")
            with pytest.raises(Exception, match="Unknown resource"):  # the SDK's own refusal
                await mcp.read_resource(f"crew://runs/{store.run_id}/logs/..%2F..%2Fmanifest.json")
            with pytest.raises(Exception, match=r"Invalid task id '\.hidden'"):
                await mcp.read_resource(f"crew://runs/{store.run_id}/logs/.hidden")
            with pytest.raises(Exception, match=r"Invalid run id '\.x'"):
                await mcp.read_resource("crew://runs/.x/events.jsonl")
            with pytest.raises(Exception, match="No mailbox 'secrets'"):
                await mcp.read_resource(f"crew://runs/{store.run_id}/mailbox/secrets")
        shown = json.loads(manifest.contents[0].text)  # type: ignore[union-attr]
        assert shown["runId"] == store.run_id
        assert snapshot_files(home.root) == before

    run(scenario)


def test_the_cli_and_mcp_see_the_same_status(make_run: MakeRun, cli: Callable[..., Any]) -> None:
    store = make_run()
    ask(store)
    shell = json.loads(cli("status", store.run_id, "--json").out)

    async def scenario() -> None:
        async with client() as mcp:
            served = await call(mcp, "status", run=store.run_id)
        assert served == shell
        assert served["tasks"][0]["status"] == TaskStatus.WAITING

    run(scenario)


def test_add_task_adds_a_task_once_however_often_its_key_is_replayed(
    make_run: MakeRun, home: Home
) -> None:
    from crew.mcp_server import build_server

    store = make_run()
    server = build_server(home, session=None, read_only=False)
    arguments = {
        "run": "latest",
        "agent": "coder",
        "prompt": "review the plan",
        "task_id": "review",
        "depends_on": ["plan"],
        "idempotency_key": "lead-7-review",
    }

    first = asyncio.run(server.call_tool("add_task", arguments))
    files = snapshot_files(store.paths.root)
    again = asyncio.run(server.call_tool("add_task", arguments))

    added = json.loads(first.content[0].text)  # type: ignore[union-attr]
    assert added["task"]["id"] == "review" and added["task"]["dependsOn"] == ["plan"]
    assert added["replayed"] is False
    assert json.loads(again.content[0].text)["replayed"] is True  # type: ignore[union-attr]
    assert snapshot_files(store.paths.root) == files  # the replay wrote nothing
    assert store.state().task("review").status == TaskStatus.QUEUED


def test_a_remote_lead_reaches_the_same_tools_over_streamable_http(make_run: MakeRun) -> None:
    from mcp.client.session import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    store = make_run()
    ask(store)
    with socket.socket() as probe:  # a free port, released for the server to take
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, "-m", "crew", "mcp", "--http", f"127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _until_listening(port, server)

        async def scenario() -> None:
            url = f"http://127.0.0.1:{port}/mcp"
            async with (
                streamable_http_client(url) as (read, write),
                ClientSession(read, write) as mcp,
            ):
                await mcp.initialize()
                answer = await call(mcp, "respond", run=store.run_id, task="plan", body="yes")
                error = await refused(mcp, "respond", run=store.run_id, task="plan", body="no")
            assert answer["data"]["session"] == SESSION
            assert error["exitCode"] == "REFUSED"

        run(scenario)
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert store.state().tasks["plan"].status is TaskStatus.RUNNING


def _until_listening(port: int, server: subprocess.Popen[bytes]) -> None:
    """Until the server accepts connections on `port` (it binds once its imports are done)."""
    deadline = time.monotonic() + 60
    while server.poll() is None and time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
            return
        time.sleep(0.05)
    raise AssertionError(f"crew mcp --http never listened on {port} ({server.poll()=})")


@pytest.mark.parametrize("address", ["localhost", "127.0.0.1:\u00b2", "127.0.0.1:\u0668\u0667"])
def test_http_takes_host_and_port(cli: Callable[..., Any], address: str) -> None:
    result = cli("mcp", "--http", address)  # a digit of another script is no port

    assert (result.code, result.out) == (2, "")
    assert result.err == (
        f"crew: error: --http: expected HOST:PORT such as 127.0.0.1:8765, got {address!r}.\n"
    )


def test_http_on_an_address_in_use_is_refused_as_crew_refuses(cli: Callable[..., Any]) -> None:
    # The HTTP server said it in a log line of its own and exited 3, crew's code for a timeout.
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]

        result = cli("mcp", "--http", f"127.0.0.1:{port}")

    assert (result.code, result.out) == (1, "")
    assert result.err.startswith(f"crew: error: crew mcp cannot listen on 127.0.0.1:{port}: ")
    assert "Name another port" in result.err


def test_calls_that_wait_never_hold_up_the_other_tools(make_run: MakeRun) -> None:
    # On the threads every tool runs on (40), 45 waits held a status call up until they ended.
    from crew.domain import lease

    store = make_run()
    start(store)  # a run that goes on, led by this process: each wait lasts its whole timeout
    lease.write_lease(store.paths, lease.new_lease(SESSION, 0))

    async def scenario() -> None:
        async with client() as mcp:
            arguments = {"run": store.run_id, "until": "done", "timeout": 30}
            waits = [asyncio.create_task(mcp.call_tool("wait", arguments)) for _ in range(45)]
            await asyncio.sleep(1)  # their calls reach the server first
            shown = await call(mcp, "status", run=store.run_id)
            assert shown["run"]["runId"] == store.run_id
            assert not any(wait.done() for wait in waits)
            for wait in waits:
                wait.cancel()

    started = time.monotonic()
    run(scenario)
    assert time.monotonic() - started < 25  # neither the calls nor the server's exit waited


def test_start_run_finds_crew_toml_where_crew_init_puts_it(home: Home) -> None:
    # "crew.toml" was looked for in the project folder alone: "no such file", in the layout
    # `crew init` makes (and the docs' own example).
    write_crew(home.root, [{"id": "one", "prompt": "exit:0"}])

    async def scenario() -> None:
        async with client() as mcp:
            started = await call(mcp, "start_run", crew_toml="crew.toml")
            waited = await call(mcp, "wait", run=started["runId"], until="done", timeout=60)
            assert waited["tasks"][0]["status"] == "completed"

    run(scenario)


def test_http_that_others_may_reach_says_who_they_act_as(home: Home) -> None:
    # Served on every address with no authentication, and nothing said so.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**os.environ, "CREW_SESSION_ID": SESSION}
    server = subprocess.Popen(
        [sys.executable, "-m", "crew", "mcp", "--http", f"0.0.0.0:{port}"],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        env=env,
    )
    try:
        assert server.stderr is not None
        said = server.stderr.readline().decode()
    finally:
        server.terminate()
        server.wait(timeout=30)

    assert said == (
        f"crew: warning: serving 0.0.0.0 with no authentication: whoever can reach it acts as "
        f"{SESSION} (serve on 127.0.0.1, or behind something that authenticates)\n"
    )
