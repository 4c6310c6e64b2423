"""Leading runs: run, resume, rerun, wait, logs."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

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
    TaskOption,
    complete_task,
    json_or_jq,
    open_run,
)
from crew.output import Color

DetachOption = Annotated[
    bool,
    typer.Option("--detach", help="Lead from a background process; print the run id and return."),
]
NoInputOption = Annotated[
    bool, typer.Option("--no-input", help="Never prompt, even on a terminal.")
]
MaxParallelOption = Annotated[
    int | None,
    typer.Option(
        "--max-parallel",
        min=1,
        help="Run at most N tasks at once.",
        metavar="N",
        show_default=False,
    ),
]
RunTimeoutOption = Annotated[
    str | None,
    typer.Option(
        "--timeout",
        help="Cancel what is left after this long (e.g. 30m); the run fails, exit 3.",
        metavar="DURATION",
        show_default=False,
    ),
]


def run(
    crew_toml: Annotated[
        Path | None,
        typer.Argument(
            help="The crew definition (default: crew.toml of the crew home).",
            metavar="CREW_TOML",
            show_default=False,
            readable=False,  # crew says why it cannot read it (the fast path alike)
        ),
    ] = None,
    detach: DetachOption = False,
    max_parallel: MaxParallelOption = None,
    timeout: RunTimeoutOption = None,
    no_input: NoInputOption = False,
    session: SessionOption = None,
    json: JsonOption = False,
    jq: JqOption = None,
    quiet: QuietOption = False,
    color: ColorOption = Color.AUTO,
    home: HomeOption = None,
) -> int:
    """Start a run of a crew and lead it (exit 0 when every task completed, 1 otherwise)."""
    from crew.fast.leading import start_and_lead

    return start_and_lead(
        crew_toml,
        home=home,
        session=session,
        max_parallel=max_parallel,
        timeout=timeout,
        detach=detach,
        json=json,
        no_input=no_input,
    )


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
    """Lead an interrupted run again: unfinished tasks restart as new attempts.

    It prints what happens from the resume on; `crew events RUN` shows what happened before.
    """
    from crew.fast.leading import resume_and_lead

    return resume_and_lead(
        run, home=home, session=session, force=force, detach=detach, json=json, no_input=no_input
    )


def rerun(
    run: RunArgument,
    tasks: Annotated[
        list[str] | None,
        typer.Argument(
            help="The tasks to run again (default: all, or with --failed those that did not "
            "complete); tasks that depend on them run again too.",
            metavar="TASK",
            show_default=False,
        ),
    ] = None,
    failed: Annotated[
        bool,
        typer.Option("--failed", help="Run again only the tasks that failed or were cancelled."),
    ] = False,
    detach: DetachOption = False,
    max_parallel: MaxParallelOption = None,
    timeout: RunTimeoutOption = None,
    no_input: NoInputOption = False,
    session: SessionOption = None,
    json: JsonOption = False,
    jq: JqOption = None,
    home: HomeOption = None,
) -> int:
    """Run an ended run's tasks again in a new run: all, --failed ones, or those named.

    The new run (linked to the old one by `rerunOf`) runs the tasks chosen, the tasks that depend
    on them, and any dependency of theirs that did not complete; every other task is carried as
    it ended, a completed one with its result and log, so its dependents start at once. Exit 0
    when every task completed, 1 otherwise."""
    from crew.fast.leading import rerun_and_lead

    return rerun_and_lead(
        run,
        tasks or [],
        home=home,
        session=session,
        failed=failed,
        max_parallel=max_parallel,
        timeout=timeout,
        detach=detach,
        json=json,
        no_input=no_input,
    )


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
    from crew.clock import option_duration
    from crew.errors import UsageError
    from crew.ids import check_task_id, shown
    from crew.render import emit
    from crew.waiting import Until, wait_for_run

    try:
        until = Until(for_)
    except ValueError:
        choices = ", ".join(repr(u.value) for u in Until)
        raise UsageError(f"--for: expected one of {choices}, got {shown(for_)}.") from None
    if task is not None:
        check_task_id(task)
    limit = option_duration(timeout, "--timeout")
    store = open_run(run, home)
    return emit(wait_for_run(store, until, task_id=task, timeout=limit), json=json)


TasksArgument = Annotated[
    list[str] | None,
    typer.Argument(
        help="The tasks (default: every task of the run).",
        metavar="TASK",
        show_default=False,
        autocompletion=complete_task,
    ),
]
FollowOption = Annotated[
    bool,
    typer.Option(
        "--follow",
        "-f",
        help="Keep printing until the tasks (or, with no TASK, the run) have ended.",
    ),
]
TailOption = Annotated[
    str | None,
    typer.Option(
        "--tail",
        help="Only the last N lines of each task (then, with -f, what follows).",
        metavar="N",
        show_default=False,
    ),
]
SinceOption = Annotated[
    str | None,
    typer.Option(
        "--since",
        help="Only lines received since then: a duration ago (10m) or an ISO 8601 time "
        "(2026-11-30T12:00:00Z; UTC when it names no zone).",
        metavar="WHEN",
        show_default=False,
    ),
]
TimestampsOption = Annotated[
    bool,
    typer.Option(
        "--timestamps", help="Begin each line with when it was received (ISO 8601, UTC, ms)."
    ),
]
LogsJsonOption = Annotated[
    bool,
    typer.Option(
        "--json",
        help='JSON lines, one per line of output: {"task": id, "time": when it was received '
        '(ISO 8601 UTC), "line": its text without the newline (UTF-8; other bytes replaced)}.',
        callback=json_or_jq,
    ),
]
RawOption = Annotated[
    bool,
    typer.Option(
        "--raw",
        help="The bytes exactly as received, even on a terminal (where control sequences "
        "other than colours are otherwise shown as text).",
    ),
]


def logs(
    run: RunArgument,
    tasks: TasksArgument = None,
    follow: FollowOption = False,
    tail: TailOption = None,
    since: SinceOption = None,
    timestamps: TimestampsOption = False,
    json: LogsJsonOption = False,
    raw: RawOption = False,
    color: ColorOption = Color.AUTO,
    jq: JqOption = None,
    home: HomeOption = None,
) -> None:
    """Print workers' output (stdout and stderr, as received; made safe on a terminal).

    Every task's, line by line in the order received, each line after its task id (`coder |
    …`); or the named tasks' (one TASK: its output as stored, without prefixes)."""
    from crew.ids import check_task_id
    from crew.loglines import LineStyle, show_lines, show_output, since_us, tail_count
    from crew.streams import follow_lines, follow_log, log_tasks

    named = list(dict.fromkeys(check_task_id(task) for task in tasks or []))
    lines = tail_count(tail)
    since_at = since_us(since)
    store = open_run(run, home)
    shown = log_tasks(store, named)
    if len(named) == 1 and lines is None and since_at is None and not (timestamps or json):
        show_output(follow_log(store, named[0], follow=follow), raw=raw, flush=follow)
        return
    from crew.output import SETTINGS, colored

    style = LineStyle(
        tuple(shown),
        prefixed=len(named) != 1,
        timestamps=timestamps,
        json=json,
        raw=raw or not (sys.stdout.isatty() or SETTINGS.color is Color.ALWAYS),
        colour=not json and colored(),
    )
    batches = follow_lines(
        store, shown, every_task=not named, follow=follow, tail=lines, since_us=since_at
    )
    show_lines(batches, style, flush=follow)
