"""What every command shares: common options, argument helpers, and the one error boundary."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Protocol, cast

import typer

from crew import env
from crew.errors import CrewError, ExitCode
from crew.output import Color
from crew.text import clip

if TYPE_CHECKING:
    from crew.paths import Home
    from crew.session import Actor
    from crew.store.runstore import RunStore

HomeOption = Annotated[
    Path | None,
    typer.Option(
        "--home",
        help="The crew home (.crew folder) to use; default: $CREW_HOME, else the nearest .crew.",
        metavar="PATH",
        show_default=False,
        readable=False,  # crew says why it cannot read it (the fast path alike)
    ),
]


def json_or_jq(ctx: typer.Context, value: bool) -> bool:
    """--jq implies --json. click handles the options typed on the command line first (in the
    order typed), then the others: when --json is not typed, a typed --jq has been seen."""
    return value or ctx.params.get("jq") is not None


def _jq(value: str | None) -> str | None:
    """Compile the expression before the command does anything: a bad one is a usage error."""
    if value is not None:
        from crew.output import use_jq

        use_jq(value)
    return value


def _quiet(value: bool) -> bool:
    if value:
        from crew.output import SETTINGS

        SETTINGS.quiet = True
    return value


def _color(value: Color) -> Color:
    # `auto` is where every command line starts (crew.output.reset): a command's own default
    # must not undo a `crew --color never …` typed before it.
    if value is not Color.AUTO:
        from crew.output import SETTINGS

        SETTINGS.color = value
    return value


# The output options (crew/output.py) take effect through their callbacks, before the command
# runs: a command gains one by declaring it, and may ignore its value.
JsonOption = Annotated[
    bool,
    typer.Option(
        "--json",
        help="Print JSON (one document, or JSON lines for streams).",
        callback=json_or_jq,
    ),
]
JqOption = Annotated[
    str | None,
    typer.Option(
        "--jq",
        help="Filter the JSON with jq (implies --json); a string prints as text.",
        metavar="EXPR",
        callback=_jq,
        show_default=False,
    ),
]
QuietOption = Annotated[
    bool,
    typer.Option(
        "--quiet",
        "-q",
        help="Print only ids, or nothing; errors and warnings still go to stderr.",
        callback=_quiet,
    ),
]
ColorOption = Annotated[
    Color,
    typer.Option(
        "--color",
        help="Colours: auto (on a terminal, unless NO_COLOR is set), always, never.",
        metavar="WHEN",
        show_default=False,
        callback=_color,
        case_sensitive=False,
    ),
]
SessionOption = Annotated[
    str | None,
    typer.Option(
        "--session",
        help="Act as this session; default: $CREW_SESSION_ID, else <user>@<host>.",
        metavar="SESSION",
        show_default=False,
    ),
]
ForceOption = Annotated[
    bool, typer.Option("--force", help="Act on a run owned by another session (recorded).")
]


def complete_run(ctx: typer.Context, incomplete: str) -> list[str]:
    """Shell completion of a run: the home's run ids, newest first, and `latest`."""
    try:
        found = ["latest", *reversed(home_from(ctx.params.get("home")).run_ids())]
    except (CrewError, OSError):
        return []
    return [run_id for run_id in found if run_id.startswith(incomplete)]


def complete_task(ctx: typer.Context, incomplete: str) -> list[str]:
    """Shell completion of a task: the task ids of the run typed before it (else the latest)."""
    run = ctx.params.get("run")
    try:
        tasks = open_run(run if isinstance(run, str) else "latest", ctx.params.get("home"))
        found = list(tasks.state().tasks)
    except (CrewError, OSError, ValueError):
        return []
    return [task_id for task_id in found if task_id.startswith(incomplete)]


RunArgument = Annotated[
    str,
    typer.Argument(
        help="Run id, a unique prefix of one, or 'latest'.",
        metavar="RUN",
        show_default=False,
        autocompletion=complete_run,
    ),
]
TaskArgument = Annotated[
    str,
    typer.Argument(
        help="The task id.", metavar="TASK", show_default=False, autocompletion=complete_task
    ),
]
TaskOption = Annotated[
    str | None,
    typer.Option("--task", help="Only this task.", metavar="TASK", autocompletion=complete_task),
]


def home_from(option: Path | None) -> Home:
    """The crew home named by --home, $CREW_HOME, or found by walking up from the cwd."""
    from crew.paths import find_home

    return find_home(explicit=option)


def open_run(run: str, home: Path | None) -> RunStore:
    """The run named on the command line (`latest`, an id or a unique prefix) in the home."""
    from crew.store.runstore import RunStore

    return RunStore.open(home_from(home), run)


def actor_for(session: str | None, home: Home) -> Actor:
    """Who runs this command, acting on a run of `home`: a worker acts as its task whatever
    --session says (crew.session)."""
    from crew.session import current_actor

    return current_actor(session, home=home.root)


def run_app(app: typer.Typer, argv: list[str] | None = None) -> int:
    """Run the typer app; map CrewError to its exit code, hide tracebacks unless CREW_DEBUG=1."""
    from crew.output import reset

    debug = env.DEBUG.enabled()
    reset()  # each command line starts from the default output options
    try:
        # Without standalone mode typer returns the exit code of a `typer.Exit` instead of exiting.
        result = app(args=argv, prog_name="crew", standalone_mode=False)
    except CrewError as error:
        if debug:
            raise
        from crew.render import error as report

        return report(error)
    except (typer.Abort, KeyboardInterrupt):
        sys.stderr.write("crew: interrupted\n")
        return int(ExitCode.INTERRUPTED)
    except BrokenPipeError:
        # The reader went away (`crew events | head`): not an error worth a traceback.
        from crew.render import silence_stdout

        silence_stdout()
        return int(ExitCode.OK)
    except OSError as error:  # a read-only folder, a full disk: the user's to fix, not a bug
        if debug:
            raise
        from crew.errors import from_os_error
        from crew.render import error as report

        return report(from_os_error(error))
    except Exception as error:
        usage = _as_usage_error(error)
        if usage is not None:
            return _report_usage(usage, _command_path(app, argv))
        if debug:
            raise
        from crew.render import internal_error

        return internal_error(error)
    return result if isinstance(result, int) else int(ExitCode.OK)


class _ParserError(Protocol):
    exit_code: int

    def show(self) -> None: ...

    def format_message(self) -> str: ...


def _as_usage_error(error: Exception) -> _ParserError | None:
    """A command-line error from the parser (an unknown option, a missing argument), if it is one.

    typer vendors click's exceptions without exporting their base class; what marks them is the
    interface click documents for them: an integer `exit_code`, `show()` and `format_message()`.
    """
    if (
        isinstance(getattr(error, "exit_code", None), int)
        and callable(getattr(error, "show", None))
        and callable(getattr(error, "format_message", None))
    ):
        return cast(_ParserError, error)
    return None


def _command_path(app: typer.Typer, argv: list[str] | None) -> str:
    """`crew` and the command the command line names, for a hint when the parser gives none."""
    names = {info.name for info in app.registered_commands}
    words = [w for w in (sys.argv[1:] if argv is None else argv) if not w.startswith("-")]
    return f"crew {words[0]}" if words and words[0] in names else "crew"


#: A value the parser's message quotes that is too long to show whole (ids are cut the same).
_LONG_QUOTED = re.compile(r"'([^']{73,})'")


def _report_usage(usage: _ParserError, fallback_path: str) -> int:
    """The parser's error in crew's own form (docs/exit-codes.md): `crew: error: …` and a hint
    naming the command's --help; `crew` alone still shows the help (typer's marker class)."""
    if type(usage).__name__ == "NoArgsIsHelpError":
        usage.show()
        return usage.exit_code
    from crew.errors import CrewError
    from crew.render import error

    # typer words a value its type refused as pydantic does: "Value error, 'x' is not one of …".
    message = usage.format_message().replace("Value error, ", "").strip()
    message = _LONG_QUOTED.sub(lambda value: f"'{clip(value[1], 65)}'", message)  # 100 KB typed
    if not message.endswith((".", "?", "!")):
        message += "."
    context = getattr(usage, "ctx", None)
    path = getattr(context, "command_path", None)
    if not isinstance(path, str) or not path:
        path = fallback_path
    failure = CrewError(message, hint=f"Try '{path} --help' for help.")
    error(failure)
    return usage.exit_code
