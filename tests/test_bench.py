"""The benchmarks still run: they call into crew's library and its command, so a change there
can break them without any other test noticing. The quick sizes of the library-level ones, and
of delivery (the spawner, a live leader, a real `crew steer`) and of notify (a live leader
running a `[[notify]]` command) and mcp (a live `crew mcp`), are run here."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import SESSION

from crew import verbs
from crew.domain import change, mailbox, tasks
from crew.models import MailboxLine, MailboxMessage
from crew.registry import Box, MessageStatus

ROOT = Path(__file__).resolve().parent.parent


def quick_bench(tmp_path: Path, *names: str) -> str:
    """`python -m bench --quick --only NAME…`, as a user runs it; what it printed."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CREW_", "RAY_"))}
    only = [arg for name in names for arg in ("--only", name)]
    output = ["--output", str(tmp_path / "results.json")]
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", *only, *output],
        check=False,
        cwd=ROOT,
        env={**env, "TMPDIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / "results.json").is_file()
    return done.stdout


@pytest.mark.bench
def test_the_quick_benchmarks_still_run(tmp_path: Path) -> None:
    shown = quick_bench(tmp_path, "store", "history", "delivery", "notify", "mcp", "snapshots")
    assert "crew follow-up transaction, fsync off" in shown
    assert "spare swapped with it, every core busy" in shown
    assert "`crew steer` started → worker read" in shown
    assert "status vs history" in shown
    assert "contact printed → `[[notify]]` command read it" in shown
    assert "crew mcp: steer" in shown


@pytest.mark.bench
@pytest.mark.ray
def test_the_quick_ray_benchmark_still_runs(tmp_path: Path) -> None:
    """Its own Ray test cluster, local and Ray side by side (`pytest -m 'bench and ray'`)."""
    pytest.importorskip("ray.cluster_utils")
    shown = quick_bench(tmp_path, "ray")
    for case in ("start-up: ray", "task.started → task.placed", "idle: ray leader", "output: ray"):
        assert case in shown


def test_the_history_the_one_shot_benchmark_writes_is_valid(make_run: Any) -> None:
    # Its messages are copies of a real one in its latest state, which a file holds as a whole
    # line and later changes: a copy of the last line alone would lack what only the first says.
    from bench.oneshot import CLOSED, _history, read_box

    store = make_run()
    with change(store) as txn:
        tasks.start(txn, "plan", attempt=1, pid=4242)
    verbs.steer(store, "plan", "first steer", session=SESSION)
    (message,) = store.messages(Box.STEERING)
    with change(store) as txn:
        mailbox.deliver(txn, [message], attempt=1)
    with change(store) as txn:
        mailbox.acknowledge(txn, "plan", message.id)
    path = store.paths.box(Box.STEERING)
    assert len(path.read_bytes().splitlines()) == 3  # the whole line, then two changes

    (template,) = read_box(path).values()
    assert template["status"] == CLOSED
    lines = _history(template, 2_000).splitlines()
    copies = [MailboxLine.model_validate_json(line).root for line in lines]
    assert len({m.id for m in copies}) == 2_000
    assert all(isinstance(m, MailboxMessage) for m in copies)
    assert {m.status for m in copies} == {MessageStatus.ACKNOWLEDGED, MessageStatus.DELIVERED}


def test_a_run_the_one_shot_benchmark_fills_is_one_doctor_finds_sound(make_run: Any) -> None:
    # Its history was lines no event recorded, which doctor sets aside: the benchmark's own
    # check of its largest run failed, and the commands it timed read a run no crew writes.
    from bench.oneshot import _fill
    from crew.doctor import doctor
    from crew.fast import examining, runfiles
    from crew.registry import ContactType

    store = make_run()
    with change(store) as txn:
        tasks.start(txn, "plan", attempt=1, pid=4242)
    verbs.steer(store, "plan", "first steer", session=SESSION)
    verbs.follow_up(store, "plan", "first follow-up", session=SESSION)
    with change(store) as txn:
        sent = [*store.messages(Box.STEERING), *store.messages(Box.INBOX)]
        mailbox.deliver(txn, sent, attempt=1)
        mailbox.report(txn, "plan", ContactType.PROGRESS, "working")
    for message in sent:
        with change(store) as txn:
            mailbox.acknowledge(txn, "plan", message.id)

    _fill(store, 50)

    assert all(len(store.messages(box)) == 50 for box in Box)
    assert doctor(store.paths.home, store.run_id).findings == []
    assert examining.sound(runfiles.RunFiles(str(store.paths.home.root), store.run_id))
