"""Concurrent writers in real processes: every record intact, none lost or duplicated."""

from __future__ import annotations

import multiprocessing
import os
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
APPENDS = 500


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
