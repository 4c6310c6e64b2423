"""Inspection commands: runs (and its alias ps), status, mailbox, events, watch."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from crew.cli.common import (
    ColorOption,
    HomeOption,
    JqOption,
    JsonOption,
    QuietOption,
    RunArgument,
    SessionOption,
    TaskOption,
    actor_for,
    complete_task,
    home_from,
    open_run,
)
from crew.ids import check_session_option
from crew.output import Color
from crew.registry import Box, MessageStatus, RunStatus


def runs(
    status: Annotated[
        RunStatus | None, typer.Option("--status", help="Only runs with this status.")
    ] = None,
    json: JsonOption = False,
    jq: JqOption = None,
    quiet: QuietOption = False,
    color: ColorOption = Color.AUTO,
    home: HomeOption = None,
) -> int:
    """List runs, newest first (-q: only their ids)."""
    from crew.render import emit
    from crew.views import list_runs

    return emit(list_runs(home_from(home), status=status), json=json)


def status(
    run: RunArgument = "latest",
    json: JsonOption = False,
    jq: JqOption = None,
    color: ColorOption = Color.AUTO,
    home: HomeOption = None,
) -> int:
    """Show a run: its tasks, open questions, pending messages and warnings."""
    from crew.render import emit
    from crew.views import run_status

    return emit(run_status(open_run(run, home)), json=json)


def mailbox(
    run: RunArgument,
    task: TaskOption = None,
    box: Annotated[Box | None, typer.Option("--box", help="Only this mailbox file.")] = None,
    status: Annotated[
        MessageStatus | None, typer.Option("--status", help="Only messages in this status.")
    ] = None,
    json: JsonOption = False,
    jq: JqOption = None,
    color: ColorOption = Color.AUTO,
    home: HomeOption = None,
) -> int:
    """Show the mailbox as a timeline per task: each message and what became of it."""
    from crew.ids import check_task_id
    from crew.render import emit
    from crew.views import mailbox_view

    if task is not None:
        check_task_id(task)
    store = open_run(run, home)
    return emit(mailbox_view(store, task=task, box=box, status=status), json=json)


def events(
    run: RunArgument,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing new events until the run ends.")
    ] = False,
    type_: Annotated[
        str | None,
        typer.Option(
            "--type", help="Only this event type, or a family such as 'task'.", metavar="TYPE"
        ),
    ] = None,
    task: Annotated[
        str | None,
        typer.Option(
            "--task",
            help="Only events of this task.",
            metavar="TASK",
            autocompletion=complete_task,
        ),
    ] = None,
    json: JsonOption = False,
    jq: JqOption = None,
    home: HomeOption = None,
) -> None:
    """Print the event log (JSON lines with --json)."""
    from crew.ids import check_task_id
    from crew.render import warn
    from crew.render_streams import show_events
    from crew.streams import follow_events
    from crew.views import event_filter

    if task is not None:
        check_task_id(task)
    matches = event_filter(type_, task)
    store = open_run(run, home)
    for event, bad in follow_events(store, follow=follow):
        if bad is not None:
            warn(f"skipped {bad.describe()}")
        elif event is not None and matches(event):
            show_events([event], json=json)


def watch(
    run: RunArgument = "latest",
    no_input: Annotated[
        bool, typer.Option("--no-input", help="Only show; never offer to answer questions.")
    ] = False,
    color: ColorOption = Color.AUTO,
    session: SessionOption = None,
    home: HomeOption = None,
) -> int:
    """Show a run live — tasks, open questions, pending messages, the last events — redrawn
    as its files change; Enter answers a waiting task, q leaves. Without a terminal, each change
    prints the view again as text. Exit 0, or when the run ends, its outcome: 1 failed or
    cancelled."""
    from crew.dashboard import Dashboard, View
    from crew.output import console
    from crew.results.leading import outcome_code

    check_session_option(session)
    store = open_run(run, home)
    who = actor_for(session, store.paths.home)

    def ended(view: View) -> bool:
        return view.state.run.status.terminal

    if sys.stdout.isatty():
        dashboard = Dashboard(store, session=who, interactive=not no_input, watching=True)
        last = dashboard.run(done=ended, quit_key=True)
    else:
        dashboard = Dashboard(store, session=who, interactive=False, watching=True, plain=True)
        last = dashboard.frames(done=ended, console=console())
    return int(outcome_code(last.state.run.status)) if last and ended(last) else 0
