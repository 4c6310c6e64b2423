"""The monitors' rules, on a fake clock."""

from __future__ import annotations

from crew.config import AgentConfig
from crew.leader.monitors import Action, Clock, judge
from crew.models import Task
from crew.registry import TaskStatus


def task(status: TaskStatus = TaskStatus.RUNNING, nudges: int = 0) -> Task:
    return Task(id="t", agent="a", title="t", prompt="p", status=status, nudges=nudges)


def agent(**settings: object) -> AgentConfig:
    return AgentConfig.model_validate({"command": ["x"], **settings})


def test_a_silent_task_is_nudged_after_stall_after() -> None:
    clock = Clock(started=0, last_output=0)
    rules = agent(stallAfter=10, maxNudges=2)

    early = judge(task(), rules, clock, 9.9, nudge_pending=False)
    late = judge(task(), rules, clock, 10, nudge_pending=False)

    assert early.action is None and early.next_check == 10
    assert late.action is Action.NUDGE and late.reason == "no output for 10s"


def test_after_a_nudge_it_waits_another_period_then_nudges_or_flags() -> None:
    clock = Clock(started=0, last_output=0, last_nudge=10)
    rules = agent(stallAfter=10, maxNudges=2)

    assert judge(task(nudges=1), rules, clock, 19, nudge_pending=False).next_check == 20
    assert judge(task(nudges=1), rules, clock, 20, nudge_pending=False).action is Action.NUDGE
    flagged = judge(task(nudges=2), rules, clock, 20, nudge_pending=False)
    assert flagged.action is Action.FLAG_STALLED
    assert flagged.reason == "stalled: no output for 20s after 2 nudge(s)"


def test_output_answers_a_nudge() -> None:
    clock = Clock(started=0, last_output=0, last_nudge=10)
    clock.output(15)

    verdict = judge(task(nudges=0), agent(stallAfter=10), clock, 20, nudge_pending=False)

    assert verdict.action is None and verdict.next_check == 25


def test_no_second_nudge_while_one_is_undelivered() -> None:
    clock = Clock(started=0, last_output=0, last_nudge=10)

    verdict = judge(task(nudges=1), agent(stallAfter=10), clock, 20, nudge_pending=True)

    assert verdict.action is None and verdict.next_check == 30


def test_with_max_nudges_zero_a_silent_task_is_flagged_at_once() -> None:
    verdict = judge(task(), agent(stallAfter=5, maxNudges=0), Clock(0, 0), 5, nudge_pending=False)
    assert verdict.action is Action.FLAG_STALLED


def test_a_waiting_task_is_never_judged_stalled_but_can_wait_too_long() -> None:
    clock = Clock(started=0, last_output=0)
    clock.observe(TaskStatus.WAITING, 1)
    rules = agent(stallAfter=1, waitTimeout=100)

    assert judge(task(TaskStatus.WAITING), rules, clock, 50, nudge_pending=False).action is None
    verdict = judge(task(TaskStatus.WAITING), rules, clock, 101, nudge_pending=False)
    assert verdict.action is Action.FLAG_WAITING
    assert verdict.reason == "waited more than 1m40s for an answer"


def test_a_wait_timeout_under_a_minute_is_named_as_it_was_given() -> None:
    clock = Clock(started=0, last_output=0)
    clock.observe(TaskStatus.WAITING, 1)
    verdict = judge(task(TaskStatus.WAITING), agent(waitTimeout=1.5), clock, 3, nudge_pending=False)
    assert verdict.reason == "waited more than 1.5s for an answer"  # not "2s"


def test_time_spent_waiting_does_not_count_against_the_timeout() -> None:
    clock = Clock(started=0, last_output=0)
    clock.observe(TaskStatus.WAITING, 10)
    clock.observe(TaskStatus.RUNNING, 70)  # a person took a minute to answer
    rules = agent(timeout=30)

    assert judge(task(), rules, clock, 85, nudge_pending=False).action is None
    verdict = judge(task(), rules, clock, 90, nudge_pending=False)
    assert verdict.action is Action.TIME_OUT and verdict.reason == "timed out after 30s of running"


def test_a_flagged_task_still_times_out_but_is_not_nudged() -> None:
    clock = Clock(started=0, last_output=0)
    rules = agent(timeout=30, stallAfter=1)

    assert (
        judge(task(TaskStatus.NEEDS_REVIEW), rules, clock, 10, nudge_pending=False).action is None
    )
    assert (
        judge(task(TaskStatus.NEEDS_REVIEW), rules, clock, 30, nudge_pending=False).action
        is Action.TIME_OUT
    )


def test_a_flag_a_person_clears_starts_the_silence_clock_again() -> None:
    clock = Clock(started=0, last_output=0, last_nudge=10)
    rules = agent(stallAfter=5, maxNudges=1)
    clock.observe(TaskStatus.NEEDS_REVIEW, 20)  # flagged at 20: silent since 0, nudged at 10
    clock.observe(TaskStatus.RUNNING, 30)  # answered at 30

    assert judge(task(), rules, clock, 34, nudge_pending=False).action is None
    verdict = judge(task(), rules, clock, 35, nudge_pending=False)
    assert verdict.action is Action.NUDGE  # a fresh nudge first, not an immediate flag
