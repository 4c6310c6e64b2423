"""The leader's parts without a worker: signal handling, scheduling, wake-ups, line splitting.

No test here starts a process or sleeps: signals are applied to a real run's files over a
transaction, the schedule is pure, and wake-ups are checked with a real selector whose timeouts
only bound a wait for something that must happen.
"""

from __future__ import annotations

import os
import selectors
import sys
import threading
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from conftest import SESSION, config

from crew import ids, verbs
from crew.adapters.base import AgentError, Signal, TurnEnd
from crew.config import AutoRespondRule
from crew.domain import budget, change, mailbox, tasks
from crew.domain.budget import Reached
from crew.leader import autorespond, schedule, signals
from crew.leader.signals import MALFORMED_EVENTS, AgentState
from crew.leader.wakeups import Wakeups
from crew.leader.worker_process import MAX_LINE, LineSplitter
from crew.models import MailboxMessage, SupervisorContact, Task
from crew.protocol import Ack, Contact, DecisionRecord, Malformed, Report, SpawnRequest, Withdrawn
from crew.registry import (
    INBOUND_BOXES,
    LEADER,
    Box,
    ContactType,
    Direction,
    EventData,
    EventType,
    MessageData,
    MessageKind,
    MessageSource,
    MessageStatus,
    RunStatus,
    TaskStatus,
    WatcherKind,
)
from crew.store.runstore import RunStore
from crew.store.state import RunState

MakeRun = Callable[..., RunStore]

#: An upper bound for a wake-up that must come (it comes in milliseconds).
WAKE_WITHIN = 5.0


# ----------------------------------------------------------------------------- helpers


def start(store: RunStore, task: str = "plan", attempt: int = 1) -> None:
    with change(store) as txn:
        tasks.transition(txn, task, TaskStatus.RUNNING, attempt=attempt, started_at=txn.at)


def ask(store: RunStore, task: str = "plan") -> SupervisorContact:
    start(store, task)
    with change(store) as txn:
        contact = SupervisorContact(
            id=ids.new_contact_id(),
            task_id=task,
            type=ContactType.NEED_INPUT,
            prompt="Which database?",
            options=[],
            asked_at=txn.at,
        )
        tasks.transition(txn, task, TaskStatus.WAITING, waiting_since=txn.at, contact=contact)
    return contact


def hear(
    store: RunStore,
    *said: Signal,
    agent: AgentState | None = None,
    task: str = "plan",
    attempt: int = 1,
) -> list[SupervisorContact]:
    """Apply what a worker said, as the leader does."""
    with change(store) as txn:
        return signals.apply(txn, task, attempt, agent or AgentState(), list(said))


def event_types(store: RunStore, after: int = 0) -> list[EventType]:
    return [e.type for e in store.events().records[after:]]


def seen(store: RunStore) -> int:
    """How many events the run has: the new ones are those after."""
    return len(store.events().records)


# ----------------------------------------------------------------------------- signals


def test_a_contact_makes_the_task_wait_and_is_returned_as_a_question(make_run: MakeRun) -> None:
    store = make_run()
    start(store)
    before = seen(store)
    agent = AgentState(turn_ended=True)

    asked = hear(
        store,
        Contact(ContactType.NEED_SELECTION, "Which database?", ["postgres", "sqlite"]),
        agent=agent,
    )

    assert len(asked) == 1
    question = asked[0]
    assert question.task_id == "plan" and question.type is ContactType.NEED_SELECTION
    assert question.prompt == "Which database?" and question.options == ["postgres", "sqlite"]
    task = store.state().tasks["plan"]
    assert task.status is TaskStatus.WAITING
    assert task.contact == question and task.waiting_since == question.asked_at
    [contact] = store.messages(Box.OUTBOX)
    assert contact.kind is MessageKind.CONTACT and contact.direction is Direction.OUTBOX
    assert contact.status is MessageStatus.DELIVERED and contact.body == "Which database?"
    assert contact.from_ == "plan" and contact.to == LEADER
    assert contact.data is not None and contact.data[MessageData.CONTACT_ID] == question.id
    assert event_types(store, before) == [EventType.SUPERVISOR_CONTACT, EventType.TASK_WAITING]
    assert agent.turn_ended is False  # a question opens the turn again


def test_a_report_goes_to_the_outbox_and_the_task_keeps_running(make_run: MakeRun) -> None:
    store = make_run()
    start(store)
    before = seen(store)

    assert hear(store, Report(ContactType.PROGRESS, "half way")) == []

    [report] = store.messages(Box.OUTBOX)
    assert report.kind is MessageKind.REPORT and report.body == "half way"
    assert report.status is MessageStatus.DELIVERED
    assert report.data == {MessageData.REPORT_TYPE: "progress"}
    assert store.state().tasks["plan"].status is TaskStatus.RUNNING
    assert event_types(store, before) == [EventType.SUPERVISOR_REPORT]


def test_an_ack_acknowledges_the_message(make_run: MakeRun) -> None:
    store = make_run()
    start(store)
    sent = verbs.steer(store, "plan", "Try the other way", session=SESSION).message
    before = seen(store)

    hear(store, Ack(sent.id))

    [steer] = store.messages(Box.STEERING)
    assert steer.id == sent.id and steer.status is MessageStatus.ACKNOWLEDGED
    assert steer.acknowledged_at is not None
    assert event_types(store, before) == [EventType.MAILBOX_ACKNOWLEDGED]


def test_a_decision_is_an_event_and_kept_on_its_message(make_run: MakeRun) -> None:
    store = make_run()
    start(store)
    sent = verbs.follow_up(store, "plan", "Add tests", session=SESSION).message
    decision = {"action": "defer", "item": sent.id, "reason": "finishing the plan first"}
    before = seen(store)

    hear(store, DecisionRecord(decision))

    [event] = store.events().records[before:]
    assert event.type is EventType.ATTENTION_DECISION and event.task_id == "plan"
    assert event.data is not None and event.data[EventData.DECISION] == decision
    [follow_up] = store.messages(Box.INBOX)
    assert follow_up.data is not None
    [kept] = follow_up.data[MessageData.DECISIONS]
    assert kept == {
        "at": event.at,
        "seq": event.seq,
        "action": "defer",
        "reason": "finishing the plan first",
    }


def test_malformed_lines_are_counted_and_recorded_sparingly(make_run: MakeRun) -> None:
    store = make_run()
    start(store)
    agent = AgentState()
    before = seen(store)

    hear(store, *[Malformed("no colon")] * 250, agent=agent)

    assert agent.malformed == 250
    recorded = store.events().records[before:]
    assert {e.type for e in recorded} == {EventType.SUPERVISOR_MALFORMED}
    counts = [e.data["count"] for e in recorded if e.data is not None]
    assert counts == [*range(1, MALFORMED_EVENTS + 1), 100, 200]
    assert recorded[0].data is not None and recorded[0].data["reason"] == "no colon"


def test_a_turn_end_is_noted_and_a_failed_turn_is_an_agent_error(make_run: MakeRun) -> None:
    store = make_run()
    start(store)
    agent = AgentState()
    before = seen(store)

    hear(store, TurnEnd(), agent=agent)
    assert agent.turn_ended is True and agent.turn_error is None
    assert event_types(store, before) == []

    hear(store, TurnEnd(error="rate limited"), agent=agent)
    assert agent.turn_ended is True and agent.turn_error == "rate limited"
    [event] = store.events().records[before:]
    assert event.type is EventType.AGENT_ERROR
    assert event.data == {"error": "rate limited", "turnEnd": True}
    assert agent.fatal is False  # a failed turn is not a dead agent

    hear(store, TurnEnd(), agent=agent)
    assert agent.turn_error is None  # the next turn went well


def test_a_withdrawn_question_lets_the_task_run_again(make_run: MakeRun) -> None:
    store = make_run()
    contact = ask(store)
    before = seen(store)

    hear(store, Withdrawn("found it myself"))

    task = store.state().tasks["plan"]
    assert task.status is TaskStatus.RUNNING
    assert task.contact is None and task.waiting_since is None
    [event] = store.events().records[before:]
    assert event.type is EventType.SUPERVISOR_WITHDRAWN
    assert event.data is not None and event.data[EventData.CONTACT_ID] == contact.id


def test_a_question_withdrawn_once_flagged_clears_the_flag(make_run: MakeRun) -> None:
    # Flagged for waiting too long, the task kept its question: a worker that then gave up on
    # it (the SDK's ask timed out) left the task flagged, its question answerable, for ever.
    store = make_run()
    ask(store)
    with change(store) as txn:
        tasks.flag(txn, "plan", "waited over 30m for an answer")
    assert store.state().run.status is RunStatus.NEEDS_REVIEW

    hear(store, Withdrawn("no answer within 1800s"))

    task = store.state().tasks["plan"]
    assert task.status is TaskStatus.RUNNING and task.contact is None and task.error is None
    assert store.state().run.status is RunStatus.RUNNING


def test_the_question_crew_asks_at_a_limit_is_not_the_workers_to_withdraw(
    make_run: MakeRun,
) -> None:
    store = make_run()
    start(store)
    with change(store) as txn:
        crews = budget.pause(txn, "plan", Reached("maxTurns", 3, 3), interrupted=False)
    before = seen(store)

    hear(store, Withdrawn("never mind"))

    assert store.state().tasks["plan"].contact == crews
    assert event_types(store, before) == []


def test_the_nth_unnamed_spawn_of_a_new_attempt_gets_the_nth_child_of_an_earlier_one(
    make_run: MakeRun,
) -> None:
    spawner = {"command": ["python3", "-c", "pass"], "may": ["spawn"]}
    store = make_run(config(agents={"coder": spawner}))
    start(store)
    first = AgentState()
    hear(store, SpawnRequest("coder", "test it"), SpawnRequest("coder", "test it"), agent=first)
    hear(store, SpawnRequest("coder", "lint it", task_id="plan.3"), agent=first)
    hear(store, SpawnRequest("coder", "lint it"), agent=first)  # plan.3 is this attempt's own
    assert sorted(store.state().tasks) == ["build", "plan", "plan.1", "plan.2", "plan.3", "plan.4"]

    with change(store) as txn:
        tasks.interrupt(txn, "plan", "the leader was gone")
    start(store, attempt=2)
    second = AgentState()
    again = [
        SpawnRequest("coder", "test it"),  # plan.1 again
        SpawnRequest("coder", "other work"),  # not plan.2's request: a new child
        SpawnRequest("coder", "lint it", wait=True),  # plan.4 again, not plan.3: that was named
    ]
    hear(store, *again, agent=second, attempt=2)
    assert store.state().tasks["plan"].waiting_for == ["plan.4"]

    children = {t.id: t.prompt for t in store.state().task_list() if t.parent == "plan"}
    assert children == {
        "plan.1": "test it",
        "plan.2": "test it",
        "plan.3": "lint it",
        "plan.4": "lint it",
        "plan.5": "other work",
    }


def test_a_cancelled_task_takes_what_it_spawned_with_it(make_run: MakeRun) -> None:
    # The children of a cancelled task ran on (and spent) with no one to take their results.
    spawner = {"command": ["python3", "-c", "pass"], "may": ["spawn"]}
    solo = [{"id": "plan", "agent": "coder", "prompt": "p"}, {"id": "other", "agent": "coder", "prompt": "o"}]  # fmt: skip
    store = make_run(config(agents={"coder": spawner}, tasks=solo))
    start(store)
    hear(store, SpawnRequest("coder", "test it"), SpawnRequest("coder", "lint it"))
    start(store, "plan.1")
    hear(store, SpawnRequest("coder", "deeper"), task="plan.1")

    cancelled = verbs.cancel(store, "plan", session=SESSION)

    state = store.state()
    assert cancelled.tasks == ["plan", "plan.1", "plan.2", "plan.1.1"]
    assert [state.tasks[t].status for t in cancelled.tasks] == [TaskStatus.CANCELLED] * 4
    assert state.tasks["plan.1.1"].error == f"parent plan cancelled by {SESSION}"
    assert state.tasks["other"].status is TaskStatus.QUEUED


@pytest.mark.parametrize("fatal", [True, False])
def test_an_agent_error_ends_the_agent_only_when_fatal(make_run: MakeRun, fatal: bool) -> None:
    store = make_run()
    start(store)
    agent = AgentState()
    before = seen(store)

    hear(store, AgentError("out of credits", fatal=fatal), agent=agent)

    assert agent.fatal is fatal
    assert agent.turn_error == ("out of credits" if fatal else None)
    [event] = store.events().records[before:]
    assert event.type is EventType.AGENT_ERROR
    assert event.data == {"error": "out of credits", "fatal": fatal}
    assert store.state().tasks["plan"].status is TaskStatus.RUNNING  # the exit decides


def test_nothing_is_recorded_for_a_task_that_ended(make_run: MakeRun) -> None:
    store = make_run()
    start(store)
    with change(store) as txn:
        tasks.complete(txn, "plan", ended_at=txn.at, exit_code=0)
    before = seen(store)
    agent = AgentState()

    asked = hear(
        store,
        Contact(ContactType.NEED_INPUT, "Still there?"),
        Report(ContactType.NOTE, "late"),
        TurnEnd(error="late"),
        agent=agent,
    )

    assert asked == []
    assert event_types(store, before) == []
    assert store.messages(Box.OUTBOX) == []
    assert store.state().tasks["plan"].status is TaskStatus.COMPLETED
    assert agent == AgentState()


def test_nothing_is_recorded_for_an_attempt_that_was_replaced(make_run: MakeRun) -> None:
    store = make_run()
    start(store, attempt=1)
    with change(store) as txn:
        tasks.transition(txn, "plan", TaskStatus.QUEUED)
    start(store, attempt=2)
    before = seen(store)

    asked = hear(store, Contact(ContactType.NEED_INPUT, "From the old worker?"), attempt=1)

    assert asked == []
    assert event_types(store, before) == []
    assert store.state().tasks["plan"].status is TaskStatus.RUNNING
    assert hear(store, Contact(ContactType.NEED_INPUT, "From the new one"), attempt=2) != []


def test_output_after_automatic_nudges_answers_them(make_run: MakeRun) -> None:
    store = make_run()
    start(store)
    for _ in range(2):
        verbs.nudge(store, "plan", session=SESSION, source=MessageSource.MONITOR)
    task = store.state().tasks["plan"]
    assert task.nudges == 2
    assert signals.worth_recording(task, [])  # plain output is worth a transaction now
    before = seen(store)

    hear(store)

    assert store.state().tasks["plan"].nudges == 0
    [event] = store.events().records[before:]
    assert event.type is EventType.TASK_ACTIVE
    assert event.data is not None and event.data[EventData.TASK]["nudges"] == 0


@pytest.mark.parametrize(
    ("nudges", "said", "worth"),
    [
        (None, [], False),
        (0, [], False),
        (None, [Report(ContactType.NOTE, "hi")], True),
        (0, [TurnEnd()], True),
        (1, [], True),
    ],
)
def test_worth_recording(
    make_run: MakeRun, nudges: int | None, said: list[Signal], worth: bool
) -> None:
    task = None if nudges is None else make_run().state().tasks["plan"].revised(nudges=nudges)
    assert signals.worth_recording(task, said) is worth


def question(type_: ContactType, prompt: str, task: str = "plan") -> SupervisorContact:
    return SupervisorContact(
        id=ids.new_contact_id(),
        task_id=task,
        type=type_,
        prompt=prompt,
        options=[],
        asked_at="2026-11-30T03:41:00.000000Z",
    )


RULES = [
    AutoRespondRule.model_validate(
        {"type": "need_input", "match": "(?i)database", "answer": "sqlite", "task": "build"}
    ),
    AutoRespondRule.model_validate(
        {"type": "need_confirmation", "match": "run the tests", "answer": "yes"}
    ),
    AutoRespondRule.model_validate({"type": "need_confirmation", "answer": "no"}),
]


@pytest.mark.parametrize(
    ("asked", "rule"),
    [
        (question(ContactType.NEED_CONFIRMATION, "May I run the tests?"), 1),  # first of two
        (question(ContactType.NEED_CONFIRMATION, "May I deploy?"), 2),  # no regex: any
        (question(ContactType.NEED_INPUT, "Which DATABASE?", task="build"), 0),
        (question(ContactType.NEED_INPUT, "Which database?", task="plan"), None),  # other task
        (question(ContactType.NEED_INPUT, "Which colour?", task="build"), None),  # no match
        (question(ContactType.NEED_SELECTION, "Which database?", task="build"), None),  # type
    ],
)
def test_auto_answer_takes_the_first_rule_that_fits(
    asked: SupervisorContact, rule: int | None
) -> None:
    found = autorespond.auto_answer(RULES, asked)
    assert found == (None if rule is None else (rule, RULES[rule]))


def test_auto_answer_without_rules_answers_nothing() -> None:
    assert autorespond.auto_answer([], question(ContactType.NEED_CONFIRMATION, "Go?")) is None


# ----------------------------------------------------------------------------- schedule


def with_status(state: RunState, **statuses: TaskStatus) -> RunState:
    return RunState(
        state.run,
        {
            tid: t.revised(status=statuses[tid]) if tid in statuses else t
            for tid, t in state.tasks.items()
        },
    )


@pytest.fixture
def four(make_run: MakeRun) -> RunState:
    """docs, plan, build (after plan), lint: all queued, in this crew.toml order."""
    agent = "coder"
    cfg = config(
        tasks=[
            {"id": "docs", "agent": agent, "prompt": "Write docs"},
            {"id": "plan", "agent": agent, "prompt": "Plan"},
            {"id": "build", "agent": agent, "prompt": "Build", "dependsOn": ["plan"]},
            {"id": "lint", "agent": agent, "prompt": "Lint"},
        ]
    )
    return make_run(cfg).state()


def ids_of(found: list[Task]) -> list[str]:
    return [t.id for t in found]


def test_ready_waits_for_dependencies_in_crew_toml_order(four: RunState) -> None:
    assert ids_of(schedule.ready(four, set(), 10)) == ["docs", "plan", "lint"]
    running = with_status(four, plan=TaskStatus.RUNNING)
    assert ids_of(schedule.ready(running, {"plan"}, 10)) == ["docs", "lint"]
    done = with_status(four, plan=TaskStatus.COMPLETED)
    assert ids_of(schedule.ready(done, set(), 10)) == ["docs", "build", "lint"]
    failed = with_status(four, plan=TaskStatus.FAILED)
    assert "build" not in ids_of(schedule.ready(failed, set(), 10))


def test_ready_starts_no_more_than_max_parallel(four: RunState) -> None:
    assert ids_of(schedule.ready(four, set(), 2)) == ["docs", "plan"]
    assert ids_of(schedule.ready(four, {"other"}, 2)) == ["docs"]
    assert schedule.ready(four, {"x", "y"}, 2) == []


def test_ready_skips_a_task_already_running(four: RunState) -> None:
    # Its worker started, and the state read before that still says queued.
    assert ids_of(schedule.ready(four, {"docs"}, 10)) == ["plan", "lint"]


def message(
    kind: MessageKind, task: str = "plan", status: MessageStatus = MessageStatus.PENDING
) -> MailboxMessage:
    return MailboxMessage(
        id=ids.new_message_id(),
        direction=kind.direction,
        kind=kind,
        from_=LEADER if kind.direction is Direction.INBOX else task,
        to=task if kind.direction is Direction.INBOX else LEADER,
        task_id=task,
        body=f"a {kind}",
        status=status,
        priority=kind.default_priority,
        sent_at="2026-11-30T03:41:00.000000Z",
    )


@pytest.fixture
def plan(make_run: MakeRun) -> Task:
    return make_run().state().tasks["plan"]


def test_deliverable_in_priority_order_first_written_first(plan: Task) -> None:
    written = [
        follow_up := message(MessageKind.FOLLOW_UP),
        nudge := message(MessageKind.NUDGE),
        steer := message(MessageKind.STEER),
        respond := message(MessageKind.RESPOND),
        steer_2 := message(MessageKind.STEER),
        follow_up_2 := message(MessageKind.FOLLOW_UP),
        message(MessageKind.STEER, status=MessageStatus.DELIVERED),
        message(MessageKind.STEER, status=MessageStatus.REJECTED),
        message(MessageKind.STEER, task="build"),
    ]
    order = {m.id: i for i, m in enumerate(written)}
    running = plan.revised(status=TaskStatus.RUNNING)

    # The order written is `order`, not the order of the list given.
    due = schedule.deliverable(reversed(written), running, order)

    assert due == [respond, steer, steer_2, nudge, follow_up, follow_up_2]


@pytest.mark.parametrize("status", [TaskStatus.WAITING, TaskStatus.NEEDS_REVIEW])
def test_follow_ups_are_held_while_the_task_waits_or_is_flagged(
    plan: Task, status: TaskStatus
) -> None:
    written = [
        message(MessageKind.FOLLOW_UP),
        message(MessageKind.NUDGE),
        message(MessageKind.STEER),
    ]
    order = {m.id: i for i, m in enumerate(written)}

    due = schedule.deliverable(written, plan.revised(status=status), order)

    assert [m.kind for m in due] == [MessageKind.STEER, MessageKind.NUDGE]


NOW = 1000.0


def close_at(
    agent: AgentState,
    task: Task | None,
    *,
    busy: bool = False,
    scheduled: float | None = None,
) -> float | None:
    return schedule.idle_close_at(agent, task, busy=busy, linger=5.0, scheduled=scheduled, now=NOW)


def test_an_idle_agent_is_closed_after_it_lingers(plan: Task) -> None:
    running = plan.revised(status=TaskStatus.RUNNING)
    assert close_at(AgentState(turn_ended=True), running) == NOW + 5.0
    assert close_at(AgentState(turn_ended=True), running, scheduled=NOW + 2.0) == NOW + 2.0


def test_an_agent_at_work_is_not_closed(plan: Task) -> None:
    running = plan.revised(status=TaskStatus.RUNNING)
    assert close_at(AgentState(turn_ended=False), running) is None
    assert close_at(AgentState(turn_ended=True), None) is None


def test_an_agent_with_a_question_open_is_not_closed(plan: Task) -> None:
    for status in (TaskStatus.WAITING, TaskStatus.NEEDS_REVIEW):
        assert close_at(AgentState(turn_ended=True), plan.revised(status=status)) is None


def test_more_work_resets_the_linger(plan: Task) -> None:
    running = plan.revised(status=TaskStatus.RUNNING)
    agent = AgentState(turn_ended=True)
    scheduled = close_at(agent, running)
    assert scheduled == NOW + 5.0

    scheduled = close_at(agent, running, busy=True, scheduled=scheduled)
    assert scheduled is None  # a message for it: not done after all

    later = schedule.idle_close_at(
        agent, running, busy=False, linger=5.0, scheduled=scheduled, now=NOW + 3.0
    )
    assert later == NOW + 3.0 + 5.0  # lingers afresh from when the work was given


def test_a_fatal_agent_is_closed_at_once(plan: Task) -> None:
    agent = AgentState(fatal=True)
    running = plan.revised(status=TaskStatus.RUNNING)
    assert close_at(agent, running, busy=True) == NOW
    assert close_at(agent, plan.revised(status=TaskStatus.WAITING)) == NOW
    assert close_at(agent, running, scheduled=NOW - 1.0) == NOW - 1.0
    # Its turn had ended before, and it was given time to linger: no longer.
    assert close_at(agent, running, scheduled=NOW + 5.0) == NOW


def test_pending_ignores_the_outbox(plan: Task) -> None:
    pending = schedule.Pending()
    pending.adopt(message(MessageKind.CONTACT))
    pending.adopt(message(MessageKind.REPORT))

    assert not pending.any_for("plan")
    assert pending.due(plan.revised(status=TaskStatus.RUNNING)) == []


@pytest.mark.parametrize("on_disk", [False, True], ids=["dict", "disk"])
def test_pending_never_revives_a_delivered_message(plan: Task, on_disk: bool) -> None:
    from crew.store.spill import Rounds

    pending = schedule.Pending(settled=Rounds() if on_disk else None)
    earlier = [  # the leader's rounds are on disk: these written, the ones below not yet
        message(MessageKind.STEER, status=MessageStatus.ACKNOWLEDGED) for _ in range(Rounds.BATCH)
    ]
    for line in earlier:
        pending.adopt(line)
    steer = message(MessageKind.STEER)
    other = message(MessageKind.STEER)
    delivered = steer.model_copy(update={"status": MessageStatus.DELIVERED})
    for line in (steer, other, delivered):
        pending.adopt(line)
    running = plan.revised(status=TaskStatus.RUNNING)
    assert pending.due(running) == [other]

    # The file re-read from its start (after a repair): its first line says `pending` again,
    # before the line that says `delivered` is read (if it is read at all).
    for line in (steer, other, delivered):
        pending.adopt(line)
        assert pending.due(running) == [other]
    for line in earlier:
        pending.adopt(line.model_copy(update={"status": MessageStatus.PENDING}))
    assert pending.due(running) == [other]


def test_pending_due_in_delivery_order_as_first_written(plan: Task) -> None:
    pending = schedule.Pending()
    follow_up = message(MessageKind.FOLLOW_UP)
    steer = message(MessageKind.STEER)
    steer_2 = message(MessageKind.STEER)
    for line in (follow_up, steer, steer_2, steer):  # a line seen again keeps its place
        pending.adopt(line)

    assert pending.due(plan.revised(status=TaskStatus.RUNNING)) == [steer, steer_2, follow_up]
    assert pending.due(plan.revised(status=TaskStatus.WAITING)) == [steer, steer_2]
    assert pending.due(plan.revised(id="build")) == []


def test_pending_any_for_a_task_and_a_kind() -> None:
    pending = schedule.Pending()
    pending.adopt(message(MessageKind.FOLLOW_UP))
    rejected = message(MessageKind.STEER, status=MessageStatus.REJECTED)
    pending.adopt(rejected)

    assert pending.any_for("plan")
    assert pending.any_for("plan", MessageKind.FOLLOW_UP)
    assert not pending.any_for("plan", MessageKind.STEER)
    assert not pending.any_for("build")


# ----------------------------------------------------------------------------- wakeups


@pytest.fixture
def selector() -> Iterator[selectors.BaseSelector]:
    chosen = selectors.DefaultSelector()
    yield chosen
    chosen.close()


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    watched = tmp_path / "mailbox"
    watched.mkdir()
    return watched


@pytest.fixture
def wakeups(selector: selectors.BaseSelector, folder: Path) -> Iterator[Wakeups]:
    made = Wakeups(selector, [folder])
    yield made
    made.close()


def woken_by(selector: selectors.BaseSelector) -> set[str]:
    """What woke the selector (waits until something does)."""
    return {key.data[0] for key, _ in selector.select(WAKE_WITHIN)}


@pytest.mark.parametrize("polling", [False, True], ids=["file events", "polling"])
def test_a_write_to_the_watched_folder_wakes_the_selector(
    selector: selectors.BaseSelector,
    folder: Path,
    wakeups: Wakeups,
    monkeypatch: pytest.MonkeyPatch,
    polling: bool,
) -> None:
    if polling:
        monkeypatch.setenv("CREW_FORCE_POLLING", "1")
    wakeups.start()
    expected = WatcherKind.POLL if polling else WatcherKind.INOTIFY
    if expected is WatcherKind.INOTIFY and not sys.platform.startswith("linux"):
        pytest.skip("inotify is Linux's")
    assert wakeups.kind is expected
    assert selector.select(0) == []

    (folder / "inbox.jsonl").write_bytes(b"{}\n")

    woke = woken_by(selector)
    # inotify sits in the select itself; a polling thread writes to the wake-up pipe.
    assert woke == ({"wake"} if polling else {"files"})
    for kind in woke:
        wakeups.handle(kind)
    assert wakeups.failure() is None


def test_wake_makes_the_pipe_readable_and_handle_drains_it(
    selector: selectors.BaseSelector, wakeups: Wakeups
) -> None:
    wakeups.start()
    assert selector.select(0) == []

    wakeups.wake()
    wakeups.wake()

    assert woken_by(selector) == {"wake"}
    wakeups.handle("wake")
    assert selector.select(0) == []


class BrokenWatcher:
    """A descriptor-less watcher (watchfiles, say) whose wait fails."""

    kind = WatcherKind.WATCHFILES

    def __init__(self) -> None:
        self.closed = False

    def fileno(self) -> int | None:
        return None

    def wait(self, timeout: float | None) -> bool:
        raise RuntimeError("the watcher died")

    def close(self) -> None:
        self.closed = True


def test_a_watcher_that_fails_is_replaced_by_polling_and_reported_once(
    selector: selectors.BaseSelector, wakeups: Wakeups
) -> None:
    wakeups.start()
    broken = BrokenWatcher()

    wakeups._use(broken)

    assert woken_by(selector) == {"wake"}  # the leader is told to look at its files now
    wakeups.handle("wake")
    assert wakeups.kind is WatcherKind.POLL
    assert broken.closed
    assert wakeups.failure() == (WatcherKind.WATCHFILES, "RuntimeError('the watcher died')")
    assert wakeups.failure() is None


class BrokenDescriptor:
    """A watcher with a descriptor (inotify, say) that fails when drained."""

    kind = WatcherKind.INOTIFY

    def __init__(self) -> None:
        self.read_end, self.write_end = os.pipe()

    def fileno(self) -> int | None:
        return self.read_end

    def drain(self) -> bool:
        raise OSError(5, "Input/output error")

    def wait(self, timeout: float | None) -> bool:
        raise AssertionError("a watcher with a descriptor is not waited on in a thread")

    def close(self) -> None:
        for fd in (self.read_end, self.write_end):
            os.close(fd)


def test_a_watcher_descriptor_that_fails_is_replaced_by_polling(
    selector: selectors.BaseSelector, wakeups: Wakeups
) -> None:
    wakeups.start()
    broken = BrokenDescriptor()
    wakeups._use(broken)
    os.write(broken.write_end, b"x")
    assert woken_by(selector) == {"files"}

    wakeups.handle("files")

    assert wakeups.kind is WatcherKind.POLL
    assert broken.read_end not in selector.get_map()
    assert wakeups.failure() == (WatcherKind.INOTIFY, "OSError(5, 'Input/output error')")
    assert wakeups.failure() is None


class BlockedWatcher:
    """A descriptor-less watcher whose thread waits until the test lets it go; like watchfiles,
    it cannot be closed while its thread waits."""

    kind = WatcherKind.WATCHFILES

    def __init__(self, *, closable: bool = False) -> None:
        self.waiting = threading.Event()
        self.go = threading.Event()
        self.closable = closable

    def fileno(self) -> int | None:
        return None

    def wait(self, timeout: float | None) -> bool:
        self.waiting.set()
        self.go.wait(WAKE_WITHIN)
        return True  # something changed

    def close(self) -> None:
        if not self.closable and not self.go.is_set():
            raise ValueError("generator already executing")


def watching_thread(wakeups: Wakeups, watcher: BlockedWatcher) -> threading.Thread:
    """Give `wakeups` the watcher; the thread that waits on it, once it waits."""
    before = set(threading.enumerate())
    wakeups._use(watcher)
    [thread] = set(threading.enumerate()) - before
    assert watcher.waiting.wait(WAKE_WITHIN)
    return thread


def test_closing_survives_a_watcher_that_cannot_close_while_it_waits(
    selector: selectors.BaseSelector, folder: Path
) -> None:
    wakeups = Wakeups(selector, [folder])
    watcher = BlockedWatcher()
    thread = watching_thread(wakeups, watcher)

    wakeups.close()

    watcher.go.set()
    thread.join(WAKE_WITHIN)
    assert not thread.is_alive()


def test_a_watcher_thread_does_not_wake_a_closed_leader(
    selector: selectors.BaseSelector, folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Once closed, the wake-up pipe's descriptor may be someone else's: a write there would
    # put a stray byte into another file or pipe.
    wakeups = Wakeups(selector, [folder])
    watcher = BlockedWatcher(closable=True)
    thread = watching_thread(wakeups, watcher)
    woken: list[Any] = []
    monkeypatch.setattr(wakeups, "wake", lambda: woken.append(True))
    wakeups.close()

    watcher.go.set()  # the thread's wait ends: a change was seen
    thread.join(WAKE_WITHIN)

    assert not thread.is_alive()
    assert woken == []


# ----------------------------------------------------------------------------- LineSplitter


def test_lines_split_across_chunks_are_joined() -> None:
    lines = LineSplitter()
    assert lines.feed(b"@super") == []
    assert lines.feed(b"visor note: hi\nsecond") == [b"@supervisor note: hi"]
    assert lines.feed(b" line\n\nthird\n") == [b"second line", b"", b"third"]
    assert lines.rest() == []


def test_a_last_line_without_a_newline_comes_at_the_end() -> None:
    lines = LineSplitter()
    assert lines.feed(b"done\nno newline") == [b"done"]
    assert lines.rest() == [b"no newline"]
    assert lines.rest() == []


def test_a_huge_line_without_a_newline_is_taken_as_it_is() -> None:
    lines = LineSplitter()
    assert lines.feed(b"a" * MAX_LINE) == []  # up to the limit, it may still end
    assert lines.feed(b"b") == [b"a" * MAX_LINE + b"b"]
    assert lines.feed(b"c\n") == [b"c"]
    assert lines.rest() == []


def test_a_huge_line_after_complete_ones_is_taken_with_them() -> None:
    lines = LineSplitter(limit=8)
    assert lines.feed(b"one\ntwo\n0123456789") == [b"one", b"two", b"0123456789"]
    assert lines.rest() == []


def test_a_leaders_pending_keeps_a_carried_message_in_its_place(make_run: Any) -> None:
    # A leader's store keeps only the messages that may still change, and gives its view only
    # those at start: a steer acknowledged before then, carried to a next attempt later, still
    # comes before a steer written after it.
    store = make_run()
    with change(store) as txn:
        tasks.start(txn, "plan", attempt=1, pid=4242)
    first = verbs.steer(store, "plan", "first", session=SESSION).message
    with change(store) as txn:
        mailbox.deliver(txn, [first], attempt=1)
    with change(store) as txn:
        mailbox.acknowledge(txn, "plan", first.id)
    second = verbs.steer(store, "plan", "second", session=SESSION).message

    lean = RunStore(store.paths, lean_mail=True)
    pending = schedule.Pending(lean.place)
    for box in INBOUND_BOXES:
        lean.follow_mail(box, pending.adopt, partial(pending.forget, box))
    running = store.state().tasks["plan"]
    assert [m.id for m in pending.due(running)] == [second.id]

    with change(store) as txn:  # the attempt ends; the next one is given the steers again
        tasks.interrupt(txn, "plan", "the leader stopped")
        tasks.start(txn, "plan", attempt=2, pid=4243)
    for box in INBOUND_BOXES:
        lean.fold(box)
    assert [m.id for m in pending.due(store.state().tasks["plan"])] == [first.id, second.id]
