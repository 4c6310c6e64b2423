"""`crew add`: tasks added to a run as it runs — started by a live leader when ready, by
`crew resume` in a leaderless run; every refusal one sentence, its exit code, nothing written."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import SESSION, CliResult, config, snapshot_files
from leaders import Leader, eventually, store_of, write_crew
from test_fast import Twins, _normal
from test_verbs import start

from crew import add_task, fast
from crew.domain import change, tasks
from crew.errors import Refused
from crew.ids import new_worker_token, token_hash
from crew.models import Event
from crew.paths import Home
from crew.registry import EventType, RunStatus, TaskStatus
from crew.session import Actor, WorkerCredentials
from crew.store import jsonl
from crew.store.runstore import RunStore

Cli = Callable[..., CliResult]
MakeRun = Callable[..., RunStore]


def crew(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """The installed `crew` command, in its own process."""
    return subprocess.run(
        [sys.executable, "-m", "crew", *args],
        input=stdin,
        capture_output=True,
        text=True,
        check=False,
    )


def three_tasks() -> object:
    """plan -> build, and `other`, which nothing depends on."""
    return config(
        tasks=[
            {"id": "plan", "agent": "coder", "prompt": "Write a plan"},
            {"id": "build", "agent": "coder", "prompt": "Build it", "dependsOn": ["plan"]},
            {"id": "other", "agent": "coder", "prompt": "Something else"},
        ]
    )


def test_tasks_added_to_a_live_run_start_when_their_dependencies_complete(
    tmp_path: Path, home: Home
) -> None:
    go = tmp_path / "go"
    write_crew(tmp_path, [{"id": "hold", "prompt": f"until:{go} ; say:held"}])
    leader = Leader("run", "crew.toml", cwd=tmp_path)
    store = store_of(home, leader.run_id)

    first = crew("add", leader.run_id, "--agent", "w", "say:first")
    after_hold = crew("add", leader.run_id, "--agent", "w", "--id", "after-hold",
                      "--depends-on", "hold", "say:after hold")  # fmt: skip
    after_first = crew("add", "latest", "--agent", "w", "--id", "after-first", "--depends-on",
                       "w-1", "--json", "-", stdin="say:after first\n")  # fmt: skip

    assert (first.returncode, first.stderr) == (0, "")
    assert first.stdout == f"Added task w-1 (w) to run {leader.run_id}: queued.\n"
    assert (after_hold.returncode, after_first.returncode) == (0, 0)
    shown = json.loads(after_first.stdout)
    assert shown["task"]["id"] == "after-first" and shown["task"]["dependsOn"] == ["w-1"]
    assert shown["task"]["prompt"] == "say:after first" and shown["leader"] == "alive"
    # The two that do not wait on `hold` run while it holds; the one that does waits for it.
    eventually(lambda: store.state().tasks["after-first"].status is TaskStatus.COMPLETED, 20)
    state = store.state()
    assert state.tasks["w-1"].status is TaskStatus.COMPLETED
    assert state.tasks["hold"].status is TaskStatus.RUNNING
    assert state.tasks["after-hold"].status is TaskStatus.QUEUED
    status = json.loads(crew("status", leader.run_id, "--json").stdout)
    assert [t["id"] for t in status["tasks"]] == ["hold", "w-1", "after-hold", "after-first"]

    go.touch()
    assert leader.finish() == 0
    state = store.state()
    assert state.run.status is RunStatus.COMPLETED
    assert [(t.id, t.status) for t in state.task_list()] == [
        ("hold", TaskStatus.COMPLETED),
        ("w-1", TaskStatus.COMPLETED),
        ("after-hold", TaskStatus.COMPLETED),
        ("after-first", TaskStatus.COMPLETED),
    ]
    assert state.tasks["after-hold"].started_at > state.tasks["hold"].ended_at  # type: ignore[operator]
    added = [
        e
        for e in jsonl.read(store.paths.events, Event).records
        if e.type is EventType.TASK_QUEUED and e.task_id != "hold"
    ]
    assert [e.message for e in added] == [
        f"task w-1 added by {SESSION}: say:first",
        f"task after-hold added by {SESSION}: say:after hold",
        f"task after-first added by {SESSION}: say:after first",
    ]
    assert all(e.data and e.data["session"] == SESSION for e in added)
    assert (store.paths.root / "tasks" / "after-first.json").is_file()


def test_a_leaderless_run_starts_an_added_task_on_resume(cli: Cli, make_run: MakeRun) -> None:
    store = make_run()

    added = cli("add", store.run_id, "--agent", "coder", "--id", "extra", "Do more")
    resumed = crew("resume", store.run_id, "--no-input")

    assert added.code == 0
    assert added.out == (
        f"Added task extra (coder) to run {store.run_id}: queued.\n"
        "No leader is running: it starts once one leads the run "
        f"(`crew resume {store.run_id}`).\n"
    )
    assert resumed.returncode == 0, resumed.stderr
    state = store.state()
    assert state.tasks["extra"].status is TaskStatus.COMPLETED
    assert state.run.status is RunStatus.COMPLETED


def test_a_task_added_after_a_failed_dependency_is_cancelled(cli: Cli, make_run: MakeRun) -> None:
    store = make_run(three_tasks())
    start(store)
    with change(store) as txn:
        tasks.transition(txn, "plan", TaskStatus.FAILED, ended_at=txn.at, error="exit 1")

    result = cli("add", "latest", "--agent", "coder", "--id", "late", "--depends-on", "plan", "x")

    assert result.code == 0
    assert result.out == (
        f"Added task late (coder) to run {store.run_id}: cancelled.\n"
        "It will not run: dependency plan failed.\n"
    )
    state = store.state()
    assert state.tasks["late"].status is TaskStatus.CANCELLED
    assert state.tasks["build"].status is TaskStatus.CANCELLED
    assert state.run.status is RunStatus.RUNNING  # `other` is still queued


def test_a_dependency_named_twice_is_kept_once_both_ways(cli: Cli, make_run: MakeRun) -> None:
    # Kept as given: 100,000 times the same task made a 1.3 MB task file and event line.
    store = make_run()
    home = str(store.paths.home.root)
    twice = ("--depends-on", "plan", "--depends-on", "plan", "--depends-on", "plan", "x")

    quick = ["add", "latest", "--agent", "coder", "--id", "quick", *twice, "--home", home]
    assert fast.fast(quick) == 0  # handed to the command's body, which keeps one
    assert cli("add", "latest", "--agent", "coder", "--id", "late", *twice).code == 0
    assert store.state().tasks["quick"].depends_on == ["plan"]
    assert store.state().tasks["late"].depends_on == ["plan"]


def test_a_replayed_idempotency_key_returns_the_first_task_and_writes_nothing(
    cli: Cli, make_run: MakeRun
) -> None:
    store = make_run()
    first = cli("add", "latest", "--agent", "coder", "--idempotency-key", "k1", "--json", "Do")
    home = store.paths.root.parent.parent.parent
    before = snapshot_files(home)

    again = cli("add", "latest", "--agent", "coder", "--idempotency-key", "k1", "--json", "Do")

    assert again.code == 0
    assert json.loads(again.out)["replayed"] is True
    assert json.loads(again.out)["task"] == json.loads(first.out)["task"]
    assert snapshot_files(home) == before
    assert cli("add", "latest", "--agent", "coder", "--idempotency-key", "k1", "Do").out == (
        "Already added as coder-1 (same idempotency key): nothing new was written.\n"
    )


def test_generated_ids_are_the_agent_and_a_number_never_taken(cli: Cli, make_run: MakeRun) -> None:
    make_run()
    cli("add", "latest", "--agent", "coder", "--id", "coder-2", "x")

    made = [cli("add", "latest", "--agent", "coder", "--quiet", "x").out for _ in range(2)]

    assert made == ["coder-1\n", "coder-3\n"]


@pytest.mark.parametrize(
    ("args", "code", "error"),
    [
        (("--agent", "nobody", "x"), 5, "crew: error: Run {run}'s crew has no agent 'nobody' (agents: coder).\n"),
        (("--agent", "coder", "--id", "../evil", "x"), 2, "crew: error: Invalid task id '../evil': expected 1-64 characters of a-z, 0-9, '_', '.', '-' starting with a letter or digit.\n"),
        (("--agent", "coder", "--id", "new\n", "x"), 2, "crew: error: Invalid task id 'new\\n': expected 1-64 characters of a-z, 0-9, '_', '.', '-' starting with a letter or digit.\n"),
        (("--agent", "coder", "--depends-on", "/etc/passwd", "x"), 2, "crew: error: Invalid task id '/etc/passwd': expected 1-64 characters of a-z, 0-9, '_', '.', '-' starting with a letter or digit.\n"),
        (("--agent", "coder", "--id", "plan", "x"), 4, "crew: error: Run {run} already has a task 'plan'.\nChoose another --id, or leave it out for a generated one.\n"),
        (("--agent", "coder", "--id", "loop", "--depends-on", "loop", "x"), 2, "crew: error: Task loop cannot depend on itself (a cycle).\n"),
        (("--agent", "coder", "--depends-on", "deploy", "x"), 5, "crew: error: Run {run} has no task 'deploy' (tasks: plan, build, coder-1).\n"),
        (("--agent", "coder", " "), 2, "crew: error: The task's prompt is empty.\n"),
        (("--agent", "coder", "x" * 70000), 2, "crew: error: The task's prompt is 70000 bytes; the limit is 65536 bytes.\nWrite the instructions to a file and give its path in the prompt.\n"),
        (("--agent", "coder", "--session", "intruder@elsewhere", "x"), 4, "crew: error: Run {run} is owned by session 'tester@ci', and you are session 'intruder@elsewhere'.\nUse --force to act anyway (it is recorded), or ask the owner to `crew handoff {run} intruder@elsewhere`.\n"),
        (("--agent", "coder", "--idempotency-key", "used", "y"), 4, "crew: error: Idempotency key 'used' was already used to add task coder-1, with a different request.\nUse a new key for a new task.\n"),
        (("--agent", "coder", "--idempotency-key", "sent", "y"), 4, "crew: error: Idempotency key 'sent' was already used for a steer to plan ({message}).\nUse a new key for a new task.\n"),
    ],
)  # fmt: skip
def test_refusals_print_one_sentence_exit_with_the_code_and_write_nothing(
    cli: Cli, make_run: MakeRun, args: tuple[str, ...], code: int, error: str
) -> None:
    store = make_run()
    start(store)
    assert cli("add", "latest", "--agent", "coder", "--idempotency-key", "used", "x").code == 0
    sent = cli("steer", "latest", "plan", "go", "--idempotency-key", "sent", "--json")
    home = store.paths.root.parent.parent.parent
    before = snapshot_files(home)

    result = cli("add", "latest", *args)

    assert result.code == code
    assert result.out == ""
    message = json.loads(sent.out)["id"]
    assert result.err == error.format(run=store.run_id, message=message)
    assert snapshot_files(home) == before


def test_an_ended_run_takes_no_more_tasks_and_nothing_is_written(
    cli: Cli, make_run: MakeRun
) -> None:
    store = make_run()
    assert cli("cancel", "latest").code == 0
    home = store.paths.root.parent.parent.parent
    before = snapshot_files(home)

    result = cli("add", "latest", "--agent", "coder", "x")

    assert result.code == 4
    assert result.err == (
        f"crew: error: Run {store.run_id} has ended (cancelled): it takes no more tasks.\n"
    )
    assert snapshot_files(home) == before


def test_past_max_tasks_is_refused_and_nothing_is_written(cli: Cli, make_run: MakeRun) -> None:
    store = make_run(config(limits={"maxTasks": 3}))
    assert cli("add", "latest", "--agent", "coder", "x").code == 0
    home = store.paths.root.parent.parent.parent
    before = snapshot_files(home)

    result = cli("add", "latest", "--agent", "coder", "y")

    assert result.code == 4
    assert result.err == (
        f"crew: error: Run {store.run_id} has 3 tasks: its limit is 3 ([limits] maxTasks in "
        "crew.toml).\n"
    )
    assert snapshot_files(home) == before


def test_past_max_depth_is_refused_and_nothing_is_written(make_run: MakeRun) -> None:
    store = make_run(config(limits={"maxDepth": 1}))
    child = add_task(store, agent="coder", prompt="child", parent="plan", session=SESSION)
    home = store.paths.root.parent.parent.parent
    before = snapshot_files(home)

    with pytest.raises(Refused) as refused:
        add_task(store, agent="coder", prompt="grandchild", parent=child.task.id, session=SESSION)

    assert child.task.id == "plan.1" and child.task.parent == "plan"
    assert refused.value.message == (
        "Task plan.1 is 1 level(s) below crew.toml's tasks: a task it adds would nest 2 deep, "
        "past the limit of 1 ([limits] maxDepth in crew.toml)."
    )
    assert snapshot_files(home) == before


def test_force_adds_to_a_run_another_session_owns_and_is_recorded(
    cli: Cli, make_run: MakeRun
) -> None:
    store = make_run(session="owner@host")

    result = cli("add", "latest", "--agent", "coder", "--force", "x")

    assert result.code == 0
    assert result.err == "crew: acted on a run owned by owner@host (--force; recorded)\n"
    overridden = [
        e
        for e in jsonl.read(store.paths.events, Event).records
        if e.type is EventType.OWNERSHIP_OVERRIDDEN
    ]
    assert overridden[0].data == {"owner": "owner@host", "session": SESSION, "verb": "add"}


def test_a_worker_adds_tasks_as_its_own_children_only_with_the_spawn_right(
    make_run: MakeRun,
) -> None:
    def crew_with(may: list[str]) -> object:
        agents = {"coder": {"command": ["python3", "-c", "pass"], "may": may}}
        return config(agents=agents)

    for may in ([], ["spawn"]):
        store = make_run(crew_with(may))
        token = new_worker_token()
        with change(store) as txn:
            tasks.start(txn, "plan", attempt=1, pid=1, token_hash=token_hash(token))
        worker = Actor("task:plan", WorkerCredentials(store.run_id, "plan", token))
        home = store.paths.root.parent.parent.parent
        before = snapshot_files(home)
        if not may:
            with pytest.raises(Refused) as refused:
                add_task(store, agent="coder", prompt="more", session=worker)
            assert refused.value.message == (
                f"Task plan is a worker of run {store.run_id}, and a worker may add tasks only "
                'where crew.toml allows it: add "spawn" to `may` in [agents.coder].'
            )
            assert snapshot_files(home) == before
            continue
        added = add_task(store, agent="coder", prompt="more", session=worker)
        assert (added.task.id, added.task.parent) == ("plan.1", "plan")


def test_the_fast_status_json_of_a_run_with_added_tasks_is_the_full_commands(
    make_run: MakeRun, cli: Cli, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    store = make_run()
    for task_id in ("zz", "aa"):  # added in this order: not the order of their names
        add_task(store, agent="coder", prompt=task_id, task_id=task_id, session=SESSION)
    twins = Twins(store, tmp_path)

    full, quick = twins.both(cli, capsys, "status", twins.run_id, "--json")

    assert full.err == quick.err == ""
    assert quick.out.replace(str(twins.fast), "ROOT") == full.out.replace(str(twins.full), "ROOT")
    assert [t["id"] for t in json.loads(quick.out)["tasks"]] == ["plan", "build", "zz", "aa"]


def test_a_fast_steer_to_an_added_task_writes_what_the_full_command_does(
    make_run: MakeRun, cli: Cli, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    store = make_run()
    add_task(store, agent="coder", prompt="more", task_id="extra", session=SESSION)
    start(store, "extra")
    twins = Twins(store, tmp_path)

    full, quick = twins.both(cli, capsys, "steer", twins.run_id, "extra", "Use the cache")

    assert (quick.code, quick.err) == (full.code, full.err) == (0, "")
    assert _normal(quick.out.encode(), twins.fast) == _normal(full.out.encode(), twins.full)
    twins.same_files()
    assert fast.fast(["steer", twins.run_id, "nothere", "x", "--home", str(twins.fast)]) is None
