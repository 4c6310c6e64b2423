"""Tasks a worker adds to its own run (`@supervisor spawn:`, the SDK's `spawn`): recorded as its
children; a parent that waits is `waiting` (never flagged) until they end, then is given their
results in one message and goes on."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from leaders import WORKER, Leader, eventually, store_of, toml_value, write_crew

from crew.models import Event
from crew.paths import Home
from crew.protocol import Malformed, SpawnRequest, parse_line, spawn_line
from crew.registry import Box, EventType, MessageKind, MessageStatus, RunStatus, TaskStatus
from crew.store import jsonl

SPAWNER = Path(__file__).parent / "workers" / "spawner.py"


def crew(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "crew", *args], capture_output=True, text=True, check=False
    )


def write_spawning_crew(folder: Path, child: str, *, may: list[str]) -> None:
    """Agent `w` runs the scripted worker; agent `lead` runs the spawner, whose task `parent`
    spawns `child` (a script) for `w` and waits for it."""
    scripted = [sys.executable, str(WORKER), "{prompt}"]
    spawner = [sys.executable, str(SPAWNER), "w", "{prompt}"]
    (folder / "crew.toml").write_text(
        "\n".join(
            [
                "[crew]",
                'name = "test"',
                "[agents.w]",
                f"command = {toml_value(scripted)}",
                "[agents.lead]",
                f"command = {toml_value(spawner)}",
                f"may = {toml_value(may)}",
                'waitTimeout = "200ms"',
                'stallAfter = "200ms"',
                "[[tasks]]",
                'id = "parent"',
                'agent = "lead"',
                f"prompt = {toml_value(child)}",
            ]
        )
        + "\n"
    )


def test_three_tasks_from_the_cli_and_one_a_worker_spawns_and_waits_for(
    tmp_path: Path, home: Home
) -> None:
    go = tmp_path / "go"
    child = f"until:{go} ; say:@supervisor status: the child built it"
    write_spawning_crew(tmp_path, child, may=["spawn"])
    leader = Leader("run", "crew.toml", cwd=tmp_path)
    store = store_of(home, leader.run_id)

    added = [
        crew("add", leader.run_id, "--agent", "w", "--id", "a", "say:a"),
        crew("add", leader.run_id, "--agent", "w", "--id", "b", "--depends-on", "a", "say:b"),
        crew("add", leader.run_id, "--agent", "w", "--id", "c", "say:c"),
    ]
    assert [r.returncode for r in added] == [0, 0, 0], [r.stderr for r in added]

    parent = eventually(
        lambda: (t := store.state().tasks["parent"]).status is TaskStatus.WAITING and t, 20
    )
    assert parent.waiting_for == ["parent.1"] and parent.contact is None
    spawned = store.state().tasks["parent.1"]
    assert (spawned.parent, spawned.agent, spawned.prompt) == ("parent", "w", child)
    # Waiting for its child is not silence nor a question left unanswered: never flagged.
    eventually(lambda: store.state().tasks["c"].status is TaskStatus.COMPLETED, 20)
    time.sleep(1.0)  # five times waitTimeout and stallAfter: room for a monitor to misfire
    assert store.state().tasks["parent"].status is TaskStatus.WAITING
    status = json.loads(crew("status", leader.run_id, "--json").stdout)
    assert {t["id"]: t["status"] for t in status["tasks"]}["parent"] == "waiting"
    shown = crew("status", leader.run_id).stdout
    assert any(line.split()[:2] == ["parent", "waiting"] and line.rstrip().endswith(
        "waiting for parent.1") for line in shown.splitlines()), shown  # fmt: skip

    go.touch()
    assert leader.finish() == 0, leader.err
    state = store.state()
    assert state.run.status is RunStatus.COMPLETED
    assert {t.id: t.status for t in state.task_list()} == dict.fromkeys(
        ["parent", "a", "b", "c", "parent.1"], TaskStatus.COMPLETED
    )
    told = [m for m in store.messages(Box.INBOX) if m.task_id == "parent"]
    assert len(told) == 1 and told[0].kind is MessageKind.FOLLOW_UP
    assert told[0].status is MessageStatus.ACKNOWLEDGED
    result = {"id": "parent.1", "agent": "w", "status": "completed", "result": "the child built it"}
    assert told[0].data is not None and told[0].data["children"] == [result]
    assert told[0].body == "Your tasks have ended:\n- parent.1 (completed): the child built it"
    log = store.paths.log("parent").read_text()
    assert f"child result: {json.dumps(result, sort_keys=True)}" in log
    events = jsonl.read(store.paths.events, Event).records
    flagged = [e for e in events if e.task_id == "parent" and e.type is EventType.TASK_FLAGGED]
    assert flagged == []


def test_a_spawn_its_agent_may_not_make_is_refused_and_the_worker_told(
    tmp_path: Path, home: Home
) -> None:
    write_spawning_crew(tmp_path, "say:never", may=[])
    leader = Leader("run", "crew.toml", cwd=tmp_path)
    store = store_of(home, leader.run_id)

    assert leader.finish() == 1  # the spawner exits 1 when its child did not complete
    state = store.state()
    assert list(state.tasks) == ["parent"]
    log = store.paths.log("parent").read_text()
    assert '"status": "refused"' in log
    assert 'Task parent may not add tasks: add \\"spawn\\" to `may` in [agents.lead].' in log


#: Asks for a child named `kid` and a final newline, and prints what it was told.
NEWLINE_NAMER = """
import json, sys
print("@supervisor spawn: " + json.dumps({"agent": "w", "prompt": "x", "id": "kid\\n"}), flush=True)
print("told:", json.loads(sys.stdin.readline())["body"], flush=True)
"""


def test_a_spawn_naming_its_child_with_a_final_newline_is_refused_and_the_worker_told(
    tmp_path: Path, home: Home
) -> None:
    script = tmp_path / "namer.py"
    script.write_text(NEWLINE_NAMER)
    command = [sys.executable, str(script)]
    write_crew(
        tmp_path, [{"id": "parent", "prompt": "x"}], command=command, agent={"may": ["spawn"]}
    )
    leader = Leader("run", "crew.toml", cwd=tmp_path)
    store = store_of(home, leader.run_id)

    assert leader.finish() == 0  # told, not failed: Python's `$` once took `kid\n` for an id
    assert list(store.state().tasks) == ["parent"]
    told = store.paths.log("parent").read_text()
    assert "told: Refused: Invalid task id 'kid\\n'" in told


NAMING_PARENT = """
import os, sys, time
from crew.worker import Worker

worker = Worker.from_env()
if sys.argv[1] == "parent":
    if os.environ["NAMED"]:
        told = worker.spawn("w", "child work", task_id="kid")
    else:  # the same request twice: two children, each the same one again after a restart
        worker.spawn("w", "child work", wait=False)
        told = worker.spawn("w", "child work")
    print(f"attempt {worker.attempt} told {told['status']}: {told.get('result')}", flush=True)
    sys.exit(0 if told["status"] == "completed" else 1)
while not os.path.exists(os.environ["GO_ON"]):  # held until the leader has been killed
    time.sleep(0.05)
worker.report("the child built it")
"""


@pytest.mark.parametrize(
    ("named", "children"), [(True, ["kid"]), (False, ["par.1", "par.2"])], ids=["named", "unnamed"]
)
def test_a_spawn_a_new_attempt_asks_again_waits_for_the_same_child(
    tmp_path: Path, home: Home, named: bool, children: list[str]
) -> None:
    # After `kill -9` and `crew resume`, the parent's new attempt spawned its named child again
    # and was refused ("already has a task 'kid'"): it never heard of the child's result. One
    # that named none got a second child, doing the same work again.
    script = tmp_path / "naming.py"
    script.write_text(NAMING_PARENT)
    go_on = tmp_path / "go-on"
    write_crew(
        tmp_path,
        [{"id": "par", "prompt": "parent"}],
        command=["{python}", str(script), "{prompt}"],
        agent={"may": ["spawn"], "env": {"GO_ON": str(go_on), "NAMED": "1" if named else ""}},
    )
    leader = Leader("run", "crew.toml", cwd=tmp_path)
    store = store_of(home, leader.run_id)
    eventually(lambda: store.state().tasks["par"].waiting_for == children[-1:], timeout=20)

    leader.process.kill()  # SIGKILL: the parent waits, the child is held
    leader.finish()
    go_on.touch()
    resumed = Leader("resume", leader.run_id, cwd=tmp_path)
    assert resumed.finish(timeout=60) == 0, resumed.err

    state = store.state()
    assert sorted(state.tasks) == sorted(["par", *children])
    assert state.tasks["par"].status is TaskStatus.COMPLETED
    assert "attempt 2 told completed: the child built it" in store.paths.log("par").read_text()
    refusals = [
        e for e in jsonl.read(store.paths.events, Event).records if e.type is EventType.AGENT_ERROR
    ]
    assert refusals == []


@pytest.mark.parametrize(
    ("line", "parsed"),
    [
        ('@supervisor spawn: {"agent": "w", "prompt": "go"}', SpawnRequest("w", "go")),
        ('@supervisor spawn: {"agent": "w", "prompt": "go", "id": "x", "wait": true}', SpawnRequest("w", "go", "x", True)),
        ('@supervisor spawn: ["w"]', "spawn needs a JSON object"),
        ('@supervisor spawn: {"agent": "w"}', "spawn needs an agent and a prompt"),
        ('@supervisor spawn: {"agent": "w", "prompt": "go", "wait": 1}', "spawn's wait must be a bool"),
        ('@supervisor spawn: {"agent": "w", "prompt": "go", "dir": "/"}', "spawn has no field 'dir' (fields: agent, prompt, id, wait)"),
        ("@supervisor spawn: {nope", "spawn needs JSON: not valid JSON"),
    ],
)  # fmt: skip
def test_the_spawn_line_parses_or_says_why_not(line: str, parsed: object) -> None:
    found = parse_line(line)

    if isinstance(parsed, SpawnRequest):
        assert found == parsed
        assert parse_line(spawn_line(parsed.agent, parsed.prompt, task_id=parsed.task_id,
                                     wait=parsed.wait)) == parsed  # fmt: skip
    else:
        assert isinstance(found, Malformed) and found.reason.startswith(str(parsed))
