"""The `crew` command: a thin typer layer over the library, one module per command group."""

from __future__ import annotations

import sys

import typer

from crew import __version__
from crew.cli import admin, inspect, lead, send
from crew.cli.common import run_app

app = typer.Typer(
    name="crew",
    help="Orchestrate crews of worker processes; every bit of state is a plain file.",
    no_args_is_help=True,
    add_completion=True,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)


def _version(value: bool) -> None:
    if value:
        sys.stdout.write(f"crew {__version__}\n")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """Orchestrate crews of worker processes; every bit of state is a plain file."""


lead.register(app)
inspect.register(app)
send.register(app)
admin.register(app)


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point."""
    sys.exit(run_app(app, argv))
