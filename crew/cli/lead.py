"""Leading runs: run, resume, wait, logs."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from crew.cli.common import (
    ColorOption,
    ForceOption,
    HomeOption,
    JqOption,
    JsonOption,
    QuietOption,
    RunArgument,
    SessionOption,
    TaskArgument,
    TaskOption,
    actor_for,
    check_session_option,
    duration,
    open_run,
)
from crew.output import Color

if TYPE_CHECKING:
    from collections.abc import Callable

    from crew.leader import LeadOptions
    from crew.session import Actor
    from crew.store.runstore import RunStore

DetachOption = Annotated[
    bool,
    typer.Option("--detach", help="Lead from a background process; print the run id and return."),
]
NoInputOption = Annotated[
    bool, typer.Option("--no-input", help="Never prompt, even on a terminal.")
]


def run(
    crew_toml: Annotated[
        Path | None,
        typer.Argument(
            help="The crew definition (default: crew.toml of the crew home).",
            metavar="CREW_TOML",
            show_default=False,
        ),
    ] = None,
    detach: DetachOption = False,
    max_parallel: Annotated[
        int | None,
        typer.Option(
            "--max-parallel",
            min=1,
            help="Run at most N tasks at once.",
            metavar="N",
            show_default=False,
        ),
    ] = None,
    timeout: Annotated[
        str | None,
        typer.Option(
            "--timeout",
            help="Cancel what is left after this long (e.g. 30m); the run fails, exit 3.",
            metavar="DURATION",
            show_default=False,
        ),
    ] = None,
    no_input: NoInputOption = False,
    session: SessionOption = None,
    json: JsonOption = False,
    jq: JqOption = None,
    quiet: QuietOption = False,
    color: ColorOption = Color.AUTO,
    home: HomeOption = None,
) -> int:
    """Start a run of a crew and lead it (exit 0 when every task completed, 1 otherwise)."""
    from crew.leader import LeadOptions, start_run
    from crew.paths import home_for_run

    run_timeout = duration(timeout, "--timeout")
    check_session_option(session)
    crew_home = home_for_run(crew_toml, explicit=home)
    who = actor_for(session, crew_home)
    config_path = crew_toml if crew_toml is not None else crew_home.config_file
    store = start_run(crew_home, config_path, session=who)
    options = LeadOptions(max_parallel=max_parallel, run_timeout=run_timeout)
    return _lead(store, who, options, detach=detach, json=json, interactive=not (no_input or json))


def resume(
    run: RunArgument,
    detach: DetachOption = False,
    no_input: NoInputOption = False,
    force: ForceOption = False,
    session: SessionOption = None,
    json: JsonOption = False,
    jq: JqOption = None,
    quiet: QuietOption = False,
    color: ColorOption = Color.AUTO,
    home: HomeOption = None,
) -> int:
    """Lead an interrupted run again: unfinished tasks restart as new attempts."""
    from crew.leader import LeadOptions

    check_session_option(session)
    store = open_run(run, home)
    who = actor_for(session, store.paths.home)
    options = LeadOptions(resume=True, force=force)
    return _lead(store, who, options, detach=detach, json=json, interactive=not (no_input or json))


def _lead(
    store: RunStore,
    session: Actor,
    options: LeadOptions,
    *,
    detach: bool,
    json: bool,
    interactive: bool,
) -> int:
    from functools import partial

    from crew import render, render_streams
    from crew.leader import detach as in_background
    from crew.leader import lead, outcome
    from crew.results.leading import Detached

    if detach:
        pid = in_background(store, session=session, options=options)
        return render.emit(Detached(store.run_id, pid), json=json)
    if interactive and sys.stdout.isatty() and sys.stdin.isatty():
        from crew.dashboard import lead_with_view

        code = lead_with_view(store, session, options)
    else:
        show = _while_read(partial(render_streams.show_events, json=json, progress=True))
        # Announced once this process leads the run: a refused resume says nothing else.
        ready = _while_read(
            partial(render.starting, store.run_id, resumed=options.resume, json=json)
        )
        code = lead(store, session=session, options=options, on_events=show, on_ready=ready)
    return render.emit(outcome(store, code), json=json)


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


def wait(
    run: RunArgument,
    for_: Annotated[
        str,
        typer.Option(
            "--for",
            help="started: until some task (or TASK) has started; waiting: until some task (or "
            "TASK) waits for an answer; done: until the run (or TASK) has ended.",
            metavar="started|waiting|done",
        ),
    ] = "done",
    task: TaskOption = None,
    timeout: Annotated[
        str | None,
        typer.Option(
            "--timeout",
            help="Give up after this long: exit 3.",
            metavar="DURATION",
            show_default=False,
        ),
    ] = None,
    json: JsonOption = False,
    jq: JqOption = None,
    quiet: QuietOption = False,
    home: HomeOption = None,
) -> int:
    """Block until a task starts or waits for an answer, or the run ends (for CI scripts)."""
    from crew.errors import UsageError
    from crew.ids import check_task_id
    from crew.render import emit
    from crew.waiting import Until, wait_for_run

    try:
        until = Until(for_)
    except ValueError:
        choices = ", ".join(repr(u.value) for u in Until)
        raise UsageError(f"--for: expected one of {choices}, got {for_!r}.") from None
    if task is not None:
        check_task_id(task)
    limit = duration(timeout, "--timeout")
    store = open_run(run, home)
    return emit(wait_for_run(store, until, task_id=task, timeout=limit), json=json)


def logs(
    run: RunArgument,
    task: TaskArgument,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing until the task has ended.")
    ] = False,
    raw: Annotated[
        bool,
        typer.Option(
            "--raw",
            help="The bytes exactly as received, even on a terminal (where control sequences "
            "other than colours are otherwise shown as text).",
        ),
    ] = False,
    color: ColorOption = Color.AUTO,
    home: HomeOption = None,
) -> None:
    """Print a worker's output (stdout and stderr, as received; made safe on a terminal)."""
    from crew.ids import check_task_id
    from crew.render_streams import show_output
    from crew.streams import follow_log

    check_task_id(task)
    store = open_run(run, home)
    store.state().task(task)  # NotFound for a task the run does not have
    show_output(follow_log(store, task, follow=follow), raw=raw, flush=follow)
