"""A run's state, and how the event log describes it.

Each state-changing event carries the new state it produces (`data.run`, `data.task`,
`data.mailboxMessage`), so the snapshots and the mailbox can always be derived from the log:
folding the log is how a crashed write is completed and how a lost snapshot is rebuilt.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from crew.errors import Corrupt, NotFound
from crew.models import Checkpoint, Event, MailboxChange, MailboxMessage, Run, Task
from crew.registry import Box, TaskStatus

#: Task fields the leader refreshes without an event (too frequent to log); ignored when comparing
#: snapshots with the state rebuilt from events.
VOLATILE_TASK_FIELDS = frozenset({"last_output_at"})


@dataclass
class RunState:
    """The run and its tasks (in crew.toml order), as the snapshots hold them."""

    run: Run
    tasks: dict[str, Task]
    #: How many tasks have each status: counted once, then kept up to date by `put`, so the
    #: rules that ask "have all tasks ended?" cost the same whatever the number of tasks.
    _counts: Counter[TaskStatus] | None = field(default=None, repr=False, compare=False)

    def task_list(self) -> list[Task]:
        return list(self.tasks.values())

    def put(self, task: Task) -> None:
        """Set a task's new state (the only way a task is changed)."""
        counts = self._counts
        if counts is not None:
            old = self.tasks.get(task.id)
            if old is not None:
                counts[old.status] -= 1
            counts[task.status] += 1
        self.tasks[task.id] = task

    def counts(self) -> Counter[TaskStatus]:
        """How many tasks have each status (a status no task has may be missing or 0)."""
        if self._counts is None:
            self._counts = Counter(t.status for t in self.tasks.values())
        return self._counts

    def task(self, task_id: str) -> Task:
        """The task with this id (NotFound, naming the run's tasks, if there is none)."""
        try:
            return self.tasks[task_id]
        except KeyError:
            known = ", ".join(self.tasks) or "none"
            raise NotFound(
                f"Run {self.run.run_id} has no task {task_id!r} (tasks: {known})."
            ) from None

    def copy(self) -> RunState:
        # Models are never changed in place (every change makes a new one): a shallow copy
        # is enough for a transaction to work on.
        counts = None if self._counts is None else Counter(self._counts)
        return RunState(self.run, dict(self.tasks), counts)


@dataclass(frozen=True)
class LogsRead:
    """A run's logs as a caller read them, checked: the events, and each mailbox file's valid
    lines (MailboxMessage or MailboxChange), so that a full check reads each file once."""

    events: list[Event]
    mail: Mapping[Box, list[MailboxMessage | MailboxChange]]


@dataclass
class Recovery:
    """A run's state as loaded, and whatever the files on disk do not reflect of it yet."""

    state: RunState
    last_seq: int
    #: Events to roll forward: the tail after `.runtime/applied`, or all of them after a full check.
    unapplied: list[Event] = field(default_factory=list)
    #: True when `.runtime/applied` could not be trusted and the whole log was checked.
    full: bool = False
    #: Snapshots that are unreadable or missing (the state was rebuilt from events).
    broken: list[tuple[Path, str]] = field(default_factory=list)
    #: True when readable snapshots disagreed with the state the events describe.
    mismatch: bool = False
    #: Set when events.jsonl ends before the last seq the snapshots reflect.
    history_gap: int | None = None
    #: Set when events.jsonl holds no record of the run its snapshots show (gone, emptied).
    history_lost: bool = False
    #: The events of a transaction cut short at the end of the log (not part of the history).
    cut: list[Event] = field(default_factory=list)
    #: After a full check: message versions the events record that a mailbox file lacks.
    gaps: dict[Box, list[MailboxMessage]] = field(default_factory=dict)
    #: After a full check: the messages a mailbox file has lines of that the events do not
    #: record there (by id). Only `crew doctor --repair` sets them aside.
    unrecorded: dict[Box, list[str]] = field(default_factory=dict)

    @property
    def clean(self) -> bool:
        return not (
            self.unapplied
            or self.full
            or self.broken
            or self.mismatch
            or self.history_gap
            or self.history_lost
            or self.cut
        )

    @property
    def history_missing(self) -> str | None:
        """What of the event log is gone, if the snapshots show more than it holds: then no
        event may be written (it would be numbered over the lost ones), and nothing repairs it."""
        if self.history_lost:
            return "events.jsonl holds no record of the run its snapshots show (removed, emptied)"
        if self.history_gap is not None:
            return (
                f"events.jsonl ends at seq {self.last_seq} but the snapshots reflect seq "
                f"{self.history_gap}"
            )
        return None

    def check_changeable(self, run_id: str) -> None:
        """Corrupt if the run may not be changed: some of its history is missing."""
        missing = self.history_missing
        if missing is not None:
            raise Corrupt(
                f"Run {run_id} cannot be changed: {missing}, so a new event would be numbered "
                "over lost ones.",
                hint=f"Its state can still be read (`crew status {run_id}`); "
                f"`crew rerun {run_id}` starts its tasks again in a new run.",
            )

    def warnings(self) -> list[str]:
        notes = [
            f"{shown(path)} is {why if why == 'missing' else f'unreadable ({why})'}; "
            "showing the state rebuilt from events.jsonl"
            for path, why in self.broken
        ]
        if self.mismatch:
            notes.append(
                "the task files or manifest.json disagree with events.jsonl; showing the state the "
                "events describe (`crew doctor --repair` rewrites the snapshots)"
            )
        if self.unapplied and not self.full:
            notes.append(
                f"{len(self.unapplied)} event(s) not yet reflected in the snapshots (a write was "
                "interrupted); the next command that changes the run completes it"
            )
        for box, missing in self.gaps.items():
            notes.append(
                f"{box.value}.jsonl lacks {len(missing)} message update(s) that events.jsonl "
                "records (the file was cut short or edited); the next command that changes the "
                "run re-writes them"
            )
        for box, ids in self.unrecorded.items():
            notes.append(
                f"{box.value}.jsonl holds {len(ids)} message(s) that events.jsonl does not "
                f"record ({listed(ids)}): no crew command sent them; `crew doctor --repair` sets "
                "them aside"
            )
        if self.cut:
            notes.append(
                f"events.jsonl ends with {describe_cut(self.cut)} (a write was interrupted); it "
                "is not part of the run, and the next command that changes the run sets it aside"
            )
        lost = self.history_missing
        if lost is not None:
            notes.append(f"{lost}: some history is missing")
        return notes


def listed(ids: list[str], most: int = 3) -> str:
    """The first few of `ids`, for a message: `msg_1, msg_2, msg_3, …`."""
    return ", ".join(ids[:most]) + (", …" if len(ids) > most else "")


def shown(path: Path) -> str:
    """A snapshot's name as messages show it: `manifest.json`, `tasks/<taskId>.json`."""
    return f"{path.parent.name}/{path.name}" if path.parent.name == "tasks" else path.name


def describe_cut(cut: list[Event]) -> str:
    """A transaction cut short, in words."""
    end = cut[0].end_seq or cut[-1].seq
    return f"a transaction cut short ({len(cut)} of its events, seq {cut[0].seq}–{end})"


def rebuild(events: list[Event]) -> RunState | None:
    """The state the event log describes: the latest run and task states it carries."""
    run: Run | None = None
    tasks: dict[str, Task] = {}
    for event in events:
        if event.run_state is not None:
            run = event.run_state
        if event.task_state is not None:
            tasks[event.task_state.id] = event.task_state
    if run is None:
        return None
    return RunState(run, ordered(run, list(tasks.values())))


def apply_event(state: RunState, event: Event) -> None:
    """Bring `state` forward by one event (the new run and task states it carries)."""
    if event.run_state is not None:
        state.run = event.run_state
    if event.task_state is not None:
        state.put(event.task_state)


def same_state(a: RunState, b: RunState) -> bool:
    """Whether two states agree, ignoring the fields the leader refreshes without an event."""
    if a.run != b.run or list(a.tasks) != list(b.tasks):
        return False
    return all(
        t.model_dump(exclude=set(VOLATILE_TASK_FIELDS))
        == b.tasks[t.id].model_dump(exclude=set(VOLATILE_TASK_FIELDS))
        for t in a.tasks.values()
    )


def ordered(run: Run, tasks: list[Task]) -> dict[str, Task]:
    """Tasks in crew.toml order, then those added as the run ran, in the order they were added
    (the same order however they were read: snapshots come in no particular order)."""
    by_id = {t.id: t for t in tasks}
    in_order = {t.id: by_id.pop(t.id) for t in run.config.tasks if t.id in by_id}
    for task in sorted(by_id.values(), key=lambda t: (t.added_at or "", t.id)):
        in_order[task.id] = task
    return in_order


def messages_by_box(events: list[Event]) -> dict[Box, list[MailboxMessage | MailboxChange]]:
    """The mailbox lines a list of events carries (whole messages and changes), by the file that
    holds them, in order."""
    found: dict[Box, list[MailboxMessage | MailboxChange]] = {}
    for event in events:
        mail = event.mail_state
        if mail is not None:
            found.setdefault(mail.kind.box, []).append(mail)
    return found


def checkpoints_in(events: list[Event]) -> dict[str, Checkpoint]:
    """The last checkpoint each task saved, as a list of events carries them."""
    found: dict[str, Checkpoint] = {}
    for event in events:
        if event.checkpoint_state is not None:
            found[event.checkpoint_state.task_id] = event.checkpoint_state
    return found
