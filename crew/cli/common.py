"""What every command shares: common options, output helpers, and the one error boundary."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from crew.errors import CrewError, ExitCode

DEBUG_ENV = "CREW_DEBUG"

HomeOption = Annotated[
    Path | None,
    typer.Option(
        "--home",
        help="The crew home (.crew folder) to use; default: $CREW_HOME, else the nearest .crew.",
        metavar="PATH",
        show_default=False,
    ),
]
JsonOption = Annotated[
    bool, typer.Option("--json", help="Print JSON (one document, or JSON lines for streams).")
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
RunArgument = Annotated[
    str,
    typer.Argument(
        help="Run id, a unique prefix of one, or 'latest'.", metavar="RUN", show_default=False
    ),
]


def home_from(option: Path | None) -> Any:
    """The crew home named by --home, $CREW_HOME, or found by walking up from the cwd."""
    from crew.paths import find_home

    return find_home(explicit=option)


def duration(text: str | None, option: str) -> float | None:
    """A duration option (`30s`, `5m`, …) in seconds; a usage error names the option."""
    if text is None:
        return None
    from crew.clock import parse_duration
    from crew.errors import UsageError

    try:
        return parse_duration(text)
    except ValueError as exc:
        raise UsageError(f"{option}: {exc}.") from None


def print_json(data: Any, *, compact: bool = False) -> None:
    """One JSON document on stdout."""
    text = json.dumps(
        data,
        ensure_ascii=False,
        separators=(",", ":") if compact else None,
        indent=None if compact else 2,
    )
    sys.stdout.write(text + "\n")


def warn(message: str) -> None:
    """A warning on stderr (never on stdout, which may be piped into jq)."""
    sys.stderr.write(f"crew: warning: {message}\n")


def say(message: str) -> None:
    sys.stderr.write(f"crew: {message}\n")


def report_error(error: CrewError) -> int:
    """Print a CrewError as one sentence (plus its hint) on stderr; return its exit code."""
    sys.stderr.write(f"crew: error: {error.message}\n")
    if error.hint:
        sys.stderr.write(f"{error.hint}\n")
    return int(error.exit_code)


def run_app(app: typer.Typer, argv: list[str] | None = None) -> int:
    """Run the typer app; map CrewError to its exit code, hide tracebacks unless CREW_DEBUG=1."""
    debug = os.environ.get(DEBUG_ENV, "") not in {"", "0"}
    try:
        # Without standalone mode typer returns the exit code of a `typer.Exit` instead of exiting.
        result = app(args=argv, prog_name="crew", standalone_mode=False)
    except CrewError as error:
        if debug:
            raise
        return report_error(error)
    except (typer.Abort, KeyboardInterrupt):
        sys.stderr.write("crew: interrupted\n")
        return 130
    except BrokenPipeError:
        # The reader went away (`crew events | head`): not an error worth a traceback.
        _silence_stdout()
        return int(ExitCode.OK)
    except Exception as error:
        from typer._click.exceptions import ClickException

        if isinstance(error, ClickException):
            error.show()
            return int(error.exit_code)
        if debug:
            raise
        sys.stderr.write(
            f"crew: internal error: {type(error).__name__}: {error}\n"
            f"Set {DEBUG_ENV}=1 to see the traceback, and please report it.\n"
        )
        return int(ExitCode.FAILED)
    return result if isinstance(result, int) else int(ExitCode.OK)


def _silence_stdout() -> None:
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except OSError:
        pass
