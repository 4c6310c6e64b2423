"""A run's state on disk: reading it consistently, and changing it in transactions.

events.jsonl is the write-ahead log and the source of truth. A transaction, under the run lock,
appends all its events in one write (the commit point), then appends its mailbox lines, then
replaces tasks.json and manifest.json, then records in `.runtime/applied` the last seq it applied.
A crash anywhere in between leaves events that the snapshots or mailbox do not reflect yet; the
next writer (and every reader, in memory) rolls them forward before doing anything else, so a
half-finished transaction is either completed or was never visible. Each state-changing event
carries the new state (`data.task`, `data.run`, `data.mailboxMessage`), which is what makes
rolling forward — and rebuilding the snapshots from scratch — possible.
"""

from __future__ import annotations

import json
import os
import zlib
from collections import ChainMap
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from crew import clock, faults
from crew.config import CrewConfig, TaskConfig
from crew.errors import Corrupt, NotFound, Refused, StaleLeader, StoreError
from crew.ids import new_event_id, new_run_id
from crew.models import STATE_VERSION, Event, MailboxMessage, Run, RunAdapter, Task, TaskList
from crew.paths import Home, RunPaths
from crew.registry import (
    TASK_STATUS_EVENT,
    Box,
    EventType,
    MessageStatus,
    RunStatus,
    TaskStatus,
    can_transition,
)
from crew.store import jsonl, snapshot
from crew.store.files import FILE_MODE, fsync_dir, fsync_enabled, make_dirs
from crew.store.lock import locked

_Model = TypeVar("_Model", Task, Run)

#: Keys of Event.data that carry new state.
DATA_RUN = "run"
DATA_TASK = "task"
DATA_MESSAGE = "mailboxMessage"

#: Task fields the leader refreshes without an event (too frequent to log); ignored when comparing
#: snapshots with the state rebuilt from events.
VOLATILE_TASK_FIELDS = frozenset({"last_output_at"})

_BLOCKING_ENDS = frozenset({TaskStatus.FAILED, TaskStatus.CANCELLED})

_MESSAGE_RANK = {
    MessageStatus.PENDING: 0,
    MessageStatus.DELIVERED: 1,
    MessageStatus.ACKNOWLEDGED: 2,
    MessageStatus.REJECTED: 2,
}


@dataclass
class RunState:
    """The run and its tasks (in crew.toml order), as the snapshots hold them."""

    run: Run
    tasks: dict[str, Task]

    def task_list(self) -> list[Task]:
        return list(self.tasks.values())

    def copy(self) -> RunState:
        # Models are never changed in place (every change makes a new one): a shallow copy
        # is enough for a transaction to work on.
        return RunState(self.run, dict(self.tasks))


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

    @property
    def clean(self) -> bool:
        return not (self.unapplied or self.full or self.broken or self.mismatch or self.history_gap)

    def warnings(self) -> list[str]:
        notes = [
            f"{path.name} is {why if why == 'missing' else f'unreadable ({why})'}; "
            "showing the state rebuilt from events.jsonl"
            for path, why in self.broken
        ]
        if self.mismatch:
            notes.append(
                "tasks.json or manifest.json disagrees with events.jsonl; showing the state the "
                "events describe (`crew doctor --repair` rewrites the snapshots)"
            )
        if self.unapplied and not self.full:
            notes.append(
                f"{len(self.unapplied)} event(s) not yet reflected in the snapshots (a write was "
                "interrupted); the next command that changes the run completes it"
            )
        if self.history_gap is not None:
            notes.append(
                f"events.jsonl ends at seq {self.last_seq} but the snapshots reflect seq "
                f"{self.history_gap}: some history is missing"
            )
        return notes


class RunStore:
    """One run on disk: consistent reads without a lock, changes in locked transactions."""

    def __init__(self, paths: RunPaths) -> None:
        self.paths = paths
        #: The last bytes read or written of each snapshot, and the model they hold: an
        #: unchanged file is not validated again (a long-lived leader reads them constantly).
        self._snapshots: dict[Path, tuple[bytes, Any]] = {}
        #: Each mailbox file folded by id, kept up to date by reading only what was appended.
        self._folds: dict[Box, _Fold] = {}

    @property
    def run_id(self) -> str:
        return self.paths.run_id

    @classmethod
    def open(cls, home: Home, ref: str) -> RunStore:
        """The run named by `ref` (`latest`, an id or a unique prefix)."""
        return cls(home.resolve_run(ref))

    # ---------------------------------------------------------------- reading

    def load(self) -> Recovery:
        """The run's current state, correct even after a crash mid-write (nothing is written)."""
        return self.recover()

    def state(self) -> RunState:
        return self.load().state

    def events(self, *, offset: int = 0) -> jsonl.ReadResult[Event]:
        return jsonl.read(self.paths.events, Event, offset=offset)

    def messages(self, box: Box | None = None) -> list[MailboxMessage]:
        """Mailbox messages folded by id (latest line wins), in first-seen order."""
        boxes = [box] if box is not None else list(Box)
        return [m for each in boxes for m in self.fold(each).values()]

    def fold(self, box: Box) -> dict[str, MailboxMessage]:
        """The latest line of each message of a mailbox file (do not change the result)."""
        if box not in self._folds:
            self._folds[box] = _Fold(self.paths.box(box))
        return self._folds[box].current()

    def peek_epoch(self) -> int | None:
        """The manifest's leader epoch, read cheaply (None if it cannot be read)."""
        try:
            value = json.loads(self.paths.manifest.read_bytes()).get("leaderEpoch")
        except (OSError, ValueError, AttributeError):
            return None
        return value if isinstance(value, int) else None

    def history(self, box: Box) -> list[MailboxMessage]:
        """Every line of a mailbox file: each status change of each message, in order."""
        return jsonl.read(self.paths.box(box), MailboxMessage).records

    # ---------------------------------------------------------------- writing

    def lock(self) -> AbstractContextManager[None]:
        """The run's mutation lock (with the default timeout)."""
        return locked(self.paths.lock)

    @contextmanager
    def transaction(self, *, epoch: int | None = None) -> Iterator[Txn]:
        """Change the run under its lock. Nothing is written unless the block finishes.

        `epoch` fences a leader: if the manifest names a newer leader epoch, StaleLeader is raised
        before anything is written.
        """
        if not self.paths.manifest.exists() and not self.paths.events.exists():
            raise NotFound(f"Run {self.run_id} has no state files at {self.paths.root}.")
        with self.lock():
            recovery = self.recover()
            repairs = self.apply_recovery(recovery)
            if epoch is not None and recovery.state.run.leader_epoch != epoch:
                raise StaleLeader(
                    f"Run {self.run_id} is now led by epoch {recovery.state.run.leader_epoch}, "
                    f"not {epoch}: this leader was taken over and stops without writing."
                )
            txn = Txn(self, recovery.state.copy(), recovery.last_seq, repairs)
            if repairs:
                txn.record(
                    EventType.STATE_REPAIRED,
                    message=f"repaired the run's files: {'; '.join(repairs)}",
                    data={"repairs": repairs},
                )
            yield txn
            txn.commit()

    # ---------------------------------------------------------------- recovery

    def recover(self, *, full: bool = False) -> Recovery:
        """Load the state; `full` checks the snapshots and mailbox against the whole event log."""
        last = jsonl.last_record(self.paths.events, Event)
        last_seq = last.seq if last else 0
        applied = self._read_applied()
        run, tasks, broken = self._read_snapshots()
        if run is not None and tasks is not None and not full:
            state = RunState(run, _ordered(run, tasks))
            if applied is not None and applied == last_seq:
                return Recovery(state, last_seq)
            if applied is not None and applied < last_seq:
                unapplied = self._events_after(applied)
                for event in unapplied:
                    _apply(state, event)
                return Recovery(state, last_seq, unapplied=unapplied)
            if applied is not None and applied > last_seq:
                return Recovery(state, last_seq, history_gap=applied)
        # No trustworthy marker, or unreadable snapshots: check against the whole log.
        events = jsonl.read(self.paths.events, Event).records
        rebuilt = rebuild(events)
        if rebuilt is None:
            if run is not None and tasks is not None:
                return Recovery(RunState(run, _ordered(run, tasks)), last_seq, full=True)
            raise Corrupt(
                f"Run {self.run_id} has no readable state: its snapshots are "
                f"{'unreadable' if broken else 'missing'} and events.jsonl holds no run record.",
                hint=f"Look at {self.paths.root}; `crew doctor` lists what is damaged.",
            )
        mismatch = False
        if run is not None and tasks is not None:
            snapshot_state = RunState(run, _ordered(run, tasks))
            mismatch = not same_state(snapshot_state, rebuilt)
            if not mismatch:
                rebuilt = snapshot_state  # identical, and it keeps the volatile fields
        return Recovery(
            rebuilt, last_seq, unapplied=events, full=True, broken=broken, mismatch=mismatch
        )

    def _events_after(self, seq: int) -> list[Event]:
        found: list[Event] = []
        for raw in jsonl._reverse_lines(self.paths.events):
            if not raw or raw.isspace():
                continue
            try:
                event = Event.model_validate_json(raw)
            except ValueError:
                continue
            if event.seq <= seq:
                break
            found.append(event)
        found.reverse()
        return found

    def _read_snapshots(self) -> tuple[Run | None, list[Task] | None, list[tuple[Path, str]]]:
        broken: list[tuple[Path, str]] = []
        run: Run | None = None
        tasks: list[Task] | None = None
        try:
            run = self._load(self.paths.manifest, RunAdapter)
            _check_version(self.paths.manifest, run)
        except FileNotFoundError:
            broken.append((self.paths.manifest, "missing"))
        except Corrupt as exc:
            broken.append((self.paths.manifest, _detail(exc)))
        try:
            tasks = self._load(self.paths.tasks, TaskList)
        except FileNotFoundError:
            broken.append((self.paths.tasks, "missing"))
        except Corrupt as exc:
            broken.append((self.paths.tasks, _detail(exc)))
        return run, tasks, broken

    def _load(self, path: Path, adapter: Any) -> Any:
        raw = path.read_bytes()
        cached = self._snapshots.get(path)
        if cached is not None and cached[0] == raw:
            return cached[1]
        model = snapshot.parse(raw, adapter, path)
        self._snapshots[path] = (raw, model)
        return model

    def _read_applied(self) -> int | None:
        """The last seq the snapshots and mailbox reflect (None: unknown, check everything)."""
        try:
            raw = self.paths.applied.read_bytes()
        except FileNotFoundError:
            return None
        digits, _, check = raw.strip().partition(b" ")
        if not digits.isdigit() or check != b"%08x" % zlib.crc32(digits):
            return None  # a marker from an older crew, or one read while it was rewritten
        return int(digits)

    def _write_applied(self, seq: int) -> None:
        """Overwrite the marker in place: fixed width, with a checksum a reader verifies.

        No fsync and no atomic replace (which costs ~0.5 ms a transaction on ext4): a marker
        lost or torn only makes the next reader or writer check more.
        """
        digits = b"%020d" % seq
        data = digits + b" %08x\n" % zlib.crc32(digits)
        make_dirs(self.paths.runtime_dir)
        fd = os.open(self.paths.applied, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, FILE_MODE)
        try:
            os.pwrite(fd, data, 0)
        finally:
            os.close(fd)
        faults.crash_at(f"write:{self.paths.applied.name}")

    def apply_recovery(self, recovery: Recovery) -> list[str]:
        """Under the lock: make the files reflect the recovered state. Returns what was repaired."""
        if recovery.clean:
            return []
        repairs: list[str] = []
        for path, why in recovery.broken:
            if why == "missing":
                repairs.append(f"{path.name} was missing; rebuilt it from events.jsonl")
            else:
                moved = snapshot.quarantine(path)
                repairs.append(
                    f"{path.name} was corrupt ({why}); set it aside as {moved.name} and rebuilt it"
                )
        if recovery.mismatch:
            repairs.append("rewrote tasks.json and manifest.json to match events.jsonl")
        if recovery.full:
            repairs.extend(self._reconcile_mailbox_full(recovery.unapplied))
        else:
            repairs.extend(self._reapply_mailbox_tail(recovery.unapplied))
            if recovery.unapplied:
                repairs.append(
                    f"completed an interrupted write ({len(recovery.unapplied)} event(s))"
                )
        if (recovery.unapplied and not recovery.full) or recovery.broken or recovery.mismatch:
            self._write_snapshots(recovery.state, tasks=True, run=True)
        self._write_applied(recovery.last_seq)
        return repairs

    def _reapply_mailbox_tail(self, events: list[Event]) -> list[str]:
        """Append the mailbox lines of unapplied events that did not reach their files."""
        repairs: list[str] = []
        for box, expected in _messages_by_box(events).items():
            path = self.paths.box(box)
            present = jsonl.tail_records(path, MailboxMessage, len(expected))
            done = _applied_prefix(present, expected)
            missing = expected[done:]
            if missing:
                jsonl.append(path, [m.to_line() for m in missing])
                repairs.append(f"re-wrote {len(missing)} line(s) of {path.name}")
        return repairs

    def _reconcile_mailbox_full(self, events: list[Event]) -> list[str]:
        """With no trustworthy marker: bring each message up to its latest evented version."""
        repairs: list[str] = []
        for box, missing in self.mailbox_gaps(events).items():
            path = self.paths.box(box)
            jsonl.append(path, [m.to_line() for m in missing])
            repairs.append(f"re-wrote {len(missing)} line(s) of {path.name}")
        return repairs

    def mailbox_gaps(self, events: list[Event]) -> dict[Box, list[MailboxMessage]]:
        """Messages whose latest evented version their mailbox file lacks (or has older)."""
        gaps: dict[Box, list[MailboxMessage]] = {}
        for box, messages in _messages_by_box(events).items():
            expected = jsonl.fold(messages, _message_id)
            have = jsonl.fold(jsonl.read(self.paths.box(box), MailboxMessage).records, _message_id)
            missing = [
                m
                for m in expected.values()
                if m.id not in have
                or (have[m.id] != m and _MESSAGE_RANK[m.status] >= _MESSAGE_RANK[have[m.id].status])
            ]
            if missing:
                gaps[box] = missing
        return gaps

    def _write_snapshots(self, state: RunState, *, tasks: bool, run: bool) -> None:
        if tasks:
            task_list = state.task_list()
            data = snapshot.dump_list(TaskList, task_list)
            snapshot.write_atomic(self.paths.tasks, data)
            self._snapshots[self.paths.tasks] = (data, task_list)
        if run:
            data = snapshot.dump_model(state.run)
            snapshot.write_atomic(self.paths.manifest, data)
            self._snapshots[self.paths.manifest] = (data, state.run)


class Txn:
    """One atomic change to a run, built up in memory and written by `commit`."""

    def __init__(self, store: RunStore, state: RunState, last_seq: int, repairs: list[str]) -> None:
        self.store = store
        self.state = state
        self.at = clock.now()
        self.repairs = repairs
        #: Set by a run-wide cancel: a run that ends now ends `cancelled`.
        self.cancelling_run = False
        self._last_seq = last_seq
        self._events: list[Event] = []
        self._mail: list[MailboxMessage] = []
        self._tasks_dirty = False
        self._run_dirty = False
        self._staged: dict[Box, dict[str, MailboxMessage]] = {}
        self._initial_status = {t.id: t.status for t in state.task_list()}
        #: Messages `settle` rejected because their task ended.
        self.rejected: list[MailboxMessage] = []

    @property
    def run(self) -> Run:
        return self.state.run

    def task(self, task_id: str) -> Task:
        try:
            return self.state.tasks[task_id]
        except KeyError:
            known = ", ".join(self.state.tasks) or "none"
            raise NotFound(
                f"Run {self.run.run_id} has no task {task_id!r} (tasks: {known})."
            ) from None

    # ------------------------------------------------------------ recording

    def record(
        self,
        event_type: EventType,
        *,
        task_id: str | None = None,
        message: str | None = None,
        data: dict[str, Any] | None = None,
        task: Task | None = None,
        run: Run | None = None,
        mail: MailboxMessage | None = None,
    ) -> Event:
        """Stage an event; `task`, `run` and `mail` are new state it carries (and applies)."""
        payload = dict(data or {})
        if task is not None:
            self.state.tasks[task.id] = task
            self._tasks_dirty = True
            payload[DATA_TASK] = task.to_dict()
            task_id = task_id or task.id
        if run is not None:
            self.state.run = run
            self._run_dirty = True
            payload[DATA_RUN] = run.to_dict()
        if mail is not None:
            self._stage_mail(mail)
            payload[DATA_MESSAGE] = mail.to_dict()
            task_id = task_id or mail.task_id
        self._last_seq += 1
        event = Event(
            id=new_event_id(),
            seq=self._last_seq,
            run_id=self.run.run_id,
            at=self.at,
            type=event_type,
            task_id=task_id,
            message=message,
            data=payload or None,
        )
        self._events.append(event)
        return event

    def transition(
        self,
        task_id: str,
        status: TaskStatus,
        *,
        message: str | None = None,
        data: dict[str, Any] | None = None,
        event_type: EventType | None = None,
        mail: MailboxMessage | None = None,
        **changes: Any,
    ) -> Task:
        """Move a task to `status` (checked against the transition table), with other changes.

        `mail` is a mailbox line written with the same event (an answer and its transition).
        """
        current = self.task(task_id)
        if not can_transition(current.status, status):
            raise Refused(
                f"Task {task_id} cannot go from {current.status} to {status}.",
            )
        updated = _revise(current, {"status": status, **changes})
        self.record(
            event_type or TASK_STATUS_EVENT[status],
            task_id=task_id,
            message=message,
            data=data,
            task=updated,
            mail=mail,
        )
        return updated

    def update_task(
        self,
        task_id: str,
        event_type: EventType,
        *,
        message: str | None = None,
        data: dict[str, Any] | None = None,
        **changes: Any,
    ) -> Task:
        """Change a task's fields without changing its status."""
        updated = _revise(self.task(task_id), changes)
        self.record(event_type, task_id=task_id, message=message, data=data, task=updated)
        return updated

    def update_run(
        self,
        event_type: EventType,
        *,
        message: str | None = None,
        data: dict[str, Any] | None = None,
        **changes: Any,
    ) -> Run:
        updated = _revise(self.run, changes)
        self.record(event_type, message=message, data=data, run=updated)
        return updated

    def refresh(self, task_id: str, **volatile: Any) -> None:
        """Update fields the leader refreshes too often to log (lastOutputAt): no event."""
        unknown = set(volatile) - VOLATILE_TASK_FIELDS
        if unknown:
            raise ValueError(f"not volatile fields: {', '.join(sorted(unknown))}")
        self.state.tasks[task_id] = self.task(task_id).model_copy(update=volatile)
        self._tasks_dirty = True

    def post(
        self,
        mail: MailboxMessage,
        event_type: EventType,
        *,
        message: str | None = None,
        data: dict[str, Any] | None = None,
    ) -> MailboxMessage:
        """Write a mailbox line (a new message, or a new status of one) with its event."""
        self.record(event_type, message=message, data=data, mail=mail)
        return mail

    # ------------------------------------------------------------ mailbox view

    def messages(self, box: Box) -> Mapping[str, MailboxMessage]:
        """The folded mailbox as it will be after this transaction: the file's fold (read up to
        date) with this transaction's own lines over it, in first-seen order."""
        return ChainMap(self._staged.setdefault(box, {}), self.store.fold(box))

    def _stage_mail(self, mail: MailboxMessage) -> None:
        self._mail.append(mail)
        self._staged.setdefault(mail.kind.box, {})[mail.id] = mail

    # ------------------------------------------------------------ commit

    def commit(self) -> None:
        """Write everything staged: events (the commit point), mailbox, snapshots, marker."""
        self.settle()
        if not self._events:
            if self._tasks_dirty:  # only volatile fields changed
                self.store._write_snapshots(self.state, tasks=True, run=False)
            return
        paths = self.store.paths
        jsonl.append(paths.events, [e.to_line() for e in self._events])  # the commit point
        try:
            by_box: dict[Box, list[bytes]] = {}
            for mail in self._mail:
                by_box.setdefault(mail.kind.box, []).append(mail.to_line())
            for box, lines in by_box.items():
                jsonl.append(paths.box(box), lines)
            self.store._write_snapshots(self.state, tasks=self._tasks_dirty, run=self._run_dirty)
            self.store._write_applied(self._last_seq)
        except StoreError as error:
            raise StoreError(
                f"The change was recorded in events.jsonl, but {error.message[0].lower()}"
                f"{error.message[1:].removesuffix(' Nothing was recorded.')} The next command "
                "that changes the run completes it.",
                hint="Free some disk space, then run `crew doctor --repair` or any command.",
            ) from None

    def staged_mail(self) -> list[MailboxMessage]:
        """The mailbox lines this transaction wrote (or will write), in order."""
        return list(self._mail)

    def settle(self) -> None:
        """Apply the rules that follow from the staged changes (safe to call more than once).

        A queued task whose dependency failed or was cancelled is cancelled; messages still
        pending for a task that ended are rejected with the reason; the run's status follows its
        tasks. Does nothing when nothing was staged.
        """
        if not self._events:
            return
        self._cascade_dependencies()
        self._reject_undeliverable()
        self._settle_run_status()

    def ended_tasks(self) -> list[Task]:
        """Tasks that reached a terminal status in this transaction."""
        return [
            t
            for t in self.state.task_list()
            if t.status.terminal and not self._initial_status.get(t.id, t.status).terminal
        ]

    def _cascade_dependencies(self) -> None:
        changed = True
        while changed:
            changed = False
            for task in self.state.task_list():
                if task.status is not TaskStatus.QUEUED:
                    continue
                for dep in task.depends_on:
                    blocker = self.state.tasks.get(dep)
                    if blocker is not None and blocker.status in _BLOCKING_ENDS:
                        self.transition(
                            task.id,
                            TaskStatus.CANCELLED,
                            message=f"task {task.id} cancelled: its dependency {dep} "
                            f"{blocker.status}",
                            ended_at=self.at,
                            error=f"dependency {dep} {blocker.status}",
                        )
                        changed = True
                        break

    def _reject_undeliverable(self) -> None:
        ended = {t.id: t for t in self.ended_tasks()}
        if not ended:
            return
        for box in (Box.INBOX, Box.STEERING):
            for message in list(self.messages(box).values()):
                task = ended.get(message.task_id)
                if task is None or message.status is not MessageStatus.PENDING:
                    continue
                reason = f"task {task.status} before delivery"
                rejected = message.rejected(reason, self.at)
                self.post(
                    rejected,
                    EventType.MAILBOX_REJECTED,
                    message=f"rejected {message.kind} {message.id} to {task.id}: {reason}",
                )
                self.rejected.append(rejected)

    def _settle_run_status(self) -> None:
        """A run's status follows its tasks: ended when all are terminal, flagged when any is."""
        run = self.run
        if run.status.terminal:
            return
        tasks = self.state.task_list()
        if tasks and all(t.status.terminal for t in tasks):
            if all(t.status is TaskStatus.COMPLETED for t in tasks):
                status = RunStatus.COMPLETED
            elif self.cancelling_run:
                status = RunStatus.CANCELLED
            else:
                status = RunStatus.FAILED
            self.update_run(
                EventType.RUN_ENDED,
                message=f"run {status}",
                status=status,
                ended_at=self.at,
            )
            return
        flagged = any(t.status is TaskStatus.NEEDS_REVIEW for t in tasks)
        wanted = RunStatus.NEEDS_REVIEW if flagged else RunStatus.RUNNING
        if run.status is not wanted:
            self.update_run(
                EventType.RUN_FLAGGED if flagged else EventType.RUN_CLEARED,
                message="a task needs review" if flagged else "no task needs review",
                status=wanted,
            )


# -------------------------------------------------------------------- creating a run


def new_task(config: CrewConfig, task: TaskConfig) -> Task:
    """The initial state of a task defined in crew.toml."""
    title = task.title or _first_line(task.prompt) or task.id
    return Task(
        id=task.id,
        agent=task.agent,
        title=title,
        prompt=task.prompt,
        status=TaskStatus.QUEUED,
        depends_on=list(task.depends_on),
        attempt=0,
        max_attempts=config.max_attempts_for(task),
    )


def create_run(home: Home, config: CrewConfig, *, crew_dir: Path, session: str) -> RunStore:
    """Create a run from a validated config. It appears in `runs/` whole, or not at all."""
    make_dirs(home.runs_dir, mode=0o700)  # prompts and answers are private to the user
    for _ in range(20):
        run_id = new_run_id()
        staging = home.staging(run_id).root
        try:
            _populate(home.staging(run_id), config, crew_dir=crew_dir, session=session)
            try:
                os.rename(staging, home.runs_dir / run_id)
            except OSError:
                continue  # another run was created at the same instant: take the next one
            if fsync_enabled():
                fsync_dir(home.runs_dir)
            return RunStore(home.run(run_id))
        finally:
            if staging.exists():
                _remove_tree(staging)
    raise StoreError(f"Could not create a new run in {home.runs_dir}: no free run id.")


def _populate(paths: RunPaths, config: CrewConfig, *, crew_dir: Path, session: str) -> None:
    for folder in (paths.root, paths.mailbox_dir, paths.logs_dir, paths.runtime_dir):
        make_dirs(folder)
    at = clock.now()
    run = Run(
        run_id=paths.run_id,
        crew=config.crew.name,
        status=RunStatus.RUNNING,
        owner_session_id=session,
        leader_epoch=0,
        created_at=at,
        crew_dir=str(crew_dir),
        config=config,
    )
    tasks = [new_task(config, t) for t in config.tasks]
    events = [
        Event(
            id=new_event_id(),
            seq=1,
            run_id=run.run_id,
            at=at,
            type=EventType.RUN_CREATED,
            message=f"run of crew {run.crew} created by {session}",
            data={DATA_RUN: run.to_dict()},
        )
    ]
    for task in tasks:
        events.append(
            Event(
                id=new_event_id(),
                seq=len(events) + 1,
                run_id=run.run_id,
                at=at,
                type=EventType.TASK_QUEUED,
                task_id=task.id,
                message=f"task {task.id} queued",
                data={DATA_TASK: task.to_dict()},
            )
        )
    jsonl.append(paths.events, [e.to_line() for e in events])
    for box in Box:
        paths.box(box).touch(mode=0o644)
    store = RunStore(paths)
    store._write_snapshots(RunState(run, {t.id: t for t in tasks}), tasks=True, run=True)
    store._write_applied(len(events))


def _remove_tree(root: Path) -> None:
    for folder, dirs, files in os.walk(root, topdown=False):
        for name in files:
            (Path(folder) / name).unlink(missing_ok=True)
        for name in dirs:
            (Path(folder) / name).rmdir()
    root.rmdir()


# -------------------------------------------------------------------- folding events


def rebuild(events: list[Event]) -> RunState | None:
    """The state the event log describes: the latest run and task states it carries."""
    run: Run | None = None
    tasks: dict[str, Task] = {}
    for event in events:
        data = event.data or {}
        if DATA_RUN in data:
            run = Run.model_validate(data[DATA_RUN])
        if DATA_TASK in data:
            task = Task.model_validate(data[DATA_TASK])
            tasks[task.id] = task
    if run is None:
        return None
    return RunState(run, _ordered(run, list(tasks.values())))


def same_state(a: RunState, b: RunState) -> bool:
    """Whether two states agree, ignoring the fields the leader refreshes without an event."""
    if a.run != b.run or list(a.tasks) != list(b.tasks):
        return False
    return all(
        t.model_dump(exclude=set(VOLATILE_TASK_FIELDS))
        == b.tasks[t.id].model_dump(exclude=set(VOLATILE_TASK_FIELDS))
        for t in a.tasks.values()
    )


def _apply(state: RunState, event: Event) -> None:
    data = event.data or {}
    if DATA_RUN in data:
        state.run = Run.model_validate(data[DATA_RUN])
    if DATA_TASK in data:
        task = Task.model_validate(data[DATA_TASK])
        state.tasks[task.id] = task


def _ordered(run: Run, tasks: list[Task]) -> dict[str, Task]:
    """Tasks in crew.toml order (any unknown to the config keep their own order, after)."""
    by_id = {t.id: t for t in tasks}
    ordered = {t.id: by_id.pop(t.id) for t in run.config.tasks if t.id in by_id}
    ordered.update(by_id)
    return ordered


def _messages_by_box(events: list[Event]) -> dict[Box, list[MailboxMessage]]:
    found: dict[Box, list[MailboxMessage]] = {}
    for event in events:
        raw = (event.data or {}).get(DATA_MESSAGE)
        if raw is not None:
            mail = MailboxMessage.model_validate(raw)
            found.setdefault(mail.kind.box, []).append(mail)
    return found


class _Fold:
    """A mailbox file folded by id, brought up to date by reading only what was appended (and
    read again from the start if the file was replaced or shrank)."""

    def __init__(self, path: Path) -> None:
        self._follower = jsonl.Follower(path, MailboxMessage)
        self._messages: dict[str, MailboxMessage] = {}

    def current(self) -> dict[str, MailboxMessage]:
        poll = self._follower.poll()
        if poll.reset:
            self._messages = {}
        for message in poll.records:
            self._messages[message.id] = message
        return self._messages


def _applied_prefix(present: list[MailboxMessage], expected: list[MailboxMessage]) -> int:
    """How many of `expected` already end the file: the longest prefix matching its tail."""
    for count in range(min(len(present), len(expected)), 0, -1):
        if present[len(present) - count :] == expected[:count]:
            return count
    return 0


def _message_id(message: MailboxMessage) -> str:
    return message.id


def _first_line(text: str, limit: int = 80) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _detail(exc: Corrupt) -> str:
    text = exc.message
    start, end = text.find("("), text.rfind(")")
    return text[start + 1 : end] if 0 <= start < end else text


def _check_version(path: Path, run: Run) -> None:
    if run.state_version > STATE_VERSION:
        raise Refused(
            f"{path} was written by a newer crew (state version {run.state_version}; "
            f"this crew reads up to {STATE_VERSION}).",
            hint="Upgrade crew to work with this run.",
        )


def _revise(model: _Model, changes: dict[str, Any]) -> _Model:
    """A copy of `model` with `changes`, validated like anything read from disk."""
    return type(model).model_validate({**model.model_dump(by_alias=False), **changes})
