"""The fast path (crew/fast): each case it takes, run both ways on twin copies of a run, prints
and writes the same bytes as the full command; every case it does not take reaches the full
command with nothing written; its constants and options are those of the definitions it mirrors.
"""

from __future__ import annotations

import ast
import errno
import io
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from conftest import SESSION, CliResult, config, snapshot_files
from test_cli_admin import _damage
from test_verbs import ask, start

from crew import clock, errors, fast, ids, models, registry, text, verbs
from crew.cli import build_app
from crew.domain import change, gate, lease, tasks
from crew.fast import cmdline, committing, output, people, runfiles, sending, status
from crew.fast import runs as fast_runs
from crew.models import Event, Usage
from crew.paths import Home
from crew.registry import LIVE_TASK_STATUSES, Box, ContactType, MessageKind, TaskStatus
from crew.store import files as store_files
from crew.store import jsonl, lock
from crew.store.logindex import index_path
from crew.store.runstore import RunStore

MakeRun = Callable[..., RunStore]
_IDS = re.compile(rb"(msg|evt)_[0-9a-f]{16}")
#: A timestamp (as crew writes it, or in the name of a file set aside), or a time ago as the
#: text views write it (`43ms ago`: the two twins' commands run a few milliseconds apart).
_TIMES = re.compile(
    rb"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z|\d{8}T\d{6}\.\d{6}Z|\b\d+(?:\.\d+)?(?:ms|s) ago"
)


@pytest.fixture(autouse=True)
def _fresh_process(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(runfiles, "wrote", False)
    yield


def _normal(data: bytes, *roots: Path) -> bytes:
    """Bytes with what differs between two equal changes (ids, times, the folder) made equal."""
    for root in roots:
        data = data.replace(str(root).encode(), b"ROOT")
    return _TIMES.sub(b"TIME", _IDS.sub(rb"\1_ID", data))


class Twins:
    """Two identical copies of a crew home: one for the full command, one for the fast path."""

    def __init__(self, store: RunStore, tmp_path: Path) -> None:
        self.full = store.paths.home.root
        self.fast = tmp_path / "twin" / ".crew"
        shutil.copytree(self.full, self.fast, symlinks=True)
        self.run_id = store.run_id

    def both(
        self, cli: Callable[..., CliResult], capsys: pytest.CaptureFixture[str], *args: str
    ) -> tuple[CliResult, CliResult]:
        """The command run by the full command and by the fast path (which must take it)."""
        full = cli(*args, "--home", str(self.full))
        capsys.readouterr()
        code = fast.fast([*args, "--home", str(self.fast)])
        out = capsys.readouterr()
        assert code is not None, "the fast path did not take the command"
        return full, CliResult(code, out.out, out.err)

    def homes(self) -> tuple[Path, Path]:
        return self.full, self.fast

    @staticmethod
    def portable(result: CliResult, home: Path) -> CliResult:
        """What a command printed, with its home's path as HOME (the twins' paths differ)."""
        return CliResult(
            result.code,
            result.out.replace(str(home), "HOME"),
            result.err.replace(str(home), "HOME"),
        )

    def same_files(self) -> None:
        runs = [home / "state" / "runs" / self.run_id for home in (self.full, self.fast)]
        tasks = [{_normal(p.name.encode()): p for p in (r / "tasks").iterdir()} for r in runs]
        assert tasks[0] and sorted(tasks[0]) == sorted(tasks[1])  # a file set aside: its time
        for named in tasks[0]:
            assert _normal(tasks[0][named].read_bytes()) == _normal(tasks[1][named].read_bytes())
        boxes = ("mailbox/inbox.jsonl", "mailbox/steering.jsonl")
        for name in ("events.jsonl", "manifest.json", *boxes):
            a, b = (run / name for run in runs)
            assert _normal(a.read_bytes() if a.exists() else b"") == _normal(
                b.read_bytes() if b.exists() else b""
            ), name


def _alive(store: RunStore, **changes: object) -> None:
    """A leader.json that says this process leads the run and beats now."""
    info = lease.new_lease(SESSION, 0).model_copy(update=changes)
    lease.write_lease(store.paths, info)


# ----------------------------------------------------------------------------- the same bytes


def _status_scene(store: RunStore) -> None:
    """A run with something in every column of the status view: a question with options,
    pending steers, what the agents spent, a task waiting for another."""
    from crew import verbs

    ask(store, kind=ContactType.NEED_SELECTION, options=["pg", "sqlite"])
    with change(store) as txn:
        task = txn.task("plan")
        spent = Usage(input_tokens=1200, output_tokens=5, cost_usd=0.001, turns=1)
        txn.record(registry.EventType.AGENT_USAGE, task=task.model_copy(update={"usage": spent}))
    for body in ("one", "two [bold]x[/]"):
        verbs.steer(store, "plan", body, session=SESSION)
    _alive(store)


@pytest.mark.parametrize("color", [(), ("--color", "always"), ("--color", "never")])
@pytest.mark.parametrize("ended", [False, True])
def test_status_text_is_what_the_full_command_prints(
    make_run: MakeRun,
    cli: Callable[..., CliResult],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    color: tuple[str, ...],
    ended: bool,
) -> None:
    from crew import clock, verbs

    store = make_run()
    _status_scene(store)
    if ended:
        verbs.cancel(store, session=SESSION)
    twins = Twins(store, tmp_path)
    now = clock.moment()
    monkeypatch.setattr(clock, "moment", lambda: now)  # "created 2s ago" the same both ways

    full, quick = twins.both(cli, capsys, "status", twins.run_id, *color)

    assert full.code == quick.code == 0 and full.err == quick.err == ""
    assert quick.out == full.out
    assert ("\x1b[1mRun " in quick.out) == (color == ("--color", "always"))
    assert ("Waiting for an answer:" in quick.out) != ended


def test_status_text_on_a_narrow_terminal_cuts_the_note(
    make_run: MakeRun, monkeypatch: pytest.MonkeyPatch
) -> None:
    from crew import clock
    from crew.cli.common import run_app

    store = make_run()
    _status_scene(store)
    monkeypatch.setenv("COLUMNS", "82")
    # Three seconds on: the ages ("3s ago") have one width however long the scene took (under
    # ten seconds, the leader's staleness).
    now = clock.moment() + timedelta(seconds=3)
    monkeypatch.setattr(clock, "moment", lambda: now)
    args = ["status", "latest", "--color", "never", "--home", str(store.paths.home.root)]
    shown = []
    for run in (fast.fast, lambda argv: run_app(build_app("status"), argv)):
        terminal = _Terminal()
        monkeypatch.setattr(sys, "stdout", terminal)
        assert run(args) == 0
        shown.append(terminal.getvalue())
    quick, full = shown

    table = quick.splitlines()[1:4]
    assert quick == full and max(len(line) for line in table) == 82, table
    assert not any(line.endswith(" ") for line in table), table  # the last column not padded
    assert table[1].endswith("? Which dat…") and table[2].endswith("after plan")


@pytest.mark.parametrize(
    "args",
    [
        ("runs",),
        ("ps", "--color", "always"),
        ("runs", "--color", "never"),
        ("runs", "--json"),
        ("runs", "-q"),
        ("runs", "--status", "cancelled"),
        ("runs", "--status", "running", "--json", "--quiet"),
    ],
)
def test_runs_print_what_the_full_command_prints(
    make_run: MakeRun,
    cli: Callable[..., CliResult],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    args: tuple[str, ...],
) -> None:
    from crew import clock, verbs

    store = make_run()
    _status_scene(store)
    verbs.cancel(make_run(), session=SESSION)
    twins = Twins(make_run(), tmp_path)
    now = clock.moment()
    monkeypatch.setattr(clock, "moment", lambda: now)

    full, quick = twins.both(cli, capsys, *args)

    assert full.code == quick.code == 0 and full.err == quick.err == ""
    assert quick.out == full.out
    assert quick.out.count(store.run_id) == ("cancelled" not in args)  # listed, or left out


def _mailbox_scene(make_run: MakeRun) -> RunStore:
    """A timeline with a delivered, a pending and a rejected message, a sender other than the
    leader, and a decision that preempts one message for another."""
    from test_cli_inspect import waiting_run

    from crew import verbs
    from crew.domain import mailbox

    store = waiting_run(make_run)  # plan: one steer delivered, one pending
    delivered, pending = store.messages(Box.STEERING)
    verbs.follow_up(store, "build", "later [bold]x[/] 'quoted' \\ :rocket:", session=SESSION)
    verbs.steer(store, "plan", "from a person", session="other@ci", force=True)
    with change(store) as txn:
        (later,) = txn.messages(Box.INBOX).values()
        mailbox.reject(txn, later, "no longer needed")
        decision = {"action": "preempt", "item": pending.id, "focus": delivered.id, "reason": "x"}
        mailbox.decide(txn, "plan", decision)
        mailbox.decide(txn, "plan", {"action": "done", "reason": "ok"})
    _alive(store)
    return store


@pytest.mark.parametrize(
    "options",
    [
        (),
        ("--color", "always"),
        ("--json",),
        ("--task", "plan"),
        ("--box", "inbox", "--color", "never"),
        ("--status", "pending"),
        ("--task", "build", "--status", "delivered"),
    ],
)
def test_mailbox_prints_what_the_full_command_prints(
    make_run: MakeRun,
    cli: Callable[..., CliResult],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    options: tuple[str, ...],
) -> None:
    twins = Twins(_mailbox_scene(make_run), tmp_path)

    full, quick = twins.both(cli, capsys, "mailbox", twins.run_id, *options)

    assert full.code == quick.code == 0 and full.err == quick.err == ""
    assert quick.out == full.out


def test_a_mailbox_line_the_models_would_read_otherwise_is_the_full_commands(
    make_run: MakeRun,
) -> None:
    store = _mailbox_scene(make_run)
    assert fast.fast(["mailbox", "latest", "--home", str(store.paths.home.root)]) == 0
    path = store.paths.box(Box.STEERING)
    data = path.read_bytes()
    path.write_bytes(data.replace(b'"kind":"steer"', b'"kind":"steer","extra":1', 1))
    with change(store):  # the marker names the new sizes: only the line is unusual
        pass
    _refused(store, "mailbox", "latest")
    _refused(store, "mailbox", "latest", "--task", "nope")
    _refused(store, "mailbox", "latest", "--box", "elsewhere")


def test_runs_of_an_empty_home_is_what_the_full_command_prints(
    cli: Callable[..., CliResult], capsys: pytest.CaptureFixture[str], home: Home
) -> None:
    full = cli("runs")
    capsys.readouterr()
    assert fast.fast(["runs"]) == 0
    assert capsys.readouterr().out == full.out == "No runs yet. Start one with `crew run`.\n"


@pytest.mark.parametrize(
    "args",
    [
        ("steer", "plan", "Use the cache"),
        ("steer", "plan", "Use the cache", "--json"),
        ("follow-up", "plan", "Then write the docs\nand the tests", "--json"),
        ("follow-up", "build", "queued work"),
        ("nudge", "plan"),
        ("nudge", "plan", "where are you?", "--json"),
        ("steer", "plan", "as someone else", "--session", "other@ci", "--force"),
        ("steer", "plan", "unicode \u00e9\u2028 and \x01 control", "--json"),
        ("steer", "plan", "quietly", "-q"),
        ("nudge", "plan", "--quiet"),
        ("follow-up", "plan", "quiet, but JSON", "-q", "--json"),
        ("follow-up", "plan", "keyed", "--idempotency-key", "ci-42/step 3", "--json"),
        ("steer", "plan", "keyed", "--idempotency-key", "cl\u00e9"),
        ("nudge", "plan", "--idempotency-key", "n1", "--json"),
    ],
)
def test_a_send_writes_and_prints_what_the_full_command_does(
    make_run: MakeRun,
    cli: Callable[..., CliResult],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    args: tuple[str, ...],
) -> None:
    store = make_run()
    start(store)
    twins = Twins(store, tmp_path)
    if "--force" in args:  # the fast path leaves --force to the full command
        assert fast.fast([*args, "--home", str(twins.fast)]) is None
        return
    verb, task, *rest = args

    full, quick = twins.both(cli, capsys, verb, twins.run_id, task, *rest)

    assert (quick.code, quick.err) == (full.code, full.err) == (0, "")
    assert _normal(quick.out.encode(), twins.fast) == _normal(full.out.encode(), twins.full)
    twins.same_files()
    fast_store = RunStore.open(Home(twins.fast), twins.run_id)
    assert fast_store.load().clean  # the marker was written: no recovery needed
    for line in fast_store.paths.events.read_bytes().splitlines(keepends=True)[-1:]:
        assert Event.model_validate_json(line).to_line() == line  # the models read it as is


def test_a_session_other_than_the_default_is_recorded_as_the_full_command_records_it(
    make_run: MakeRun,
    cli: Callable[..., CliResult],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    store = make_run(session="lead@ci")
    start(store)
    twins = Twins(store, tmp_path)

    full, quick = twins.both(
        cli, capsys, "steer", twins.run_id, "plan", "x", "--session", "lead@ci"
    )

    assert quick.out.replace(str(twins.fast), "") != "" and full.code == quick.code == 0
    twins.same_files()
    last = json.loads(
        RunStore.open(Home(twins.fast), twins.run_id).paths.events.read_bytes().splitlines()[-1]
    )
    assert last["data"]["session"] == "lead@ci" and last["data"]["defaultSession"] == SESSION


def test_status_json_is_the_full_commands_document(
    make_run: MakeRun,
    cli: Callable[..., CliResult],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    store = make_run()
    start(store)
    with change(store) as txn:
        task = txn.task("plan")
        spent = Usage(input_tokens=10, output_tokens=5, cost_usd=0.1, turns=1, model="m")
        txn.record(registry.EventType.AGENT_USAGE, task=task.model_copy(update={"usage": spent}))
        build = txn.task("build")
        more = Usage(input_tokens=3, output_tokens=1, cost_usd=0.2, turns=2)
        txn.record(registry.EventType.AGENT_USAGE, task=build.model_copy(update={"usage": more}))
    for body in ("one", "two"):
        from crew import verbs

        verbs.steer(store, "plan", body, session=SESSION)
    _alive(store)
    (store.paths.runtime_dir / "leader.log").write_text("")
    twins = Twins(store, tmp_path)

    full, quick = twins.both(cli, capsys, "status", twins.run_id, "--json")

    assert full.err == quick.err == ""
    assert quick.out.replace(str(twins.fast), "ROOT") == full.out.replace(str(twins.full), "ROOT")
    assert json.loads(quick.out)["pending"]["plan"] == {"inbox": 0, "steering": 2}
    assert json.loads(quick.out)["usage"]["costUsd"] == pytest.approx(0.3)


def test_status_of_a_finished_run_needs_no_leader(
    make_run: MakeRun,
    cli: Callable[..., CliResult],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    store = make_run()
    from crew import verbs

    verbs.cancel(store, session=SESSION)
    twins = Twins(store, tmp_path)

    full, quick = twins.both(cli, capsys, "status", "latest", "--json")

    assert quick.out.replace(str(twins.fast), "ROOT") == full.out.replace(str(twins.full), "ROOT")


@pytest.mark.parametrize(
    ("kind", "options", "args"),
    [
        (ContactType.NEED_INPUT, None, ("Use Postgres",)),
        (ContactType.NEED_INPUT, None, ("Use Postgres", "--json")),
        (ContactType.NEED_SELECTION, ["a", "b"], ("b", "--json")),
        (ContactType.NEED_CONFIRMATION, None, ("yes",)),
        (ContactType.NEED_INPUT, None, ("Use Postgres", "-q")),
        (ContactType.NEED_INPUT, None, ("Use Postgres", "--idempotency-key", "a1", "--json")),
    ],
)
def test_an_answer_writes_and_prints_what_the_full_command_does(
    make_run: MakeRun,
    cli: Callable[..., CliResult],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    kind: ContactType,
    options: list[str] | None,
    args: tuple[str, ...],
) -> None:
    store = make_run()
    ask(store, kind=kind, options=options)
    _alive(store)
    twins = Twins(store, tmp_path)

    full, quick = twins.both(cli, capsys, "respond", twins.run_id, "plan", *args)

    assert (quick.code, quick.err) == (full.code, full.err) == (0, "")
    assert _normal(quick.out.encode(), twins.fast) == _normal(full.out.encode(), twins.full)
    twins.same_files()
    answered = RunStore.open(Home(twins.fast), twins.run_id)
    assert answered.load().clean and answered.state().tasks["plan"].status is TaskStatus.RUNNING


@pytest.mark.parametrize("cost", [0.5, 0.00001, 3e-7])
def test_an_answer_to_a_task_that_spent_writes_its_costs_as_the_full_command_does(
    make_run: MakeRun,
    cli: Callable[..., CliResult],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    cost: float,
) -> None:
    store = make_run()
    ask(store)
    with change(store) as txn:
        spent = Usage(input_tokens=10, cost_usd=cost, turns=1)
        task = txn.task("plan").model_copy(update={"usage": spent})
        txn.record(registry.EventType.AGENT_USAGE, task=task)
    twins = Twins(store, tmp_path)
    if cost < 1e-4:  # Python's json would write it as 1e-05: the full command writes it
        assert fast.fast(["respond", "latest", "plan", "x", "--home", str(twins.fast)]) is None
        return

    full, quick = twins.both(cli, capsys, "respond", twins.run_id, "plan", "x")

    assert full.code == quick.code == 0
    twins.same_files()


def test_an_answer_pinned_to_its_question_writes_what_the_full_command_does(
    make_run: MakeRun,
    cli: Callable[..., CliResult],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    store = make_run()
    asked = ask(store)
    _alive(store)
    twins = Twins(store, tmp_path)

    args = ("respond", twins.run_id, "plan", "Postgres", "--contact", asked.id, "--json")
    full, quick = twins.both(cli, capsys, *args)

    assert (quick.code, quick.err) == (full.code, full.err) == (0, "")
    assert _normal(quick.out.encode(), twins.fast) == _normal(full.out.encode(), twins.full)
    twins.same_files()


def test_an_answer_the_question_does_not_take_is_the_full_commands(make_run: MakeRun) -> None:
    store = make_run()
    ask(store, kind=ContactType.NEED_SELECTION, options=["a", "b"])
    _refused(store, "respond", "latest", "plan", "c")  # not one of the options
    _refused(store, "respond", "latest", "plan", "a", "--contact", "q_other")
    _refused(store, "respond", "latest", "build", "a")  # asked nothing


@pytest.mark.parametrize(
    "args",
    [
        ("wait", "latest"),
        ("wait", "latest", "--json"),
        ("wait", "latest", "--for", "started", "--json"),
        ("wait", "latest", "--task", "build", "--json"),
    ],
)
def test_a_wait_that_holds_already_prints_what_the_full_command_does(
    make_run: MakeRun,
    cli: Callable[..., CliResult],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    args: tuple[str, ...],
) -> None:
    store = make_run()
    start(store)
    from crew import verbs

    verbs.cancel(store, session=SESSION)
    twins = Twins(store, tmp_path)

    full, quick = twins.both(cli, capsys, *args)

    assert (quick.code, quick.out, quick.err) == (full.code, full.out, full.err)


@pytest.mark.parametrize("raw", [False, True])
def test_logs_print_what_the_full_command_prints(
    make_run: MakeRun,
    capsysbinary: pytest.CaptureFixture[bytes],
    tmp_path: Path,
    raw: bool,
) -> None:
    store = make_run()
    start(store)
    store.paths.logs_dir.mkdir(exist_ok=True)
    store.paths.log("plan").write_bytes(
        b"line one\n\x1b[31mred\x1b[0m \x1b]0;title\x07 \xff\n" * 5000
    )
    twins = Twins(store, tmp_path)
    args = ("logs", twins.run_id, "plan", *(("--raw",) if raw else ()))

    code = fast.fast([*args, "--home", str(twins.fast)])
    quick = capsysbinary.readouterr().out
    from crew.cli.common import run_app

    full_code = run_app(build_app("logs"), [*args, "--home", str(twins.full)])
    full = capsysbinary.readouterr().out

    assert code == full_code == 0
    assert quick == full == store.paths.log("plan").read_bytes()  # piped: the bytes as stored


#: A worker's output in three writes, each at its receive time (2026-12-01T12:00:00Z on).
_WRITES = [
    (b"one\ntwo\n", 1_764_590_400_000_000),
    (b"three \x1b[31mred\x1b[0m \x1b]0;title\x07\n", 1_764_590_401_500_000),
    (b"four \xff\nfive", 1_764_590_403_000_000),
]


@pytest.mark.parametrize(
    "options",
    [
        ("--tail", "2"),
        ("--tail", "0"),
        ("--since", "2026-12-01T12:00:01Z"),
        ("--since", "2026-12-01T13:00:01+01:00", "--tail", "1"),
        ("--timestamps",),
        ("--json",),
        ("--json", "--tail", "1"),
        ("--timestamps", "--raw"),
        ("--timestamps", "--color", "always"),
        ("--tail", "5", "--color", "never"),
        ("--color", "always"),
    ],
)
@pytest.mark.parametrize("tasks", [("plan",), (), ("build", "plan", "build")])
def test_logs_as_lines_print_what_the_full_command_prints(
    make_run: MakeRun,
    capsysbinary: pytest.CaptureFixture[bytes],
    tmp_path: Path,
    options: tuple[str, ...],
    tasks: tuple[str, ...],
) -> None:
    store = make_run()
    start(store)
    store.paths.logs_dir.mkdir(exist_ok=True)
    for task_id, shift in (("plan", 0), ("build", 700_000)):  # their lines interleaved
        end = 0
        log_path = store.paths.log(task_id)
        with log_path.open("wb") as log, index_path(log_path).open("wb") as index:
            for data, time_us in _WRITES:
                log.write(data)
                end += len(data)
                index.write(b"%d %d\n" % (end, time_us + shift))
    twins = Twins(store, tmp_path)
    args = ("logs", twins.run_id, *tasks, *options)

    code = fast.fast([*args, "--home", str(twins.fast)])
    quick = capsysbinary.readouterr().out
    from crew.cli.common import run_app

    full_code = run_app(build_app("logs"), [*args, "--home", str(twins.full)])
    full = capsysbinary.readouterr().out

    assert code == full_code == 0
    assert quick == full
    if options == ("--tail", "2") and tasks == ("plan",):
        assert quick == b"four \xff\nfive\n"
    if options == ("--tail", "2") and tasks == ():
        assert quick == b"plan  | four \xff\nplan  | five\nbuild | four \xff\nbuild | five\n"


class _Terminal(io.StringIO):
    """A stdout that says it is a terminal."""

    def isatty(self) -> bool:
        return True


def test_logs_on_a_terminal_are_made_safe_as_the_full_command_makes_them(
    make_run: MakeRun, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = make_run()
    start(store)
    store.paths.logs_dir.mkdir(exist_ok=True)
    store.paths.log("plan").write_bytes(b"ok \x1b[31mred\x1b[0m \x1b]0;title\x07 \x1b[2J \xff\n")
    args = ["logs", "latest", "plan", "--home", str(store.paths.home.root)]
    from crew.cli.common import run_app

    shown = []
    for run in (fast.fast, lambda argv: run_app(build_app("logs"), argv)):
        terminal = _Terminal()
        monkeypatch.setattr(sys, "stdout", terminal)
        assert run(args) == 0
        shown.append(terminal.getvalue())
    quick, full = shown

    assert quick == full and "\x1b]0;" not in quick and "\x1b[31m" in quick


def test_logs_of_a_task_that_printed_nothing_yet(
    make_run: MakeRun, capsys: pytest.CaptureFixture[str]
) -> None:
    store = make_run()
    assert fast.fast(["logs", "latest", "build", "--home", str(store.paths.home.root)]) == 0
    assert capsys.readouterr().out == ""
    _refused(store, "logs", "latest", "nope")
    _refused(store, "logs", "latest", "plan", "-f")
    _refused(store, "logs", "latest", "plan", "nope")
    for options in (
        ["--tail", "x"],
        ["--since", "yesterday"],
        ["--color", "rainbow"],
        ["--jq", "."],
    ):
        _refused(store, "logs", "latest", "plan", *options)
    store.paths.logs_dir.mkdir(exist_ok=True)
    store.paths.log("plan").mkdir()  # not a file: the full command says so
    _refused(store, "logs", "latest", "plan")


@pytest.mark.parametrize("name", [None, "task", "event", "config"])
def test_schema_prints_what_the_full_command_prints(
    cli: Callable[..., CliResult], capsys: pytest.CaptureFixture[str], name: str | None
) -> None:
    args = ["schema", *([name] if name else [])]
    full = cli(*args)
    capsys.readouterr()
    assert fast.fast(args) == 0
    assert capsys.readouterr().out == full.out
    _refused_anywhere(["schema", "nope"])


def test_version_prints_what_the_full_command_prints(
    cli: Callable[..., CliResult], capsys: pytest.CaptureFixture[str]
) -> None:
    full = cli("--version")
    capsys.readouterr()
    assert fast.fast(["--version"]) == 0
    assert capsys.readouterr().out == full.out


def _refused_anywhere(args: list[str]) -> None:
    assert fast.fast(args) is None


@pytest.mark.parametrize(
    "args", [(), ("--json",), ("--task", "plan"), ("--task", "build", "--json")]
)
def test_events_print_what_the_full_command_prints(
    make_run: MakeRun,
    cli: Callable[..., CliResult],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    args: tuple[str, ...],
) -> None:
    store = make_run()
    ask(store)
    from crew import verbs

    verbs.steer(store, "plan", "caf\u00e9 \x1b[2J \u202e reversed", session=SESSION)
    verbs.cancel(store, session=SESSION)  # a transaction of several events
    cut = json.loads(store.paths.events.read_bytes().splitlines()[-1])
    cut.update(seq=cut["seq"] + 1, endSeq=cut["seq"] + 2)  # a transaction cut short: not shown
    with store.paths.events.open("a") as log:
        log.write(json.dumps(cut, separators=(",", ":")) + "\n")
    twins = Twins(store, tmp_path)

    full, quick = twins.both(cli, capsys, "events", twins.run_id, *args)

    assert (quick.code, quick.out, quick.err) == (full.code, full.out, full.err)
    assert quick.out.count("\n") >= 2


def test_an_event_log_the_models_would_read_otherwise_is_the_full_commands(
    make_run: MakeRun,
) -> None:
    store = make_run()
    start(store)
    _refused(store, "events", "latest", "--type", "task")
    _refused(store, "events", "latest", "-f")
    lines = store.paths.events.read_bytes().splitlines(keepends=True)
    for bad in (b"{not json\n", lines[-1].replace(b'{"id"', b'{ "id"'), b'{"id":"evt_x"}\n'):
        store.paths.events.write_bytes(b"".join(lines) + bad)
        _refused(store, "events", "latest")


def test_a_wait_that_must_block_or_name_a_question_is_the_full_commands(make_run: MakeRun) -> None:
    store = make_run()
    ask(store)
    _refused(store, "wait", "latest")  # not done yet
    _refused(store, "wait", "latest", "--for", "waiting")  # the question's line
    _refused(store, "wait", "latest", "--for", "done", "--timeout", "1s")
    _refused(store, "wait", "latest", "--for", "soon")


def test_a_wait_it_leaves_to_the_full_command_has_printed_nothing(
    make_run: MakeRun, capsys: pytest.CaptureFixture[str]
) -> None:
    # It printed the running task's line, then left the rest to the full command, which
    # printed every line again.
    solo = [{"id": "plan", "agent": "coder", "prompt": "p"}, {"id": "build", "agent": "coder", "prompt": "b"}]  # fmt: skip
    store = make_run(config(tasks=solo))
    start(store)
    ask(store, "build")
    capsys.readouterr()

    assert (
        fast.fast(["wait", "latest", "--for", "started", "--home", str(store.paths.home.root)])
        is None
    )
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize("output", [(), ("--json",)])
def test_a_question_flagged_for_waiting_too_long_is_still_waited_for(
    make_run: MakeRun, cli: Callable[..., CliResult], capsys: pytest.CaptureFixture[str],
    tmp_path: Path, output: tuple[str, ...],
) -> None:  # fmt: skip
    # Flagged by waitTimeout, the task kept its question (and took an answer), but `crew wait
    # --for waiting` waited on until its timeout: the CI recipe of docs/ci.md hung.
    store = make_run()
    ask(store)
    with change(store) as txn:
        tasks.flag(txn, "plan", "waited more than 2s for an answer")
    args = ("wait", "latest", "--for", "waiting", "--timeout", "5s", *output)

    full = cli(*args, "--home", str(store.paths.home.root))
    assert full.code == 0, full.err
    assert "plan" in full.out and "needs_review" in full.out
    if output:  # a wait that holds, without --timeout: the fast path's
        twins = Twins(store, tmp_path)
        full, quick = twins.both(cli, capsys, *args[:4], *output)
        assert (quick.code, quick.out) == (full.code, full.out)


@pytest.mark.parametrize("damaged", [False, True])
def test_doctor_finds_prints_and_repairs_what_the_full_command_does(
    make_run: MakeRun,
    cli: Callable[..., CliResult],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    damaged: bool,
) -> None:
    store = make_run()
    if damaged:
        _damage(store)  # a bad line, a torn tail, a corrupt snapshot
    twins = Twins(store, tmp_path)

    found = damaged
    for args in [(), ("--json",), ("-q",), (twins.run_id,), ("--repair", "--json"), ()]:
        full, quick = twins.both(cli, capsys, "doctor", *args)
        assert quick.code == full.code == int(damaged and "--repair" not in args)
        assert twins.portable(quick, twins.fast) == twins.portable(full, twins.full)
        if damaged and args == ("--repair", "--json"):
            assert json.loads(quick.out)["clean"] is True
            assert json.loads(quick.out)["findings"]
        damaged = damaged and "--repair" not in args
    repaired = RunStore.open(Home(twins.fast), twins.run_id)
    assert (repaired.state().tasks["plan"].status is TaskStatus.RUNNING) == found  # kept


@pytest.mark.parametrize("run", ["../../etc", "1999", "20261130-034100-7f3a"])
def test_doctor_refuses_a_bad_run_as_the_full_command_does(
    make_run: MakeRun,
    cli: Callable[..., CliResult],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    run: str,
) -> None:
    twins = Twins(make_run(), tmp_path)
    before = snapshot_files(twins.fast)

    full, quick = twins.both(cli, capsys, "doctor", run)

    assert twins.portable(quick, twins.fast) == twins.portable(full, twins.full)
    assert quick.code in {2, 5} and quick.err.startswith("crew: error: ")  # usage, not found
    assert snapshot_files(twins.fast) == before


#: crew.toml files `validate` takes: valid, with several problems, not TOML, and none at all.
_DEFINITIONS = {
    "valid": '[crew]\nname = "t"\n[agents.w]\ncommand = ["true"]\n'
    '[[tasks]]\nid = "a"\nagent = "w"\nprompt = "x"\n',
    "problems": '[crew]\nname = "t"\nmaxParallel = 0\n[agents.w]\ncommand = []\n'
    '[[tasks]]\nid = "a"\nagent = "nobody"\nprompt = "x"\n',
    "not toml": "[crew\nname =\n",
    "missing": None,
}


@pytest.mark.parametrize("where", ["named", "home"])
@pytest.mark.parametrize("json", [False, True])
@pytest.mark.parametrize("definition", sorted(_DEFINITIONS))
def test_validate_prints_what_the_full_command_prints(
    home: Home,
    cli: Callable[..., CliResult],
    capsys: pytest.CaptureFixture[str],
    definition: str,
    json: bool,
    where: str,
) -> None:
    text = _DEFINITIONS[definition]
    if text is not None:
        home.config_file.write_text(text)
    at = [str(home.config_file)] if where == "named" else ["--home", str(home.root)]
    args = ["validate", *at, *(["--json"] if json else [])]
    before = snapshot_files(home.root)

    full = cli(*args)
    code = fast.fast(args)
    out = capsys.readouterr()

    assert (code, out.out, out.err) == (full.code, full.out, full.err)
    assert code == (0 if definition == "valid" else 2 if text is not None else full.code)
    assert snapshot_files(home.root) == before


#: Where `crew init` is pointed: a folder with no home, a home, a home without its crew.toml,
#: a file where the home would be, a folder that does not exist, and $CREW_HOME's.
_INIT_SCENES: dict[str, Callable[[Path], list[str]]] = {
    "new": lambda at: [str(at)],
    "a home": lambda at: (at.joinpath(".crew", "state").mkdir(parents=True), [str(at)])[1],
    "a home without crew.toml": lambda at: (
        at.joinpath(".crew").mkdir(),
        at.joinpath(".crew", "crew.toml").unlink(missing_ok=True),
        [str(at)],
    )[2],
    "a file there": lambda at: (at.joinpath(".crew").write_text("x"), [str(at)])[1],
    "no such folder": lambda at: [str(at / "nope")],
    "CREW_HOME": lambda at: [],
}


@pytest.mark.parametrize("output", [(), ("--json",), ("-q",)])
@pytest.mark.parametrize("scene", _INIT_SCENES)
def test_init_prints_and_writes_what_the_full_command_does(
    cli: Callable[..., CliResult], capsys: pytest.CaptureFixture[str], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, scene: str, output: tuple[str, ...],
) -> None:  # fmt: skip
    results = []
    for way in ("full", "fast"):
        at = tmp_path / way
        at.mkdir()
        monkeypatch.setenv("CREW_HOME", str(at / ".crew"))
        args = ["init", *_INIT_SCENES[scene](at), *output]
        if way == "full":
            done = cli(*args)
        else:
            code = fast.fast(args)
            out = capsys.readouterr()
            assert code is not None, "the fast path did not take the command"
            done = CliResult(code, out.out, out.err)
        results.append((Twins.portable(done, at), snapshot_files(at)))
    assert results[0] == results[1]
    assert results[1][0].code == (2 if scene in {"a file there", "no such folder"} else 0)


@pytest.mark.parametrize("args", [("init", "--jq", ".home"), ("init", "a", "b"), ("init", "")])
def test_init_leaves_what_it_does_not_take_to_the_full_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: tuple[str, ...]
) -> None:
    before = snapshot_files(tmp_path)
    assert fast.fast(list(args)) is None
    assert capsys.readouterr() == ("", "")
    assert snapshot_files(tmp_path) == before


@pytest.mark.parametrize(
    "args", [("validate", "--jq", ".valid"), ("validate", "a.toml", "b.toml"), ("validate", "")]
)
def test_validate_leaves_what_it_does_not_take_to_the_full_command(
    home: Home, capsys: pytest.CaptureFixture[str], args: tuple[str, ...]
) -> None:
    assert fast.fast(list(args)) is None
    assert capsys.readouterr() == ("", "")


@pytest.mark.parametrize(
    "args",
    [("doctor", "--jq", ".clean"), ("doctor", "--repair=yes"), ("doctor", "latest", "more")],
)
def test_doctor_leaves_what_it_does_not_take_to_the_full_command(
    make_run: MakeRun, args: tuple[str, ...]
) -> None:
    store = make_run()
    _damage(store)
    _refused(store, *args)


# ----------------------------------------------------------------------------- the full command's


def _refused(store: RunStore, *args: str) -> None:
    """The fast path leaves the command to the full one, having written nothing."""
    before = snapshot_files(store.paths.home.root)
    assert fast.fast([*args, "--home", str(store.paths.home.root)]) is None
    assert snapshot_files(store.paths.home.root) == before
    assert not runfiles.wrote


@pytest.mark.parametrize("thing", ["link", "folder"])
@pytest.mark.parametrize(
    "args",
    [("logs", "latest", "plan"), ("steer", "latest", "plan", "x"), ("status", "latest", "--json")],
)
def test_a_link_or_folder_for_another_tasks_file_is_the_full_commands(
    make_run: MakeRun, cli: Callable[..., CliResult], tmp_path: Path, thing: str,
    args: tuple[str, ...],
) -> None:  # fmt: skip
    # The full command refuses the run (a link) or names the file it cannot read (a folder);
    # `crew logs RUN plan` printed plan's log, as a steer to plan would have been sent.
    store = make_run()
    start(store)
    build = store.paths.task_file("build")
    if thing == "link":
        moved = tmp_path / "build.json"
        build.rename(moved)
        build.symlink_to(moved)
    else:
        build.unlink()
        build.mkdir()
    _refused(store, *args)
    full = cli(*args, "--home", str(store.paths.home.root))
    assert full.code in {1, 4} and full.err.startswith("crew: error: "), full


@pytest.mark.parametrize(
    "args",
    [
        ("steer", "latest", "build", "not started"),  # queued: steer needs a live task
        ("steer", "latest", "nope", "no such task"),
        ("steer", "latest", "Bad/Id", "x"),
        ("steer", "latest", "plan\n", "x"),  # Python's `$` would match before the newline
        ("status", "2\n", "--json"),
        ("steer", "latest", "plan", "   "),
        ("steer", "latest", "plan", "x" * 70_000),
        ("steer", "latest", "plan", "x", "--session", "intruder@ci"),
        ("steer", "latest", "plan", "x", "--session", "task:plan"),
        ("steer", "latest", "plan", "x", "--idempotency-key", " k1"),
        ("steer", "latest", "plan", "x", "--idempotency-key="),
        ("steer", "latest", "plan", "x", "--idempotency-key", "two\nlines"),
        ("steer", "latest", "plan", "x", "--idempotency-key", "k" * 257),
        ("steer", "latest", "plan", "x", "--wait", "--timeout", "forever"),
        ("steer", "latest", "plan", "x", "--wait", "--timeout", "-1s"),
        ("steer", "latest", "plan", "x", "--timeout=5s"),
        ("steer", "latest", "plan", "x", "--unknown"),
        ("steer", "latest", "plan"),
        ("steer", "latest", "plan", "x", "y"),
        ("steer", "../../etc", "plan", "x"),
        ("steer", "1999", "plan", "x"),  # no run matches
        ("status", "latest"),  # no leader runs it: a warning to give
        ("status", "latest", "--color", "rainbow"),
        ("status", "latest", "--jq", ".run"),
        ("runs", "--status", "done"),
        ("runs", "--jq", ".[]"),
        ("runs", "latest"),
        ("respond", "latest", "plan", "x"),  # it asked nothing
        ("cancel", "latest", "--jq", ".tasks"),
        ("cancel", "latest", "--grace=1s"),
        ("add", "latest", "more"),  # no --agent: the full command says it is missing
        ("steer", "latest", "-", "x"),  # a `-` that is not a body
        ("handoff", "latest"),
        ("--version", "--help"),
    ],
)
def test_what_the_fast_path_leaves_to_the_full_command(
    make_run: MakeRun, args: tuple[str, ...]
) -> None:
    store = make_run()
    start(store)
    _refused(store, *args)


@pytest.mark.parametrize("first", ["full", "fast"])
@pytest.mark.parametrize("index", ["kept", "lost", "behind"])
def test_a_key_a_message_carried_is_replayed_or_left_to_the_full_command_to_refuse(
    make_run: MakeRun, capsys: pytest.CaptureFixture[str], first: str, index: str
) -> None:
    """Whichever command sent the keyed message, and whatever became of the indexes, a send
    under the same key writes nothing on the fast path: a retry of the same request is replayed,
    another request left to the full command, which refuses it."""
    from crew import verbs

    store = make_run()
    start(store)
    root = str(store.paths.home.root)
    sent = ["follow-up", "latest", "plan", "x", "--idempotency-key", "k1", "--home", root]
    if index == "behind":  # the indexes saved before the keyed message was written
        assert (
            fast.fast(
                ["steer", "latest", "plan", "first", "--idempotency-key", "k0", "--home", root]
            )
            == 0
        )
    if first == "fast":
        assert fast.fast(sent) == 0
    else:
        verbs.follow_up(store, "plan", "x", idempotency_key="k1", session=SESSION)
    if index == "lost":
        for saved in store.paths.runtime_dir.glob("*.keys.sqlite*"):
            saved.unlink()
    capsys.readouterr()
    runfiles.wrote = False  # each command below a fresh process

    for args in [
        ("follow-up", "latest", "plan", "other"),  # another body under the key
        ("steer", "latest", "plan", "x"),  # another box, another kind
        ("follow-up", "latest", "build", "x"),
    ]:
        _refused(store, *args, "--idempotency-key", "k1")
    before = snapshot_files(store.paths.home.root / "state")
    assert fast.fast(sent) == 0
    assert capsys.readouterr().out.startswith("Already sent as msg_")
    assert fast.fast([*sent, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["replayed"] is True
    assert snapshot_files(store.paths.home.root / "state") == before  # its caches too
    keyed = [
        m
        for m in RunStore(store.paths).history(Box.INBOX)
        if (m.data or {}).get("idempotencyKey") == "k1"
    ]
    assert len(keyed) == 1


@pytest.mark.parametrize("then", ["pending", "delivered", "acknowledged", "changed twice"])
@pytest.mark.parametrize("output", [(), ("--json",), ("-q",)])
@pytest.mark.parametrize("leader", [True, False])
def test_a_replay_prints_what_the_full_command_prints(
    make_run: MakeRun,
    cli: Callable[..., CliResult],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    then: str,
    output: tuple[str, ...],
    leader: bool,
) -> None:
    from crew import verbs
    from crew.domain import mailbox as mail

    store = make_run()
    start(store)
    verbs.steer(store, "plan", "before", session=SESSION)
    message = verbs.steer(store, "plan", "Use the cache", idempotency_key="r1", session=SESSION)
    inside = f'mentions {{"id":"{message.message.id}"}} inside'
    verbs.steer(store, "plan", inside, session=SESSION)
    if then != "pending":
        with change(store) as txn:
            mail.deliver(txn, [message.message], attempt=1)
    if then in {"acknowledged", "changed twice"}:
        with change(store) as txn:
            mail.acknowledge(txn, "plan", message.message.id)
    if then == "changed twice":
        with change(store) as txn:
            mail.decide(txn, "plan", {"action": "noted", "focus": message.message.id})
    if leader:
        _alive(store)
    twins = Twins(store, tmp_path)

    full, quick = twins.both(
        cli,
        capsys,
        "steer",
        twins.run_id,
        "plan",
        "Use the cache",
        "--idempotency-key",
        "r1",
        *output,
    )

    assert (quick.code, quick.err) == (full.code, full.err) == (0, "")
    assert quick.out == full.out
    if "--json" in output:
        status = {"changed twice": "acknowledged"}.get(then, then)
        assert (json.loads(quick.out)["status"], json.loads(quick.out)["replayed"]) == (
            status,
            True,
        )
    twins.same_files()


@pytest.mark.parametrize(
    "args",
    [
        ("add", "RUN", "More work\nin detail", "--agent", "coder"),
        ("add", "RUN", "more", "--agent", "coder", "--json"),
        ("add", "RUN", "more", "--agent", "coder", "-q"),
        ("add", "RUN", "x", "--agent", "coder", "--id", "extra", "--depends-on", "plan",
         "--title", "An extra", "--idempotency-key", "add-1", "--json"),
        ("add", "RUN", "x", "--agent", "coder", "--depends-on", "plan", "--depends-on", "build"),
        ("add", "RUN", "x", "--agent", "coder", "--depends-on", "nope"),  # no such task: 5
        ("add", "RUN", "x", "--agent", "nobody"),  # no such agent: 5
        ("add", "RUN", "x", "--agent", "coder", "--id", "plan"),  # taken: 4
        ("add", "RUN", "x", "--agent", "coder", "--id", "Bad/Id"),  # 2
        ("add", "RUN", "x", "--agent", "coder", "--id", "new\n"),  # 2: not before the newline
        ("add", "RUN", "x", "--agent", "coder", "--depends-on", "plan\n"),  # 2
        ("cancel", "RUN", "plan\n"),  # 2
        ("add", "RUN", "x", "--agent", "coder", "--session", "intruder@ci"),  # not the owner: 4
        ("add", "RUN", " \n", "--agent", "coder"),  # a blank prompt: 2
        ("add", "RUN", "x", "--agent", "coder", "--title", "t" * 1025),  # 2
        ("add", "RUN", "x", "--agent", "coder", "--depends-on", "extra"),  # not yet added: 5
        ("add", "RUN", "x", "--agent", "coder", "--id", "coder-1", "-q"),
        ("add", "RUN", "x", "--agent", "coder", "--idempotency-key", "k-1", "--json"),
        ("handoff", "RUN", "other@ci"),
        ("handoff", "RUN", "other@ci", "--json"),
        ("handoff", "RUN", "two\nlines"),
        ("handoff", "RUN", "other@ci", "--session", "intruder@ci", "--force", "-q"),
        ("handoff", "RUN", "other@ci", "-q"),
        ("handoff", "RUN", "zo\u00eb@ci"),
        ("handoff", "RUN", "a\u202eb@ci"),  # a control that reorders text: 2
        ("handoff", "RUN", SESSION),  # already its owner
        ("handoff", "RUN", SESSION, "--json"),
        ("handoff", "RUN", "task:plan"),  # a worker of the run
        ("handoff", "RUN", "task:nope"),  # no such task: 5
        ("handoff", "RUN", "other@ci", "--session", "intruder@ci"),  # not the owner: 4
        ("cancel", "RUN"),
        ("cancel", "RUN", "plan", "--json"),
        ("cancel", "RUN", "--grace", "1s", "-q"),
        ("cancel", "RUN", "--grace", "forever"),  # 2
        ("cancel", "RUN", "nope"),  # 5
        ("cancel", "1999"),  # no such run: 5
    ],
)  # fmt: skip
def test_add_handoff_and_cancel_do_what_the_full_commands_do(
    make_run: MakeRun,
    cli: Callable[..., CliResult],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    args: tuple[str, ...],
) -> None:
    store = make_run()
    start(store)
    twins = Twins(store, tmp_path)
    command, run, *rest = args

    full, quick = twins.both(cli, capsys, command, twins.run_id if run == "RUN" else run, *rest)

    assert (quick.code, _normal(quick.err.encode(), twins.fast)) == (
        full.code,
        _normal(full.err.encode(), twins.full),
    )
    assert _normal(quick.out.encode(), twins.fast) == _normal(full.out.encode(), twins.full)
    twins.same_files()
    fast_store = RunStore.open(Home(twins.fast), twins.run_id)
    assert fast_store.load().clean
    assert fast_store.paths.events.read_bytes().count(b"\n") == (
        RunStore.open(Home(twins.full), twins.run_id).paths.events.read_bytes().count(b"\n")
    )


def test_a_cancel_of_a_task_that_spawned_cancels_what_it_spawned_as_the_full_command_does(
    make_run: MakeRun, cli: Callable[..., CliResult], capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:  # fmt: skip
    from crew.domain import adding
    from crew.protocol import SpawnRequest

    store = make_run(config(agents={"coder": {"command": ["true"], "may": ["spawn"]}}))
    start(store)
    with change(store) as txn:
        adding.spawn(txn, "plan", SpawnRequest("coder", "test it"), unnamed=1)
    twins = Twins(store, tmp_path)

    full, quick = twins.both(cli, capsys, "cancel", twins.run_id, "plan")

    assert (quick.code, quick.out) == (full.code, full.out)
    assert "Cancelled plan, build, plan.1 in run" in quick.out
    twins.same_files()


@pytest.mark.parametrize("key", [None, "k"])
@pytest.mark.parametrize("title", [None, "A title"])
def test_an_added_task_is_written_as_the_model_writes_it(
    key: str | None, title: str | None
) -> None:
    from crew.fast import adding

    agents = {"coder": {"maxAttempts": 3}}
    written = adding._task("t", "coder", "Do it\nwell", title, ["plan"], {"agents": agents},
                           "2026-12-03T10:00:00.000000Z", key)  # fmt: skip
    model = models.Task(
        id="t",
        agent="coder",
        title=title or "Do it",
        prompt="Do it\nwell",
        status=TaskStatus.QUEUED,
        depends_on=["plan"],
        max_attempts=3,
        added_at="2026-12-03T10:00:00.000000Z",
        idempotency_key=key,
    )
    assert json.dumps(written) == json.dumps(model.to_dict())


def _keyed_follow_up(store: RunStore) -> None:
    verbs.follow_up(store, "plan", "more", session=SESSION, idempotency_key="k")


def _keyed_add(store: RunStore) -> None:
    verbs.add_task(store, agent="coder", prompt="x", session=SESSION, idempotency_key="k")


def _plan_fails(store: RunStore) -> None:
    with change(store) as txn:
        tasks.transition(txn, "plan", TaskStatus.FAILED, ended_at=txn.at, error="it broke")


def _flagged(store: RunStore) -> None:
    with change(store) as txn:
        tasks.transition(txn, "plan", TaskStatus.NEEDS_REVIEW, error="look at it")


@pytest.mark.parametrize(
    ("before", "args"),
    [
        (_keyed_follow_up, ("--idempotency-key", "k")),  # a key a message carried: 4
        (_keyed_add, ("--idempotency-key", "k")),  # the same request again: replayed
        (_keyed_add, ("--idempotency-key", "k", "--id", "other")),  # another request: 4
        (_keyed_add, ("--idempotency-key", "k", "--depends-on", "plan")),  # another: 4
        (_keyed_add, ("--idempotency-key", "k", "--json")),
        (_keyed_add, ("--idempotency-key", "k", "--id", "coder-1", "-q")),  # its id: the same
        (_keyed_add, ("-q",)),  # coder-1 is taken
        (_plan_fails, ("--depends-on", "plan", "--json")),  # cancelled as it is added
        (_flagged, ()),  # the run follows its tasks: flagged
    ],
)
def test_an_add_the_run_refuses_replays_or_settles_is_the_full_commands(
    make_run: MakeRun,
    cli: Callable[..., CliResult],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    before: Callable[[RunStore], None],
    args: tuple[str, ...],
) -> None:
    store = make_run()
    start(store)
    before(store)
    twins = Twins(store, tmp_path)

    full, quick = twins.both(cli, capsys, "add", twins.run_id, "x", "--agent", "coder", *args)

    assert (quick.code, _normal(quick.err.encode(), twins.fast)) == (
        full.code,
        _normal(full.err.encode(), twins.full),
    )
    assert _normal(quick.out.encode(), twins.fast) == _normal(full.out.encode(), twins.full)
    twins.same_files()


def _removal_scene(make_run: MakeRun) -> tuple[Home, list[str]]:
    """A home of five runs, oldest first: two ended, one not ended, one led, one ended and led
    still (its leader about to go); and what an earlier removal cut short left behind."""
    stores = [make_run() for _ in range(5)]
    for store in (stores[0], stores[1], stores[4]):
        verbs.cancel(store, session=SESSION)
    _alive(stores[3])
    _alive(stores[4])
    left = stores[0].paths.home.runs_dir / ".rm-20200101-000000-0000"
    (left / "logs").mkdir(parents=True)
    (left / "logs" / "plan.log").write_text("old\n")
    return stores[0].paths.home, [store.run_id for store in stores]


@pytest.mark.parametrize(
    ("args", "left"),
    [
        (("rm", "{0}"), 4),
        (("rm", "{1}", "{0}", "--json"), 3),
        (("rm", "{0}", "{1}", "{0}", "--dry-run"), 6),
        (("rm", "{0}", "--dry-run", "--json"), 6),
        (("prune", "--keep", "0"), 3),  # not ended, led: kept, and said so
        (("prune", "--keep", "2", "--json"), 3),  # the two newest kept: all the older went
        (("prune", "--keep", "4"), 4),
        (("prune", "--keep", "0", "--dry-run"), 6),
        (("prune", "--keep", "0", "--dry-run", "--json"), 6),
        (("prune", "--older-than", "1h"), 5),  # none ended so long ago: only the leftover goes
        (("prune", "--older-than", "0s", "--json"), 3),
        (("prune", "--keep", "1", "--older-than", "0ms"), 3),
    ],
)
def test_rm_and_prune_remove_and_print_what_the_full_commands_do(
    make_run: MakeRun,
    cli: Callable[..., CliResult],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    args: tuple[str, ...],
    left: int,
) -> None:
    home, ids = _removal_scene(make_run)
    now = clock.moment() + timedelta(seconds=2)
    monkeypatch.setattr(clock, "moment", lambda: now)  # "ended 2s ago" the same both ways
    twins = Twins(RunStore.open(home, ids[0]), tmp_path)

    full, quick = twins.both(cli, capsys, *(arg.format(*ids) for arg in args))

    assert (quick.code, quick.out, quick.err) == (full.code, full.out, full.err)
    assert quick.code == 0
    found = [sorted(p.name for p in (home / "state/runs").iterdir()) for home in twins.homes()]
    assert found[1] == found[0]
    assert len(found[1]) == left  # of the five runs and the leftover


@pytest.mark.parametrize(
    "args",
    [
        ("rm", "{2}"),  # it has not ended: refused
        ("rm", "{0}", "{3}"),  # one is led: none is removed
        ("rm", "{4}", "--dry-run"),  # ended, and led
        ("rm", "{0}", "--force"),
        ("rm", "nope"),
        ("rm",),
        ("prune",),  # --keep, --older-than or both
        ("prune", "--keep", "-1"),
        ("prune", "--keep", "x"),
        ("prune", "--older-than", "soon"),
        ("prune", "--keep", "0", "--jq", ".removed"),
    ],
)
def test_an_rm_or_prune_the_full_command_explains_is_left_to_it(
    make_run: MakeRun, args: tuple[str, ...]
) -> None:
    home, ids = _removal_scene(make_run)
    before = snapshot_files(home.root)

    assert fast.fast([*(arg.format(*ids) for arg in args), "--home", str(home.root)]) is None

    assert snapshot_files(home.root) == before and not runfiles.wrote


@pytest.mark.parametrize("command", [("rm", "{link}"), ("prune", "--keep", "0")])
def test_a_run_folder_that_is_a_link_is_left_to_the_full_command_untouched(
    make_run: MakeRun, tmp_path: Path, command: tuple[str, ...]
) -> None:
    home, ids = _removal_scene(make_run)
    elsewhere = tmp_path / "elsewhere"
    shutil.copytree(home.run(ids[0]).root, elsewhere)
    (elsewhere / ".lock").unlink()
    link = home.runs_dir / "20200101-000000-0001"
    link.symlink_to(elsewhere)
    before = snapshot_files(elsewhere)

    argv = [arg.format(link=link.name) for arg in command]
    assert fast.fast([*argv, "--home", str(home.root)]) is None

    assert snapshot_files(elsewhere) == before and not (elsewhere / ".lock").exists()
    assert link.is_symlink()


def test_a_prune_keeps_a_run_whose_leader_started_after_its_first_look(
    make_run: MakeRun, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Between the look that chose it and its lock, a leader took the run: it is kept."""
    home, ids = _removal_scene(make_run)
    taken = RunStore.open(home, ids[0])
    lock = runfiles.RunLock.__enter__

    def a_leader_first(self: runfiles.RunLock) -> runfiles.RunLock:
        if self.root == str(taken.paths.root):
            _alive(taken)
        return lock(self)

    monkeypatch.setattr(runfiles.RunLock, "__enter__", a_leader_first)
    assert fast.fast(["prune", "--keep", "0", "--home", str(home.root)]) == 0

    out = capsys.readouterr()
    assert f"kept run {ids[0]}: its leader, pid {os.getpid()}" in out.err
    assert taken.paths.root.is_dir() and not home.run(ids[1]).root.exists()
    assert f"Removed run {ids[1]}" in out.out and ids[0] not in out.out


def test_a_prune_keeps_a_run_that_needs_recovery_for_the_full_command(make_run: MakeRun) -> None:
    home, ids = _removal_scene(make_run)
    with home.run(ids[1]).events.open("ab") as log:
        log.write(b'{"torn')  # a write cut short: the full command repairs it first
    before = snapshot_files(home.root)

    assert fast.fast(["prune", "--keep", "0", "--home", str(home.root)]) is None

    assert snapshot_files(home.root) == before


def _pending_follow_up(store: RunStore) -> None:
    verbs.follow_up(store, "plan", "more", session=SESSION)


def _spawned(store: RunStore) -> None:
    verbs.add_task(store, agent="coder", prompt="x", task_id="kid", session=SESSION, parent="plan")


def _build_flagged(store: RunStore) -> None:
    """build runs and is flagged; plan completed."""
    with change(store) as txn:
        tasks.transition(txn, "plan", TaskStatus.COMPLETED, ended_at=txn.at)
        tasks.transition(txn, "build", TaskStatus.RUNNING, attempt=1, started_at=txn.at)
        tasks.transition(txn, "build", TaskStatus.NEEDS_REVIEW, error="look at it")


def _another(store: RunStore) -> None:
    verbs.add_task(store, agent="coder", prompt="x", task_id="other", session=SESSION)


def _build_file_reordered(store: RunStore) -> None:
    """build's snapshot with its fields in another order: valid, not as crew writes it."""
    path = store.paths.root / "tasks" / "build.json"
    task = json.loads(path.read_bytes())
    path.write_text(json.dumps(dict(reversed(task.items())), indent=2) + "\n")


def _flagged_and_another(store: RunStore) -> None:
    _another(store)
    _flagged(store)


@pytest.mark.parametrize(
    ("before", "args"),
    [
        (None, ("build",)),  # queued, nothing depends on it: the run goes on
        (None, ("plan", "-q")),  # build depends on it: cancelled too, and the run fails
        (_another, ("plan",)),  # build cancelled with it; other goes on
        (_pending_follow_up, ("plan",)),  # the follow-up rejected: the full command's
        (_pending_follow_up, ()),
        (_spawned, ("kid",)),  # its parent may be told: the full command's
        (_build_flagged, ("build", "--json")),  # the last one: the run ends failed
        (_flagged, ("build",)),  # plan still flagged: the run stays so
        (_flagged, ()),
        (_flagged_and_another, ("plan", "--json")),  # none flagged now: the run is cleared
        (_build_file_reordered, ()),  # the full command writes build's file as the models do
        (_keyed_add, ("plan",)),  # build and coder-1 (which depends on nothing) stay
    ],
)
def test_a_cancel_ends_and_settles_as_the_full_command_does(
    make_run: MakeRun,
    cli: Callable[..., CliResult],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    before: Callable[[RunStore], None] | None,
    args: tuple[str, ...],
) -> None:
    store = make_run()
    start(store)
    if before is not None:
        before(store)
    twins = Twins(store, tmp_path)

    full, quick = twins.both(cli, capsys, "cancel", twins.run_id, *args)

    assert (quick.code, _normal(quick.err.encode(), twins.fast)) == (
        full.code,
        _normal(full.err.encode(), twins.full),
    )
    assert _normal(quick.out.encode(), twins.fast) == _normal(full.out.encode(), twins.full)
    twins.same_files()
    assert RunStore.open(Home(twins.fast), twins.run_id).load().clean


def test_a_cancel_on_the_fast_path_stops_the_worker(make_run: MakeRun) -> None:
    from test_verbs import _worker

    store = make_run()
    worker = _worker(store, "plan")
    start(store, pid=worker.pid)
    home = ["--home", str(store.paths.home.root)]

    assert typer_free(["cancel", "latest", "plan", "--json", "--grace", "5s", *home]) == (0, [])

    assert worker.wait(timeout=10) == -signal.SIGTERM
    assert store.state().tasks["plan"].status is TaskStatus.CANCELLED


def test_a_handoff_of_a_manifest_crew_did_not_write_so_is_the_full_commands(
    make_run: MakeRun,
    cli: Callable[..., CliResult],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    """Its fields out of order: the full command writes it as the models do."""
    store = make_run()
    start(store)
    run = json.loads(store.paths.manifest.read_bytes())
    moved = {"config": run.pop("config"), **run}
    store.paths.manifest.write_text(json.dumps(moved, indent=2) + "\n")
    twins = Twins(store, tmp_path)

    full, quick = twins.both(cli, capsys, "handoff", twins.run_id, "other@ci")

    assert (quick.code, quick.out) == (full.code, full.out)
    twins.same_files()
    written = json.loads((twins.fast / "state/runs" / twins.run_id / "manifest.json").read_bytes())
    assert next(iter(written)) == "runId"


@pytest.mark.parametrize(
    ("args", "then", "code", "unread"),
    [
        (("steer", "plan", "x", "--wait", "--timeout", "200ms"), None, 3, False),  # no delivery
        (("follow-up", "plan", "x", "--wait-ack", "--timeout", "0.2", "--json"), None, 3, False),
        (("steer", "plan", "x", "--wait", "--timeout", "200ms"), None, 3, True),
        (("follow-up", "plan", "x", "--wait-ack", "--timeout", "0.2", "--json"), None, 3, True),
        (("steer", "plan", "again", "--wait", "--idempotency-key", "w1"), "delivered", 0, False),
        (("steer", "plan", "again", "--wait", "--idempotency-key", "w1", "--json"), "acked", 0,
         False),
        (("steer", "plan", "again", "--wait-ack", "--idempotency-key", "w1", "--timeout", "0.2s"),
         "delivered", 3, False),
        (("steer", "plan", "again", "--wait-ack", "--idempotency-key", "w1", "-q"), "acked", 0,
         False),
    ],
)  # fmt: skip
def test_a_send_that_waits_prints_and_exits_as_the_full_command_does(
    make_run: MakeRun,
    cli: Callable[..., CliResult],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    args: tuple[str, ...],
    then: str | None,
    code: int,
    unread: bool,
) -> None:
    """A wait that holds at once (a retry of a message delivered or acknowledged since), and
    one that times out (nothing delivers the message); `unread`: with mailbox lines the fast
    path does not read, which leave the rest of a wait to the library once the message is sent
    (a replay, which sends nothing, is then the full command's)."""
    from crew import verbs
    from crew.domain import mailbox as mail
    from crew.fast import mailbox as fast_mailbox
    from crew.fast.cmdline import Fallback

    if unread:

        def unreadable(raw: bytes) -> dict[str, object]:
            raise Fallback

        monkeypatch.setattr(fast_mailbox, "checked", unreadable)
    store = make_run()
    start(store)
    if then is not None:
        sent = verbs.steer(store, "plan", "again", idempotency_key="w1", session=SESSION).message
        with change(store) as txn:
            mail.deliver(txn, [sent], attempt=1)
        if then == "acked":
            with change(store) as txn:
                mail.acknowledge(txn, "plan", sent.id)
    _alive(store)
    twins = Twins(store, tmp_path)
    verb, task, *rest = args

    full, quick = twins.both(cli, capsys, verb, twins.run_id, task, *rest)

    assert (quick.code, full.code) == (code, code)
    assert _normal(quick.err.encode(), twins.fast) == _normal(full.err.encode(), twins.full)
    assert _normal(quick.out.encode(), twins.fast).decode() == (
        _normal(full.out.encode(), twins.full).decode()
    )
    twins.same_files()


@pytest.mark.parametrize("then", ["delivered", "acknowledged", "rejected"])
def test_a_wait_wakes_when_the_message_is_delivered_acknowledged_or_rejected(
    make_run: MakeRun, capsys: pytest.CaptureFixture[str], then: str
) -> None:
    import threading

    from test_cli_send import _until_steered

    from crew import verbs
    from crew.domain import mailbox as mail

    store = make_run()
    start(store)
    _alive(store)

    def meanwhile() -> None:
        _until_steered(store)  # the command waits by then (were it not, it would still see it)
        if then == "rejected":
            verbs.cancel(store, "plan", session=SESSION, grace=0.1)
            return
        (sent,) = store.messages(Box.STEERING)
        with change(store) as txn:
            mail.deliver(txn, [sent], attempt=1)
        if then == "acknowledged":
            with change(store) as txn:
                mail.acknowledge(txn, "plan", sent.id)

    thread = threading.Thread(target=meanwhile)
    thread.start()
    wait = "--wait-ack" if then == "acknowledged" else "--wait"
    root = str(store.paths.home.root)
    code = fast.fast(["steer", "latest", "plan", "go", wait, "--timeout", "60s", "--home", root])
    thread.join()
    out = capsys.readouterr()

    if then == "rejected":
        assert code == 4
        assert out.err.endswith("was rejected: task cancelled before delivery.\n")
        assert out.out.endswith(" rejected.\n")
    else:
        assert (code, out.err) == (0, "")
        assert out.out.startswith("Sent steer msg_") and out.out.endswith(f" {then}.\n")


class _Stdin(io.TextIOWrapper):
    """Stdin holding `data`, a terminal or not."""

    def __init__(self, data: bytes, *, terminal: bool = False) -> None:
        super().__init__(io.BytesIO(data), encoding="utf-8")
        self.terminal = terminal

    def isatty(self) -> bool:
        return self.terminal


@pytest.mark.parametrize(
    "args",
    [
        ("steer", "plan", "-"),
        ("follow-up", "plan", "-", "--json"),
        ("nudge", "plan", "-"),
        ("add", "-", "--agent", "coder", "--json"),
    ],
)
def test_a_body_read_from_stdin_is_what_the_full_command_reads(
    make_run: MakeRun,
    cli: Callable[..., CliResult],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    args: tuple[str, ...],
) -> None:
    store = make_run()
    start(store)
    twins = Twins(store, tmp_path)
    text = "line one\nline \u00e9 two\n\n"
    command, *rest = args
    where = [] if command == "add" else [rest.pop(0)]
    full = cli(command, twins.run_id, *where, *rest, "--home", str(twins.full), stdin=text)
    capsys.readouterr()
    monkeypatch.setattr(sys, "stdin", _Stdin(text.encode()))

    code = fast.fast([command, twins.run_id, *where, *rest, "--home", str(twins.fast)])
    quick = capsys.readouterr()

    assert (code, quick.err) == (full.code, full.err) == (0, "")
    assert _normal(quick.out.encode(), twins.fast) == _normal(full.out.encode(), twins.full)
    twins.same_files()
    assert (
        'line one\\nline \u00e9 two"'
        in (twins.fast / "state/runs" / twins.run_id / "events.jsonl").read_text()
    )


@pytest.mark.parametrize(
    ("data", "terminal"),
    [
        (b"x" * 70_000, False),  # read, then over the body limit: the full command's
        (b"\xff\xfe not UTF-8", False),
        (b"typed", True),  # a terminal: not read here
    ],
)
def test_stdin_the_fast_path_leaves_is_there_for_the_full_command(
    make_run: MakeRun, monkeypatch: pytest.MonkeyPatch, data: bytes, terminal: bool
) -> None:
    store = make_run()
    start(store)
    monkeypatch.setattr(sys, "stdin", _Stdin(data, terminal=terminal))

    _refused(store, "steer", "latest", "plan", "-")

    assert sys.stdin.buffer.read() == data  # what the full command reads next


@pytest.mark.parametrize("fast_path", ["1", "0"])
def test_a_refused_keyed_command_leaves_no_file_behind(make_run: MakeRun, fast_path: str) -> None:
    """In a real process, which exits without collecting its garbage: the key index a refused
    command looked in is closed, so SQLite leaves no `-wal` or `-shm` file beside it."""
    store = make_run()
    start(store)
    env = {**os.environ, "CREW_HOME": str(store.paths.home.root), "CREW_SESSION_ID": SESSION}
    crew = [sys.executable, "-m", "crew", "follow-up", "latest", "plan"]
    sent = subprocess.run(
        [*crew, "x", "--idempotency-key", "k1"], env=env, capture_output=True, check=False
    )
    assert sent.returncode == 0, sent.stderr
    before = snapshot_files(store.paths.home.root)

    refused = subprocess.run(
        [*crew, "other", "--idempotency-key", "k1"],
        env={**env, "CREW_FAST": fast_path},
        capture_output=True,
        text=True,
        check=False,
    )
    added = subprocess.run(
        [sys.executable, "-m", "crew", "add", "latest", "y", "--agent", "nobody"],
        env={**env, "CREW_FAST": fast_path},
        capture_output=True,
        check=False,
    )

    assert refused.returncode == 4 and "with a different body" in refused.stderr
    assert added.returncode == 5
    assert snapshot_files(store.paths.home.root) == before


def test_a_worker_is_the_full_commands_to_check(
    make_run: MakeRun, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = make_run()
    start(store)
    monkeypatch.setenv("CREW_WORKER_TOKEN", "t")
    _refused(store, "steer", "latest", "plan", "x")


def test_an_ended_run_and_a_backlog_are_the_full_commands(make_run: MakeRun) -> None:
    store = make_run()
    start(store)
    from crew import verbs

    for index in range(20):  # warnPending: the 21st would warn
        verbs.steer(store, "plan", f"s{index}", session=SESSION)
    _refused(store, "steer", "latest", "plan", "x")
    _refused(store, "status", "latest", "--json")  # no leader, and the backlog: warnings
    verbs.cancel(store, session=SESSION)
    _refused(store, "follow-up", "latest", "plan", "x")


def test_a_run_that_needs_recovery_is_the_full_commands(make_run: MakeRun) -> None:
    store = make_run()
    start(store)
    store.paths.applied.write_bytes(b"torn")
    _refused(store, "steer", "latest", "plan", "x")
    _refused(store, "status", "latest", "--json")


def test_a_run_an_older_crew_made_is_the_full_commands(make_run: MakeRun) -> None:
    store = make_run()
    start(store)
    folder = store.paths.root / "tasks"
    tasks = [json.loads((folder / f"{t}.json").read_text()) for t in ("plan", "build")]
    shutil.rmtree(folder)
    (store.paths.root / "tasks.json").write_text(json.dumps(tasks, indent=2) + "\n")
    _refused(store, "steer", "latest", "plan", "x")
    _refused(store, "status", "latest", "--json")
    from crew import verbs

    verbs.steer(store, "plan", "converted", session=SESSION)  # its next writer converts it
    assert fast.fast(["steer", "latest", "plan", "x", "--home", str(store.paths.home.root)]) == 0


def test_a_run_a_newer_crew_made_is_the_full_commands_to_refuse(make_run: MakeRun) -> None:
    store = make_run()
    start(store)
    manifest = json.loads(store.paths.manifest.read_text())
    manifest["stateVersion"] = models.STATE_VERSION + 1
    store.paths.manifest.write_text(json.dumps(manifest, indent=2) + "\n")
    _refused(store, "steer", "latest", "plan", "x")
    _refused(store, "status", "latest", "--json")


@pytest.mark.parametrize("folder", runfiles.FOLDERS)
def test_a_run_folder_that_is_a_link_is_the_full_commands_to_refuse(
    make_run: MakeRun, tmp_path: Path, folder: str
) -> None:
    store = make_run()
    ask(store)
    elsewhere = tmp_path / "elsewhere"
    real = store.paths.root / folder
    if real.exists():
        shutil.move(real, elsewhere)
    else:
        elsewhere.mkdir()
    real.symlink_to(elsewhere)
    for args in (("steer", "latest", "plan", "x"), ("respond", "latest", "plan", "x")):
        _refused(store, *args)
    _refused(store, "status", "latest", "--json")
    _refused(store, "logs", "latest", "plan")


def test_the_folders_it_checks_are_those_the_store_checks() -> None:
    from crew.paths import Home

    paths = Home(Path("/h")).run("20261130-000000-abcd")
    store_folders = {
        paths.tasks_dir, paths.mailbox_dir, paths.logs_dir, paths.checkpoints_dir,
        paths.runtime_dir,
    }  # fmt: skip
    assert {paths.root / name for name in runfiles.FOLDERS} == store_folders


def test_a_marker_of_another_boot_is_the_full_commands(
    make_run: MakeRun, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = make_run()
    start(store)
    monkeypatch.setattr(runfiles, "_boot", ["0" * runfiles.BOOT_ID_WIDTH])  # "rebooted since"
    _refused(store, "steer", "latest", "plan", "x")
    _refused(store, "status", "latest", "--json")
    _refused(store, "runs")


def test_a_marker_that_does_not_count_the_tasks_is_trusted_and_counted_by_the_next_library_write(
    make_run: MakeRun, capsys: pytest.CaptureFixture[str]
) -> None:
    # What the crew before the count wrote (format 2): the fast path keeps it as it found it,
    # since a send reads one task only; the library's writer, holding the state, counts them.
    from dataclasses import replace

    from crew.store import marker

    store = make_run()
    start(store)
    _alive(store)
    written = marker.read(store.paths)
    assert written is not None and written.tasks == len(store.state().tasks)
    marker.write(store.paths, replace(written, tasks=None))
    assert store.paths.applied.read_bytes().startswith(b"2 ")

    home = str(store.paths.home.root)
    assert fast.fast(["steer", store.run_id, "plan", "x", "--home", home]) == 0
    assert store.paths.applied.read_bytes().startswith(b"2 ")
    assert RunStore(store.paths).load().clean
    capsys.readouterr()

    verbs.steer(RunStore(store.paths), "plan", "y", session=SESSION)
    counted = marker.read(store.paths)
    assert counted is not None and counted.tasks == len(store.state().tasks)
    assert fast.fast(["status", store.run_id, "--json", "--home", home]) == 0


def test_a_run_the_full_command_would_show_unreadable_sends_runs_to_it(make_run: MakeRun) -> None:
    store = make_run()
    make_run()
    assert fast.fast(["runs", "--home", str(store.paths.home.root)]) == 0
    (store.paths.root / "manifest.json").write_text("{")
    _refused(store, "runs")


class _Clock:
    """runfiles' `time`, with no real waiting: each sleep moves the clock on (and `on_sleep`,
    if given, is called at the first)."""

    def __init__(self, on_sleep: Callable[[], None] | None = None) -> None:
        self.now, self.sleeps, self._on_sleep = 0.0, 0, on_sleep

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        self.sleeps += 1
        if self.sleeps == 1 and self._on_sleep is not None:
            self._on_sleep()


def test_a_lock_busy_past_a_moment_or_a_raised_hand_is_the_full_commands(
    make_run: MakeRun, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = make_run()
    start(store)
    clock = _Clock()
    monkeypatch.setattr(runfiles, "time", clock)
    with store.lock():
        _refused(store, "steer", "latest", "plan", "x")
    assert clock.now >= runfiles.HAND_AFTER  # tried again until a full waiter would raise a hand
    (store.paths.root / ".next.lock").write_text("1:1")
    _refused(store, "steer", "latest", "plan", "x")


@pytest.mark.parametrize(("timeout", "waited"), [("0", 0.0), ("50ms", 0.05), ("1m", None)])
def test_a_lock_timeout_shorter_than_a_moment_ends_the_fast_paths_wait(
    make_run: MakeRun,
    monkeypatch: pytest.MonkeyPatch,
    timeout: str,
    waited: float | None,
) -> None:
    # CREW_LOCK_TIMEOUT=0: the fast path tried again for 0.25 s, and took a lock the full
    # command would have timed out on.
    store = make_run()
    start(store)
    clock = _Clock()
    monkeypatch.setattr(runfiles, "time", clock)
    monkeypatch.setenv("CREW_LOCK_TIMEOUT", timeout)
    with store.lock():
        _refused(store, "steer", "latest", "plan", "x")
    expected = runfiles.HAND_AFTER if waited is None else waited
    assert expected <= clock.now < expected + 2 * runfiles.POLL_INTERVAL


def test_a_lock_let_go_within_a_moment_is_taken_by_the_fast_path(
    make_run: MakeRun, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A holder keeps the lock for milliseconds: falling back would cost the full command's
    # start-up, and it would wait all the same.
    store = make_run()
    start(store)
    held = store.lock()
    held.__enter__()
    clock = _Clock(on_sleep=lambda: held.__exit__(None, None, None))
    monkeypatch.setattr(runfiles, "time", clock)

    assert fast.fast(["steer", "latest", "plan", "x", "--home", str(store.paths.home.root)]) == 0
    assert clock.sleeps == 1
    assert [m.body for m in store.messages(Box.STEERING)] == ["x"]


def test_a_leader_that_warns_sends_status_to_the_full_command(make_run: MakeRun) -> None:
    store = make_run()
    start(store)
    _alive(store, watcher=registry.WatcherKind.POLL)
    _refused(store, "status", "latest", "--json")
    _refused(store, "status", "latest")
    _alive(store, pid=2**22 + 7)  # gone
    _refused(store, "status", "latest", "--json")
    _refused(store, "status", "latest")
    _alive(store, degraded="disk full")
    _refused(store, "status", "latest", "--json")
    _refused(store, "status", "latest")


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("CREW_FAST", "0"),
        ("CREW_DEBUG", "1"),
        ("CREW_FAULT", "crash:x"),
        ("CREW_LOCK_TIMEOUT", "nan"),
    ],
)
def test_what_the_environment_leaves_to_the_full_command(
    make_run: MakeRun, monkeypatch: pytest.MonkeyPatch, variable: str, value: str
) -> None:
    store = make_run()
    start(store)
    monkeypatch.setenv(variable, value)
    _refused(store, "steer", "latest", "plan", "x")


def test_the_variables_it_reads_are_crews() -> None:
    from crew import env

    names = {v.name for v in env.VARIABLES}
    assert {"CREW_FAST", "CREW_DEBUG", "CREW_FAULT", "CREW_LOCK_TIMEOUT", "CREW_FSYNC"} <= names
    assert set(people.WORKER_VARIABLES) == {
        env.WORKER_TOKEN.name,
        env.RUN_ID.name,
        env.TASK_ID.name,
    }


# ----------------------------------------------------------------------------- one definition


@pytest.mark.parametrize("command", sorted(cmdline.SPECS))
def test_every_option_of_the_command_is_taken_or_left_to_the_full_command(command: str) -> None:
    import typer.main

    click_command = typer.main.get_command(build_app(command)).commands[command]  # type: ignore[attr-defined]
    spec = cmdline.SPECS[command]
    options = {o for p in click_command.params for o in p.opts if o.startswith("-")}
    arguments = [p.name for p in click_command.params if not p.opts[0].startswith("-")]
    known = spec.flags | spec.values | spec.many | spec.slow
    assert options - cmdline.HELP_OPTIONS == known, "an option the fast path does not account for"
    assert arguments == [*spec.arguments, *spec.optional, *([spec.rest] if spec.rest else [])]


def test_the_key_index_is_where_the_library_keeps_it(make_run: MakeRun) -> None:
    store = make_run()
    files = runfiles.RunFiles(str(store.paths.home.root), store.run_id)
    for box in status.INBOUND_BOXES:
        assert status.key_index_path(files, box) == str(store.paths.key_index(Box(box)))


def test_every_command_the_fast_path_parses_has_its_runner() -> None:
    assert set(fast.RUNNERS) == set(cmdline.SPECS)


@pytest.mark.parametrize(
    "value",
    ["ok-1", "cl\u00e9 7", "", " k", "k ", "a\nb", "tab\there", "\x01", "a\u2028b", "\udcff",
     "x" * 256, "x" * 257],
)  # fmt: skip
def test_a_key_the_fast_path_takes_is_one_crew_takes(value: str) -> None:
    try:
        ids.check_idempotency_key(value)
    except errors.UsageError:
        valid = False
    else:
        valid = True
    assert people.plain_text_id(value) is valid


@pytest.mark.parametrize(
    "stamp",
    ["2026-12-04T20:58:00.123456Z", "2024-02-29T23:59:59.999999Z", "2000-02-29T00:00:00.000000Z",
     "0001-01-01T00:00:00.000000Z", "1969-12-31T23:59:59.500000Z", "9999-12-31T23:59:59.999999Z",
     "2026-02-29T00:00:00.000000Z", "1900-02-29T00:00:00.000000Z", "2026-13-01T00:00:00.000000Z",
     "2026-04-31T00:00:00.000000Z", "2026-00-10T00:00:00.000000Z", "2026-01-00T00:00:00.000000Z",
     "2026-01-01T24:00:00.000000Z", "2026-01-01T23:60:00.000000Z", "2026-01-01T23:59:60.000000Z",
     "0000-01-01T00:00:00.000000Z", "2026-01-01 00:00:00.000000Z", "2026-01-01T00:00:00.00000xZ",
     "\uff12026-01-01T00:00:00.000000Z", "2026-01-01T00:00:00.000000", "2026-01-01T00:00:00Z"],
)  # fmt: skip
def test_the_fast_paths_clock_reads_what_crews_clock_reads(stamp: str) -> None:
    at = clock.moment()
    try:
        want: float | None = clock.seconds_since(stamp, at=at)
    except ValueError:
        want = None
    try:
        got: float | None = people.seconds_since(stamp)
    except cmdline.Fallback:
        got = None
    assert (got is None) == (want is None)
    assert got is None or want is None or abs(got - want) < 5
    assert abs(clock.seconds_since(people.now())) < 5


def test_the_constants_are_those_of_the_definitions_they_mirror() -> None:
    from rich.color import ColorSystem
    from rich.style import Style

    from crew import render, textviews

    for status_, style in render.STATUS_STYLE.items():
        codes = Style.parse(style)._make_ansi_codes(ColorSystem.STANDARD)
        assert textviews.STATUS_SGR[status_] == codes, status_
    assert tuple(b.value for b in Box) == runfiles.BOXES
    assert tuple(s.value for s in registry.RunStatus) == fast_runs.RUN_STATUSES
    assert runfiles.RUN_ID_PATTERN == ids.RUN_ID_PATTERN
    assert runfiles.TASK_ID_PATTERN == ids.TASK_ID_PATTERN
    assert ids._RUN_PREFIX_RE.pattern == runfiles.RUN_PREFIX_PATTERN
    assert runfiles.LATEST == ids.LATEST
    assert runfiles.LINE_LIMIT == jsonl.LINE_LIMIT
    assert (runfiles.POLL_INTERVAL, runfiles.HAND_AFTER) == (lock.POLL_INTERVAL, lock.HAND_AFTER)
    from crew.store import marker as store_marker

    assert runfiles.MARKER_FORMAT == store_marker._FORMAT
    assert runfiles.UNCOUNTED_FORMAT == store_marker._UNCOUNTED
    assert runfiles.BOOT_ID_FILE == store_files._BOOT_ID_FILE
    assert runfiles.BOOT_ID_WIDTH == store_files.BOOT_ID_WIDTH
    assert runfiles.boot_id() == store_files.boot_id()
    assert runfiles.FILE_MODE == store_files.FILE_MODE
    assert runfiles.NOT_WRITABLE_BY_OTHERS == store_files._NOT_WRITABLE_BY_OTHERS
    assert status.STATE_VERSION == models.STATE_VERSION
    assert {s.value for s in registry.TERMINAL_RUN_STATUSES} == status.TERMINAL_RUN_STATUSES
    assert tuple(b.value for b in registry.INBOUND_BOXES) == status.INBOUND_BOXES
    assert text._RAW_IN_JSON_RE.pattern == output.RAW_IN_JSON_PATTERN
    assert people.MAX_TEXT_ID_LENGTH == ids.MAX_TEXT_ID_LENGTH
    from crew.errors import ExitCode

    assert (sending.TIMED_OUT, sending.REFUSED) == (ExitCode.TIMEOUT, ExitCode.REFUSED)
    assert cmdline._UNIT_SECONDS.items() <= clock._UNIT_SECONDS.items()
    assert set(cmdline._UNIT_SECONDS) == set(cmdline.PLAIN_DURATION.split("(")[-1][:-2].split("|"))
    assert __import__("crew.store.pending").store.pending.IDEMPOTENCY_KEY == (
        registry.MessageData.IDEMPOTENCY_KEY
    )
    assert people.WORKER_SESSION_PREFIX == ids.WORKER_SESSION_PREFIX
    assert people.CGROUP_PREFIX.decode() == __import__("crew.procs.cgroup").procs.cgroup.PREFIX
    assert {s.value for s in LIVE_TASK_STATUSES} == sending.LIVE
    from crew.verbs import DEFAULT_NUDGE

    assert sending.DEFAULT_NUDGE == DEFAULT_NUDGE
    from crew.fast import answering

    assert (
        tuple(f.alias or n for n, f in models.SupervisorContact.model_fields.items())
        == answering.CONTACT_FIELDS
    )
    assert ContactType.NEED_SELECTION.value == answering.NEED_SELECTION
    from crew.fast import handing

    assert tuple(f.alias or n for n, f in models.Run.model_fields.items()) == handing.RUN_FIELDS
    assert {s.value for s in registry.RunStatus if not s.terminal} == handing.LIVE_RUN
    assert registry.EventType.OWNERSHIP_TRANSFERRED.value == handing.TRANSFERRED
    from crew import config as crew_config
    from crew.domain import adding as domain_adding
    from crew.domain import tasks as domain_tasks
    from crew.fast import adding

    assert registry.EventType.TASK_QUEUED.value == adding.QUEUED
    assert (adding.MAX_TASK_PROMPT, adding.MAX_TITLE, adding.MAX_ID_LENGTH) == (
        crew_config.MAX_TASK_PROMPT,
        crew_config.MAX_TITLE,
        ids.MAX_ID_LENGTH,
    )
    assert {s.value for s in domain_tasks._BLOCKING_ENDS} == adding.BLOCKING_ENDS
    assert domain_adding._NOT_ID.pattern == adding._NOT_ID.pattern
    from crew.fast import cancelling

    assert tuple(f.alias or n for n, f in models.Task.model_fields.items()) == (
        cancelling.TASK_FIELDS
    )
    assert {s.value for s in TaskStatus if s.terminal} == cancelling.TERMINAL
    assert {s.value for s in domain_tasks._BLOCKING_ENDS} == cancelling.BLOCKING
    kinds = registry.EventType
    assert (
        kinds.TASK_CANCELLED.value,
        kinds.RUN_ENDED.value,
        kinds.RUN_FLAGGED.value,
        kinds.RUN_CLEARED.value,
    ) == (cancelling.CANCELLED, cancelling.ENDED, cancelling.FLAGGED, cancelling.CLEARED)
    from crew.fast import removing
    from crew.paths import REMOVING_PREFIX

    assert removing.REMOVING_PREFIX == REMOVING_PREFIX
    for name, verb in sending.VERBS.items():
        full = {
            "steer": gate.STEER,
            "follow-up": gate.FOLLOW_UP,
            "nudge": gate.NUDGE,
            "respond": gate.RESPOND,
        }[name]
        kind = MessageKind(verb.kind)
        assert (verb.name, verb.noun, verb.kind, verb.event) == (
            full.name,
            full.noun,
            full.kind.value,
            full.event.value,
        )
        assert verb.allowed == {s.value for s in full.allowed}
        assert (verb.box, verb.priority) == (kind.box.value, kind.default_priority.value)
        assert verb.pressure == {k.value for k in gate.pressure_class(kind)}


def test_the_default_session_is_the_full_commands(monkeypatch: pytest.MonkeyPatch) -> None:
    from crew.session import current_actor

    monkeypatch.delenv("CREW_SESSION_ID")
    assert people.session(None).name == current_actor(None).session


def test_the_fast_path_imports_neither_typer_nor_pydantic(make_run: MakeRun) -> None:
    store = make_run()
    start(store)
    _alive(store)
    program = (
        "import sys; from crew.fast import fast; "
        f"codes = [fast(['steer', 'latest', 'plan', 'x', '--home', {str(store.paths.home.root)!r}]),"
        f" fast(['status', 'latest', '--json', '--home', {str(store.paths.home.root)!r}]),"
        f" fast(['status', 'latest', '--color', 'always', '--home', {str(store.paths.home.root)!r}]),"
        f" fast(['runs', '--color', 'always', '--home', {str(store.paths.home.root)!r}]),"
        f" fast(['mailbox', 'latest', '--home', {str(store.paths.home.root)!r}]),"
        f" fast(['logs', 'latest', 'plan', '--tail', '1', '--home', {str(store.paths.home.root)!r}]),"
        f" fast(['follow-up', 'latest', 'plan', 'x', '--idempotency-key', 'k', '--home', {str(store.paths.home.root)!r}]),"
        f" fast(['follow-up', 'latest', 'plan', 'x', '--idempotency-key', 'k', '--home', {str(store.paths.home.root)!r}]),"
        f" fast(['steer', 'latest', 'plan', 'y', '--wait', '--timeout', '1ms', '--home', {str(store.paths.home.root)!r}]),"
        f" fast(['add', 'latest', 'more', '--agent', 'coder', '--idempotency-key', 'a1', '--home', {str(store.paths.home.root)!r}]),"
        f" fast(['cancel', 'latest', 'build', '--home', {str(store.paths.home.root)!r}]),"
        f" fast(['handoff', 'latest', 'other@ci', '--home', {str(store.paths.home.root)!r}])]; "
        "heavy = sorted(({m.split('.')[0] for m in sys.modules} | set(sys.modules)) & "
        "{'pydantic', 'typer', 'click', 'rich', 'filelock', 'crew.models'}); "
        "sys.stderr.write(repr((codes, heavy)))"
    )
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, check=True, env=os.environ
    )
    # a keyed send, its replay, a wait that timed out (its error on stderr first), an add, a
    # cancel, a handoff
    assert done.stderr.endswith("\n([0, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0], [])")


def typer_free(
    argv: list[str], heavy: tuple[str, ...] = ("typer", "click", "rich")
) -> tuple[int | None, list[str]]:
    """The fast path's exit code for `argv` in a fresh process, and which of the `heavy`
    packages (typer, click and rich unless told) it imported."""
    program = (
        "import sys; from crew.fast import fast; "
        f"code = fast({argv!r}); "
        f"heavy = sorted({{m.split('.')[0] for m in sys.modules}} & {set(heavy)!r}); "
        "sys.stderr.write(repr((code, heavy)))"
    )
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, check=True, env=os.environ
    )
    code, heavy = ast.literal_eval(done.stderr.splitlines()[-1])  # the repr the program wrote
    return code, heavy


def test_add_handoff_and_cancel_import_no_typer(make_run: MakeRun) -> None:
    store = make_run()
    start(store)
    home = ["--home", str(store.paths.home.root)]
    assert typer_free(["add", "latest", "more", "--agent", "coder", "-q", *home]) == (0, [])
    assert typer_free(["handoff", "latest", "other@ci", "--session", SESSION, *home]) == (0, [])
    assert typer_free(["cancel", "latest", "--session", "other@ci", *home]) == (0, [])


def test_doctor_imports_no_typer(make_run: MakeRun) -> None:
    store = make_run()
    _damage(store)
    # It found the damage, with the models and without typer.
    assert typer_free(["doctor", "--home", str(store.paths.home.root)]) == (1, [])


def test_doctor_examines_without_filelock_and_repairs_with_it(make_run: MakeRun) -> None:
    store = make_run()
    _damage(store)
    home = ["--home", str(store.paths.home.root)]
    # It pinned the run under the fast path's `flock` of the run lock, and found the damage.
    assert typer_free(["doctor", *home], heavy=("filelock",)) == (1, [])
    assert typer_free(["doctor", "--repair", *home], heavy=("filelock",)) == (0, ["filelock"])
    assert typer_free(["doctor", *home], heavy=("filelock",)) == (0, [])  # repaired


def test_a_doctor_kept_from_the_lock_is_the_full_commands(
    make_run: MakeRun, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    store = make_run()
    _damage(store)
    clock = _Clock()
    monkeypatch.setattr(runfiles, "time", clock)
    with store.lock():
        _refused(store, "doctor", "latest")
    assert capsys.readouterr() == ("", "")  # the full command reports what it finds
    assert clock.now >= runfiles.HAND_AFTER
    (store.paths.root / ".next.lock").write_text("1:1")  # a waiter's turn comes first
    _refused(store, "doctor")


def _plugin_on_path(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """An installed pydantic plugin (a distribution whose entry point is in the `pydantic`
    group) that notes in a file when it is loaded: the environment that has it, and the file."""
    site = tmp_path / "site"
    info = site / "tracer-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: tracer\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[pydantic]\ntracer = tracer:plugin\n")
    loaded = tmp_path / "loaded"
    (site / "tracer.py").write_text(
        "import os\n"
        "open(os.environ['TRACER_LOADED'], 'a').close()\n"
        "class Plugin:\n"
        "    def new_schema_validator(self, *args, **kwargs):\n"
        "        return None, None, None\n"
        "plugin = Plugin()\n"
    )
    env = {**os.environ, "PYTHONPATH": str(site), "TRACER_LOADED": str(loaded)}
    return env, loaded


def test_the_command_line_loads_no_pydantic_plugin_and_the_library_does(
    make_run: MakeRun, tmp_path: Path
) -> None:
    store = make_run()
    env, loaded = _plugin_on_path(tmp_path)
    home = str(store.paths.home.root)
    for fast_path in ("1", "0"):  # `doctor` without typer, and through it
        subprocess.run(
            [sys.executable, "-m", "crew", "doctor", "--home", home],
            env={**env, "CREW_FAST": fast_path},
            capture_output=True,
            check=True,
        )
        assert not loaded.exists()
    subprocess.run([sys.executable, "-c", "import crew.models"], env=env, check=True)
    assert loaded.exists()  # the plugin is there to be found: `import crew` finds it


def test_only_the_loaders_one_name_is_stood_in_for(tmp_path: Path) -> None:
    """What the installed pydantic imports of its plugin loader is what crew/fast/no_plugins.py
    has; anything else asked of it brings the real loader back, which loads plugins."""
    import pydantic

    package = Path(pydantic.__file__).parent
    imported = {
        line.strip()
        for source in package.rglob("*.py")
        for line in source.read_text(encoding="utf-8").splitlines()
        if re.search(r"\b_loader import\b", line)
    }
    assert imported == {"from ._loader import get_plugins"}
    env, loaded = _plugin_on_path(tmp_path)
    program = (
        "import sys; from crew.fast import no_plugins; no_plugins.install(); "
        "assert no_plugins.PYDANTIC_ENTRY_POINT_GROUP == 'pydantic'; "
        "assert sys.modules[no_plugins.LOADER] is not no_plugins; import crew.models"
    )
    subprocess.run([sys.executable, "-c", program], env=env, check=True)
    assert loaded.exists()


def test_a_full_commands_collector_is_paused_for_its_start_up_and_runs_once_it_begins(
    make_run: MakeRun,
) -> None:
    """The start-up's objects are frozen, and the collector is on while the command runs (a
    leader runs for hours)."""
    store = make_run()
    program = (
        "import atexit, gc, sys; import crew.fast; seen = []; "
        "resume = crew.fast.resume_collector; "
        "crew.fast.resume_collector = lambda: (seen.append(gc.isenabled()), resume(), "
        "seen.append((gc.isenabled(), gc.get_freeze_count() > 0))); "
        "atexit.register(lambda: sys.stderr.write(repr(seen))); "
        f"crew.fast.main(['runs', '--json', '--home', {str(store.paths.home.root)!r}])"
    )
    done = subprocess.run(
        [sys.executable, "-c", program],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "CREW_FAST": "0"},
    )
    assert done.stderr == "[False, (True, True)]"


def test_the_crew_command_takes_the_fast_path_and_prints_the_same(make_run: MakeRun) -> None:
    store = make_run()
    start(store)
    crew = [sys.executable, "-m", "crew"]
    quick = subprocess.run(
        [*crew, "steer", "latest", "plan", "hi"], capture_output=True, text=True, check=False
    )
    env = {**os.environ, "CREW_FAST": "0"}
    full = subprocess.run(
        [*crew, "steer", "latest", "plan", "hi"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert quick.returncode == full.returncode == 0
    assert _normal(quick.stdout.encode()) == _normal(full.stdout.encode())
    assert [m.body for m in store.messages(Box.STEERING)] == ["hi", "hi"]
    assert store.load().clean


def test_tasks_in_every_live_status_take_a_steer(make_run: MakeRun) -> None:
    store = make_run()
    ask(store)  # waiting
    assert store.state().tasks["plan"].status is TaskStatus.WAITING
    assert fast.fast(["steer", "latest", "plan", "x", "--home", str(store.paths.home.root)]) == 0
    assert [m.body for m in store.messages(Box.STEERING)] == ["x"]


def test_a_leaders_liveness_is_judged_as_the_full_command_judges_it() -> None:
    from crew.procs import is_alive

    zombie = subprocess.Popen([sys.executable, "-c", "pass"])
    os.waitid(os.P_PID, zombie.pid, os.WEXITED | os.WNOWAIT)  # exited, not reaped: a zombie
    try:
        for pid in (os.getpid(), 1, zombie.pid, 2**22 + 7):
            assert people._alive(pid) == is_alive(pid), pid
    finally:
        zombie.wait()


class _Killed(BaseException):
    """Stands for a kill -9 between two writes: nothing after it runs."""


@pytest.mark.parametrize("killed_at", ["the mailbox line", "the task file", "the marker"])
def test_a_send_killed_after_its_event_is_completed_by_the_next_writer(
    make_run: MakeRun, monkeypatch: pytest.MonkeyPatch, killed_at: str
) -> None:
    store = make_run()
    ask(store)

    def killed(*args: object, **kwargs: object) -> None:
        raise _Killed

    if killed_at == "the mailbox line":
        real = runfiles.write_lines
        calls: list[int] = []

        def second_write_dies(fd: int, data: bytes, *, fsync: bool) -> int:
            calls.append(1)
            if len(calls) == 2:
                raise _Killed
            return real(fd, data, fsync=fsync)

        monkeypatch.setattr(committing, "write_lines", second_write_dies)
    else:
        method = "write_task" if killed_at == "the task file" else "write_marker"
        monkeypatch.setattr(runfiles.RunFiles, method, killed)
    with pytest.raises(_Killed):
        fast.fast(["respond", "latest", "plan", "Postgres", "--home", str(store.paths.home.root)])

    recovered = RunStore.open(store.paths.home, store.run_id)
    assert not recovered.load().clean  # the files lag the event log
    assert recovered.state().tasks["plan"].status is TaskStatus.RUNNING  # read from the log
    with change(recovered):  # the next writer completes the files
        pass
    assert recovered.load().clean
    assert [m.body for m in recovered.messages(Box.INBOX)] == ["Postgres"]
    assert json.loads((store.paths.root / "tasks" / "plan.json").read_text())["status"] == "running"


@pytest.mark.parametrize("killed_at", ["the snapshots", "the marker"])
def test_a_cancel_killed_after_its_events_is_completed_by_the_next_writer(
    make_run: MakeRun, monkeypatch: pytest.MonkeyPatch, killed_at: str
) -> None:
    store = make_run()
    start(store)

    def killed(*args: object, **kwargs: object) -> None:
        raise _Killed

    method = "write_task" if killed_at == "the snapshots" else "write_marker"
    monkeypatch.setattr(runfiles.RunFiles, method, killed)
    with pytest.raises(_Killed):
        fast.fast(["cancel", "latest", "--home", str(store.paths.home.root)])

    recovered = RunStore.open(store.paths.home, store.run_id)
    assert not recovered.load().clean  # the files lag the event log
    state = recovered.state()  # read from the log
    assert state.run.status is registry.RunStatus.CANCELLED
    assert {t.status for t in state.tasks.values()} == {TaskStatus.CANCELLED}
    with change(recovered):  # the next writer completes the files
        pass
    assert recovered.load().clean
    assert json.loads(store.paths.manifest.read_text())["status"] == "cancelled"


def test_a_cancel_whose_events_were_cut_short_never_happened(
    make_run: MakeRun, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its three events are one write; a write cut short after the first event leaves that
    event framed (`endSeq` names the third), so no reader takes it as history."""
    store = make_run()
    start(store)
    before = store.paths.events.read_bytes()
    real = committing.write_lines

    def cut_short(fd: int, data: bytes, *, fsync: bool) -> int:
        real(fd, data[: data.index(b"\n") + 1], fsync=fsync)
        raise _Killed

    monkeypatch.setattr(committing, "write_lines", cut_short)
    with pytest.raises(_Killed):
        fast.fast(["cancel", "latest", "--home", str(store.paths.home.root)])

    torn = store.paths.events.read_bytes()[len(before) :]
    assert torn.count(b"\n") == 1 and b'"endSeq":' in torn
    recovered = RunStore.open(store.paths.home, store.run_id)
    state = recovered.state()
    assert state.run.status is registry.RunStatus.RUNNING
    assert state.tasks["plan"].status is TaskStatus.RUNNING
    with change(recovered):  # the next writer sets the torn transaction aside, and says so
        pass
    after = store.paths.events.read_bytes()
    assert after.startswith(before) and b"task.cancelled" not in after
    assert torn in store.paths.events.with_name("events.jsonl.corrupt").read_bytes()
    assert recovered.load().clean


def test_fast_and_full_senders_at_once_lose_nothing(make_run: MakeRun) -> None:
    # Six shells sending at once, half of them with the fast path off: every message is written
    # once, the seqs stay unique, and the files end clean. A fast send that finds the lock busy
    # goes to the full command, which waits its turn.
    store = make_run(
        config(limits={"maxPendingSteers": 1000, "maxPendingFollowUps": 1000, "warnPending": 1000})
    )
    start(store)
    script = (
        "import subprocess, sys\n"
        "for n in range(4):\n"
        "    subprocess.run([sys.executable, '-m', 'crew', sys.argv[1], 'latest', 'plan',"
        " f'{sys.argv[2]}-{n}'], check=True, stdout=subprocess.DEVNULL)\n"
    )
    senders = [
        subprocess.Popen(
            [sys.executable, "-c", script, verb, f"s{index}"],
            env={**os.environ, "CREW_FAST": "0" if index % 2 else "1"},
        )
        for index, verb in enumerate(["steer", "follow-up"] * 3)
    ]
    assert [sender.wait(timeout=300) for sender in senders] == [0] * len(senders)

    bodies = [m.body for box in (Box.STEERING, Box.INBOX) for m in store.messages(box)]
    assert sorted(bodies) == sorted(f"s{i}-{n}" for i in range(6) for n in range(4))
    seqs = [e.seq for e in jsonl.read(store.paths.events, Event).records]
    assert seqs == list(range(1, len(seqs) + 1))
    assert store.load().clean


def test_fast_and_full_adds_at_once_add_each_task_once(make_run: MakeRun) -> None:
    # Six shells adding at once, half with the fast path off: three add four tasks each, their
    # ids made by crew, three add the same three tasks under keys. Each ends up once, under an
    # id of its own; every retry under a key is answered with its task.
    store = make_run()
    start(store)
    script = (
        "import subprocess, sys\n"
        "for n in range(int(sys.argv[2])):\n"
        "    key = ['--idempotency-key', f'k{n}'] if sys.argv[1] == 'keyed' else []\n"
        "    subprocess.run([sys.executable, '-m', 'crew', 'add', 'latest', f'{sys.argv[1]}-{n}',"
        " '--agent', 'coder', *key], check=True, stdout=subprocess.DEVNULL)\n"
    )
    adders = [
        subprocess.Popen(
            [sys.executable, "-c", script, *(("keyed", "3") if index < 3 else (f"a{index}", "4"))],
            env={**os.environ, "CREW_FAST": "0" if index % 2 else "1"},
        )
        for index in range(6)
    ]
    assert [adder.wait(timeout=300) for adder in adders] == [0] * len(adders)

    added = [t for t in store.state().task_list() if t.added_at is not None]
    assert sorted(t.prompt for t in added) == sorted(
        [f"keyed-{n}" for n in range(3)] + [f"a{i}-{n}" for i in range(3, 6) for n in range(4)]
    )
    assert len({t.id for t in added}) == len(added) == 15
    seqs = [e.seq for e in jsonl.read(store.paths.events, Event).records]
    assert seqs == list(range(1, len(seqs) + 1))
    assert store.load().clean


def test_senders_retrying_the_same_keys_at_once_send_each_once(make_run: MakeRun) -> None:
    # Four shells each send the same three keyed follow-ups at once, half with the fast path
    # off: each key is written once, every other try is replayed (exit 0), the seqs unique.
    store = make_run()
    start(store)
    script = (
        "import subprocess, sys\n"
        "for n in range(3):\n"
        "    subprocess.run([sys.executable, '-m', 'crew', 'follow-up', 'latest', 'plan',"
        " f'b{n}', '--idempotency-key', f'k{n}'], check=True, stdout=subprocess.DEVNULL)\n"
    )
    senders = [
        subprocess.Popen(
            [sys.executable, "-c", script], env={**os.environ, "CREW_FAST": str(index % 2)}
        )
        for index in range(4)
    ]
    assert [sender.wait(timeout=300) for sender in senders] == [0] * len(senders)

    sent = [((m.data or {}).get("idempotencyKey"), m.body) for m in store.messages(Box.INBOX)]
    assert sorted(sent) == [("k0", "b0"), ("k1", "b1"), ("k2", "b2")]
    seqs = [e.seq for e in jsonl.read(store.paths.events, Event).records]
    assert seqs == list(range(1, len(seqs) + 1))
    assert store.load().clean


def test_a_record_is_as_crew_writes_it_when_the_models_would_write_it_so(
    make_run: MakeRun,
) -> None:
    """crew/fast/shapes.py against the models: what they write fits; a field missing that they
    would write, one they lack, one out of order, a null, a value of another JSON type — each
    anywhere in the record — does not."""
    from crew.fast.shapes import as_crew_writes

    store = make_run()
    ask(store)
    state = store.state()
    tasks = [task.to_dict() for task in state.tasks.values()]
    assert any("contact" in task for task in tasks)  # a question, nested
    assert all(as_crew_writes(task, "task") for task in tasks)
    run = state.run.to_dict()
    assert as_crew_writes(run, "manifest")

    def without(record: dict[str, Any], *path: str) -> dict[str, Any]:
        copied = json.loads(json.dumps(record))
        *into, last = path
        node = copied
        for key in into:
            node = node[key]
        del node[last]
        return copied

    waiting = next(task for task in tasks if "contact" in task)
    assert not as_crew_writes(without(waiting, "failures"), "task")  # a default to fill in
    assert not as_crew_writes(without(waiting, "contact", "askedAt"), "task")
    assert as_crew_writes(without(waiting, "contact"), "task")  # may be null: left out
    assert not as_crew_writes(without(run, "config", "limits", "maxDepth"), "manifest")
    assert not as_crew_writes({**waiting, "later": 1}, "task")
    assert not as_crew_writes({"agent": waiting["agent"], **waiting}, "task")  # out of order
    assert not as_crew_writes({**waiting, "pid": None}, "task")
    assert not as_crew_writes({**waiting, "attempt": "1"}, "task")
    assert not as_crew_writes({**waiting, "attempt": True}, "task")
    assert not as_crew_writes({**waiting, "status": "asleep"}, "task")
    assert not as_crew_writes({**run, "crew": 5}, "manifest")
    agents = run["config"]["agents"]
    name = next(iter(agents))
    bad_agent = {**agents[name], "command": "not a list"}
    assert not as_crew_writes(
        {**run, "config": {**run["config"], "agents": {name: bad_agent}}}, "manifest"
    )


class _FullDisk:
    """`os` as crew/fast/runfiles.py sees it, on a disk with no room for an event line."""

    def __getattr__(self, name: str) -> object:
        return getattr(os, name)

    @staticmethod
    def write(fd: int, data: bytes) -> int:
        if data.startswith(b'{"id":"evt_'):
            raise OSError(errno.ENOSPC, "No space left on device")
        return os.write(fd, data)


@pytest.mark.parametrize("verb", ["steer", "follow-up"])
def test_an_event_that_does_not_fit_hands_the_command_over_having_written_nothing(
    make_run: MakeRun, monkeypatch: pytest.MonkeyPatch, verb: str
) -> None:
    """The full command then meets the full disk itself and says so, as it says it."""
    store = make_run()
    start(store)
    monkeypatch.setattr(runfiles, "os", _FullDisk())
    _refused(store, verb, "latest", "plan", "x")


def test_an_add_whose_event_does_not_fit_is_the_librarys_and_made_once(
    make_run: MakeRun, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = make_run()
    start(store)
    monkeypatch.setattr(runfiles, "os", _FullDisk())  # the fast path's writes only
    root = str(store.paths.home.root)

    assert fast.fast(["add", "latest", "more", "--agent", "coder", "-q", "--home", root]) == 0

    added = [t for t in store.state().tasks if t.startswith("coder-")]
    assert added == ["coder-1"]


@pytest.mark.parametrize("fast_path", ["1", "0"])
def test_a_command_started_with_its_streams_closed_has_dev_null_for_them(
    make_run: MakeRun, fast_path: str
) -> None:
    # Else the first file crew opens takes the closed stream's number (what is printed lands
    # in it), and printing raised an internal error.
    store = make_run()
    start(store)
    env = {**os.environ, "CREW_FAST": fast_path}
    closed = ["sh", "-c", 'exec "$@" <&- >&-', "sh", sys.executable, "-m", "crew"]

    sent = subprocess.run(
        [*closed, "steer", "latest", "plan", "hi"], capture_output=True, env=env, check=False
    )
    refused = subprocess.run(
        [*closed, "validate", "missing.toml"], capture_output=True, text=True, env=env, check=False
    )

    assert (sent.returncode, sent.stderr) == (0, b"")
    assert [m.body for m in store.messages(Box.STEERING)] == ["hi"]
    assert store.load().clean
    assert refused.returncode == 2
    assert refused.stderr.startswith("crew: error: missing.toml: no such file.\n")
    assert "Traceback" not in refused.stderr


def test_a_shell_completing_a_command_line_is_answered_by_the_full_command(
    make_run: MakeRun, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = make_run()
    start(store)
    before = snapshot_files(store.paths.root)
    monkeypatch.setenv("_CREW_COMPLETE", "bash_complete")
    monkeypatch.setenv("COMP_WORDS", "crew steer latest plan hi")

    assert fast.fast(["steer", "latest", "plan", "hi"]) is None
    assert snapshot_files(store.paths.root) == before


def test_a_lock_file_is_made_under_the_umask_both_ways(make_run: MakeRun) -> None:
    # filelock set the mode it was given despite the umask (0644 under 077), where the fast
    # path's open made it under the umask (0600), as crew makes every file (SPEC §2).
    store = make_run()
    lock = store.paths.root / ".lock"
    old = os.umask(0o077)
    try:
        lock.unlink(missing_ok=True)
        with store.lock():
            by_the_library = stat.S_IMODE(lock.stat().st_mode)
        lock.unlink(missing_ok=True)
        with runfiles.RunLock(str(store.paths.root)):
            by_the_fast_path = stat.S_IMODE(lock.stat().st_mode)
    finally:
        os.umask(old)
    assert by_the_library == by_the_fast_path == 0o600


def _broken_stdout(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The command with stdout a pipe whose reader has gone (`crew … | head -0`)."""
    read, write = os.pipe()
    os.close(read)
    try:
        return subprocess.run(
            [sys.executable, "-m", "crew", *args],
            stdout=write, stderr=subprocess.PIPE, text=True, env=env, check=False, timeout=60,
        )  # fmt: skip
    finally:
        os.close(write)


@pytest.mark.parametrize("fast_path", ["1", "0"])
def test_a_reader_gone_leaves_the_commands_exit_code_as_it_was(
    make_run: MakeRun, fast_path: str
) -> None:
    # The full command exited 1 (click caught the broken pipe before crew could), and the
    # fast path turned a wait that timed out (3) into 0.
    store = make_run()
    start(store)
    env = {**os.environ, "CREW_FAST": fast_path}
    waited = ["steer", "latest", "plan", "w", "--wait", "--timeout", "100ms"]
    intact = subprocess.run(
        [sys.executable, "-m", "crew", *waited], capture_output=True, env=env, check=False
    )

    sent = _broken_stdout(["steer", "latest", "plan", "hi"], env)
    timed_out = _broken_stdout([*waited[:3], "w2", *waited[4:]], env)
    shown = _broken_stdout(["events", "latest"], env)

    assert (sent.returncode, sent.stderr) == (0, "")
    assert intact.returncode == timed_out.returncode == 3
    assert "crew: error: " in timed_out.stderr and "Traceback" not in timed_out.stderr
    assert (shown.returncode, shown.stderr) == (0, "")
    assert [m.body for m in store.messages(Box.STEERING)] == ["w", "hi", "w2"]
