"""The verbs people and CI type: respond, steer, follow-up, nudge, cancel, handoff, add."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from crew.cli.common import (
    ForceOption,
    HomeOption,
    JqOption,
    JsonOption,
    QuietOption,
    RunArgument,
    SessionOption,
    TaskArgument,
    actor_for,
    complete_task,
    open_run,
)
from crew.clock import option_duration
from crew.ids import check_session_option

if TYPE_CHECKING:
    from crew.results.sending import Sent
    from crew.store.runstore import RunStore

#: What `crew respond RUN TASK -` asks on a terminal when the question is secret.
SECRET_PROMPT = "Secret answer (not shown as you type; Enter sends): "

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
PromptArgument = Annotated[
    str,
    typer.Argument(
        help="The task's instructions; '-' reads them from stdin.",
        metavar="PROMPT",
        show_default=False,
    ),
]
AgentOption = Annotated[
    str,
    typer.Option(
        "--agent", help="The crew's agent that runs it.", metavar="AGENT", show_default=False
    ),
]
NewIdOption = Annotated[
    str | None,
    typer.Option(
        "--id",
        help="The new task's id (default: a generated one, <agent>-<n>).",
        metavar="TASK",
        show_default=False,
    ),
]
DependsOnOption = Annotated[
    list[str] | None,
    typer.Option(
        "--depends-on",
        help="A task that must complete first (repeat for more).",
        metavar="TASK",
        show_default=False,
        autocompletion=complete_task,
    ),
]
TitleOption = Annotated[
    str | None,
    typer.Option(
        "--title",
        help="A short title (default: the prompt's first line).",
        metavar="TEXT",
        show_default=False,
    ),
]
AddKeyOption = Annotated[
    str | None,
    typer.Option(
        "--idempotency-key",
        help="Add at most once per key in this run: a retry returns the first task.",
        metavar="KEY",
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
    jq: JqOption = None,
    quiet: QuietOption = False,
    home: HomeOption = None,
) -> int:
    """Answer a task that is waiting on a question (the task runs again)."""
    from crew import verbs

    sending = Sending(run, task, idempotency_key, wait, wait_ack, timeout, force, session, home)
    return sending.send(verbs.respond, body, json, answering=True, contact_id=contact)


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
    jq: JqOption = None,
    quiet: QuietOption = False,
    home: HomeOption = None,
) -> int:
    """Redirect a running or waiting task (delivered ahead of everything but answers)."""
    from crew import verbs

    sending = Sending(run, task, idempotency_key, wait, wait_ack, timeout, force, session, home)
    return sending.send(verbs.steer, body, json)


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
    jq: JqOption = None,
    quiet: QuietOption = False,
    home: HomeOption = None,
) -> int:
    """Queue more work for a task (delivered when it is running and not waiting on a question)."""
    from crew import verbs

    sending = Sending(run, task, idempotency_key, wait, wait_ack, timeout, force, session, home)
    return sending.send(verbs.follow_up, body, json)


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
    jq: JqOption = None,
    quiet: QuietOption = False,
    home: HomeOption = None,
) -> int:
    """Ask a running or waiting task for a status report."""
    from crew import verbs

    sending = Sending(run, task, idempotency_key, wait, wait_ack, timeout, force, session, home)
    return sending.send(verbs.nudge, body, json)


def cancel(
    run: RunArgument,
    task: Annotated[
        str | None,
        typer.Argument(
            help="Cancel only this task (default: the whole run).",
            metavar="TASK",
            show_default=False,
            autocompletion=complete_task,
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
    jq: JqOption = None,
    quiet: QuietOption = False,
    home: HomeOption = None,
) -> int:
    """Cancel a task or the whole run: reject what was pending, stop the workers."""
    from crew.fast.changing import cancel_run

    return cancel_run(run, task, grace=grace, force=force, session=session, json=json, home=home)


def handoff(
    run: RunArgument,
    to: Annotated[
        str, typer.Argument(help="The session that will own the run.", metavar="SESSION")
    ],
    force: ForceOption = False,
    session: SessionOption = None,
    json: JsonOption = False,
    jq: JqOption = None,
    quiet: QuietOption = False,
    home: HomeOption = None,
) -> int:
    """Give ownership of a run to another session."""
    from crew.fast.changing import hand_off

    return hand_off(run, to, force=force, session=session, json=json, home=home)


def add(
    run: RunArgument,
    prompt: PromptArgument,
    agent: AgentOption,
    task_id: NewIdOption = None,
    depends_on: DependsOnOption = None,
    title: TitleOption = None,
    idempotency_key: AddKeyOption = None,
    force: ForceOption = False,
    session: SessionOption = None,
    json: JsonOption = False,
    jq: JqOption = None,
    quiet: QuietOption = False,
    home: HomeOption = None,
) -> int:
    """Add a task to a run that has not ended (it starts once its dependencies complete)."""
    from crew.fast.changing import add_task

    return add_task(
        run,
        _read_body(prompt, "prompt"),
        agent=agent,
        task_id=task_id,
        depends_on=depends_on or (),
        title=title,
        idempotency_key=idempotency_key,
        force=force,
        session=session,
        json=json,
        home=home,
    )


# ----------------------------------------------------------------------------- shared steps


@dataclass(frozen=True)
class Sending:
    """What the sending verbs' command lines share: the run and task, who sends, and waiting."""

    run: str
    task: str
    idempotency_key: str | None
    wait: bool
    wait_ack: bool
    timeout: str | None
    force: bool
    session: str | None
    home: Path | None

    def send(
        self,
        verb: Callable[..., Sent],
        body: str | None,
        json: bool,
        *,
        answering: bool = False,
        **extra: Any,
    ) -> int:
        """Validate the command line, find the run, send, wait if asked, print the result.
        `answering`: the body answers the task's question; typed on a terminal for a secret
        one, it is not shown."""
        from crew.ids import check_idempotency_key, check_task_id
        from crew.registry import MessageStatus
        from crew.render import emit

        check_task_id(self.task)
        limit = option_duration(self.timeout, "--timeout")
        check_session_option(self.session)
        if self.idempotency_key is not None:
            check_idempotency_key(self.idempotency_key)
        store = open_run(self.run, self.home)
        who = actor_for(self.session, store.paths.home)
        hidden = answering and body == "-" and sys.stdin.isatty() and _asks_secret(store, self.task)
        text = None if body is None else _read_hidden() if hidden else _read_body(body)
        sent = verb(
            store,
            self.task,
            text,
            session=who,
            force=self.force,
            idempotency_key=self.idempotency_key,
            **extra,
        )
        if self.wait or self.wait_ack:
            from crew.waiting import wait_for_sent

            until = MessageStatus.ACKNOWLEDGED if self.wait_ack else MessageStatus.DELIVERED
            sent = wait_for_sent(store, sent, until=until, timeout=limit)
        return emit(sent, json=json)


def _asks_secret(store: RunStore, task_id: str) -> bool:
    """Whether the task's open question asks for a secret."""
    task = store.state().tasks.get(task_id)
    return task is not None and task.contact is not None and bool(task.contact.secret)


def _read_hidden() -> str:
    """A secret answer typed on the terminal, not shown as it is typed (nor left on the screen
    or in its scrollback); Enter sends it."""
    import getpass

    try:
        return getpass.getpass(SECRET_PROMPT, stream=sys.stderr)
    except EOFError:  # Ctrl-D: nothing typed, which the verb refuses as an empty answer
        return ""


def _read_body(body: str, what: str = "message") -> str:
    """`-` reads the body from stdin (UTF-8; trailing newlines dropped, as `$(…)` would)."""
    if body != "-":
        return body
    from crew.errors import UsageError

    raw = sys.stdin.buffer.read() if hasattr(sys.stdin, "buffer") else sys.stdin.read().encode()
    try:
        return raw.decode("utf-8").rstrip("\n")
    except UnicodeDecodeError:
        raise UsageError(f"The {what} on stdin is not UTF-8 text.") from None
