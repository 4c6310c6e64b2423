"""The Ray executor on a real multi-node Ray cluster, all on this machine (ray.cluster_utils):
the same crew.toml as locally but for `[crew] executor`, the verbs and contacts reaching remote
workers, cancel confirmed on the node, and a node lost mid-run (`make test-ray`; skipped
without the `ray` extra)."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import SESSION
from leaders import Leader, eventually, store_of, write_crew

from crew import verbs
from crew.paths import Home
from crew.procs.liveness import is_zombie
from crew.registry import EventType, TaskStatus
from crew.store.runstore import RunStore
from crew.waiting import Until, wait_for_run

ray_cluster_utils = pytest.importorskip("ray.cluster_utils")
pytestmark = pytest.mark.ray

#: Worker nodes of the test cluster (the head runs no worker: it has no CPU to give).
NODES = 3
NODE_CPUS = 2
#: Ray's cluster may take its time on a busy 2-core machine.
SLOW = 90.0


def _running(name: str) -> Iterator[int]:
    """The pids of this machine's live processes named `name` (a zombie runs nothing)."""
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError), open(f"/proc/{entry}/comm") as comm:
                if comm.read().strip() == name and not is_zombie(int(entry)):
                    yield int(entry)


def test_auto_with_no_cluster_running_is_an_error_and_no_run_is_made(
    tmp_path: Path, home: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    # First in this file, before its cluster starts: `auto` finds any Ray on this machine.
    if any(_running("gcs_server")):
        pytest.skip("a Ray cluster runs on this machine: `auto` would find it")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    ray_crew(tmp_path, "true", 'address = "auto"')
    result = crew("run", "crew.toml", "--no-input")
    assert result.returncode == 1
    assert result.stderr.startswith(
        "crew: error: Cannot reach the Ray cluster at auto: Could not find any running Ray"
    )
    assert not home.runs_dir.exists() or not any(home.runs_dir.iterdir())


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    made = ray_cluster_utils.Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    nodes = [
        made.add_node(num_cpus=NODE_CPUS, resources={"licence": 1} if index == 0 else {})
        for index in range(NODES)
    ]
    made.licensed = nodes[0]  # the one node with a licence
    made.wait_for_nodes()
    yield made
    made.shutdown()


@pytest.fixture
def on_cluster(cluster: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("RAY_ADDRESS", cluster.address)
    return cluster


def crew(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "crew", *args], capture_output=True, text=True, check=False
    )


def events_of(store: RunStore) -> list[Any]:
    return list(store.events().records)


def log_of(store: RunStore, task: str) -> str:
    path = store.paths.log(task)
    return path.read_text() if path.exists() else ""


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return not is_zombie(pid)


SDK_AGENT = Path(__file__).parent / "workers" / "sdk_agent.py"


@pytest.mark.parametrize("executor", ["local", "ray"])
def test_the_same_crew_runs_here_and_on_the_cluster_with_every_verb(
    tmp_path: Path, home: Home, executor: str, request: pytest.FixtureRequest
) -> None:
    if executor == "ray":
        request.getfixturevalue("on_cluster")
    (tmp_path / "crew.toml").write_text(
        f'[crew]\nexecutor = "{executor}"\n'
        f'[agents.sdk]\ncommand = ["{sys.executable}", "{SDK_AGENT}"]\n'
        f'[agents.w]\ncommand = ["{sys.executable}", "{Path(__file__).parent / "workers" / "scripted.py"}", "{{prompt}}"]\n'
        '[[tasks]]\nid = "coder"\nagent = "sdk"\nprompt = "code"\n'
        '[[tasks]]\nid = "helper"\nagent = "w"\n'
        'prompt = "ask:need_input:which branch? ; read ; ack ; await:nudge ; exit:0"\n'
    )
    leader = Leader("run", "crew.toml", cwd=tmp_path)
    store = store_of(home, leader.run_id)
    wait_for_run(store, Until.WAITING, task_id="coder", timeout=SLOW)
    verbs.respond(store, "coder", "sqlite", session=SESSION)  # a contact, answered
    job = verbs.follow_up(store, "coder", "add the users table", session=SESSION).message
    eventually(lambda: "working on add the users table" in log_of(store, "coder"), SLOW)
    verbs.steer(store, "coder", "use uuids for ids", session=SESSION)  # the attention loop
    wait_for_run(store, Until.WAITING, task_id="helper", timeout=SLOW)
    verbs.respond(store, "helper", "main", session=SESSION)
    eventually(lambda: "got respond main" in log_of(store, "helper"), SLOW)
    verbs.nudge(store, "helper", session=SESSION)

    assert leader.finish(timeout=SLOW) == 0, leader.err
    coder = log_of(store, "coder")
    assert "preempted by use uuids for ids" in coder and f"resumed {job.body}" in coder
    assert "got nudge" in log_of(store, "helper")
    state = store.state()
    placed = [e for e in events_of(store) if e.type is EventType.TASK_PLACED]
    if executor == "ray":
        node_ids = {n.node_id[:8] for n in request.getfixturevalue("cluster").worker_nodes}
        assert {t.node.split("@")[0] for t in state.task_list() if t.node} <= node_ids
        assert {e.task_id for e in placed} == {"coder", "helper"}
    else:
        assert not placed and all(t.node is None for t in state.task_list())


def test_status_shows_the_node_and_pid_of_each_remote_worker(
    tmp_path: Path, home: Home, on_cluster: Any
) -> None:
    go = tmp_path / "go"
    write_crew(
        tmp_path, [{"id": "t", "prompt": f"say:up ; until:{go} ; exit:0"}], crew={"executor": "ray"}
    )
    leader = Leader("run", "crew.toml", cwd=tmp_path)
    store = store_of(home, leader.run_id)
    task = eventually(lambda: (t := store.state().task("t")).node and t, SLOW)
    shown = crew("status", leader.run_id).stdout
    header = next(line for line in shown.splitlines() if line.startswith("TASK"))
    row = next(line for line in shown.splitlines() if line.startswith("t "))
    assert "WHERE" in header and f"{task.node} pid {task.pid}" in row
    eventually(lambda: "up" in log_of(store, "t"), SLOW)  # output streamed as it comes
    assert not go.exists()
    go.touch()
    assert leader.finish(timeout=SLOW) == 0, leader.err
    logs = crew("logs", leader.run_id).stdout
    assert "t | up" in logs


def test_resources_decide_where_a_worker_runs(tmp_path: Path, home: Home, on_cluster: Any) -> None:
    write_crew(
        tmp_path,
        [{"id": f"t{n}", "prompt": "say:licensed ; exit:0"} for n in range(3)],
        crew={"executor": "ray"},
        agent={"resources": {"cpus": 0.5, "custom": {"licence": 1}}},
    )
    leader = Leader("run", "crew.toml", cwd=tmp_path)
    assert leader.finish(timeout=SLOW) == 0, leader.err
    nodes = {t.node for t in store_of(home, leader.run_id).state().task_list()}
    licensed = on_cluster.licensed.node_id[:8]
    assert len(nodes) == 1 and all(n and n.startswith(licensed) for n in nodes)


def test_cancel_reaches_the_remote_process_and_is_confirmed(
    tmp_path: Path, home: Home, on_cluster: Any
) -> None:
    # It says when SIGTERM reached it: neither the `crew cancel` process (the pid is another
    # machine's, as far as it knows) nor the end of its actor (SIGKILL) would make it say so.
    trap = 'trap "echo got TERM; exit 0" TERM; echo up; while :; do sleep 0.1; done'
    ray_crew(tmp_path, trap, "")
    leader = Leader("run", "crew.toml", cwd=tmp_path)
    store = store_of(home, leader.run_id)
    task = eventually(lambda: (t := store.state().task("t")).pid and t, SLOW)
    eventually(lambda: "up" in log_of(store, "t"), SLOW)
    assert alive(task.pid)  # the cluster's nodes are processes of this machine

    cancelled = crew("cancel", leader.run_id, "t")
    assert cancelled.returncode == 0, cancelled.stderr
    assert "Worker of t" not in cancelled.stdout  # not stopped from here: by its leader, there
    leader.finish(timeout=SLOW)
    assert store.state().task("t").status is TaskStatus.CANCELLED
    assert "got TERM" in log_of(store, "t")  # the leader's signal reached it on its node
    assert not alive(task.pid)


def test_a_command_missing_on_the_node_fails_the_attempt_with_why(
    tmp_path: Path, home: Home, on_cluster: Any
) -> None:
    write_crew(
        tmp_path,
        [{"id": "t", "prompt": "x"}],
        crew={"executor": "ray"},
        command=["no-such-program-here"],
    )
    leader = Leader("run", "crew.toml", cwd=tmp_path)
    assert leader.finish(timeout=SLOW) == 1
    task = store_of(home, leader.run_id).state().task("t")
    assert task.status is TaskStatus.FAILED
    assert task.error == (
        "cannot start 'no-such-program-here' on its node: No such file or directory: "
        "no-such-program-here"
    )


def test_a_node_lost_mid_run_requeues_its_task_elsewhere_and_nothing_is_lost(
    tmp_path: Path, home: Home, on_cluster: Any
) -> None:
    go = tmp_path / "go"
    script = f"await:steer ; until:{go} ; exit:0"
    write_crew(
        tmp_path,
        [{"id": name, "prompt": script} for name in ("a", "b", "c")],
        crew={"executor": "ray"},
        agent={"resources": {"cpus": NODE_CPUS}},  # one worker a node
    )
    leader = Leader("run", "crew.toml", cwd=tmp_path)
    store = store_of(home, leader.run_id)
    eventually(lambda: all(t.node for t in store.state().task_list()), SLOW)
    steers = {
        name: verbs.steer(store, name, f"keep {name}", session=SESSION).message.id
        for name in ("a", "b", "c")
    }
    eventually(lambda: all(f"got steer keep {n}" in log_of(store, n) for n in "abc"), SLOW)
    lost_node = store.state().task("a").node
    assert lost_node is not None
    doomed = next(n for n in on_cluster.worker_nodes if n.node_id.startswith(lost_node[:8]))

    on_cluster.remove_node(doomed, allow_graceful=False)  # as a machine that dies
    interrupted = eventually(
        lambda: [e for e in events_of(store) if e.type is EventType.TASK_INTERRUPTED], SLOW
    )
    assert interrupted[0].task_id == "a" and lost_node in (interrupted[0].message or "")
    go.touch()
    assert leader.finish(timeout=SLOW) == 0, leader.err
    assert "raylet" not in (leader.out + leader.err).lower()  # Ray's own messages stay out

    state = store.state()
    a = state.task("a")
    # Until Ray declares the node dead, a new attempt may be placed on it, and lost too: every
    # attempt after the first was interrupted, none failed, and the last ran elsewhere.
    assert a.status is TaskStatus.COMPLETED and a.attempt >= 2 and a.failures == 0
    assert a.node is not None and a.node != lost_node
    interrupted = [e for e in events_of(store) if e.type is EventType.TASK_INTERRUPTED]
    assert [e.task_id for e in interrupted] == ["a"] * (a.attempt - 1)
    assert all(state.task(name).attempt == 1 for name in ("b", "c"))
    # Its steer was given again to each next attempt; the last one acknowledged it.
    assert log_of(store, "a").count("got steer keep a") >= 2
    shown = crew("mailbox", leader.run_id, "--json")
    messages = json.loads(shown.stdout)
    assert {m["id"] for m in messages} == set(steers.values())
    assert {m["status"] for m in messages} == {"acknowledged"}
    given_again = [e for e in events_of(store) if e.type is EventType.MAILBOX_CARRIED]
    assert len(given_again) == a.attempt - 1
    assert all(steers["a"] in (e.message or "") for e in given_again)


def ray_crew(folder: Path, command: str, ray: str, *, agent: str = "") -> None:
    """A crew of one `sh -c COMMAND` task on the cluster, with `[ray]` keys `ray`."""
    (folder / "crew.toml").write_text(
        '[crew]\nexecutor = "ray"\n'
        f"[ray]\n{ray}\n"
        f'[agents.sh]\ncommand = ["sh", "-c", {json.dumps(command)}]\nprotocol = "text"\n{agent}\n'
        '[[tasks]]\nid = "t"\nagent = "sh"\nprompt = "x"\n'
    )


def test_an_uploaded_workspace_is_a_copy_on_the_node(
    tmp_path: Path, home: Home, on_cluster: Any
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "data.txt").write_text("from the leader's folder\n")
    ray_crew(
        tmp_path,
        "pwd; cat data.txt; echo changed > data.txt",
        'workspace = "upload"',
        agent='cwd = "work"',
    )
    leader = Leader("run", "crew.toml", cwd=tmp_path)
    store = store_of(home, leader.run_id)
    assert leader.finish(timeout=SLOW) == 0, store.state().task("t").error
    where, said = log_of(store, "t").splitlines()[:2]
    assert said == "from the leader's folder"
    assert Path(where) != work  # Ray's copy of it
    assert (work / "data.txt").read_text() == "from the leader's folder\n"  # changes stay there


def test_a_git_workspace_is_a_clone_at_the_ref_removed_at_the_end(
    tmp_path: Path, home: Home, on_cluster: Any
) -> None:
    repo = tmp_path / "repo"
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q", "-b", "main", str(repo)], check=True)
    (repo / "file.txt").write_text("on main\n")
    subprocess.run([*git, "-C", str(repo), "add", "."], check=True)
    subprocess.run([*git, "-C", str(repo), "commit", "-qm", "main"], check=True)
    subprocess.run([*git, "-C", str(repo), "checkout", "-qb", "feature"], check=True)
    (repo / "file.txt").write_text("on feature\n")
    subprocess.run([*git, "-C", str(repo), "commit", "-qam", "feature"], check=True)
    subprocess.run([*git, "-C", str(repo), "checkout", "-q", "main"], check=True)
    ray_crew(tmp_path, "pwd; cat file.txt", f'workspace = "git"\nrepo = "{repo}"\nref = "feature"')
    with (tmp_path / "crew.toml").open("a") as crew_toml:  # a second task, at a ref of its own
        crew_toml.write('[[tasks]]\nid = "m"\nagent = "sh"\nprompt = "x"\nref = "main"\n')
    leader = Leader("run", "crew.toml", cwd=tmp_path)
    assert leader.finish(timeout=SLOW) == 0, leader.err
    store = store_of(home, leader.run_id)
    where, said = log_of(store, "t").splitlines()[:2]
    assert said == "on feature"
    assert log_of(store, "m").splitlines()[1] == "on main"
    assert Path(where).name.startswith("crew-worker-")
    eventually(lambda: not Path(where).exists(), SLOW)  # removed once the worker ended


def test_a_git_ref_that_does_not_exist_fails_the_attempt_with_why(
    tmp_path: Path, home: Home, on_cluster: Any
) -> None:
    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(repo), "commit", "-q",
         "--allow-empty", "-m", "first"], check=True,
    )  # fmt: skip
    ray_crew(tmp_path, "true", f'workspace = "git"\nrepo = "{repo}"\nref = "no-such-ref"')
    leader = Leader("run", "crew.toml", cwd=tmp_path)
    assert leader.finish(timeout=SLOW) == 1
    error = store_of(home, leader.run_id).state().task("t").error or ""
    assert error.startswith("cannot start 'sh' on its node: ") and "no-such-ref" in error


def test_how_an_attempt_ends_when_ray_cuts_it_short() -> None:
    import ray.exceptions as errors

    from crew.executors.ray_bridge import RayHandle, _lost_or_failed

    handle = RayHandle(actor=None, program="sh", merge_stderr=True)
    try:
        handle.placed(4242, "c1c91b54@10.0.0.7")
        lost = _lost_or_failed(handle, errors.ActorDiedError())
        assert lost == {
            "status": -9,
            "lost": "node c1c91b54@10.0.0.7 was lost (Ray: ActorDiedError)",
        }
        broken = errors.RayTaskError("write", "Traceback…", OSError(5, "Input/output error"))
        assert _lost_or_failed(handle, broken) == {
            "status": 1,
            "failure": "its Ray actor failed: OSError: [Errno 5] Input/output error",
        }
        bug = _lost_or_failed(handle, KeyError("pid"))  # the bridge's own bug: this task only
        assert bug == {"status": 1, "failure": "its Ray actor failed: KeyError: 'pid'"}
        handle.killed = True  # crew's own SIGKILL: an exit by signal, not a loss
        assert _lost_or_failed(handle, errors.ActorDiedError()) == {"status": -9}
    finally:
        handle.end(1)
        handle.close()
