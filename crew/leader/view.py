"""What the leader knows of its run: the state, kept current from the files others write and from
its own transactions, the messages waiting for each task, and output times not yet written."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial

from crew import domain
from crew.errors import StoreError
from crew.leader.schedule import Pending
from crew.models import Event
from crew.registry import INBOUND_BOXES
from crew.store import eventlog
from crew.store.runstore import RunStore
from crew.store.spill import Rounds
from crew.store.state import RunState
from crew.store.txn import Txn

OnEvents = Callable[[list[Event]], None]
#: lastOutputAt changes with every line a worker prints: it is written at most this often.
FLUSH_EVERY = 1.0


class RunView:
    """The run as one leader (of one epoch) sees it."""

    def __init__(
        self,
        store: RunStore,
        epoch: int,
        on_events: OnEvents | None = None,
        *,
        events_from: int = 0,
    ) -> None:
        """`on_events` is given the events of whole transactions from byte `events_from` of
        events.jsonl on, as they come (`report_events`)."""
        self.store = store
        self.epoch = epoch
        self.state: RunState = store.state()
        self.pending = Pending(store.place, Rounds() if store.lean_mail else None)
        self._on_events = on_events
        for box in INBOUND_BOXES:
            store.follow_mail(box, self.pending.adopt, partial(self.pending.forget, box))
        self._events = eventlog.Follower(store.paths.events, offset=events_from)
        #: Workers' latest output times (task id -> timestamp), not yet in their task files.
        self._output_times: dict[str, str] = {}
        self._next_flush = 0.0
        #: A change that reached the event log while the files that mirror it could not be
        #: written (a full disk): the next change completes them.
        self._incomplete: StoreError | None = None
        #: The marker that named the state this view holds (None: unknown, read again).
        self._seen = store.known

    @contextmanager
    def change(self) -> Iterator[Txn]:
        """A transaction fenced by the leader's epoch (a leader taken over writes nothing);
        once it commits, its state and mailbox lines are what the leader knows. A change that
        reached the event log is made, even if the files that mirror it could not be written
        (see `take_incomplete`)."""
        try:
            with domain.change(self.store, epoch=self.epoch) as txn:
                yield txn
        except StoreError as error:
            if not error.committed:
                raise
            self._incomplete = error
        self.state = txn.state
        self._seen = self.store.known
        for message in txn.staged_mail():
            self.pending.adopt(message)
        # The state read under the lock may reflect others' writes (an answer that closed the
        # question): take their mailbox lines too, or what is due could skip the answer.
        self._read_mailbox()

    def refresh(self) -> None:
        """Re-read the snapshots, then whatever the mailbox files gained.

        Writers append events, then mailbox lines, then snapshots; reading the snapshots first
        means the mailbox read next is at least as new as them. State that exists only in the
        event log (a write in progress, or one a crash cut short) is never acted on: the leader
        waits for that writer under the run lock (or completes its write) and reads again. Files
        a crash or a person damaged (a mailbox file cut short) are repaired the same way.
        """
        recovery = self.store.load()
        if not recovery.clean and recovery.history_missing is None:
            with self.change():  # waits for the writer holding the lock
                pass
        else:
            self.state = recovery.state
            self._seen = self.store.known
        self._read_mailbox()

    def stale(self) -> bool:
        """Whether the run changed since this view last read or wrote it: a write of another
        process, or one of this leader's own made past the view (a nudge, an answer). The
        view's own writes wake the file watcher too: those need no reading."""
        return self.store.known != self._seen or not self.store.is_current()

    def _read_mailbox(self) -> None:
        """Take in whatever the mailbox files gained."""
        for box in INBOUND_BOXES:
            self.store.fold(box)  # what it gained reaches `pending` (follow_mail)

    def report_events(self) -> None:
        """Hand the events appended since the last report to `on_events`."""
        if self._on_events is None:
            return
        events = self._events.poll().records
        if events:
            self._on_events(events)

    def printed(self, task_id: str, at: str) -> None:
        """A worker printed something at `at`."""
        self._output_times[task_id] = at

    def take_incomplete(self) -> StoreError | None:
        """The error of a change made whose mirror files lag behind, if any (once)."""
        error, self._incomplete = self._incomplete, None
        return error

    def output_time(self, task_id: str) -> str | None:
        """The worker's last output time not yet written (its exit records it)."""
        return self._output_times.get(task_id)

    def take_output_time(self, task_id: str) -> str | None:
        """The worker's last output time not yet written, forgotten: it was."""
        return self._output_times.pop(task_id, None)

    def next_flush(self) -> float | None:
        """When output times are next due to be written (None: none to write)."""
        return self._next_flush if self._output_times else None

    def flush_output_times(self, now: float) -> None:
        """Write lastOutputAt to the task files, at most once a second (it changes constantly)."""
        if not self._output_times or now < self._next_flush:
            return
        times, self._output_times = self._output_times, {}
        self._next_flush = now + FLUSH_EVERY
        try:
            with self.change() as txn:
                for task_id, at in times.items():
                    if task_id in txn.state.tasks:
                        txn.refresh(task_id, last_output_at=at)
        except BaseException:  # kept for the next flush (newer times win)
            self._output_times = {**times, **self._output_times}
            raise
