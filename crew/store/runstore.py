"""A run's files: consistent reads without a lock, changes in locked transactions, recovery.

events.jsonl is the write-ahead log and the source of truth (see crew/store/txn.py for the order
of a commit). `.runtime/applied` records the last seq the snapshots and mailbox reflect, so
finding an interrupted write costs a read of the log's last line and of the marker: O(1) in the
length of the history. Every reader applies a missing tail in memory; every writer completes it
on disk before doing anything else, so only the last transaction can ever be incomplete.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Collection, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

from crew.errors import Corrupt, CrewTimeout, NotFound, StaleLeader, StoreError
from crew.models import Checkpoint, Event, MailboxMessage, Run, Task
from crew.paths import Home, RunPaths
from crew.registry import Box, EventType
from crew.store import eventlog, jsonl, mailbox_repair, mailfile, marker, snapshot
from crew.store.files import (
    boot_id,
    fsync_derived,
    make_dirs,
    read_bytes,
    refuse_link,
    refuse_writable_by_others,
)
from crew.store.fold import MailboxFold
from crew.store.lock import lock_timeout, locked
from crew.store.pin import Pin
from crew.store.snapshots import Identity, Snapshots
from crew.store.state import (
    LogsRead,
    Recovery,
    RunState,
    apply_event,
    checkpoints_in,
    describe_cut,
    ordered,
    rebuild,
    same_state,
    shown,
)
from crew.store.txn import Txn

Settle = Callable[[Txn], None]
#: How long a reader waits for a writer to finish before reporting what it saw.
READER_WAIT = 2.0
#: Run.leader_epoch as manifest.json spells it.
_EPOCH_KEY = "leaderEpoch"


class RunStore:
    """One run on disk."""

    def __init__(self, paths: RunPaths, *, lean_mail: bool = False) -> None:
        """`lean_mail`: keep only pending messages in memory (crew/store/fold.py)."""
        _check_folders(paths)
        self.paths = paths
        self.lean_mail = lean_mail
        #: manifest.json and the task files, each validated once per content.
        self.snapshots = Snapshots(paths)
        #: Each mailbox file folded by id, kept up to date by reading only what was appended.
        self._folds: dict[Box, MailboxFold] = {}
        #: The marker as this store last found it true (read and checked, or written), and the
        #: state the files held then: while the marker is unchanged, that state is the run's,
        #: and nothing needs reading but the marker and the files' sizes.
        self._known: marker.Applied | None = None
        self._known_state: RunState | None = None
        #: The snapshots' identity (inode, size, mtime) when `_known_state` was taken: a file
        #: edited or replaced outside a transaction is read again.
        self._known_files: Identity | None = None

    @property
    def run_id(self) -> str:
        return self.paths.run_id

    @classmethod
    def open(cls, home: Home, ref: str) -> RunStore:
        """The run named by `ref` (`latest`, an id or a unique prefix)."""
        return cls(home.resolve_run(ref))

    # ---------------------------------------------------------------- reading

    def load(self) -> Recovery:
        """The run's current state, correct even after a crash mid-write (nothing is written).

        Files the marker does not describe are most often a writer between its commit point and
        its last file, holding the lock: the reader waits for it (briefly) before it looks
        closer, so a write cut short is all it reports, and a reader that woke in the middle of
        a write never checks the whole run against its log.
        """
        clean = self._recover_clean()
        if clean is not None:
            return clean
        try:
            with locked(self.paths.lock, timeout=min(lock_timeout(), READER_WAIT)):
                recovery = self.recover()
                if self._all_checked(recovery):
                    # the next reader need not check
                    self.write_applied(recovery.last_seq, tasks=len(recovery.state.tasks))
                    self.remember(recovery.state.copy())
                return recovery
        except (CrewTimeout, StoreError, OSError):  # a busy lock, or a folder it cannot write
            recovery = self.recover()
            recovery.unrecorded = {}  # read unlocked: a line appended since the log was read
            return recovery

    def _all_checked(self, recovery: Recovery) -> bool:
        """Whether a full check found every file as the log describes it (nothing to repair):
        then a reader may write the marker, as a writer would."""
        return (
            recovery.full
            and not (recovery.broken or recovery.mismatch or recovery.gaps or recovery.cut)
            and not recovery.unrecorded
            and recovery.history_missing is None
            and all(
                self.checkpoint(c.task_id) == c for c in checkpoints_in(recovery.unapplied).values()
            )
        )

    def state(self) -> RunState:
        return self.load().state

    def events(self, *, offset: int = 0) -> jsonl.ReadResult[Event]:
        """The events of whole transactions (one cut short by a crash is not history)."""
        return eventlog.read(self.paths.events, offset=offset)

    def messages(self, box: Box | None = None) -> list[MailboxMessage]:
        """Mailbox messages folded by id (each line merged into the message's state), in
        first-seen order."""
        boxes = [box] if box is not None else list(Box)
        return [m for each in boxes for m in self.fold(each).values()]

    def fold(self, box: Box) -> Mapping[str, MailboxMessage]:
        """The latest state of each message of a mailbox file (do not change the result)."""
        return self._fold_of(box).current()

    def mail(self, box: Box) -> MailboxFold:
        """A mailbox file's fold, read up to date: its messages, the pending ones and their
        counts, and what they are indexed by (do not change any of it)."""
        fold = self._fold_of(box)
        fold.current()
        return fold

    def wrote_mail(
        self, box: Box, start: int, lines: list[mailfile.Line], sizes: list[int]
    ) -> None:
        """A transaction of this store appended `lines` at byte `start` of a mailbox file: its
        fold takes them without reading them back. Locked."""
        fold = self._folds.get(box)
        if fold is not None:
            fold.wrote(start, lines, sizes)

    def follow_mail(
        self, box: Box, listener: Callable[[MailboxMessage], None], reset: Callable[[], None]
    ) -> None:
        """Give `listener` each message's latest state now (a lean store's: those it keeps), then
        each new state this store reads: one reading of the file serves both. `reset` is called
        before the file is read again from its start (a repair replaced it)."""
        fold = self._fold_of(box)
        known = fold.current()
        for message in fold.kept() if fold.lean else known.values():
            listener(message)
        fold.listeners.append(listener)
        fold.resets.append(reset)

    def place(self, message: MailboxMessage) -> int:
        """Where a message was first written in its mailbox file (after all, if not yet read)."""
        place = self._fold_of(message.kind.box).place(message.id)
        return sys.maxsize if place is None else place

    def _fold_of(self, box: Box) -> MailboxFold:
        if box not in self._folds:
            self._folds[box] = MailboxFold(self.paths.box(box), lean=self.lean_mail)
        return self._folds[box]

    def peek_epoch(self) -> int | None:
        """The manifest's leader epoch, read cheaply (None if it cannot be read)."""
        try:
            value = json.loads(read_bytes(self.paths.manifest)).get(_EPOCH_KEY)
        except (OSError, ValueError, AttributeError):
            return None
        return value if isinstance(value, int) else None

    def checkpoint(self, task_id: str) -> Checkpoint | None:
        """The last state a task saved (None if it never did, or the file cannot be read)."""
        try:
            return Checkpoint.model_validate_json(read_bytes(self.paths.checkpoint(task_id)))
        except (OSError, ValueError):
            return None

    def history(self, box: Box, skipped: list[jsonl.BadLine] | None = None) -> list[MailboxMessage]:
        """Every line of a mailbox file as the state it leaves its message in: each change of
        each message, in order (the lines it skipped added to `skipped`, when given)."""
        return mailfile.history(self.paths.box(box), skipped)

    # ---------------------------------------------------------------- writing

    def lock(self) -> AbstractContextManager[None]:
        """The run's mutation lock (with the default timeout)."""
        return locked(self.paths.lock)

    @contextmanager
    def transaction(
        self, *, epoch: int | None = None, settle: Settle | None = None
    ) -> Iterator[Txn]:
        """Change the run under its lock. Nothing is written unless the block finishes.

        `epoch` fences a leader: if the manifest names a newer leader epoch, StaleLeader is raised
        before anything is written. `settle` runs just before the commit (crew.domain uses it to
        apply the rules that follow from the staged changes).
        """
        if self._known is None and not (self.paths.manifest.exists() or self.paths.events.exists()):
            raise NotFound(f"Run {self.run_id} has no state files at {self.paths.root}.")
        with self.lock():
            recovery = self.recover()
            recovery.check_changeable(self.run_id)
            repairs = self.apply_recovery(recovery)
            if epoch is not None and recovery.state.run.leader_epoch != epoch:
                raise StaleLeader(
                    f"Run {self.run_id} is now led by epoch {recovery.state.run.leader_epoch}, "
                    f"not {epoch}: this leader was taken over and stops without writing."
                )
            txn = Txn(self, recovery.state, recovery.last_seq, repairs)  # a state of its own
            if repairs:
                txn.record(
                    EventType.STATE_REPAIRED,
                    message=f"repaired the run's files: {'; '.join(repairs)}",
                    data={"repairs": repairs},
                )
            try:
                yield txn
                if settle is not None and txn.changed:
                    settle(txn)
                txn.commit()
            finally:
                txn.close()

    def write_snapshots(self, state: RunState, *, tasks: bool | Collection[str], run: bool) -> None:
        """Replace manifest.json (if `run`) and the files of the tasks named (`tasks=True`:
        every task). Caller holds the lock."""
        named: Collection[str] = () if isinstance(tasks, bool) else tasks
        # A run an older crew made is converted by its first writer, whatever that writes.
        every = tasks is True or self.snapshots.legacy
        chosen = state.task_list() if every else [state.tasks[t] for t in named]
        self.snapshots.write(state.run if run else None, chosen, every_task=every)

    def write_checkpoint(self, checkpoint: Checkpoint) -> None:
        """Replace a task's checkpoint file. Caller holds the lock."""
        make_dirs(self.paths.checkpoints_dir)
        path = self.paths.checkpoint(checkpoint.task_id)
        snapshot.write_atomic(path, snapshot.dump_model(checkpoint), durable=fsync_derived())

    def write_applied(
        self,
        seq: int,
        *,
        tasks: int,
        events_size: int | None = None,
        ends: dict[Box, int] | None = None,
    ) -> None:
        """Record the last seq the files reflect, the files' sizes, and that they hold `tasks`
        task snapshots. Locked. A transaction that began on a marker it checked passes the
        sizes its appends ended at (`events_size`, `ends`): nothing needs measuring."""
        base = self._known
        if base is not None and events_size is not None:
            applied = marker.advanced(base, seq, events_size, ends or {}, tasks)
        else:
            applied = marker.measured(self.paths, seq, base or marker.read(self.paths), tasks)
        self._known, self._known_state = None, None  # until the marker is written
        marker.write(self.paths, applied)
        self._known = applied

    @property
    def known(self) -> marker.Applied | None:
        """The marker as this store last found it true (None: not since its last doubt)."""
        return self._known

    def remember(self, state: RunState, *, snapshots: bool = True) -> None:
        """The files now hold `state`, as the marker just written says; `snapshots`: a snapshot
        was written, so their identity is taken again (else it is as the write found it: a file
        someone else changed meanwhile is then read again, not taken for `state`)."""
        self._known_state = state if self._known is not None else None
        if snapshots or self._known_files is None:
            self._known_files = self.snapshots.identity()

    def forget(self) -> None:
        """What this store knew of the files may be wrong (a write failed half-way)."""
        self._known, self._known_state = None, None

    def adopt(self, other: RunStore) -> None:
        """Start from what `other`, a store of the same run's files (the run being created, at
        the folder it was assembled in), last knew of them: its next read checks the marker, the
        logs' sizes and the snapshots' identity as always, and validates nothing if they are
        unchanged (a new leader's store would otherwise read every task file again)."""
        if other._known is not None and other._known_state is not None:
            self._known, self._known_state = other._known, other._known_state.copy()
            self._known_files = other._known_files

    # ---------------------------------------------------------------- recovery

    def recover(
        self, *, full: bool = False, pin: Pin | None = None, read: LogsRead | None = None
    ) -> Recovery:
        """Load the state; `full` checks the snapshots and mailbox against the whole event log
        (`read`: the logs as the caller read them, checked). With a `pin` (taken under the
        lock), that check reads the files as pinned, and needs no lock (crew/store/pin.py)."""
        if not full and pin is None:
            clean = self._recover_clean()
            if clean is not None:
                return clean
        self.forget()
        full = full or pin is not None
        events_end = pin.end(self.paths.events) if pin is not None else None
        end = eventlog.tail(self.paths.events, end=events_end)
        last_seq, cut = end.last_seq, end.cut
        applied = marker.read(self.paths) if pin is None else pin.applied  # as the logs' ends
        run, tasks, broken = self._read_snapshots(pin)
        shown = (
            RunState(run, ordered(run, tasks)) if run is not None and tasks is not None else None
        )
        if shown is not None and applied is not None and not full:
            if marker.describes(applied, self.paths, last_seq, len(shown.tasks)):
                return Recovery(shown, last_seq, cut=cut)
            if applied.seq < last_seq:
                unapplied = eventlog.after(self.paths.events, applied.seq)
                for event in unapplied:
                    apply_event(shown, event)
                return Recovery(shown, last_seq, unapplied=unapplied, cut=cut)
            if applied.seq > last_seq:
                return Recovery(shown, last_seq, history_gap=applied.seq, cut=cut)
        gap = applied.seq if applied is not None and applied.seq > last_seq else None
        # No trustworthy marker (missing, torn, of another boot: a power cut may have lost what
        # was not fsynced), unreadable snapshots, or a mailbox file changed: check it all.
        rebuilt = rebuild(events := self._whole_transactions(read, events_end))
        if rebuilt is None:
            if shown is not None:  # every run's log begins with its record: this one is lost
                return Recovery(shown, last_seq, full=True, cut=cut, history_lost=True)
            raise Corrupt(
                f"Run {self.run_id} has no readable state: its snapshots are "
                f"{'unreadable' if broken else 'missing'} and events.jsonl holds no run record.",
                hint=f"Look at {self.paths.root}; `crew doctor` lists what is damaged.",
            )
        mismatch = shown is not None and not same_state(shown, rebuilt)
        if shown is not None and not mismatch:
            rebuilt = shown  # identical, and it keeps the volatile fields
        mail = read.mail if read is not None else None
        gaps, unrecorded = mailbox_repair.compare(self.paths, events, pin, mail)
        return Recovery(
            rebuilt,
            last_seq,
            unapplied=events,
            full=True,
            broken=broken,
            mismatch=mismatch,
            history_gap=gap,
            cut=cut,
            gaps=gaps,
            unrecorded={} if gap is not None else unrecorded,  # lines of the events cut back
        )

    def is_current(self) -> bool:
        """Whether the files are as this store last read or wrote them: the marker, the logs'
        sizes and the snapshots' identity unchanged (a leader woken by its own writes)."""
        known = self._known
        if known is None or self._known_state is None or marker.read(self.paths) != known:
            return False
        try:
            events_size = os.stat(self.paths.events).st_size
        except FileNotFoundError:
            return False
        return (
            events_size == known.events_size
            and marker.mailbox_sizes(self.paths) == known.sizes
            and self.snapshots.identity() == self._known_files
        )

    def _whole_transactions(self, read: LogsRead | None, end: int | None) -> list[Event]:
        """The events of whole transactions, checked: of those the caller read, or read now."""
        if read is None:
            return eventlog.read(self.paths.events, end=end, checked=True).records
        return read.events[: eventlog.whole(read.events)]

    def _recover_clean(self) -> Recovery | None:
        """The state, when the marker says the files reflect the whole log and it was written
        in this boot: a read of the marker and a `stat` of each log, and of the snapshots only
        if they changed since this store last knew them. None: look closer."""
        applied = marker.read(self.paths)
        if applied is None or applied.boot != boot_id():
            return None
        try:
            events_size = os.stat(self.paths.events).st_size
        except FileNotFoundError:
            return None
        if events_size != applied.events_size or applied.sizes != marker.mailbox_sizes(self.paths):
            return None
        identity = self.snapshots.identity()
        if (
            applied == self._known
            and self._known_state is not None
            and identity is not None
            and identity == self._known_files
        ):
            return Recovery(self._known_state.copy(), applied.seq)
        run, tasks, _broken = self._read_snapshots()
        if run is None or tasks is None or marker.read(self.paths) != applied:
            return None  # damaged, or changed while read: look closer
        if applied.tasks not in (None, len(tasks)):
            return None  # a task file deleted (or one put there): the log says which
        state = RunState(run, ordered(run, tasks))
        self._known, self._known_state, self._known_files = applied, state, identity
        return Recovery(state.copy(), applied.seq)

    def apply_recovery(self, recovery: Recovery) -> list[str]:
        """Under the lock: make the files reflect the recovered state. Returns what was repaired
        (nothing with history missing: marked applied, events would be numbered over it)."""
        if recovery.clean or recovery.history_missing is not None:
            return []
        repairs: list[str] = []
        if recovery.cut:  # first: the next append must not follow half a transaction
            jsonl.set_aside_last(self.paths.events, len(recovery.cut))
            repairs.append(f"set aside {describe_cut(recovery.cut)} to events.jsonl.corrupt")
        for path, why in recovery.broken:
            if why == "missing":
                repairs.append(f"{shown(path)} was missing; rebuilt it from events.jsonl")
            else:
                moved = snapshot.quarantine(path)
                repairs.append(
                    f"{shown(path)} was corrupt ({why}); set it aside as {moved.name} and "
                    "rebuilt it"
                )
        if recovery.mismatch:
            repairs.append("rewrote the task files and manifest.json to match events.jsonl")
        repairs.extend(self._rewrite_checkpoints(recovery.unapplied))
        if recovery.full:
            repairs.extend(mailbox_repair.rewrite_gaps(self.paths, recovery.gaps))
        else:
            repairs.extend(mailbox_repair.reapply_tail(self.paths, recovery.unapplied))
            if recovery.unapplied:
                repairs.append(
                    f"completed an interrupted write ({len(recovery.unapplied)} event(s))"
                )
        if (recovery.unapplied and not recovery.full) or recovery.broken or recovery.mismatch:
            self.write_snapshots(recovery.state, tasks=True, run=True)
            repairs.extend(self.snapshots.set_aside_strays(recovery.state.tasks))
        self.write_applied(recovery.last_seq, tasks=len(recovery.state.tasks))
        self.remember(recovery.state.copy())
        removed = snapshot.remove_leftovers(*self.temp_folders())
        if removed:
            repairs.append(f"removed {len(removed)} temp file(s) of interrupted writes")
        return repairs

    def temp_folders(self) -> tuple[Path, ...]:
        """Where atomic writes put their temp files (a mailbox file's: a repair rewriting it)."""
        return (
            self.paths.root,
            self.paths.tasks_dir,
            self.paths.checkpoints_dir,
            self.paths.runtime_dir,
            self.paths.mailbox_dir,
            self.paths.task_twins_dir,
        )

    def _read_snapshots(
        self, pin: Pin | None = None
    ) -> tuple[Run | None, list[Task] | None, list[tuple[Path, str]]]:
        if pin is None:
            return self.snapshots.read(*self.snapshots.read_raw())
        return self.snapshots.read(pin.manifest, pin.tasks, pin.legacy)

    def _rewrite_checkpoints(self, events: list[Event]) -> list[str]:
        """Write the latest checkpoint the events carry where its file does not hold it."""
        repairs: list[str] = []
        for checkpoint in checkpoints_in(events).values():
            if self.checkpoint(checkpoint.task_id) == checkpoint:
                continue
            self.write_checkpoint(checkpoint)
            repairs.append(f"re-wrote {self.paths.checkpoint(checkpoint.task_id).name}")
        return repairs


def _check_folders(paths: RunPaths) -> None:
    """Refused if the run's folders are links, or other users may write to the state folder
    (crew/store/files.py says why)."""
    for folder in (
        paths.root,
        paths.tasks_dir,
        paths.mailbox_dir,
        paths.logs_dir,
        paths.checkpoints_dir,
        paths.runtime_dir,
    ):
        refuse_link(folder)
    for folder in (paths.home.state_dir, paths.home.runs_dir, paths.root):
        refuse_writable_by_others(folder)
