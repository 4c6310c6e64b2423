"""`crew add`, `crew handoff` and `crew cancel` without typer: their command lines read from the
fast path's table (crew/fast/cmdline.py); the common case of each without pydantic either
(crew/fast/adding.py, handing.py, cancelling.py); every other case by the bodies below, which the
typer commands (crew/cli/send.py) run too.

Those bodies, like `doctor`, need pydantic: their work is transactions through crew's models.
What they are spared is typer, click and the adapters typer builds for each option
(docs/performance.md: `add`, `handoff` and `cancel` measured). Once they begin, nothing goes
back to the full command (`runfiles.wrote`): a transaction may have been made by then, and must
not be made twice. Every error is then mapped to its exit code by crew/fast `fast`, as the full
command maps it.
"""

from __future__ import annotations

from crew.fast import committed, runfiles
from crew.fast.cmdline import Call, Fallback, stdin_text

TYPE_CHECKING = False  # `typing` costs a fast command a few milliseconds
if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

    from crew.session import Actor
    from crew.store.runstore import RunStore


def add(call: Call) -> int:
    """`crew add RUN PROMPT --agent AGENT` (crew/cli/send.py `add`)."""
    agent = call.options.get("--agent")
    if agent is None:
        raise Fallback  # the typer command says the option is missing
    prompt = stdin_text(call.arguments["prompt"])
    from crew.fast import adding

    try:
        return adding.add(call, prompt)  # without the models in the common case
    except Fallback:
        if runfiles.wrote:
            raise  # after a write: an error, never the change made twice
    committed(call, "crew.verbs")
    return add_task(
        call.arguments["run"],
        prompt,
        agent=agent,
        task_id=call.options.get("--id"),
        depends_on=call.lists.get("--depends-on", []),
        title=call.options.get("--title"),
        idempotency_key=call.options.get("--idempotency-key"),
        force="--force" in call.options,
        session=call.options.get("--session"),
        json="--json" in call.options,
        home=call.options.get("--home"),
    )


def handoff(call: Call) -> int:
    """`crew handoff RUN SESSION` (crew/cli/send.py `handoff`): without the models in the
    common case (crew/fast/handing.py)."""
    from crew.fast import handing

    try:
        return handing.handoff(call)
    except Fallback:
        if runfiles.wrote:
            raise  # after a write: an error, never the change made twice
    committed(call, "crew.verbs")
    return hand_off(
        call.arguments["run"],
        call.arguments["to"],
        force="--force" in call.options,
        session=call.options.get("--session"),
        json="--json" in call.options,
        home=call.options.get("--home"),
    )


def cancel(call: Call) -> int:
    """`crew cancel RUN [TASK]` (crew/cli/send.py `cancel`): without the models in the common
    case (crew/fast/cancelling.py)."""
    from crew.clock import parse_duration
    from crew.fast import cancelling

    try:
        grace: float | None = parse_duration(call.options.get("--grace", "5s"))
    except ValueError:
        grace = None  # the full command says why not
    if grace is not None:
        try:
            return cancelling.cancel(call, grace)
        except Fallback:
            if runfiles.wrote:
                raise  # after a write: an error, never the change made twice
    committed(call, "crew.verbs")
    return cancel_run(
        call.arguments["run"],
        call.arguments.get("task"),
        grace=call.options.get("--grace", "5s"),
        force="--force" in call.options,
        session=call.options.get("--session"),
        json="--json" in call.options,
        home=call.options.get("--home"),
    )


def add_task(
    run: str,
    prompt: str,
    *,
    agent: str,
    task_id: str | None,
    depends_on: Sequence[str],
    title: str | None,
    idempotency_key: str | None,
    force: bool,
    session: str | None,
    json: bool,
    home: str | Path | None,
) -> int:
    """Add a task to a run that has not ended: the body of `crew add` (`prompt` read already)."""
    from crew import verbs
    from crew.domain.adding import NewTask, check_request
    from crew.ids import check_idempotency_key, check_session_option
    from crew.render import emit

    deps = tuple(depends_on)
    check_request(NewTask(agent, prompt, task_id, deps, title=title))
    check_session_option(session)
    if idempotency_key is not None:
        check_idempotency_key(idempotency_key)
    store, who = _opened(run, home, session)
    added = verbs.add_task(
        store,
        agent=agent,
        prompt=prompt,
        task_id=task_id,
        depends_on=deps,
        session=who,
        force=force,
        idempotency_key=idempotency_key,
        title=title,
    )
    return emit(added, json=json)


def hand_off(
    run: str, to: str, *, force: bool, session: str | None, json: bool, home: str | Path | None
) -> int:
    """Give ownership of a run to another session: the body of `crew handoff`."""
    from crew import verbs
    from crew.ids import check_session, check_session_option
    from crew.render import emit

    check_session(to, "SESSION")
    check_session_option(session)
    store, who = _opened(run, home, session)
    return emit(verbs.handoff(store, to, session=who, force=force), json=json)


def cancel_run(
    run: str,
    task: str | None,
    *,
    grace: str,
    force: bool,
    session: str | None,
    json: bool,
    home: str | Path | None,
) -> int:
    """Cancel a task or the whole run: the body of `crew cancel`."""
    from crew import verbs
    from crew.clock import option_duration
    from crew.ids import check_session_option, check_task_id
    from crew.render import emit

    if task is not None:
        check_task_id(task)
    seconds = option_duration(grace, "--grace") or 0.0
    check_session_option(session)
    store, who = _opened(run, home, session)
    result = verbs.cancel(store, task, session=who, force=force, grace=seconds)
    return emit(result, json=json)


def _opened(run: str, home: str | Path | None, session: str | None) -> tuple[RunStore, Actor]:
    """The run named on the command line, in the home --home names (or found), and who acts on
    it: a worker acts as its task whatever --session says (crew/session.py)."""
    from crew.paths import find_home
    from crew.session import current_actor
    from crew.store.runstore import RunStore

    store = RunStore.open(find_home(explicit=home), run)
    return store, current_actor(session, home=store.paths.home.root)
