"""`crew run` refuses what no worker could start with (exit 2, one sentence, no run created),
the leader survives a worker that cannot start, and CREW_LOCK_TIMEOUT takes only a duration."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import SESSION, CliResult, config
from leaders import WORKER, Leader, store_of

from crew.config import CrewConfig
from crew.domain.runs import create_run
from crew.errors import UsageError
from crew.models import Event
from crew.paths import Home
from crew.registry import EventType, RunStatus, TaskStatus
from crew.store import jsonl
from crew.store.lock import lock_timeout
from crew.store.runstore import RunStore

Cli = Callable[..., CliResult]
MakeRun = Callable[..., RunStore]

CREW = """
[agents.w]
command = ["python3", "-c", "pass", "{prompt}"]

[[tasks]]
id = "t"
agent = "w"
prompt = "do it"
"""


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (('prompt = "do it"', 'prompt = "do\\u0000it"'), "tasks[0].prompt: contains a NUL character, which no program can be given"),
        (('"pass"', '"pass"]\nenv = { "A=B" = "1" }\n#'), "agents.w.env: 'A=B' is not an environment variable name (it must be non-empty, without '=' or NUL)"),
        (('"pass"', '"pass"]\nenv = { "" = "1" }\n#'), "agents.w.env: '' is not an environment variable name (it must be non-empty, without '=' or NUL)"),
        (('prompt = "do it"', f'prompt = "{"x" * 2_000_000}"'), "tasks[0].prompt: 2000000 bytes, over the limit of 65536 (put long instructions in a file and name it in the prompt)"),
        (("[agents.w]", "[crew]\nleaderStaleAfter = 0\n\n[agents.w]"), "crew.leaderStaleAfter: must be at least 3s (got 0ms): a leader refreshes its heartbeat every 1s, and a live one must not be taken for gone"),
    ],
)  # fmt: skip
def test_run_refuses_values_no_worker_could_start_with(
    cli: Cli, tmp_path: Path, home: Home, change: tuple[str, str], message: str
) -> None:
    old, new = change
    assert old in CREW
    (tmp_path / "crew.toml").write_text(CREW.replace(old, new, 1))

    result = cli("run", "crew.toml", "--no-input")

    assert (result.code, result.out) == (2, "")
    assert result.err == f"crew: error: crew.toml: {message}\n"
    assert home.run_ids() == []


def unchecked_run(home: Home, tmp_path: Path, agent: dict[str, object]) -> RunStore:
    """A run whose worker cannot be started, as a crew that checked less (an older version)
    could have created it: its definition is stored without crew.toml's checks."""
    document = {
        "agents": {
            "bad": {"command": [sys.executable, str(WORKER), "{prompt}"], **agent},
            "good": {"command": [sys.executable, str(WORKER), "{prompt}"]},
        },
        "tasks": [
            {"id": "bad", "agent": "bad", "prompt": "say:never"},
            {"id": "good", "agent": "good", "prompt": "say:fine ; exit:0"},
        ],
    }
    return create_run(home, CrewConfig.model_validate(document), crew_dir=tmp_path, session=SESSION)


@pytest.mark.parametrize(
    ("agent", "why"),
    [
        ({"env": {"A=B": "1"}}, "illegal environment variable name"),
        ({"env": {"X": "a\0b"}}, "embedded null byte"),
        ({"cwd": "no\0where"}, "embedded null byte"),
        ({"cwd": "missing"}, "No such file or directory: "),
        ({"command": ["./not-a-program"]}, "No such file or directory: ./not-a-program"),
    ],
)
def test_a_worker_that_cannot_start_fails_its_task_and_the_run_goes_on(
    tmp_path: Path, home: Home, agent: dict[str, object], why: str
) -> None:
    store = unchecked_run(home, tmp_path, agent)

    leader = Leader("resume", store.run_id, cwd=tmp_path)

    assert leader.finish() == 1, leader.err
    state = store_of(home, store.run_id).state()
    assert state.run.status is RunStatus.FAILED
    bad, good = state.tasks["bad"], state.tasks["good"]
    assert bad.status is TaskStatus.FAILED and bad.error is not None
    assert bad.error.startswith("cannot start ") and why in bad.error
    assert good.status is TaskStatus.COMPLETED
    events = jsonl.read(store.paths.events, Event).records
    assert not [e for e in events if e.type is EventType.LEADER_CRASHED]


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "-1", "1e400", "soon"])
def test_a_lock_timeout_that_is_not_a_duration_is_a_usage_error(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("CREW_LOCK_TIMEOUT", value)

    with pytest.raises(UsageError) as caught:
        lock_timeout()

    assert caught.value.message == (
        "CREW_LOCK_TIMEOUT must be a number of seconds (or a duration like 500ms or 30s) from 0 "
        f"up, got {value!r}."
    )


@pytest.mark.parametrize(("value", "seconds"), [("0", 0.0), ("2.5", 2.5), ("500ms", 0.5)])
def test_a_lock_timeout_may_be_seconds_or_a_duration(
    monkeypatch: pytest.MonkeyPatch, value: str, seconds: float
) -> None:
    monkeypatch.setenv("CREW_LOCK_TIMEOUT", value)
    assert lock_timeout() == seconds


def test_a_bad_lock_timeout_stops_a_command_with_exit_2_before_it_writes(
    make_run: MakeRun, tmp_path: Path
) -> None:
    store = make_run(config())
    before = store.paths.events.read_bytes()

    sent = subprocess.run(
        [sys.executable, "-m", "crew", "follow-up", store.run_id, "plan", "more", "--json"],
        check=False, capture_output=True, text=True, timeout=60, cwd=tmp_path,
        env={**os.environ, "CREW_LOCK_TIMEOUT": "nan"},
    )  # fmt: skip

    assert (sent.returncode, sent.stdout) == (2, "")
    assert sent.stderr.startswith("crew: error: CREW_LOCK_TIMEOUT must be a number of seconds")
    assert store.paths.events.read_bytes() == before
