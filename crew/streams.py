"""Following a run as it goes: its event log, and its workers' output."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from crew.models import Event
from crew.registry import EventType
from crew.store import eventlog, jsonl
from crew.store.files import open_read
from crew.store.logindex import TaskLog, TimedLine, merged
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


def log_tasks(store: RunStore, task_ids: Iterable[str]) -> list[str]:
    """The tasks whose output `crew logs` shows: those named (NotFound for one the run lacks),
    or every task of the run, in its order."""
    state = store.state()
    named = list(task_ids)
    for task_id in named:
        state.task(task_id)
    return named or list(state.tasks)


def follow_lines(
    store: RunStore,
    task_ids: list[str],
    *,
    every_task: bool,
    follow: bool,
    tail: int | None = None,
    since_us: int | None = None,
) -> Iterator[Iterator[TimedLine]]:
    """The output of `task_ids` as lines in the order they were received, batch by batch: read
    each batch before asking for the next (`tail`: only the last lines of each task; `since_us`:
    only those received since). With `follow`, keeps going until the tasks have ended
    (`every_task`: until the run has, taking in tasks added to it on the way)."""
    logs = {task_id: TaskLog(task_id, store.paths.log(task_id)) for task_id in task_ids}
    watcher = watch_folders([store.paths.logs_dir, store.paths.root]) if follow else None
    first = True
    try:
        while True:
            ended = not follow or _ended(store, logs, every_task=every_task)
            # The leader writes records in time order: every line received by the newest time
            # read now is in the logs once they are read again, after it (docs/design.md).
            until = None if ended else max((log.newest() for log in logs.values()), default=0)
            yield merged(
                logs.values(),
                final=ended,
                until_us=until,
                since=since_us,
                tail=tail if first else None,
            )
            first = False
            if watcher is None or ended:
                return
            # The timeout only guards against a missed notification; changes wake it at once.
            watcher.wait(5.0)
    finally:
        if watcher is not None:
            watcher.close()


def _ended(store: RunStore, logs: dict[str, TaskLog], *, every_task: bool) -> bool:
    """Whether what is followed has ended (read before the logs: their last lines are in them
    by then). Following every task, tasks the run gained join `logs`."""
    state = store.state()
    if not every_task:
        return all(state.task(task_id).status.terminal for task_id in logs)
    for task_id in state.tasks:
        if task_id not in logs:
            logs[task_id] = TaskLog(task_id, store.paths.log(task_id))
    return state.run.status.terminal
