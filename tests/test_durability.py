"""One fsync per transaction: only events.jsonl, the commit point, is fsynced. What follows it
(mailbox lines, snapshots, checkpoints, the marker) can lose its last write in a power cut, and
is then restored from the log. A power cut is simulated as what it leaves: a file that lost its
last write, and a marker written in another boot."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator

import pytest
from conftest import SESSION

from crew import verbs
from crew.domain import change, tasks
from crew.models import Checkpoint
from crew.registry import Box, EventType, TaskStatus
from crew.store import files, marker
from crew.store.runstore import RunStore

MakeRun = Callable[..., RunStore]
OTHER_BOOT = "00000000-0000-4000-8000-000000000000"


@pytest.fixture
def reboot(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[], None]]:
    """Makes every marker written so far one of an earlier boot, as after a power cut."""

    def after_power_cut() -> None:
        monkeypatch.setattr(files, "_boot_id", [OTHER_BOOT], raising=False)

    yield after_power_cut


@pytest.fixture(autouse=True)
def fsync_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CREW_FSYNC", "1")


def _fsyncs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record what each fsync synced (the file's name, or the folder's)."""
    synced: list[str] = []
    real = os.fsync

    def spy(fd: int) -> None:
        synced.append(os.path.basename(os.readlink(f"/proc/self/fd/{fd}")))
        real(fd)

    monkeypatch.setattr(os, "fsync", spy)
    return synced


def test_a_transaction_fsyncs_the_event_log_only(
    make_run: MakeRun, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = make_run()
    synced = _fsyncs(monkeypatch)
    verbs.follow_up(store, "plan", "also the parser", session=SESSION)
    with change(store) as txn:
        tasks.transition(txn, "plan", TaskStatus.RUNNING, attempt=1)
    assert synced == ["events.jsonl", "events.jsonl"]


def test_a_mailbox_line_lost_in_a_power_cut_is_rewritten_from_the_log(
    make_run: MakeRun, reboot: Callable[[], None]
) -> None:
    store = make_run()
    verbs.follow_up(store, "plan", "first", session=SESSION)
    verbs.follow_up(store, "plan", "second", session=SESSION)
    inbox = store.paths.box(Box.INBOX)
    lines = inbox.read_bytes().splitlines(keepends=True)
    # The size reached the disk, the data did not: the last line reads back as NULs, and the
    # marker (which the kernel happened to flush) still matches every size.
    inbox.write_bytes(lines[0] + b"\0" * len(lines[1]))
    reboot()

    warnings = RunStore(store.paths).load().warnings()
    assert any("inbox.jsonl lacks 1 message update" in w for w in warnings), warnings
    verbs.follow_up(store, "plan", "third", session=SESSION)

    fresh = RunStore(store.paths)
    assert [m.body for m in fresh.messages(Box.INBOX)] == ["first", "second", "third"]
    assert fresh.load().clean
    applied = marker.read(store.paths)
    assert applied is not None and applied.boot == OTHER_BOOT  # written in the new boot


@pytest.mark.parametrize("lost", ["the last replace", "all of it (zero length)"])
def test_a_snapshot_that_lost_its_last_write_is_rebuilt_from_the_log(
    make_run: MakeRun, reboot: Callable[[], None], lost: str
) -> None:
    store = make_run()
    with change(store) as txn:
        tasks.transition(txn, "plan", TaskStatus.RUNNING, attempt=1)
    plan = store.paths.task_file("plan")
    before = plan.read_bytes()
    with change(store) as txn:
        tasks.transition(txn, "plan", TaskStatus.COMPLETED)
    plan.write_bytes(before if lost == "the last replace" else b"")
    reboot()

    recovery = RunStore(store.paths).load()
    assert recovery.state.tasks["plan"].status is TaskStatus.COMPLETED
    with change(RunStore(store.paths)) as txn:
        assert txn.repairs
    assert RunStore(store.paths).load().clean
    assert b'"completed"' in plan.read_bytes()


def test_a_checkpoint_that_lost_its_last_write_is_rewritten_from_the_log(
    make_run: MakeRun, reboot: Callable[[], None]
) -> None:
    store = make_run()
    for note in ("first", "second"):
        with change(store) as txn:
            saved = Checkpoint(task_id="plan", attempt=1, saved_at=txn.at, state={"note": note})
            txn.record(EventType.TASK_CHECKPOINTED, checkpoint=saved)
    path = store.paths.checkpoint("plan")
    path.write_bytes(path.read_bytes().replace(b"second", b"first"))
    reboot()

    with change(RunStore(store.paths)) as txn:
        assert "re-wrote plan.json" in txn.repairs, txn.repairs
    checkpoint = RunStore(store.paths).checkpoint("plan")
    assert checkpoint is not None and checkpoint.state == {"note": "second"}


def test_after_a_reboot_one_reader_checks_the_log_and_the_next_ones_do_not(
    make_run: MakeRun, reboot: Callable[[], None]
) -> None:
    store = make_run()
    verbs.follow_up(store, "plan", "first", session=SESSION)
    reboot()

    assert RunStore(store.paths).load().full  # nothing lost, but it had to look
    assert RunStore(store.paths).load().clean  # the reader wrote the marker of this boot
