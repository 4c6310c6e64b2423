"""A live view of a run in the terminal, redrawn when its files change (`crew run`, `crew watch`).

With `interactive`, Enter answers the oldest open question right there: the view pauses, asks for
the answer, sends it with the ordinary respond, and goes on.
"""

from __future__ import annotations

import contextlib
import os
import select
import sys
import termios
import tty
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from crew import clock
from crew.dashboard_prompt import Ended, Rows, erase_rows
from crew.errors import CrewError, ExitCode
from crew.models import Event, Task
from crew.protocol import Ack, Contact, DecisionRecord, Report, parse_line, strip_ansi
from crew.registry import ContactType, TaskStatus
from crew.render import attempts, markup_safe, question_line
from crew.store import eventlog
from crew.store.runstore import RunStore
from crew.store.state import RunState
from crew.store.watch import Watcher, watch_folders
from crew.text import placement, tally, terminal_safe
from crew.textviews import NOT_PLACED
from crew.views import leader_warnings, pending_counts, pending_messages

if TYPE_CHECKING:
    from rich.console import Console, ConsoleOptions, RenderableType, RenderResult

    from crew.leader import LeadOptions
    from crew.session import Actor

TAIL_BYTES = 4096
EVENTS_SHOWN = 6
#: Where no file-event descriptor exists, how long to wait before looking at the files again.
FALLBACK_WAIT = 1.0


@dataclass
class View:
    """What the dashboard shows, read from the run's files."""

    state: RunState
    pending: dict[str, dict[str, int]]
    last_lines: dict[str, str]
    events: list[Event]
    warnings: list[str]


def last_line(path: os.PathLike[str] | str) -> str:
    """What a worker said last: the last line of its log worth showing, read from the end.

    Escape sequences are removed (any other control character is shown as text); `@supervisor`
    reports read `progress: …`; acks and decisions (bookkeeping, not news) are passed over.
    """
    try:
        with open(path, "rb") as handle:
            size = handle.seek(0, os.SEEK_END)
            handle.seek(max(0, size - TAIL_BYTES))
            tail = handle.read()
    except FileNotFoundError:
        return ""
    for raw in reversed(tail.splitlines()):
        text = strip_ansi(raw.decode("utf-8", errors="replace")).strip()
        said = parse_line(text)
        if isinstance(said, Ack | DecisionRecord):
            continue
        if isinstance(said, Report | Contact):
            said_text = said.text if isinstance(said, Report) else said.prompt
            return terminal_safe(f"{said.type}: {said_text}")
        if text:
            return terminal_safe(text)
    return ""


class Dashboard:
    def __init__(
        self,
        store: RunStore,
        *,
        session: str | Actor,
        interactive: bool,
        watching: bool = False,
        plain: bool = False,
    ) -> None:
        self.store = store
        self.watching = watching
        #: Frames as plain text, one after another (no terminal: no keys, no redrawing).
        self.plain = plain
        self.session = session
        self.interactive = interactive and sys.stdin.isatty()
        self._events = eventlog.Follower(store.paths.events)
        self._recent: list[Event] = []
        self.notice = ""

    # ------------------------------------------------------------------ reading

    def view(self) -> View:
        recovery = self.store.load()
        state = recovery.state
        tasks = state.task_list()
        messages = pending_messages(self.store)
        self._recent = (self._recent + self._events.poll().records)[-EVENTS_SHOWN:]
        lines = {t.id: last_line(self.store.paths.log(t.id)) for t in tasks if t.attempt}
        warnings = recovery.warnings() + leader_warnings(self.store, state)
        return View(state, pending_counts(tasks, messages), lines, self._recent, warnings)

    # ------------------------------------------------------------------ drawing

    def render(self, view: View) -> RenderableType:
        from rich.console import Group
        from rich.table import Table
        from rich.text import Text

        from crew.render import STATUS_STYLE

        run = view.state.run
        tasks = view.state.task_list()
        header = Text.assemble(
            ("Run ", "bold"),
            (run.run_id, "bold"),
            f" · crew {terminal_safe(run.crew)} · ",
            (str(run.status), STATUS_STYLE.get(run.status, "")),
            f" · {tally(t.status for t in tasks)}",
        )
        remote = any(task.node for task in tasks)  # a Ray run: where each worker runs
        table = Table(box=None, pad_edge=False, header_style="bold", expand=False)
        columns = ("TASK", "STATUS", "TRY", "SINCE", "PENDING", *(("WHERE",) * remote), "NOW")
        for column in columns:
            table.add_column(column, no_wrap=column != "NOW", overflow="ellipsis")
        for task in tasks:
            pending = sum(view.pending.get(task.id, {}).values())
            where = [Text(terminal_safe(placement(task.node, task.pid)))] if remote else []
            table.add_row(
                Text(task.id),
                Text(str(task.status), STATUS_STYLE.get(task.status, "")),
                attempts(task),
                _since(task),
                str(pending) if pending else "",
                *where,
                Text(terminal_safe(_now(task, view.last_lines.get(task.id, "")))),  # no markup
            )
        parts: list[RenderableType] = [header, table]
        if view.events:
            log = Text("\n".join(_event_line(e) for e in view.events), style="dim")
            parts += [Text(""), log]
        for warning in view.warnings:
            parts.append(Text(f"! {terminal_safe(warning)}", style="yellow"))
        hints = [terminal_safe(hint) for hint in self._help(tasks)]  # a notice may quote an error
        if hints:
            parts.append(Hints(hints, style="bold cyan" if self.notice else "dim"))
        return Group(*parts)

    def _help(self, tasks: list[Task]) -> list[str]:
        """The line under the table, in pieces that are never broken across two lines."""
        if self.notice:
            return [self.notice]
        if self.plain:
            return []
        waiting = [t for t in tasks if t.open_question is not None]
        leave = "q leave" if self.watching else "Ctrl-C stop"
        if self.interactive and waiting:
            return [f"⏎ answer {waiting[0].id}'s question ({len(waiting)} waiting)", leave]
        return [leave]

    # ------------------------------------------------------------------ the loop

    def run(
        self,
        *,
        done: Callable[[View], bool],
        wake_fd: int | None = None,
        quit_key: bool = False,
        console: Console | None = None,
    ) -> View | None:
        """Show the run until `done(view)` says to stop, redrawing when its files change; the
        last view (None when the person left with q).

        `wake_fd` becoming readable also wakes it (the leader thread finishing); with
        `quit_key`, pressing q leaves.
        """
        from rich.live import Live

        from crew.output import console as stdout_console
        from crew.waiting import LeaderWatch

        console = console or stdout_console()
        watcher = self._watcher()
        leader = LeaderWatch(self.store) if self.watching else None  # `crew run` leads it itself
        view = self.view()
        try:
            with self._keys() as keys:
                while True:
                    with Live(self.render(view), console=console, auto_refresh=False) as live:
                        while not done(view):
                            # Its leader dying changes no file: the view says so at once.
                            dies = leader.wakeups(view.state.run) if leader else ([], None)
                            key = self._wait(watcher, keys, wake_fd, dies)
                            if key == "q" and quit_key:
                                return None
                            if key in {"\r", "\n"} and self.interactive:
                                live.transient = True  # wiped as it stops: see below
                                break
                            view = self.view()
                            live.update(self.render(view), refresh=True)
                        else:
                            return view
                    # The question is asked where the frame was, and wiped too once answered;
                    # a new Live (one that knows of no earlier frame to move up over) draws
                    # the next frame there: nothing stays above it, nothing above is drawn over.
                    with self._cooked(keys):
                        self.notice, rows = self._answer(console, keys, wake_fd)
                    console.control(erase_rows(rows))
                    view = self.view()
        finally:
            if leader is not None:
                leader.close()
            watcher.close()

    def frames(self, *, done: Callable[[View], bool], console: Console) -> View:
        """Without a terminal: print the view as plain text each time it changes (a blank line
        between two frames) until `done(view)`; the last view. Refused once the run has no
        leader (after the frame that says so): nothing would change any more."""
        from crew.waiting import LeaderWatch

        watcher = self._watcher()
        leader = LeaderWatch(self.store)
        shown: str | None = None
        try:
            while True:
                view = self.view()
                with console.capture() as frame:
                    console.print(self.render(view))
                text = frame.get()
                if text != shown:
                    console.file.write(("\n" if shown is not None else "") + text)
                    console.file.flush()
                    shown = text
                if done(view):
                    return view
                leader.pause(watcher, view.state.run, None)
        finally:
            leader.close()
            watcher.close()

    def _watcher(self) -> Watcher:
        paths = self.store.paths
        return watch_folders([paths.root, paths.mailbox_dir, paths.logs_dir])

    def _wait(
        self,
        watcher: Watcher,
        keys: int | None,
        wake_fd: int | None,
        dies: tuple[list[int], float | None] = ([], None),
    ) -> str:
        """Sleep until a file changes, `wake_fd` is readable, a key is pressed (returned), or the
        run's leader dies (`dies`: its pidfd, and the seconds until its heartbeat goes stale)."""
        fds = [fd for fd in (watcher.fileno(), keys, wake_fd, *dies[0]) if fd is not None]
        if watcher.fileno() is None:  # no descriptor to wait on (not Linux): files, then keys
            watcher.wait(FALLBACK_WAIT if not fds else 0.0)
            if not fds:
                return ""
            ready, _, _ = select.select(fds, [], [], FALLBACK_WAIT)
        else:
            ready, _, _ = select.select(fds, [], [], dies[1])
        if watcher.fileno() in ready:
            drain = getattr(watcher, "drain", None)
            if drain is not None:
                drain()
        if keys is not None and keys in ready:
            return _read_key()
        return ""

    @contextlib.contextmanager
    def _keys(self) -> Iterator[int | None]:
        """Single keystrokes from the terminal (cbreak mode) while interactive."""
        if not self.interactive:
            yield None
            return
        fd = sys.stdin.fileno()
        saved = termios.tcgetattr(fd)
        tty.setcbreak(fd)
        try:
            yield fd
        finally:
            termios.tcsetattr(fd, termios.TCSADRAIN, saved)

    @contextlib.contextmanager
    def _cooked(self, fd: int | None) -> Iterator[None]:
        """Normal line editing while a question is answered."""
        if fd is None:
            yield
            return
        saved = termios.tcgetattr(fd)
        attrs = termios.tcgetattr(fd)
        attrs[3] |= termios.ICANON | termios.ECHO
        termios.tcsetattr(fd, termios.TCSADRAIN, attrs)
        try:
            yield
        finally:
            termios.tcsetattr(fd, termios.TCSADRAIN, saved)

    def _answer(self, console: Console, keys: int | None, wake_fd: int | None) -> tuple[str, int]:
        """Ask the person for the answer to the oldest open question and send it: what became
        of it, and how many rows of the terminal the exchange took. The answer is typed on
        `keys` (the terminal, in line mode); `wake_fd` becoming readable (the leader thread
        finished: the run ended, or Ctrl-C stopped it) ends the question unanswered."""
        shown = Rows(console, keys, wake_fd)
        try:
            return self._ask(shown), shown.rows
        except Ended:
            return "Not answered: the run is no longer led here.", shown.rows + 1

    def _ask(self, console: Rows) -> str:
        """The exchange itself: the question, the answer typed, the respond sent."""
        from crew import verbs

        state = self.store.state()
        waiting = sorted(
            (t for t in state.task_list() if t.open_question is not None),
            key=lambda t: t.waiting_since or "",
        )
        if not waiting:
            return "No question is open any more."
        task = waiting[0]
        contact = task.open_question
        assert contact is not None
        console.print(f"\n[bold]{task.id}[/] asks ({contact.type}): {markup_safe(contact.prompt)}")
        if contact.options:
            for number, option in enumerate(contact.options, 1):
                console.print(f"  {number}. {markup_safe(option)}")
            hint = "number or text" + (", or an answer of your own" if contact.other else "")
        elif contact.type is ContactType.NEED_CONFIRMATION:
            hint = "yes / no, or more words"
        else:
            hint = "your answer"
        text = console.input(f"Answer ({hint}; empty to skip): ").strip()
        if not text:
            return "Skipped: the question is still open."
        if (
            contact.options
            and text.isascii()
            and text.isdigit()
            and 1 <= int(text) <= len(contact.options)
        ):
            text = contact.options[int(text) - 1]
        try:
            sent = verbs.respond(
                self.store, task.id, text, session=self.session, contact_id=contact.id
            )
        except CrewError as error:
            return f"Not sent: {error.message}"
        return f"Answered {task.id} ({sent.message.id})."


class Hints:
    """Short pieces of help on one line, `a · b · c`, wrapped only between two pieces: a key and
    what it does (`Ctrl-C stop`) never end up on two lines."""

    def __init__(self, pieces: list[str], *, style: str) -> None:
        self.pieces = pieces
        self.style = style

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        from rich.cells import cell_len
        from rich.text import Text

        lines: list[str] = []
        for piece in self.pieces:
            joined = f"{lines[-1]} · {piece}" if lines else piece
            if lines and cell_len(joined) <= options.max_width:
                lines[-1] = joined
            else:
                lines.append(piece)
        for line in lines:
            yield Text(line, style=self.style, no_wrap=True, overflow="ellipsis")


def lead_with_view(store: RunStore, session: str | Actor, options: LeadOptions) -> ExitCode:
    """Lead in a background thread while the terminal shows the run and takes answers."""
    import threading

    from crew.leader import become_leader, stop_on_signals

    leader = become_leader(store, session=session, options=options)
    codes: list[ExitCode] = []
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
    return codes[0] if codes else ExitCode.FAILED


def _read_key() -> str:
    try:
        return os.read(sys.stdin.fileno(), 1).decode(errors="replace")
    except OSError:
        return ""


def _since(task: Task) -> str:
    """When the task entered its status, as a local time of day (it never needs a redraw)."""
    moment = task.since()
    if not moment:
        return ""
    with contextlib.suppress(ValueError):
        return clock.parse_timestamp(moment).astimezone().strftime("%H:%M:%S")
    return ""


def _now(task: Task, last: str) -> str:
    if task.open_question is not None:
        return f"? {question_line(task)}"
    if task.status.terminal and task.error:
        return task.error
    if task.status is TaskStatus.QUEUED and task.depends_on:
        return "after " + ", ".join(task.depends_on)
    if task.status is TaskStatus.RUNNING and task.pid is None:
        return NOT_PLACED
    return last


def _event_line(event: Event) -> str:
    return f"{event.at[11:19]} {terminal_safe(event.message or event.type)}"
