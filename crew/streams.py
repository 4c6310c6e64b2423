"""Following a run as it goes: its event log, and its workers' output."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from crew.models import Event
from crew.registry import EventType
from crew.store import eventlog, jsonl
from crew.store.files import open_read
from crew.store.logindex import TaskLog, TimedLine, merged
from crew.store.runstore import RunStore
from crew.store.state import RunState
from crew.store.watch import watch_folders
from crew.waiting import LeaderWatch


def follow_events(
    store: RunStore, *, follow: bool
) -> Iterator[tuple[Event | None, jsonl.BadLine | None]]:
    """Yield each event of a run (and each bad line); with `follow`, keep going as events are
    appended, until the run ends (Refused once it has no leader: it will not end then).

    Survives the log being replaced by a repair: it re-reads from the start and skips what it
    already showed (by seq).
    """
    follower = eventlog.Follower(store.paths.events)
    shown_seq = 0
    ended = False
    watcher = watch_folders([store.paths.root], step_ms=20) if follow else None
    leader = LeaderWatch(store)
    try:
        if follow:
            run = store.state().run
            ended = run.status.terminal
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
            leader.pause(watcher, run, 5.0)
    finally:
        leader.close()
        if watcher is not None:
            watcher.close()


def follow_log(store: RunStore, task_id: str, *, follow: bool) -> Iterator[bytes]:
    """A worker's output, as stored; with `follow`, keep going until the task has ended (Refused
    once the run has no leader)."""
    path = store.paths.log(task_id)
    offset = 0
    watcher = watch_folders([store.paths.logs_dir, store.paths.root]) if follow else None
    leader = LeaderWatch(store)
    try:
        while True:
            state = store.state()
            ended = not follow or state.task(task_id).status.terminal
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
            leader.pause(watcher, state.run, 5.0)
    finally:
        leader.close()
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
    (`every_task`: until the run has, taking in tasks added to it on the way; Refused once the
    run has no leader)."""
    logs = {task_id: TaskLog(task_id, store.paths.log(task_id)) for task_id in task_ids}
    watcher = watch_folders([store.paths.logs_dir, store.paths.root]) if follow else None
    leader = LeaderWatch(store)
    first = True
    try:
        while True:
            state = store.state()
            ended = not follow or _ended(state, logs, store, every_task=every_task)
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
            leader.pause(watcher, state.run, 5.0)
    finally:
        leader.close()
        if watcher is not None:
            watcher.close()


def _ended(state: RunState, logs: dict[str, TaskLog], store: RunStore, *, every_task: bool) -> bool:
    """Whether what is followed has ended (read before the logs: their last lines are in them
    by then). Following every task, tasks the run gained join `logs`."""
    if not every_task:
        return all(state.task(task_id).status.terminal for task_id in logs)
    for task_id in state.tasks:
        if task_id not in logs:
            logs[task_id] = TaskLog(task_id, store.paths.log(task_id))
    return state.run.status.terminal
