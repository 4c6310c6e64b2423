"""What agents spend, and the limits on it (crew/domain/budget.py).

Each adapter turns its CLI's own usage reports into `agent.usage` events — checked line by line
on lines captured from the real CLIs (docs/agents-protocols.md) — and the totals reach
`crew status --json`. A task that reaches a limit is paused, asks whether it may go on, and goes
on (yes) or is flagged for review (no): end to end for each adapter, against its fake CLI.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import SESSION, CliResult, config
from fake_agents import FakeAgent, killed_and_resumed, log
from leaders import Leader, eventually, store_of, write_crew

from crew import verbs
from crew.adapters.base import Spent
from crew.adapters.claude_code import ClaudeCodeAdapter
from crew.adapters.codex import CodexAdapter
from crew.adapters.pi import PiAdapter
from crew.config import AgentConfig
from crew.domain import budget, change, tasks
from crew.leader import limits
from crew.models import Event, Usage
from crew.paths import Home
from crew.registry import Box, ContactType, EventType, MessageStatus, RunStatus, TaskStatus
from crew.store import jsonl
from crew.store.runstore import RunStore
from crew.waiting import Until, wait_for_run

PI = FakeAgent("pi", "pi")
CODEX = FakeAgent("codex", "codex")
CLAUDE = FakeAgent("claude", "claude-code")


def spent(adapter: Any, *lines: str) -> list[Usage]:
    """What the adapter says was spent, fed `lines`."""
    found: list[Usage] = []
    for line in lines:
        found += [s.usage for s in adapter.on_line(line).signals if isinstance(s, Spent)]
    return found


# ----------------------------------------------------------------------------- the adapters


def test_pi_reports_each_model_call_with_the_cached_tokens_counted_as_input() -> None:
    adapter = PiAdapter(AgentConfig(command=["pi"], protocol="pi"))
    usage = {"input": 400, "output": 50, "cacheRead": 600, "cacheWrite": 0, "reasoning": 0,
             "totalTokens": 1050, "cost": {"input": 0.0012, "output": 0.00075,
             "cacheRead": 0.00018, "cacheWrite": 0, "total": 0.00213}}  # fmt: skip
    end = {"type": "message_end", "message": {"role": "assistant", "model": "fake-model",
           "content": [{"type": "text", "text": "Done"}], "usage": usage, "stopReason": "stop"}}  # fmt: skip
    failed = json.loads(json.dumps(end))
    failed["message"].update(stopReason="error", usage={**usage, "totalTokens": 0})

    (one,) = spent(adapter, json.dumps(end), json.dumps(failed))

    assert one == Usage(input_tokens=1000, output_tokens=50, cached_tokens=600,
                        cost_usd=0.00213, turns=1, model="fake-model")  # fmt: skip


def test_codex_reports_what_is_new_in_the_threads_running_total() -> None:
    adapter = CodexAdapter(AgentConfig(command=["codex"], protocol="codex"))
    adapter.thread = "th"

    def update(total: tuple[int, int, int], last: tuple[int, int, int]) -> str:
        def counts(n: tuple[int, int, int]) -> dict[str, int]:
            return {"inputTokens": n[0], "cachedInputTokens": n[1], "outputTokens": n[2]}

        usage = {"total": counts(total), "last": counts(last), "modelContextWindow": 258400}
        params = {"threadId": "th", "turnId": "tu", "tokenUsage": usage}
        return json.dumps({"method": "thread/tokenUsage/updated", "params": params})

    # A resumed thread's first report counts only its last call (the rest is an earlier
    # attempt's); the same report twice counts once.
    found = spent(
        adapter,
        update((9000, 5000, 500), (1000, 600, 50)),
        update((11000, 6500, 570), (2000, 1500, 70)),
        update((11000, 6500, 570), (2000, 1500, 70)),
    )

    assert [(u.input_tokens, u.cached_tokens, u.output_tokens, u.turns) for u in found] == [
        (1000, 600, 50, 1),
        (2000, 1500, 70, 1),
    ]
    assert all(u.cost_usd is None for u in found)  # codex prices nothing


def test_claude_reports_each_turn_at_its_result_with_the_turns_own_cost() -> None:
    adapter = ClaudeCodeAdapter(AgentConfig(command=["claude"], protocol="claude-code"))

    def result(total_cost: float, turn_cost: float | None, turns: int = 1) -> str:
        event: dict[str, Any] = {
            "type": "result", "subtype": "success", "is_error": False, "result": "Done",
            "num_turns": turns, "total_cost_usd": total_cost,
            "usage": {"input_tokens": 3000, "cache_creation_input_tokens": 0,
                      "cache_read_input_tokens": 2100, "output_tokens": 120},
            "modelUsage": {"claude-opus-5-5": {"costUSD": total_cost}},
        }  # fmt: skip
        if turn_cost is not None:
            event["model_usage_since_last_result"] = {"claude-opus-5-5": {"costUSD": turn_cost}}
        return json.dumps(event)

    # total_cost_usd counts the whole process: without the turn's own figures, what it grew by.
    found = spent(adapter, result(0.01482, 0.01482, turns=2), result(0.02, None))

    assert found[0] == Usage(input_tokens=5100, output_tokens=120, cached_tokens=2100,
                             cost_usd=0.01482, turns=2, model="claude-opus-5-5")  # fmt: skip
    assert found[1].cost_usd == pytest.approx(0.02 - 0.01482)


# ----------------------------------------------------------------------------- totals


def events(store: RunStore, kind: EventType) -> list[Event]:
    return [e for e in jsonl.read(store.paths.events, Event).records if e.type is kind]


@pytest.mark.parametrize(
    ("agent", "prompt", "expected"),
    [
        (PI, "hello", {"inputTokens": 1000, "outputTokens": 50, "cachedTokens": 600,
                       "costUsd": 0.00213, "turns": 1, "model": "fake-model"}),
        (CODEX, "hello", {"inputTokens": 1000, "outputTokens": 50, "cachedTokens": 600, "model": "mock-model",
                          "turns": 1}),
        (CLAUDE, "hello", {"inputTokens": 1000, "outputTokens": 50, "cachedTokens": 600,
                           "costUsd": 0.01, "turns": 1, "model": "claude-opus-5-5"}),
    ],
    ids=["pi", "codex", "claude"],
)  # fmt: skip
def test_status_shows_what_each_task_answered_and_spent(
    tmp_path: Path, home: Home, cli: Any, agent: FakeAgent, prompt: str, expected: dict[str, Any]
) -> None:
    leader, store = agent.start(tmp_path, home, prompt)
    assert leader.finish() == 0
    task = store.state().tasks["t"]  # the agent's final answer is the task's result
    assert task.status is TaskStatus.COMPLETED and task.result == f"done: {prompt}"
    (answered,) = events(store, EventType.AGENT_RESULT)
    assert answered.message == f"t's agent answered: done: {prompt}"

    status = cli("status", store.run_id, "--json")
    document = json.loads(status.out)
    assert document["tasks"][0]["usage"] == expected
    assert document["usage"] == expected  # one task: the run's total is the task's
    (event,) = events(store, EventType.AGENT_USAGE)
    assert event.data is not None and event.data["turn"] == expected
    shown: CliResult = cli("status", store.run_id)
    assert "SPENT" in shown.out and "Spent in all: 1,050 tokens" in shown.out
    if "costUsd" in expected:  # a cost under a cent is not shown as $0.00
        cost = {0.00213: "$0.0021", 0.01: "$0.01"}[expected["costUsd"]]
        assert f"1.1k tok {cost}" in shown.out


def test_the_runs_total_adds_up_every_task(tmp_path: Path, home: Home, cli: Any) -> None:
    leader, store = PI.start(tmp_path, home, "SPEND")
    assert leader.finish() == 0

    usage = json.loads(cli("status", store.run_id, "--json").out)["usage"]
    assert usage["turns"] == 6  # five steps and the answer
    assert usage["inputTokens"] == 6000 and usage["costUsd"] == pytest.approx(6 * 0.00213)


# ----------------------------------------------------------------------------- limits


def flagged_task(store: RunStore) -> Any:
    task = store.state().tasks["t"]
    return task if task.status is TaskStatus.NEEDS_REVIEW else None


def paused(store: RunStore) -> Any:
    """The task, once it waits on crew's question about its limit."""
    (task,) = wait_for_run(store, Until.WAITING, timeout=30).tasks
    assert task.contact is not None and task.contact.limit is not None
    assert task.contact.type is ContactType.NEED_CONFIRMATION
    return task


@pytest.mark.parametrize("agent", [PI, CODEX], ids=["pi", "codex"])
def test_a_task_at_its_turn_limit_is_stopped_mid_turn_and_goes_on_when_told_yes(
    tmp_path: Path, home: Home, agent: FakeAgent
) -> None:
    leader, store = agent.start(tmp_path, home, "SPEND", maxTurns=2)

    task = paused(store)
    assert task.contact.prompt == (
        "t reached its limit of 2 model turns (2 model turns used). "
        "Raise the limit to 4 model turns and go on?"
    )
    assert task.usage is not None and task.usage.turns == 2  # stopped before a third
    verbs.respond(store, "t", "yes", session=SESSION)

    assert leader.finish() == 0
    task = store.state().tasks["t"]
    assert task.status is TaskStatus.COMPLETED
    assert task.limits is not None and task.limits.max_turns == 4
    assert "[crew] You were paused at your limit of maxTurns" in log(store)  # told to go on
    (raised,) = events(store, EventType.TASK_LIMIT_RAISED)
    assert raised.data is not None and raised.data["limit"] == "maxTurns"
    assert raised.data["value"] == 4
    (reached,) = events(store, EventType.TASK_LIMIT_REACHED)
    assert reached.data == {"limit": "maxTurns", "value": 2, "used": 2}


@pytest.mark.parametrize("agent", [PI, CODEX], ids=["pi", "codex"])
def test_a_task_told_no_at_its_limit_is_flagged_and_spends_nothing_more(
    tmp_path: Path, home: Home, agent: FakeAgent
) -> None:
    leader, store = agent.start(tmp_path, home, "SPEND", maxTokens=2000)
    task = paused(store)
    assert "reached its limit of 2,000 tokens (2,100 tokens used)" in task.contact.prompt

    verbs.respond(store, "t", "no", session=SESSION)

    flagged = eventually(lambda: flagged_task(store), timeout=30)
    assert flagged.error == "stopped at its limit (maxTokens): the answer was 'no', not yes"
    assert "[crew] You were paused" not in log(store)
    verbs.cancel(store, session=SESSION)
    leader.finish()
    assert store.state().tasks["t"].usage.turns == 2  # type: ignore[union-attr]


@pytest.mark.parametrize("prompt", ["hello", "LATEIDLE"], ids=["idle-at-once", "idle-late"])
def test_an_idle_claude_over_its_cost_limit_asks_before_it_takes_more_work(
    tmp_path: Path, home: Home, prompt: str
) -> None:
    # claude reports usage only when a turn ends: past its limit then, it is given no more work
    # until a yes. Its `idle` may come well after the result: the turn was over all the same.
    leader, store = CLAUDE.start(tmp_path, home, prompt, maxCostUsd=0.005, keepOpen="60s")
    eventually(lambda: store.state().tasks["t"].usage is not None)

    verbs.follow_up(store, "t", "second job", session=SESSION)
    task = paused(store)
    assert "limit of $0.005 ($0.01 used). Raise the limit to $0.015 " in task.contact.prompt
    assert "second job" not in log(store)  # held back while it asks
    verbs.respond(store, "t", "yes", session=SESSION)

    eventually(lambda: "done: second job" in log(store), timeout=30)
    assert "[crew] You were paused" not in log(store)  # it was idle: the follow-up is the work
    # the turn's result, which carries its usage, is read after the line it printed
    eventually(lambda: (u := store.state().tasks["t"].usage) is not None and u.turns == 2)
    verbs.cancel(store, "t", session=SESSION)
    leader.finish()
    task = store.state().tasks["t"]
    assert task.limits is not None and task.limits.max_cost_usd == pytest.approx(0.015)
    assert task.usage is not None and task.usage.cost_usd == pytest.approx(0.02)


def test_a_claude_over_its_cost_limit_is_stopped_in_the_turn_it_began_on_held_work(
    tmp_path: Path, home: Home
) -> None:
    # A follow-up sent during a turn waits in crew's adapter for the turn's end; when that turn
    # took the task past its limit, the turn claude begins on it is stopped at once.
    leader, store = CLAUDE.start(tmp_path, home, "SLOW", maxCostUsd=0.005, keepOpen="60s")
    eventually(lambda: "fake-claude got" in log(store))  # the prompt was written: a turn runs
    sent_up = verbs.follow_up(store, "t", "WORK until stopped", session=SESSION)
    eventually(lambda: store.fold(Box.INBOX)[sent_up.message.id].status is MessageStatus.DELIVERED)
    verbs.steer(store, "t", "wrap up", session=SESSION)  # the slow turn ends on it

    task = paused(store)
    assert "[Request interrupted by user]" in log(store)
    assert "done: work" not in log(store)  # it was stopped at once, not after its 10 s
    # The question counts what the stopped turn spent too ($0.01 a turn, stopped or not).
    assert "limit of $0.005 ($0.02 used). Raise the limit to $0.025 " in task.contact.prompt
    verbs.respond(store, "t", "yes", session=SESSION)
    eventually(lambda: "[crew] You were paused at your limit of maxCostUsd" in log(store))
    verbs.cancel(store, "t", session=SESSION)
    leader.finish()
    assert task.contact.limit.key == "maxCostUsd"


def test_an_autorespond_rule_answers_the_limit_question_unattended(
    tmp_path: Path, home: Home
) -> None:
    write_crew(
        tmp_path,
        [{"id": "t", "prompt": "SPEND"}],
        command=[sys.executable, str(PI.script)],
        agent={"protocol": "pi", "maxTurns": 2},
        auto_respond=[{"type": "need_confirmation", "match": "its limit of", "answer": "no"}],
    )
    leader = Leader("run", "crew.toml", cwd=tmp_path)
    store = store_of(home, leader.run_id)

    flagged = eventually(lambda: flagged_task(store), timeout=30)
    assert flagged.error.startswith("stopped at its limit (maxTurns)")
    assert store.state().run.status is RunStatus.NEEDS_REVIEW
    verbs.cancel(store, session=SESSION)
    leader.finish()


def held_back(store: RunStore) -> Any:
    """The task, once its next attempt waits on crew's question about its limit."""
    task = paused(store)
    assert task.contact.limit.before_start and task.pid is None and task.token_hash is None
    return task


@pytest.mark.parametrize("answer", ["no", "yes"])
def test_a_resumed_task_over_its_limit_asks_before_its_agent_is_started_again(
    tmp_path: Path, home: Home, answer: str
) -> None:
    # A started agent begins to spend at once (a prompt on its command line is work): the next
    # attempt of a task already at its limit waits for a yes, with no worker.
    leader, store = PI.start(tmp_path, home, "SPEND", maxTurns=2)
    asked = paused(store)
    resumed = killed_and_resumed(leader, store, tmp_path)

    task = held_back(store)
    assert task.contact.id != asked.id  # the interrupted attempt's question went with it
    assert task.contact.prompt == (
        "t reached its limit of 2 model turns (2 model turns used). "
        "Raise the limit to 4 model turns and start its next attempt?"
    )
    assert task.attempt == 1 and len(PI.launches(store)) == 1  # no agent started for it
    verbs.respond(store, "t", answer, session=SESSION)

    if answer == "no":
        assert resumed.finish() == 1
        task = store.state().tasks["t"]
        assert task.status is TaskStatus.CANCELLED
        assert task.error == "stopped at its limit (maxTurns): the answer was 'no', not yes"
        assert len(PI.launches(store)) == 1 and task.usage.turns == 2
        return
    # It starts (what it spends from then on is counted and paused like any attempt's).
    eventually(lambda: len(PI.launches(store)) == 2, timeout=30)
    task = store.state().tasks["t"]
    assert task.attempt == 2 and task.limits.max_turns == 4
    verbs.cancel(store, session=SESSION)
    resumed.finish()


def held_at_its_limit(make_run: Any) -> RunStore:
    """A run whose task `plan` spent its 2 turns in attempt 1, and whose next attempt waits."""
    agents = {"coder": {"command": ["python3", "-c", "pass"], "protocol": "pi", "maxTurns": 2}}
    store: RunStore = make_run(config(agents=agents))
    with change(store) as txn:
        tasks.start(txn, "plan", attempt=1, pid=4242, token_hash="a" * 64)
        budget.spend(txn, "plan", Usage(turns=2))
    with change(store) as txn:
        tasks.interrupt(txn, "plan", "the leader stopped while it ran")
        assert limits.held_at_start(txn, txn.task("plan"))
    return store


@pytest.mark.parametrize("answer", ["yes", "no"])
def test_the_answer_to_a_held_attempts_question_is_taken_at_once_without_a_leader(
    make_run: Any, answer: str
) -> None:
    store = held_at_its_limit(make_run)
    task = store.state().tasks["plan"]
    assert task.status is TaskStatus.WAITING and task.pid is None and task.token_hash is None

    sent = verbs.respond(store, "plan", answer, session=SESSION)

    assert sent.message.status is MessageStatus.DELIVERED  # crew's own question: taken at once
    assert not sent.undelivered_without_leader
    task, run = store.state().tasks["plan"], store.state().run
    if answer == "yes":  # queued for the attempt, under the raised limit
        assert task.status is TaskStatus.QUEUED and task.limits.max_turns == 4
        assert task.attempt == 1 and run.status is RunStatus.RUNNING
    else:  # no agent to leave idle: it ends, and so does the run (build depended on it)
        assert task.status is TaskStatus.CANCELLED
        assert task.error == "stopped at its limit (maxTurns): the answer was 'no', not yes"
        assert run.status is RunStatus.FAILED


def test_a_task_waiting_to_start_at_its_limit_keeps_its_question_over_a_resume(
    tmp_path: Path, home: Home
) -> None:
    leader, store = PI.start(tmp_path, home, "SPEND", maxTurns=2)
    paused(store)
    resumed = killed_and_resumed(leader, store, tmp_path)
    asked = held_back(store).contact
    resumed.process.kill()
    resumed.finish()

    again = Leader("resume", store.run_id, cwd=tmp_path)
    requeued = eventually(lambda: events(store, EventType.RUN_RESUMED)[1:])
    assert requeued[0].data["requeued"] == []  # nothing ran: nothing to queue again
    assert store.state().tasks["t"].contact == asked  # the same question, still open
    verbs.respond(store, "t", "no", session=SESSION)
    assert again.finish() == 1
    assert len(PI.launches(store)) == 1


# ----------------------------------------------------------------------------- versions


def test_each_task_records_the_version_its_agent_cli_gives(tmp_path: Path, home: Home) -> None:
    # What pi's npm package installs: a program that answers --version (slowly, as a Node CLI
    # starts: both tasks start while it is asked).
    cli = tmp_path / "pi"
    cli.write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = --version ]; then echo "$CREW_TASK_ID$CREW_WORKER_TOKEN" >>{tmp_path}/asked; sleep 1; echo 1.6.0; echo more; exit; fi\n'
        f'exec {sys.executable} {PI.script} "$@"\n'
    )
    cli.chmod(0o755)
    write_crew(
        tmp_path,
        [{"id": "a", "prompt": "hello"}, {"id": "b", "prompt": "hello"}],
        command=[str(cli), "--mode", "rpc"],
        agent={"protocol": "pi", "keepOpen": "60s"},
    )
    leader = Leader("run", "crew.toml", cwd=tmp_path)
    store = store_of(home, leader.run_id)

    def versions() -> list[str | None]:
        return [t.agent_version for t in store.state().task_list()]

    assert eventually(lambda: versions() == ["1.6.0", "1.6.0"], timeout=30)
    verbs.cancel(store, session=SESSION)
    leader.finish()
    recorded = events(store, EventType.AGENT_VERSION)
    assert sorted(e.task_id or "" for e in recorded) == ["a", "b"]
    # Asked once for both, and not as a worker: it carries none of a task's marks or secrets.
    assert (tmp_path / "asked").read_text() == "\n"
    assert "--version" not in log(store)  # the worker itself never got it


def test_an_idle_claude_told_no_at_its_limit_gets_no_more_work(tmp_path: Path, home: Home) -> None:
    leader, store = CLAUDE.start(tmp_path, home, "hello", maxTurns=1, keepOpen="60s")
    eventually(lambda: store.state().tasks["t"].usage is not None)
    verbs.follow_up(store, "t", "second job", session=SESSION)
    paused(store)

    verbs.respond(store, "t", "no", session=SESSION)

    flagged = eventually(lambda: flagged_task(store), timeout=30)
    assert flagged.error.startswith("stopped at its limit (maxTurns)")
    verbs.steer(store, "t", "a steer", session=SESSION)  # asks again rather than spending
    eventually(lambda: store.state().tasks["t"].status is TaskStatus.WAITING, timeout=30)
    verbs.cancel(store, session=SESSION)
    leader.finish()
    assert "second job" not in log(store) and "a steer" not in log(store)


@pytest.mark.parametrize("agent", [PI, CODEX], ids=["pi", "codex"])
def test_work_an_agent_held_when_its_turn_was_stopped_at_a_limit_is_given_after_a_yes(
    tmp_path: Path, home: Home, agent: FakeAgent
) -> None:
    # codex's adapter holds a follow-up for after the turn; pi keeps it in its own queue, and
    # gives it back when crew clears the queue: either way it is crew's again, not lost.
    leader, store = agent.start(tmp_path, home, "SPEND", maxTurns=3)
    sent = verbs.follow_up(store, "t", "second job", session=SESSION)

    paused(store)
    pending = {m.id: m for m in store.messages(Box.INBOX)}[sent.message.id]
    assert pending.status is MessageStatus.PENDING  # held for the answer, in crew (or never sent)
    verbs.respond(store, "t", "yes", session=SESSION)

    assert leader.finish() == 0
    assert "done: second job" in log(store)
