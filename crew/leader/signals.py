"""What a worker says, turned into changes of the run: one handler per kind of signal.

Adapters turn a worker's output into signals (crew/adapters/base.py, crew/protocol.py); here each
kind of signal has its handler, a call into the domain over the leader's transaction. Nothing
here starts or reads a process, so it is tested with a store and no worker at all.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from crew import ids
from crew.adapters.base import (
    Adapter,
    AgentError,
    SessionStarted,
    Signal,
    Spent,
    TurnBegun,
    TurnEnd,
    bounded,
)
from crew.domain import adding, budget, mailbox, tasks
from crew.leader.throttle import ReportThrottle
from crew.models import SupervisorContact, Task
from crew.protocol import (
    Ack,
    CheckpointRecord,
    Contact,
    DecisionRecord,
    Malformed,
    Report,
    SpawnRequest,
    Withdrawn,
)
from crew.registry import EventType
from crew.store.txn import Txn
from crew.text import short

#: Malformed `@supervisor` lines recorded as events per attempt; after that, every 100th.
MALFORMED_EVENTS = 10


@dataclass
class AgentState:
    """What the leader has heard of one worker's agent."""

    #: The agent's last turn ended (adapters that speak in turns), and whether it failed.
    turn_ended: bool = False
    turn_error: str | None = None
    #: The agent reported an error it cannot go on from: the task fails.
    fatal: bool = False
    #: Malformed `@supervisor` lines so far.
    malformed: int = 0
    #: Its reports in the current window of the rate limit.
    reports: ReportThrottle = field(default_factory=ReportThrottle)
    #: The task reached one of its limits: at the end of the turn, crew asks whether it may go
    #: on (crew/domain/budget.py); `interrupting` once the agent was told to stop the turn.
    pausing: budget.Reached | None = None
    interrupting: bool = False
    #: The agent's turn is over though it has not yet said it is idle (Spent.settled): it is
    #: neither stopped at a limit nor given more work until it does.
    settled: bool = False
    #: The spawns without an id it printed: the n-th is matched with the n-th of an earlier
    #: attempt (crew/domain/adding.py `spawn`).
    unnamed_spawns: int = 0

    @property
    def to_interrupt(self) -> bool:
        """The task reached a limit in the middle of a turn, and the agent is not yet told."""
        return (
            self.pausing is not None
            and not self.turn_ended
            and not self.settled
            and not self.interrupting
        )

    def copy(self) -> AgentState:
        """A copy to record with: it replaces this state once the record is written."""
        return replace(self, reports=replace(self.reports))


def worth_recording(
    task: Task | None,
    said: list[Signal],
    agent: AgentState | None = None,
    *,
    now: float = 0.0,
    final: bool = False,
) -> bool:
    """Whether a transaction is needed: the worker said something, its output answers automatic
    nudges, or folded reports are due (at monotonic time `now`)."""
    due = agent.reports.due() if agent is not None else None
    return (
        bool(said)
        or (task is not None and task.nudges > 0)
        or (due is not None and (final or now >= due))
    )


def apply(
    txn: Txn,
    task_id: str,
    attempt: int,
    agent: AgentState,
    said: list[Signal],
    *,
    now: float | None = None,
    final: bool = False,
) -> list[SupervisorContact]:
    """Record what the worker of `attempt` said (within crew's bounds, reports rate-limited,
    at monotonic time `now`, by default the present; `final`: its output has ended); returns
    the questions it asked.

    Nothing is recorded for a task that has ended or moved on to another attempt meanwhile.
    """
    now = time.monotonic() if now is None else now
    task = txn.task(task_id)
    if not tasks.live_attempt(task, attempt):
        return []
    tasks.active(txn, task_id)  # any output answers automatic nudges
    _record_folded(txn, task_id, agent, now)
    asked: list[SupervisorContact] = []
    for item in map(bounded, said):
        if isinstance(item, Report) and not agent.reports.admit(item, now):
            continue
        question = _HANDLERS[type(item)](txn, task_id, agent, item)
        if question is not None:
            asked.append(question)
    if final:
        _record_folded(txn, task_id, agent, now, final=True)
    return asked


def _record_folded(
    txn: Txn, task_id: str, agent: AgentState, now: float, *, final: bool = False
) -> None:
    folded = agent.reports.summary(now, final=final)
    if folded is not None:
        report = folded.latest
        mailbox.report(txn, task_id, report.type, report.text, folded=folded.count)


# ----------------------------------------------------------------------------- the handlers


def _asked(txn: Txn, task_id: str, agent: AgentState, item: Contact) -> SupervisorContact | None:
    agent.turn_ended = False
    question = SupervisorContact(
        id=ids.new_contact_id(),
        task_id=task_id,
        type=item.type,
        prompt=item.prompt,
        options=item.options,
        other=item.other or None,
        secret=item.secret or None,
        asked_at=txn.at,
    )
    mailbox.contact(txn, question)
    tasks.wait(txn, question)
    held = mailbox.answer_held_for(txn, question)  # answered before the worker restarted
    if held is not None:
        tasks.answer(txn, task_id, held)
        return None
    return question


def _reported(txn: Txn, task_id: str, agent: AgentState, item: Report) -> None:
    mailbox.report(txn, task_id, item.type, item.text)


def _acknowledged(txn: Txn, task_id: str, agent: AgentState, item: Ack) -> None:
    mailbox.acknowledge(txn, task_id, item.message_id)


def _decided(txn: Txn, task_id: str, agent: AgentState, item: DecisionRecord) -> None:
    mailbox.decide(txn, task_id, item.data)


def _checkpointed(txn: Txn, task_id: str, agent: AgentState, item: CheckpointRecord) -> None:
    tasks.checkpoint(txn, task_id, item.state)


def _spawned(txn: Txn, task_id: str, agent: AgentState, item: SpawnRequest) -> None:
    if item.task_id is None:
        agent.unnamed_spawns += 1
    adding.spawn(txn, task_id, item, unnamed=agent.unnamed_spawns)


def _session(txn: Txn, task_id: str, agent: AgentState, item: SessionStarted) -> None:
    tasks.remember_session(txn, task_id, item.session_id)


def _malformed(txn: Txn, task_id: str, agent: AgentState, item: Malformed) -> None:
    agent.malformed += 1
    if agent.malformed <= MALFORMED_EVENTS or agent.malformed % 100 == 0:
        txn.record(
            EventType.SUPERVISOR_MALFORMED,
            task_id=task_id,
            message=f"{task_id} printed a malformed @supervisor line: {item.reason}",
            data={"reason": item.reason, "excerpt": item.excerpt, "count": agent.malformed},
        )


def _spent(txn: Txn, task_id: str, agent: AgentState, item: Spent) -> None:
    agent.settled = item.settled
    reached = budget.spend(txn, task_id, item.usage)
    if reached is not None and agent.pausing is None:
        agent.pausing = reached


def _turn_begun(txn: Txn, task_id: str, agent: AgentState, item: TurnBegun) -> None:
    agent.settled = False


def _turn_ended(
    txn: Txn, task_id: str, agent: AgentState, item: TurnEnd
) -> SupervisorContact | None:
    agent.turn_ended, agent.settled = True, False
    agent.turn_error = item.error
    reached, interrupted = agent.pausing, agent.interrupting
    agent.pausing, agent.interrupting = None, False
    if reached is not None and interrupted:  # crew stopped the turn at a limit: it asks now
        agent.turn_error = None
        if item.result:
            tasks.remember_result(txn, task_id, item.result)
        now = budget.reached(txn.run, txn.task(task_id))  # what the stopped turn spent too
        return budget.pause(txn, task_id, now or reached, interrupted=True)
    if item.result and not item.error:
        tasks.remember_result(txn, task_id, item.result)
    if item.error:
        txn.record(
            EventType.AGENT_ERROR,
            task_id=task_id,
            message=f"{task_id}'s turn failed: {short(item.error, 200)}",
            data={"error": item.error, "turnEnd": True},
        )
    return None


def _withdrawn(txn: Txn, task_id: str, agent: AgentState, item: Withdrawn) -> None:
    tasks.withdraw(txn, task_id, item.reason)


def _agent_error(txn: Txn, task_id: str, agent: AgentState, item: AgentError) -> None:
    txn.record(
        EventType.AGENT_ERROR,
        task_id=task_id,
        message=f"{task_id}: {short(item.message, 200)}",
        data={"error": item.message, "fatal": item.fatal},
    )
    if item.fatal:
        agent.turn_error = item.message
        agent.fatal = True


_Handler = Callable[[Txn, str, AgentState, Any], SupervisorContact | None]

#: Every kind of signal an adapter can give, and what the leader does about it.
_HANDLERS: dict[type, _Handler] = {
    Contact: _asked,
    Report: _reported,
    Ack: _acknowledged,
    DecisionRecord: _decided,
    CheckpointRecord: _checkpointed,
    SpawnRequest: _spawned,
    Malformed: _malformed,
    TurnEnd: _turn_ended,
    Withdrawn: _withdrawn,
    AgentError: _agent_error,
    SessionStarted: _session,
    Spent: _spent,
    TurnBegun: _turn_begun,
}


def saved(adapter: Adapter, lines: list[bytes]) -> list[Signal]:
    """Of what a worker printed as its leader stops, the checkpoints: what must reach the next
    attempt (a question or a report recorded then would find no leader to act on it)."""
    said = (adapter.on_line(raw.decode("utf-8", errors="replace")).signals for raw in lines)
    return [one for signals in said for one in signals if isinstance(one, CheckpointRecord)]
