"""The worker SDK: protocol, attention rules (pair by pair), merging, resurfacing, EOF,
checkpoints."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from leaders import Leader, eventually, store_of, write_crew

from crew import env
from crew.errors import CrewError, CrewTimeout
from crew.models import Checkpoint
from crew.paths import Home
from crew.protocol import (
    MAX_CHECKPOINT,
    MAX_PROMPT,
    CheckpointRecord,
    Report,
    Withdrawn,
    parse_line,
    spawn_line,
)
from crew.registry import Box, TaskStatus
from crew.store.runstore import RunStore
from crew.store.snapshot import dump_model
from crew.worker import Decision, LeaderGone, Message, NotInRun, Worker


class Harness:
    """A Worker whose stdin is a pipe we write frames to, and whose stdout we read."""

    def __init__(self, **options: Any) -> None:
        self.read_end, self.write_end = os.pipe()
        self.out = io.StringIO()
        self.count = 0
        self.worker = Worker(
            run_id="20261130-034100-7f3a",
            task_id="t",
            attempt=1,
            stdin_fd=self.read_end,
            stdout=self.out,
            coalesce=0.05,
            **options,
        )

    def send(
        self, kind: str, body: str = "", *, wait: bool = True, data: dict[str, Any] | None = None
    ) -> str:
        """Write a frame; with `wait`, return once the worker has queued it (alone or merged)."""
        self.count += 1
        message_id = f"msg_{self.count:016x}"
        frame = {"type": kind, "id": message_id, "body": body or f"{kind} {self.count}",
                 "priority": "high" if kind in {"respond", "steer"} else "normal",
                 "data": data or {}}  # fmt: skip
        os.write(self.write_end, json.dumps(frame).encode() + b"\n")
        if wait:
            with self.worker._cond:
                assert self.worker._cond.wait_for(
                    lambda: any(message_id in e.message.ids for e in self.worker._queue),
                    timeout=5,
                )
        return message_id

    def wait_queued(self, count: int) -> None:
        with self.worker._cond:
            assert self.worker._cond.wait_for(lambda: len(self.worker._queue) >= count, timeout=5)

    def close(self) -> None:
        os.close(self.write_end)

    def clean_up(self) -> None:
        """Close our end of stdin, let the reader thread see EOF, close its end."""
        if not _closed(self.write_end):
            self.close()
        self.worker._reader.join(timeout=5)
        os.close(self.read_end)

    def lines(self) -> list[str]:
        return self.out.getvalue().splitlines()

    def decisions(self) -> list[dict[str, Any]]:
        prefix = "@supervisor decision: "
        return [json.loads(line[len(prefix) :]) for line in self.lines() if line.startswith(prefix)]

    def acks(self) -> list[str]:
        return [line.split()[-1] for line in self.lines() if line.startswith("@supervisor ack:")]


@pytest.fixture
def harness() -> Iterator[Callable[..., Harness]]:
    """Make harnesses with Worker options (all cleaned up after the test)."""
    made: list[Harness] = []

    def make(**options: Any) -> Harness:
        made.append(Harness(**options))
        return made[-1]

    yield make
    for each in made:
        each.clean_up()


@pytest.fixture
def h(harness: Callable[..., Harness]) -> Harness:
    return harness()


def _closed(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return True
    return False


# ----------------------------------------------------------------------------- the rules matrix

KINDS = ["respond", "steer", "nudge", "followUp"]
EXPECTED = {
    # (focus, new): action
    ("respond", "respond"): "continue",
    ("respond", "steer"): "continue",
    ("respond", "nudge"): "continue",
    ("respond", "followUp"): "continue",
    ("steer", "respond"): "preempt",
    ("steer", "steer"): "merge",
    ("steer", "nudge"): "continue",
    ("steer", "followUp"): "continue",
    ("nudge", "respond"): "preempt",
    ("nudge", "steer"): "preempt",
    ("nudge", "nudge"): "continue",
    ("nudge", "followUp"): "continue",
    ("followUp", "respond"): "preempt",
    ("followUp", "steer"): "preempt",
    ("followUp", "nudge"): "continue",
    ("followUp", "followUp"): "continue",
}


@pytest.mark.parametrize(("focus", "new"), list(EXPECTED))
def test_the_attention_rules_pair_by_pair(h: Harness, focus: str, new: str) -> None:
    h.send(focus, "current work")
    current = h.worker.next(timeout=5)
    assert current is not None and current.kind == focus
    new_id = h.send(new, "new arrival")

    decision = h.worker.checkpoint()

    assert decision.action == EXPECTED[(focus, new)]
    assert decision.item is not None and decision.item.id == new_id
    recorded = h.decisions()[-1]
    assert recorded["action"] == decision.action and recorded["item"] == new_id
    if decision.action == "preempt":
        assert h.worker.focus is decision.item and recorded["focus"] == current.id
    elif decision.action == "merge":
        assert h.worker.focus is current and current.body == "current work\n\n---\n\nnew arrival"
        assert new_id in h.acks()
    else:
        assert h.worker.focus is current
    if new == "nudge":
        assert recorded["reason"] == "nudge answered with a status report"
        assert f"@supervisor status: working on {focus} {current.id}: current work" in h.lines()


# ----------------------------------------------------------------------------- the queue


def test_priority_order_and_first_come_first_served_within_a_priority(h: Harness) -> None:
    h.worker.coalesce = 0
    sent = [h.send("followUp", "f1", wait=False)]
    sent.append(h.send("nudge", "n1", wait=False))
    sent.append(h.send("steer", "s1", wait=False))
    sent.append(h.send("steer", "s2", wait=False))
    sent.append(h.send("respond", "r1", wait=False))
    h.wait_queued(5)

    order = []
    for _ in range(5):
        item = h.worker.next(timeout=2)
        assert item is not None
        order.append(item.body)

    assert order == ["r1", "s1", "s2", "n1", "f1"]


def test_queued_follow_ups_merge_into_one_and_every_id_is_acked(h: Harness) -> None:
    first = h.send("followUp", "add tests")
    second = h.send("followUp", "and docs")
    third = h.send("followUp", "and a changelog")

    item = h.worker.next(timeout=2)

    assert item is not None and h.worker.next(timeout=0.1) is None
    assert item.body == "add tests\n\n---\n\nand docs\n\n---\n\nand a changelog"
    assert item.summary == "add tests (+2)"
    assert item.merged == [second, third]
    assert h.acks() == [first, second, third]
    assert h.decisions()[0]["merged"] == [second, third]


def test_a_burst_of_follow_ups_inside_the_coalescing_window_is_one_item(h: Harness) -> None:
    h.worker.coalesce = 0.3
    h.send("followUp", "one")

    def later() -> None:
        h.send("followUp", "two", wait=False)

    threading.Timer(0.05, later).start()
    item = h.worker.next(timeout=2)

    assert item is not None and item.body == "one\n\n---\n\ntwo"


def test_answers_are_never_merged(h: Harness) -> None:
    h.send("respond", "a")
    h.send("respond", "b")

    first, second = h.worker.next(timeout=2), h.worker.next(timeout=2)

    assert first is not None and second is not None
    assert (first.body, second.body) == ("a", "b") and not first.merged


def test_a_preempted_focus_resurfaces_when_idle(h: Harness) -> None:
    h.send("followUp", "long job")
    long_job = h.worker.next(timeout=2)
    h.send("steer", "urgent")
    assert h.worker.checkpoint().action == "preempt"
    assert h.worker.focus is not None and h.worker.focus.body == "urgent"

    h.worker.done("handled")
    again = h.worker.next(timeout=2)

    assert again is long_job
    assert [d["action"] for d in h.decisions()] == ["pick", "preempt", "done", "pick"]
    assert h.decisions()[2] == {
        "action": "done",
        "item": "msg_0000000000000002",
        "kind": "steer",
        "reason": "handled",
    }


def _defer_everything(current: Message, new: Message) -> Decision:
    return Decision("defer", new, "later")


def test_the_tasks_own_work_comes_back_alone_and_unchanged_while_follow_ups_arrive(
    h: Harness,
) -> None:
    h.worker.judge = _defer_everything
    work = h.worker.begin("write the page")
    steer = h.send("steer", "friendlier intro")
    assert h.worker.checkpoint().action == "preempt"  # the task's own work is set aside
    arrived = [h.send("followUp", f"and {what}") for what in ("tests", "docs", "a changelog")]
    assert h.worker.checkpoint().action == "defer"  # the judge sets the follow-ups aside too
    h.worker.done("revised")

    again = h.worker.next(timeout=2)
    later = h.worker.next(timeout=2)

    assert again is work
    assert (work.body, work.merged, work.summary) == ("write the page", [], "write the page")
    assert later is not None and later.ids == arrived and later.summary == "and tests (+2)"
    assert later.body == "and tests\n\n---\n\nand docs\n\n---\n\nand a changelog"
    assert h.acks() == [steer, *arrived]  # each once, the task's own work never


def test_a_preempted_follow_up_comes_back_whole_while_new_follow_ups_merge_together(
    h: Harness,
) -> None:
    job_id = h.send("followUp", "add the users table")
    job = h.worker.next(timeout=2)
    steer_id = h.send("steer", "use uuids")
    assert h.worker.checkpoint().action == "preempt"  # the job is set aside
    answer_id = h.send("respond", "uuid v7")
    assert h.worker.checkpoint().action == "preempt"  # and the steer after it
    h.worker.done("answered")
    handed_out = [h.worker.next(timeout=2)]
    first = h.send("followUp", "and an index")
    second = h.send("followUp", "and a migration")

    handed_out += [h.worker.next(timeout=2), h.worker.next(timeout=2)]

    assert job is not None and job in handed_out
    assert (job.body, job.ids) == ("add the users table", [job_id])
    merged = next(m for m in handed_out if m is not None and m.kind == "followUp" and m is not job)
    assert merged.ids == [first, second] and merged.summary == "and an index (+1)"
    steer = next(m for m in handed_out if m is not None and m.kind == "steer")
    assert (steer.body, steer.ids) == ("use uuids", [steer_id])
    assert sorted(h.acks()) == sorted([job_id, steer_id, answer_id, first, second])  # once each


def test_items_set_aside_come_back_in_the_order_they_were_set_aside(h: Harness) -> None:
    h.worker.judge = _defer_everything
    h.worker.begin("write the page")
    first_steer = h.send("steer", "friendlier intro")
    assert h.worker.checkpoint().action == "preempt"  # 1: the task's own work
    answer = h.send("respond", "yes")
    assert h.worker.checkpoint().action == "preempt"  # 2: the steer
    follow_up = h.send("followUp", "and docs")
    assert h.worker.checkpoint().action == "defer"  # 3: a follow-up the judge put off
    second_steer = h.send("steer", "shorter")
    assert h.worker.checkpoint().action == "defer"  # 4: a steer the judge put off
    h.worker.done("answered")

    back = [h.worker.next(timeout=2) for _ in range(4)]

    assert [m.body for m in back if m is not None] == [
        "write the page",
        "friendlier intro",
        "and docs",
        "shorter",
    ]
    assert all(m is not None and not m.merged for m in back)
    # acknowledged once: when preempting (they became the focus), or when first picked
    assert h.acks() == [first_steer, answer, follow_up, second_steer]
    reasons = [d["reason"] for d in h.decisions() if d["action"] == "pick"][1:]
    preempted, deferred = "resurfaced after a preempt", "resurfaced after a defer"
    assert reasons == [preempted, preempted, deferred, deferred]


def test_a_judge_is_consulted_only_when_the_rules_say_continue(h: Harness) -> None:
    asked: list[tuple[str, str]] = []

    def judge(current: Message, new: Message) -> Decision | None:
        asked.append((current.kind, new.kind))
        if "stop" in new.body:
            return Decision("cancel", new, "the new message revokes the work")
        return None

    h.worker.judge = judge
    h.send("followUp", "publish the post")
    h.worker.next(timeout=2)
    h.send("steer", "faster")  # the rules preempt: no judge
    assert h.worker.checkpoint().action == "preempt"
    h.send("followUp", "stop, do not publish")
    h.wait_queued(1)

    decision = h.worker.checkpoint()

    assert asked == [("steer", "followUp")]
    assert decision.action == "cancel" and h.worker.focus is decision.item


def test_a_judge_that_decides_what_no_checkpoint_can_loses_nothing(h: Harness) -> None:
    # The item was taken off the queue before the action was found unknown: gone, unacknowledged.
    h.worker.judge = lambda current, new: Decision("pick", new, "mine now")
    h.worker.begin("work")
    h.send("followUp", "more work")

    with pytest.raises(ValueError, match="The judge decided 'pick'"):
        h.worker.checkpoint()

    h.worker.judge = None
    later = h.worker.next(timeout=5)
    assert later is not None and later.body == "more work"


def test_a_checkpoint_that_decides_as_the_one_before_says_so_once(h: Harness) -> None:
    # A worker that checks often printed the same `continue` at every checkpoint while a
    # follow-up waited: ~1,000 events in 15 s, each in the message's history.
    h.worker.begin("work")
    h.send("followUp", "more work")
    for _ in range(5):
        assert h.worker.checkpoint().action == "continue"
    h.send("followUp", "and more", wait=False)  # merged into the one waiting: the item changed
    eventually(lambda: h.worker._queue[0].message.merged)
    h.worker.checkpoint()
    h.worker.checkpoint()

    continues = [line for line in h.lines() if '"action": "continue"' in line]
    assert len(continues) == 2 and '"merged"' in continues[1]


def test_a_nudge_while_focused_uses_the_status_callback(h: Harness) -> None:
    h.worker.status_callback = lambda focus: f"step 3 of 5 on {focus.id if focus else '-'}"
    h.send("followUp", "work")
    item = h.worker.next(timeout=2)
    h.send("nudge")

    assert h.worker.checkpoint().action == "continue"
    assert item is not None and f"@supervisor status: step 3 of 5 on {item.id}" in h.lines()


# ----------------------------------------------------------------------------- ask and EOF


def test_ask_prints_the_question_and_queues_what_arrives_meanwhile(h: Harness) -> None:
    def answer() -> None:
        h.send("steer", "meanwhile", wait=False)
        h.send("respond", "sqlite", wait=False)

    threading.Timer(0.05, answer).start()
    body = h.worker.ask("Which database?", kind="need_selection", options=["postgres", "sqlite"])

    assert body == "sqlite"
    assert "@supervisor need_selection: Which database? [postgres|sqlite]" in h.lines()
    later = h.worker.next(timeout=2)
    assert later is not None and later.body == "meanwhile"


def test_ask_answers_nudges_while_it_waits(h: Harness) -> None:
    threading.Timer(
        0.05, lambda: (h.send("nudge", wait=False), h.send("respond", "ok", wait=False))
    ).start()

    assert h.worker.ask("Proceed?", kind="need_confirmation") == "ok"
    assert "@supervisor status: waiting for an answer to: Proceed?" in h.lines()


def test_ask_takes_the_answer_to_its_own_question_not_one_queued_before_it(h: Harness) -> None:
    # An answer to a question asked before (given up on: timed out) was queued, and the next
    # ask returned it at once, though it was no option of its own.
    with pytest.raises(CrewTimeout):
        h.worker.ask("Q1?", timeout=0.1)
    h.send("respond", "forty-two")  # the answer to Q1, late
    answered: list[str] = []
    asking = threading.Thread(
        target=lambda: answered.append(h.worker.ask("Q2?", "need_selection", ["red", "blue"]))
    )
    asking.start()
    eventually(lambda: "@supervisor need_selection: Q2? [red|blue]" in h.lines())
    assert not answered
    h.send("respond", "red", wait=False)  # taken at once by the ask
    asking.join(timeout=10)

    assert answered == ["red"]
    late = h.worker.next(timeout=5)  # the late answer is still the worker's to see
    assert late is not None and late.body == "forty-two"


def test_ask_leaves_a_late_answer_naming_another_question_for_next(h: Harness) -> None:
    # Given up on, Q1 was answered just before the worker took it back; the answer reached it
    # after it had asked Q2, and the ask of Q2 returned Q1's answer as Q2's.
    with pytest.raises(CrewTimeout):
        h.worker.ask("Drop the old table?", "need_confirmation", timeout=0.1)
    answered: list[str] = []
    asking = threading.Thread(target=lambda: answered.append(h.worker.ask("Which database?")))
    asking.start()
    eventually(lambda: "@supervisor need_input: Which database?" in h.lines())
    h.send("respond", "yes", data={"question": "Drop the old table?"})  # Q1's, late
    h.send("respond", "sqlite", wait=False, data={"question": "Which database?"})
    asking.join(timeout=10)

    assert answered == ["sqlite"]
    late = h.worker.next(timeout=5)  # the late answer is the worker's to see, for what it is
    assert late is not None and (late.body, late.data["question"]) == ("yes", "Drop the old table?")


def test_ask_takes_an_answer_that_names_no_question(h: Harness) -> None:
    # A leader before answers named their question, or an answer that cleared a flag.
    threading.Timer(0.05, lambda: h.send("respond", "ok", wait=False)).start()
    assert h.worker.ask("Proceed?", kind="need_confirmation") == "ok"


def test_ask_gives_up_after_its_timeout_and_takes_its_question_back(h: Harness) -> None:
    with pytest.raises(CrewTimeout, match=r"No answer to 'x' within 0\.1s"):
        h.worker.ask("x", timeout=0.1)

    assert h.lines() == ["@supervisor need_input: x", "@supervisor withdraw: no answer within 0.1s"]
    assert parse_line(h.lines()[1]) == Withdrawn("no answer within 0.1s")


def test_a_timeout_that_is_no_number_of_seconds_is_refused_and_one_past_any_timer_never_ends(
    h: Harness,
) -> None:
    # NaN compares false with everything: `next` spun a whole core for ever; `inf`, `1e10`:
    # an OverflowError from the wait.
    for wait in (h.worker.next, lambda timeout: h.worker.ask("x", timeout=timeout)):
        with pytest.raises(ValueError, match="timeout must be a number of seconds"):
            wait(float("nan"))
    h.worker.spawn("w", "child", wait=False)
    with pytest.raises(ValueError, match="timeout must be a number of seconds"):
        h.worker.spawn("w", "child", timeout=float("nan"))
    assert h.lines() == [spawn_line("w", "child", wait=False)]  # nothing asked, nothing spawned
    threading.Timer(0.05, lambda: h.send("steer", "later", wait=False)).start()
    for endless in (float("inf"), 1e10):
        got = h.worker.next(timeout=endless)
        assert got is not None and got.body == "later"
        h.worker.done()
        threading.Timer(0.05, lambda: h.send("steer", "later", wait=False)).start()
    assert h.worker.next(timeout=5) is not None


def test_the_end_of_input_raises_leader_gone(h: Harness) -> None:
    h.send("steer", "last one")
    h.close()

    assert h.worker.next(timeout=2) is not None  # what arrived is still handed out
    with pytest.raises(LeaderGone, match="the leader has gone"):
        h.worker.next(timeout=2)
    with pytest.raises(LeaderGone):
        h.worker.ask("anyone?")
    assert issubclass(LeaderGone, CrewError)


def test_a_checkpoint_after_the_end_of_input_raises_leader_gone_once_it_has_saved(
    h: Harness,
) -> None:
    # It went on with "nothing new" for good: a worker following the docs' `except LeaderGone`
    # never learned that the leader was gone, and was killed at the end of the grace.
    h.worker.begin("work")
    h.send("steer", "arrived before the end")
    h.close()
    h.worker._reader.join(timeout=5)

    assert h.worker.checkpoint().action == "preempt"  # what arrived is decided on first
    with pytest.raises(LeaderGone, match="the leader has gone"):
        h.worker.checkpoint(state={"step": 2})
    with pytest.raises(LeaderGone):
        h.worker.checkpoint(wait=5)
    h.worker.save({"step": 3})  # a LeaderGone handler saves without a focus or a decision
    saved = [parse_line(line) for line in h.lines() if "checkpoint:" in line]
    assert [s.state for s in saved if isinstance(s, CheckpointRecord)] == [{"step": 2}, {"step": 3}]


def test_output_no_one_reads_raises_leader_gone_and_later_output_goes_nowhere() -> None:
    # A leader killed: the worker's next print raised BrokenPipeError, which no `except
    # LeaderGone` caught, and every print after it failed the same way.
    code = """
import os, sys
from crew.worker import LeaderGone, Worker
read_end, write_end = os.pipe()
worker = Worker(run_id="20261130-034100-7f3a", task_id="t", attempt=1, stdin_fd=read_end)
try:
    worker.begin("work")
    for _ in range(10_000):
        worker.report("still working")
except LeaderGone as gone:
    print("after:", gone, flush=True)  # goes nowhere, and does not fail
    sys.stderr.write(f"caught {gone}\\n")
"""
    reader, writer = os.pipe()
    process = subprocess.Popen(
        [sys.executable, "-c", code], stdout=writer, stderr=subprocess.PIPE, text=True
    )
    os.close(writer)
    os.close(reader)  # no one reads what it prints from now on
    _, err = process.communicate(timeout=60)

    assert process.returncode == 0, err
    assert err == "caught stdout closed: the leader has gone.\n"


def test_bad_arguments_are_refused(h: Harness) -> None:
    with pytest.raises(ValueError, match="need_selection needs options"):
        h.worker.ask("x", kind="need_selection")
    with pytest.raises(ValueError):
        h.worker.ask("x", kind="progress")
    with pytest.raises(ValueError):
        h.worker.report("x", kind="need_input")
    with pytest.raises(RuntimeError, match="needs a focus"):
        h.worker.checkpoint()


def _deep(levels: int) -> Any:
    value: Any = 1
    for _ in range(levels):
        value = [value]
    return value


@pytest.mark.parametrize(
    ("call", "why"),
    [
        (lambda w: w.ask("Type?", "need_selection", ["list[int]", "str"], 1), "may not hold '\\['"),
        (
            lambda w: w.ask("Which?", "need_selection", ["x" * 501], 1),
            "an option of 501 characters",
        ),
        (lambda w: w.ask("Which?", "need_selection", list(map(str, range(101))), 1), "101 options"),
        (lambda w: w.checkpoint(state=_deep(70)), "nested deeper than 64 levels"),
        (lambda w: w.save(_deep(70)), "nested deeper than 64 levels"),
    ],
    ids=["brackets", "a long option", "too many options", "deep state", "deep save"],
)
def test_what_the_leader_would_not_read_is_refused_before_it_is_printed(
    h: Harness, call: Callable[[Worker], object], why: str
) -> None:
    # Printed anyway, the leader recorded it as malformed: the ask waited for good for an
    # answer no one could send, the checkpoint returned as if saved.
    h.worker.begin("work")
    before = h.lines()

    with pytest.raises(ValueError, match=why):
        call(h.worker)
    assert h.lines() == before


def test_an_option_is_answered_as_it_was_given_not_as_its_line_writes_it(h: Harness) -> None:
    # The line offers `read/write` for `read|write`, and the answer came back `read/write`:
    # `answer in options` was False in the worker that asked.
    options = ["read|write", "two  spaces"]
    answers: list[str] = []
    asking = threading.Thread(
        target=lambda: answers.append(h.worker.ask("Mode?", "need_selection", options))
    )
    asking.start()
    eventually(lambda: h.lines() == ["@supervisor need_selection: Mode? [read/write|two spaces]"])
    h.send("respond", "read/write", wait=False)
    asking.join(timeout=10)

    assert answers == ["read|write"]


def test_options_a_line_would_write_alike_are_refused_before_it_is_printed(h: Harness) -> None:
    with pytest.raises(ValueError, match="no answer could tell them apart"):
        h.worker.ask("Mode?", "need_selection", ["a|b", "a/b"])
    assert h.lines() == []


def test_a_report_longer_than_the_leader_keeps_is_cut_not_lost(h: Harness) -> None:
    # Printed whole, a 600,000-character note was a malformed line: not recorded at all.
    h.worker.report("é" * 600_000, kind="note")

    [line] = h.lines()
    parsed = parse_line(line)
    assert isinstance(parsed, Report) and len(parsed.text) == MAX_PROMPT
    assert parsed.text.endswith("…")


def _told(h: Harness, *children: dict[str, Any]) -> None:
    """A children message from the leader (crew/domain/adding.py `_tell`)."""
    h.count += 1
    frame = {"type": "followUp", "id": f"msg_{h.count:016x}", "body": "told", "priority": "normal",
             "data": {"source": "children", "children": list(children)}}  # fmt: skip
    os.write(h.write_end, json.dumps(frame).encode() + b"\n")


def test_a_spawn_that_waits_takes_the_result_of_its_own_child(h: Harness) -> None:
    # It took the first children message queued: another spawn's refusal, returned at once.
    _told(h, {"id": None, "agent": "nosuch", "status": "refused", "error": "no such agent"})
    h.wait_queued(1)
    found: list[object] = []
    spawning = threading.Thread(target=lambda: found.append(h.worker.spawn("c", "go")))
    spawning.start()
    _told(h, {"id": "t.1", "agent": "c", "status": "completed", "result": "done"})
    spawning.join(timeout=10)

    assert found == [{"id": "t.1", "agent": "c", "status": "completed", "result": "done"}]
    h.worker.begin("work")
    left = h.worker.next(timeout=5)  # the refusal is still the worker's to see
    assert left is not None and left.data["children"][0]["agent"] == "nosuch"


def test_a_spawn_that_waits_takes_no_refusal_of_a_spawn_that_did_not(h: Harness) -> None:
    # Both for the same agent: the refusal of the spawn that did not wait was returned at once.
    found: list[object] = []
    spawning = threading.Thread(target=lambda: found.append(h.worker.spawn("c", "go")))
    spawning.start()
    eventually(lambda: any("spawn" in line for line in h.lines()))
    _told(h, {"id": "p", "agent": "c", "status": "refused", "error": "taken", "wait": False})
    h.wait_queued(1)
    assert found == []
    _told(h, {"id": "t.1", "agent": "c", "status": "completed", "result": "done"})
    spawning.join(timeout=10)

    assert found == [{"id": "t.1", "agent": "c", "status": "completed", "result": "done"}]


def test_outside_a_run_from_env_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CREW_RUN_ID", raising=False)

    with pytest.raises(NotInRun, match="Not running under a crew leader"):
        Worker.from_env()
    assert issubclass(NotInRun, CrewError)


def test_a_worker_exits_cleanly_while_its_reader_thread_blocks_on_stdin() -> None:
    script = (
        "from crew.worker import Worker\n"
        "w = Worker.from_env()\n"
        "w.report('started')\n"
        "print('bye', flush=True)\n"
    )
    read_end, write_end = os.pipe()  # stdin stays open: the reader thread is blocked in read()
    try:
        done = subprocess.run(
            [sys.executable, "-c", script],
            stdin=read_end,
            capture_output=True,
            text=True,
            env={**os.environ, "CREW_RUN_ID": "20261130-034100-7f3a", "CREW_TASK_ID": "t"},
            timeout=20,
            check=False,
        )
    finally:
        os.close(read_end)
        os.close(write_end)

    assert done.returncode == 0, done.stderr
    assert done.stdout == "@supervisor progress: started\nbye\n"
    assert "Fatal Python error" not in done.stderr


def test_a_process_has_one_worker_reading_its_stdin() -> None:
    # A second Worker.from_env() started a second reader: the messages were split between them.
    script = (
        "from crew.worker import Worker\n"
        "w = Worker.from_env()\n"
        "assert Worker.from_env() is w\n"
        "try:\n"
        "    Worker.from_env(coalesce=0)\n"
        "except ValueError as error:\n"
        "    print(error)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env={**os.environ, "CREW_RUN_ID": "20261130-034100-7f3a", "CREW_TASK_ID": "t"},
        timeout=20,
        check=False,
    )

    assert done.returncode == 0, done.stderr
    assert "Worker.from_env() was called before" in done.stdout


def test_the_tasks_own_work_can_be_preempted_and_resurfaces(h: Harness) -> None:
    work = h.worker.begin("write the page")
    h.send("steer", "friendlier intro")

    decision = h.worker.checkpoint()

    assert decision.action == "preempt" and h.worker.focus is decision.item
    h.worker.done("revised")
    assert h.worker.next(timeout=2) is work
    assert "@supervisor ack: task" not in h.lines()  # the task's own work is not a message


def test_a_checkpoint_that_waits_takes_what_arrives_and_answers_nudges_meanwhile(
    h: Harness,
) -> None:
    h.worker.begin("write the page")
    threading.Timer(
        0.2, lambda: (h.send("nudge", wait=False), h.send("steer", "shorter", wait=False))
    ).start()

    decision = h.worker.checkpoint(wait=30)

    assert decision.action == "preempt" and decision.item is not None
    assert decision.item.body == "shorter"
    assert any(line.startswith("@supervisor status: working on") for line in h.lines())


def test_a_checkpoint_that_waits_goes_on_after_its_wait_and_ends_at_the_end_of_input(
    h: Harness,
) -> None:
    h.worker.begin("write the page")
    started = time.monotonic()
    assert h.worker.checkpoint(wait=0.2).reason == "nothing new"
    assert time.monotonic() - started >= 0.2

    h.close()
    h.worker._reader.join(timeout=5)
    started = time.monotonic()
    with pytest.raises(LeaderGone):
        h.worker.checkpoint(wait=60)
    assert time.monotonic() - started < 30  # the end of input, not the wait, ended it


# ----------------------------------------------------------------------------- checkpoints

TRICKY_STATE = {
    "done": ["parser", "lexer"],
    "note": "naïve café ✓ 🚀",
    "breaks": "a\nb\r\nc\u2028d\u2029e\x85f\x0bg",
    "escapes": "\x1b[31mred\x1b[0m \x9b31m \x07 tab\t",
    "nothing": None,
    "numbers": [1, -2.5, True],
}


def _saved_lines(h: Harness) -> list[str]:
    return [line for line in h.lines() if line.startswith("@supervisor checkpoint:")]


def test_checkpoint_with_a_state_saves_it_on_one_line_before_deciding(h: Harness) -> None:
    h.worker.begin("compile")
    steer = h.send("steer", "skip the docs")

    decision = h.worker.checkpoint(state=TRICKY_STATE)

    assert decision.action == "preempt" and decision.item is not None
    assert decision.item.id == steer  # still a safe point: the decision is the same
    (line,) = _saved_lines(h)
    assert line.splitlines() == [line]  # no character any reader could split it on
    assert "\x1b" not in line and "\x9b" not in line  # no raw escape sequence either
    assert "naïve café ✓ 🚀" in line  # not ASCII-escaped
    assert parse_line(line) == CheckpointRecord(TRICKY_STATE)  # what the leader will store
    lines = h.lines()
    assert lines.index(line) < lines.index(next(x for x in lines if '"preempt"' in x))


def test_checkpoint_saves_none_and_without_a_state_saves_nothing(h: Harness) -> None:
    h.worker.begin("compile")

    assert h.worker.checkpoint().action == "continue"
    assert _saved_lines(h) == []
    assert h.worker.checkpoint(state=None).action == "continue"
    assert _saved_lines(h) == ["@supervisor checkpoint: null"]


@pytest.mark.parametrize(
    ("state", "error", "match"),
    [
        (object(), TypeError, "not JSON serializable"),
        ({"ratio": float("nan")}, ValueError, "not JSON compliant"),
        (
            "x" * MAX_CHECKPOINT,
            ValueError,
            f"limited to {MAX_CHECKPOINT} bytes of JSON, this one has {MAX_CHECKPOINT + 2}",
        ),
    ],
    ids=["not-json", "nan", "too-large"],
)
def test_a_state_json_cannot_hold_is_refused_and_nothing_is_saved(
    h: Harness, state: object, error: type[Exception], match: str
) -> None:
    work = h.worker.begin("compile")
    before = h.lines()

    with pytest.raises(error, match=match):
        h.worker.checkpoint(state=state)

    assert h.lines() == before and h.worker.focus is work


def test_checkpoint_without_a_focus_is_refused_before_saving(h: Harness) -> None:
    with pytest.raises(RuntimeError, match=r"needs a focus: call next\(\) or begin\(\) first"):
        h.worker.checkpoint(state={"done": []})
    assert h.lines() == []


def _checkpoint_file(folder: Path, state: object, task_id: str = "t") -> Path:
    """A checkpoint file exactly as the leader writes it."""
    saved = Checkpoint(
        task_id=task_id, attempt=1, saved_at="2026-11-30T03:41:00.123456Z", state=state
    )
    path = folder / f"{task_id}.json"
    path.write_bytes(dump_model(saved))
    return path


def test_restored_returns_what_the_previous_attempt_saved(
    tmp_path: Path, harness: Callable[..., Harness]
) -> None:
    h = harness(checkpoint_file=_checkpoint_file(tmp_path, TRICKY_STATE))

    assert h.worker.restored() == TRICKY_STATE
    assert h.worker.restored(default="fresh") == TRICKY_STATE


def test_a_saved_none_is_told_apart_from_no_checkpoint_by_a_default(
    tmp_path: Path, harness: Callable[..., Harness]
) -> None:
    saved_none = harness(checkpoint_file=_checkpoint_file(tmp_path, None))
    nothing_saved = harness()

    assert saved_none.worker.restored() is None and nothing_saved.worker.restored() is None
    assert saved_none.worker.restored(default="fresh") is None
    assert nothing_saved.worker.restored(default="fresh") == "fresh"


@pytest.mark.parametrize(
    "content",
    [None, b"", b'{"taskId": "t", "state": ', b"[1, 2]", b"\xff\xfe", "another task"],
    ids=["missing", "empty", "torn", "not-an-object", "not-utf8", "another-task"],
)
def test_restored_is_the_default_when_the_checkpoint_cannot_be_used(
    tmp_path: Path, harness: Callable[..., Harness], content: bytes | str | None
) -> None:
    path = tmp_path / "t.json"
    if content == "another task":
        path = _checkpoint_file(tmp_path, {"done": ["x"]}, task_id="other")
    elif isinstance(content, bytes):
        path.write_bytes(content)

    h = harness(checkpoint_file=path)

    assert h.worker.restored() is None and h.worker.restored(default="fresh") == "fresh"


def test_restored_is_read_at_the_start_not_replaced_by_this_attempts_own_saves(
    tmp_path: Path, harness: Callable[..., Harness]
) -> None:
    path = _checkpoint_file(tmp_path, {"done": ["parser"]})
    h = harness(checkpoint_file=path)
    _checkpoint_file(tmp_path, {"done": ["parser", "lexer"]})  # the leader stores a new save

    assert h.worker.restored() == {"done": ["parser"]}


def test_from_env_finds_the_checkpoint_the_leader_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _checkpoint_file(tmp_path, {"done": ["parser"]})
    monkeypatch.setenv(env.RUN_ID.name, "20261130-034100-7f3a")
    monkeypatch.setenv(env.TASK_ID.name, "t")
    monkeypatch.setenv(env.ATTEMPT.name, "2")
    monkeypatch.setenv(env.CHECKPOINT.name, str(path))
    read_end, write_end = os.pipe()
    worker = Worker.from_env(stdin_fd=read_end, stdout=io.StringIO())
    try:
        assert worker.attempt == 2 and worker.restored() == {"done": ["parser"]}
    finally:
        os.close(write_end)
        worker._reader.join(timeout=5)
        os.close(read_end)


def _led(tmp_path: Path, home: Home, script: str) -> tuple[Leader, RunStore]:
    """A run of one task `t` whose worker is `script`, led by a real `crew run`."""
    worker = tmp_path / "worker.py"
    worker.write_text(script)
    command = ["{python}", str(worker), "{prompt}"]
    write_crew(tmp_path, [{"id": "t", "prompt": "compile"}], command=command)
    leader = Leader("run", "crew.toml", cwd=tmp_path)
    return leader, store_of(home, leader.run_id)


SAVER = """
import json, sys
from crew.worker import LeaderGone, Worker

worker = Worker.from_env()
progress = worker.restored()
print(f"attempt {worker.attempt} restored {json.dumps(progress, ensure_ascii=False)}", flush=True)
worker.begin(sys.argv[1])
if worker.attempt == 1:
    worker.checkpoint(state={"done": ["parser", "lexer"], "note": "naïve ✓"})
    try:
        worker.next()  # holds the attempt open until the leader is gone
    except LeaderGone:
        sys.exit(1)
worker.done("compiled")
"""


def test_a_checkpoint_survives_kill_9_and_resume_gives_it_to_the_next_attempt(
    tmp_path: Path, home: Home
) -> None:
    leader, store = _led(tmp_path, home, SAVER)
    saved = eventually(lambda: store.checkpoint("t"), timeout=20)
    assert saved.attempt == 1 and saved.state == {"done": ["parser", "lexer"], "note": "naïve ✓"}

    leader.process.kill()  # SIGKILL: no goodbye
    leader.finish()
    resumed = Leader("resume", leader.run_id, cwd=tmp_path)

    assert resumed.finish() == 0, resumed.err
    task = store.state().tasks["t"]
    assert task.status is TaskStatus.COMPLETED and task.attempt == 2
    log = store.paths.log("t").read_text()
    assert "attempt 1 restored null" in log
    assert 'attempt 2 restored {"done": ["parser", "lexer"], "note": "naïve ✓"}' in log


LEAVER = """
import json, sys
from crew.worker import LeaderGone, Worker

worker = Worker.from_env()
print(f"attempt {worker.attempt} restored {json.dumps(worker.restored())}", flush=True)
worker.begin(sys.argv[1])
if worker.attempt == 1:
    worker.checkpoint(state={"step": 1})
    try:
        while True:
            worker.checkpoint(wait=60)  # paused until something arrives, or the leader goes
    except LeaderGone:
        worker.save({"step": 2, "saved": "on the way out"})
        sys.exit(1)
worker.done("compiled")
"""


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_the_progress_a_worker_saves_as_its_leader_stops_goes_to_the_next_attempt(
    tmp_path: Path, home: Home, stop: signal.Signals
) -> None:
    # A stopping leader logged what its workers printed and recorded nothing of it: the
    # checkpoint saved in the `except LeaderGone` the docs show was lost.
    leader, store = _led(tmp_path, home, LEAVER)
    assert eventually(lambda: store.checkpoint("t"), timeout=20).state == {"step": 1}

    leader.process.send_signal(stop)
    assert leader.finish() == 130, leader.err
    saved = store.checkpoint("t")
    assert saved is not None and saved.state == {"step": 2, "saved": "on the way out"}
    resumed = Leader("resume", leader.run_id, cwd=tmp_path)

    assert resumed.finish() == 0, resumed.err
    log = store.paths.log("t").read_text()
    assert 'attempt 2 restored {"step": 2, "saved": "on the way out"}' in log


ASKER = """
import sys
from crew.errors import CrewTimeout
from crew.worker import Worker

worker = Worker.from_env()
try:
    worker.ask("Which database?", timeout=0.5)
except CrewTimeout:
    worker.report("going on with sqlite")
item = worker.next(timeout=60)
print(f"went on, then: {item.kind} {item.body}", flush=True)
"""


def test_a_question_the_worker_gave_up_on_is_taken_back_and_the_task_runs_again(
    tmp_path: Path, home: Home, cli: Callable[..., Any]
) -> None:
    # An ask that timed out left the task `waiting` for an answer the worker no longer read:
    # the run showed it blocked, flagged it after waitTimeout, and took the late answer.
    leader, store = _led(tmp_path, home, ASKER)
    withdrawn = eventually(
        lambda: [e for e in store.events().records if e.type == "supervisor.withdrawn"], timeout=20
    )
    assert withdrawn[0].message.endswith("withdrew its question " + withdrawn[0].data["contactId"]
                                         + ": no answer within 0.5s")  # fmt: skip
    task = store.state().tasks["t"]
    assert task.status is TaskStatus.RUNNING and task.contact is None

    refused = cli("respond", leader.run_id, "t", "postgres")
    assert refused.code == 4 and "Task t is running" in refused.err
    assert cli("steer", leader.run_id, "t", "finish").code == 0
    assert leader.finish() == 0, leader.err
    assert store.state().tasks["t"].status is TaskStatus.COMPLETED
    assert "went on, then: steer finish" in store.paths.log("t").read_text()


FRAME_READER = """
import json, sys

print("@supervisor need_input: Which  database?\\x1b[0m", flush=True)
frame = json.loads(sys.stdin.readline())
print("answer to: " + json.dumps(frame["data"].get("question")), flush=True)
print(f"@supervisor ack: {frame['id']}", flush=True)
"""


def test_an_answer_reaches_its_worker_naming_its_question_as_the_worker_asked_it(
    tmp_path: Path, home: Home, cli: Callable[..., Any]
) -> None:
    leader, store = _led(tmp_path, home, FRAME_READER)
    eventually(lambda: store.state().tasks["t"].status is TaskStatus.WAITING, timeout=20)

    assert cli("respond", leader.run_id, "t", "sqlite").code == 0
    assert leader.finish() == 0, leader.err
    assert 'answer to: "Which  database?"' in store.paths.log("t").read_text()
    (answer,) = store.messages(Box.INBOX)
    assert "question" not in (answer.data or {})  # in the frame alone


PARTIAL = """
import sys
from crew.worker import Worker

worker = Worker.from_env()
print("Checking... ", end="", flush=True)
worker.report("checked")
sys.stderr.write("\\r 45%|####      | 45/100")  # a progress bar, as tqdm draws it
sys.stderr.flush()
print(f"got {worker.ask('Which database?')}", flush=True)
"""


def test_a_protocol_line_after_part_of_a_line_starts_a_line_of_its_own(
    tmp_path: Path, home: Home, cli: Callable[..., Any]
) -> None:
    # Printed after "Checking... " (or a progress bar's `\r`), the question was on a line that
    # did not start with @supervisor: never asked, and the worker waited for good.
    leader, store = _led(tmp_path, home, PARTIAL)
    eventually(lambda: store.state().tasks["t"].contact, timeout=20)

    assert cli("respond", leader.run_id, "t", "postgres").code == 0
    assert leader.finish() == 0, leader.err
    log = store.paths.log("t").read_text()
    assert log.startswith("Checking... \n@supervisor progress: checked\n")
    assert "45/100\n@supervisor need_input: Which database?\n" in log
    assert "got postgres" in log
    reports = [m.body for m in store.messages() if m.kind.value == "report"]
    assert reports == ["checked"]


def test_a_protocol_line_starts_a_line_whatever_order_the_buffers_reach_the_pipe() -> None:
    # Piped, stdout holds a block and stderr a line: "Processing" waited in stdout's buffer
    # while a warning's whole line reached the pipe, and the report was glued to "Processing".
    script = (
        "import os, sys, warnings\n"
        "from crew.worker import Worker\n"
        "read_end, _ = os.pipe()\n"
        "worker = Worker(run_id='20261130-034100-7f3a', task_id='t', attempt=1, stdin_fd=read_end)\n"
        "print('Processing', end='')\n"
        "warnings.warn('slow disk')\n"
        "worker.report('half way')\n"
        "print('done')\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    done = subprocess.run(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, env=env, timeout=20, check=False,
    )  # fmt: skip

    assert done.returncode == 0, done.stdout
    lines = done.stdout.splitlines()
    assert "@supervisor progress: half way" in lines, done.stdout
    assert lines[-1] == "done"
