"""The examples of docs/ still do what the pages say: each is run in a real shell, as written."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest
from doc_examples import PAGES, Shell, matches, transcript

DOCS = Path(__file__).parent.parent / "docs"
#: The pages whose examples run offline, each in a fresh folder with crew on PATH.
RUNNABLE = ["getting-started.md", "verbs.md", "ci.md"]


def _shell_env(home: Path) -> dict[str, str]:
    """What a reader's terminal would have: crew on PATH, no crew settings, plain output."""
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith("CREW_") and name not in {"COLUMNS", "FORCE_COLOR"}
    }
    env.update(
        HOME=str(home),
        PATH=os.pathsep.join([str(Path(sys.executable).parent), "/usr/bin", "/bin"]),
        NO_COLOR="1",
        TERM="dumb",
        CREW_FSYNC="0",  # as every test: the disk's durability is not what a page shows
    )
    return env


@pytest.mark.parametrize("page", RUNNABLE)
def test_every_shell_example_of_the_page_prints_what_it_shows(page: str, tmp_path: Path) -> None:
    if "$ jq " in (DOCS / page).read_text() and shutil.which("jq") is None:
        pytest.skip("the page's examples use jq, which is not installed")
    document = PAGES.parse(DOCS / page)
    examples = list(document)
    assert any(e.region.evaluator.__name__ == "_check_console" for e in examples), page
    home = tmp_path / "home"
    home.mkdir()
    shell = Shell(home, _shell_env(home))
    document.namespace["shell"] = shell
    try:
        for example in examples:
            example.evaluate()
    finally:
        shell.close()


def test_the_ellipsis_matches_text_within_a_line_and_whole_lines() -> None:
    assert matches(["Sent answer msg_... to plan."], ["Sent answer msg_12ab to plan."])
    assert not matches(["Sent answer msg_... to plan."], ["Sent answer msg_12ab to build."])
    assert matches(["a", "...", "z"], ["a", "z"])
    assert matches(["a", "...", "z"], ["a", "b", "c", "z"])
    assert not matches(["a", "...", "z"], ["a", "b"])
    assert not matches(["a"], ["a", "b"])
    assert matches(["x(1)..."], ["x(1) and more"])  # the rest is literal, not a pattern


def test_a_transcript_splits_into_commands_their_output_and_exit_status() -> None:
    source = "$ crew wait r \\\n  --for done\nran\n[4]\n$ echo\n\n"
    assert list(transcript(source)) == [
        ("crew wait r \\\n  --for done", ["ran"], 4),
        ("echo", [""], 0),
    ]
