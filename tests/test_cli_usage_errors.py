"""A command line the parser refuses is reported as every other error is: `crew: error: …` on
stderr, a hint naming the command's --help, exit 2, nothing on stdout (docs/exit-codes.md)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable

import pytest
from conftest import CliResult

Cli = Callable[..., CliResult]


@pytest.mark.parametrize(
    ("args", "err"),
    [
        (
            ("status", "--jsn"),
            "crew: error: No such option: --jsn (Possible options: --jq, --json).\n"
            "Try 'crew status --help' for help.\n",
        ),
        (
            ("nudge",),
            "crew: error: Missing argument 'RUN'.\nTry 'crew nudge --help' for help.\n",
        ),
        (
            ("runs", "--status", "soon"),
            "crew: error: Invalid value for '--status': 'soon' is not one of 'running', "
            "'needs_review', 'completed', 'failed', 'cancelled'.\n"
            "Try 'crew runs --help' for help.\n",
        ),
        (
            ("status", "latest", "extra"),
            "crew: error: Got unexpected extra argument(s) (extra).\n"
            "Try 'crew status --help' for help.\n",
        ),
        (
            ("wait", "latest", "--for"),
            "crew: error: Option '--for' requires an argument.\nTry 'crew wait --help' for help.\n",
        ),
        (
            ("bogus",),
            "crew: error: No such command 'bogus'. Did you mean 'logs'?\n"
            "Try 'crew --help' for help.\n",
        ),
    ],
)
def test_a_command_line_the_parser_refuses_is_a_crew_error(
    cli: Cli, args: tuple[str, ...], err: str
) -> None:
    result = cli(*args)

    assert (result.code, result.out, result.err) == (2, "", err)


@pytest.mark.parametrize(
    "args",
    [("runs", "--status", "z" * 100_000), ("status", "latest", "--color", "z" * 100_000),
     ("wait", "latest", "--for", "z" * 100_000), ("mailbox", "latest", "--box", "z" * 100_000),
     ("wait", "latest", "--timeout", "z" * 100_000), ("logs", "latest", "--tail", "z" * 100_000),
     ("logs", "latest", "--since", "z" * 100_000), ("mcp", "--http", "z" * 100_000)],
)  # fmt: skip
def test_a_huge_value_the_parser_refuses_is_shown_cut_short(
    cli: Cli, args: tuple[str, ...]
) -> None:
    result = cli(*args)

    assert (result.code, result.out) == (2, "")
    assert "'" + "z" * 64 + "…'" in result.err and len(result.err) < 1_000


def test_the_installed_command_reports_it_the_same_way() -> None:
    script = [sys.executable, "-m", "crew", "steer", "latest", "plan", "x", "--bogus"]
    done = subprocess.run(script, capture_output=True, text=True, check=False)

    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (
        "crew: error: No such option: --bogus.\nTry 'crew steer --help' for help.\n"
    )


def test_crew_alone_still_shows_the_help(cli: Cli) -> None:
    result = cli()

    assert result.code == 2
    assert "Usage: crew [OPTIONS] COMMAND [ARGS]..." in result.out + result.err
    assert "crew: error" not in result.err
