"""Who acts, from a shell: session ids and idempotency keys are checked."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable

import pytest
from conftest import SESSION, CliResult, snapshot_files

from crew.store.runstore import RunStore

Cli = Callable[..., CliResult]
MakeRun = Callable[..., RunStore]


def _crew_bytes(*args: bytes, env: dict[bytes, bytes] | None = None) -> tuple[int, str]:
    """`crew` in a real process, with arguments (and environment) as raw bytes, as a shell
    passes them: `$'\\xff'` is a byte that is not UTF-8."""
    environ = {k.encode(): v.encode() for k, v in os.environ.items()}
    environ.update(env or {})
    done = subprocess.run(
        [sys.executable.encode(), b"-m", b"crew", *args],
        capture_output=True,
        env=environ,
        check=False,
    )
    return done.returncode, done.stderr.decode()


# ----------------------------------------------------------------------------- session ids


@pytest.mark.parametrize(
    ("session", "shown"),
    [
        (f"{SESSION}\n", repr(f"{SESSION}\n")),
        ("mallory\r", repr("mallory\r")),
        ("a\x1b[31mb", repr("a\x1b[31mb")),
        (" padded", repr(" padded")),
        ("x" * 257, repr("x" * 64 + "…")),
    ],
)
def test_a_session_id_is_one_line_of_printable_text(
    cli: Cli, make_run: MakeRun, session: str, shown: str
) -> None:
    store = make_run()
    before = snapshot_files(store.paths.root)

    result = cli("follow-up", "latest", "plan", "x", "--session", session, "--force")

    assert result.code == 2
    assert result.err == (
        f"crew: error: Invalid session id {shown} (--session): expected one line of 1-256 "
        "printable characters, with no space at either end.\n"
    )
    assert snapshot_files(store.paths.root) == before


def test_handoff_to_a_session_with_a_trailing_newline_is_refused(
    cli: Cli, make_run: MakeRun
) -> None:
    store = make_run()
    before = snapshot_files(store.paths.root)

    result = cli("handoff", "latest", "mallory\n")

    assert result.code == 2
    assert result.err.startswith("crew: error: Invalid session id 'mallory\\n' (SESSION): ")
    assert snapshot_files(store.paths.root) == before


@pytest.mark.parametrize(
    ("args", "env", "what", "source"),
    [
        ((b"--session", b"\xff"), {}, "session id", "--session"),
        ((b"--session", b"ana\xc3"), {}, "session id", "--session"),
        ((), {b"CREW_SESSION_ID": b"\xff"}, "session id", "CREW_SESSION_ID"),
        ((b"--idempotency-key", b"\xff"), {}, "idempotency key", "--idempotency-key"),
    ],
)
def test_bytes_that_are_not_utf8_are_a_usage_error_not_a_traceback(
    make_run: MakeRun, args: tuple[bytes, ...], env: dict[bytes, bytes], what: str, source: str
) -> None:
    store = make_run()
    before = snapshot_files(store.paths.root)

    code, err = _crew_bytes(b"follow-up", b"latest", b"plan", b"x", b"--force", *args, env=env)

    assert (code, err) == (2, f"crew: error: Invalid {what} ({source}): it is not UTF-8 text.\n")
    assert snapshot_files(store.paths.root) == before


@pytest.mark.parametrize("key", ["a\nb", "k\x00", "\x1b[2J", ""])
def test_an_idempotency_key_is_one_line_of_printable_text(
    cli: Cli, make_run: MakeRun, key: str
) -> None:
    store = make_run()
    before = snapshot_files(store.paths.root)

    result = cli("follow-up", "latest", "plan", "x", "--idempotency-key", key)

    assert result.code == 2
    assert result.err == (
        f"crew: error: Invalid idempotency key {key!r} (--idempotency-key): expected one line "
        "of 1-256 printable characters, with no space at either end.\n"
    )
    assert snapshot_files(store.paths.root) == before
