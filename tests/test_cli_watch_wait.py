"""`crew wait` and `crew watch` end with the run's outcome, as `crew run` does; `crew watch`
without a terminal prints the view as text each time it changes; an ended task's question is
nobody's to answer, so no view offers it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import SESSION, CliResult
from leaders import Leader, eventually, store_of, write_crew
from test_verbs import ask, start

from crew import verbs
from crew.domain import change, runs, tasks
from crew.paths import Home
from crew.registry import RunStatus, TaskStatus
from crew.store.runstore import RunStore

Cli = Callable[..., CliResult]
MakeRun = Callable[..., RunStore]


def crew(*args: str, fast: bool = True, **kwargs: object) -> subprocess.CompletedProcess[str]:
    """The installed `crew` command, with or without its fast path."""
    env = {**os.environ, "CREW_FAST": "1" if fast else "0"}
    return subprocess.run(
        [sys.executable, "-m", "crew", *args], capture_output=True, text=True, env=env,
        check=False, **kwargs,  # type: ignore[call-overload]
    )  # fmt: skip


def end(store: RunStore, **statuses: TaskStatus) -> None:
    """Each task ran and ended as given; the run ended as a leader would end it."""
    with change(store) as txn:
        for task_id, status in statuses.items():
            tasks.transition(txn, task_id, TaskStatus.RUNNING, attempt=1, started_at=txn.at)
            tasks.transition(txn, task_id, status, ended_at=txn.at)
        everything = all(s is TaskStatus.COMPLETED for s in statuses.values())
        runs.end(txn, RunStatus.COMPLETED if everything else RunStatus.FAILED)


# ----------------------------------------------------------------------------- wait


@pytest.mark.parametrize("fast", [True, False])
@pytest.mark.parametrize(
    ("plan", "build", "args", "code"),
    [
        (TaskStatus.COMPLETED, TaskStatus.COMPLETED, (), 0),
        (TaskStatus.COMPLETED, TaskStatus.FAILED, (), 1),
        (TaskStatus.COMPLETED, TaskStatus.FAILED, ("--task", "plan"), 0),
        (TaskStatus.COMPLETED, TaskStatus.FAILED, ("--task", "build"), 1),
        (TaskStatus.COMPLETED, TaskStatus.FAILED, ("--for", "started"), 0),
        (TaskStatus.COMPLETED, TaskStatus.FAILED, ("--json",), 1),
    ],
)
def test_wait_for_the_end_exits_with_the_outcome(
    make_run: MakeRun,
    fast: bool,
    plan: TaskStatus,
    build: TaskStatus,
    args: tuple[str, ...],
    code: int,
) -> None:
    store = make_run()
    end(store, plan=plan, build=build)

    waited = crew("wait", store.run_id, *args, fast=fast)

    assert (waited.returncode, waited.stderr) == (code, "")
    if "--json" not in args:
        expected = [f"{t} {s}" for t, s in (("plan", plan), ("build", build))]
        if "--task" in args:
            expected = [line for line in expected if line.startswith(args[1])]
        assert waited.stdout.splitlines() == expected


def test_wait_for_a_cancelled_run_exits_1_and_shows_no_question(
    cli: Cli, make_run: MakeRun
) -> None:
    store = make_run()
    ask(store, "plan")
    verbs.cancel(store, session=SESSION)

    waited = cli("wait", store.run_id)
    task_only = cli("wait", store.run_id, "--task", "plan")

    assert waited == CliResult(1, "plan cancelled\nbuild cancelled\n", "")
    assert task_only == CliResult(1, "plan cancelled\n", "")


def test_a_cancelled_tasks_question_is_not_waiting_for_an_answer(
    cli: Cli, make_run: MakeRun
) -> None:
    store = make_run()
    ask(store, "plan")
    assert "Waiting for an answer:" in cli("status", store.run_id).out

    verbs.cancel(store, "plan", session=SESSION)
    shown = cli("status", store.run_id)

    assert store.state().tasks["plan"].contact is not None  # still on record
    assert shown.code == 0
    assert "Which database?" not in shown.out
    assert "Waiting for an answer:" not in shown.out


# ----------------------------------------------------------------------------- watch


def test_watch_without_a_terminal_prints_the_view_of_an_ended_run_and_its_outcome(
    make_run: MakeRun,
) -> None:
    store = make_run()
    end(store, plan=TaskStatus.COMPLETED, build=TaskStatus.FAILED)

    watched = crew("watch", store.run_id)

    assert (watched.returncode, watched.stderr) == (1, "")
    lines = watched.stdout.splitlines()
    assert lines[0] == f"Run {store.run_id} · crew test · failed · 1 completed, 1 failed"
    assert lines[1].split() == ["TASK", "STATUS", "TRY", "SINCE", "PENDING", "NOW"]
    assert [line.split()[:2] for line in lines[2:4]] == [
        ["plan", "completed"],
        ["build", "failed"],
    ]
    assert "\x1b" not in watched.stdout
    assert "q leave" not in watched.stdout
    colored = crew("watch", store.run_id, "--color", "always")
    assert colored.returncode == 1 and "\x1b[" in colored.stdout


def test_watch_of_a_completed_run_exits_0(make_run: MakeRun) -> None:
    store = make_run()
    end(store, plan=TaskStatus.COMPLETED, build=TaskStatus.COMPLETED)

    watched = crew("watch", store.run_id)

    assert watched.returncode == 0
    assert watched.stdout.startswith(f"Run {store.run_id} · crew test · completed")


def test_watch_piped_prints_a_frame_for_each_change_until_the_run_ends(
    tmp_path: Path, home: Home
) -> None:
    write_crew(tmp_path, [{"id": "ask", "prompt": "ask:need_input:Ship it? ; read ; exit:3"}])
    started = crew("run", "crew.toml", "--detach", cwd=tmp_path)
    run_id = started.stdout.strip()
    store = store_of(home, run_id)
    eventually(lambda: store.state().tasks["ask"].status is TaskStatus.WAITING)
    watch = subprocess.Popen(
        [sys.executable, "-m", "crew", "watch", run_id, "--no-input"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert watch.stdout is not None
    first = watch.stdout.readline()  # the first frame is printed before anything changes
    assert first.startswith(f"Run {run_id} · crew test · running")

    verbs.respond(store, "ask", "no", session=SESSION)
    out = watch.stdout.read()  # until it exits (communicate() would lose what readline read)
    err = watch.communicate(timeout=30)[1]

    assert (watch.returncode, err) == (1, "")  # the worker exits 3: the run failed
    frames = re.split(rf"\n\n(?=Run {run_id} · )", first + out)
    assert len(frames) >= 2
    assert "? Ship it?" in frames[0]
    assert frames[-1].startswith(f"Run {run_id} · crew test · failed · 1 failed")
    assert len(set(frames)) == len(frames)  # a frame only when something changed


@pytest.mark.parametrize("fast", [True, False])
def test_a_wait_for_an_acknowledgement_ends_when_its_task_ends_without_one(
    tmp_path: Path, home: Home, fast: bool
) -> None:
    # The worker read the steer and ended without acknowledging it: `--wait-ack` without a
    # --timeout waited for good (a CI step hung until the job's own timeout).
    write_crew(
        tmp_path, [{"id": "b", "prompt": "p"}], command=["sh", "-c", "echo start; read line"]
    )
    leader = Leader("run", "crew.toml", cwd=tmp_path)
    store = store_of(home, leader.run_id)
    eventually(lambda: store.state().tasks["b"].status is TaskStatus.RUNNING, timeout=20)

    steered = crew("steer", leader.run_id, "b", "go on", "--wait-ack", fast=fast, timeout=60)

    assert steered.returncode == 4, steered.stderr
    assert "which ended (completed) without acknowledging it" in steered.stderr
    assert leader.finish() == 0, leader.err


@pytest.mark.parametrize(
    "args",
    [("logs", "{run}", "b", "-f"), ("logs", "{run}", "-f"), ("events", "{run}", "--follow"), ("watch", "{run}")],
    ids=["logs of a task", "logs", "events", "watch"],
)  # fmt: skip
def test_a_follower_of_a_run_whose_leader_dies_says_so_and_ends(
    tmp_path: Path, home: Home, args: tuple[str, ...]
) -> None:
    # Killed, the leader left `crew logs -f`, `crew events --follow` and `crew watch | tee`
    # following a run that could no longer change: a CI job hung until its own timeout.
    write_crew(tmp_path, [{"id": "b", "prompt": "p"}], command=["sh", "-c", "echo start; sleep 60"])
    leader = Leader("run", "crew.toml", cwd=tmp_path)
    store = store_of(home, leader.run_id)
    log = store.paths.log("b")
    eventually(lambda: log.exists() and "start" in log.read_text(), timeout=20)
    command = [sys.executable, "-m", "crew", *(a.format(run=leader.run_id) for a in args)]
    follower = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert follower.stdout is not None
        assert follower.stdout.readline()  # following: it has shown what there is

        leader.process.kill()
        leader.finish()  # reaped: its pid is gone
        _, err = follower.communicate(timeout=30)
    finally:
        follower.kill()
        crew("cancel", leader.run_id)  # the worker the leader left

    assert follower.returncode == 4, err
    assert f"Run {leader.run_id} has no leader" in err and "crew resume" in err


def test_a_view_that_finds_its_leader_gone_is_woken_once_to_show_it(make_run: MakeRun) -> None:
    # The view was read while the leader lived, the leader died, then the watch asked what
    # would wake it: nothing (no leader left to die), and the view never said it was gone.
    from crew.domain import lease
    from crew.waiting import LeaderWatch

    store = make_run()
    start(store)
    dead = subprocess.Popen(["true"])
    dead.wait()  # reaped: a pid no process has any more
    lease.write_lease(store.paths, lease.new_lease(SESSION, 0).model_copy(update={"pid": dead.pid}))
    watch = LeaderWatch(store)
    run = store.state().run

    assert watch.wakeups(run) == ([], 0.0)  # at once: read the view again
    assert watch.wakeups(run) == ([], None)  # then only the files wake it


class _Waits:
    """A watcher that records how long it was asked to wait, and waits for nothing."""

    def __init__(self) -> None:
        self.asked: list[float | None] = []

    def wait(self, timeout: float | None) -> None:
        self.asked.append(timeout)

    def fileno(self) -> None:
        return None


@pytest.mark.parametrize("leader", ["none yet", "dead"])
def test_a_follower_gives_a_run_without_a_lease_a_moment_and_a_dead_leader_none(
    make_run: MakeRun, leader: str
) -> None:
    # A run is made before its leader takes the lease: `crew logs -f` started just then
    # said "no leader" and ended, where a leader that was and is gone needs no wait.
    from crew.domain import lease
    from crew.errors import Refused
    from crew.waiting import LeaderWatch

    store = make_run()
    if leader == "dead":
        dead = subprocess.Popen(["true"])
        dead.wait()
        info = lease.new_lease(SESSION, 0).model_copy(update={"pid": dead.pid})
        lease.write_lease(store.paths, info)
    watch, watcher, run = LeaderWatch(store), _Waits(), store.state().run

    watch.pause(watcher, run, None)  # first: look again (after a moment, if no lease yet)
    with pytest.raises(Refused, match="has no leader"):
        watch.pause(watcher, run, None)
    assert watcher.asked == ([1.0] if leader == "none yet" else [])
