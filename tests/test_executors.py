"""Choosing what runs the workers (`[crew] executor`): a Ray executor that cannot be used is a
clear error before any run is made; resources and `[ray]` are checked like every other key.
Ray itself is not needed here (tests/test_ray.py runs a real cluster)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from leaders import write_crew

from crew.paths import Home
from crew.store.runstore import RunStore


def crew_run(tmp_path: Path, *, fake_ray: bool, **env: str) -> subprocess.CompletedProcess[str]:
    """`crew run` of a Ray crew, with an empty stand-in `ray` package on the path (`fake_ray`),
    enough for the check that Ray is installed, or with Ray hidden (`fake_ray=False`)."""
    write_crew(tmp_path, [{"id": "t", "prompt": "say:hi"}], crew={"executor": "ray"})
    stand_in = tmp_path / "site"
    package = stand_in / "ray"
    package.mkdir(parents=True)
    if fake_ray:
        (package / "__init__.py").write_text("")
    else:  # a path entry where `import ray` finds nothing, ahead of any installed Ray
        package.rmdir()
        (stand_in / "sitecustomize.py").write_text(
            "import sys\nsys.modules['ray'] = None  # as if Ray were not installed\n"
        )
    variables = {**os.environ, "PYTHONPATH": str(stand_in), **env}
    return subprocess.run(
        [sys.executable, "-m", "crew", "run", "crew.toml", "--no-input"],
        cwd=tmp_path, env=variables, capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])  # nothing listens there once it is closed


def test_a_cluster_that_is_down_is_an_error_at_once_and_no_run_is_made(
    tmp_path: Path, home: Home
) -> None:
    address = f"127.0.0.1:{closed_port()}"
    result = crew_run(tmp_path, fake_ray=True, RAY_ADDRESS=address)
    assert result.returncode == 1
    assert result.stderr == (
        f"crew: error: Cannot reach the Ray cluster at {address}: [Errno 111] Connection refused\n"
        "Check RAY_ADDRESS or crew.toml's [ray] address, and that the cluster is up.\n"
    )
    assert not home.runs_dir.exists() or not any(home.runs_dir.iterdir())


def test_an_address_that_is_not_host_and_port_is_named(tmp_path: Path, home: Home) -> None:
    result = crew_run(tmp_path, fake_ray=True, RAY_ADDRESS="head-node")
    assert result.returncode == 1
    assert result.stderr.startswith(
        "crew: error: Cannot reach the Ray cluster at head-node: 'head-node' is not a host:port "
        "address\n"
    )


def test_ray_not_installed_says_how_to_install_it(tmp_path: Path, home: Home) -> None:
    result = crew_run(tmp_path, fake_ray=False, RAY_ADDRESS="127.0.0.1:1")
    assert result.returncode == 1
    assert result.stderr == (
        'crew: error: crew.toml says executor = "ray", but Ray is not installed here.\n'
        "Install it with `pip install 'crew[ray]'`.\n"
    )
    assert not home.runs_dir.exists() or not any(home.runs_dir.iterdir())


@pytest.mark.parametrize(
    ("document", "said"),
    [
        ({"crew": {"executor": "slurm"}}, "crew.executor"),
        ({"ray": {"workspace": "git"}}, 'workspace = "git" needs `repo`'),
        ({"ray": {"adress": "auto"}}, "ray.adress"),
        ({"tasks": [{"id": "t", "agent": "w", "prompt": "p", "ref": "main"}]}, "tasks[0].ref"),
        ({"agents": {"w": {"resources": {"cpus": -1}}}}, "agents.w.resources.cpus"),
        ({"agents": {"w": {"resources": {"memory": "lots"}}}}, "agents.w.resources.memory"),
        ({"agents": {"w": {"resources": {"custom": {"licence": -2}}}}}, "licence"),
    ],
)
def test_executor_keys_are_checked_like_any_other(
    tmp_path: Path, document: dict[str, Any], said: str
) -> None:
    from crew.config import parse_config
    from crew.config_checks import InvalidConfig

    agents = {"w": {"command": "echo", **document.get("agents", {}).get("w", {})}}
    tasks = document.get("tasks", [{"id": "t", "agent": "w", "prompt": "p"}])
    whole = {**document, "agents": agents, "tasks": tasks}
    with pytest.raises(InvalidConfig) as raised:
        parse_config(whole)
    assert said in str(raised.value)


def test_resources_become_rays_names() -> None:
    from crew.config import Resources

    wanted = Resources.model_validate({"cpus": 0.5, "memory": "2GiB", "custom": {"licence": 1}})
    assert wanted.as_dict() == {"CPU": 0.5, "GPU": 0.0, "licence": 1.0, "memory": 2 * 1024**3}
    assert Resources().as_dict() == {"CPU": 1.0, "GPU": 0.0}


def status_of(store: RunStore, *, fast: str = "1") -> list[str]:
    return subprocess.run(
        [sys.executable, "-m", "crew", "status", store.run_id],
        capture_output=True, text=True, check=True, env={**os.environ, "CREW_FAST": fast},
    ).stdout.splitlines()  # fmt: skip


def started_run(make_run: Callable[..., RunStore]) -> RunStore:
    """A run whose task `plan` was started on a Ray cluster, not placed yet."""
    from crew.domain import change, tasks

    store = make_run()
    with change(store) as txn:
        tasks.start(txn, "plan", attempt=1, pid=None)
    return store


def placed_run(make_run: Callable[..., RunStore]) -> RunStore:
    """A run whose task `plan` runs on a Ray node (as the leader records it)."""
    from crew.domain import change, tasks

    store = started_run(make_run)
    with change(store) as txn:
        tasks.placed(txn, "plan", 1, node="c1c91b54@10.0.0.7", pid=4242)
    return store


@pytest.mark.parametrize("fast", ["1", "0"])
def test_status_shows_where_each_remote_task_runs(
    make_run: Callable[..., RunStore], fast: str
) -> None:
    waiting = next(line for line in status_of(started_run(make_run), fast=fast) if "plan" in line)
    assert waiting.endswith("waiting for a node")
    store = placed_run(make_run)
    lines = status_of(store, fast=fast)
    header = next(line for line in lines if line.startswith("TASK"))
    assert header.split() == [
        "TASK", "STATUS", "AGENT", "ATTEMPT", "SINCE", "PENDING", "WHERE", "NOTE",
    ]  # fmt: skip
    plan = next(line for line in lines if line.startswith("plan "))
    build = next(line for line in lines if line.startswith("build "))
    assert "c1c91b54@10.0.0.7 pid 4242" in plan and build.split()[6] == "-"
    assert "waiting for a node" not in plan
    task = store.state().task("plan")
    assert (task.node, task.pid) == ("c1c91b54@10.0.0.7", 4242)
    placed = [e for e in store.events().records if e.type.value == "task.placed"]
    assert [e.message for e in placed] == ["task plan runs on node c1c91b54@10.0.0.7 (pid 4242)"]


def test_a_local_run_has_no_where_column(make_run: Callable[..., RunStore]) -> None:
    assert not any("WHERE" in line for line in status_of(make_run()))


def test_the_live_view_shows_where_each_remote_task_runs(
    make_run: Callable[..., RunStore],
) -> None:
    from rich.console import Console

    from crew.dashboard import Dashboard

    unplaced = Dashboard(started_run(make_run), session="someone", interactive=False)
    console = Console(width=160, record=True, color_system=None)
    console.print(unplaced.render(unplaced.view()))
    assert "waiting for a node" in console.export_text()

    store = placed_run(make_run)
    board = Dashboard(store, session="someone", interactive=False, watching=True)
    console = Console(width=160, record=True, color_system=None)
    console.print(board.render(board.view()))
    text = console.export_text()
    assert "WHERE" in text and "c1c91b54@10.0.0.7 pid 4242" in text

    local = Dashboard(make_run(), session="someone", interactive=False, watching=True)
    console = Console(width=160, record=True, color_system=None)
    console.print(local.render(local.view()))
    assert "WHERE" not in console.export_text()


def test_cancel_leaves_a_remote_worker_to_its_leader(make_run: Callable[..., RunStore]) -> None:
    """Its pid is another machine's: `crew cancel` must not look for it here (its leader stops
    it through Ray: tests/test_ray.py)."""
    store = placed_run(make_run)
    cancelled = subprocess.run(
        [sys.executable, "-m", "crew", "cancel", store.run_id, "plan"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert cancelled.returncode == 0, cancelled.stderr
    assert "Worker of plan" not in cancelled.stdout
    assert store.state().task("plan").status.value == "cancelled"


def test_a_killed_remote_worker_whose_node_does_not_answer_is_taken_for_lost(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The leader stops waiting for a node that does not answer (its cluster's head is gone);
    the bridge's late word changes nothing, and closes only its own descriptors."""
    from crew.executors import ray_bridge as ray_executor

    monkeypatch.setattr(ray_executor, "_UNANSWERED", 0.05)
    handle = ray_executor.RayHandle(actor=None, program="sh", merge_stderr=False)
    handle.placed(4242, "c1c91b54@10.0.0.7")
    assert handle.settle() is False  # placed, not ended
    assert handle.wait() == -9
    assert handle.lost == "node c1c91b54@10.0.0.7 did not answer for 0.05 s"
    assert handle.settle() is True and handle.poll() == -9
    handle.end(0)  # the bridge, later: its outcome was decided already
    assert (handle.wait(), handle.lost) == (-9, "node c1c91b54@10.0.0.7 did not answer for 0.05 s")
    assert handle.out_w == handle.err_w == handle.in_r == -1
    handle.close()


def test_workers_ray_lost_before_placing_pace_the_next_start() -> None:
    """A cluster with no node left must not have the leader create and lose workers as fast as
    it can: each loss before placement doubles the pause before the next start; a placement
    ends it. The pause is a spawn fault (EAGAIN): the leader holds the start back, degraded."""
    import errno

    from crew.executors.ray_bridge import Pacing
    from crew.leader.degraded import SPAWN_FAULTS, fault_of

    pacing = Pacing()
    pacing.check()  # nothing lost: at once
    for expected in [0.5, 1, 2, 4, 8, 16, 30, 30]:  # 0.5 s doubling, at most 30 s
        before = time.monotonic()
        pacing.lost_unplaced()
        after = time.monotonic()
        assert before + expected <= pacing.not_before <= after + expected
        with pytest.raises(OSError) as held:
            pacing.check()
        assert fault_of(held.value, SPAWN_FAULTS) == errno.EAGAIN
    assert "Ray lost the last 8 worker(s) before placing them" in str(held.value)
    pacing.placed()
    pacing.check()
