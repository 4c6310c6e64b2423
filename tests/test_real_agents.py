"""The adapters end to end against the real agent CLIs (pi, Claude Code, Codex, as pinned by
`make agents`), each talking to the scripted model server of tests/fake_model.py: no API key,
no network, no real home. Run with `make test-agents` (`pytest -m agents`); skipped when the
CLIs are not installed.

Each CLI runs with a scrubbed environment: the leader gets only PATH (Node >= 22 first), a
temporary HOME and crew's own variables; the agent gets its config folder in `tmp_path` and a
dummy key through crew.toml's `env`. A test that must act while the model is mid-answer holds
the answer (`text(..., held=True)`) until it has acted, and waits on recorded requests and
events, never on time.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from conftest import SESSION, AgentClis
from fake_model import Model, Request, ask, bash, dialog, error, text, usage
from leaders import Leader, eventually, store_of, write_crew

from crew import verbs
from crew.paths import Home
from crew.registry import ContactType, EventType, MessageStatus, TaskStatus
from crew.store.runstore import RunStore
from crew.waiting import Until, wait_for_run, wait_for_sent

pytestmark = pytest.mark.agents

PROMPT = "Count the files"


@dataclass(frozen=True)
class Cli:
    """How to run one agent CLI against the fake model."""

    name: str
    protocol: str
    args: tuple[str, ...]

    def configure(self, model: Model, home: Path) -> dict[str, str]:
        """Write the CLI's configuration under `home`; return the agent's environment."""
        env = {"HOME": str(home)}
        if self.name == "pi":
            agent = home / ".pi" / "agent"
            agent.mkdir(parents=True)
            cost = {"input": 3, "output": 15, "cacheRead": 0.3, "cacheWrite": 3.75}
            provider = {
                "baseUrl": f"{model.url}/v1",
                "api": "openai-completions",
                "apiKey": "$FAKE_API_KEY",
                "models": [{"id": "fake-model", "cost": cost}],
            }
            _write_json(agent / "models.json", {"providers": {"fake": provider}})
            settings = {
                "defaultProvider": "fake",
                "defaultModel": "fake-model",
                "retry": {"baseDelayMs": 50},
            }
            _write_json(agent / "settings.json", settings)
            env |= {"PI_CODING_AGENT_DIR": str(agent), "PI_OFFLINE": "1"}
        elif self.name == "claude":
            env |= {
                "CLAUDE_CONFIG_DIR": str(home / ".claude"),
                "ANTHROPIC_BASE_URL": model.url,
                "ANTHROPIC_API_KEY": "sk-ant-dummy",
                "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
                "DISABLE_AUTOUPDATER": "1",
            }
        else:
            codex = home / ".codex"
            codex.mkdir(parents=True)
            (codex / "config.toml").write_text(
                'model = "fake-model"\nmodel_provider = "fake"\n\n[model_providers.fake]\n'
                f'name = "fake"\nbase_url = "{model.url}/v1"\nenv_key = "FAKE_API_KEY"\n'
                'wire_api = "responses"\n'
            )
            env["CODEX_HOME"] = str(codex)
        return env | {"FAKE_API_KEY": "dummy"}


PI = Cli("pi", "pi", ("pi", "--mode", "rpc"))
CLAUDE = Cli(
    "claude",
    "claude-code",
    ("claude", "-p", "--input-format", "stream-json", "--output-format", "stream-json",
     "--verbose", "--permission-prompt-tool", "stdio"),
)  # fmt: skip
CODEX = Cli("codex", "codex", ("codex", "app-server"))
ALL = [pytest.param(c, id=c.name) for c in (PI, CLAUDE, CODEX)]
ASKING = [pytest.param(c, id=c.name) for c in (CLAUDE, CODEX)]  # pi asks only via extensions


def _write_json(path: Path, document: dict[str, Any]) -> None:
    path.write_text(json.dumps(document, indent=2))


@pytest.fixture
def model() -> Iterator[Model]:
    with Model() as server:
        yield server


@dataclass
class Agent:
    """One real CLI as the task `t` of a crew, with its fake model."""

    cli: Cli
    clis: AgentClis
    model: Model
    folder: Path
    crew_home: Home

    def environment(self) -> dict[str, str]:
        """The leader's environment: nothing inherited but what crew's tests set."""
        env = {k: v for k, v in os.environ.items() if k.startswith("CREW_")}
        return env | {
            "PATH": self.clis.path(),
            "HOME": str(self.folder / "home"),
            "LANG": "C.UTF-8",
        }

    def start(self, prompt: str = PROMPT, **agent: Any) -> tuple[Leader, RunStore]:
        home = self.folder / "home"
        home.mkdir(exist_ok=True)
        env = self.cli.configure(self.model, home) if not any(home.iterdir()) else {}
        env = agent.pop("env", None) or env
        write_crew(
            self.folder,
            [{"id": "t", "prompt": prompt}],
            command=[str(self.clis.bin / self.cli.args[0]), *self.cli.args[1:]],
            agent={"protocol": self.cli.protocol, "env": env, **agent},
        )
        leader = Leader("run", "crew.toml", cwd=self.folder, env=self.environment())
        return leader, store_of(self.crew_home, leader.run_id)

    def resume(self, run_id: str) -> Leader:
        return Leader("resume", run_id, cwd=self.folder, env=self.environment())


@pytest.fixture
def run(agent_clis: AgentClis, model: Model, tmp_path: Path, home: Home) -> Any:
    """`run(cli)`: an Agent for that CLI."""
    return lambda cli: Agent(cli, agent_clis, model, tmp_path, home)


def events(store: RunStore, kind: EventType) -> list[Any]:
    return [e for e in store.events().records if e.type is kind]


def said(request: Request, words: str) -> bool:
    """Whether `words` appear in what the request sent the model."""
    return words in request.dump


def finished(leader: Leader, store: RunStore, timeout: float = 90) -> Any:
    """The task once the leader has ended (its log printed if it failed unexpectedly)."""
    code = leader.finish(timeout=timeout)
    task = store.state().tasks["t"]
    log = store.paths.log("t")
    context = log.read_text()[-4000:] if log.exists() else ""
    return code, task, f"{leader.err}\n{context}"


@pytest.mark.parametrize("cli", ALL)
def test_a_turn_completes_the_task_with_the_models_answer(cli: Cli, run: Any, model: Model) -> None:
    model.script([text("There are ", "three files."), usage(1000, 50, 600)])
    leader, store = run(cli).start()

    code, task, context = finished(leader, store)
    assert code == 0 and task.status is TaskStatus.COMPLETED, context
    assert task.result == "There are three files."
    (first, *_) = model.scripted()
    assert said(first, PROMPT)
    assert "sk-" not in json.dumps(first.headers).replace("sk-ant-dummy", "")  # only the dummy


DATABASES = ["Postgres", "SQLite"]


@pytest.mark.parametrize(
    ("cli", "options", "answer", "kind"),
    [
        pytest.param(
            CLAUDE, DATABASES, "SQLite", ContactType.NEED_SELECTION, id="claude-selection"
        ),
        pytest.param(
            CLAUDE, DATABASES, "crewdb, my own", ContactType.NEED_SELECTION, id="claude-other"
        ),
        pytest.param(CODEX, DATABASES, "SQLite", ContactType.NEED_SELECTION, id="codex-selection"),
        pytest.param(
            CODEX, DATABASES, "crewdb, my own", ContactType.NEED_SELECTION, id="codex-other"
        ),
    ],
)
def test_a_question_is_asked_and_the_answer_reaches_the_model(
    cli: Cli,
    run: Any,
    model: Model,
    options: list[str],
    answer: str,
    kind: ContactType,
) -> None:
    model.script([ask("Which database?", options)], [text("Using it.")])
    # Codex offers its question tool in its default mode, but refuses the call without this
    args = ("--enable", "default_mode_request_user_input") if cli is CODEX else ()
    leader, store = run(Cli(cli.name, cli.protocol, cli.args + args)).start()

    (task,) = wait_for_run(store, Until.WAITING, timeout=60).tasks
    assert task.contact is not None and task.contact.type is kind
    assert "Which database?" in task.contact.prompt
    assert task.contact.options == options
    verbs.respond(store, "t", answer, session=SESSION)

    code, task, context = finished(leader, store)
    assert code == 0 and task.status is TaskStatus.COMPLETED, context
    assert task.result == "Using it."
    assert said(model.scripted()[1], answer)


@pytest.mark.parametrize("cli", ASKING)
@pytest.mark.parametrize("answer", ["yes", "no"])
def test_a_shell_command_waits_for_approval(
    cli: Cli, run: Any, model: Model, tmp_path: Path, answer: str
) -> None:
    model.script([bash("touch approved.txt")], [text("Finished.")])
    agent = {"approvalPolicy": "untrusted"} if cli is CODEX else {}
    leader, store = run(cli).start(**agent)

    (task,) = wait_for_run(store, Until.WAITING, timeout=60).tasks
    assert task.contact is not None and task.contact.type is ContactType.NEED_CONFIRMATION
    assert "touch approved.txt" in task.contact.prompt
    verbs.respond(store, "t", answer, session=SESSION)

    code, task, context = finished(leader, store)
    assert code == 0 and task.status is TaskStatus.COMPLETED, context
    assert (tmp_path / "approved.txt").exists() is (answer == "yes")
    second = model.scripted()[1]
    if answer == "no":
        assert said(second, "denied") or said(second, "declined") or said(second, "rejected")


@pytest.mark.parametrize("cli", ALL)
def test_a_steer_mid_turn_reaches_the_model(cli: Cli, run: Any, model: Model) -> None:
    model.script(
        [text("Counting", " files...", held=True), bash("echo counted")],
        [text("Counted, and bananas.")],
    )
    leader, store = run(cli).start()
    model.wait(1)

    sent = verbs.steer(store, "t", "also count bananas", session=SESSION)
    wait_for_sent(store, sent, until=MessageStatus.DELIVERED, timeout=30)
    model.release()

    code, task, context = finished(leader, store)
    assert code == 0 and task.status is TaskStatus.COMPLETED, context
    first, *later = model.wait(2)
    assert not said(first, "bananas")
    assert any(said(r, "also count bananas") for r in later)


@pytest.mark.parametrize("cli", ALL)
@pytest.mark.parametrize("verb", ["follow-up", "nudge"])
def test_a_message_sent_mid_turn_is_taken_up_after_it(
    cli: Cli, run: Any, model: Model, verb: str
) -> None:
    model.script([text("First", " part.", held=True)], [text("Second part.")])
    leader, store = run(cli).start()
    model.wait(1)

    if verb == "follow-up":
        sent = verbs.follow_up(store, "t", "now the second part", session=SESSION)
    else:
        sent = verbs.nudge(store, "t", session=SESSION)
    wait_for_sent(store, sent, until=MessageStatus.DELIVERED, timeout=30)
    model.release()

    code, task, context = finished(leader, store)
    assert code == 0 and task.status is TaskStatus.COMPLETED, context
    first, second, *_ = model.wait(2)
    assert said(second, sent.message.body) and not said(first, sent.message.body)
    assert task.result == "Second part."


@pytest.mark.parametrize("cli", ALL)
def test_cancel_mid_turn_stops_the_agent(cli: Cli, run: Any, model: Model) -> None:
    model.script([text("Working", " on it.", held=True)])
    leader, store = run(cli).start()
    model.wait(1)

    verbs.cancel(store, "t", session=SESSION)

    _, task, context = finished(leader, store, timeout=30)
    assert task.status is TaskStatus.CANCELLED, context
    model.until(lambda requests: requests[0].dropped, timeout=30)


@pytest.mark.parametrize("cli", ALL)
def test_a_busy_model_is_retried_and_the_task_completes(cli: Cli, run: Any, model: Model) -> None:
    model.script([error(503)], [error(529)], [text("Made it.")])
    leader, store = run(cli).start()

    code, task, context = finished(leader, store)
    assert code == 0 and task.status is TaskStatus.COMPLETED, context
    assert task.result == "Made it."
    assert len(model.scripted()) == 3


@pytest.mark.parametrize("cli", ALL)
def test_a_refused_key_fails_the_task_quickly(cli: Cli, run: Any, model: Model) -> None:
    model.default = [error(401)]
    started = time.monotonic()
    leader, store = run(cli).start()

    code, task, context = finished(leader, store)
    assert code == 1 and task.status is TaskStatus.FAILED, context
    assert time.monotonic() - started < 60
    assert task.error is not None and ("401" in task.error or "invalid x-api-key" in task.error)


@pytest.mark.parametrize("cli", ALL)
def test_a_resumed_run_goes_on_with_the_agents_session(cli: Cli, run: Any, model: Model) -> None:
    model.script(
        [bash("echo first step"), usage(1000, 50)],
        [text("Second", " step...", held=True)],
        [text("Picked up where I left off.")],
    )
    agent = run(cli)
    leader, store = agent.start()
    model.wait(2)
    eventually(lambda: events(store, EventType.AGENT_SESSION), timeout=30)

    leader.process.kill()
    leader.finish()
    resumed = agent.resume(leader.run_id)

    code, task, context = finished(resumed, store)
    assert code == 0 and task.status is TaskStatus.COMPLETED, context
    third = model.wait(3)[2]
    assert said(third, "was cut short") and said(third, "first step")  # the old conversation
    assert task.result == "Picked up where I left off."


@pytest.mark.parametrize("cli", ALL)
def test_status_adds_up_what_the_model_reported(cli: Cli, run: Any, model: Model) -> None:
    model.script(
        [bash("echo counted"), usage(1000, 50, 600)], [text("Three."), usage(2000, 70, 1500)]
    )
    agent = run(cli)
    leader, store = agent.start(approvals="allow")

    code, task, context = finished(leader, store)
    assert code == 0 and task.status is TaskStatus.COMPLETED, context
    status = subprocess.run(
        [sys.executable, "-m", "crew", "status", leader.run_id, "--json"],
        cwd=agent.folder, env=agent.environment(), capture_output=True, text=True, check=True,
    )  # fmt: skip
    spent = json.loads(status.stdout)["usage"]
    reported = [r.usage for r in model.requests if r.usage is not None]
    assert len(reported) == 2, model.requests  # the agent's own requests, nothing on the side
    # The server reports OpenAI's input (cached tokens included) and Anthropic's (without):
    # crew counts what the model read, cached or not.
    read = 3000 + 2100 if cli is CLAUDE else 3000
    assert spent["inputTokens"] == read and spent["cachedTokens"] == 2100
    assert spent["outputTokens"] == 120 and spent["turns"] == 2
    if cli is PI:  # priced by pi from models.json's cost per million tokens
        assert spent["costUsd"] == pytest.approx((900 * 3 + 120 * 15 + 2100 * 0.3) / 1e6)
    elif cli is CLAUDE:  # priced by claude from its own table
        assert spent["costUsd"] > 0 and spent["model"].startswith("claude-")
    else:
        assert "costUsd" not in spent  # codex prices nothing


@pytest.mark.parametrize("cli", [pytest.param(c, id=c.name) for c in (PI, CODEX)])
@pytest.mark.parametrize("answer", ["yes", "no"])
def test_a_task_at_its_token_limit_is_paused_mid_turn(
    cli: Cli, run: Any, model: Model, answer: str
) -> None:
    model.script([bash("echo one"), usage(1000, 50)], [text("Done.")])
    leader, store = run(cli).start(approvals="allow", maxTokens=1000)

    (task,) = wait_for_run(store, Until.WAITING, timeout=60).tasks
    assert task.contact is not None and task.contact.limit is not None
    assert task.contact.prompt.startswith("t reached its limit of 1,000 tokens (1,050 tokens")
    verbs.respond(store, "t", answer, session=SESSION)

    if answer == "yes":
        code, task, context = finished(leader, store)
        assert code == 0 and task.status is TaskStatus.COMPLETED, context
        assert any(said(r, "You were paused at your limit") for r in model.requests)
        return
    flagged = eventually(lambda: store.state().tasks["t"].status is TaskStatus.NEEDS_REVIEW, 30)
    assert flagged
    verbs.cancel(store, session=SESSION)
    code, task, context = finished(leader, store)
    assert task.status is TaskStatus.CANCELLED, context
    # The agent was not sent on (a request the interrupt overtook may still have reached it).
    assert not any(said(r, "paused at your limit") for r in model.requests)
    assert not events(store, EventType.AGENT_FOLLOWED_UP)


#: pi asks only through an extension: this one gives the model a tool that does.
PI_ASKING = Cli("pi", "pi", (*PI.args, "-e", str(Path(__file__).parent / "fixtures" / "pi-ask.ts")))


@pytest.mark.parametrize(
    ("step", "answer", "kind", "told"),
    [
        pytest.param(ask("Which database?", DATABASES), "SQLite", ContactType.NEED_SELECTION,
                     "SQLite", id="selection"),
        pytest.param(dialog("confirm", "Drop the table?"), "no", ContactType.NEED_CONFIRMATION,
                     "no", id="confirmation"),
        pytest.param(dialog("input", "Name it"), "crewdb, my own", ContactType.NEED_INPUT,
                     "crewdb, my own", id="free-text"),
    ],
)  # fmt: skip
def test_pi_asks_through_an_extension_and_the_answer_reaches_the_model(
    run: Any, model: Model, step: Any, answer: str, kind: ContactType, told: str
) -> None:
    model.script([step], [text("Using it.")])
    leader, store = run(PI_ASKING).start()

    (task,) = wait_for_run(store, Until.WAITING, timeout=60).tasks
    assert task.contact is not None and task.contact.type is kind
    verbs.respond(store, "t", answer, session=SESSION)

    code, task, context = finished(leader, store)
    assert code == 0 and task.status is TaskStatus.COMPLETED, context
    assert said(model.scripted()[1], f"The user answered: {told}")
