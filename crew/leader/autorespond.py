"""autoRespond: a question that one of crew.toml's rules answers is answered through the ordinary
respond verb, as the run's owner, and recorded as from that rule."""

from __future__ import annotations

import re

from crew import verbs
from crew.config import AutoRespondRule
from crew.errors import CrewError, StaleLeader
from crew.leader.degraded import fault_of
from crew.leader.view import RunView
from crew.models import SupervisorContact
from crew.registry import EventType, MessageSource
from crew.store.runstore import RunStore


def auto_answer(
    rules: list[AutoRespondRule], question: SupervisorContact
) -> tuple[int, AutoRespondRule] | None:
    """The first autoRespond rule (and its index) that answers this question, if any."""
    for index, rule in enumerate(rules):
        if rule.type is not question.type or (rule.task and rule.task != question.task_id):
            continue
        if rule.match and re.search(rule.match, question.prompt) is None:
            continue
        return index, rule
    return None


def answer(store: RunStore, view: RunView, question: SupervisorContact, *, epoch: int) -> None:
    """Answer `question` if a rule does; an answer that does not fit it leaves it open, noted."""
    run = view.state.run
    found = auto_answer(run.config.auto_respond, question)
    if found is None:
        return
    index, rule = found
    try:
        verbs.respond(
            store,
            question.task_id,
            rule.answer,
            session=run.owner_session_id,
            contact_id=question.id,
            epoch=epoch,
            source=f"{MessageSource.AUTO_RESPOND}[{index}]",
        )
    except CrewError as exc:
        if isinstance(exc, StaleLeader) or fault_of(exc) is not None:
            raise
        with view.change() as txn:
            txn.record(
                EventType.SUPERVISOR_MALFORMED,
                task_id=question.task_id,
                message=f"autoRespond[{index}] could not answer {question.id}: {exc}",
                data={"rule": index, "reason": str(exc)},
            )
