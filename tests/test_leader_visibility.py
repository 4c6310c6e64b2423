"""What readers say about a run and its leader is true: no false alarms while a leader writes, a
real interruption reported, a dead leader noticed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import SESSION
from leaders import Leader, eventually, store_of, write_crew

from crew import verbs
from crew.leader import start_run
from crew.paths import Home
from crew.views import run_status

#: A worker that reports progress, a line at a time: the leader commits a transaction for each.
BUSY = 'i=0; while [ $i -lt 3000 ]; do echo "@supervisor progress: $i"; i=$((i+1)); sleep 0.005; done'


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
        while len(store.events().records) < before + 100:  # keep polling while it writes
            seen += run_status(store).run_warnings
            polls += 1
        written = len(store.events().records) - before
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
