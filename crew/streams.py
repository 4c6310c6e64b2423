"""Following a run as it goes: its event log, and a worker's output."""

from __future__ import annotations

from collections.abc import Iterator

from crew.models import Event
from crew.registry import EventType
from crew.store import eventlog, jsonl
from crew.store.files import open_read
from crew.store.runstore import RunStore
from crew.store.watch import watch_folders


def follow_events(
    store: RunStore, *, follow: bool
) -> Iterator[tuple[Event | None, jsonl.BadLine | None]]:
    """Yield each event of a run (and each bad line); with `follow`, keep going as events are
    appended, until the run ends.

    Survives the log being replaced by a repair: it re-reads from the start and skips what it
    already showed (by seq).
    """
    follower = eventlog.Follower(store.paths.events)
    shown_seq = 0
    ended = False
    watcher = watch_folders([store.paths.root], step_ms=20) if follow else None
    try:
        if follow:
            ended = store.state().run.status.terminal
        while True:
            result = follower.poll()
            for bad in result.bad:
                yield None, bad
            for event in result.records:
                if event.seq <= shown_seq:
                    continue  # shown before the file was replaced
                shown_seq = event.seq
                ended = ended or event.type is EventType.RUN_ENDED
                yield event, None
            if watcher is None or ended or not store.paths.root.is_dir():
                return
            # The timeout only guards against a missed notification; changes wake it at once.
            watcher.wait(5.0)
    finally:
        if watcher is not None:
            watcher.close()


def follow_log(store: RunStore, task_id: str, *, follow: bool) -> Iterator[bytes]:
    """A worker's output, as stored; with `follow`, keep going until the task has ended."""
    path = store.paths.log(task_id)
    offset = 0
    watcher = watch_folders([store.paths.logs_dir, store.paths.root]) if follow else None
    try:
        while True:
            ended = not follow or store.state().task(task_id).status.terminal
            try:
                with open_read(path) as handle:
                    handle.seek(offset)
                    while chunk := handle.read(65536):
                        offset += len(chunk)
                        yield chunk
            except FileNotFoundError:
                pass
            if watcher is None or ended:
                return
            watcher.wait(5.0)
    finally:
        if watcher is not None:
            watcher.close()
