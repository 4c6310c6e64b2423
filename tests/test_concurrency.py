"""Concurrent writers in real processes: every record intact, none lost or duplicated."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable

from crew import ids
from crew.domain import change
from crew.models import Event, MailboxMessage
from crew.paths import RunPaths
from crew.registry import Box, Direction, EventType, MessageKind, MessageStatus, Priority
from crew.store import jsonl
from crew.store.runstore import RunStore

WRITERS = 8
APPENDS = 200


def _writer(paths: RunPaths, writer: int, count: int, ready: object) -> None:
    os.environ["CREW_FSYNC"] = "0"
    store = RunStore(paths)
    ready.wait()  # type: ignore[attr-defined]  # a multiprocessing.Event: start together
    for n in range(count):
        with change(store) as txn:
            mail = MailboxMessage(
                id=ids.new_message_id(),
                direction=Direction.INBOX,
                kind=MessageKind.FOLLOW_UP,
                from_="leader",
                to="plan",
                task_id="plan",
                body=f"writer {writer} message {n} " + "x" * (n % 50),
                status=MessageStatus.PENDING,
                priority=Priority.NORMAL,
                sent_at=txn.at,
            )
            txn.record(EventType.AGENT_FOLLOWED_UP, mail=mail, data={"writer": writer, "n": n})


def test_concurrent_writers_lose_nothing_and_seq_stays_unique(
    make_run: Callable[..., RunStore],
) -> None:
    store = make_run()
    context = multiprocessing.get_context("fork")
    ready = context.Event()
    workers = [
        context.Process(target=_writer, args=(store.paths, w, APPENDS, ready))
        for w in range(WRITERS)
    ]
    for worker in workers:
        worker.start()
    ready.set()
    for worker in workers:
        worker.join(timeout=120)
        assert worker.exitcode == 0

    events = jsonl.read(store.paths.events, Event)
    inbox = jsonl.read(store.paths.box(Box.INBOX), MailboxMessage)
    assert events.bad == [] and events.tail_bytes == 0
    assert inbox.bad == [] and inbox.tail_bytes == 0

    created = 1 + len(store.state().tasks)  # run.created + task.queued per task
    seqs = [e.seq for e in events.records]
    assert seqs == list(range(1, created + WRITERS * APPENDS + 1))  # unique, gap-free, in order

    sent = Counter(
        (e.data["writer"], e.data["n"]) for e in events.records if e.data and "n" in e.data
    )
    assert len(sent) == WRITERS * APPENDS and set(sent.values()) == {1}

    bodies = Counter(m.body for m in inbox.records)
    assert len(inbox.records) == WRITERS * APPENDS
    assert set(bodies.values()) == {1}
    assert len({m.id for m in inbox.records}) == WRITERS * APPENDS
    assert store.load().clean


def _greedy(paths: RunPaths, holding: object) -> None:
    """A writer that takes the run lock again the moment it lets it go, for ever (as a leader
    recording a flood of worker output does, with longer holds: a busy disk)."""
    store = RunStore(paths)
    while True:
        with store.lock():
            holding.set()  # type: ignore[attr-defined]  # a multiprocessing.Event
            time.sleep(0.5)


def test_a_waiting_writer_gets_its_turn_against_a_greedy_one(
    make_run: Callable[..., RunStore],
) -> None:
    """A send polling for the lock used to lose (nine times in ten) to a writer re-taking it at
    once: it had to hit the few microseconds between a release and the next take."""
    store = make_run()
    holding = multiprocessing.Event()
    greedy = multiprocessing.Process(target=_greedy, args=(store.paths, holding))
    greedy.start()
    try:
        holding.wait(10)
        sent = subprocess.run(
            [sys.executable, "-m", "crew", "follow-up", store.run_id, "plan", "my turn"],
            capture_output=True, text=True, check=False,
            env={**os.environ, "CREW_LOCK_TIMEOUT": "2"},
        )  # fmt: skip
    finally:
        greedy.kill()
        greedy.join()

    assert sent.returncode == 0, sent.stderr
    assert [m.body for m in store.messages(Box.INBOX)] == ["my turn"]
    assert not store.paths.root.joinpath(".next.lock").exists()
