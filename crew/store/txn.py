"""One atomic change to a run: staged in memory, written in write-ahead order by `commit`.

A transaction knows how to record a change, not which changes are allowed: the rules (task
transitions, message life-cycles, the gate) live in crew.domain, which stages changes here.
Commit writes, in this order:

1. every event of the transaction, in **one** `write()` to events.jsonl — the commit point
   (framed by `endSeq`, so a write cut short is told apart from a whole one: see eventlog.py);
2. the mailbox lines, one `write()` per mailbox file (a message's change records only what
   changed: crew/store/mailfile.py);
3. the snapshot of each task it changed (`tasks/<taskId>.json`), manifest.json if the run
   changed, and checkpoints (atomic replace; a transaction never rewrites what it did not
   change, so it costs the same whatever the number of tasks);
4. `.runtime/applied`: the last seq the files now reflect, and the logs' sizes.

Only step 1 is fsynced: everything after it can be derived from the log, and a power cut that
loses a later write is found through the marker (which names its boot) and repaired from the log
(docs/design.md, "Durability").

A crash between 1 and 4 leaves events that the other files do not reflect yet; the next writer
(and every reader, in memory) rolls them forward from the events, which carry the new state.
"""

from __future__ import annotations

from collections import ChainMap
from collections.abc import Callable, Collection, Mapping
from typing import TYPE_CHECKING, Any

from crew import clock
from crew.errors import StoreError, from_os_error
from crew.ids import new_event_id
from crew.models import Checkpoint, Event, MailboxMessage, Run, Task
from crew.registry import Box, EventData, EventType, MessageData, MessageKind, MessageStatus
from crew.store import eventlog, jsonl, mailfile
from crew.store.files import fsync_derived
from crew.store.fold import MailboxFold
from crew.store.state import VOLATILE_TASK_FIELDS, RunState

if TYPE_CHECKING:
    from crew.store.pending import KeyIndex
    from crew.store.runstore import RunStore


class Txn:
    """A change to one run, built up in memory under the run lock."""

    def __init__(self, store: RunStore, state: RunState, last_seq: int, repairs: list[str]) -> None:
        self.store = store
        self.state = state
        #: The state as the transaction found it.
        self.before = state.copy()
        self.at = clock.now()
        #: What recovery repaired before the transaction began.
        self.repairs = repairs
        self._last_seq = last_seq
        self._events: list[Event] = []
        self._mail: list[MailboxMessage] = []
        #: The mailbox lines that record them (a change records only what changed).
        self._lines: list[mailfile.Line] = []
        #: The tasks whose snapshot files this transaction rewrites.
        self._dirty_tasks: set[str] = set()
        self._run_dirty = False
        self._staged: dict[Box, dict[str, MailboxMessage]] = {}
        self._checkpoints: list[Checkpoint] = []
        self._caused_by: dict[str, str] = {}
        #: The mailbox folds this transaction has read up to date: under the lock no other
        #: writer appends, so once is enough.
        self._folds: dict[Box, MailboxFold] = {}
        #: The key indexes a keyed lookup read (`keyed`), saved if the transaction commits.
        self._key_indexes: list[KeyIndex] = []
        #: Where its events begin in events.jsonl, once committed.
        self.events_at: int | None = None

    @property
    def run(self) -> Run:
        return self.state.run

    def task(self, task_id: str) -> Task:
        """The task's state as this transaction sees it (NotFound if the run has no such task)."""
        return self.state.task(task_id)

    @property
    def next_seq(self) -> int:
        """The seq the next event recorded in this transaction will get."""
        return self._last_seq + 1

    def changed_tasks(self) -> list[Task]:
        """The tasks this transaction changed, as they are now, in the run's task order."""
        tasks = self.state.tasks
        if len(self._dirty_tasks) < 2:
            return [tasks[t] for t in self._dirty_tasks]
        return [t for t in tasks.values() if t.id in self._dirty_tasks]

    @property
    def changed(self) -> bool:
        """Whether anything has been recorded."""
        return bool(self._events)

    def caused_by(self, who: dict[str, str]) -> None:
        """Say who asked for this change: every event recorded from now on carries `who` in its
        data (`session`, and `defaultSession` when it differs)."""
        self._caused_by = dict(who)

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
        was: MailboxMessage | None = None,
        checkpoint: Checkpoint | None = None,
    ) -> Event:
        """Stage an event; `task`, `run`, `mail` and `checkpoint` are new state it carries (and
        applies). `was`: the message's state before `mail`, which then records (in its mailbox
        file and in the event) only what changed."""
        payload = {**self._caused_by, **(data or {})}
        if task is not None:
            self.state.put(task)
            self._dirty_tasks.add(task.id)
            payload[EventData.TASK] = task.to_dict()
            task_id = task_id or task.id
        if run is not None:
            self.state.run = run
            self._run_dirty = True
            payload[EventData.RUN] = run.to_dict()
        if mail is not None:
            line = mail if was is None else mailfile.change_line(was, mail)
            self._mail.append(mail)
            self._lines.append(line)
            self._staged.setdefault(mail.kind.box, {})[mail.id] = mail
            payload[EventData.MESSAGE] = line.to_dict()
            task_id = task_id or mail.task_id
        if checkpoint is not None:
            self._checkpoints.append(checkpoint)
            payload[EventData.CHECKPOINT] = checkpoint.to_dict()
            task_id = task_id or checkpoint.task_id
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

    def refresh(self, task_id: str, **volatile: Any) -> None:
        """Update fields the leader refreshes too often to log (lastOutputAt): no event."""
        unknown = set(volatile) - VOLATILE_TASK_FIELDS
        if unknown:
            raise ValueError(f"not volatile fields: {', '.join(sorted(unknown))}")
        self.state.put(self.task(task_id).model_copy(update=volatile))
        self._dirty_tasks.add(task_id)

    def messages(self, box: Box) -> Mapping[str, MailboxMessage]:
        """The folded mailbox as it will be after this transaction: the file's fold (read up to
        date) with this transaction's own lines over it, in first-seen order."""
        folded = self._read(box).as_read()  # a lean store's is read-only, and reads some back
        return ChainMap(self._staged.setdefault(box, {}), folded)  # type: ignore[arg-type]

    def message(self, box: Box, message_id: str) -> MailboxMessage | None:
        """A message of a mailbox file, by id, as it will be after this transaction."""
        staged = self._staged.get(box, {}).get(message_id)
        return staged if staged is not None else self._read(box).get(message_id)

    def of_task(self, box: Box, task_id: str) -> list[MailboxMessage]:
        """A task's messages in a mailbox file as they will be after this transaction, in
        first-seen order (as `messages` lists them), in time that grows with them alone."""
        found = (self.message(box, i) for i in self._ids_of_task(box, task_id))
        return [m for m in found if m is not None]

    def last_of_task(self, box: Box, task_id: str, kind: MessageKind) -> MailboxMessage | None:
        """A task's last message of `kind` in a mailbox file (as `of_task` orders them), as it
        will be after this transaction; what comes before it is not read (a lean store reads
        back each message it does not hold)."""
        for message_id in reversed(self._ids_of_task(box, task_id)):
            message = self.message(box, message_id)
            if message is not None and message.kind is kind:
                return message
        return None

    def _ids_of_task(self, box: Box, task_id: str) -> list[str]:
        """The ids of a task's messages in a mailbox file, those this transaction wrote first
        last."""
        ids = self._read(box).of_task(task_id)
        known = set(ids)
        new = [i for i, m in self._staged.get(box, {}).items() if m.task_id == task_id]
        return [*ids, *(i for i in new if i not in known)]

    def keyed(self, box: Box, key: str) -> MailboxMessage | None:
        """The message of a mailbox file first sent under idempotency key `key`, as it will be
        after this transaction, in time independent of the messages."""

        def match(message: MailboxMessage) -> bool:
            return (message.data or {}).get(MessageData.IDEMPOTENCY_KEY) == key

        if box not in self._folds and not self.store.lean_mail and self._never_carried(box, key):
            return self._indexed(box, None, match)  # this transaction's own messages alone
        return self._indexed(box, self._read(box).keyed(key), match)

    def _never_carried(self, box: Box, key: str) -> bool:
        """Whether the key index in `.runtime/` (crew/store/pending.py) says no message of the
        file carried `key`: a one-shot command learns it without reading every message through
        the models (3 s at 100,000 messages), as the fast path does. False if it cannot say (a
        line it does not read: the fold reads the file, and says why)."""
        from crew.store.pending import KeyIndex

        paths = self.store.paths
        index = KeyIndex(str(paths.box(box)), str(paths.key_index(box)))
        try:
            index.advance(save=False)  # saved if the transaction commits: a refusal writes nothing
            found = index.carried(key)
        except ValueError:  # BadLine, Unreadable
            index.close()
            return False
        self._key_indexes.append(index)
        return found is None

    def asking(self, contact_id: str) -> MailboxMessage | None:
        """The outbox message that asked question `contact_id` (None if there is none)."""
        return self._indexed(
            Box.OUTBOX,
            self._read(Box.OUTBOX).asking(contact_id),
            lambda m: (
                m.kind is MessageKind.CONTACT
                and (m.data or {}).get(MessageData.CONTACT_ID) == contact_id
            ),
        )

    def _indexed(
        self, box: Box, message_id: str | None, match: Callable[[MailboxMessage], bool]
    ) -> MailboxMessage | None:
        """The message a fold's index names; if it names none, the first this transaction wrote
        that `match`es."""
        if message_id is None:
            message_id = next((m.id for m in self._staged.get(box, {}).values() if match(m)), None)
        return None if message_id is None else self.message(box, message_id)

    def pending(self, box: Box, *task_ids: str) -> list[MailboxMessage]:
        """The tasks' messages in a mailbox file that will be pending after this transaction, in
        first-seen order (as `messages` lists them), in time that grows with the pending ones
        alone."""
        fold = self._read(box)
        staged = self._staged.get(box, {})
        latest = {**fold.pending, **staged}
        wanted = set(task_ids)
        found = [
            m for m in latest.values() if m.task_id in wanted and m.status is MessageStatus.PENDING
        ]
        # a message first written by this transaction comes after the rest, in its order
        new = {message_id: index for index, message_id in enumerate(staged)}

        def place(message: MailboxMessage) -> tuple[int, int]:
            at = fold.place(message.id)
            return (0, at) if at is not None else (1, new.get(message.id, len(new)))

        found.sort(key=place)
        return found

    def pending_count(self, box: Box, task_id: str, kinds: Collection[MessageKind]) -> int:
        """How many of a task's messages of these kinds in a mailbox file will be pending after
        this transaction, in time independent of them."""
        fold = self._read(box)
        count = sum(fold.counts[task_id, kind] for kind in kinds)
        if box not in self._staged:
            return count
        before = fold.pending
        for message_id, message in self._staged[box].items():
            was = before.get(message_id)
            if was is not None and was.task_id == task_id and was.kind in kinds:
                count -= 1
            if message.task_id == task_id and message.kind in kinds:
                count += message.status is MessageStatus.PENDING
        return count

    def _read(self, box: Box) -> MailboxFold:
        """A mailbox file's fold, read up to date once in this transaction."""
        fold = self._folds.get(box)
        if fold is None:
            fold = self._folds[box] = self.store.mail(box)
        return fold

    def staged_mail(self) -> list[MailboxMessage]:
        """The mailbox lines this transaction wrote (or will write), in order."""
        return list(self._mail)

    def commit(self) -> None:
        """Write everything staged: events (the commit point), mailbox, snapshots, marker."""
        if self._events:  # a cache of what the files held before, saved by a change alone: a
            for index in self._key_indexes:  # replay writes nothing (best effort)
                index.save_if_behind()
        store = self.store
        if not self._events:
            if self._dirty_tasks:  # only volatile fields changed
                store.write_snapshots(self.state, tasks=self._dirty_tasks, run=False)
                store.write_applied(
                    self._last_seq, tasks=len(self.state.tasks), events_size=self._events_size()
                )
                store.remember(self.state)
            return
        paths = store.paths
        self._events = eventlog.framed(self._events)
        lines = [e.to_line() for e in self._events]
        start = jsonl.append(paths.events, lines)  # the commit point: fsynced, the only file
        self.events_at = start
        try:
            by_box: dict[Box, list[mailfile.Line]] = {}
            for line in self._lines:
                by_box.setdefault(line.kind.box, []).append(line)
            ends: dict[Box, int] = {}
            for box, box_lines in by_box.items():
                raw = [line.to_line() for line in box_lines]
                at = jsonl.append(paths.box(box), raw, durable=fsync_derived())
                sizes = [len(r) for r in raw]
                ends[box] = at + sum(sizes)
                store.wrote_mail(box, at, box_lines, sizes)
            store.write_snapshots(self.state, tasks=self._dirty_tasks, run=self._run_dirty)
            for checkpoint in self._checkpoints:
                store.write_checkpoint(checkpoint)
            store.write_applied(
                self._last_seq,
                tasks=len(self.state.tasks),
                events_size=start + sum(map(len, lines)),
                ends=ends,
            )
            store.remember(self.state, snapshots=bool(self._dirty_tasks) or self._run_dirty)
        except (StoreError, OSError) as error:
            raise committed_error(error) from None

    def close(self) -> None:
        """The transaction is over, committed or not: let go of what it held open."""
        for index in self._key_indexes:
            index.close()
        self._key_indexes = []

    def _events_size(self) -> int | None:
        """events.jsonl's size as this transaction's recovery checked it (None: unknown)."""
        known = self.store.known
        return known.events_size if known is not None else None


def committed_error(error: StoreError | OSError) -> StoreError:
    """What to say when a transaction's events were written but a file after them was not."""
    text = error.message if isinstance(error, StoreError) else str(from_os_error(error))
    return StoreError(
        f"The change was recorded in events.jsonl, but {text[0].lower()}"
        f"{text[1:].removesuffix(' Nothing was recorded.')} The next command "
        "that changes the run completes it.",
        hint="Free some disk space, then run `crew doctor --repair` or any command.",
        errno=error.errno,
        committed=True,
    )
