"""`crew run`, `crew resume` and `crew rerun` without typer: their command lines read from the
fast path's table (crew/fast/cmdline.py), then the bodies below, which the typer commands
(crew/cli/lead.py) run too.

A leader needs pydantic for crew's models whatever parses its command line; what it is spared is
typer, click and the adapters typer builds for each option: 0.91 times the instructions of the
same run through typer (docs/performance.md). Once the command line is read, nothing goes back to
the full command (`runfiles.wrote`): a run may have been created by then, and must not be
created twice. Every error is then mapped to its exit code by crew/fast `fast`, as the full
command maps it.
"""

from __future__ import annotations

import re
import sys

from crew.fast import committed
from crew.fast.cmdline import Call, Fallback

TYPE_CHECKING = False  # `typing` costs a fast command a few milliseconds
if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path
    from typing import Any

    from crew.leader import LeadOptions
    from crew.session import Actor
    from crew.store.runstore import RunStore

#: A --max-parallel the typer command surely reads as this number (click's int takes more).
_COUNT = re.compile(r"[1-9][0-9]{0,8}")


def run(call: Call) -> int:
    """`crew run [CREW_TOML]` (crew/cli/lead.py `run`)."""
    crew_toml = call.arguments.get("crew_toml")
    count = call.options.get("--max-parallel")
    if crew_toml == "" or (count is not None and not _COUNT.fullmatch(count)):
        raise Fallback  # the typer command reads (or refuses) what these become
    committed(call, "crew.leader")
    from pathlib import Path

    return start_and_lead(
        Path(crew_toml) if crew_toml is not None else None,
        home=call.options.get("--home"),
        session=call.options.get("--session"),
        max_parallel=int(count) if count is not None else None,
        timeout=call.options.get("--timeout"),
        detach="--detach" in call.options,
        json="--json" in call.options,
        no_input="--no-input" in call.options,
    )


def resume(call: Call) -> int:
    """`crew resume RUN` (crew/cli/lead.py `resume`)."""
    committed(call, "crew.leader")
    return resume_and_lead(
        call.arguments["run"],
        home=call.options.get("--home"),
        session=call.options.get("--session"),
        force="--force" in call.options,
        detach="--detach" in call.options,
        json="--json" in call.options,
        no_input="--no-input" in call.options,
    )


def rerun(call: Call) -> int:
    """`crew rerun RUN [TASK]...` (crew/cli/lead.py `rerun`)."""
    count = call.options.get("--max-parallel")
    if count is not None and not _COUNT.fullmatch(count):
        raise Fallback  # the typer command reads (or refuses) what it becomes
    committed(call, "crew.leader")
    return rerun_and_lead(
        call.arguments["run"],
        call.rest,
        home=call.options.get("--home"),
        session=call.options.get("--session"),
        failed="--failed" in call.options,
        max_parallel=int(count) if count is not None else None,
        timeout=call.options.get("--timeout"),
        detach="--detach" in call.options,
        json="--json" in call.options,
        no_input="--no-input" in call.options,
    )


def start_and_lead(
    crew_toml: Path | None,
    *,
    home: str | Path | None,
    session: str | None,
    max_parallel: int | None,
    timeout: str | None,
    detach: bool,
    json: bool,
    no_input: bool,
) -> int:
    """Start a run of the crew and lead it: the body of `crew run`."""
    from crew.clock import option_duration
    from crew.ids import check_session_option
    from crew.leader import LeadOptions, start_run
    from crew.paths import home_for_run
    from crew.session import current_actor

    run_timeout = option_duration(timeout, "--timeout")
    check_session_option(session)  # checked before any run is looked up
    crew_home = home_for_run(crew_toml, explicit=home)
    who = current_actor(session, home=crew_home.root)
    config_path = crew_toml if crew_toml is not None else crew_home.config_file
    store = start_run(crew_home, config_path, session=who)
    options = LeadOptions(max_parallel=max_parallel, run_timeout=run_timeout)
    interactive = not (no_input or json)
    return lead_here(store, who, options, detach=detach, json=json, interactive=interactive)


def resume_and_lead(
    run: str,
    *,
    home: str | Path | None,
    session: str | None,
    force: bool,
    detach: bool,
    json: bool,
    no_input: bool,
) -> int:
    """Lead an interrupted run again: the body of `crew resume`."""
    from crew.ids import check_session_option
    from crew.leader import LeadOptions
    from crew.paths import find_home
    from crew.session import current_actor
    from crew.store.runstore import RunStore

    check_session_option(session)
    store = RunStore.open(find_home(explicit=home), run)
    who = current_actor(session, home=store.paths.home.root)
    options = LeadOptions(resume=True, force=force)
    interactive = not (no_input or json)
    return lead_here(store, who, options, detach=detach, json=json, interactive=interactive)


def rerun_and_lead(
    run: str,
    tasks: list[str],
    *,
    home: str | Path | None,
    session: str | None,
    failed: bool,
    max_parallel: int | None,
    timeout: str | None,
    detach: bool,
    json: bool,
    no_input: bool,
) -> int:
    """Run an ended run's tasks again in a new run, and lead it: the body of `crew rerun`."""
    from crew.clock import option_duration
    from crew.errors import UsageError
    from crew.ids import check_session_option, check_task_id
    from crew.leader import LeadOptions, start_rerun
    from crew.paths import find_home
    from crew.session import current_actor
    from crew.store.runstore import RunStore

    if failed and tasks:
        raise UsageError("Give either --failed or the tasks to run again, not both.")
    for name in tasks:
        check_task_id(name)
    run_timeout = option_duration(timeout, "--timeout")
    check_session_option(session)
    old = RunStore.open(find_home(explicit=home), run)
    who = current_actor(session, home=old.paths.home.root)
    store, plan = start_rerun(old, tasks, failed=failed, session=who)
    detail = f": runs {', '.join(plan.again)} of run {plan.run_id} again"
    if plan.carried:
        detail += f" (carried as they ended: {', '.join(plan.carried)})"
    options = LeadOptions(max_parallel=max_parallel, run_timeout=run_timeout)
    interactive = not (no_input or json)
    return lead_here(
        store, who, options, detach=detach, json=json, interactive=interactive, detail=detail
    )


def lead_here(
    store: RunStore,
    session: Actor,
    options: LeadOptions,
    *,
    detach: bool,
    json: bool,
    interactive: bool,
    detail: str = "",
) -> int:
    """Lead the run from this process (with a live view, if `interactive`, on a terminal), or
    from a background one with `detach`; print the outcome."""
    from functools import partial

    from crew import render, render_streams
    from crew.leader import detach as in_background
    from crew.leader import lead, outcome
    from crew.paths import home_option
    from crew.results.leading import Detached

    reach = home_option(store.paths.home)
    if detach:
        pid = in_background(store, session=session, options=options)
        return render.emit(Detached(store.run_id, pid, reach), json=json)
    if reach:
        detail += f" (other commands reach it with {reach})"
    if interactive and sys.stdout.isatty() and sys.stdin.isatty():
        from crew.dashboard import lead_with_view

        code = lead_with_view(store, session, options)
    else:
        show = _while_read(partial(render_streams.show_events, json=json, progress=True))
        # Announced once this process leads the run: a refused resume says nothing else.
        ready = _while_read(
            partial(render.starting, store.run_id, resumed=options.resume, json=json, detail=detail)
        )
        code = lead(store, session=session, options=options, on_events=show, on_ready=ready)
    result = outcome(store, code)
    result.home_option = reach
    return render.emit(result, json=json)


def _while_read(show: Callable[..., None]) -> Callable[..., None]:
    """`show`, until the reader of stdout goes away (`crew run … | head`): then the leader goes
    on leading, unseen — its output is a view of the run, not the run."""

    def shown(*args: Any) -> None:
        from crew import render

        try:
            show(*args)
        except BrokenPipeError:
            render.silence_stdout()

    return shown
