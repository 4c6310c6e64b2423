"""Human output of the inspection commands; the same data serves `--json` elsewhere.

rich is imported only here, and only when a table is drawn.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from crew import clock
from crew.registry import EventType, MessageStatus, RunStatus, TaskStatus

if TYPE_CHECKING:
    from rich.console import Console

    from crew.doctor import DoctorReport
    from crew.models import Event, Task
    from crew.views import MessageView, RunSummary, StatusReport

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


def console() -> Console:
    """A console for stdout; piped output is never wrapped or cut to a terminal's width."""
    from rich.console import Console

    piped = not sys.stdout.isatty()
    return Console(highlight=False, soft_wrap=piped, width=100_000 if piped else None)


def _styled(status: str) -> str:
    style = STATUS_STYLE.get(status)  # type: ignore[call-overload]  # both enums are str
    return f"[{style}]{status}[/]" if style else status


def _esc(text: str) -> str:
    from rich.markup import escape

    return escape(text)


def _ago(timestamp: str | None) -> str:
    if not timestamp:
        return "-"
    try:
        return clock.format_duration(clock.seconds_since(timestamp)) + " ago"
    except ValueError:
        return timestamp


def _short(text: str, limit: int = 60) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def runs_table(summaries: list[RunSummary]) -> None:
    from rich.table import Table

    if not summaries:
        sys.stdout.write("No runs yet. Start one with `crew run`.\n")
        return
    table = Table(box=None, pad_edge=False, header_style="bold")
    for column in ("RUN", "CREW", "STATUS", "TASKS", "CREATED", "OWNER"):
        table.add_column(column)
    for summary in summaries:
        run = summary.run
        if run is None:
            table.add_row(
                summary.run_id, "?", "[red]unreadable[/]", _esc(summary.problem or ""), "", ""
            )
            continue
        counts = ", ".join(f"{n} {status}" for status, n in summary.counts.items())
        table.add_row(
            run.run_id,
            _esc(run.crew),
            _styled(run.status),
            counts,
            _ago(run.created_at),
            _esc(run.owner_session_id),
        )
    console().print(table)


def status_view(report: StatusReport) -> None:
    from rich.table import Table

    run = report.run
    out = console()
    lease = report.lease.leader
    leader = f" · leader pid {lease.pid}" if lease and report.lease.state == "alive" else ""
    out.print(
        f"[bold]Run {run.run_id}[/] · crew {_esc(run.crew)} · {_styled(run.status)} · "
        f"owner {_esc(run.owner_session_id)} · created {_ago(run.created_at)}{leader}"
    )
    table = Table(box=None, pad_edge=False, header_style="bold")
    for column in ("TASK", "STATUS", "AGENT", "ATTEMPT", "SINCE", "PENDING", "NOTE"):
        table.add_column(column)
    for task in report.tasks:
        pending = report.pending.get(task.id, {})
        shown = ", ".join(f"{n} {box}" for box, n in pending.items() if n) or "-"
        table.add_row(
            task.id,
            _styled(task.status),
            _esc(task.agent),
            f"{task.attempt}/{task.max_attempts}",
            _ago(_since(task)),
            shown,
            _esc(_note(task)),
        )
    out.print(table)
    if report.open_contacts:
        out.print("\n[bold]Waiting for an answer:[/]")
        for task in report.open_contacts:
            contact = task.contact
            assert contact is not None
            options = f" [{'|'.join(contact.options)}]" if contact.options else ""
            out.print(
                f"  {task.id} ({contact.id}) {contact.type}: {_esc(contact.prompt)}{_esc(options)}"
            )
            out.print(f'    answer with: crew respond {run.run_id} {task.id} "…"', style="dim")
    if report.warnings:
        out.print("\n[bold]Warnings:[/]")
        for warning in report.warnings:
            out.print(f"  [yellow]![/] {_esc(warning)}")


def _since(task: Task) -> str | None:
    if task.status is TaskStatus.WAITING:
        return task.waiting_since
    if task.status.terminal:
        return task.ended_at
    return task.started_at


def _note(task: Task) -> str:
    if task.error:
        return _short(task.error)
    if task.status.terminal and task.exit_code is not None:
        return f"exit {task.exit_code}"
    if task.contact is not None:
        return _short(f"? {task.contact.prompt}")
    if task.depends_on and task.status is TaskStatus.QUEUED:
        return "after " + ", ".join(task.depends_on)
    return ""


def mailbox_view(views: list[MessageView]) -> None:
    out = console()
    if not views:
        out.print("No messages.")
        return
    current: str | None = None
    for view in views:
        message = view.message
        if message.task_id != current:
            current = message.task_id
            out.print(f"\n[bold]{current}[/]")
        arrow = "→" if message.direction == "inbox" else "←"
        out.print(
            f"  {arrow} {message.kind:<8} {message.id}  {message.priority:<6} "
            f"{_esc(_short(message.body, 70))!r}"
        )
        steps = [f"{entry.status} {_clock(entry.status_at())}".rstrip() for entry in view.history]
        line = " → ".join(steps)
        if message.reason:
            line += f" ({_esc(message.reason)})"
        style = "red" if message.status is MessageStatus.REJECTED else "dim"
        out.print(f"      {line}", style=style)
        if view.decisions:
            out.print(
                f"      {_esc(' → '.join(_decision_text(d) for d in view.decisions))}", style="dim"
            )


def _decision_text(decision: dict[str, Any]) -> str:
    """A decision as a short phrase: `picked`, `preempted by msg_…`, `done: ok`."""
    action = str(decision.get("action", "?"))
    at = _clock(decision.get("at") if isinstance(decision.get("at"), str) else None)
    if "by" in decision:
        text = f"{_PAST.get(action, action)} by {decision['by']}"
    elif action == "done":
        reason = decision.get("reason")
        text = f"done: {reason}" if reason else "done"
    elif action == "continue":
        text = str(decision.get("reason") or "left queued")
    else:
        text = _PAST.get(action, action)
        if decision.get("reason") and action != "pick":
            text += f" ({decision['reason']})"
    return f"{text} {at}".rstrip()


_PAST = {
    "pick": "picked",
    "preempt": "preempted",
    "merge": "merged",
    "cancel": "cancelled",
    "defer": "deferred",
}


def _clock(timestamp: str | None) -> str:
    """The time of day of a timestamp, to the millisecond: enough within one run."""
    return timestamp[11:23] if timestamp else ""


def event_line(event: Event) -> str:
    """One event as a plain line: time, seq, type, task, message."""
    task = event.task_id or "-"
    text = event.message or ""
    return f"{event.at}  #{event.seq:<5} {event.type:<22} {task:<16} {text}".rstrip()


#: Events too frequent or too internal for the progress of a run shown to a person.
_QUIET = frozenset(
    {
        EventType.MAILBOX_DELIVERED,
        EventType.MAILBOX_ACKNOWLEDGED,
        EventType.ATTENTION_DECISION,
        EventType.LEADER_STARTED,
    }
)


#: Attention decisions worth a line of progress: the ones that change what a worker does.
_NOTABLE_DECISIONS = frozenset({"preempt", "merge", "cancel", "defer"})


def progress_line(event: Event) -> str | None:
    """One event as a progress line for a person watching `crew run` (None: not worth a line)."""
    if not event.message:
        return None
    if event.type is EventType.ATTENTION_DECISION:
        decision = (event.data or {}).get("decision")
        if not isinstance(decision, dict) or decision.get("action") not in _NOTABLE_DECISIONS:
            return None
    elif event.type in _QUIET:
        return None
    return f"{event.at[11:19]}  {event.message}"


def doctor_report(report: DoctorReport) -> None:
    out = sys.stdout
    for finding in report.findings:
        mark = (
            " [repaired]"
            if finding.repaired
            else (" [needs attention]" if not finding.repairable else "")
        )
        out.write(f"{finding.location()}: {finding.problem}{mark}\n")
    checked = len(report.runs)
    runs = f"{checked} run{'s' * (checked != 1)}"
    if not report.findings:
        out.write(f"Checked {runs}: no problems found.\n")
    elif report.clean:
        out.write(f"Checked {runs}: repaired {len(report.findings)} problem(s).\n")
    else:
        left = [f for f in report.findings if not f.repaired]
        hint = (
            ""
            if report.repair or not any(f.repairable for f in left)
            else (" Run `crew doctor --repair` to fix what can be fixed.")
        )
        out.write(f"Checked {runs}: {len(left)} problem(s).{hint}\n")
