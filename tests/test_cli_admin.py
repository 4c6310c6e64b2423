"""init, doctor, schema — and the error boundary of the command line."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import SESSION, CliResult, snapshot_files
from leaders import Leader, eventually, store_of, write_crew
from test_verbs import start

from crew import verbs
from crew.domain import change, tasks
from crew.paths import Home
from crew.registry import Box, TaskStatus
from crew.schemas import SCHEMAS
from crew.store import jsonl, pin
from crew.store.runstore import RunStore

Cli = Callable[..., CliResult]
MakeRun = Callable[..., RunStore]


def test_init_creates_a_home_and_leaves_an_existing_one_untouched(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CREW_HOME")
    project = tmp_path / "project"
    project.mkdir()

    result = cli("init", str(project))

    home = project / ".crew"
    assert result.code == 0 and f"Created {home}" in result.out
    assert (home / "crew.toml").read_text().startswith("# crew.toml")
    assert (home / "state" / ".gitignore").read_text().count(".runtime/") == 1
    assert "*.jsonl merge=union" in (home / "state" / ".gitattributes").read_text()
    assert (home / "state").stat().st_mode & 0o777 == 0o700

    (home / "crew.toml").write_text("# mine\n")
    again = cli("init", str(project))
    assert again == CliResult(0, "", f"crew: {home} already exists; left it untouched.\n")
    assert (home / "crew.toml").read_text() == "# mine\n"


def test_init_of_a_home_without_its_crew_toml_writes_only_that(cli: Cli, tmp_path: Path) -> None:
    # `crew run` in a .crew without crew.toml says "Create one with `crew init`", and `crew
    # init` left the home untouched: the hint went round in a circle.
    home = tmp_path / ".crew"
    (home / "state").mkdir(parents=True)
    (home / "state" / "keep").write_text("mine\n")

    result = cli("init", str(tmp_path))

    assert result.code == 0, result.err
    assert result.err == f"crew: {home} already exists; wrote the crew.toml it lacked.\n"
    assert "crew.toml   the crew definition" in result.out
    assert (home / "crew.toml").read_text().startswith("# crew.toml")
    assert sorted(p.name for p in (home / "state").iterdir()) == ["keep"]


def test_init_without_a_folder_uses_crew_home(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "custom-home"
    monkeypatch.setenv("CREW_HOME", str(target))

    assert cli("init").code == 0
    assert (target / "crew.toml").is_file()


def test_init_json(cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CREW_HOME")
    result = json.loads(cli("init", "--json").out)
    home = tmp_path / ".crew"
    config = str(home / "crew.toml")
    assert result == {"home": str(home), "config": config, "created": False, "wroteConfig": True}


def test_schema_prints_every_format_or_one(cli: Cli) -> None:
    everything = json.loads(cli("schema").out)
    assert list(everything) == list(SCHEMAS)

    task = json.loads(cli("schema", "task").out)
    assert task["title"] == "task"
    assert "waitingSince" in task["properties"] and "waiting_since" not in task["properties"]
    statuses = task["$defs"]["TaskStatus"]["enum"]
    assert statuses == [s.value for s in TaskStatus]

    config = json.loads(cli("schema", "config").out)
    assert "autoRespond" in config["properties"]

    unknown = cli("schema", "nope")
    assert unknown.code == 2
    assert unknown.err == (
        "crew: error: Unknown schema 'nope': expected one of "
        "manifest, tasks, task, event, message, change, contact, checkpoint, leader, config.\n"
    )


def _damage(store: RunStore) -> None:
    with store.paths.events.open("ab") as handle:
        handle.write(b"not json at all\n")
    with change(store) as txn:
        tasks.transition(txn, "plan", TaskStatus.RUNNING)
    (store.paths.mailbox_dir / "inbox.jsonl").write_bytes(b'{"id": "msg_1", "truncated')
    store.paths.manifest.write_text('{"runId": ')


def test_doctor_finds_repairs_and_then_finds_nothing(cli: Cli, make_run: MakeRun) -> None:
    store = make_run()
    _damage(store)

    found = cli("doctor")
    assert found.code == 1
    assert f"{store.paths.events}:4: " in found.out
    assert f"{store.paths.mailbox_dir / 'inbox.jsonl'}:1: torn tail" in found.out
    assert f"{store.paths.manifest}: corrupt snapshot" in found.out
    assert "Run `crew doctor --repair` to fix what can be fixed." in found.out

    repaired = cli("doctor", "--repair")
    assert repaired.code == 0, repaired.out
    assert repaired.out.count("[repaired]") == 3

    assert cli("doctor") == CliResult(0, "Checked 1 run: no problems found.\n", "")
    assert store.state().tasks["plan"].status is TaskStatus.RUNNING
    assert b"not json at all" in store.paths.events.with_name("events.jsonl.corrupt").read_bytes()
    assert len(list(store.paths.root.glob("manifest.json.corrupt-*"))) == 1


def _planted(store: RunStore, box: Box, line: dict[str, object]) -> None:
    with store.paths.box(box).open("a") as handle:
        handle.write(json.dumps(line) + "\n")


_STRAYS: dict[str, Callable[[RunStore], tuple[Box, str]]] = {
    "a message no command sent": lambda store: (Box.STEERING, "msg_00000000000000aa"),
    "a change of a message never sent": lambda store: (Box.INBOX, "msg_00000000000000bb"),
    "a message copied from another file": lambda store: (Box.STEERING, "copied"),
}


@pytest.mark.parametrize("stray", _STRAYS)
def test_doctor_finds_mailbox_lines_the_log_does_not_record_and_sets_them_aside(
    cli: Cli, make_run: MakeRun, stray: str
) -> None:
    # A line no crew command wrote (a hand edit, a merge, a copy) was shown, counted as
    # pending and delivered, and `crew doctor` called the run clean.
    store = make_run()
    start(store)
    verbs.steer(store, "plan", "sent", session=SESSION)
    verbs.follow_up(store, "plan", "queued", session=SESSION)
    (sent,) = store.messages(Box.STEERING)
    (queued,) = store.messages(Box.INBOX)
    box, message_id = _STRAYS[stray](store)
    if stray == "a message no command sent":
        line = {**sent.to_dict(), "id": message_id, "body": "planted"}
    elif stray == "a change of a message never sent":
        line = {"id": message_id, "kind": "followUp", "taskId": "plan", "status": "delivered"}
    else:
        line, message_id = queued.to_dict(), queued.id  # the inbox's message, in steering
    _planted(store, box, line)
    kept = {b: store.paths.box(b).read_bytes() for b in Box}

    for _ in range(2):  # a reader does not mark the files checked: the next one warns too
        shown = cli("status", store.run_id)
        assert shown.code == 0
        assert f"{box.value}.jsonl holds 1 message(s) that events.jsonl does not" in shown.out
        assert message_id in shown.out
    found = cli("doctor", store.run_id)
    repaired = cli("doctor", store.run_id, "--repair")

    assert found.code == 1
    assert f"{store.paths.box(box)}: lines of 1 message(s) that events.jsonl" in found.out
    assert repaired.code == 0 and "[repaired]" in repaired.out
    aside = store.paths.box(box).with_name(f"{box.value}.jsonl.corrupt")
    assert json.loads(aside.read_bytes()) == line
    assert store.paths.box(box).read_bytes() + aside.read_bytes() == kept[box]
    assert cli("doctor", store.run_id) == CliResult(0, "Checked 1 run: no problems found.\n", "")
    assert "events.jsonl does not" not in cli("status", store.run_id).out
    fresh = RunStore(store.paths)
    assert [m.body for m in fresh.messages(Box.STEERING)] == ["sent"]
    assert [m.body for m in fresh.messages(Box.INBOX)] == ["queued"]


HOLDER = """
import sys
from crew.worker import Worker

worker = Worker.from_env()
if worker.task_id == "first":
    worker.ask("go on?")  # holds `then` back until answered
    sys.exit(0)
worker.begin(sys.argv[1])
while (item := worker.next(timeout=2)) is not None:
    print("got", item.body, flush=True)
worker.done()
"""


def test_a_live_leader_never_delivers_a_message_a_repair_set_aside(
    cli: Cli, tmp_path: Path, home: Home
) -> None:
    # The leader kept what it had read of the file: the line set aside was delivered anyway,
    # acknowledged, and its changes written after it, so doctor then called the run clean.
    holder = tmp_path / "holder.py"
    holder.write_text(HOLDER)
    tasks = [
        {"id": "first", "prompt": "hold"},
        {"id": "then", "prompt": "go", "dependsOn": ["first"]},
    ]
    write_crew(tmp_path, tasks, command=["{python}", str(holder), "{prompt}"])
    leader = Leader("run", "crew.toml", cwd=tmp_path)
    store = store_of(home, leader.run_id)
    eventually(lambda: store.state().tasks["first"].contact, timeout=20)
    sent = verbs.follow_up(store, "then", "real", session=SESSION).message
    _planted(store, Box.INBOX, {**sent.to_dict(), "id": "msg_00000000000000aa", "body": "STRAY"})
    eventually(lambda: RunStore(store.paths).load().clean)  # the leader has read it

    assert cli("doctor", store.run_id, "--repair").code == 0
    assert cli("respond", store.run_id, "first", "yes").code == 0
    assert leader.finish() == 0, leader.err

    log = store.paths.log("then").read_text()
    assert "got real" in log and "STRAY" not in log
    assert "msg_00000000000000aa" not in store.paths.events.read_text()


def test_a_task_file_of_no_task_of_the_log_is_set_aside_by_a_repair(
    cli: Cli, make_run: MakeRun
) -> None:
    # Counted against the marker, it sent every command to a full check, for good: a repair
    # rewrote the task files and left it there ("[repaired]", and the same finding after).
    store = make_run()
    start(store)
    stray = store.paths.tasks_dir / "zz.json"
    copy = json.loads(store.paths.task_file("plan").read_bytes())
    stray.write_text(json.dumps({**copy, "id": "zz"}, indent=2) + "\n")

    found = cli("doctor", store.run_id)
    repaired = cli("doctor", store.run_id, "--repair")

    assert found.code == 1 and "disagree" in found.out
    assert repaired.code == 0 and "[repaired]" in repaired.out
    assert not stray.exists() and len(list(store.paths.tasks_dir.glob("zz.json.corrupt-*"))) == 1
    assert cli("doctor", store.run_id) == CliResult(0, "Checked 1 run: no problems found.\n", "")
    assert RunStore(store.paths).load().clean  # the marker's count holds again


def test_a_message_whose_event_is_lost_is_kept_by_a_repair(cli: Cli, make_run: MakeRun) -> None:
    # The log skips the seq of the event that recorded it (bad, then set aside): its mailbox
    # line is then the only record of a message a command accepted, no stray.
    store = make_run()
    start(store)
    verbs.steer(store, "plan", "sent", session=SESSION)
    verbs.follow_up(store, "plan", "after", session=SESSION)
    lines = store.paths.events.read_bytes().splitlines(keepends=True)
    (at,) = [i for i, line in enumerate(lines) if b'"body":"sent"' in line]
    lines[at] = b"x" * (len(lines[at]) - 1) + b"\n"
    store.paths.events.write_bytes(b"".join(lines))

    found = cli("doctor", store.run_id)
    repaired = cli("doctor", store.run_id, "--repair")

    assert found.code == 1 and f"{store.paths.events}:{at + 1}: " in found.out
    assert "does not record" not in found.out + repaired.out
    assert [m.body for m in RunStore(store.paths).messages(Box.STEERING)] == ["sent"]
    assert [m.body for m in RunStore(store.paths).messages(Box.INBOX)] == ["after"]


def test_doctor_finds_the_temp_files_of_every_folder_crew_writes_one_in(
    cli: Cli, make_run: MakeRun
) -> None:
    # A repair rewrites a mailbox file through a temp file beside it, and a task's spare is
    # filled in .runtime/tasks/: a writer killed there left files doctor never reported.
    store = make_run()
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True)  # fmt: skip
    pid = int(gone.stdout)
    store.paths.task_twins_dir.mkdir(parents=True, exist_ok=True)
    temps = [
        store.paths.mailbox_dir / f".steering.jsonl.{pid}.0a1b2c3d.tmp",
        store.paths.task_twins_dir / f".plan.json.{pid}.0a1b2c3d.tmp",
        store.paths.root / ".tasks.json.\u00b2.0a1b2c3d.tmp",  # no pid (int() refuses '²')
    ]
    for temp in temps:
        temp.write_text("{")
    named_so = store.paths.root / f".folder.{pid}.0a1b2c3d.tmp"
    named_so.mkdir()  # no temp file crew wrote: left alone

    found = cli("doctor", store.run_id)
    assert found.code == 1
    assert [line for line in found.out.splitlines() if "leftover temp file" in line] == [
        f"{temp}: leftover temp file of an interrupted write" for temp in sorted(temps)
    ]
    assert cli("doctor", store.run_id, "--repair").code == 0
    assert not any(temp.exists() for temp in temps) and named_so.is_dir()
    assert cli("doctor", store.run_id).code == 0


def test_doctor_repairs_a_run_whose_mailbox_folder_is_gone(cli: Cli, make_run: MakeRun) -> None:
    # The examination said to repair; the repair stopped at "No such file or directory".
    store = make_run()
    start(store)
    verbs.steer(store, "plan", "hello", session=SESSION)
    shutil.rmtree(store.paths.mailbox_dir)

    assert cli("doctor", store.run_id).code == 1
    repaired = cli("doctor", store.run_id, "--repair")

    assert repaired.code == 0, repaired.err
    assert [m.body for m in store.messages(Box.STEERING)] == ["hello"]
    assert cli("doctor", store.run_id).code == 0


@pytest.mark.parametrize("command", [("doctor",), ("status",), ("events",)])
def test_a_folder_where_the_event_log_is_is_named(
    cli: Cli, make_run: MakeRun, command: tuple[str, ...]
) -> None:
    # doctor said "Is a directory: a file of the crew home." (its pin read the folder's end).
    store = make_run()
    store.paths.events.unlink()
    store.paths.events.mkdir()

    result = cli(*command, store.run_id)

    assert result.code == 1
    if command == ("doctor",):  # a finding of the run's (the examination goes on to others)
        assert f"{store.run_id}: Is a directory: {store.paths.events}. [needs" in result.out
    else:
        assert result.err.startswith(f"crew: error: Is a directory: {store.paths.events}.\n")


def test_doctor_json_lists_findings_with_file_and_line(cli: Cli, make_run: MakeRun) -> None:
    store = make_run()
    with store.paths.events.open("ab") as handle:
        handle.write(b"{}\n")

    result = cli("doctor", store.run_id, "--json")

    assert result.code == 1
    report = json.loads(result.out)
    assert report["clean"] is False and report["runs"] == [store.run_id]
    assert report["findings"][0]["file"] == str(store.paths.events)
    assert report["findings"][0]["line"] == 4
    assert report["findings"][0]["repairable"] is True


def test_doctor_reports_a_stale_leader_it_cannot_repair(cli: Cli, make_run: MakeRun) -> None:
    store = make_run()
    store.paths.leader.write_text(
        json.dumps(
            {
                "pid": 2**22 + 12345,  # beyond pid_max on most systems: surely gone
                "host": os.uname().nodename,
                "session": "x",
                "epoch": 1,
                "startedAt": "2026-11-30T03:41:00.123456Z",
                "heartbeatAt": "2026-11-30T03:41:00.123456Z",
            }
        )
    )

    result = cli("doctor", "--repair")

    assert result.code == 1
    assert "its leader is gone" in result.out and f"crew resume {store.run_id}" in result.out
    assert "[needs attention]" in result.out


def test_doctor_on_a_healthy_home_changes_nothing(cli: Cli, make_run: MakeRun, home: Home) -> None:
    make_run()
    before = snapshot_files(home.root)

    assert cli("doctor", "--repair").code == 0
    assert snapshot_files(home.root) == before


def test_doctor_sets_aside_a_half_created_run(cli: Cli, home: Home) -> None:
    (home.runs_dir / ".new-20261130-034100-7f3a").mkdir(parents=True)

    assert cli("doctor").code == 1
    assert cli("doctor", "--repair").code == 0
    assert cli("doctor").code == 0
    assert (home.runs_dir / ".new-20261130-034100-7f3a.corrupt").is_dir()


def _crew(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "crew", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        check=False,
    )


def test_python_dash_m_crew_and_the_console_script_work() -> None:
    from crew import __version__

    assert _crew("--version").stdout == f"crew {__version__}\n"
    script = Path(sys.executable).with_name("crew")
    completed = subprocess.run([script, "--version"], capture_output=True, text=True, check=False)
    assert completed.stdout == f"crew {__version__}\n"


def test_errors_have_no_traceback_unless_crew_debug_is_set(make_run: MakeRun) -> None:
    store = make_run()
    store.paths.manifest.write_text("{")
    store.paths.events.write_text("junk\n")

    quiet = _crew("status")
    assert quiet.returncode == 1
    assert quiet.stderr.startswith(f"crew: error: Run {store.run_id} has no readable state")
    assert "Traceback" not in quiet.stderr

    loud = _crew("status", env={"CREW_DEBUG": "1"})
    assert "Traceback" in loud.stderr


def test_usage_errors_exit_2(cli: Cli) -> None:
    result = cli("status", "--bogus")

    assert result.code == 2
    assert result.err.startswith("crew: error: No such option: --bogus")


def test_the_generated_docs_are_up_to_date() -> None:
    from crew.docgen import main

    assert main(["--check"]) == 0, "run `make docs` and commit the result"


def test_an_event_carrying_invalid_state_is_a_bad_line_not_an_internal_error(
    cli: Cli, make_run: Callable[..., RunStore]
) -> None:
    store = make_run()
    with change(store) as txn:
        tasks.transition(txn, "plan", TaskStatus.RUNNING, attempt=1, started_at=txn.at)
    last = json.loads(store.paths.events.read_bytes().splitlines()[-1])
    bad = {**last, "id": "evt_bad", "seq": last["seq"] + 1, "data": {"task": {"id": "plan"}}}
    with store.paths.events.open("a") as handle:
        handle.write(json.dumps(bad) + "\n")
    store.paths.applied.unlink()  # as in a clone: the whole log is checked

    assert cli("status", store.run_id).code == 0
    assert cli("steer", store.run_id, "plan", "go on").code == 0
    found = cli("doctor", store.run_id)
    assert found.code == 1 and "events.jsonl:" in found.out
    assert "data.task is not valid (agent: Field required)" in found.out
    assert cli("doctor", store.run_id, "--repair").code == 0
    assert cli("doctor", store.run_id).code == 0


def test_doctor_reads_a_run_without_holding_its_lock(make_run: MakeRun) -> None:
    """However long doctor reads (here: stopped in the middle of reading events.jsonl), the
    run's writers are not held up, and what they write meanwhile is no finding."""
    store = make_run()
    reading = subprocess.Popen(
        [sys.executable, "-m", "crew", "doctor", store.run_id],
        env={**os.environ, "CREW_FAULT": "stop:read:events.jsonl"},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        eventually(lambda: _process_state(reading.pid) == "T")
        sent = _crew("follow-up", store.run_id, "plan", "more", env={"CREW_LOCK_TIMEOUT": "1"})
    finally:
        reading.send_signal(signal.SIGCONT)
        out, err = reading.communicate(timeout=30)

    assert sent.returncode == 0, sent.stderr
    assert (reading.returncode, out, err) == (0, "Checked 1 run: no problems found.\n", "")
    assert [m.body for m in store.messages(Box.INBOX)] == ["more"]


def test_a_pin_does_not_hold_once_a_log_is_rewritten(make_run: MakeRun) -> None:
    store = make_run()
    with store.lock():
        pinned = pin.take(store.paths)
    with change(store) as txn:
        tasks.transition(txn, "plan", TaskStatus.RUNNING)
    assert pin.holds(pinned)  # appended to: what was pinned is still there

    with store.lock():
        pinned = pin.take(store.paths)
    jsonl.set_aside_last(store.paths.events, 1)
    assert not pin.holds(pinned)


def _process_state(pid: int) -> str:
    """The state letter of a process (`T`: stopped)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat[stat.rindex(")") + 2]


def test_an_event_carrying_invalid_state_after_the_snapshots_is_a_clear_error(
    cli: Cli, make_run: MakeRun
) -> None:
    store = make_run()
    last = json.loads(store.paths.events.read_bytes().splitlines()[-1])
    bad = {**last, "id": "evt_bad", "seq": last["seq"] + 1, "data": {"run": {"runId": "x"}}}
    with store.paths.events.open("a") as handle:
        handle.write(json.dumps(bad) + "\n")

    shown = cli("status", store.run_id)
    assert shown.code == 1 and shown.out == ""
    assert shown.err.startswith(f"crew: error: Event {bad['seq']} of events.jsonl carries invalid")
    assert "`crew doctor --repair` sets the line aside." in shown.err
    assert cli("doctor", store.run_id, "--repair").code == 0
    assert cli("status", store.run_id).code == 0
