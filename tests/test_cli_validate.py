"""`crew validate` checks a crew.toml without starting a run: every problem at once, each with
its file, key and fix (exit 2), and `crew run` refuses with the same list, writing nothing."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import CliResult, config, snapshot_files

from crew.adapters import adapter_for
from crew.config import PLACEHOLDERS, parse_config
from crew.config_checks import ConfigProblem, InvalidConfig
from crew.leader import spawn
from crew.paths import Home
from crew.store.runstore import RunStore
from crew.validation import validate

Cli = Callable[..., CliResult]

VALID = """
[crew]
name = "release"

[agents.coder]
command = ["python3", "-c", "pass", "{prompt}", "{task}", "{run}", "{crewDir}", "{python}"]
timeout = "30m"

[agents.shell]
command = "sh -c 'echo ${HOME} {{.State}} { x } {} {a,b}' sh {prompt}"

[[tasks]]
id = "plan"
agent = "coder"
prompt = "Write a plan with {braces} of its own"

[[tasks]]
id = "build"
agent = "coder"
prompt = "Build it"
dependsOn = ["plan"]

[[tasks]]
id = "ship"
agent = "shell"
prompt = "ship"
dependsOn = ["build"]
"""

#: Five problems of four kinds, in two tables: a schema error (a bad duration) in the same agent
#: as an unknown placeholder, an unknown agent, an unknown dependency, and a cycle.
BROKEN = """
[agents.coder]
command = ["python3", "-c", "pass", "{promt}"]
timeout = "soon"

[[tasks]]
id = "plan"
agent = "coder"
prompt = "Write a plan"
dependsOn = ["build"]

[[tasks]]
id = "build"
agent = "coderr"
prompt = "Build it"
dependsOn = ["plan", "tset"]
"""

BROKEN_ERR = (
    "crew: error: crew.toml: agents.coder.timeout: expected a duration like '500ms', '30s', "
    "'2m', '1h' or a number, got 'soon'\n"
    "crew: error: crew.toml: agents.coder.command[3]: unknown placeholder {promt} (it would "
    "reach the worker as it is)\n"
    "  hint: did you mean {prompt}? (the placeholders are {prompt}, {task}, {run}, {crewDir}, "
    "{python})\n"
    "crew: error: crew.toml: tasks[1].agent: unknown agent 'coderr' (agents: coder)\n"
    "  hint: did you mean 'coder'?\n"
    "crew: error: crew.toml: tasks[1].dependsOn: unknown task 'tset'\n"
    "  hint: name the id of a task listed here\n"
    "crew: error: crew.toml: tasks: dependency cycle plan -> build -> plan\n"
    "  hint: remove one of these dependsOn entries\n"
    "crew: 5 problems in crew.toml.\n"
)


@pytest.fixture
def crew_toml(tmp_path: Path) -> Callable[[str], Path]:
    def write(text: str) -> Path:
        path = tmp_path / "crew.toml"
        path.write_text(text)
        return path

    return write


def test_a_valid_crew_toml_is_summed_up(cli: Cli, crew_toml: Callable[[str], Path]) -> None:
    crew_toml(VALID)

    result = cli("validate", "crew.toml")

    assert (result.code, result.out, result.err) == (
        0,
        "crew.toml: valid (2 agents, 3 tasks).\n",
        "",
    )


def test_a_valid_crew_toml_as_json(cli: Cli, crew_toml: Callable[[str], Path]) -> None:
    crew_toml(VALID)

    result = cli("validate", "crew.toml", "--json")

    assert (result.code, result.err) == (0, "")
    assert json.loads(result.out) == {
        "file": "crew.toml",
        "valid": True,
        "agents": 2,
        "tasks": 3,
        "problems": [],
    }


def test_every_problem_is_reported_in_one_go(
    cli: Cli, crew_toml: Callable[[str], Path], home: Home
) -> None:
    crew_toml(BROKEN)
    before = snapshot_files(home.root)

    result = cli("validate", "crew.toml")

    assert (result.code, result.out) == (2, "")
    assert result.err == BROKEN_ERR
    assert snapshot_files(home.root) == before


def test_json_lists_every_problem_on_stdout_and_nothing_on_stderr(
    cli: Cli, crew_toml: Callable[[str], Path]
) -> None:
    crew_toml(BROKEN)

    result = cli("validate", "crew.toml", "--json")

    assert (result.code, result.err) == (2, "")
    document = json.loads(result.out)
    assert (document["file"], document["valid"], document["agents"]) == ("crew.toml", False, None)
    assert [(p["file"], p["key"]) for p in document["problems"]] == [
        ("crew.toml", "agents.coder.timeout"),
        ("crew.toml", "agents.coder.command[3]"),
        ("crew.toml", "tasks[1].agent"),
        ("crew.toml", "tasks[1].dependsOn"),
        ("crew.toml", "tasks"),
    ]
    assert document["problems"][2] == {
        "file": "crew.toml",
        "key": "tasks[1].agent",
        "message": "unknown agent 'coderr' (agents: coder)",
        "hint": "did you mean 'coder'?",
    }


def test_run_refuses_with_the_same_problems_and_writes_nothing(
    cli: Cli, crew_toml: Callable[[str], Path], home: Home
) -> None:
    crew_toml(BROKEN)
    before = snapshot_files(home.root)

    result = cli("run", "crew.toml", "--no-input")

    assert (result.code, result.out, result.err) == (2, "", BROKEN_ERR)
    assert snapshot_files(home.root) == before


def test_run_with_an_unknown_placeholder_creates_no_run(
    cli: Cli, crew_toml: Callable[[str], Path], home: Home
) -> None:
    crew_toml(VALID.replace('"{task}"', '"{tsak}"'))
    before = snapshot_files(home.root)

    result = cli("run", "crew.toml", "--no-input")

    assert (result.code, result.out) == (2, "")
    assert result.err == (
        "crew: error: crew.toml: agents.coder.command[4]: unknown placeholder {tsak} (it would "
        "reach the worker as it is)\n"
        "  hint: did you mean {task}? (the placeholders are {prompt}, {task}, {run}, {crewDir}, "
        "{python})\n"
    )
    assert home.run_ids() == [] and not (home.root / "state").exists()
    assert snapshot_files(home.root) == before


@pytest.mark.parametrize(
    ("argument", "hint"),
    [
        ("{Prompt}", "did you mean {prompt}? (the placeholders are {prompt}, {task}, {run}, {crewDir}, {python})"),
        ("--dir={crewdir}/x", "did you mean {crewDir}? (the placeholders are {prompt}, {task}, {run}, {crewDir}, {python})"),
        ("{model}", "the placeholders are {prompt}, {task}, {run}, {crewDir}, {python}; to pass braces on as they are, put spaces inside them: `{ model }`"),
    ],
)  # fmt: skip
def test_an_unknown_placeholder_is_a_problem_with_a_fix(
    cli: Cli, crew_toml: Callable[[str], Path], argument: str, hint: str
) -> None:
    crew_toml(VALID.replace('"{python}"', json.dumps(argument)))

    result = cli("validate", "crew.toml")

    word = argument[argument.index("{") : argument.index("}") + 1]
    assert (result.code, result.out) == (2, "")
    assert result.err == (
        f"crew: error: crew.toml: agents.coder.command[7]: unknown placeholder {word} (it would "
        f"reach the worker as it is)\n  hint: {hint}\n"
    )


def test_every_placeholder_checked_is_filled_in_for_a_worker(
    make_run: Callable[..., RunStore],
) -> None:
    every = [f"{{{name}}}" for name in PLACEHOLDERS]
    store = make_run(config(agents={"coder": {"command": ["python3", *every, "{ x }"]}}))
    state = store.state()
    agent = state.run.config.agents["coder"]

    launch = spawn.launch_for(
        state.run, state.tasks["plan"], agent, store.paths, adapter_for(agent), attempt=1
    )

    assert launch.argv[1:] == [
        "Write a plan",
        "plan",
        state.run.run_id,
        str(store.paths.home.crew_dir(state.run.crew_dir)),  # absolute for the worker
        sys.executable,
        "{ x }",
    ]


def test_a_bad_duration_quotes_its_value_once(cli: Cli, crew_toml: Callable[[str], Path]) -> None:
    crew_toml(VALID.replace('timeout = "30m"', 'timeout = "soon"'))

    result = cli("validate", "crew.toml")

    assert (result.code, result.out) == (2, "")
    assert result.err == (
        "crew: error: crew.toml: agents.coder.timeout: expected a duration like '500ms', '30s', "
        "'2m', '1h' or a number, got 'soon'\n"
    )


def test_an_unknown_key_suggests_the_known_one(cli: Cli, crew_toml: Callable[[str], Path]) -> None:
    crew_toml(VALID.replace('timeout = "30m"', 'stalAfter = "2m"'))

    result = cli("validate", "crew.toml")

    assert (result.code, result.out) == (2, "")
    assert result.err == (
        "crew: error: crew.toml: agents.coder.stalAfter: unknown key\n"
        "  hint: did you mean stallAfter?\n"
    )


def test_a_toml_syntax_error_has_its_line_and_column(
    cli: Cli, crew_toml: Callable[[str], Path]
) -> None:
    crew_toml(VALID.replace('name = "release"', "name = release"))

    text = cli("validate", "crew.toml")
    document = cli("validate", "crew.toml", "--json")

    assert (text.code, text.out) == (2, "")
    assert text.err == (
        "crew: error: crew.toml:3:8: not valid TOML: invalid value\n"
        "  hint: see https://toml.io for the syntax\n"
    )
    assert document.code == 2
    assert json.loads(document.out)["problems"] == [
        {
            "file": "crew.toml",
            "key": "",
            "message": "not valid TOML: invalid value",
            "hint": "see https://toml.io for the syntax",
            "line": 3,
            "column": 8,
        }
    ]


def test_tables_nested_too_deep_name_their_line(cli: Cli, crew_toml: Callable[[str], Path]) -> None:
    crew_toml(
        VALID.replace('prompt = "ship"', 'prompt = "ship"\ntitle = ' + "[" * 5000 + "]" * 5000)
    )

    result = cli("run", "crew.toml", "--no-input")

    assert (result.code, result.out) == (2, "")
    assert result.err == "crew: error: crew.toml:27: title: nested more than 16 levels deep\n"


def test_without_an_argument_the_homes_crew_toml_is_checked(cli: Cli, home: Home) -> None:
    home.config_file.write_text(VALID.replace('"{run}"', '"{rnu}"'))

    result = cli("validate")

    assert (result.code, result.out) == (2, "")
    assert result.err.startswith(
        f"crew: error: {home.config_file}: agents.coder.command[5]: unknown placeholder {{rnu}}"
    )


def test_a_missing_file_is_a_usage_error(cli: Cli) -> None:
    result = cli("validate", "nope.toml")

    assert (result.code, result.out) == (2, "")
    assert result.err == "crew: error: nope.toml: no such file.\nCreate one with `crew init`.\n"


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="no /dev/zero")
@pytest.mark.parametrize("command", ["validate", "run"])
def test_a_file_that_never_ends_is_refused_not_read_whole(cli: Cli, command: str) -> None:
    result = cli(command, "/dev/zero")  # read whole, it filled the memory (2.4 GB in 3 s)

    assert (result.code, result.out) == (2, "")
    assert result.err == "crew: error: /dev/zero: more than the 16 MiB crew reads of a crew.toml.\n"


def test_the_crew_command_validates_in_a_process_of_its_own(
    crew_toml: Callable[[str], Path], tmp_path: Path
) -> None:
    crew_toml(BROKEN)

    done = subprocess.run(
        [sys.executable, "-m", "crew", "validate", "crew.toml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert (done.returncode, done.stdout, done.stderr) == (2, "", BROKEN_ERR)


def test_the_library_returns_the_problems(crew_toml: Callable[[str], Path]) -> None:
    result = validate(crew_toml(BROKEN))

    assert not result.valid and result.exit_code == 2
    assert result.problems[0] == ConfigProblem(
        "agents.coder.timeout",
        "expected a duration like '500ms', '30s', '2m', '1h' or a number, got 'soon'",
    )
    with pytest.raises(InvalidConfig) as caught:
        parse_config({"agents": {"a": {"command": ["x", "{promt}"]}}, "tasks": "none"})
    assert [p.key for p in caught.value.problems] == ["agents.a.command[1]", "tasks"]


DOC = Path(__file__).resolve().parent.parent / "docs" / "crew-toml.md"


def _blocks(kind: str) -> list[str]:
    """The fenced blocks of one kind in docs/crew-toml.md, in order."""
    text = DOC.read_text()
    return [part.split("```", 1)[0] for part in text.split(f"```{kind}\n")[1:]]


def test_the_docs_examples_are_what_crew_validate_says(cli: Cli, tmp_path: Path) -> None:
    broken, complete = (b for b in _blocks("toml") if "[agents.coder]" in b)
    invalid, ok = (b for b in _blocks("console") if b.startswith("$ crew validate .crew/crew."))
    (tmp_path / ".crew" / "crew.toml").write_text(broken)

    result = cli("validate", ".crew/crew.toml")
    (tmp_path / ".crew" / "crew.toml").write_text(complete)
    valid = cli("validate", ".crew/crew.toml")

    assert invalid == f"$ crew validate .crew/crew.toml\n{result.err}$ echo $?\n{result.code}\n"
    assert (valid.code, ok) == (0, f"$ crew validate .crew/crew.toml\n{valid.out}")


def test_a_table_the_schema_refuses_does_not_hide_the_problems_of_the_others(
    cli: Cli, crew_toml: Callable[[str], Path]
) -> None:
    crew_toml(
        'tasks = [5, {id = "b", agnt = "x", prompt = "p", dependsOn = ["c"]}]\n'
        "[agents.x]\n"
        'command = ["run", "{tsk}"]\n'
        "maxNudges = -1\n"
    )

    result = cli("validate", "crew.toml")

    assert (result.code, result.out) == (2, "")
    assert result.err == (
        "crew: error: crew.toml: tasks[0]: Input should be a valid dictionary (got 5)\n"
        "crew: error: crew.toml: tasks[1].agent: required key is missing\n"
        "crew: error: crew.toml: tasks[1].agnt: unknown key\n"
        "  hint: did you mean agent?\n"
        "crew: error: crew.toml: tasks[1].dependsOn: unknown task 'c'\n"
        "  hint: name the id of a task listed here\n"
        "crew: error: crew.toml: agents.x.maxNudges: Input should be greater than or equal to 0 "
        "(got -1)\n"
        "crew: error: crew.toml: agents.x.command[1]: unknown placeholder {tsk} (it would reach "
        "the worker as it is)\n"
        "  hint: did you mean {task}? (the placeholders are {prompt}, {task}, {run}, {crewDir}, "
        "{python})\n"
        "crew: 6 problems in crew.toml.\n"
    )


@pytest.mark.parametrize("args", [("validate", "crew.toml"), ("validate", "--home", ".crew")])
def test_a_path_is_judged_by_reading_it_not_by_its_access_bits(
    cli: Cli,
    crew_toml: Callable[[str], Path],
    home: Home,
    monkeypatch: pytest.MonkeyPatch,
    args: tuple[str, ...],
) -> None:
    # A folder one may enter but not list (mode 0300), a file readable through a group the
    # check does not count: click's check of the access bits refused what crew, and the fast
    # path, read (or say why they cannot, in crew's words).
    home.root.mkdir(exist_ok=True)
    shutil.copy(crew_toml(VALID), home.root / "crew.toml")
    monkeypatch.setattr(os, "access", lambda *_, **__: False)

    result = cli(*args)

    assert result.code == 0, result.err
