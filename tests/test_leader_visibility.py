"""What readers say about a run and its leader is true: no false alarms while a leader writes, a
real interruption reported, a dead leader noticed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import SESSION
from leaders import Leader, eventually, store_of, write_crew

from crew import verbs
from crew.leader import start_run
from crew.paths import Home
from crew.registry import EventType, TaskStatus
from crew.store.runstore import RunStore
from crew.views import run_status
from crew.waiting import Until, wait_for_run

#: A worker that prints a decision a line at a time: the leader commits a transaction for each.
BUSY = (
    "i=0; while [ $i -lt 3000 ]; do"
    ' echo \'@supervisor decision: {"action": "continue", "n": \'$i\'}\'; i=$((i+1)); sleep 0.005;'
    " done"
)


def test_status_never_calls_a_write_in_progress_interrupted(
    tmp_path: Path, home: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CREW_FSYNC", "1")  # as users run it: each commit takes milliseconds
    write_crew(tmp_path, [{"id": "busy", "prompt": "p"}], command=["sh", "-c", BUSY])
    leader = Leader("run", "crew.toml", cwd=tmp_path)
    store = store_of(home, leader.run_id)
    eventually(lambda: len(store.events().records) > 50)
    try:
        before = len(store.events().records)
        seen: list[str] = []
        polls = 0
        written = 0
        while polls < 50 or written < 100:  # keep polling while it writes
            seen += run_status(store).run_warnings
            polls += 1
            written = len(store.events().records) - before
            if store.state().tasks["busy"].status.terminal:
                break
    finally:
        verbs.cancel(store, session=SESSION, grace=0.1)
        leader.finish()
    assert written >= 100 and polls >= 50  # the polls ran while the leader kept writing
    assert [w for w in seen if "not yet reflected" in w] == []


def test_a_write_a_crash_cut_short_is_reported_by_status(tmp_path: Path, home: Home) -> None:
    config = write_crew(tmp_path, [{"id": "t", "prompt": "p"}])
    store = start_run(home, config, session=SESSION)
    assert run_status(store).run_warnings == []

    crashed = subprocess.run(
        [sys.executable, "-m", "crew", "follow-up", store.run_id, "t", "more"],
        cwd=tmp_path, env={**os.environ, "CREW_FAULT": "append:events.jsonl"},
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert crashed.returncode == -9  # killed right after its commit point

    warnings = run_status(store).run_warnings
    assert [w for w in warnings if "not yet reflected" in w] == [
        "1 event(s) not yet reflected in the snapshots (a write was interrupted); the next "
        "command that changes the run completes it"
    ]


def _crew(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "crew", *args],
        cwd=cwd, env={**os.environ, **env}, capture_output=True, text=True, check=False,
    )  # fmt: skip


def test_wait_notices_a_leader_killed_while_it_waits(tmp_path: Path, home: Home) -> None:
    write_crew(tmp_path, [{"id": "t", "prompt": "drain"}])
    detached = _crew("run", "crew.toml", "--detach", "--json", cwd=tmp_path)
    started = json.loads(detached.stdout)
    store = store_of(home, started["runId"])
    eventually(lambda: store.state().tasks["t"].status is TaskStatus.RUNNING)
    waiter = subprocess.Popen(
        [sys.executable, "-m", "crew", "wait", store.run_id, "--for", "done", "--timeout", "60s"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    eventually(lambda: _waiting_on(store, waiter.pid))

    os.kill(started["pid"], signal.SIGKILL)
    _, err = waiter.communicate(timeout=20)  # it does not wait for its 60 s: the pid died

    assert waiter.returncode == 4, err
    assert err.startswith(f"crew: error: Run {store.run_id} has no leader (leader pid ")
    assert "it cannot get there until one leads it again." in err
    assert f"`crew resume {store.run_id}` leads it again." in err
    again = _crew("wait", store.run_id, cwd=tmp_path)  # and at once, when it was dead before
    assert again.returncode == 4
    status = json.loads(_crew("status", store.run_id, "--json", cwd=tmp_path).stdout)
    assert status["leader"]["alive"] is False and status["leader"]["pid"] == started["pid"]
    verbs.cancel(store, session=SESSION, grace=0.1)


def _waiting_on(store: RunStore, pid: int) -> bool:
    """The waiter has started watching: it holds an inotify descriptor (Linux)."""
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
        return any("inotify" in os.readlink(f"/proc/{pid}/fd/{fd}") for fd in fds)
    except OSError:
        return False


def test_a_leader_that_crashes_says_why_and_the_run_resumes(tmp_path: Path, home: Home) -> None:
    write_crew(tmp_path, [{"id": "t", "prompt": "ask:need_input:go? ; read ; exit:0"}])
    crashed = _crew("run", "crew.toml", "--no-input", cwd=tmp_path, CREW_FAULT="raise:leader@8")

    assert crashed.returncode == 1
    (run_id,) = home.run_ids()
    store = store_of(home, run_id)
    assert crashed.stderr.splitlines()[-2:] == [
        f"crew: error: The leader of run {run_id} crashed (RuntimeError: injected failure at "
        "leader); its workers were stopped.",
        f"`crew resume {run_id}` continues the run; the traceback is in {store.paths.leader_log}.",
    ]
    (event,) = [e for e in store.events().records if e.type is EventType.LEADER_CRASHED]
    assert event.data is not None and event.data["reason"] == (
        "RuntimeError: injected failure at leader"
    )
    assert "Traceback (most recent call last)" in store.paths.leader_log.read_text()
    status = json.loads(_crew("status", run_id, "--json", cwd=tmp_path).stdout)
    assert status["leader"]["stoppedReason"] == "crashed: RuntimeError: injected failure at leader"
    assert status["leader"]["log"] == str(store.paths.leader_log)
    assert any(str(store.paths.leader_log) in w for w in status["warnings"])

    resumed = Leader("resume", run_id, cwd=tmp_path)
    wait_for_run(store, Until.WAITING, timeout=20)
    verbs.respond(store, "t", "yes", session=SESSION)
    assert resumed.finish() == 0
    assert store.state().tasks["t"].failures == 0


def test_ctrl_c_says_why_the_leader_stopped(tmp_path: Path, home: Home) -> None:
    write_crew(tmp_path, [{"id": "t", "prompt": "drain"}])
    leader = Leader("run", "crew.toml", cwd=tmp_path)
    store = store_of(home, leader.run_id)
    eventually(lambda: store.state().tasks["t"].status is TaskStatus.RUNNING)

    leader.process.send_signal(signal.SIGINT)
    assert leader.finish() == 130

    status = json.loads(_crew("status", leader.run_id, "--json", cwd=tmp_path).stdout)
    assert status["leader"]["alive"] is False
    assert status["leader"]["stoppedReason"] == "interrupted by SIGINT"
    waited = _crew("wait", leader.run_id, cwd=tmp_path)
    assert waited.returncode == 4
    assert "(leader pid" in waited.stderr and "stopped: interrupted by SIGINT)" in waited.stderr


def test_an_os_error_is_one_sentence_naming_the_file(tmp_path: Path, home: Home) -> None:
    config = write_crew(tmp_path, [{"id": "t", "prompt": "p"}])
    store = start_run(home, config, session=SESSION)
    store.paths.log("t").mkdir()  # where a file is expected, something that is not one

    shown = _crew("logs", store.run_id, "t", cwd=tmp_path)

    assert shown.returncode == 1
    assert shown.stderr.splitlines()[0] == f"crew: error: Is a directory: {store.paths.log('t')}."
    assert "internal error" not in shown.stderr and "Traceback" not in shown.stderr


def test_a_leader_whose_output_reader_went_away_leads_on_unseen(tmp_path: Path, home: Home) -> None:
    go = tmp_path / "go"
    write_crew(tmp_path, [{"id": "t", "prompt": f"until:{go} ; say:working ; say:done"}])
    leader = subprocess.Popen(
        [sys.executable, "-m", "crew", "run", "crew.toml", "--no-input"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    assert leader.stdout is not None and leader.stdout.readline()  # it is printing
    leader.stdout.close()  # `crew run … | head -1`
    go.touch()

    assert leader.wait(timeout=60) == 0
    (run_id,) = [p.name for p in (home.root / "state" / "runs").iterdir()]
    store = store_of(home, run_id)
    assert store.state().tasks["t"].status is TaskStatus.COMPLETED
    assert not [e for e in store.events().records if e.type is EventType.LEADER_CRASHED]
