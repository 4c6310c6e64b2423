"""The leader's decisions, as pure functions of the run's state: which tasks start, which
messages a worker is given now, when an idle agent is done. Tested without a process."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from typing import Protocol

from crew.domain import mailbox
from crew.leader.signals import AgentState
from crew.models import MailboxMessage, Task
from crew.registry import Box, Direction, MessageKind, MessageStatus, TaskStatus
from crew.store.state import RunState

#: The most workers one transaction starts, and how long it goes on starting them (seconds).
#: Workers start under the run lock (a worker's first `crew` command then finds its task
#: running), so a crew of thousands starting at once on a busy machine, in one transaction,
#: held the lock for longer than a person's `crew steer` waits for it (10 s), and the heartbeat
#: for longer than a lease stays fresh. What a turn leaves queued starts in the next, at once.
START_BATCH = 32
START_SLICE = 0.25


def ready(state: RunState, running: Collection[str], max_parallel: int) -> list[Task]:
    """Queued tasks whose dependencies all completed, in crew.toml order, as many as may start
    beside the `running` ones."""
    room = max_parallel - len(running)
    if room <= 0 or not state.counts()[TaskStatus.QUEUED]:
        return []  # kept cheap: the leader asks at every turn
    found: list[Task] = []
    for task in state.task_list():
        if len(found) >= room:
            break
        if task.status is not TaskStatus.QUEUED or task.id in running:
            continue
        if all(
            state.tasks[d].status is TaskStatus.COMPLETED
            for d in task.depends_on
            if d in state.tasks
        ):
            found.append(task)
    return found


def deliverable(
    messages: Iterable[MailboxMessage],
    task: Task,
    order: dict[str, int],
    *,
    answers_only_while_asking: bool = False,
) -> list[MailboxMessage]:
    """The pending messages a live task may be given now, in delivery order: respond, steer,
    nudge, followUp, first-written first within each. A follow-up waits while the task waits for
    an answer (or is flagged): the answer comes first. An answer held for a question a restarted
    task has not asked again waits for it. A worker that reads plain lines takes any line for the
    answer to its open question (`answers_only_while_asking`): nothing else is given to it then,
    nor to an agent paused at one of its limits (crew/domain/budget.py)."""
    # An agent paused at a limit is given nothing but the answer: anything would spend more.
    paused = task.contact is not None and task.contact.limit is not None
    asking = (answers_only_while_asking or paused) and task.contact is not None
    due = [
        m
        for m in messages
        if m.task_id == task.id
        and m.status is MessageStatus.PENDING
        and (m.kind is not MessageKind.FOLLOW_UP or task.status is TaskStatus.RUNNING)
        and not mailbox.is_held(m)
        and (m.kind is MessageKind.RESPOND or not asking)
    ]
    due.sort(key=lambda m: (m.kind.delivery_rank, order.get(m.id, 0)))
    return due


def idle_close_at(
    agent: AgentState,
    task: Task | None,
    *,
    busy: bool,
    linger: float,
    scheduled: float | None,
    now: float,
) -> float | None:
    """When to close the stdin of an agent that is done, so that it exits (None: not yet).

    An agent is done once its turn ended with no question open and nothing left to give it,
    after `linger` (the agent's `keepOpen`), which starts again whenever it gets more work; an
    agent that cannot go on (fatal) is closed at once. `scheduled` is the time chosen before.
    """
    if agent.fatal:  # even one lingering after its turn ended: it is done now
        return now if scheduled is None else min(scheduled, now)
    if not agent.turn_ended or task is None or task.status is not TaskStatus.RUNNING or busy:
        return None  # working, or a question is open: the agent waits for its answer
    return scheduled if scheduled is not None else now + linger


class Rounds(Protocol):
    """A number for each message, by id, that only ever grows (in memory, or on disk:
    crew/store/spill.py)."""

    def get(self, message_id: str, default: int, /) -> int: ...

    def raise_to(self, message_id: str, value: int, /) -> None: ...


class _Rounds(dict[str, int]):
    def raise_to(self, message_id: str, value: int) -> None:
        if value > self.get(message_id, value - 1):
            self[message_id] = value


class Pending:
    """Undelivered messages to each task (the latest line of each), kept up to date from the
    mailbox files and the leader's own writes."""

    def __init__(
        self, place: Callable[[MailboxMessage], int] | None = None, settled: Rounds | None = None
    ) -> None:
        """`place`: where a message was first written, as its mailbox file's reader knows it
        (default: the order messages are first adopted in). `settled`: where to keep the round
        each message settled in (default: a dict; the leader's is on disk, as it has one for
        every message ever sent to a worker)."""
        self._by_task: dict[str, dict[str, MailboxMessage]] = {}
        #: Messages seen past `pending`, and in which round (`mailbox.carried`): a file re-read
        #: from its start never revives them; only a newer round's `pending` line does.
        self._settled: Rounds = _Rounds() if settled is None else settled
        #: The order messages were first seen in: the order they were written.
        self._order: dict[str, int] = {}
        self._place = place

    def adopt(self, message: MailboxMessage) -> None:
        """Take in the latest known line of a message (lines may repeat when a file is re-read)."""
        if message.direction is not Direction.INBOX:
            return
        if self._place is None:  # a carried message keeps its place
            self._order.setdefault(message.id, len(self._order))
        waiting = self._by_task.setdefault(message.task_id, {})
        round_ = message.carried
        if message.status is not MessageStatus.PENDING:
            waiting.pop(message.id, None)
            self._settled.raise_to(message.id, round_)
        elif round_ > self._settled.get(message.id, -1):
            waiting[message.id] = message

    def forget(self, box: Box) -> None:
        """A mailbox file is read again from its start: what it held may be gone (set aside by
        a repair), so its messages wait only once read again."""
        for waiting in self._by_task.values():
            for message_id in [i for i, m in waiting.items() if m.kind.box is box]:
                del waiting[message_id]

    def due(self, task: Task, *, answers_only_while_asking: bool = False) -> list[MailboxMessage]:
        """What the task's worker may be given now (see `deliverable`)."""
        waiting = self._by_task.get(task.id, {}).values()
        place = self._place
        order = self._order if place is None else {m.id: place(m) for m in waiting}
        return deliverable(
            waiting, task, order, answers_only_while_asking=answers_only_while_asking
        )

    def any_for(self, task_id: str, kind: MessageKind | None = None) -> bool:
        """Whether anything (of `kind`) waits for the task."""
        waiting = self._by_task.get(task_id, {}).values()
        return any(kind is None or m.kind is kind for m in waiting)
