"""Setting up and looking after a crew home: init, doctor, schema."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from crew.cli.common import HomeOption, JsonOption, home_from, print_json, say


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
) -> None:
    """Create a crew home with a commented crew.toml and a private state folder."""
    from crew.scaffold import init_home

    result = init_home(directory)
    if json:
        print_json({"home": str(result.home.root), "created": result.created})
    elif result.created:
        sys.stdout.write(
            f"Created {result.home.root}\n"
            f"  {result.home.config_file.name}   the crew definition: edit it, then `crew run`\n"
            f"  state/      runs, events and mailboxes (private to you)\n"
        )
    else:
        say(f"{result.home.root} already exists; left it untouched.")


def doctor(
    run: Annotated[
        str | None,
        typer.Argument(
            help="Check only this run (default: every run).", metavar="RUN", show_default=False
        ),
    ] = None,
    repair: Annotated[
        bool, typer.Option("--repair", help="Fix what can be fixed; nothing is ever deleted.")
    ] = False,
    json: JsonOption = False,
    home: HomeOption = None,
) -> None:
    """Find corrupt lines, torn tails, damaged snapshots and stale leaders (exit 1 if any)."""
    from crew.doctor import doctor as examine

    report = examine(home_from(home), run, repair=repair)
    if json:
        print_json(report.to_json())
    else:
        from crew.render import doctor_report

        doctor_report(report)
    if not report.clean:
        raise typer.Exit(1)


def schema(
    name: Annotated[
        str | None,
        typer.Argument(
            help="manifest, tasks, task, event, message, contact, leader or config "
            "(default: all of them).",
            metavar="NAME",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Print the JSON Schema of a file format, generated from the models."""
    from crew.schemas import all_schemas
    from crew.schemas import schema as one

    print_json(one(name) if name is not None else all_schemas())
