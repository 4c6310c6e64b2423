"""`[[notify]]`: commands the leader runs for events, with real leaders, workers and commands."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import SESSION, config, snapshot_files
from leaders import Leader, eventually, store_of, toml_value, write_crew

from crew import verbs
from crew.leader import notify
from crew.leader.view import RunView
from crew.models import Event
from crew.paths import Home
from crew.registry import EventType, MessageKind, RunStatus
from crew.store import jsonl
from crew.store.runstore import RunStore

PROBE = Path(__file__).parent / "workers" / "notify_probe.py"


def add_notify(crew_toml: Path, **entry: Any) -> None:
    """Append a `[[notify]]` entry to crew.toml."""
    lines = ["", "[[notify]]", *(f"{k} = {toml_value(v)}" for k, v in entry.items())]
    crew_toml.write_text(crew_toml.read_text() + "\n".join(lines) + "\n")


def probes(folder: Path) -> list[dict[str, Any]]:
    """What the probe commands saved, one document per command run, in event order."""
    found = [json.loads(p.read_text()) for p in folder.glob("*.json")]
    return sorted(found, key=lambda f: json.loads(f["stdin"])["seq"])


def events_of(store: RunStore, kind: EventType | None = None) -> list[Event]:
    events = jsonl.read(store.paths.events, Event).records
    return [e for e in events if kind is None or e.type is kind]


def crew(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "crew", *args], capture_output=True, text=True, check=False
    )


def test_a_contact_reaches_the_command_as_the_json_crew_events_prints(
    tmp_path: Path, home: Home
) -> None:
    saved = tmp_path / "probes"
    saved.mkdir()
    crew_toml = write_crew(tmp_path, [{"id": "plan", "prompt": "ask:need_input:Which db? ; read"}])
    add_notify(crew_toml, on="contact", command=[sys.executable, str(PROBE), str(saved)])
    leader = Leader("run", "crew.toml", cwd=tmp_path)
    store = store_of(home, leader.run_id)

    (probe,) = eventually(lambda: probes(saved), timeout=30)
    (contact,) = events_of(store, EventType.SUPERVISOR_CONTACT)
    printed = crew("events", leader.run_id, "--json").stdout.splitlines()
    assert probe["stdin"] == printed[contact.seq - 1] + "\n"
    assert json.loads(probe["stdin"])["data"]["mailboxMessage"]["body"] == "Which db?"
    assert probe["env"]["CREW_RUN_ID"] == leader.run_id
    assert probe["env"]["CREW_TASK_ID"] == "plan"
    assert probe["env"]["CREW_EVENT_TYPE"] == "supervisor.contact"
    assert probe["env"]["CREW_STATE_DIR"] == str(store.paths.root)
    assert "CREW_WORKER_TOKEN" not in probe["env"] and "CREW_ATTEMPT" not in probe["env"]
    assert probe["pgid"] == probe["pid"] == probe["sid"]  # its own session and process group

    verbs.respond(store, "plan", "Postgres", session=SESSION)
    assert leader.finish() == 0
    assert len(probes(saved)) == 1  # once, and for nothing else
    assert not events_of(store, EventType.NOTIFY_FAILED)


def test_a_failing_command_is_recorded_and_the_run_still_completes(
    tmp_path: Path, home: Home
) -> None:
    crew_toml = write_crew(tmp_path, [{"id": "a", "prompt": "say:hello ; exit:0"}])
    failing = "sh -c 'echo first >&2; echo the webhook said no >&2; exit 7'"
    add_notify(crew_toml, on=["task.started"], command=failing)
    add_notify(crew_toml, on="run.ended", command=[str(tmp_path / "no-such-notifier")])
    leader = Leader("run", "crew.toml", cwd=tmp_path)

    assert leader.finish() == 0
    store = store_of(home, leader.run_id)
    assert store.state().run.status is RunStatus.COMPLETED
    started, missing = sorted(
        events_of(store, EventType.NOTIFY_FAILED), key=lambda e: e.data["notify"] if e.data else 0
    )
    assert started.task_id == "a" and started.data is not None
    assert started.message == (
        f"notify[0] (sh) for event #{started.data['event']['seq']} task.started failed: "
        "exited with code 7 (the webhook said no)"
    )
    assert started.data["command"] == ["sh", "-c", "echo first >&2; echo the webhook said no >&2; exit 7"]  # fmt: skip
    assert started.data["exitCode"] == 7 and started.data["timedOut"] is False
    assert started.data["stderr"] == "first\nthe webhook said no"
    assert started.data["event"]["type"] == "task.started"
    assert missing.data is not None and missing.data["event"]["type"] == "run.ended"
    assert missing.data["reason"] == (
        f"cannot start {str(tmp_path / 'no-such-notifier')!r}: No such file or directory"
    )


def test_a_hanging_command_does_not_delay_delivery_and_is_killed_at_its_timeout(
    tmp_path: Path, home: Home
) -> None:
    saved = tmp_path / "probes"
    saved.mkdir()
    script = "ask:need_input:Which way? ; await:steer ; await:respond ; exit:0"
    crew_toml = write_crew(tmp_path, [{"id": "a", "prompt": script}])
    hang = [sys.executable, str(PROBE), str(saved), "hang"]
    add_notify(crew_toml, on="contact", command=hang, timeout="5s")
    leader = Leader("run", "crew.toml", cwd=tmp_path)
    store = store_of(home, leader.run_id)
    (probe,) = eventually(lambda: probes(saved), timeout=30)  # it runs, and hangs

    steered = crew("steer", leader.run_id, "a", "go left")
    assert steered.returncode == 0, steered.stderr

    def delivered_steer() -> list[Event]:
        return [
            e
            for e in events_of(store, EventType.MAILBOX_DELIVERED)
            if e.mail_state is not None and e.mail_state.kind is MessageKind.STEER
        ]

    (delivered,) = eventually(delivered_steer, timeout=30)
    (failed,) = eventually(lambda: events_of(store, EventType.NOTIFY_FAILED), timeout=30)
    # The leader delivered the steer while the command hung: before the command was killed.
    assert delivered.seq < failed.seq
    assert failed.data is not None and failed.data["timedOut"] is True
    assert failed.data["reason"] == "timed out after 5s: killed"
    assert failed.data["exitCode"] == -signal.SIGKILL
    # Reaped before its failure was recorded (no zombie), and its whole group was killed.
    assert not Path(f"/proc/{probe['pid']}").exists()
    eventually(lambda: _gone(probe["child"]))

    verbs.respond(store, "a", "north", session=SESSION)
    assert leader.finish() == 0
    assert "got steer go left" in store.paths.log("a").read_text()


def _gone(pid: int) -> bool:
    """True once `pid` has exited (a zombie waiting for its parent counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except FileNotFoundError:
        return True
    return stat[stat.rfind(b")") + 2 :].startswith(b"Z")


def test_a_resumed_run_notifies_only_what_happened_since(tmp_path: Path, home: Home) -> None:
    saved = tmp_path / "probes"
    saved.mkdir()
    crew_toml = write_crew(tmp_path, [{"id": "a", "prompt": "ask:need_input:Which way? ; read"}])
    on = ["run.created", "contact", "run.resumed"]
    add_notify(crew_toml, on=on, command=[sys.executable, str(PROBE), str(saved)])
    first = Leader("run", "crew.toml", cwd=tmp_path)
    store = store_of(home, first.run_id)
    eventually(lambda: len(probes(saved)) == 2, timeout=30)  # run.created, the question
    os.kill(first.pid, signal.SIGKILL)
    first.finish()

    second = Leader("resume", first.run_id, cwd=tmp_path)
    eventually(lambda: len(probes(saved)) == 4, timeout=30)  # run.resumed, the question again
    verbs.respond(store, "a", "north", session=SESSION)
    assert second.finish() == 0
    told = [json.loads(p["stdin"]) for p in probes(saved)]
    assert [e["type"] for e in told] == [
        "run.created",
        "supervisor.contact",
        "run.resumed",
        "supervisor.contact",
    ]
    assert len({e["id"] for e in told}) == 4  # nothing notified twice


@pytest.mark.parametrize(
    ("entry", "problem"),
    [
        (
            {"on": ["contact", "contacted"], "command": "notify-send crew"},
            "notify[0].on[1]: unknown trigger: use contact, flagged, failed, or an event type "
            "such as run.ended (docs/file-formats.md lists them) (got 'contacted')",
        ),
        (
            {"on": "contact", "command": ""},
            "notify[0].command: must name the program to run (an argument list, or a string) "
            "(got '')",
        ),
        (
            {"on": "notify.failed", "command": ["true"]},
            "notify[0].on[0]: cannot trigger a notification: a failing command would notify "
            "itself (got 'notify.failed')",
        ),
        (
            {"on": "contact", "command": ["true"], "timeout": 0},
            "notify[0].timeout: must be more than 0 (got 0)",
        ),
    ],
)
def test_a_bad_notify_entry_is_a_config_error_that_writes_nothing(
    tmp_path: Path, home: Home, entry: dict[str, Any], problem: str
) -> None:
    crew_toml = write_crew(tmp_path, [{"id": "a", "prompt": "exit:0"}])
    add_notify(crew_toml, **entry)
    before = snapshot_files(home.root)

    done = crew("run", str(crew_toml), "--no-input")

    assert done.returncode == 2
    assert done.stderr == f"crew: error: {crew_toml}: {problem}\n"
    assert done.stdout == ""
    assert snapshot_files(home.root) == before


def test_notifications_beyond_the_queue_are_recorded_as_not_run(
    make_run: Callable[..., RunStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(notify, "MAX_RUNNING", 1)
    monkeypatch.setattr(notify, "MAX_QUEUED", 1)
    tasks = [{"id": f"t{i}", "agent": "coder", "prompt": "p"} for i in (1, 2, 3)]
    entry = {"on": "task.queued", "command": ["sleep", "0.5"]}
    store = make_run(config(tasks=tasks, notify=[entry]))  # three task.queued events
    view = RunView(store, 0)
    notifier = notify.Notifier(store.paths, store.state().run, 0, lambda: None)

    notifier.notice(view)  # one runs, one waits, the third finds the queue full
    notifier.close(view)

    (dropped,) = events_of(store, EventType.NOTIFY_FAILED)
    assert dropped.data is not None and dropped.data["event"]["seq"] == 4
    assert dropped.data["reason"] == "not run: 2 notifications were already waiting"
    assert dropped.task_id == "t3"
