"""The attention rules of the worker SDK (docs/attention.md): what a checkpoint decides about a
message that arrived while the worker was busy with another."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from crew.frames import Message
from crew.registry import DecisionAction, MessageKind


@dataclass(frozen=True)
class Decision:
    """What a checkpoint decided: `continue`, `preempt`, `cancel`, `merge` or `defer`."""

    action: str
    item: Message | None = None
    reason: str = ""


Judge = Callable[[Message, Message], Decision | None]
NOTHING_NEW = Decision(DecisionAction.CONTINUE, None, "nothing new")
#: What a checkpoint may decide about a new item, and so what a judge may.
CHECKPOINT_ACTIONS = frozenset(
    {
        DecisionAction.CONTINUE,
        DecisionAction.PREEMPT,
        DecisionAction.CANCEL,
        DecisionAction.MERGE,
        DecisionAction.DEFER,
    }
)


def decide(current: Message, new: Message, judge: Judge | None) -> Decision:
    """What to do about `new` while `current` is the focus: the rules' decision, or the judge's
    where the rules would continue. A judge's action a checkpoint cannot take is a ValueError,
    raised before anything changed (the item stays queued)."""
    decision = rules(current, new)
    if decision.action != DecisionAction.CONTINUE or judge is None:
        return decision
    judged = judge(current, new)
    if judged is None:
        return decision
    if judged.action not in CHECKPOINT_ACTIONS:
        known = ", ".join(sorted(CHECKPOINT_ACTIONS))
        raise ValueError(f"The judge decided {judged.action!r}: a checkpoint decides {known}.")
    return Decision(judged.action, judged.item or new, judged.reason)


def rules(current: Message, new: Message) -> Decision:
    """The heuristics (docs/attention.md): they never cancel; only a judge can."""
    if new.kind is MessageKind.RESPOND:
        if current.kind is MessageKind.RESPOND:
            return Decision(DecisionAction.CONTINUE, new, "answers are taken in turn")
        return Decision(DecisionAction.PREEMPT, new, "an answer comes before anything else")
    if new.kind is MessageKind.STEER:
        if current.kind is MessageKind.STEER:
            return Decision(DecisionAction.MERGE, new, "a steer joins the steer in progress")
        if current.kind in {MessageKind.FOLLOW_UP, MessageKind.NUDGE}:
            return Decision(DecisionAction.PREEMPT, new, "a steer outranks the current work")
        return Decision(DecisionAction.CONTINUE, new, "an answer in progress outranks a steer")
    return Decision(
        DecisionAction.CONTINUE, new, f"a {new.kind} waits for the current work to finish"
    )
