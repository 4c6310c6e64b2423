"""`crew rerun`, `crew prune`, `crew rm` and `crew ps`, through the real command line: a rerun is
a new run linked to the old one that runs only what it must; removal never touches a run that is
led, is all-or-nothing for `rm`, and never leaves half a run behind."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from conftest import CliResult, config, snapshot_files
from leaders import Leader, store_of, write_crew

from crew.domain import change, tasks
from crew.domain.rerun import plan_rerun
from crew.paths import Home
from crew.registry import EventType, RunStatus, TaskStatus
from crew.store.runstore import RunStore

Cli = Callable[..., CliResult]
MakeRun = Callable[..., RunStore]

#: A worker that prints its prompt and fails while its prompt is `flaky` and no file `fixed` is
#: in its folder.
FLAKY = (
    "import os, sys; print('doing', sys.argv[1], flush=True); "
    "sys.exit(1 if sys.argv[1] == 'flaky' and not os.path.exists('fixed') else 0)"
)


def crew(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The `crew` command in a process of its own."""
    return subprocess.run(
        [sys.executable, "-m", "crew", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def flaky_crew(folder: Path) -> None:
    """good and flaky side by side, then after, which needs both."""
    write_crew(
        folder,
        [
            {"id": "good", "prompt": "good"},
            {"id": "flaky", "prompt": "flaky"},
            {"id": "after", "prompt": "after", "dependsOn": ["good", "flaky"]},
        ],
        command=[sys.executable, "-c", FLAKY, "{prompt}"],
    )


def started(store: RunStore) -> list[str]:
    return [e.task_id or "" for e in store.events().records if e.type is EventType.TASK_STARTED]


def test_rerun_failed_runs_only_what_failed_and_links_the_new_run_to_the_old(
    tmp_path: Path, home: Home
) -> None:
    flaky_crew(tmp_path)
    first = crew("run", "crew.toml", "--no-input", cwd=tmp_path)
    assert first.returncode == 1
    (old_id,) = home.run_ids()
    old = store_of(home, old_id)
    assert {t.id: t.status for t in old.state().task_list()} == {
        "good": TaskStatus.COMPLETED,
        "flaky": TaskStatus.FAILED,
        "after": TaskStatus.CANCELLED,
    }
    before = snapshot_files(old.paths.root)
    (tmp_path / "fixed").touch()

    again = crew("rerun", old_id[:-1], "--failed", "--no-input", cwd=tmp_path)

    assert again.returncode == 0, again.stderr
    new_id = home.run_ids()[-1]
    assert new_id != old_id
    assert again.stderr.splitlines()[0] == (
        f"crew: run {new_id}: runs flaky, after of run {old_id} again (carried as they ended: good)"
    )
    new = store_of(home, new_id)
    state = new.state()
    assert state.run.rerun_of == old_id and state.run.status is RunStatus.COMPLETED
    assert json.loads(new.paths.manifest.read_text())["rerunOf"] == old_id
    assert started(new) == ["flaky", "after"]  # good did not run again: it was carried
    carried = [e for e in new.events().records if e.type is EventType.TASK_CARRIED]
    assert [e.task_id for e in carried] == ["good"]
    good = state.task("good")
    worker = {"pid", "token_hash"}  # the secret of a worker of the old run is not carried
    assert good.model_dump(exclude=worker) == old.state().task("good").model_dump(exclude=worker)
    assert new.paths.log("good").read_text() == "doing good\n"  # its log came with it
    assert new.paths.log("flaky").read_text() == "doing flaky\n"
    assert snapshot_files(old.paths.root) == before  # the old run is only read
    runs = json.loads(crew("runs", "--json", cwd=tmp_path).stdout)
    assert [r.get("rerunOf") for r in runs] == [old_id, None]
    assert f" · rerun of {old_id}\n" in crew("status", new_id, cwd=tmp_path).stdout


def test_a_rerun_takes_what_the_chosen_tasks_need_and_what_depends_on_them(
    make_run: MakeRun,
) -> None:
    store = make_run()  # plan -> build
    with change(store) as txn:
        tasks.cancel(txn, "plan", "stopped")  # and build, its dependent, with it
    state = store.state()

    assert plan_rerun(state, ["build"]).again == ["plan", "build"]  # plan never completed
    assert plan_rerun(state, [], failed=True).again == ["plan", "build"]

    done = make_run()
    with change(done) as txn:
        for task_id in ("plan", "build"):
            tasks.transition(txn, task_id, TaskStatus.RUNNING, attempt=1, started_at=txn.at)
            tasks.transition(txn, task_id, TaskStatus.COMPLETED, exit_code=0, ended_at=txn.at)
    ended = done.state()
    assert plan_rerun(ended, ["build"]).carried == ["plan"]  # plan's result stands
    assert plan_rerun(ended, ["plan"]).again == ["plan", "build"]  # build used plan's
    assert plan_rerun(ended).again == ["plan", "build"]


def test_rerun_refuses_bad_requests_in_one_sentence_and_writes_nothing(
    cli: Cli, make_run: MakeRun, home: Home
) -> None:
    done = make_run()
    with change(done) as txn:
        for task_id in ("plan", "build"):
            tasks.transition(txn, task_id, TaskStatus.RUNNING, attempt=1, started_at=txn.at)
            tasks.transition(txn, task_id, TaskStatus.COMPLETED, exit_code=0, ended_at=txn.at)
    live = make_run()  # created, never led to its end
    before = snapshot_files(home.root)
    run = done.run_id

    assert cli("rerun", run, "--failed") == CliResult(
        4,
        "",
        f"crew: error: Every task of run {run} completed: --failed has nothing to run again.\n"
        f"Name the tasks to run again: `crew rerun {run} TASK…`.\n",
    )
    assert cli("rerun", run, "nope") == CliResult(
        5, "", f"crew: error: Run {run} has no task 'nope' in its crew definition.\n"
    )
    traversal = cli("rerun", run, "../plan")
    assert (traversal.code, traversal.out) == (2, "")
    assert traversal.err.startswith("crew: error: Invalid task id '../plan': ")
    assert cli("rerun", run, "--failed", "plan") == CliResult(
        2, "", "crew: error: Give either --failed or the tasks to run again, not both.\n"
    )
    assert cli("rerun", live.run_id) == CliResult(
        4,
        "",
        f"crew: error: Run {live.run_id} has not ended (running): only an ended run can be run "
        f"again.\n`crew resume {live.run_id}` continues it; `crew cancel {live.run_id}` ends it.\n",
    )
    assert snapshot_files(home.root) == before
    assert home.run_ids() == sorted([done.run_id, live.run_id])


def test_an_ended_run_or_task_points_at_rerun(cli: Cli, make_run: MakeRun) -> None:
    side_by_side = [
        {"id": "plan", "agent": "coder", "prompt": "Write a plan"},
        {"id": "other", "agent": "coder", "prompt": "Do something else"},
    ]
    store = make_run(config(tasks=side_by_side))
    with change(store) as txn:
        tasks.transition(txn, "plan", TaskStatus.RUNNING, attempt=1, started_at=txn.at)
        tasks.transition(txn, "plan", TaskStatus.FAILED, exit_code=1, ended_at=txn.at)

    steered = cli("steer", store.run_id, "plan", "more")
    assert steered == CliResult(
        4,
        "",
        "crew: error: Task plan is failed: steer needs a task that is running or waiting.\n"
        "It has finished; `crew rerun RUN TASK` runs it again in a new run.\n",
    )
    with change(store) as txn:
        tasks.cancel(txn, "other", "not needed")
    resumed = cli("resume", store.run_id, "--no-input")
    assert resumed == CliResult(
        4,
        "",
        f"crew: error: Run {store.run_id} has ended (failed): there is nothing to lead.\n"
        f"`crew rerun {store.run_id} --failed` runs what did not complete again, as a new run.\n",
    )


def test_a_run_whose_leader_is_alive_is_never_rerun_or_removed(
    cli: Cli, tmp_path: Path, home: Home
) -> None:
    write_crew(tmp_path, [{"id": "t", "prompt": f"until:{tmp_path / 'go'}"}])
    leader = Leader("run", "crew.toml", cwd=tmp_path)
    try:
        run = leader.run_id
        before = sorted(os.listdir(home.runs_dir))
        rerun = cli("rerun", run)
        removed = cli("rm", run)
        forced = cli("rm", "--force", run)
        pruned = cli("prune", "--keep", "0", "--json")
    finally:
        (tmp_path / "go").touch()
        assert leader.finish() == 0

    assert (rerun.code, rerun.out) == (4, "")
    assert rerun.err.startswith(f"crew: error: Run {run} is already led by pid {leader.pid} ")
    refusal = (
        f"crew: error: Run {run} was not removed, nor any other run named: its leader, pid "
        f"{leader.pid} on {socket.gethostname()}, is alive.\n"
        f"crew never removes a run that is being led: `crew cancel {run}` ends it first.\n"
    )
    assert removed == forced == CliResult(4, "", refusal)
    assert pruned.code == 0
    assert json.loads(pruned.out) == {
        "dryRun": False,
        "removed": [],
        "kept": [
            {"runId": run, "reason": f"its leader, pid {leader.pid} on {socket.gethostname()}, "
             "is alive"}
        ],
    }  # fmt: skip
    assert sorted(os.listdir(home.runs_dir)) == before
    assert store_of(home, run).state().run.status is RunStatus.COMPLETED  # led to its end


def ended_runs(cli: Cli, make_run: MakeRun, count: int) -> list[str]:
    """`count` runs, oldest first, each cancelled (ended) through the command line."""
    ids = []
    for _ in range(count):
        store = make_run()
        assert cli("cancel", store.run_id).code == 0
        ids.append(store.run_id)
    return ids


def test_prune_keeps_the_newest_runs_and_lists_what_it_removes(
    cli: Cli, make_run: MakeRun, home: Home
) -> None:
    oldest, unfinished, old, newer, newest = (
        *ended_runs(cli, make_run, 1),
        make_run().run_id,
        *ended_runs(cli, make_run, 3),
    )
    before = snapshot_files(home.root)

    dry = cli("prune", "--keep", "2", "--dry-run")

    assert dry.code == 0
    assert [line.split(" (")[0] for line in dry.out.splitlines()] == [
        f"Would remove run {oldest}",
        f"Would remove run {old}",
    ]
    assert dry.err == f"crew: kept run {unfinished}: it has not ended (running)\n"
    assert snapshot_files(home.root) == before

    pruned = cli("prune", "--keep", "2", "--json")

    assert pruned.code == 0
    doc = json.loads(pruned.out)
    assert [r["runId"] for r in doc["removed"]] == [oldest, old]
    assert doc["removed"][0]["status"] == "cancelled" and doc["dryRun"] is False
    assert doc["kept"] == [{"runId": unfinished, "reason": "it has not ended (running)"}]
    assert home.run_ids() == [unfinished, newer, newest]
    assert sorted(os.listdir(home.runs_dir)) == [unfinished, newer, newest]  # nothing left over
    assert cli("prune", "--keep", "2").out == "No run was removed.\n"


def test_prune_older_than_removes_only_runs_that_ended_longer_ago(
    cli: Cli, make_run: MakeRun, home: Home
) -> None:
    ended = ended_runs(cli, make_run, 2)
    unfinished = make_run().run_id

    recent = cli("prune", "--older-than", "1h", "--json")
    assert (recent.code, json.loads(recent.out)["removed"]) == (0, [])
    assert home.run_ids() == [*ended, unfinished]

    both = cli("prune", "--older-than", "0s", "--keep", "2", "--json")
    assert [r["runId"] for r in json.loads(both.out)["removed"]] == ended[:1]

    every = cli("prune", "--older-than", "0s", "--json")
    assert [r["runId"] for r in json.loads(every.out)["removed"]] == ended[1:]
    assert home.run_ids() == [unfinished]


def test_prune_refuses_bad_input(cli: Cli, make_run: MakeRun, home: Home) -> None:
    ended_runs(cli, make_run, 1)
    before = snapshot_files(home.root)

    assert cli("prune") == CliResult(
        2,
        "",
        "crew: error: crew prune needs --keep N, --older-than DURATION or both: it never "
        "removes every run unasked.\n",
    )
    soon = cli("prune", "--older-than", "soon")
    assert (soon.code, soon.out) == (2, "")
    assert soon.err.startswith("crew: error: --older-than: expected a duration")
    assert cli("prune", "--keep", "-1").code == 2
    assert snapshot_files(home.root) == before


def test_rm_removes_every_run_named_or_none(cli: Cli, make_run: MakeRun, home: Home) -> None:
    first, second, third = ended_runs(cli, make_run, 3)
    unfinished = make_run().run_id
    before = snapshot_files(home.root)

    refused = cli("rm", first, unfinished)
    assert refused == CliResult(
        4,
        "",
        f"crew: error: Run {unfinished} was not removed, nor any other run named: it has not "
        f"ended (running).\n`crew cancel {unfinished}` ends it; `crew rm --force {unfinished}` "
        "removes it anyway.\n",
    )
    assert cli("rm", first, "20991231-000000-0000") == CliResult(
        5,
        "",
        "crew: error: No run matches '20991231-000000-0000' in "
        f"{home.runs_dir}.\nSee `crew runs`.\n",
    )
    assert cli("rm", "../state").code == 2
    assert cli("rm", "--dry-run", first, unfinished).code == 4  # refused as it would be
    would = cli("rm", "--dry-run", second, first)
    assert snapshot_files(home.root) == before
    assert [line.split(" (")[0] for line in would.out.splitlines()] == [
        f"Would remove run {second}",
        f"Would remove run {first}",
    ]

    removed = cli("rm", second[:-1], first)
    assert removed.code == 0
    assert [line.split(" (")[0] for line in removed.out.splitlines()] == [
        f"Removed run {second}",
        f"Removed run {first}",
    ]
    forced = cli("rm", "--force", "latest", "--json")
    assert [r["runId"] for r in json.loads(forced.out)["removed"]] == [unfinished]
    assert sorted(os.listdir(home.runs_dir)) == [third]


def test_a_removal_cut_short_leaves_no_run_and_is_finished_later(
    cli: Cli, make_run: MakeRun, home: Home
) -> None:
    kept, cut = ended_runs(cli, make_run, 2)
    # What a crash right after the rename leaves: the folder set aside, its files still there.
    os.rename(home.runs_dir / cut, home.runs_dir / f".rm-{cut}")

    listed = json.loads(cli("runs", "--json").out)
    assert [r["runId"] for r in listed] == [kept]
    assert cli("status", cut).code == 5

    swept = cli("rm", kept)
    assert swept.code == 0
    assert swept.err == f"crew: deleted .rm-{cut}, left by a removal that was cut short\n"
    assert os.listdir(home.runs_dir) == []


def test_removal_never_follows_a_link(
    cli: Cli, make_run: MakeRun, home: Home, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious").write_text("keep me")
    (run,) = ended_runs(cli, make_run, 1)
    store = store_of(home, run)
    store.paths.logs_dir.joinpath("plan.log").symlink_to(outside / "precious")
    linked_run = "20200101-000000-abcd"
    (home.runs_dir / linked_run).symlink_to(outside, target_is_directory=True)

    refused = cli("rm", linked_run)
    assert (refused.code, refused.out) == (4, "")
    assert refused.err.startswith(
        f"crew: error: {home.runs_dir / linked_run} is a symbolic link, and crew never follows"
    )
    pruned = cli("prune", "--keep", "0")
    assert pruned.out.startswith(f"Removed run {run} (cancelled, crew test, ended ")
    assert pruned.err == (
        f"crew: kept run {linked_run}: its folder is a symbolic link, which crew never follows\n"
    )
    assert (outside / "precious").read_text() == "keep me"
    assert sorted(os.listdir(home.runs_dir)) == [linked_run]


def test_ps_is_an_alias_of_runs(cli: Cli, make_run: MakeRun) -> None:
    ended_runs(cli, make_run, 1)
    make_run()

    def table(result: CliResult) -> str:  # the CREATED column ticks between two calls
        return re.sub(r"\s+", " ", re.sub(r"\d+m?s ago", "", result.out))

    assert table(cli("ps")) == table(cli("runs")) and cli("ps").out.startswith("RUN ")
    assert cli("ps", "--json", "--status", "cancelled") == cli(
        "runs", "--json", "--status", "cancelled"
    )
    assert "(an alias of `crew runs`)" in cli("ps", "--help").out


#: Holds a run's lock like a leader claiming it: until `crew rm` waits for the lock (its hand is
#: up), then writes its lease, as `crew resume` does under the lock, and lets go.
CLAIMER = """
import sys, time
from pathlib import Path
from crew.domain.lease import new_lease, write_lease
from crew.paths import Home
from crew.store.lock import locked

paths = Home(Path(sys.argv[1])).run(sys.argv[2])
with locked(paths.lock):
    print("held", flush=True)
    deadline = time.monotonic() + 20
    while not paths.lock.with_name(".next.lock").exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    write_lease(paths, new_lease("leader@test", 1))
sys.stdin.read()
"""


def test_rm_sees_a_leader_that_claimed_the_run_while_it_waited_for_the_lock(
    cli: Cli, make_run: MakeRun, home: Home, tmp_path: Path
) -> None:
    (run,) = ended_runs(cli, make_run, 1)
    claimer = subprocess.Popen(
        [sys.executable, "-c", CLAIMER, str(home.root), run],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert claimer.stdout is not None and claimer.stdout.readline() == "held\n"
        removed = crew("rm", run, cwd=tmp_path)
    finally:
        claimer.communicate("", timeout=30)

    assert (removed.returncode, removed.stdout) == (4, "")
    assert removed.stderr.startswith(
        f"crew: error: Run {run} was not removed, nor any other run named: its leader, pid "
        f"{claimer.pid} on {socket.gethostname()}, is alive.\n"
    )
    assert home.run_ids() == [run]
