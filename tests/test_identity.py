"""Worker identity: what the leader gives a worker, what a worker may do to its own run (and
to others), and how session ids and idempotency keys are checked."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import SESSION, config, snapshot_files
from hypothesis import given, settings
from hypothesis import strategies as st

from crew import ids, verbs
from crew.adapters import adapter_for
from crew.domain import change, tasks
from crew.errors import Refused, UsageError
from crew.leader import spawn
from crew.leader.takeover import claim
from crew.models import Event
from crew.paths import Home
from crew.registry import EventType
from crew.session import Actor, WorkerCredentials, current_actor
from crew.store import jsonl
from crew.store.runstore import RunStore

MakeRun = Callable[..., RunStore]


def _crew(*, may: list[str] | None = None, **agent: Any) -> Any:
    """plan, build and check: three independent tasks of one agent (with `may`)."""
    coder: dict[str, Any] = {"command": ["true"], **agent}
    if may is not None:
        coder["may"] = may
    return config(
        agents={"coder": coder},
        tasks=[{"id": t, "agent": "coder", "prompt": t} for t in ("plan", "build", "check")],
    )


def _worker_of(store: RunStore, task_id: str = "plan", attempt: int = 1) -> Actor:
    """Start `task_id` as the leader would, and the actor its worker's commands are."""
    token = ids.new_worker_token()
    with change(store) as txn:
        tasks.start(txn, task_id, attempt=attempt, pid=1, token_hash=ids.token_hash(token))
    credentials = WorkerCredentials(store.run_id, task_id, token, store.paths.home.root)
    return Actor(ids.worker_session(task_id), credentials)


def _events(store: RunStore, kind: EventType) -> list[Event]:
    return [e for e in jsonl.read(store.paths.events, Event).records if e.type is kind]


def _refused(store: RunStore, act: Callable[[], object]) -> str:
    """Run `act`, which must be refused (exit 4) and write nothing; returns the sentence."""
    before = snapshot_files(store.paths.root)
    with pytest.raises(Refused) as refused:
        act()
    assert snapshot_files(store.paths.root) == before
    return refused.value.message


# ----------------------------------------------------------------------------- the launch


def test_a_worker_acts_as_its_task_whatever_session_the_leader_had(
    make_run: MakeRun, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CREW_SESSION_ID", "owner@host")
    store = make_run(_crew())
    state = store.state()
    agent = state.run.config.agents["coder"]

    launch = spawn.launch_for(
        state.run, state.tasks["plan"], agent, store.paths, adapter_for(agent), attempt=1
    )

    assert launch.env["CREW_SESSION_ID"] == "task:plan"
    token = launch.env["CREW_WORKER_TOKEN"]
    assert len(token) >= 43  # 256 random bits
    assert launch.token_hash == hashlib.sha256(token.encode()).hexdigest()
    again = spawn.launch_for(
        state.run, state.tasks["plan"], agent, store.paths, adapter_for(agent), attempt=2
    )
    assert again.env["CREW_WORKER_TOKEN"] != token  # a new secret for every attempt


def test_crew_toml_cannot_give_a_worker_another_session(make_run: MakeRun) -> None:
    store = make_run(_crew(env={"CREW_SESSION_ID": SESSION, "CREW_WORKER_TOKEN": "known"}))
    state = store.state()
    agent = state.run.config.agents["coder"]

    launch = spawn.launch_for(
        state.run, state.tasks["plan"], agent, store.paths, adapter_for(agent), attempt=1
    )

    assert launch.env["CREW_SESSION_ID"] == "task:plan"
    assert launch.env["CREW_WORKER_TOKEN"] != "known"


# ----------------------------------------------------------------------------- its own run


def test_any_worker_may_steer_follow_up_and_nudge_its_peers_recorded_as_from_its_task(
    make_run: MakeRun,
) -> None:
    store = make_run(_crew())
    me = _worker_of(store)
    _worker_of(store, "build")

    sent = [
        verbs.steer(store, "build", "use the new API", session=me),
        verbs.nudge(store, "build", session=me),
        verbs.follow_up(store, "check", "then check", session=me),
    ]

    for result in sent:
        assert result.message.from_ == "plan"
        assert result.message.data is not None and result.message.data["session"] == "task:plan"
    steered = _events(store, EventType.AGENT_STEERED)[0]
    assert steered.data is not None and steered.data["session"] == "task:plan"
    assert steered.message == "steer build by task:plan: use the new API"


def test_a_worker_may_cancel_its_own_task(make_run: MakeRun) -> None:
    store = make_run(_crew())
    me = _worker_of(store)

    result = verbs.cancel(store, "plan", session=me, grace=0.1)

    assert result.tasks == ["plan"]
    cancelled = _events(store, EventType.TASK_CANCELLED)[0]
    assert cancelled.data is not None and cancelled.data["session"] == "task:plan"


@pytest.mark.parametrize(
    ("act", "right", "words"),
    [
        ("respond", "respond", "answer questions"),
        ("cancel build", "cancel", "cancel another task"),
        ("cancel", "cancel", "cancel the whole run"),
        ("handoff", "handoff", "hand the run over"),
    ],
)
def test_what_else_a_worker_does_needs_its_agents_may(
    make_run: MakeRun, act: str, right: str, words: str
) -> None:
    def ready(store: RunStore) -> Callable[[], object]:
        me = _worker_of(store)
        if act == "respond":
            _worker_of(store, "build")
            with change(store) as txn:
                tasks.flag(txn, "build", "stalled")  # needs_review: an answer clears it
            return lambda: verbs.respond(store, "build", "go on", session=me)
        if act.startswith("cancel"):
            task = act.partition(" ")[2] or None
            return lambda: verbs.cancel(store, task, session=me, grace=0.1)
        return lambda: verbs.handoff(store, "mallory", session=me)

    refused, allowed = make_run(_crew()), make_run(_crew(may=[right]))

    assert _refused(refused, ready(refused)) == (
        f"Task plan is a worker of run {refused.run_id}, and a worker may {words} only "
        f'where crew.toml allows it: add "{right}" to `may` in [agents.coder].'
    )
    ready(allowed)()
    assert _events(allowed, EventType.OWNERSHIP_OVERRIDDEN) == []


def test_force_is_for_a_worker_whose_agent_may_force_and_is_recorded(make_run: MakeRun) -> None:
    without, with_force = make_run(_crew()), make_run(_crew(may=["force"]))
    refused_worker, forcing_worker = _worker_of(without), _worker_of(with_force)

    message = _refused(
        without, lambda: verbs.handoff(without, "ana@laptop", session=refused_worker, force=True)
    )
    verbs.handoff(with_force, "ana@laptop", session=forcing_worker, force=True)

    assert 'add "handoff" to `may` in [agents.coder]' in message
    overridden = _events(with_force, EventType.OWNERSHIP_OVERRIDDEN)
    assert overridden[0].data == {"session": "task:plan", "owner": SESSION, "verb": "handoff"}
    assert with_force.state().run.owner_session_id == "ana@laptop"


def test_a_worker_whose_agent_may_force_still_needs_to_say_force(make_run: MakeRun) -> None:
    store = make_run(_crew(may=["force"]))
    me = _worker_of(store)

    with pytest.raises(Refused) as refused:
        verbs.cancel(store, session=me)

    assert refused.value.hint == "Its agent may use --force: pass it to act anyway (recorded)."


def test_a_run_handed_to_a_worker_is_the_workers_to_run(make_run: MakeRun) -> None:
    store = make_run(_crew())
    me = _worker_of(store)

    verbs.handoff(store, "task:plan", session=SESSION)
    verbs.cancel(store, "build", session=me)
    verbs.handoff(store, "ana@laptop", session=me)

    assert store.state().run.owner_session_id == "ana@laptop"


def test_a_worker_cannot_resume_its_own_run(make_run: MakeRun) -> None:
    store = make_run(_crew())
    me = _worker_of(store)

    assert _refused(store, lambda: claim(store, session=me, resume=True)) == (
        f"Task plan is a worker of run {store.run_id}, and a worker may lead the run only with "
        '--force where crew.toml allows it: add "force" to `may` in [agents.coder].'
    )


# ----------------------------------------------------------------------------- credentials


def test_credentials_of_another_attempt_or_an_ended_task_are_refused(make_run: MakeRun) -> None:
    store = make_run(_crew())
    old = _worker_of(store)
    with change(store) as txn:  # a new attempt: a new secret
        tasks.interrupt(txn, "plan", "the leader stopped")
    new = _worker_of(store, attempt=2)

    assert _refused(store, lambda: verbs.steer(store, "plan", "x", session=old)) == (
        "This command's worker credentials (CREW_WORKER_TOKEN) are not those of the current "
        f"worker of task plan of run {store.run_id}."
    )
    verbs.cancel(store, "plan", session=new)
    assert _refused(store, lambda: verbs.follow_up(store, "build", "x", session=new)) == (
        f"Task plan of run {store.run_id} is cancelled: its worker may no longer act on runs."
    )


# ----------------------------------------------------------------------------- other runs


def test_a_worker_acts_on_another_run_only_once_that_run_is_handed_to_it(
    make_run: MakeRun,
) -> None:
    mine, other = make_run(_crew()), make_run(_crew())
    me = _worker_of(mine)
    _worker_of(other, "build")

    assert _refused(other, lambda: verbs.steer(other, "build", "x", session=me)) == (
        f"Task plan is a worker of run {mine.run_id}, not of run {other.run_id}: it may act "
        f"there only if that run's owner hands it over with "
        f"`crew handoff {other.run_id} task:plan@{mine.run_id}`."
    )
    assert _refused(other, lambda: verbs.steer(other, "build", "x", session=me, force=True))

    verbs.handoff(other, f"task:plan@{mine.run_id}", session=SESSION)
    sent = verbs.steer(other, "build", "x", session=me)

    assert (sent.message.from_, sent.message.data and sent.message.data["session"]) == (
        "leader",
        f"task:plan@{mine.run_id}",
    )


def test_a_run_a_worker_starts_is_owned_by_that_worker(
    make_run: MakeRun, home: Home, tmp_path: Path
) -> None:
    from crew.leader import start_run

    mine = make_run(_crew())
    me = _worker_of(mine)
    crew_toml = tmp_path / "crew.toml"
    crew_toml.write_text(
        '[agents.a]\ncommand = ["true"]\n[[tasks]]\nid = "t"\nagent = "a"\nprompt = "p"\n'
    )

    started = start_run(home, crew_toml, session=me)

    assert started.state().run.owner_session_id == f"task:plan@{mine.run_id}"
    forged = Actor("task:plan", WorkerCredentials(mine.run_id, "plan", "forged", home.root))
    with pytest.raises(Refused):
        start_run(home, crew_toml, session=forged)


# ----------------------------------------------------------------------------- resolving who acts


def test_a_command_below_a_worker_that_dropped_its_variables_is_still_that_worker(
    home: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    found = {
        "CREW_WORKER_TOKEN": "secret",
        "CREW_RUN_ID": "20261130-034100-7f3a",
        "CREW_TASK_ID": "plan",
        "CREW_HOME": str(home.root),
    }
    monkeypatch.setattr("crew.procs.inherited_environs", lambda names: iter([found]))
    monkeypatch.delenv("CREW_SESSION_ID")

    assert current_actor(home=home.root).session == "task:plan"
    assert current_actor(home=home.root.parent).worker is None  # another home: not its run
    with pytest.raises(Refused):
        current_actor(SESSION, home=home.root)
    monkeypatch.setenv("CREW_SESSION_ID", SESSION)
    with pytest.raises(Refused):
        current_actor(home=home.root)


def test_a_worker_may_name_itself(monkeypatch: pytest.MonkeyPatch, home: Home) -> None:
    monkeypatch.setenv("CREW_WORKER_TOKEN", "secret")
    monkeypatch.setenv("CREW_RUN_ID", "20261130-034100-7f3a")
    monkeypatch.setenv("CREW_TASK_ID", "plan")
    monkeypatch.setenv("CREW_SESSION_ID", "task:plan")

    assert current_actor("task:plan", home=home.root).session == "task:plan"
    assert current_actor("task:plan@20261130-034100-7f3a").session == "task:plan"
    with pytest.raises(Refused):
        current_actor("task:build")


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300))
def test_an_accepted_session_id_is_one_line_of_printable_text(text: str) -> None:
    try:
        ids.check_session(text)
    except UsageError:
        return
    assert 1 <= len(text) <= 256
    assert text.isprintable() and text == text.strip()
    assert "\n" not in text and text.encode("utf-8")


@pytest.mark.parametrize("value", ["task:", "task:Plan", "task:plan@yesterday", "task:../x"])
def test_a_task_session_names_a_task(value: str) -> None:
    with pytest.raises(UsageError, match="Invalid worker session"):
        ids.parse_worker_session(value)
