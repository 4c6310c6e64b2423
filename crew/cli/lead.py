"""Leading runs: run, resume, wait, logs."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from crew.cli.common import (
    ForceOption,
    HomeOption,
    JsonOption,
    RunArgument,
    SessionOption,
    duration,
    home_from,
    print_json,
    say,
)

if TYPE_CHECKING:
    from crew.leader import OnEvents
    from crew.models import Event
    from crew.run import RunStore

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
    home: HomeOption = None,
) -> None:
    """Start a run of a crew and lead it (exit 0 when every task completed, 1 otherwise)."""
    from crew.errors import NotFound
    from crew.leader import start_run
    from crew.paths import Home
    from crew.session import current_session

    run_timeout = duration(timeout, "--timeout")
    who = current_session(session)
    try:
        crew_home = home_from(home)
    except NotFound:
        if crew_toml is None or home is not None:
            raise
        crew_home = Home(crew_toml.resolve().parent)  # the folder of crew.toml is the home
    config_path = crew_toml if crew_toml is not None else crew_home.config_file
    store = start_run(crew_home, config_path, session=who)
    _lead(
        store,
        who,
        detach=detach,
        json=json,
        interactive=not (no_input or json),
        max_parallel=max_parallel,
        run_timeout=run_timeout,
    )


def resume(
    run: RunArgument,
    detach: DetachOption = False,
    no_input: NoInputOption = False,
    force: ForceOption = False,
    session: SessionOption = None,
    json: JsonOption = False,
    home: HomeOption = None,
) -> None:
    """Lead an interrupted run again: unfinished tasks restart as new attempts."""
    from crew.run import RunStore
    from crew.session import current_session

    who = current_session(session)
    store = RunStore.open(home_from(home), run)
    _lead(
        store,
        who,
        detach=detach,
        json=json,
        interactive=not (no_input or json),
        resume=True,
        force=force,
    )


def _lead(
    store: RunStore,
    session: str,
    *,
    detach: bool,
    json: bool,
    interactive: bool,
    resume: bool = False,
    force: bool = False,
    max_parallel: int | None = None,
    run_timeout: float | None = None,
) -> None:
    from crew.leader import detach as in_background
    from crew.leader import lead

    options = {"force": force, "max_parallel": max_parallel, "run_timeout": run_timeout}
    if detach:
        pid = in_background(store, session=session, resume=resume, **options)
        if json:
            print_json({"runId": store.run_id, "pid": pid})
        else:
            sys.stdout.write(f"{store.run_id}\n")
        return
    if not json:
        say(f"run {store.run_id}{' resumed' if resume else ''}")
    if interactive and sys.stdout.isatty() and sys.stdin.isatty():
        code = _lead_on_terminal(store, session, **options, resume=resume)  # type: ignore[arg-type]
    else:
        code = lead(
            store,
            session=session,
            resume=resume,
            force=force,
            max_parallel=max_parallel,
            run_timeout=run_timeout,
            on_events=_printer(json),
        )
    if not json:
        _summary(store, code)
    if code:
        raise typer.Exit(code)


def _lead_on_terminal(
    store: RunStore,
    session: str,
    *,
    resume: bool,
    force: bool,
    max_parallel: int | None,
    run_timeout: float | None,
) -> int:
    """Lead in a background thread while the terminal shows the run and takes answers."""
    import os
    import threading

    from crew.dashboard import Dashboard
    from crew.leader import become_leader, stop_on_signals

    leader = become_leader(
        store,
        session=session,
        resume=resume,
        force=force,
        max_parallel=max_parallel,
        run_timeout=run_timeout,
    )
    codes: list[int] = []
    finished_r, finished_w = os.pipe()

    def lead_then_say_so() -> None:
        try:
            codes.append(leader.lead())
        finally:
            os.write(finished_w, b"!")

    thread = threading.Thread(target=lead_then_say_so, name="leader")
    thread.start()
    dashboard = Dashboard(store, session=session, interactive=True)
    try:
        with stop_on_signals(leader.request_stop):
            dashboard.run(done=lambda _view: not thread.is_alive(), wake_fd=finished_r)
    except KeyboardInterrupt:
        leader.request_stop("SIGINT")
    thread.join()
    os.close(finished_r)
    os.close(finished_w)
    return codes[0] if codes else 1


def _printer(json: bool) -> OnEvents:
    """Print each new event: a JSON line, or a short line for people."""
    from crew.render import progress_line

    def show(events: list[Event]) -> None:
        for event in events:
            if json:
                sys.stdout.write(event.model_dump_json(exclude_none=True) + "\n")
            else:
                line = progress_line(event)
                if line:
                    sys.stdout.write(line + "\n")
        sys.stdout.flush()

    return show


def _summary(store: RunStore, code: int) -> None:
    from crew.leader.core import Outcome

    state = store.state()
    if code == Outcome.INTERRUPTED:
        say(
            f"stopped leading run {store.run_id}; `crew resume {store.run_id}` continues it, "
            f"`crew cancel {store.run_id}` ends it"
        )
    elif code == Outcome.FENCED:
        say(f"another leader took over run {store.run_id}; this one stopped without writing")
    else:
        counts: dict[str, int] = {}
        for task in state.task_list():
            counts[task.status] = counts.get(task.status, 0) + 1
        tally = ", ".join(f"{n} {status}" for status, n in counts.items())
        say(f"run {store.run_id} {state.run.status}: {tally}")


def wait(
    run: RunArgument,
    for_: Annotated[
        str,
        typer.Option(
            "--for",
            help="waiting: until some task (or TASK) waits for an answer; "
            "done: until the run (or TASK) has ended.",
            metavar="waiting|done",
        ),
    ] = "done",
    task: Annotated[
        str | None, typer.Option("--task", help="Only this task.", metavar="TASK")
    ] = None,
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
    home: HomeOption = None,
) -> None:
    """Block until a task waits for an answer, or until the run ends (for CI scripts)."""
    from crew.errors import UsageError
    from crew.ids import check_task_id
    from crew.run import RunStore
    from crew.waiting import Until, wait_for_run

    try:
        until = Until(for_)
    except ValueError:
        raise UsageError(f"--for: expected 'waiting' or 'done', got {for_!r}.") from None
    if task is not None:
        check_task_id(task)
    limit = duration(timeout, "--timeout")
    store = RunStore.open(home_from(home), run)
    tasks = wait_for_run(store, until, task_id=task, timeout=limit)
    if json:
        print_json(
            {"runId": store.run_id, "for": until.value, "tasks": [t.to_dict() for t in tasks]}
        )
        return
    for item in tasks:
        contact = item.contact
        if contact is not None:
            options = f" [{'|'.join(contact.options)}]" if contact.options else ""
            sys.stdout.write(f"{item.id} {item.status} ({contact.id}): {contact.prompt}{options}\n")
        else:
            sys.stdout.write(f"{item.id} {item.status}\n")


def logs(
    run: RunArgument,
    task: Annotated[str, typer.Argument(help="The task id.", metavar="TASK", show_default=False)],
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing until the task has ended.")
    ] = False,
    home: HomeOption = None,
) -> None:
    """Print a worker's output (stdout and stderr, as received)."""
    from crew.errors import NotFound
    from crew.follow import follow_log
    from crew.ids import check_task_id
    from crew.run import RunStore

    check_task_id(task)
    store = RunStore.open(home_from(home), run)
    tasks = store.state().tasks
    if task not in tasks:
        raise NotFound(f"Run {store.run_id} has no task {task!r} (tasks: {', '.join(tasks)}).")
    out = sys.stdout.buffer
    for chunk in follow_log(store, task, follow=follow):
        out.write(chunk)
        if follow:
            out.flush()
