"""The worker SDK: the crew protocol and an attention loop for Python workers (docs/sdk.md).

One focus at a time: `next()` hands out the most urgent queued message (respond > steer > nudge >
followUp, first come first served within each), `checkpoint()` decides what to do about anything
that arrived meanwhile (`checkpoint(state=…)` also saves progress for the next attempt's
`restored()`), `done()` ends the focus; `ask()` blocks for the answer to its own question.
Follow-ups that queue up are merged into one; an item that was ever the focus or deferred never
is: it comes back whole, in the order it was set aside. Nudges are answered with a status
report without breaking focus. Every decision is printed as an `@supervisor decision:` line, so
it lands in the run's event log. The rules are in docs/attention.md.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TextIO

from crew import clock, env
from crew.attention import NOTHING_NEW, Decision, Judge, decide
from crew.errors import CrewError, CrewTimeout
from crew.frames import Message, child_told, read_checkpoint
from crew.frames import is_children as _is_children
from crew.frames import parse_frame as _parse_frame
from crew.frames import priority_rank as _rank
from crew.line_ends import LineEnds, watch_standard_streams
from crew.protocol import (
    MAX_PROMPT,
    Contact,
    checkpoint_line,
    contact_line,
    parse_line,
    spawn_line,
    withdraw_line,
    written_options,
)
from crew.registry import (
    REDIRECTING_DECISIONS,
    REPORT_CONTACTS,
    ContactType,
    DecisionAction,
    MessageData,
    MessageKind,
)
from crew.text import clip

MERGE_SEPARATOR = "\n\n---\n\n"
#: The id of the task's own work (`begin`): not a message, so never acknowledged.
TASK_ITEM = "task"
COALESCE_WINDOW = 0.2
_URGENT = frozenset({MessageKind.RESPOND, MessageKind.STEER})
#: Not given (`checkpoint()` without a state) or not found (`restored()` without a checkpoint).
_NO_STATE: Any = object()
#: The Worker reading this process's stdin, once `Worker.from_env()` made it.
_of_this_process: Worker | None = None


class NotInRun(CrewError):
    """The program was not started by a crew leader (no CREW_* environment)."""


class LeaderGone(CrewError):
    """stdin reached its end: the leader has gone. Save your work and exit."""


StatusCallback = Callable[[Message | None], str]


@dataclass(order=True)
class _Queued:
    """A message that arrived and was never picked: the only kind that merges."""

    rank: int
    seq: int
    message: Message = field(compare=False)


class Worker:
    """One worker's side of the crew protocol, with its attention loop."""

    def __init__(
        self,
        *,
        run_id: str,
        task_id: str,
        attempt: int,
        stdin_fd: int = 0,
        stdout: TextIO | None = None,
        judge: Judge | None = None,
        status_callback: StatusCallback | None = None,
        coalesce: float = COALESCE_WINDOW,
        checkpoint_file: str | os.PathLike[str] | None = None,
    ) -> None:
        self.run_id = run_id
        self.task_id = task_id
        self.attempt = attempt
        self.judge = judge
        self.status_callback = status_callback
        self.coalesce = coalesce
        self.focus: Message | None = None
        # Watched, the standard streams say where the output left off (crew/line_ends.py).
        self._out, self._line_ends = (
            watch_standard_streams() if stdout is None else (stdout, LineEnds())
        )
        self._write_lock = threading.Lock()
        self._cond = threading.Condition()
        self._queue: list[_Queued] = []
        # Execution items set aside, oldest first, and how: preempt (acknowledged) or defer.
        self._set_aside: list[tuple[Message, DecisionAction]] = []
        # Read at the start: this attempt's own checkpoints later replace the same file.
        found, state = read_checkpoint(checkpoint_file, task_id)
        self._restored = state if found else _NO_STATE
        self._seq = 0
        self._eof = False
        self._said: dict[str, Any] | None = None  # the last decision printed, if a continue
        self._reader = threading.Thread(
            target=self._read, args=(stdin_fd,), name="crew-stdin", daemon=True
        )
        self._reader.start()

    @classmethod
    def from_env(cls, **options: Any) -> Worker:
        """The worker of the current crew task (NotInRun outside a crew run). A process has one
        reader of its stdin: called again, without options, it returns the same Worker (with
        other options, a ValueError: a second reader would take half the messages)."""
        global _of_this_process  # noqa: PLW0603  # one process, one stdin
        if _of_this_process is not None:
            if options:
                raise ValueError(
                    "Worker.from_env() was called before: this process's Worker reads its stdin, "
                    "and a second would take half its messages. Call it without options for "
                    "the same Worker."
                )
            return _of_this_process
        run_id, task_id = env.RUN_ID.value(), env.TASK_ID.value()
        if run_id is None or task_id is None:
            raise NotInRun(
                f"Not running under a crew leader: {env.RUN_ID.name} and {env.TASK_ID.name} "
                "are not set.",
                hint="Start this program as a task of a crew (`crew run`).",
            )
        attempt = int(env.ATTEMPT.value() or "1")
        options.setdefault("checkpoint_file", env.CHECKPOINT.value())
        worker = cls(run_id=run_id, task_id=task_id, attempt=attempt, **options)
        if options.get("stdin_fd", 0) == 0:
            _of_this_process = worker
        return worker

    # ------------------------------------------------------------------ talking to the leader

    def report(self, text: str, kind: str = ContactType.PROGRESS) -> None:
        """A non-blocking `progress`, `status` or `note` line, on one line and cut to the
        MAX_PROMPT characters the leader keeps (a longer line would not be read at all)."""
        if ContactType(kind) not in REPORT_CONTACTS:
            raise ValueError(f"report kind must be progress, status or note, not {kind!r}")
        self._say(f"@supervisor {kind}: {clip(' '.join(text.split()), MAX_PROMPT)}")

    def restored(self, default: Any = None) -> Any:
        """The state an earlier attempt saved with `checkpoint(state=…)`, or `default` when none
        was (or its file cannot be read). A saved None is None: another `default` tells them apart.
        """
        return default if self._restored is _NO_STATE else self._restored

    def ask(
        self,
        prompt: str,
        kind: str = ContactType.NEED_INPUT,
        options: list[str] | None = None,
        timeout: float | None = None,
    ) -> str:
        """Ask the supervisor and block until the answer comes; returns its body.

        Everything else that arrives meanwhile is queued for later (nudges are answered).
        Raises LeaderGone at end of input; CrewTimeout after `timeout` seconds, the question
        taken back first (the task runs again; an answer given just before is queued, a kind
        `respond` message for `next()`).
        """
        contact = ContactType(kind)
        if not contact.blocking:
            raise ValueError("ask kind must be need_input, need_confirmation or need_selection")
        if contact is ContactType.NEED_SELECTION and not options:
            raise ValueError("need_selection needs options")
        shown = written_options(options or [])
        line = contact_line(contact, prompt, options)
        asked = parse_line(line)  # the question as the leader keeps it: its answer names it
        question = asked.prompt if isinstance(asked, Contact) else None
        with self._cond:
            asked_after = self._seq  # an answer queued before the question is an earlier one's
        deadline = clock.deadline(timeout)  # a bad one is refused before anything is asked
        self._say(line)
        with self._cond:
            while True:
                self._answer_nudges(waiting_on=prompt)
                answer = self._take(MessageKind.RESPOND, after=asked_after, question=question)
                if answer is not None:
                    break
                if self._eof:
                    raise LeaderGone(f"stdin closed while waiting for an answer to {prompt!r}.")
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    self._say(withdraw_line(f"no answer within {timeout:g}s"))
                    raise CrewTimeout(f"No answer to {prompt!r} within {timeout:g}s.")
                self._cond.wait(remaining)
        self._ack(answer)
        return shown.get(answer.body, answer.body)

    def spawn(
        self,
        agent: str,
        prompt: str,
        *,
        wait: bool = True,
        task_id: str | None = None,
        timeout: float | None = None,
    ) -> dict[str, Any] | None:
        """Add a task to the run, run by `agent`, as this task's child (its agent needs
        `may = ["spawn"]`). With `wait`, block (the task is `waiting`) until the child has ended
        and return what the leader says of it: `{"id", "agent", "status", "result"?, "error"?}`
        (status `refused`, and why, if it could not be added). Without, return None at once.
        Raises LeaderGone at end of input, CrewTimeout after `timeout` seconds.
        """
        deadline = clock.deadline(timeout)
        self._say(spawn_line(agent, prompt, task_id=task_id, wait=wait))
        if not wait:
            return None
        request = (agent, task_id)
        with self._cond:
            while True:
                self._answer_nudges(waiting_on=f"spawned {agent} task")
                told = next(
                    (e.message for e in self._queue if child_told(e.message, request)), None
                )
                if told is not None:
                    self._remove(told)
                    break
                if self._eof:
                    raise LeaderGone(f"stdin closed while waiting for a spawned {agent} task.")
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise CrewTimeout(f"The spawned {agent} task did not end within {timeout:g}s.")
                self._cond.wait(remaining)
        self._ack(told)
        return child_told(told, request) or {}

    # ------------------------------------------------------------------ the attention loop

    def next(self, timeout: float | None = None) -> Message | None:
        """Focus on the most urgent queued message (None after `timeout` seconds of nothing).

        A non-urgent head waits a short coalescing window first, so a burst of follow-ups
        becomes one item. Once nothing is queued (for a window), items set aside come back one
        at a time, whole, in the order they were set aside.
        Raises LeaderGone once input has ended and nothing is left.
        """
        if self.focus is not None:
            self.done()
        deadline = clock.deadline(timeout)
        with self._cond:
            while True:
                if self._queue:
                    self._coalesce(self._queue[0].message)  # let a burst arrive and merge
                    item, how = self._pop(), None
                    break
                if self._set_aside:
                    self._coalesce(self._set_aside[0][0])  # idle: nothing came for a window
                    if self._queue:
                        continue  # what came meanwhile goes first
                    # Resurfacing is not enqueueing: it never meets the queue, so never merges.
                    item, how = self._set_aside.pop(0)
                    break
                if self._eof:
                    raise LeaderGone("stdin closed: the leader has gone.")
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return None
                self._cond.wait(remaining)
        self.focus = item
        if how is not DecisionAction.PREEMPT:  # a preempted item was acknowledged as the focus
            self._ack(item)
        reason = "most urgent queued item" if how is None else f"resurfaced after a {how}"
        self._decide(Decision(DecisionAction.PICK, item, reason))
        return item

    def begin(self, body: str, *, kind: MessageKind = MessageKind.FOLLOW_UP) -> Message:
        """Focus on the task's own work (its prompt), so checkpoints can interrupt it too.

        It behaves as a queued item of `kind` that was picked: a steer preempts it, and it
        resurfaces from `next()` once the interruption is done.
        """
        if self.focus is not None:
            self.done()
        self.focus = Message(id=TASK_ITEM, kind=kind, body=body)
        self._decide(Decision(DecisionAction.PICK, self.focus, "the task's own work"))
        return self.focus

    def checkpoint(self, state: Any = _NO_STATE, *, wait: float = 0) -> Decision:
        """A safe point to be interrupted: what to do about what arrived since the last one.

        A `state` (any JSON value, None included) is first saved as the task's progress, for the
        next attempt's `restored()`; one JSON cannot hold, or over MAX_CHECKPOINT bytes, raises
        TypeError or ValueError and nothing is saved. With `wait`, a checkpoint that finds
        nothing queued waits up to that many seconds for something to arrive (nudges are
        answered meanwhile): a pause for a review, say, that goes on without one.
        Raises LeaderGone once input has ended and nothing is left to decide about (a `state`
        given is saved first).
        """
        current = self.focus
        if current is None:
            raise RuntimeError("checkpoint() needs a focus: call next() or begin() first")
        if state is not _NO_STATE:
            self.save(state)
        deadline = time.monotonic() + wait
        with self._cond:
            answered = self._answer_nudges()
            while not self._queue and not self._eof and (left := deadline - time.monotonic()) > 0:
                self._cond.wait(left)
                answered += self._answer_nudges()
            if not self._queue:
                if self._eof:  # what arrived before the end was decided on first
                    raise LeaderGone("stdin closed: the leader has gone.")
                return answered[-1] if answered else NOTHING_NEW
            decision = decide(current, self._queue[0].message, self.judge)
            self._carry_out(current, decision)
        if decision.item is not None and decision.action in REDIRECTING_DECISIONS:
            self._ack(decision.item)
        self._decide(decision, focus=current)
        return decision

    def save(self, state: Any) -> None:
        """Save `state` as `checkpoint(state=…)` does, deciding nothing: what a `LeaderGone`
        handler calls (a leader records what its workers print as it stops)."""
        self._say(checkpoint_line(state))

    def done(self, outcome: str | None = None) -> None:
        """End the current focus; items set aside come back when nothing else is queued."""
        if self.focus is None:
            return
        item, self.focus = self.focus, None
        self._decide(Decision(DecisionAction.DONE, item, outcome or ""))

    # ------------------------------------------------------------------ inside

    def _carry_out(self, current: Message, decision: Decision) -> None:
        new = decision.item
        if new is None or decision.action == DecisionAction.CONTINUE:
            return
        self._remove(new)
        if decision.action == DecisionAction.PREEMPT:
            self._set_aside.append((current, DecisionAction.PREEMPT))
            self.focus = new
        elif decision.action == DecisionAction.CANCEL:
            self.focus = new  # the current work is dropped for good
        elif decision.action == DecisionAction.MERGE:
            current.body += MERGE_SEPARATOR + new.body
            current.merged += new.ids
        elif decision.action == DecisionAction.DEFER:
            self._set_aside.append((new, DecisionAction.DEFER))

    def _answer_nudges(self, waiting_on: str | None = None) -> list[Decision]:
        """Answer queued nudges with a status report, without breaking focus (lock held)."""
        decisions = []
        for entry in [e for e in self._queue if e.message.kind is MessageKind.NUDGE]:
            self._queue.remove(entry)
            nudge = entry.message
            if self.status_callback is not None:
                status = self.status_callback(self.focus)
            elif waiting_on is not None:
                status = f"waiting for an answer to: {waiting_on}"
            elif self.focus is not None:
                status = f"working on {self.focus.kind} {self.focus.id}: {self.focus.summary}"
            else:
                status = "idle, waiting for work"
            self._ack(nudge)
            self.report(status, kind=ContactType.STATUS)
            decisions.append(
                Decision(DecisionAction.CONTINUE, nudge, "nudge answered with a status report")
            )
            self._decide(decisions[-1], focus=self.focus)
        return decisions

    def _coalesce(self, head: Message) -> None:
        """Before handing out a non-urgent item, wait the whole window (lock held)."""
        if head.kind in _URGENT or self._eof:
            return
        end = time.monotonic() + self.coalesce
        while (left := end - time.monotonic()) > 0 and not self._eof:
            self._cond.wait(left)

    def _take(
        self, kind: MessageKind, *, after: int = 0, question: str | None = None
    ) -> Message | None:
        """The first queued message of `kind` that arrived after `after`; with `question`, an
        answer naming another question (one asked before, the answer late) is left queued."""
        for entry in sorted(self._queue):
            named = entry.message.data.get(MessageData.QUESTION)
            if entry.message.kind is not kind or entry.seq <= after:
                continue
            if question is not None and named is not None and named != question:
                continue
            self._queue.remove(entry)
            return entry.message
        return None

    def _pop(self) -> Message:
        self._queue.sort()
        return self._queue.pop(0).message

    def _remove(self, message: Message) -> None:
        self._queue = [e for e in self._queue if e.message is not message]

    def _enqueue(self, message: Message) -> None:
        """Queue a message that arrived (lock held): a follow-up joins a queued follow-up instead
        (only arrivals are queued, never an item set aside: only never-picked follow-ups merge)."""
        if message.kind is MessageKind.FOLLOW_UP and not _is_children(message):
            for entry in self._queue:
                if entry.message.kind is MessageKind.FOLLOW_UP and not _is_children(entry.message):
                    target = entry.message
                    target.body += MERGE_SEPARATOR + message.body
                    target.merged += message.ids
                    if _rank(message.priority) > _rank(target.priority):
                        target.priority = message.priority
                    return
        self._seq += 1
        self._queue.append(_Queued(message.kind.delivery_rank, self._seq, message))
        self._queue.sort()

    def _read(self, fd: int) -> None:
        """The one reader of stdin (os.read on the descriptor: never sys.stdin's buffer)."""
        pending = b""
        while True:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                chunk = b""
            if not chunk:
                break
            pending += chunk
            *lines, pending = pending.split(b"\n")
            messages = [m for m in (_parse_frame(line) for line in lines) if m is not None]
            if messages:
                with self._cond:
                    for message in messages:
                        self._enqueue(message)
                    self._cond.notify_all()
        with self._cond:
            self._eof = True
            self._cond.notify_all()

    def _ack(self, message: Message) -> None:
        for message_id in message.ids:
            if message_id != TASK_ITEM:
                self._say(f"@supervisor {ContactType.ACK}: {message_id}")

    def _decide(self, decision: Decision, *, focus: Message | None = None) -> None:
        """Print a decision (`focus`: the work in progress when it was taken), but a `continue`
        the same as the decision printed just before it: a worker that checks often while an
        item waits would fill the event log, and the item's history, with it."""
        record: dict[str, Any] = {"action": decision.action}
        if decision.item is not None:
            record["item"] = decision.item.id
            record["kind"] = decision.item.kind.value
            if decision.item.merged:
                record["merged"] = decision.item.merged
        if focus is not None and focus is not decision.item:
            record["focus"] = focus.id
        if decision.reason:
            record["reason"] = decision.reason
        if record == self._said:
            return  # a checkpoint that continues as the one before did: said once
        self._said = record if decision.action == DecisionAction.CONTINUE else None
        self._say(f"@supervisor {ContactType.DECISION}: " + json.dumps(record, ensure_ascii=False))

    def _say(self, line: str) -> None:
        with self._write_lock, self._line_ends.lock:
            try:
                # Never after part of a line, which the leader would read as one with it.
                line = self._line_ends.line_begun() + line
                self._out.write(line + "\n")
                self._out.flush()
            except BrokenPipeError:  # no one reads what the worker prints: the leader is gone
                _let_output_go(self._out)
                raise LeaderGone("stdout closed: the leader has gone.") from None


def _let_output_go(out: TextIO) -> None:
    """What is printed from now on goes nowhere, instead of failing: the worker's own output
    as it saves its work, and what the stream still buffers, flushed again at exit."""
    try:
        fd = out.fileno()
    except (OSError, ValueError):  # not a file (a test's StringIO)
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fd)
    finally:
        os.close(devnull)
