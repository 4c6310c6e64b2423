"""crew.toml: validated before anything starts, with errors naming file, key and expectation."""

from __future__ import annotations

import inspect
import sys
from pathlib import Path

import pytest

from crew.clock import parse_duration
from crew.config import load_config
from crew.errors import UsageError
from crew.registry import AgentInput, AgentProtocol
from crew.scaffold import CONFIG_TEMPLATE

VALID = """
[crew]
name = "example"
maxParallel = 2
leaderStaleAfter = "15s"

[agents.coder]
command = ["python", "agents/coder.py", "{prompt}"]
input = "text"
timeout = "30m"
stallAfter = "500ms"
maxNudges = 1
maxAttempts = 2

[[tasks]]
id = "plan"
agent = "coder"
prompt = "Write a plan"

[[tasks]]
id = "build"
agent = "coder"
prompt = "Implement the plan"
dependsOn = ["plan"]

[limits]
maxPendingSteers = 10
warnPending = 5

[[autoRespond]]
type = "need_confirmation"
match = "(?i)run the tests"
answer = "yes"
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "crew.toml"
    path.write_text(text)
    return path


def test_a_valid_config_loads_with_durations_in_seconds(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, VALID))

    assert config.crew.name == "example" and config.crew.max_parallel == 2
    assert config.crew.leader_stale_after == 15.0
    coder = config.agents["coder"]
    assert coder.input is AgentInput.TEXT and coder.protocol is AgentProtocol.CREW
    assert coder.timeout == 1800.0 and coder.stall_after == 0.5
    assert [t.id for t in config.tasks] == ["plan", "build"]
    assert config.max_attempts_for(config.tasks[0]) == 2
    assert config.limits.max_pending_steers == 10 and config.limits.max_pending_follow_ups == 50
    assert config.auto_respond[0].answer == "yes"


def test_the_init_template_is_a_valid_config(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, CONFIG_TEMPLATE))

    assert [t.id for t in config.tasks] == ["hello"]


def test_a_command_string_is_split_into_arguments_without_a_shell(tmp_path: Path) -> None:
    text = VALID.replace(
        'command = ["python", "agents/coder.py", "{prompt}"]',
        "command = \"python 'my agent.py' {prompt}\"",
    )

    assert load_config(write(tmp_path, text)).agents["coder"].command == [
        "python",
        "my agent.py",
        "{prompt}",
    ]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (("maxParallel = 2", "maxParallel = 0"), "crew.maxParallel: Input should be greater than or equal to 1 (got 0)"),
        (('stallAfter = "500ms"', 'stallAfter = "soon"'), "agents.coder.stallAfter: expected a duration like"),
        (("maxNudges = 1", "maxNuges = 1"), "agents.coder.maxNuges: unknown key"),
        (('input = "text"', 'input = "xml"'), "agents.coder.input: Input should be 'jsonl' or 'text'"),
        (('dependsOn = ["plan"]', 'dependsOn = ["deploy"]'), "tasks[1].dependsOn: unknown task 'deploy'"),
        (('id = "build"', 'id = "plan"'), "tasks[1].id: duplicate task id 'plan'"),
        (('id = "build"', 'id = "../build"'), "tasks[1].id: String should match pattern"),
        (('agent = "coder"\nprompt = "Write', 'agent = "writer"\nprompt = "Write'), "tasks[0].agent: unknown agent 'writer' (agents: coder)"),
        (('type = "need_confirmation"', 'type = "progress"'), "autoRespond[0].type: autoRespond answers questions only"),
        (('match = "(?i)run the tests"', 'match = "(unclosed"'), "autoRespond[0].match: not a valid regular expression"),
        (('answer = "yes"', 'answer = "  "'), "autoRespond[0].answer: an answer must not be empty"),
    ],
)  # fmt: skip
def test_invalid_configs_name_the_key_and_what_was_expected(
    tmp_path: Path, change: tuple[str, str], message: str
) -> None:
    old, new = change
    assert old in VALID
    path = write(tmp_path, VALID.replace(old, new, 1))

    with pytest.raises(UsageError) as caught:
        load_config(path)

    assert str(caught.value).startswith(f"{path}: ")
    assert message in str(caught.value)
    assert caught.value.exit_code == 2


def test_a_dependency_cycle_is_named(tmp_path: Path) -> None:
    text = VALID.replace(
        'prompt = "Write a plan"', 'prompt = "Write a plan"\ndependsOn = ["build"]'
    )

    with pytest.raises(
        UsageError, match=r"dependency cycle (plan -> build -> plan|build -> plan -> build)"
    ):
        load_config(write(tmp_path, text))


def test_several_problems_are_all_listed(tmp_path: Path) -> None:
    text = VALID.replace("maxParallel = 2", "maxParallel = -1").replace(
        "maxNudges = 1", "maxNudges = -1"
    )

    with pytest.raises(UsageError, match=r"\(and 1 more problem\)") as caught:
        load_config(write(tmp_path, text))

    assert caught.value.hint is not None and "agents.coder.maxNudges" in caught.value.hint


def test_missing_required_keys_are_named(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="tasks: required key is missing"):
        load_config(write(tmp_path, '[agents.a]\ncommand = ["x"]\n'))


def test_bad_toml_and_missing_files_are_usage_errors(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="not valid TOML"):
        load_config(write(tmp_path, "[crew\nname="))
    with pytest.raises(UsageError, match="no such file"):
        load_config(tmp_path / "nope.toml")


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("500ms", 0.5), ("30s", 30.0), ("2m", 120.0), ("1h", 3600.0), ("1.5", 1.5), (45, 45.0)],
)
def test_durations(text: str | int, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize(
    "text",
    ["", "fast", "-1s", "1w", "nan", "\u0663\u0660m", "\uff11\uff10s", "3\u00a0s", "\u00b2s"],
)  # digits and spaces of other scripts: what `\d` and `\s` match beyond ASCII
def test_bad_durations_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="duration"):
        parse_duration(text)


# ----------------------------------------------------------------------------- what workers need


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (('prompt = "Write a plan"', 'prompt = "Write\\u0000 a plan"'), "tasks[0].prompt: contains a NUL character, which no program can be given"),
        (('"agents/coder.py"', '"agents/coder.py\\u0000"'), "agents.coder.command[1]: contains a NUL character"),
        (("maxAttempts = 2", 'maxAttempts = 2\ncwd = "sub\\u0000dir"'), "agents.coder.cwd: contains a NUL character"),
        (("maxAttempts = 2", 'maxAttempts = 2\nenv = { "A=B" = "x" }'), "agents.coder.env: 'A=B' is not an environment variable name (it must be non-empty, without '=' or NUL)"),
        (("maxAttempts = 2", 'maxAttempts = 2\nenv = { "" = "x" }'), "agents.coder.env: '' is not an environment variable name"),
        (("maxAttempts = 2", 'maxAttempts = 2\nenv = { "A\\u0000" = "x" }'), "agents.coder.env: 'A\\x00' is not an environment variable name"),
        (("maxAttempts = 2", 'maxAttempts = 2\nenv = { LOG = "a\\u0000b" }'), "agents.coder.env.LOG: contains a NUL character"),
        (('prompt = "Write a plan"', f'prompt = "{"x" * 2_000_000}"'), "tasks[0].prompt: 2000000 bytes, over the limit of 65536 (put long instructions in a file"),
        (('prompt = "Write a plan"', f'prompt = "x"\ntitle = "{"é" * 600}"'), "tasks[0].title: 1200 bytes, over the limit of 1024"),
        (('answer = "yes"', f'answer = "{"y" * 70_000}"'), "autoRespond[0].answer: 70000 bytes, over limits.maxBodyBytes (65536)"),
        (('timeout = "30m"', "timeout = 0"), "agents.coder.timeout: must be more than 0 (leave it out for none)"),
        (('stallAfter = "500ms"', 'stallAfter = "0s"'), "agents.coder.stallAfter: must be more than 0"),
        (("maxAttempts = 2", 'maxAttempts = 2\nwaitTimeout = "0ms"'), "agents.coder.waitTimeout: must be more than 0"),
        (('timeout = "30m"', "timeout = nan"), "agents.coder.timeout: expected a non-negative duration"),
        (('timeout = "30m"', "timeout = inf"), "agents.coder.timeout: expected a non-negative duration"),
        (('timeout = "30m"', "timeout = -5"), "agents.coder.timeout: expected a non-negative duration"),
        (('timeout = "30m"', 'timeout = "36501d"'), "agents.coder.timeout: expected a duration of at most 100 years"),
        (('leaderStaleAfter = "15s"', "leaderStaleAfter = 0"), "crew.leaderStaleAfter: must be at least 3s (got 0ms): a leader refreshes its heartbeat every 1s"),
        (('leaderStaleAfter = "15s"', 'leaderStaleAfter = "2s"'), "crew.leaderStaleAfter: must be at least 3s (got 2s)"),
        (('leaderStaleAfter = "15s"', "leaderStaleAfter = nan"), "crew.leaderStaleAfter: expected a non-negative duration"),
        (('prompt = "Write a plan"', 'prompt = "x"\n' + "a." * 3000 + "b = 1"), "tasks[0]" + ".a" * 14 + ": nested more than 16 levels deep"),
    ],
)  # fmt: skip
def test_values_no_worker_could_start_with_are_refused_up_front(
    tmp_path: Path, change: tuple[str, str], message: str
) -> None:
    old, new = change
    assert old in VALID
    path = write(tmp_path, VALID.replace(old, new, 1))

    with pytest.raises(UsageError) as caught:
        load_config(path)

    assert str(caught.value).startswith(f"{path}: {message}")
    assert len(str(caught.value)) < 400  # one sentence, whatever the size of what it quotes
    assert caught.value.exit_code == 2


@pytest.mark.parametrize("depth", [20, 400])
def test_brackets_nested_too_deep_are_named_by_their_line_however_deep_the_caller(
    tmp_path: Path, depth: int
) -> None:
    # The parser meets the recursion limit sooner from a deeper call stack: called from near
    # the limit, it stops where from the top it would have read the whole file.
    text = VALID.replace(
        'prompt = "Write a plan"', 'prompt = "x"\ntitle = ' + "[" * depth + "]" * depth
    )
    path = write(tmp_path, text)
    line = text[: text.index("title = ")].count("\n") + 1

    def refusal() -> str:
        with pytest.raises(UsageError) as caught:
            load_config(path)
        return str(caught.value)

    def from_depth(frames: int) -> str:
        return refusal() if frames <= 0 else from_depth(frames - 1)

    near_the_limit = sys.getrecursionlimit() - len(inspect.stack()) - 150
    assert refusal() == from_depth(near_the_limit)
    assert refusal().startswith(f"{path}:{line}: title: nested more than 16 levels deep")


def test_a_crew_definition_too_large_to_store_is_refused(tmp_path: Path) -> None:
    tasks = "".join(
        f'\n[[tasks]]\nid = "t{i}"\nagent = "coder"\nprompt = "{"x" * 60_000}"\n' for i in range(14)
    )

    with pytest.raises(UsageError, match=r"tasks: the crew definition takes \d+ bytes as JSON, "
                       r"over the limit of 786432"):  # fmt: skip
        load_config(write(tmp_path, VALID + tasks))


def test_the_largest_accepted_values_are_accepted(tmp_path: Path) -> None:
    text = (
        VALID.replace(
            'prompt = "Write a plan"', f'prompt = "{"x" * 65536}"\ntitle = "{"t" * 1024}"'
        )
        .replace('leaderStaleAfter = "15s"', 'leaderStaleAfter = "3s"')
        .replace("maxAttempts = 2", 'maxAttempts = 2\nenv = { "A" = "=b=" }\nkeepOpen = 0')
    )

    config = load_config(write(tmp_path, text))

    assert len(config.tasks[0].prompt) == 65536 and config.crew.leader_stale_after == 3.0
    assert config.agents["coder"].env == {"A": "=b="} and config.agents["coder"].keep_open == 0
