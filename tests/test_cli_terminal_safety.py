"""What crew prints for people never carries a terminal control from outside: steer bodies,
worker lines, questions and errors quoting input are shown as inert text; JSON stays exact; a
worker's log is exact when piped and made safe on a terminal."""

from __future__ import annotations

import json
import os
import pty
import shlex
import subprocess
import sys
import tty
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import CliResult
from hostile import HOSTILE, OBEYED, controls_left
from leaders import Leader, write_crew
from test_terminal import NO_TMUX, Terminal

from crew.domain import change, tasks
from crew.models import SupervisorContact
from crew.paths import Home
from crew.registry import ContactType, EventType, TaskStatus
from crew.store.runstore import RunStore

Cli = Callable[..., CliResult]
MakeRun = Callable[..., RunStore]
SHOWN = "␛c␛(0␛]0;owned␇␛[2J<U+009B>1;1H␛P+q␛\\␇<U+202E>evil<U+2066>x<U+2069>"


def running(make_run: MakeRun) -> RunStore:
    store = make_run()
    with change(store) as txn:
        tasks.transition(txn, "plan", TaskStatus.RUNNING, attempt=1, started_at=txn.at)
    return store


def asking(make_run: MakeRun, prompt: str) -> RunStore:
    store = running(make_run)
    with change(store) as txn:
        question = SupervisorContact(
            id="q_1", task_id="plan", type=ContactType.NEED_INPUT, prompt=prompt, asked_at=txn.at
        )
        tasks.transition(txn, "plan", TaskStatus.WAITING, waiting_since=txn.at, contact=question)
    return store


def test_events_show_a_hostile_steer_as_inert_text(cli: Cli, make_run: MakeRun) -> None:
    store = running(make_run)
    assert cli("steer", store.run_id, "plan", HOSTILE).code == 0

    shown = cli("events", store.run_id)

    assert shown.code == 0
    assert OBEYED.findall(shown.out) == ["\n"] * shown.out.count("\n")
    assert f"steer plan: {SHOWN}" in shown.out


def test_events_as_json_keep_the_body_exactly_and_escape_it(cli: Cli, make_run: MakeRun) -> None:
    store = running(make_run)
    cli("steer", store.run_id, "plan", HOSTILE)

    shown = cli("events", store.run_id, "--json")

    assert OBEYED.findall(shown.out) == ["\n"] * shown.out.count("\n")
    events = [json.loads(line) for line in shown.out.splitlines()]
    steered = [e for e in events if e["type"] == EventType.AGENT_STEERED]
    assert steered[0]["data"]["mailboxMessage"]["body"] == HOSTILE


@pytest.mark.parametrize(
    "command", [("status",), ("status", "--json"), ("mailbox",), ("wait", "--for", "waiting")]
)
def test_a_hostile_question_is_shown_inert_everywhere(
    cli: Cli, make_run: MakeRun, command: tuple[str, ...]
) -> None:
    store = asking(make_run, HOSTILE)
    cli("steer", store.run_id, "plan", HOSTILE)
    name, *options = command

    shown = cli(name, store.run_id, *options)

    assert shown.code == 0, shown.err
    assert OBEYED.findall(shown.out) == ["\n"] * shown.out.count("\n")
    assert "<U+202E>evil" in shown.out or "\\u202eevil" in shown.out


def test_an_error_quoting_its_input_shows_it_inert(cli: Cli) -> None:
    shown = cli("status", "--home", HOSTILE.replace("\\", ""))

    assert shown.code == 5
    assert OBEYED.findall(shown.err) == ["\n"] * shown.err.count("\n")
    assert "<U+202E>evil" in shown.err


def test_run_progress_shows_a_hostile_worker_line_inert(tmp_path: Path) -> None:
    line = "@supervisor progress: " + HOSTILE.replace("\\", "")
    write_crew(tmp_path, [{"id": "t", "prompt": f"say:{line} ; exit:0"}])
    leader = Leader("run", "crew.toml", cwd=tmp_path)

    assert leader.finish() == 0
    assert OBEYED.findall(leader.out) == ["\n"] * leader.out.count("\n")
    assert "t progress: ␛c␛(0" in leader.out and "<U+202E>evil" in leader.out


LOG = b"\x1b[1;31mred\x1b[0m\n" + HOSTILE.encode() + b"\nprogress 10%\rprogress 20%\r\n"


def logs_of(store: RunStore, *args: str, terminal: bool) -> bytes:
    """`crew logs RUN plan` in a real process, its stdout a pipe or a terminal."""
    command = [sys.executable, "-m", "crew", "logs", store.run_id, "plan", *args]
    if not terminal:
        return subprocess.run(command, capture_output=True, check=True).stdout
    main, side = pty.openpty()
    tty.setraw(side)  # no newline translation: the bytes crew wrote, as it wrote them
    process = subprocess.Popen(command, stdout=side, stderr=subprocess.DEVNULL)
    os.close(side)
    shown = b""
    while True:
        try:
            chunk = os.read(main, 65536)
        except OSError:  # EIO: the terminal's other side closed
            break
        if not chunk:
            break
        shown += chunk
    os.close(main)
    assert process.wait(timeout=30) == 0
    return shown


def test_logs_piped_are_the_bytes_exactly(make_run: MakeRun) -> None:
    store = running(make_run)
    store.paths.log("plan").write_bytes(LOG)

    assert logs_of(store, terminal=False) == LOG


def test_logs_on_a_terminal_keep_colours_and_show_every_other_control(
    make_run: MakeRun,
) -> None:
    store = running(make_run)
    store.paths.log("plan").write_bytes(LOG)

    shown = logs_of(store, terminal=True).decode()

    assert shown == (f"\x1b[1;31mred\x1b[0m\n{SHOWN}\nprogress 10%␍progress 20%\r\n\x1b[0m")
    assert controls_left(shown) == set()


def test_logs_raw_on_a_terminal_are_the_bytes_exactly(make_run: MakeRun) -> None:
    store = running(make_run)
    store.paths.log("plan").write_bytes(LOG)

    assert logs_of(store, "--raw", terminal=True) == LOG


def test_the_live_view_helpers_show_a_worker_line_inert(make_run: MakeRun, home: Home) -> None:
    from crew.dashboard import last_line

    store = running(make_run)
    store.paths.log("plan").write_bytes(b"\x1bc\x1b(0\x07\xe2\x80\xaeevil\n")

    assert last_line(store.paths.log("plan")) == "␛c␛(0␇<U+202E>evil"


@NO_TMUX
def test_the_live_view_shows_a_hostile_worker_inert(tmp_path: Path, home: Home) -> None:
    hostile = HOSTILE.replace("\\", "")
    write_crew(
        tmp_path,
        [{"id": "t", "prompt": f"say:{hostile} ; ask:need_input:{hostile} ; read ; exit:0"}],
    )
    crew = f"{shlex.quote(sys.executable)} -m crew run crew.toml"
    terminal = Terminal(f"crew-safe-{os.getpid()}-{tmp_path.name}", crew, tmp_path)
    try:
        screen = terminal.shows("⏎ answer t's question")
        assert "? ␛c␛(0" in screen and "<U+202E>evil" in screen

        terminal.keys("Enter")
        asked = terminal.shows("Answer (your answer")
        assert "asks (need_input): ␛c␛(0" in asked
        terminal.keys("fine", "Enter")

        terminal.shows("EXIT=0")
        assert "owned" not in terminal.title()
    finally:
        terminal.close()
