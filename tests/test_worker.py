"""The worker SDK: protocol, attention rules (pair by pair), merging, resurfacing, EOF."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from crew.errors import CrewError, CrewTimeout
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

    def send(self, kind: str, body: str = "", *, wait: bool = True) -> str:
        self.count += 1
        message_id = f"msg_{self.count:016x}"
        frame = {"type": kind, "id": message_id, "body": body or f"{kind} {self.count}",
                 "priority": "high" if kind in {"respond", "steer"} else "normal", "data": {}}  # fmt: skip
        before = self.queued()
        os.write(self.write_end, json.dumps(frame).encode() + b"\n")
        if wait:
            self.wait_queued(before + 1, merged_ok=kind == "followUp")
        return message_id

    def queued(self) -> int:
        with self.worker._cond:
            return len(self.worker._queue)

    def wait_queued(self, count: int, *, merged_ok: bool = False) -> None:
        with self.worker._cond:
            seen = self.worker._seq
            assert self.worker._cond.wait_for(
                lambda: (
                    len(self.worker._queue) >= count
                    or (merged_ok and any(e.message.merged for e in self.worker._queue))
                    or self.worker._seq > seen + 1
                ),
                timeout=5,
            )

    def close(self) -> None:
        os.close(self.write_end)

    def lines(self) -> list[str]:
        return self.out.getvalue().splitlines()

    def decisions(self) -> list[dict[str, Any]]:
        prefix = "@supervisor decision: "
        return [json.loads(line[len(prefix) :]) for line in self.lines() if line.startswith(prefix)]

    def acks(self) -> list[str]:
        return [line.split()[-1] for line in self.lines() if line.startswith("@supervisor ack:")]


@pytest.fixture
def h() -> Iterator[Harness]:
    harness = Harness()
    yield harness
    os.close(harness.write_end) if not _closed(harness.write_end) else None


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


def test_ask_gives_up_after_its_timeout(h: Harness) -> None:
    with pytest.raises(CrewTimeout, match=r"No answer to 'x' within 0\.1s"):
        h.worker.ask("x", timeout=0.1)


def test_the_end_of_input_raises_leader_gone(h: Harness) -> None:
    h.send("steer", "last one")
    h.close()

    assert h.worker.next(timeout=2) is not None  # what arrived is still handed out
    with pytest.raises(LeaderGone, match="the leader has gone"):
        h.worker.next(timeout=2)
    with pytest.raises(LeaderGone):
        h.worker.ask("anyone?")
    assert issubclass(LeaderGone, CrewError)


def test_bad_arguments_are_refused(h: Harness) -> None:
    with pytest.raises(ValueError, match="need_selection needs options"):
        h.worker.ask("x", kind="need_selection")
    with pytest.raises(ValueError):
        h.worker.ask("x", kind="progress")
    with pytest.raises(ValueError):
        h.worker.report("x", kind="need_input")
    with pytest.raises(RuntimeError, match="needs a focus"):
        h.worker.checkpoint()


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


def test_the_tasks_own_work_can_be_preempted_and_resurfaces(h: Harness) -> None:
    work = h.worker.begin("write the page")
    h.send("steer", "friendlier intro")

    decision = h.worker.checkpoint()

    assert decision.action == "preempt" and h.worker.focus is decision.item
    h.worker.done("revised")
    assert h.worker.next(timeout=2) is work
    assert "@supervisor ack: task" not in h.lines()  # the task's own work is not a message
