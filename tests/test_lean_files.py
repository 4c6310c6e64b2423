"""Lean files: a message's change records only what changed, runs made by an older crew (whole
status lines, an absolute crewDir) still read, and crewDir is relative to the home."""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import SESSION
from test_run_state import steer

from crew.domain import change, mailbox, tasks
from crew.models import MailboxMessage
from crew.paths import Home
from crew.registry import (
    Box,
    EventType,
    MessageStatus,
    TaskStatus,
)
from crew.store import jsonl, mailfile
from crew.store.pending import PendingIndex
from crew.store.runstore import RunStore

MakeRun = Callable[..., RunStore]
FIXTURE = Path(__file__).parent / "fixtures" / "old-format-run"
OLD_RUN = "20261130-223222-0a1f"
BODY = "a steer whose body must be written once: " + "x" * 4000


def _through_its_life(store: RunStore) -> MailboxMessage:
    """A steer sent, delivered, acknowledged (each in a transaction of its own)."""
    with change(store) as txn:
        tasks.transition(txn, "plan", TaskStatus.RUNNING, attempt=1)
        sent = mailbox.post(txn, steer(store, "plan", BODY, txn.at), EventType.AGENT_STEERED)
    with change(store) as txn:
        mailbox.deliver(txn, [sent], attempt=1)
    with change(store) as txn:
        acknowledged = mailbox.acknowledge(txn, "plan", sent.id)
    assert acknowledged is not None
    return acknowledged


def test_a_status_change_never_writes_the_body_again(make_run: MakeRun) -> None:
    store = make_run()
    message = _through_its_life(store)

    steering = store.paths.box(Box.STEERING).read_bytes()
    events = store.paths.events.read_bytes()
    assert steering.count(BODY.encode()) == 1
    assert events.count(BODY.encode()) == 1
    lines = [json.loads(line) for line in steering.splitlines()]
    assert [line["status"] for line in lines] == ["pending", "delivered", "acknowledged"]
    assert all("body" not in line for line in lines[1:])
    assert lines[2] == {
        "id": message.id,
        "kind": "steer",
        "taskId": "plan",
        "status": "acknowledged",
        "acknowledgedAt": message.acknowledged_at,
    }
    # The event that records the change carries the same line.
    acked = [e for e in store.events().records if e.type is EventType.MAILBOX_ACKNOWLEDGED]
    assert acked[0].data is not None and acked[0].data["mailboxMessage"] == lines[2]


def test_change_lines_fold_to_the_state_whole_lines_fold_to(make_run: MakeRun) -> None:
    store = make_run()
    message = _through_its_life(store)
    with change(store) as txn:  # carried to a next attempt: times cleared, back to pending
        current = mailbox.inbound(txn, message.id)
        assert current is not None
        txn.record(
            EventType.MAILBOX_CARRIED,
            mail=current.model_copy(
                update={"status": MessageStatus.PENDING, "delivered_at": None, "data": {"x": 1}}
            ),
            was=current,
        )

    folded = RunStore(store.paths).fold(Box.STEERING)[message.id]
    assert folded.status is MessageStatus.PENDING
    assert folded.delivered_at is None and folded.acknowledged_at == message.acknowledged_at
    assert folded.body == BODY and folded.data == {"x": 1}
    last = json.loads(store.paths.box(Box.STEERING).read_bytes().splitlines()[-1])
    assert last["deliveredAt"] is None  # cleared, said as null
    # Whole lines of the same states (as an older crew wrote them) fold alike.
    history = RunStore(store.paths).history(Box.STEERING)
    assert [m.status for m in history] == ["pending", "delivered", "acknowledged", "pending"]
    assert mailfile.fold(history) == RunStore(store.paths).fold(Box.STEERING)
    # The pending index (the fast path's) reads change lines too.
    index = PendingIndex(str(store.paths.box(Box.STEERING)), str(store.paths.runtime_dir / "i"))
    assert index.current(save=False) == {message.id: ("plan", "steer")}


def test_a_change_line_lost_after_its_event_is_rewritten_as_a_change(
    make_run: MakeRun, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = make_run()
    with change(store) as txn:
        tasks.transition(txn, "plan", TaskStatus.RUNNING, attempt=1)
        sent = mailbox.post(txn, steer(store, "plan", BODY, txn.at), EventType.AGENT_STEERED)
    real_append = jsonl.append
    calls = {"n": 0}

    class Crash(Exception):
        pass

    def append_then_die(path: Path, lines: list[bytes], **kw: bool) -> int:
        calls["n"] += 1
        if calls["n"] > 1:  # the events go through, the mailbox line does not
            raise Crash
        return real_append(path, lines)

    monkeypatch.setattr(jsonl, "append", append_then_die)
    with pytest.raises(Crash), change(store) as txn:
        mailbox.deliver(txn, [sent], attempt=1)
    monkeypatch.undo()

    assert RunStore(store.paths).fold(Box.STEERING)[sent.id].status is MessageStatus.PENDING
    with change(store) as txn:
        assert any("steering.jsonl" in r for r in txn.repairs)
    steering = store.paths.box(Box.STEERING).read_bytes()
    assert steering.count(BODY.encode()) == 1
    assert RunStore(store.paths).fold(Box.STEERING)[sent.id].status is MessageStatus.DELIVERED
    assert RunStore(store.paths).load().clean


def test_a_mailbox_file_cut_before_a_message_gets_it_back_whole(make_run: MakeRun) -> None:
    store = make_run()
    message = _through_its_life(store)
    path = store.paths.box(Box.STEERING)
    path.write_bytes(b"".join(path.read_bytes().splitlines(keepends=True)[1:]))  # no first line

    fresh = RunStore(store.paths)
    assert message.id not in fresh.fold(Box.STEERING)  # a change with nothing to merge into
    assert any("steering.jsonl lacks" in w for w in fresh.load().warnings())
    with change(fresh) as txn:
        assert txn.repairs

    assert RunStore(store.paths).fold(Box.STEERING)[message.id] == message
    assert RunStore(store.paths).load().clean


# ----------------------------------------------------------------- a run an older crew made


@pytest.fixture
def old_run(home: Home) -> RunStore:
    """The fixture run (made by crew before lean files): whole status lines, absolute crewDir."""
    home.runs_dir.mkdir(parents=True, exist_ok=True)
    shutil.copytree(FIXTURE / OLD_RUN, home.runs_dir / OLD_RUN)
    return RunStore(home.run(OLD_RUN))


def test_a_run_an_older_crew_made_reads_as_it_did(old_run: RunStore) -> None:
    recovery = old_run.load()
    assert not (recovery.mismatch or recovery.gaps or recovery.broken), recovery.warnings()
    assert old_run.state().tasks["work"].status is TaskStatus.COMPLETED
    inbound = {m.body: m.status for b in (Box.INBOX, Box.STEERING) for m in old_run.messages(b)}
    assert inbound == {
        "8080": MessageStatus.ACKNOWLEDGED,
        "the follow-up body": MessageStatus.ACKNOWLEDGED,
        "first steer body": MessageStatus.ACKNOWLEDGED,
    }
    assert [m.body for m in old_run.messages(Box.OUTBOX)] == [
        "started",
        "which port?",
        "using 8080",
    ]
    assert len(old_run.history(Box.STEERING)) == 3
    assert old_run.state().run.crew_dir == "/tmp/lean-old/proj/.crew"  # absolute, as written
    assert old_run.paths.home.crew_dir(old_run.state().run.crew_dir) == Path(
        "/tmp/lean-old/proj/.crew"
    )


def test_a_change_to_a_run_an_older_crew_made_appends_a_change_line(old_run: RunStore) -> None:
    with change(old_run) as txn:
        message = next(iter(txn.messages(Box.STEERING).values()))
        mailbox.reject(txn, message, "a test")  # not a rule: the line is what is looked at

    last = json.loads(old_run.paths.box(Box.STEERING).read_bytes().splitlines()[-1])
    assert "body" not in last and last["status"] == "rejected" and last["reason"] == "a test"
    folded = RunStore(old_run.paths).fold(Box.STEERING)[message.id]
    assert folded.body == "first steer body" and folded.status is MessageStatus.REJECTED


def test_crew_reads_an_older_crews_run_through_the_cli(old_run: RunStore, tmp_path: Path) -> None:
    import subprocess

    def crew(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "crew", *args], capture_output=True, text=True, check=False
        )

    shown = crew("mailbox", OLD_RUN, "--json")
    assert shown.returncode == 0, shown.stderr
    statuses = {m["body"]: m["status"] for m in json.loads(shown.stdout)}
    assert statuses["first steer body"] == "acknowledged"
    doctor = crew("doctor", OLD_RUN)
    assert doctor.returncode == 0 and "no problems" in doctor.stdout


# ----------------------------------------------------------------- crewDir


def test_crew_dir_is_recorded_relative_to_the_home(make_run: MakeRun, home: Home) -> None:
    store = make_run()  # crew.toml's folder: the folder that holds the home
    recorded = json.loads(store.paths.manifest.read_text())["crewDir"]
    assert recorded == ".."
    assert home.crew_dir(recorded) == home.root.resolve().parent
    assert home.relative(home.root) == "."
    assert home.crew_dir(".") == home.root.resolve()


def test_a_run_s_files_do_not_name_the_checkout(tmp_path: Path) -> None:
    """The worker still gets the folder whole in `{crewDir}`; the files hold it relative."""
    import subprocess

    home = tmp_path / ".crew"
    (home / "crew.toml").write_text(
        '[crew]\nname = "where"\n'
        '[agents.sh]\ncommand = ["sh", "-c", "echo dir={crewDir}", "x"]\ninput = "text"\n'
        '[[tasks]]\nid = "t"\nagent = "sh"\nprompt = "p"\n'
    )
    run = subprocess.run(
        [sys.executable, "-m", "crew", "run"], capture_output=True, text=True, check=False
    )
    assert run.returncode == 0, run.stderr
    (root,) = (home / "state" / "runs").iterdir()
    assert json.loads((root / "manifest.json").read_text())["crewDir"] == "."
    assert (root / "logs" / "t.log").read_text() == f"dir={home.resolve()}\n"
    for path in root.rglob("*"):
        if path.is_file() and not {".runtime", "logs"} & set(path.parts):  # a log: what it said
            assert str(tmp_path) not in path.read_text(errors="replace"), path
    assert SESSION  # the run is the test session's


# ----------------------------------------------------------------- progress lines


def test_a_long_progress_line_is_kept_as_an_excerpt_and_whole_in_the_log(tmp_path: Path) -> None:
    import subprocess

    home = tmp_path / ".crew"
    line = "step 1: " + "y" * 5000
    (home / "crew.toml").write_text(
        '[crew]\nname = "long"\n'
        '[agents.py]\ncommand = ["python3", "-c", '
        "\"print('@supervisor progress: step 1: ' + 'y' * 5000)\"]\n"
        'input = "text"\n[[tasks]]\nid = "t"\nagent = "py"\nprompt = "p"\n'
    )
    run = subprocess.run(
        [sys.executable, "-m", "crew", "run"], capture_output=True, text=True, check=False
    )
    assert run.returncode == 0, run.stderr
    (root,) = (home / "state" / "runs").iterdir()
    assert line in (root / "logs" / "t.log").read_text()
    (report,) = [
        json.loads(x) for x in (root / "mailbox" / "outbox.jsonl").read_text().splitlines()
    ]
    assert report["body"] == line[: mailbox.PROGRESS_EXCERPT - 1] + "…"
    assert report["data"] == {"type": "progress", "length": len(line)}
    assert "y" * 1000 not in (root / "events.jsonl").read_text()
