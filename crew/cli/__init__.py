"""The `crew` command: a thin typer layer over the library, one module per command group.

Only the command being run is imported and registered: `crew steer` never pays for building the
other seventeen commands (their modules, signatures and option types). `--help` builds them all.
"""

from __future__ import annotations

import functools
import gc
import importlib
import sys
from collections.abc import Callable
from typing import Any

import typer

from crew import __version__
from crew.cli.common import ColorOption, QuietOption, run_app
from crew.fast import resume_collector
from crew.output import Color

HELP = "Orchestrate crews of worker processes; every bit of state is a plain file."

#: Every command: its name, and the module and function that implement it, in help order.
COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("crew.cli.lead", "run"),
    "resume": ("crew.cli.lead", "resume"),
    "rerun": ("crew.cli.lead", "rerun"),
    "wait": ("crew.cli.lead", "wait"),
    "logs": ("crew.cli.lead", "logs"),
    "runs": ("crew.cli.inspect", "runs"),
    "ps": ("crew.cli.inspect", "runs"),
    "status": ("crew.cli.inspect", "status"),
    "mailbox": ("crew.cli.inspect", "mailbox"),
    "events": ("crew.cli.inspect", "events"),
    "watch": ("crew.cli.inspect", "watch"),
    "respond": ("crew.cli.send", "respond"),
    "steer": ("crew.cli.send", "steer"),
    "follow-up": ("crew.cli.send", "follow_up"),
    "nudge": ("crew.cli.send", "nudge"),
    "cancel": ("crew.cli.send", "cancel"),
    "handoff": ("crew.cli.send", "handoff"),
    "add": ("crew.cli.send", "add"),
    "mcp": ("crew.cli.mcp", "mcp"),
    "init": ("crew.cli.admin", "init"),
    "validate": ("crew.cli.admin", "validate"),
    "doctor": ("crew.cli.admin", "doctor"),
    "schema": ("crew.cli.admin", "schema"),
    "prune": ("crew.cli.admin", "prune"),
    "rm": ("crew.cli.admin", "rm"),
}
#: Commands that are another's under a second name: the same function, options and output.
ALIASES = {"ps": "runs"}


def _version(value: bool) -> None:
    if value:
        sys.stdout.write(f"crew {__version__}\n")
        raise typer.Exit()


def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
    color: ColorOption = Color.AUTO,
    quiet: QuietOption = False,
) -> None:
    """Orchestrate crews of worker processes; every bit of state is a plain file.

    --color and --quiet may come before the command too (`crew --color never status`)."""
    resume_collector()  # the command begins: its start-up is over (crew/fast `main`)


def _reader_may_go(command: Callable[..., Any]) -> Callable[..., Any]:
    """The command, done when the reader of its output has gone (`crew events | head`): what
    is left to print goes nowhere, and it exits 0 (click, which would catch the broken pipe
    first, exits 1). A command that prints a result keeps the result's exit code
    (crew/render.py `emit`)."""

    @functools.wraps(command)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except BrokenPipeError:
            from crew.render import silence_stdout

            silence_stdout()
            return 0

    return run


def build_app(only: str | None = None) -> typer.Typer:
    """The typer app with every command, or with just `only` (the one about to run)."""
    app = typer.Typer(
        name="crew",
        help=HELP,
        no_args_is_help=True,
        add_completion=True,
        rich_markup_mode=None,
        pretty_exceptions_enable=False,
        context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
    )
    app.callback()(_root)
    for name, (module, function) in COMMANDS.items():
        if only is None or name == only:
            command = _reader_may_go(getattr(importlib.import_module(module), function))
            alias_of = ALIASES.get(name)
            if alias_of is None:
                app.command(name)(command)
            else:
                summary = (command.__doc__ or "").strip().splitlines()[0].rstrip(".")
                app.command(
                    name,
                    help=f"{summary} (an alias of `crew {alias_of}`).",
                    short_help=f"The same as `crew {alias_of}`.",
                )(command)
    return app


#: The options before the command that take a value (`crew --color never status`).
_ROOT_VALUES = {"--color"}


def _command_of(argv: list[str]) -> str | None:
    """The command named on the command line (the first word that is neither an option nor
    the value of one)."""
    words = iter(argv)
    for word in words:
        if word in _ROOT_VALUES:
            next(words, None)
        elif not word.startswith("-"):
            return word if word in COMMANDS else None
    return None


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point."""
    args = sys.argv[1:] if argv is None else argv
    code = run_app(build_app(_command_of(args)), args)
    # Nothing is left to collect: spare the interpreter's last walk over every object (about a
    # sixth of a short command's time).
    gc.freeze()
    sys.exit(code)


def __getattr__(name: str) -> Any:
    if name == "app":  # the whole app, for tools that want every command (docs, completion)
        return build_app()
    raise AttributeError(name)
