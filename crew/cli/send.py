"""The verbs people and CI type: respond, steer, follow-up, nudge, cancel, handoff."""

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
    warn,
)

if TYPE_CHECKING:
    from crew.ops import Sent
    from crew.run import RunStore

TaskArgument = Annotated[
    str, typer.Argument(help="The task id.", metavar="TASK", show_default=False)
]
BodyArgument = Annotated[
    str,
    typer.Argument(
        help="The message; '-' reads it from stdin.", metavar="BODY", show_default=False
    ),
]
KeyOption = Annotated[
    str | None,
    typer.Option(
        "--idempotency-key",
        help="Send at most once per key in this run: a retry returns the first message.",
        metavar="KEY",
        show_default=False,
    ),
]
WaitOption = Annotated[
    bool, typer.Option("--wait", help="Block until the worker has been given the message.")
]
WaitAckOption = Annotated[
    bool, typer.Option("--wait-ack", help="Block until the worker acknowledges the message.")
]
TimeoutOption = Annotated[
    str | None,
    typer.Option(
        "--timeout",
        help="Give up waiting after this long (e.g. 30s, 5m): exit 3, the message stays queued.",
        metavar="DURATION",
        show_default=False,
    ),
]


def respond(
    run: RunArgument,
    task: TaskArgument,
    body: BodyArgument,
    contact: Annotated[
        str | None,
        typer.Option(
            "--contact",
            help="Answer only if this is still the open question (its q_… id).",
            metavar="CONTACT_ID",
            show_default=False,
        ),
    ] = None,
    idempotency_key: KeyOption = None,
    wait: WaitOption = False,
    wait_ack: WaitAckOption = False,
    timeout: TimeoutOption = None,
    force: ForceOption = False,
    session: SessionOption = None,
    json: JsonOption = False,
    home: HomeOption = None,
) -> None:
    """Answer a task that is waiting on a question (the task runs again)."""
    from crew import ops

    store, who, limit = _prepare(run, task, session, home, timeout)
    text = _read_body(body)
    sent = ops.respond(
        store,
        task,
        text,
        session=who,
        force=force,
        idempotency_key=idempotency_key,
        contact_id=contact,
    )
    _finish(store, sent, "answer", wait, wait_ack, limit, json)


def steer(
    run: RunArgument,
    task: TaskArgument,
    body: BodyArgument,
    idempotency_key: KeyOption = None,
    wait: WaitOption = False,
    wait_ack: WaitAckOption = False,
    timeout: TimeoutOption = None,
    force: ForceOption = False,
    session: SessionOption = None,
    json: JsonOption = False,
    home: HomeOption = None,
) -> None:
    """Redirect a running or waiting task (delivered ahead of everything but answers)."""
    from crew import ops

    store, who, limit = _prepare(run, task, session, home, timeout)
    text = _read_body(body)
    sent = ops.steer(store, task, text, session=who, force=force, idempotency_key=idempotency_key)
    _finish(store, sent, "steer", wait, wait_ack, limit, json)


def follow_up(
    run: RunArgument,
    task: TaskArgument,
    body: BodyArgument,
    idempotency_key: KeyOption = None,
    wait: WaitOption = False,
    wait_ack: WaitAckOption = False,
    timeout: TimeoutOption = None,
    force: ForceOption = False,
    session: SessionOption = None,
    json: JsonOption = False,
    home: HomeOption = None,
) -> None:
    """Queue more work for a task (delivered when it is running and not waiting on a question)."""
    from crew import ops

    store, who, limit = _prepare(run, task, session, home, timeout)
    text = _read_body(body)
    sent = ops.follow_up(
        store, task, text, session=who, force=force, idempotency_key=idempotency_key
    )
    _finish(store, sent, "follow-up", wait, wait_ack, limit, json)


def nudge(
    run: RunArgument,
    task: TaskArgument,
    body: Annotated[
        str | None,
        typer.Argument(
            help="The request (default: ask for status, blocker, or smallest next step); "
            "'-' reads it from stdin.",
            metavar="BODY",
            show_default=False,
        ),
    ] = None,
    idempotency_key: KeyOption = None,
    wait: WaitOption = False,
    wait_ack: WaitAckOption = False,
    timeout: TimeoutOption = None,
    force: ForceOption = False,
    session: SessionOption = None,
    json: JsonOption = False,
    home: HomeOption = None,
) -> None:
    """Ask a running or waiting task for a status report."""
    from crew import ops

    store, who, limit = _prepare(run, task, session, home, timeout)
    text = None if body is None else _read_body(body)
    sent = ops.nudge(store, task, text, session=who, force=force, idempotency_key=idempotency_key)
    _finish(store, sent, "nudge", wait, wait_ack, limit, json)


def cancel(
    run: RunArgument,
    task: Annotated[
        str | None,
        typer.Argument(
            help="Cancel only this task (default: the whole run).",
            metavar="TASK",
            show_default=False,
        ),
    ] = None,
    grace: Annotated[
        str,
        typer.Option(
            "--grace",
            help="How long a worker gets to exit after SIGTERM before SIGKILL.",
            metavar="DURATION",
        ),
    ] = "5s",
    force: ForceOption = False,
    session: SessionOption = None,
    json: JsonOption = False,
    home: HomeOption = None,
) -> None:
    """Cancel a task or the whole run: reject what was pending, stop the workers."""
    from crew import ops
    from crew.ids import check_task_id
    from crew.run import RunStore
    from crew.session import current_session

    if task is not None:
        check_task_id(task)
    seconds = duration(grace, "--grace") or 0.0
    who = current_session(session)
    store = RunStore.open(home_from(home), run)
    result = ops.cancel(store, task, session=who, force=force, grace=seconds)
    if json:
        print_json(result.to_json())
        return
    out = sys.stdout
    if result.already:
        out.write(f"Nothing to cancel: {result.already}.\n")
        return
    if result.overridden:
        say(f"acted on a run owned by {result.overridden} (--force; recorded)")
    out.write(f"Cancelled {', '.join(result.tasks) or 'nothing'} in run {result.run_id}.\n")
    if result.rejected:
        out.write(f"Rejected {len(result.rejected)} pending message(s) (task cancelled).\n")
    for stopped in result.stopped:
        out.write(f"Worker of {stopped.task_id} (pid {stopped.pid}): {stopped.outcome}.\n")
    if result.run_status.terminal:
        out.write(f"The run has ended ({result.run_status}).\n")


def handoff(
    run: RunArgument,
    to: Annotated[
        str, typer.Argument(help="The session that will own the run.", metavar="SESSION")
    ],
    force: ForceOption = False,
    session: SessionOption = None,
    json: JsonOption = False,
    home: HomeOption = None,
) -> None:
    """Give ownership of a run to another session."""
    from crew import ops
    from crew.run import RunStore
    from crew.session import current_session

    who = current_session(session)
    store = RunStore.open(home_from(home), run)
    result = ops.handoff(store, to, session=who, force=force)
    if json:
        print_json(result.to_json())
        return
    if not result.changed:
        sys.stdout.write(f"Run {result.run_id} is already owned by {result.owner}.\n")
        return
    if result.overridden:
        say(f"acted on a run owned by {result.overridden} (--force; recorded)")
    sys.stdout.write(
        f"Run {result.run_id} now belongs to {result.owner} (was {result.previous}).\n"
    )


# ----------------------------------------------------------------------------- shared steps


def _prepare(
    run: str, task: str, session: str | None, home: Path | None, timeout: str | None
) -> tuple[RunStore, str, float | None]:
    """Validate the ids and options the command line gave, then find the run."""
    from crew.ids import check_task_id
    from crew.run import RunStore
    from crew.session import current_session

    check_task_id(task)
    limit = duration(timeout, "--timeout")
    who = current_session(session)
    return RunStore.open(home_from(home), run), who, limit


def _read_body(body: str) -> str:
    """`-` reads the body from stdin (UTF-8; trailing newlines dropped, as `$(…)` would)."""
    if body != "-":
        return body
    from crew.errors import UsageError

    raw = sys.stdin.buffer.read() if hasattr(sys.stdin, "buffer") else sys.stdin.read().encode()
    try:
        return raw.decode("utf-8").rstrip("\n")
    except UnicodeDecodeError:
        raise UsageError("The message on stdin is not UTF-8 text.") from None


def _finish(
    store: RunStore,
    sent: Sent,
    what: str,
    wait: bool,
    wait_ack: bool,
    timeout: float | None,
    json: bool,
) -> None:
    """Report a sent message; with --wait/--wait-ack, block until it is delivered/acknowledged."""
    from crew.lease import LeaseState
    from crew.registry import MessageStatus

    message = sent.message
    for dropped in sent.dropped:
        warn(
            f"dropped the oldest pending {dropped.kind} {dropped.id} to {dropped.task_id}: "
            f"more than {sent.max_pending} were waiting (backpressure)"
        )
    if sent.over_warning and not sent.replayed:
        warn(
            f"task {message.task_id} has {sent.pending} undelivered message(s) of this kind "
            f"(warning above {sent.warn_pending}; beyond {sent.max_pending} the oldest is dropped)"
        )
    if sent.overridden:
        say(f"acted on a run owned by {sent.overridden} (--force; recorded)")
    if not json:
        if sent.replayed:
            sys.stdout.write(
                f"Already sent as {message.id} (same idempotency key): nothing new was written.\n"
            )
        else:
            sys.stdout.write(
                f"Sent {what} {message.id} to {message.task_id} in run {sent.run_id}.\n"
            )
        if sent.leader is not LeaseState.ALIVE and message.status is MessageStatus.PENDING:
            sys.stdout.write(
                f"No leader is running: it is delivered once one leads the run "
                f"(`crew resume {sent.run_id}`).\n"
            )
    if wait or wait_ack:
        from crew.waiting import wait_for_message

        until = MessageStatus.ACKNOWLEDGED if wait_ack else MessageStatus.DELIVERED
        message = wait_for_message(store, message, until=until, timeout=timeout)
        if not json:
            sys.stdout.write(f"{message.id} {message.status}.\n")
    if json:
        print_json(message.to_dict())
