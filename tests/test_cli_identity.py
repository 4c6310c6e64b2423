"""Who acts, from a shell: session ids are checked and recorded, `task:` sessions belong to
workers, and a real worker's own `crew` commands act as its task, not as the run's owner."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import SESSION, CliResult, snapshot_files
from leaders import WORKER, Leader, store_of, toml_value

from crew import ids
from crew.domain import change, tasks
from crew.models import Event
from crew.paths import Home
from crew.procs.cgroup import CgroupHome
from crew.registry import Box, EventType
from crew.store import jsonl
from crew.store.runstore import RunStore

Cli = Callable[..., CliResult]
MakeRun = Callable[..., RunStore]


def _events(store: RunStore) -> list[Event]:
    return jsonl.read(store.paths.events, Event).records


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


# ----------------------------------------------------------------------------- who acted


def test_a_session_other_than_the_callers_own_is_recorded_with_what_it_did(
    cli: Cli, make_run: MakeRun, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = make_run()
    monkeypatch.setenv("CREW_SESSION_ID", "ana@laptop")

    result = cli("follow-up", "latest", "plan", "more", "--session", SESSION)

    assert result.code == 0
    sent = [e for e in _events(store) if e.type is EventType.AGENT_FOLLOWED_UP]
    assert sent[0].data is not None
    assert (sent[0].data["session"], sent[0].data["defaultSession"]) == (SESSION, "ana@laptop")


def test_every_mutating_command_records_who_acted(cli: Cli, make_run: MakeRun) -> None:
    store = make_run()

    assert cli("nudge", "latest", "plan").code == 4  # queued: refused, nothing recorded
    assert cli("follow-up", "latest", "plan", "more").code == 0
    assert cli("cancel", "latest", "build").code == 0
    assert cli("handoff", "latest", "ana@laptop").code == 0

    acted = [e for e in _events(store) if e.seq > 3]  # after the run and its tasks were made
    assert [e.type for e in acted] == [
        EventType.AGENT_FOLLOWED_UP,
        EventType.TASK_CANCELLED,
        EventType.OWNERSHIP_TRANSFERRED,
    ]
    assert all(e.data is not None and e.data["session"] == SESSION for e in acted)


# ----------------------------------------------------------------------------- task: sessions


@pytest.mark.parametrize("how", ["option", "environment"])
def test_a_task_session_is_refused_outside_that_tasks_worker(
    cli: Cli, make_run: MakeRun, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    store = make_run()
    before = snapshot_files(store.paths.root)
    args = ["follow-up", "latest", "plan", "x", "--force"]
    if how == "option":
        args += ["--session", "task:plan"]
    else:
        monkeypatch.setenv("CREW_SESSION_ID", "task:plan")

    result = cli(*args)

    source = "--session" if how == "option" else "CREW_SESSION_ID"
    assert result.code == 4
    assert result.err == (
        f"crew: error: Session 'task:plan' ({source}) is reserved: only the worker crew started "
        "for task plan acts as it.\n"
    )
    assert snapshot_files(store.paths.root) == before


def test_a_made_up_worker_token_is_refused(
    cli: Cli, make_run: MakeRun, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = make_run()
    with change(store) as txn:
        tasks.start(txn, "plan", attempt=1, pid=1, token_hash=ids.token_hash("the real one"))
    before = snapshot_files(store.paths.root)
    monkeypatch.setenv("CREW_SESSION_ID", "task:plan")
    monkeypatch.setenv("CREW_RUN_ID", store.run_id)
    monkeypatch.setenv("CREW_TASK_ID", "plan")
    monkeypatch.setenv("CREW_WORKER_TOKEN", "a guess")

    result = cli("steer", "latest", "plan", "x", "--force")

    assert result.code == 4
    assert result.err == (
        "crew: error: This command's worker credentials (CREW_WORKER_TOKEN) are not those of "
        f"the current worker of task plan of run {store.run_id}.\n"
    )
    assert snapshot_files(store.paths.root) == before


def test_a_worker_cannot_name_another_session(
    cli: Cli, make_run: MakeRun, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = make_run()
    with change(store) as txn:
        tasks.start(txn, "plan", attempt=1, pid=1, token_hash=ids.token_hash("secret"))
    monkeypatch.setenv("CREW_RUN_ID", store.run_id)
    monkeypatch.setenv("CREW_TASK_ID", "plan")
    monkeypatch.setenv("CREW_WORKER_TOKEN", "secret")

    result = cli("handoff", "latest", "mallory", "--session", SESSION)

    assert result.code == 4
    assert result.err == (
        f"crew: error: This command runs in the worker of task plan (run {store.run_id}), which "
        f"acts as 'task:plan': --session cannot make it '{SESSION}'.\n"
    )
    assert store.state().run.owner_session_id == SESSION


def test_a_command_below_a_nested_crews_worker_is_still_the_outer_worker(
    make_run: MakeRun, home: Home, tmp_path: Path
) -> None:
    store = make_run()
    with change(store) as txn:
        tasks.start(txn, "plan", attempt=1, pid=1, token_hash=ids.token_hash("outer"))

    def worker(home_dir: Path, run_id: str, task_id: str, token: str) -> dict[str, str]:
        return {
            **os.environ,
            "CREW_HOME": str(home_dir),
            "CREW_RUN_ID": run_id,
            "CREW_TASK_ID": task_id,
            "CREW_WORKER_TOKEN": token,
            "CREW_SESSION_ID": f"task:{task_id}",
        }

    # The outer worker runs a crew of its own in another home, whose worker drops its variables
    # and acts on the outer run. Each shell stays alive as an ancestor (`; exit`: no exec).
    inner = worker(tmp_path / "inner" / ".crew", "20261130-034100-7f3a", "sub", "inner")
    assignments = " ".join(f"{k}='{v}'" for k, v in inner.items() if k.startswith("CREW_"))
    (tmp_path / "outer.sh").write_text(
        f'd="$1"; shift; env {assignments} sh "$d/inner.sh" "$@"; exit $?\n'
    )
    (tmp_path / "inner.sh").write_text(
        "env -u CREW_WORKER_TOKEN -u CREW_SESSION_ID -u CREW_RUN_ID -u CREW_TASK_ID "
        '"$1" -m crew handoff "$2" mallory --home "$3"; exit $?\n'
    )
    done = subprocess.run(
        [
            "sh",
            str(tmp_path / "outer.sh"),
            str(tmp_path),
            sys.executable,
            store.run_id,
            str(home.root),
        ],
        env=worker(home.root, store.run_id, "plan", "outer"),
        capture_output=True,
        text=True,
        check=False,
    )

    assert done.returncode == 4, done.stderr
    assert done.stderr.startswith(
        f"crew: error: Task plan is a worker of run {store.run_id}, and a worker may hand the "
        "run over only where crew.toml allows it"
    )
    assert store.state().run.owner_session_id == SESSION


# ----------------------------------------------------------------------------- a real worker

#: The commands a worker's agent might run in its shell, each followed by its exit code.
_ACTOR = """
PY="$1"
crew() { "$PY" -m crew "$@"; }
crew wait "$CREW_RUN_ID" --for started --task peer >/dev/null || exit 9
crew steer "$CREW_RUN_ID" peer "from the actor"; echo "steer: $?"
crew handoff "$CREW_RUN_ID" mallory; echo "handoff: $?"
crew cancel "$CREW_RUN_ID"; echo "cancel: $?"
crew cancel "$CREW_RUN_ID" peer; echo "cancel peer: $?"
crew handoff "$CREW_RUN_ID" mallory --session OWNER; echo "handoff --session: $?"
CREW_SESSION_ID=OWNER crew handoff "$CREW_RUN_ID" mallory; echo "handoff CREW_SESSION_ID: $?"
env -u CREW_WORKER_TOKEN -u CREW_SESSION_ID "$PY" -m crew handoff "$CREW_RUN_ID" mallory
echo "handoff, variables dropped: $?"
"""


def _actor_crew(folder: Path) -> Path:
    path = folder / "crew.toml"
    script = _ACTOR.replace("OWNER", SESSION)
    path.write_text(
        f"""[agents.shell]
command = {toml_value(["sh", "-c", script, "sh", "{python}"])}

[agents.scripted]
command = {toml_value([sys.executable, str(WORKER), "{prompt}"])}

[[tasks]]
id = "actor"
agent = "shell"
prompt = "act"

[[tasks]]
id = "peer"
agent = "scripted"
prompt = "await:steer ; say:steered"
"""
    )
    return path


def test_a_worker_acts_as_its_task_it_steers_a_peer_and_cannot_take_the_run(
    tmp_path: Path, home: Home
) -> None:
    leader = Leader("run", str(_actor_crew(tmp_path)), cwd=tmp_path)
    assert leader.finish(timeout=120) == 0, leader.err
    store = store_of(home, leader.run_id)

    log = store.paths.log("actor").read_text()
    run = store.run_id
    hand_over = (
        f"crew: error: Task actor is a worker of run {run}, and a worker may hand the run over "
        'only where crew.toml allows it: add "handoff" to `may` in [agents.shell].\n'
    )
    not_you = (
        f"crew: error: This command runs in the worker of task actor (run {run}), which acts as "
        f"'task:actor': {{}} cannot make it '{SESSION}'.\n"
    )
    assert log == (
        f"Sent steer {_steer_id(store)} to peer in run {run}.\n"
        "steer: 0\n" + hand_over + "handoff: 4\n"
        f"crew: error: Task actor is a worker of run {run}, and a worker may cancel the whole "
        'run only where crew.toml allows it: add "cancel" to `may` in [agents.shell].\n'
        "cancel: 4\n"
        f"crew: error: Task actor is a worker of run {run}, and a worker may cancel another task "
        'only where crew.toml allows it: add "cancel" to `may` in [agents.shell].\n'
        "cancel peer: 4\n"
        + not_you.format("--session")
        + "handoff --session: 4\n"
        + not_you.format("CREW_SESSION_ID")
        + "handoff CREW_SESSION_ID: 4\n"
        + hand_over
        + "handoff, variables dropped: 4\n"
    )
    state = store.state()
    assert state.run.owner_session_id == SESSION
    assert {t.id: t.status.value for t in state.task_list()} == {
        "actor": "completed",
        "peer": "completed",
    }
    steer = next(iter(store.fold(Box.STEERING).values()))
    assert (steer.from_, steer.data and steer.data["session"]) == ("actor", "task:actor")
    steered = [e for e in _events(store) if e.type is EventType.AGENT_STEERED]
    assert steered[0].data is not None and steered[0].data["session"] == "task:actor"
    assert "got steer from the actor" in store.paths.log("peer").read_text()
    assert not [e for e in _events(store) if e.type is EventType.OWNERSHIP_TRANSFERRED]


def _steer_id(store: RunStore) -> str:
    return next(iter(store.fold(Box.STEERING)))


#: A worker that leaves its process tree: a double fork (its parent is then not the worker), a
#: new session, and an environment cleared of everything crew gave it but the owner's session
#: id, which it read from the run. It tries to take the run; the worker waits for the answer.
_LEAVER = """
PY="$1"; OUT="$2"
(setsid env -i CREW_SESSION_ID=OWNER PATH=/usr/bin:/bin sh -c '
    "$0" -m crew handoff "$1" mallory --home "$2" >"$3.err" 2>&1
    echo $? >"$3.tmp"; mv "$3.tmp" "$3"' "$PY" "$CREW_RUN_ID" "$CREW_HOME" "$OUT" &)
while [ ! -e "$OUT" ]; do sleep 0.05; done
"""


@pytest.mark.skipif(CgroupHome.find() is None, reason="crew cannot make cgroups here")
def test_a_worker_that_leaves_its_process_tree_and_clears_its_variables_is_still_its_task(
    tmp_path: Path, home: Home
) -> None:
    out = tmp_path / "handoff"
    script = _LEAVER.replace("OWNER", SESSION)
    (tmp_path / "crew.toml").write_text(
        f"""[agents.shell]
command = {toml_value(["sh", "-c", script, "sh", "{python}", str(out)])}

[[tasks]]
id = "leaver"
agent = "shell"
prompt = "leave"
"""
    )
    leader = Leader("run", "crew.toml", cwd=tmp_path)
    assert leader.finish(timeout=60) == 0, leader.err
    store = store_of(home, leader.run_id)

    said = (tmp_path / "handoff.err").read_text()
    assert out.read_text() == "4\n", said  # refused: it is task:leaver, not the owner
    assert said == (
        f"crew: error: This command runs in the worker of task leaver (run {store.run_id}), "
        f"which acts as 'task:leaver': CREW_SESSION_ID cannot make it '{SESSION}'.\n"
    )
    assert store.state().run.owner_session_id == SESSION


@pytest.mark.skipif(CgroupHome.find() is None, reason="crew cannot make cgroups here")
def test_a_worker_that_clears_its_own_variables_may_act_as_no_one(
    tmp_path: Path, home: Home
) -> None:
    # The worker's process itself becomes a command with none of what crew gave it but the
    # owner's session id: no process of its cgroup holds its credentials any more.
    clear = f'exec env -i CREW_SESSION_ID={SESSION} "$0" -m crew handoff "$CREW_RUN_ID" mallory'
    (tmp_path / "crew.toml").write_text(
        f"""[agents.shell]
command = {toml_value(["sh", "-c", clear + ' --home "$CREW_HOME"', "{python}"])}

[[tasks]]
id = "cleared"
agent = "shell"
prompt = "clear"
maxAttempts = 1
"""
    )
    leader = Leader("run", "crew.toml", cwd=tmp_path)
    leader.finish(timeout=60)
    store = store_of(home, leader.run_id)

    assert store.paths.log("cleared").read_text() == (
        f"crew: error: This command runs in the worker of task cleared (run {store.run_id}; its "
        "cgroup), without that worker's credentials: it may act as no one.\n"
        "Run it from the worker itself, with the variables crew gave it.\n"
    )
    assert store.state().run.owner_session_id == SESSION
