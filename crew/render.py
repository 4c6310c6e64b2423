"""The one renderer: every command's result, printed as JSON or as its text view.

`emit()` prints a result's warnings and notes on stderr, then its JSON document (`--json`) or its
text view on stdout, and returns its exit code. Streams (the event log, a run's progress) print
one line per item. rich is imported only when a table is drawn.

Text for people never carries a control character from outside (a message body, a worker's
line, a question, a session name, an error quoting input): every line goes through
`terminal_safe`, which shows them as inert text. JSON is exact; the characters a terminal might
still obey inside its strings are written as `\\uXXXX` escapes, which mean the same.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from crew import textviews
from crew.errors import CrewError
from crew.output import SETTINGS, print_json
from crew.registry import (
    RunStatus,
    TaskStatus,
)
from crew.results import Result
from crew.text import terminal_safe

if TYPE_CHECKING:
    from crew.config_checks import InvalidConfig
    from crew.models import Task
    from crew.results.admin import DoctorReport, Initialized, Removed, SchemaDoc
    from crew.results.leading import Detached, Led, Waited
    from crew.results.reading import RunList, StatusReport, Timeline
    from crew.results.sending import Added, Cancelled, HandedOff, Sent
    from crew.results.validating import Validation

STATUS_STYLE = {
    TaskStatus.QUEUED: "dim",
    TaskStatus.RUNNING: "cyan",
    TaskStatus.WAITING: "bold yellow",
    TaskStatus.NEEDS_REVIEW: "bold magenta",
    TaskStatus.COMPLETED: "green",
    TaskStatus.FAILED: "bold red",
    TaskStatus.CANCELLED: "red",
    RunStatus.RUNNING: "cyan",
    RunStatus.NEEDS_REVIEW: "bold magenta",
    RunStatus.COMPLETED: "green",
    RunStatus.FAILED: "bold red",
    RunStatus.CANCELLED: "red",
}


def emit(result: Result, *, json: bool) -> int:
    """Print a result (see the module docstring); returns its exit code.

    With --quiet (crew/output.py) the text view is only `result.quiet_lines()` and the notes
    are left out; JSON, warnings and errors are printed as ever.
    """
    for warning in result.warnings():
        warn(warning)
    for note in result.notes():
        say(note)
    try:
        if json or SETTINGS.jq is not None:
            print_json(result.to_json(), compact=result.json_line)
        elif SETTINGS.quiet:
            for line in result.quiet_lines():
                _out(line)
        else:
            _TEXT_VIEWS[type(result).__name__](result)
    except BrokenPipeError:  # a reader gone (`crew steer RUN T x --wait | head -0`)
        silence_stdout()  # the result stands: a message sent, a wait timed out
    failure = result.failure()
    if failure is not None:
        error(failure)
    return result.exit_code


def error(failure: CrewError) -> int:
    """A CrewError as one sentence (plus its hint) on stderr; returns its exit code."""
    # Only an InvalidConfig lists problems, and one was raised only if its module is loaded:
    # printing any other error does not load pydantic to find out.
    checks = sys.modules.get("crew.config_checks")
    if checks is not None and isinstance(failure, checks.InvalidConfig):
        return _config_problems(failure)
    sys.stderr.write(f"crew: error: {terminal_safe(failure.message)}\n")
    if failure.hint:
        sys.stderr.write(f"{terminal_safe(failure.hint, lines=True)}\n")
    return int(failure.exit_code)


def internal_error(failure: Exception) -> int:
    """An exception crew did not expect: its type and message on stderr, and how to see more;
    returns the exit code of a failure."""
    from crew import env
    from crew.errors import ExitCode

    sys.stderr.write(
        f"crew: internal error: {type(failure).__name__}: {terminal_safe(str(failure))}\n"
        f"Set {env.DEBUG.name}=1 to see the traceback, and please report it.\n"
    )
    return int(ExitCode.FAILED)


def _config_problems(failure: InvalidConfig) -> int:
    """Every problem of a crew definition, each with its fix, then how many there are."""
    for problem in failure.problems:
        sys.stderr.write(f"crew: error: {terminal_safe(problem.describe(failure.source))}\n")
        if problem.hint:
            sys.stderr.write(f"  hint: {terminal_safe(problem.hint)}\n")
    if len(failure.problems) > 1:
        say(f"{len(failure.problems)} problems in {failure.source}.")
    return int(failure.exit_code)


def silence_stdout() -> None:
    """The reader of stdout went away (`crew events | head`): send what is left nowhere, so
    the interpreter's last flush does not fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except OSError:
        pass


def warn(message: str) -> None:
    """A warning on stderr (never on stdout, which may be piped into jq)."""
    sys.stderr.write(f"crew: warning: {terminal_safe(message)}\n")


def say(message: str) -> None:
    """A note for the person at the terminal, on stderr (none with --quiet)."""
    if SETTINGS.quiet:
        return
    sys.stderr.write(f"crew: {terminal_safe(message)}\n")


def starting(run_id: str, *, resumed: bool, json: bool, detail: str = "") -> None:
    """Say which run is being led (people only: a JSON stream starts with its events)."""
    if not json:
        say(f"run {run_id}{' resumed' if resumed else ''}{detail}")


def _out(line: str = "") -> None:
    """A line of text for people on stdout, made safe for a terminal."""
    sys.stdout.write(terminal_safe(line) + "\n")


def styled(status: str) -> str:
    style = STATUS_STYLE.get(status)  # type: ignore[call-overload]  # both enums are str
    return f"[{style}]{status}[/]" if style else status


def markup_safe(text: str) -> str:
    """Text from outside, for rich: safe for a terminal, and never read as markup."""
    from rich.markup import escape

    return escape(terminal_safe(text))


def attempts(task: Task) -> str:
    """Which attempt runs, and the failures that count against maxAttempts: `2 (1/2 failed)`."""
    return textviews.attempts(task.attempt, task.failures, task.max_attempts)


def question_line(task: Task) -> str:
    """A task's open question on one line: `prompt [a|b]`."""
    contact = task.open_question
    return "" if contact is None else textviews.question_line(contact.to_dict())


# ----------------------------------------------------------------------------- sending


def _sent(result: Sent) -> None:
    message = result.message
    if result.replayed:
        _out(f"Already sent as {message.id} (same idempotency key): nothing new was written.")
    else:
        _out(f"Sent {result.what} {message.id} to {message.task_id} in run {result.run_id}.")
    if result.undelivered_without_leader:
        _out(
            "No leader is running: it is delivered once one leads the run "
            f"(`crew resume {result.run_id}`)."
        )
    if result.waited_for:
        _out(f"{message.id} {message.status}.")


def _cancelled(result: Cancelled) -> None:
    if result.already:
        _out(f"Nothing to cancel: {result.already}.")
        return
    _out(f"Cancelled {', '.join(result.tasks) or 'nothing'} in run {result.run_id}.")
    if result.rejected:
        _out(f"Rejected {len(result.rejected)} pending message(s) (task cancelled).")
    for stopped in result.stopped:
        _out(f"Worker of {stopped.task_id} (pid {stopped.pid}): {stopped.outcome}.")
    if result.run_status.terminal:
        _out(f"The run has ended ({result.run_status}).")


def _added(result: Added) -> None:
    task, run_id = result.task, result.run_id
    if result.replayed:
        return _out(f"Already added as {task.id} (same idempotency key): nothing new was written.")
    _out(f"Added task {task.id} ({task.agent}) to run {run_id}: {task.status}.")
    if task.status.terminal:
        _out(f"It will not run: {task.error}.")
    elif result.leader != "alive":
        _out(f"No leader is running: it starts once one leads the run (`crew resume {run_id}`).")


def _handed_off(result: HandedOff) -> None:
    if not result.changed:
        _out(f"Run {result.run_id} is already owned by {result.owner}.")
    else:
        _out(f"Run {result.run_id} now belongs to {result.owner} (was {result.previous}).")


# ----------------------------------------------------------------------------- inspecting


def _runs(result: RunList) -> None:
    from crew.output import colored

    textviews.write_runs(result.to_json(), color=colored(), width=textviews.terminal_width())


def _status(report: StatusReport) -> None:
    from crew.output import colored
    from crew.textviews import terminal_width, write_status

    write_status(report.to_json(), color=colored(), width=terminal_width())


def _timeline(result: Timeline) -> None:
    from crew.output import colored

    textviews.write_timeline(result.to_json(), color=colored(), width=textviews.terminal_width())


def _doctor(report: DoctorReport) -> None:
    for finding in report.findings:
        mark = (
            " [repaired]"
            if finding.repaired
            else (" [needs attention]" if not finding.repairable else "")
        )
        _out(f"{finding.location()}: {finding.problem}{mark}")
    checked = len(report.runs)
    runs = f"{checked} run{'s' * (checked != 1)}"
    if not report.findings:
        _out(f"Checked {runs}: no problems found.")
    elif report.clean:
        _out(f"Checked {runs}: repaired {len(report.findings)} problem(s).")
    else:
        left = [f for f in report.findings if not f.repaired]
        hint = (
            ""
            if report.repair or not any(f.repairable for f in left)
            else (" Run `crew doctor --repair` to fix what can be fixed.")
        )
        _out(f"Checked {runs}: {len(left)} problem(s).{hint}")


def _initialized(result: Initialized) -> None:
    if result.created:
        _out(f"Created {result.home}")
    if result.created or result.wrote_config:
        _out(f"  {result.config_file.name}   the crew definition: edit it, then `crew run`")
    if result.created:
        _out("  state/      runs, events and mailboxes (private to you)")


def _schema(result: SchemaDoc) -> None:
    print_json(result.document)  # a schema is JSON, whatever the flag says


def _validation(result: Validation) -> None:
    """A valid definition in a line on stdout; problems on stderr, as `crew run` shows them."""
    refusal = result.refusal()
    if refusal is not None:
        error(refusal)
    else:
        _out(
            f"{result.file}: valid ({_plural(result.agents, 'agent')}, "
            f"{_plural(result.tasks, 'task')})."
        )


def _plural(count: int | None, noun: str) -> str:
    return f"{count} {noun}{'s' * (count != 1)}"


def _removed(result: Removed) -> None:
    if not result.removed:
        _out("No run would be removed." if result.dry_run else "No run was removed.")
    for run in result.removed:
        what = f"run {run.run_id}"
        if run.status is not None:
            ended = f", ended {textviews.ago(run.ended_at)}" if run.ended_at else ""
            what += f" ({run.status}, crew {run.crew}{ended})"
        _out(f"{'Would remove' if result.dry_run else 'Removed'} {what}")


# ----------------------------------------------------------------------------- leading


def _waited(result: Waited) -> None:
    for task in result.tasks:
        question = task.open_question
        if question is not None:
            _out(f"{task.id} {task.status} ({question.id}): {question_line(task)}")
        else:
            _out(f"{task.id} {task.status}")


def _detached(result: Detached) -> None:
    _out(result.run_id)


def _led(result: Led) -> None:
    """The summary is a note on stderr; stdout had the run's progress."""


#: Each kind of result (by class name: a command loads only the results it can return) and its
#: text view.
_TEXT_VIEWS: dict[str, Callable[[Any], None]] = {
    "Sent": _sent,
    "Cancelled": _cancelled,
    "HandedOff": _handed_off,
    "Added": _added,
    "RunList": _runs,
    "StatusReport": _status,
    "Timeline": _timeline,
    "DoctorReport": _doctor,
    "Initialized": _initialized,
    "SchemaDoc": _schema,
    "Validation": _validation,
    "Removed": _removed,
    "Waited": _waited,
    "Detached": _detached,
    "Led": _led,
}
