"""Setting up and looking after a crew home: init, validate, doctor, schema, prune, rm."""

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
    json_or_jq,
)


def init(
    directory: Annotated[
        Path | None,
        typer.Argument(
            help="Create DIR/.crew (default: the current folder, or $CREW_HOME).",
            metavar="DIR",
            show_default=False,
            readable=False,  # crew says why it cannot read it (the fast path alike)
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


def validate(
    crew_toml: Annotated[
        Path | None,
        typer.Argument(
            help="The crew definition to check (default: crew.toml of the crew home).",
            metavar="CREW_TOML",
            show_default=False,
            readable=False,  # crew says why it cannot read it (the fast path alike)
        ),
    ] = None,
    json: Annotated[
        bool,
        typer.Option(
            "--json",
            help='Print {"file", "valid", "agents", "tasks", "problems": [{"file", "key", '
            '"message", "hint", "line"?, "column"?}, …]} on stdout.',
            callback=json_or_jq,
        ),
    ] = False,
    jq: JqOption = None,
    home: HomeOption = None,
) -> int:
    """Check a crew.toml without starting a run: every problem at once, each with its key and a
    fix (exit 2 if any; nothing is written)."""
    from crew.render import emit
    from crew.validation import validate as check

    path = crew_toml if crew_toml is not None else home_from(home).config_file
    return emit(check(path), json=json)


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
            help="manifest, tasks, task, event, message, change, contact, checkpoint, leader or "
            "config (default: all of them).",
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


def prune(
    keep: Annotated[
        int | None,
        typer.Option(
            "--keep",
            min=0,
            help="Keep the N newest runs (whatever their status); remove older ended runs.",
            metavar="N",
            show_default=False,
        ),
    ] = None,
    older_than: Annotated[
        str | None,
        typer.Option(
            "--older-than",
            help="Remove ended runs that ended longer ago than this (e.g. 7d, 12h).",
            metavar="DURATION",
            show_default=False,
        ),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Only list what would be removed.")
    ] = False,
    json: JsonOption = False,
    jq: JqOption = None,
    home: HomeOption = None,
) -> int:
    """Remove runs that ended long ago or beyond the newest N (never a live one).

    With both --keep and --older-than, a run is removed only if both allow it. A run whose leader
    is alive, or that has not ended, is always kept (and listed as kept)."""
    from crew.clock import option_duration
    from crew.housekeeping import prune_runs
    from crew.render import emit

    age = option_duration(older_than, "--older-than")
    result = prune_runs(home_from(home), keep=keep, older_than=age, dry_run=dry_run)
    return emit(result, json=json)


def rm(
    runs: Annotated[
        list[str],
        typer.Argument(
            help="Run ids, unique prefixes of them, or 'latest'.",
            metavar="RUN",
            show_default=False,
        ),
    ],
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Also remove a run that has not ended (its leader is gone); never one whose "
            "leader is alive.",
        ),
    ] = False,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Only list what would be removed (or refused).")
    ] = False,
    json: JsonOption = False,
    jq: JqOption = None,
    home: HomeOption = None,
) -> int:
    """Remove runs and all their files: every run named, or none.

    A run whose leader is alive is never removed; one that has not ended only with --force."""
    from crew.housekeeping import remove_runs
    from crew.render import emit

    return emit(remove_runs(home_from(home), runs, force=force, dry_run=dry_run), json=json)
