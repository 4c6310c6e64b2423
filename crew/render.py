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

from crew import clock
from crew.errors import CrewError
from crew.output import SETTINGS, console, print_json
from crew.registry import (
    LEADER,
    DecisionAction,
    Direction,
    MessageStatus,
    RunStatus,
    TaskStatus,
)
from crew.results import Result
from crew.text import format_counts, short, terminal_safe

if TYPE_CHECKING:
    from crew.config_checks import InvalidConfig
    from crew.models import Task, Usage
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
    if json or SETTINGS.jq is not None:
        print_json(result.to_json(), compact=result.json_line)
    elif SETTINGS.quiet:
        for line in result.quiet_lines():
            _out(line)
    else:
        _TEXT_VIEWS[type(result).__name__](result)
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


def _ago(timestamp: str | None) -> str:
    if not timestamp:
        return "-"
    try:
        return clock.format_duration(clock.seconds_since(timestamp)) + " ago"
    except ValueError:
        return timestamp


def attempts(task: Task) -> str:
    """Which attempt runs, and the failures that count against maxAttempts: `2 (1/2 failed)`."""
    if task.failures == 0:
        return str(task.attempt)
    return f"{task.attempt} ({task.failures}/{task.max_attempts} failed)"


def question_line(task: Task) -> str:
    """A task's open question on one line: `prompt [a|b]`."""
    contact = task.open_question
    if contact is None:
        return ""
    options = f" [{'|'.join(contact.options)}]" if contact.options else ""
    own = " (or an answer of your own)" if contact.other else ""
    secret = " (secret: answer with `crew respond RUN TASK -` on stdin)" if contact.secret else ""
    return f"{contact.prompt}{options}{own}{secret}"


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
    from rich.table import Table

    if not result.runs:
        _out("No runs yet. Start one with `crew run`.")
        return
    table = Table(box=None, pad_edge=False, header_style="bold")
    for column in ("RUN", "CREW", "STATUS", "TASKS", "CREATED", "OWNER"):
        table.add_column(column)
    for summary in result.runs:
        run = summary.run
        if run is None:
            problem = markup_safe(summary.problem or "")
            table.add_row(summary.run_id, "?", "[red]unreadable[/]", problem, "", "")
            continue
        table.add_row(
            run.run_id,
            markup_safe(run.crew),
            styled(run.status),
            format_counts(summary.counts),
            _ago(run.created_at),
            markup_safe(run.owner_session_id),
        )
    out = console()
    out.print(table)
    for summary in result.runs:
        if summary.run is not None and summary.problem:
            out.print(f"[yellow]![/] {summary.run_id}: {markup_safe(summary.problem)}")


def _status(report: StatusReport) -> None:
    from rich.table import Table

    run = report.run
    out = console()
    lease = report.lease.leader
    leader = f" · leader pid {lease.pid}" if lease and report.leader_alive else ""
    rerun = f" · rerun of {run.rerun_of}" if run.rerun_of else ""
    out.print(
        f"[bold]Run {run.run_id}[/] · crew {markup_safe(run.crew)} · {styled(run.status)} · "
        f"owner {markup_safe(run.owner_session_id)} · created {_ago(run.created_at)}{rerun}"
        f"{leader}"
    )
    table = Table(box=None, pad_edge=False, header_style="bold")
    total = report.usage
    spent = ("SPENT",) if total is not None else ()
    for column in ("TASK", "STATUS", "AGENT", "ATTEMPT", "SINCE", "PENDING", *spent, "NOTE"):
        table.add_column(column)
    for task in report.tasks:
        pending = report.pending.get(task.id, {})
        shown = ", ".join(f"{n} {box}" for box, n in pending.items() if n) or "-"
        table.add_row(
            task.id,
            styled(task.status),
            markup_safe(task.agent),
            attempts(task),
            _ago(task.since()),
            shown,
            *((_spent(task.usage),) if total is not None else ()),
            markup_safe(_note(task)),
        )
    out.print(table)
    if total is not None:
        out.print(f"Spent in all: {markup_safe(total.summary())}")
    if report.open_contacts:
        out.print("\n[bold]Waiting for an answer:[/]")
        for task in report.open_contacts:
            contact = task.open_question
            assert contact is not None
            question = markup_safe(question_line(task))
            out.print(f"  {task.id} ({contact.id}) {contact.type}: {question}")
            out.print(f'    answer with: crew respond {run.run_id} {task.id} "…"', style="dim")
    if report.run_warnings:
        out.print("\n[bold]Warnings:[/]")
        for warning in report.run_warnings:
            out.print(f"  [yellow]![/] {markup_safe(warning)}")


def _spent(usage: Usage | None) -> str:
    """'12.3k tok $0.05' (a task's usage in a narrow column)."""
    if usage is None:
        return "-"
    tokens = usage.tokens
    shown = f"{tokens / 1000:.1f}k tok" if tokens >= 1000 else f"{tokens} tok"
    cost = usage.cost_usd
    if cost is None:
        return shown
    return f"{shown} ${cost:.2f}" if cost >= 0.01 or cost == 0 else f"{shown} ${cost:.4f}"


def _note(task: Task) -> str:
    if task.error:
        return short(task.error, 60)
    if task.result and task.status is TaskStatus.COMPLETED:  # the agent's final answer
        return short(" ".join(task.result.split()), 60)
    if task.status.terminal and task.exit_code is not None:
        return f"exit {task.exit_code}"
    if task.open_question is not None:
        return short(f"? {task.open_question.prompt}", 60)
    if task.depends_on and task.status is TaskStatus.QUEUED:
        return "after " + ", ".join(task.depends_on)
    return short("waiting for " + ", ".join(task.waiting_for), 60) if task.waiting_for else ""


def _timeline(result: Timeline) -> None:
    out = console()
    if not result.messages:
        out.print("No messages.")
        return
    current: str | None = None
    for view in result.messages:
        message = view.message
        if message.task_id != current:
            if current is not None:
                out.print()  # a blank line between tasks, none above the first
            current = message.task_id
            out.print(f"[bold]{current}[/]")
        arrow = "→" if message.direction is Direction.INBOX else "←"
        sender = f" from {message.from_}" if arrow == "→" and message.from_ != LEADER else ""
        out.print(
            f"  {arrow} {message.kind:<8} {message.id}  {message.priority:<6} "
            f"{markup_safe(short(message.body, 70))!r}{sender}"
        )
        steps = [f"{entry.status} {_clock(entry.status_at())}".rstrip() for entry in view.history]
        line = " → ".join(steps)
        if message.reason:
            line += f" ({markup_safe(message.reason)})"
        style = "red" if message.status is MessageStatus.REJECTED else "dim"
        out.print(f"      {line}", style=style)
        if view.decisions:
            decisions = " → ".join(_decision_text(d) for d in view.decisions)
            out.print(f"      {markup_safe(decisions)}", style="dim")


#: Each decision action as a past participle: `preempted by msg_…`.
_PAST = {
    DecisionAction.PICK: "picked",
    DecisionAction.PREEMPT: "preempted",
    DecisionAction.MERGE: "merged",
    DecisionAction.CANCEL: "cancelled",
    DecisionAction.DEFER: "deferred",
}


def _decision_text(decision: dict[str, Any]) -> str:
    """A decision as a short phrase: `picked`, `preempted by msg_…`, `done: ok`."""
    action = str(decision.get("action", "?"))
    at = _clock(decision.get("at") if isinstance(decision.get("at"), str) else None)
    past = _PAST.get(action, action)  # type: ignore[call-overload]  # a worker's own word
    if "by" in decision:
        text = f"{past} by {decision['by']}"
    elif action == DecisionAction.DONE:
        reason = decision.get("reason")
        text = f"done: {reason}" if reason else "done"
    elif action == DecisionAction.CONTINUE:
        text = str(decision.get("reason") or "left queued")
    else:
        text = past
        if decision.get("reason") and action != DecisionAction.PICK:
            text += f" ({decision['reason']})"
    return f"{text} {at}".rstrip()


def _clock(timestamp: str | None) -> str:
    """The time of day of a timestamp, to the millisecond: enough within one run."""
    return timestamp[11:23] if timestamp else ""


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
        _out(f"  {result.config_file.name}   the crew definition: edit it, then `crew run`")
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
            ended = f", ended {_ago(run.ended_at)}" if run.ended_at else ""
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
