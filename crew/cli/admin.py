"""Setting up and looking after a crew home: init, doctor, schema."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from crew.cli.common import (
    HomeOption,
    JqOption,
    JsonOption,
    QuietOption,
    complete_run,
    home_from,
)


def init(
    directory: Annotated[
        Path | None,
        typer.Argument(
            help="Create DIR/.crew (default: the current folder, or $CREW_HOME).",
            metavar="DIR",
            show_default=False,
        ),
    ] = None,
    json: JsonOption = False,
    jq: JqOption = None,
    quiet: QuietOption = False,
) -> int:
    """Create a crew home with a commented crew.toml and a private state folder."""
    from crew.render import emit
    from crew.scaffold import init_home

    return emit(init_home(directory), json=json)


def doctor(
    run: Annotated[
        str | None,
        typer.Argument(
            help="Check only this run (default: every run).",
            metavar="RUN",
            show_default=False,
            autocompletion=complete_run,
        ),
    ] = None,
    repair: Annotated[
        bool, typer.Option("--repair", help="Fix what can be fixed; nothing is ever deleted.")
    ] = False,
    json: JsonOption = False,
    jq: JqOption = None,
    quiet: QuietOption = False,
    home: HomeOption = None,
) -> int:
    """Find corrupt lines, torn tails, damaged snapshots and stale leaders (exit 1 if any)."""
    from crew.doctor import doctor as examine
    from crew.render import emit

    return emit(examine(home_from(home), run, repair=repair), json=json)


def schema(
    name: Annotated[
        str | None,
        typer.Argument(
            help="manifest, tasks, task, event, message, contact, checkpoint, leader or config "
            "(default: all of them).",
            metavar="NAME",
            show_default=False,
        ),
    ] = None,
    json: Annotated[
        bool, typer.Option("--json", help="Accepted for uniformity: a schema is always JSON.")
    ] = False,
    jq: JqOption = None,
) -> int:
    """Print the JSON Schema of a file format, generated from the models."""
    from crew.render import emit
    from crew.schemas import schema_doc

    return emit(schema_doc(name), json=json)
