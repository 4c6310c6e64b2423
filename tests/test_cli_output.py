"""The output options every command shares (crew/output.py): --jq filters the JSON with jq
itself, --quiet leaves only what a script needs, --color decides about escape sequences."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import SESSION, CliResult, snapshot_files
from leaders import eventually, store_of, write_crew
from test_terminal import Terminal
from test_verbs import ask, start

from crew import verbs
from crew.paths import Home
from crew.registry import Box, TaskStatus
from crew.store.runstore import RunStore

Cli = Callable[..., CliResult]
MakeRun = Callable[..., RunStore]


def crew(*args: str, cwd: Path | None = None, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "crew", *args],
        cwd=cwd, env={**os.environ, **env}, capture_output=True, text=True, check=False,
    )  # fmt: skip


# ----------------------------------------------------------------------------- --jq


def test_jq_prints_strings_as_text_and_other_values_as_json(cli: Cli, make_run: MakeRun) -> None:
    store = make_run()

    assert cli("status", store.run_id, "--jq", ".run.status") == CliResult(0, "running\n", "")
    assert cli("status", "--jq", ".tasks[].id") == CliResult(0, "plan\nbuild\n", "")
    assert cli("status", "--jq", ".tasks | length") == CliResult(0, "2\n", "")
    shown = cli("status", "--jq", "{run: .run.runId, first: .tasks[0].id}", "--json")
    assert shown == CliResult(0, f'{{\n  "run": "{store.run_id}",\n  "first": "plan"\n}}\n', "")


def test_jq_filters_the_same_document_json_prints(cli: Cli, make_run: MakeRun) -> None:
    make_run()
    document = json.loads(cli("runs", "--json").out)

    assert cli("runs", "--jq", ".").out == json.dumps(document, indent=2, ensure_ascii=False) + "\n"


def test_jq_applies_to_each_line_of_a_stream(cli: Cli, make_run: MakeRun) -> None:
    store = make_run()
    start(store)
    lines = [json.loads(line) for line in cli("events", store.run_id, "--json").out.splitlines()]

    types = cli("events", store.run_id, "--jq", ".type")
    seqs = cli("events", store.run_id, "--jq", "{seq}")

    assert types == CliResult(0, "".join(f"{e['type']}\n" for e in lines), "")
    assert seqs.out == "".join(f'{{"seq":{e["seq"]}}}\n' for e in lines)  # still JSON lines


def test_jq_on_a_sender_filters_its_result(cli: Cli, make_run: MakeRun) -> None:
    store = make_run()
    start(store)

    sent = cli("steer", store.run_id, "plan", "use the cache", "--jq", ".status")

    assert sent == CliResult(0, "pending\n", "")
    (message,) = store.fold(Box.STEERING).values()
    assert message.body == "use the cache"


def test_a_bad_expression_is_a_usage_error_before_anything_is_done(
    cli: Cli, make_run: MakeRun
) -> None:
    store = make_run()
    start(store)
    before = snapshot_files(store.paths.home.root)

    refused = cli("steer", store.run_id, "plan", "x", "--jq", ".a |||")

    assert (refused.code, refused.out) == (2, "")
    assert refused.err == (
        "crew: error: --jq: syntax error, unexpected '|' at <top-level>, line 1, column 5.\n"
        "    .a |||\n"
        "        ^\n"
    )
    assert snapshot_files(store.paths.home.root) == before


def test_an_expression_that_fails_on_the_data_is_an_error_after_the_fact(
    cli: Cli, make_run: MakeRun
) -> None:
    store = make_run()

    failed = cli("status", store.run_id, "--jq", ".run.status | .[]")

    assert failed == CliResult(
        1, "", 'crew: error: --jq: Cannot iterate over string ("running").\n'
    )


def test_jq_reaches_the_full_command_from_the_fast_path(make_run: MakeRun) -> None:
    store = make_run()

    shown = crew("status", store.run_id, "--jq", ".run.runId")

    assert (shown.returncode, shown.stdout, shown.stderr) == (0, f"{store.run_id}\n", "")


# ----------------------------------------------------------------------------- --quiet


def test_runs_quiet_prints_only_the_ids_newest_first(cli: Cli, make_run: MakeRun) -> None:
    older, newer = make_run(), make_run()

    assert cli("runs", "-q") == CliResult(0, f"{newer.run_id}\n{older.run_id}\n", "")
    assert json.loads(cli("runs", "-q", "--json").out)[0]["runId"] == newer.run_id


@pytest.mark.parametrize("fast", ["1", "0"])
def test_a_quiet_sender_prints_nothing_and_sends(make_run: MakeRun, fast: str) -> None:
    store = make_run()
    start(store)

    sent = crew("steer", store.run_id, "plan", "use the cache", "--quiet", CREW_FAST=fast)
    nudged = crew("nudge", store.run_id, "plan", "-q", CREW_FAST=fast)

    assert (sent.returncode, sent.stdout, sent.stderr) == (0, "", "")
    assert (nudged.returncode, nudged.stdout, nudged.stderr) == (0, "", "")
    steered, nudge = store.fold(Box.STEERING).values()
    assert (steered.body, nudge.kind) == ("use the cache", "nudge")


def test_quiet_keeps_errors_and_warnings(cli: Cli, make_run: MakeRun) -> None:
    store = make_run()

    refused = cli("steer", store.run_id, "build", "x", "-q")  # queued: not running yet
    answered = cli("respond", store.run_id, "plan", "x", "-q")

    assert refused.code == 4 and refused.err.startswith("crew: error: ")
    assert answered.code == 4 and answered.err.startswith("crew: error: ")


def test_quiet_wait_and_cancel_say_it_with_the_exit_code(cli: Cli, make_run: MakeRun) -> None:
    store = make_run()
    ask(store)

    assert cli("wait", store.run_id, "--for", "waiting", "-q") == CliResult(0, "", "")
    assert cli("cancel", store.run_id, "-q") == CliResult(0, "", "")
    assert cli("wait", store.run_id, "-q") == CliResult(1, "", "")  # cancelled


def test_run_detach_quiet_prints_the_run_id_and_run_quiet_nothing(
    tmp_path: Path, home: Home
) -> None:
    write_crew(tmp_path, [{"id": "t", "prompt": "say:hello ; exit:0"}])

    detached = crew("run", "crew.toml", "--detach", "-q", cwd=tmp_path)
    led = crew("run", "crew.toml", "--quiet", cwd=tmp_path)

    assert detached.returncode == 0 and detached.stderr == ""
    (run_id,) = detached.stdout.split()
    eventually(lambda: store_of(home, run_id).state().run.status.terminal, timeout=30)
    assert (led.returncode, led.stdout, led.stderr) == (0, "", "")
    assert crew("run", "crew.toml", cwd=tmp_path).stdout != ""  # what -q left out


def test_a_run_kept_beside_its_crew_toml_says_how_other_commands_reach_it(tmp_path: Path) -> None:
    """No home is found from here, so `crew run sub/crew.toml` keeps the run in `sub`: what it
    prints tells how to reach it, and the command it suggests works as typed."""
    (tmp_path / ".crew").rmdir()
    (tmp_path / "sub").mkdir()
    write_crew(tmp_path / "sub", [{"id": "t", "prompt": "exit:3"}])
    env = {k: v for k, v in os.environ.items() if k != "CREW_HOME"}

    def here(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "crew", *args],
            cwd=tmp_path, env=env, capture_output=True, text=True, check=False,
        )  # fmt: skip

    detached = here("run", "sub/crew.toml", "--detach")
    led = here("run", "sub/crew.toml", "--json")  # JSON says nothing of it: stdout is data

    run_id = detached.stdout.strip()
    assert detached.stderr == (
        f"crew: other commands reach it with --home sub: `crew status {run_id} --home sub`\n"
    )
    (suggested,) = re.findall(r"`crew (status .*)`", detached.stderr)
    assert here(*shlex.split(suggested)).returncode == 0
    eventually(
        lambda: store_of(Home(tmp_path / "sub"), run_id).state().run.status.terminal, timeout=30
    )
    assert json.loads(led.stdout.splitlines()[-1])["status"] == "failed"
    assert (
        f"`crew rerun {json.loads(led.stdout.splitlines()[-1])['runId']} --failed --home sub`"
        in (led.stderr)
    )
    assert here("status").stderr.endswith("add --home sub; or create a home with `crew init`.\n")


def test_a_failed_quiet_run_says_it_with_the_exit_code(tmp_path: Path) -> None:
    write_crew(tmp_path, [{"id": "t", "prompt": "exit:3"}])

    led = crew("run", "crew.toml", "-q", cwd=tmp_path)

    assert (led.returncode, led.stdout, led.stderr) == (1, "", "")


# ----------------------------------------------------------------------------- --color


def test_color_always_colours_a_pipe_and_never_colours_nothing(cli: Cli, make_run: MakeRun) -> None:
    store = make_run()
    start(store)

    piped = cli("status", store.run_id)
    always = cli("status", store.run_id, "--color", "always")
    never = cli("status", store.run_id, "--color", "never")

    assert "\x1b[" not in piped.out and "\x1b[" not in never.out
    assert "\x1b[36mrunning\x1b[0m" in always.out  # the status' own colour
    assert "running" in never.out


def test_color_always_wins_over_no_color(
    cli: Cli, make_run: MakeRun, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_run()
    monkeypatch.setenv("NO_COLOR", "1")

    assert "\x1b[" in cli("runs", "--color", "always").out


def test_an_unknown_color_is_a_usage_error(cli: Cli, make_run: MakeRun) -> None:
    make_run()

    refused = cli("status", "--color", "sometimes")

    assert (refused.code, refused.out) == (2, "")
    assert refused.err.startswith("crew: error: Invalid value for '--color': 'sometimes' is not ")


def test_logs_with_color_always_are_shown_as_on_a_terminal_even_piped(
    cli: Cli, make_run: MakeRun
) -> None:
    store = make_run()
    start(store)
    store.paths.log("plan").write_bytes(b"\x1b[32mgreen\x1b[0m and \x1b]0;title\x07\n")

    raw = cli("logs", store.run_id, "plan")
    always = cli("logs", store.run_id, "plan", "--color", "always")
    never = cli("logs", store.run_id, "plan", "--color", "never", "--raw")

    assert raw.out == "\x1b[32mgreen\x1b[0m and \x1b]0;title\x07\n"  # piped: the bytes
    assert always.out == "\x1b[32mgreen\x1b[0m and ␛]0;title␇\n\x1b[0m"
    assert never.out == raw.out  # --raw is --raw


NO_TMUX = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")


@NO_TMUX
@pytest.mark.parametrize(
    ("options", "env", "colored"),
    [
        ("", "", True),
        ("--color never", "", False),
        ("", "NO_COLOR=1", False),
        ("--color always", "NO_COLOR=1", True),
    ],
)
def test_color_on_a_real_terminal(
    make_run: MakeRun, tmp_path: Path, options: str, env: str, colored: bool
) -> None:
    store = make_run()
    start(store)
    verbs.steer(store, "plan", "x", session=SESSION)
    command = f"env {env} {shlex.quote(sys.executable)} -m crew status {store.run_id} {options}"
    term = Terminal(f"crew-color-{os.getpid()}-{tmp_path.name}", command, tmp_path)
    try:
        term.shows("EXIT=0")
        screen = term.screen(escapes=True)
    finally:
        term.close()
    assert ("\x1b[36m" in screen) is colored  # `running`, in cyan
    assert store.state().tasks["plan"].status is TaskStatus.RUNNING


def test_every_command_that_prints_json_takes_jq() -> None:
    import typer.main

    from crew.cli import COMMANDS, build_app

    group = typer.main.get_command(build_app())
    options = {
        name: {o for p in group.commands[name].params for o in p.opts}  # type: ignore[attr-defined]
        for name in COMMANDS
    }
    with_json = {name for name, opts in options.items() if "--json" in opts}

    assert with_json >= {"status", "validate", "rerun", "prune", "rm", "logs", "add"}
    assert {name for name in with_json if "--jq" not in options[name]} == set()


def test_color_and_quiet_may_come_before_the_command(make_run: MakeRun) -> None:
    store = make_run()
    start(store)
    env = {"CREW_HOME": str(store.paths.home.root)}
    assert crew("steer", store.run_id, "plan", "use sqlite", **env).returncode == 0
    coloured = crew("mailbox", store.run_id, "--color", "always", **env).stdout

    assert "\x1b[" in coloured  # piped: only --color always colours it
    assert crew("--color", "always", "mailbox", store.run_id, **env).stdout == coloured
    # A command's own default (auto) does not undo what came before it.
    assert crew("--color", "always", "mailbox", store.run_id, "--color", "auto", **env).stdout == (
        coloured
    )
    assert "\x1b[" not in crew("--color", "never", "mailbox", store.run_id, **env).stdout
    assert crew("--quiet", "runs", **env).stdout == f"{store.run_id}\n"
    assert crew("-q", "runs", **env).stdout == crew("runs", "-q", **env).stdout


# ----------------------------------------------------------------------------- not UTF-8


@pytest.mark.parametrize("fast", ["1", "0"])
def test_a_stdout_that_is_not_utf8_gets_what_it_cannot_encode_escaped(
    make_run: MakeRun, fast: str
) -> None:
    store = make_run()  # its status header has a `·`, which ASCII cannot encode
    ascii_only = {"PYTHONIOENCODING": "ascii", "CREW_FAST": fast}

    text = crew("status", store.run_id, **ascii_only)
    data = crew("status", store.run_id, "--json", **ascii_only)

    assert (text.returncode, data.returncode) == (0, 0), text.stderr + data.stderr
    assert f"Run {store.run_id} \\u00b7 crew" in text.stdout  # was an internal error, exit 1
    assert data.stdout.isascii()
    assert json.loads(data.stdout) == json.loads(crew("status", store.run_id, "--json").stdout)


def test_a_leader_whose_stdout_is_not_utf8_leads_a_worker_printing_any_text(
    tmp_path: Path, home: Home
) -> None:
    say = ["sh", "-c", "printf '@supervisor progress: done \\342\\234\\223\\n'"]  # a ✓, in UTF-8
    write_crew(tmp_path, [{"id": "t", "prompt": "x"}], command=say)

    led = crew("run", "crew.toml", cwd=tmp_path, PYTHONIOENCODING="ascii")

    assert led.returncode == 0, led.stderr  # the leader crashed at the worker's first line
    assert "t progress: done \\u2713" in led.stdout
    (run_id,) = home.run_ids()
    assert store_of(home, run_id).state().run.status.value == "completed"


def test_what_a_stream_cannot_encode_is_escaped_as_json_escapes_it() -> None:
    import codecs

    from crew import fast

    fast._escape_what_the_streams_cannot_encode()  # registers the handler, whatever the streams
    codecs.register_error(fast._ESCAPE, fast._json_escape)
    text = 'caf\u00e9 \u2713 \U0001f680 "x"'
    escaped = text.encode("ascii", errors=fast._ESCAPE).decode()
    assert escaped == 'caf\\u00e9 \\u2713 \\ud83d\\ude80 "x"'
    assert json.loads(f'"{escaped.replace(chr(34), chr(92) + chr(34))}"') == text


@pytest.mark.parametrize("fast", ["1", "0"])
def test_a_command_run_from_a_deleted_folder_says_so(tmp_path: Path, fast: str) -> None:
    gone = 'mkdir gone && cd gone && rmdir ../gone && exec "$@"'
    env = {k: v for k, v in os.environ.items() if k != "CREW_HOME"}
    done = subprocess.run(
        ["sh", "-c", gone, "sh", sys.executable, "-m", "crew", "status"],
        cwd=tmp_path, env={**env, "CREW_FAST": fast}, capture_output=True, text=True, check=False,
    )  # fmt: skip

    assert (done.returncode, done.stdout) == (
        5,
        "",
    )  # was "No such file …: a file of the crew home"
    assert done.stderr.startswith("crew: error: The current folder no longer exists")


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")
def test_an_output_that_cannot_be_written_is_said_in_a_sentence() -> None:
    full = 'exec "$@" >/dev/full'
    done = subprocess.run(
        ["sh", "-c", full, "sh", sys.executable, "-m", "crew", "--version"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip

    assert done.returncode == 1
    assert done.stderr == "crew: error: Cannot write the output: No space left on device.\n"


def test_a_run_started_from_a_deleted_folder_with_its_home_named_is_led(
    tmp_path: Path, home: Home
) -> None:
    write_crew(tmp_path, [{"id": "t", "prompt": "exit:0"}])
    gone = 'mkdir gone && cd gone && rmdir ../gone && exec "$@"'
    argv = [
        sys.executable,
        "-m",
        "crew",
        "run",
        str(tmp_path / "crew.toml"),
        "--home",
        str(home.root),
    ]
    env = {k: v for k, v in os.environ.items() if k != "CREW_HOME"}
    done = subprocess.run(
        ["sh", "-c", gone, "sh", *argv],
        cwd=tmp_path, env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip

    assert done.returncode == 0, done.stderr  # was exit 1 with the run made and never led
    (run_id,) = home.run_ids()
    assert store_of(home, run_id).state().run.status.value == "completed"
