"""The text views of `crew status`, `crew runs` and `crew mailbox`, drawn from their JSON
documents with the standard library alone.

The full command (crew/render.py) and the fast path (crew/fast/status.py, runs.py, mailbox.py)
both print them through `write_status`, `write_runs` and `write_timeline`, from the document
`--json` prints, so there is one layout.
It draws what rich's box-less tables drew: columns two spaces apart, each cell padded to its
column's width (in terminal cells), a bold header row; styles are SGR codes, only when `color`
is on (crew/output.py `colored` decides: `--color`, NO_COLOR, TERM=dumb, a terminal). A table
wider than a terminal (`width`) has its last column cut to fit, with an ellipsis; lines are never
wrapped (the terminal does that). Every piece of text from outside goes through
`terminal_safe`, which leaves nothing a terminal could obey.
"""

from __future__ import annotations

import os
import sys

from crew import clock
from crew.text import placement, short, terminal_safe

TYPE_CHECKING = False  # `typing` costs a fast command a few milliseconds
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

#: Each status (of a task or a run) and its SGR style, as crew/render.py's STATUS_STYLE names it.
STATUS_SGR = {
    "queued": "2",
    "running": "36",
    "waiting": "1;33",
    "needs_review": "1;35",
    "completed": "32",
    "failed": "1;31",
    "cancelled": "31",
}
BOLD, DIM, RED, YELLOW = "1", "2", "31", "33"
TERMINAL_TASK_STATUSES = frozenset({"completed", "failed", "cancelled"})
#: Between two columns.
GAP = "  "


def paint(text: str, sgr: str | None, color: bool) -> str:
    """`text` in the style `sgr` (an SGR parameter such as `1;31`) when colour is on."""
    return f"\x1b[{sgr}m{text}\x1b[0m" if color and sgr and text else text


def cells(text: str) -> int:
    """How many terminal cells `text` takes: two for a wide character, none for a combining one."""
    if text.isascii():
        return len(text)
    import unicodedata  # only for text beyond ASCII

    return sum(
        0
        if unicodedata.combining(char) or char == "\u200b"
        else 2
        if unicodedata.east_asian_width(char) in "WF"
        else 1
        for char in text
    )


def terminal_width() -> int | None:
    """The width of the terminal stdout is, or None for a pipe or a file (nothing is cut)."""
    try:
        if not sys.stdout.isatty():
            return None
        columns = os.environ.get("COLUMNS", "")
        return int(columns) if columns.isdigit() else os.get_terminal_size(sys.stdout.fileno())[0]
    except (OSError, ValueError):
        return None


def table(
    header: Sequence[str],
    rows: Sequence[Sequence[tuple[str, str | None]]],
    *,
    color: bool,
    width: int | None,
) -> list[str]:
    """The lines of a table: each row's cells as (text, SGR style or None)."""
    widths = [cells(name) for name in header]
    for row in rows:
        widths = [max(w, cells(text)) for w, (text, _) in zip(widths, row, strict=True)]
    over = sum(widths) + len(GAP) * (len(widths) - 1) - (width or 0)
    if width is not None and over > 0:  # the last column gives way, down to its header
        fitted = max(widths[-1] - over, cells(header[-1]))
        rows = [[*row[:-1], (_fit(row[-1][0], fitted), row[-1][1])] for row in rows]
    widths[-1] = 0  # the last column is not padded: no line ends in spaces
    lines = []
    head = ""
    for index, (name, wide) in enumerate(zip(header, widths, strict=True)):
        if index:  # each space of the gap is its own styled piece, as rich drew it
            head += paint(" ", BOLD, color) * len(GAP)
        head += paint(name + " " * max(0, wide - cells(name)), BOLD, color)
    lines.append(head)
    for row in rows:
        line = GAP.join(
            paint(text, style, color) + " " * max(0, wide - cells(text))
            for (text, style), wide in zip(row, widths, strict=True)
        )
        lines.append(line)
    return lines


def _fit(text: str, width: int) -> str:
    """`text` cut to `width` cells, the last an ellipsis when it was cut."""
    if cells(text) <= width:
        return text
    while text and cells(text) > width - 1:
        text = text[:-1]
    return text + "…"


def ago(timestamp: str | None) -> str:
    """`724ms ago` (crew/clock.py `moment` is now), `-` for no time."""
    if not timestamp:
        return "-"
    try:
        return clock.format_duration(clock.seconds_since(timestamp)) + " ago"
    except ValueError:
        return timestamp


def attempts(attempt: int, failures: int, max_attempts: int) -> str:
    """Which attempt runs, and the failures that count against maxAttempts: `2 (1/2 failed)`."""
    if failures == 0:
        return str(attempt)
    return f"{attempt} ({failures}/{max_attempts} failed)"


def question_line(contact: dict[str, Any]) -> str:
    """An open question on one line: `prompt [a|b]` (the contact's JSON form)."""
    options = contact.get("options") or []
    shown = f" [{'|'.join(options)}]" if options else ""
    own = " (or an answer of your own)" if contact.get("other") else ""
    secret = (
        " (secret: answer with `crew respond RUN TASK -` on stdin)" if contact.get("secret") else ""
    )
    return f"{contact['prompt']}{shown}{own}{secret}"


def spent(usage: dict[str, Any] | None) -> str:
    """'12.3k tok $0.05' (a task's usage in a narrow column)."""
    if usage is None:
        return "-"
    tokens = usage.get("inputTokens", 0) + usage.get("outputTokens", 0)
    shown = f"{tokens / 1000:.1f}k tok" if tokens >= 1000 else f"{tokens} tok"
    cost = usage.get("costUsd")
    if cost is None:
        return shown
    return f"{shown} ${cost:.2f}" if cost >= 0.01 or cost == 0 else f"{shown} ${cost:.4f}"


def usage_summary(usage: dict[str, Any]) -> str:
    """'12,345 tokens, $0.0123, 3 model turns' (crew/models.py `Usage.summary`)."""
    tokens = usage.get("inputTokens", 0) + usage.get("outputTokens", 0)
    parts = [f"{tokens:,} tokens"]
    if usage.get("costUsd") is not None:
        parts.append(f"${usage['costUsd']:,.4f}")
    turns = usage.get("turns", 0)
    parts.append(f"{turns:,} model turn{'s' if turns != 1 else ''}")
    return ", ".join(parts)


def open_question(task: dict[str, Any]) -> dict[str, Any] | None:
    """crew/models.py `Task.open_question`, on the JSON form."""
    contact = task.get("contact")
    if contact is None or contact.get("answeredAt") is not None:
        return None
    return None if task["status"] in TERMINAL_TASK_STATUSES else contact


def _since(task: dict[str, Any]) -> str | None:
    """crew/models.py `Task.since`, on the JSON form."""
    if task["status"] == "waiting":
        return task.get("waitingSince")
    if task["status"] in TERMINAL_TASK_STATUSES:
        return task.get("endedAt")
    return task.get("startedAt")


#: A remote task's note until Ray has placed its worker on a node.
NOT_PLACED = "waiting for a node"


def _note(task: dict[str, Any]) -> str:
    status = task["status"]
    if task.get("error"):
        return short(task["error"], 60)
    if task.get("result") and status == "completed":  # the agent's final answer
        return short(" ".join(task["result"].split()), 60)
    if status in TERMINAL_TASK_STATUSES and task.get("exitCode") is not None:
        return f"exit {task['exitCode']}"
    question = open_question(task)
    if question is not None:
        return short(f"? {question['prompt']}", 60)
    if status == "running" and task.get("pid") is None:  # Ray: no node has taken it yet
        return NOT_PLACED
    if task.get("dependsOn") and status == "queued":
        return "after " + ", ".join(task["dependsOn"])
    waiting_for = task.get("waitingFor")
    return short("waiting for " + ", ".join(waiting_for), 60) if waiting_for else ""


def status_lines(document: dict[str, Any], *, color: bool, width: int | None) -> list[str]:
    """`crew status` for people, from the document `crew status --json` prints."""
    run, tasks, leader = document["run"], document["tasks"], document["leader"]
    safe = terminal_safe
    pid = f" · leader pid {leader['pid']}" if leader.get("alive") and "pid" in leader else ""
    rerun = f" · rerun of {run['rerunOf']}" if run.get("rerunOf") else ""
    status = run["status"]
    title = f"Run {run['runId']}"
    lines = [
        f"{paint(title, BOLD, color)} · crew {safe(run['crew'])} · "
        f"{paint(status, STATUS_SGR.get(status), color)} · owner {safe(run['ownerSessionId'])} · "
        f"created {ago(run.get('createdAt'))}{rerun}{pid}"
    ]
    total = document.get("usage")
    remote = any(task.get("node") for task in tasks)  # a Ray run: where each worker runs
    header = ["TASK", "STATUS", "AGENT", "ATTEMPT", "SINCE", "PENDING"]
    header += ["WHERE"] if remote else []
    header += ["SPENT", "NOTE"] if total is not None else ["NOTE"]
    rows = []
    for task in tasks:
        boxes = document["pending"].get(task["id"], {})
        pending = ", ".join(f"{n} {box}" for box, n in boxes.items() if n) or "-"
        row = [
            (task["id"], None),
            (task["status"], STATUS_SGR.get(task["status"])),
            (safe(task["agent"]), None),
            (attempts(task["attempt"], task.get("failures", 0), task["maxAttempts"]), None),
            (ago(_since(task)), None),
            (pending, None),
        ]
        if remote:
            row.append((safe(placement(task.get("node"), task.get("pid"))), None))
        if total is not None:
            row.append((spent(task.get("usage")), None))
        row.append((safe(_note(task)), None))
        rows.append(row)
    lines += table(header, rows, color=color, width=width)
    if total is not None:
        lines.append(f"Spent in all: {safe(usage_summary(total))}")
    asking = [(task, open_question(task)) for task in tasks]
    asked = [(task, contact) for task, contact in asking if contact is not None]
    if asked:
        lines += ["", paint("Waiting for an answer:", BOLD, color)]
        for task, contact in asked:
            question = safe(question_line(contact))
            lines.append(f"  {task['id']} ({contact['id']}) {contact['type']}: {question}")
            answer = f'    answer with: crew respond {run["runId"]} {task["id"]} "…"'
            lines.append(paint(answer, DIM, color))
    if document["warnings"]:
        lines += ["", paint("Warnings:", BOLD, color)]
        lines += [f"  {paint('!', YELLOW, color)} {safe(w)}" for w in document["warnings"]]
    return lines


def runs_lines(runs: list[dict[str, Any]], *, color: bool, width: int | None) -> list[str]:
    """`crew runs` for people, from the document `crew runs --json` prints."""
    if not runs:
        return ["No runs yet. Start one with `crew run`."]
    safe = terminal_safe
    rows = []
    for run in runs:
        if "status" not in run:  # unreadable: its id and why
            problem = safe(run.get("problem") or "")
            rows.append([(run["runId"], None), ("?", None), ("unreadable", RED), (problem, None)])
            rows[-1] += [("", None), ("", None)]
            continue
        counts = ", ".join(f"{n} {status}" for status, n in run["tasks"].items())
        rows.append(
            [
                (run["runId"], None),
                (safe(run["crew"]), None),
                (run["status"], STATUS_SGR.get(run["status"])),
                (counts, None),
                (ago(run.get("createdAt")), None),
                (safe(run["ownerSessionId"]), None),
            ]
        )
    header = ["RUN", "CREW", "STATUS", "TASKS", "CREATED", "OWNER"]
    lines = table(header, rows, color=color, width=width)
    for run in runs:
        if "status" in run and run.get("problem"):
            lines.append(f"{paint('!', YELLOW, color)} {run['runId']}: {safe(run['problem'])}")
    return lines


def write(lines: list[str]) -> None:
    """Lines on stdout."""
    sys.stdout.write("".join(line + "\n" for line in lines))


def write_runs(runs: list[dict[str, Any]], *, color: bool, width: int | None) -> None:
    """Print `runs_lines` on stdout."""
    write(runs_lines(runs, color=color, width=width))


def write_status(document: dict[str, Any], *, color: bool, width: int | None) -> None:
    """Print `status_lines` on stdout."""
    write(status_lines(document, color=color, width=width))


#: Each decision action (crew/registry.py DecisionAction) as a past participle:
#: `preempted by msg_…`.
PAST = {
    "pick": "picked",
    "preempt": "preempted",
    "merge": "merged",
    "cancel": "cancelled",
    "defer": "deferred",
}


def timeline_lines(views: list[dict[str, Any]], *, color: bool) -> list[str]:
    """`crew mailbox` for people, from the document `crew mailbox --json` prints."""
    if not views:
        return ["No messages."]
    safe = terminal_safe
    lines: list[str] = []
    current: str | None = None
    for message in views:
        if message["taskId"] != current:
            if current is not None:
                lines.append("")  # a blank line between tasks, none above the first
            current = message["taskId"]
            lines.append(paint(current, BOLD, color))
        arrow = "→" if message["direction"] == "inbox" else "←"
        sender = f" from {message['from']}" if arrow == "→" and message["from"] != "leader" else ""
        body = safe(short(message["body"], 70))
        lines.append(
            f"  {arrow} {message['kind']:<8} {message['id']}  {message['priority']:<6} "
            f"{body!r}{sender}"
        )
        steps = [f"{e['status']} {clock_time(e.get('at'))}".rstrip() for e in message["history"]]
        line = " → ".join(steps)
        if message.get("reason"):
            line += f" ({safe(message['reason'])})"
        lines.append(paint(f"      {line}", RED if message["status"] == "rejected" else DIM, color))
        if message["decisions"]:
            decisions = " → ".join(decision_text(d) for d in message["decisions"])
            lines.append(paint(f"      {safe(decisions)}", DIM, color))
    return lines


def write_timeline(views: list[dict[str, Any]], *, color: bool, width: int | None) -> None:
    """Print `timeline_lines` on stdout (lines, no table: nothing to cut to a width)."""
    write(timeline_lines(views, color=color))


def decision_text(decision: dict[str, Any]) -> str:
    """A decision as a short phrase: `picked`, `preempted by msg_…`, `done: ok`."""
    action = str(decision.get("action", "?"))
    at = clock_time(decision.get("at") if isinstance(decision.get("at"), str) else None)
    past = PAST.get(action, action)  # a worker's own word
    if "by" in decision:
        text = f"{past} by {decision['by']}"
    elif action == "done":
        reason = decision.get("reason")
        text = f"done: {reason}" if reason else "done"
    elif action == "continue":
        text = str(decision.get("reason") or "left queued")
    else:
        text = past
        if decision.get("reason") and action != "pick":
            text += f" ({decision['reason']})"
    return f"{text} {at}".rstrip()


def clock_time(timestamp: str | None) -> str:
    """The time of day of a timestamp, to the millisecond: enough within one run."""
    return timestamp[11:23] if timestamp else ""
