"""`crew run` on a real terminal (tmux): the live view, and answering a question inline."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from leaders import eventually, store_of, write_crew

from crew.paths import Home
from crew.registry import RunStatus

NO_TMUX = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")


class Terminal:
    """A tmux session on its own server, 120 by 30 (or as large as asked). COLUMNS and LINES
    are dropped: a value the test process has would override the terminal's own size."""

    def __init__(
        self, socket: str, command: str, cwd: Path, *, width: int = 120, height: int = 30
    ) -> None:
        self.socket = socket
        env = " ".join(
            f"{k}={shlex.quote(v)}" for k, v in os.environ.items() if k.startswith("CREW_")
        )
        self._tmux("new-session", "-d", "-s", "t", "-x", str(width), "-y", str(height),
                   f"cd {shlex.quote(str(cwd))} && env -u COLUMNS -u LINES {env} {command}; echo EXIT=$?; sleep 60")  # fmt: skip

    def _tmux(self, *args: str) -> str:
        done = subprocess.run(
            ["tmux", "-L", self.socket, *args], capture_output=True, text=True, check=True
        )
        return done.stdout

    def screen(self, *, escapes: bool = False) -> str:
        """What the terminal shows (`escapes`: with its colours and styles as escape codes)."""
        return self._tmux("capture-pane", "-p", *(["-e"] if escapes else []), "-t", "t")

    def title(self) -> str:
        """The pane's title, as the program in it may set it (OSC 0 or 2)."""
        return self._tmux("display-message", "-p", "-t", "t", "#{pane_title}")

    def keys(self, *keys: str) -> None:
        self._tmux("send-keys", "-t", "t", *keys)

    def shows(self, text: str, timeout: float = 20) -> str:
        try:
            return str(eventually(lambda: text in (screen := self.screen()) and screen, timeout))
        except AssertionError:
            raise AssertionError(
                f"{text!r} not shown within {timeout}s:\n{self.screen()}"
            ) from None

    def close(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True, check=False)


@pytest.fixture
def terminal(tmp_path: Path) -> Iterator[Terminal]:
    write_crew(
        tmp_path,
        [
            {"id": "plan", "prompt": "say:thinking [hard] ; ask:need_selection:Which database? [postgres|sqlite] ; read ; exit:0"},
            {"id": "build", "prompt": "say:building ; exit:0", "dependsOn": ["plan"]},
        ],
    )  # fmt: skip
    crew = f"{shlex.quote(sys.executable)} -m crew run crew.toml"
    term = Terminal(f"crew-test-{os.getpid()}-{tmp_path.name}", crew, tmp_path)
    try:
        yield term
    finally:
        term.close()


@NO_TMUX
def test_the_live_view_shows_the_question_and_takes_the_answer(
    terminal: Terminal, home: Home
) -> None:
    screen = terminal.shows("⏎ answer plan's question")
    assert "? Which database? [postgres|sqlite]" in screen
    assert "waiting" in screen and "after plan" in screen

    terminal.keys("Enter")
    prompt = terminal.shows("Answer (number or text")
    assert "1. postgres" in prompt and "2. sqlite" in prompt
    terminal.keys("2", "Enter")

    final = terminal.shows("EXIT=0")
    assert "completed" in final
    # The frame before the answer and the question are gone: one frame, then the summary.
    assert final.count("TASK ") == 1 and "Answer (" not in final, final
    (run_id,) = home.run_ids()
    store = store_of(home, run_id)
    assert store.state().run.status is RunStatus.COMPLETED
    assert "got respond sqlite" in store.paths.log("plan").read_text()


@NO_TMUX
def test_a_digit_of_another_script_at_the_answer_prompt_is_refused_not_a_crash(
    terminal: Terminal, home: Home
) -> None:
    terminal.shows("⏎ answer plan's question")
    terminal.keys("Enter")
    terminal.shows("Answer (number or text")
    terminal.keys("²", "Enter")  # str.isdigit() says yes, int() says no

    terminal.shows("Not sent:")
    terminal.keys("Enter")
    terminal.shows("Answer (number or text")
    terminal.keys("2", "Enter")

    terminal.shows("EXIT=0")
    (run_id,) = home.run_ids()
    assert "got respond sqlite" in store_of(home, run_id).paths.log("plan").read_text()


@NO_TMUX
def test_ctrl_c_stops_leading_and_says_how_to_resume(terminal: Terminal, home: Home) -> None:
    terminal.shows("⏎ answer plan's question")

    terminal.keys("C-c")

    final = terminal.shows("EXIT=130")
    assert "crew resume" in final
    (run_id,) = home.run_ids()
    assert store_of(home, run_id).state().run.status is RunStatus.RUNNING  # resumable


@NO_TMUX
def test_ctrl_c_at_the_answer_prompt_stops_leading_too(terminal: Terminal, home: Home) -> None:
    # The prompt was a blocking input(): the leader stopped, the command waited for Enter.
    terminal.shows("⏎ answer plan's question")
    terminal.keys("Enter")
    terminal.shows("Answer (number or text")

    terminal.keys("C-c")

    final = terminal.shows("EXIT=130")
    assert "crew resume" in final


@NO_TMUX
def test_a_run_answered_elsewhere_ends_with_the_answer_prompt_open(
    terminal: Terminal, home: Home
) -> None:
    terminal.shows("⏎ answer plan's question")
    terminal.keys("Enter")
    terminal.shows("Answer (number or text")
    (run_id,) = home.run_ids()

    answered = subprocess.run(
        [sys.executable, "-m", "crew", "respond", run_id, "plan", "postgres"],
        cwd=home.root.parent, capture_output=True, text=True, check=False,
    )  # fmt: skip

    assert answered.returncode == 0, answered.stderr
    final = terminal.shows("EXIT=0")
    assert "completed" in final


@NO_TMUX
def test_crew_watch_follows_a_detached_run_and_answers_from_another_terminal(
    tmp_path: Path, home: Home
) -> None:
    write_crew(
        tmp_path,
        [
            {
                "id": "ask",
                "prompt": "ask:need_input:Ship it? ; read ; say:shipping ; sleep:0.5 ; exit:0",
            }
        ],
    )
    started = subprocess.run(
        [sys.executable, "-m", "crew", "run", "crew.toml", "--detach"],
        cwd=tmp_path, capture_output=True, text=True, check=True,
    )  # fmt: skip
    run_id = started.stdout.strip()
    watch = Terminal(
        f"crew-watch-{os.getpid()}",
        f"{shlex.quote(sys.executable)} -m crew watch {run_id}",
        tmp_path,
    )
    try:
        screen = watch.shows("⏎ answer ask's question (1 waiting) · q leave")
        assert "? Ship it?" in screen

        watch.keys("Enter")
        watch.shows("Answer (your answer")
        watch.keys("yes please", "Enter")

        final = watch.shows("EXIT=0")  # the run ended: watch shows the last state and returns
        assert "completed" in final and "shipping" in final
    finally:
        watch.close()
    assert "got respond yes please" in store_of(home, run_id).paths.log("ask").read_text()


@NO_TMUX
def test_crew_watch_says_at_once_that_the_leader_died(tmp_path: Path, home: Home) -> None:
    # Its leader's death changes no file: the view went on showing a run that was not led.
    write_crew(
        tmp_path, [{"id": "slow", "prompt": "say:busy ; sleep:30"}], crew={"leaderStaleAfter": "3s"}
    )
    started = subprocess.run(
        [sys.executable, "-m", "crew", "run", "crew.toml", "--detach", "--json"],
        cwd=tmp_path, capture_output=True, text=True, check=True,
    )  # fmt: skip
    run = json.loads(started.stdout)
    watch = Terminal(
        f"crew-dies-{os.getpid()}", f"{shlex.quote(sys.executable)} -m crew watch {run['runId']}",
        tmp_path, width=220,  # the warning on one line
    )  # fmt: skip
    try:
        watch.shows("busy")
        os.kill(run["pid"], signal.SIGKILL)
        screen = watch.shows("the leader is gone", timeout=30)
        assert f"crew resume {run['runId']}" in screen, screen
    finally:
        watch.close()
        subprocess.run(
            [sys.executable, "-m", "crew", "cancel", run["runId"]], capture_output=True, check=False
        )


@NO_TMUX
def test_crew_watch_leaves_on_q(tmp_path: Path, home: Home) -> None:
    write_crew(tmp_path, [{"id": "slow", "prompt": "say:busy ; sleep:30"}])
    started = subprocess.run(
        [sys.executable, "-m", "crew", "run", "crew.toml", "--detach"],
        cwd=tmp_path, capture_output=True, text=True, check=True,
    )  # fmt: skip
    run_id = started.stdout.strip()
    watch = Terminal(
        f"crew-q-{os.getpid()}", f"{shlex.quote(sys.executable)} -m crew watch {run_id}", tmp_path
    )
    try:
        watch.shows("busy")
        watch.keys("q")
        watch.shows("EXIT=0")
    finally:
        watch.close()
        subprocess.run(
            [sys.executable, "-m", "crew", "cancel", run_id], capture_output=True, check=False
        )


def test_the_live_view_shows_what_a_worker_said_last(tmp_path: Path) -> None:
    from crew.dashboard import last_line

    log = tmp_path / "t.log"
    log.write_bytes(
        b"compiling\n\x1b[32m@supervisor progress: 3 of 5\x1b[0m\n"
        b'@supervisor ack: msg_0123456789abcdef\n@supervisor decision: {"action": "pick"}\n\n'
    )

    assert last_line(log) == "progress: 3 of 5"
    assert last_line(tmp_path / "missing.log") == ""


@NO_TMUX
def test_the_hints_wrap_between_pieces_never_inside_one(tmp_path: Path, home: Home) -> None:
    write_crew(tmp_path, [{"id": "plan", "prompt": "ask:need_input:Which database? ; read"}])
    crew = f"{shlex.quote(sys.executable)} -m crew run crew.toml"
    term = Terminal(f"crew-narrow-{os.getpid()}", crew, tmp_path, width=45)
    try:
        screen = term.shows("(1 waiting)")
        lines = [line.strip() for line in screen.splitlines()]
        assert "⏎ answer plan's question (1 waiting)" in lines, screen
        assert "Ctrl-C stop" in lines, screen
    finally:
        term.close()


@NO_TMUX
def test_after_ctrl_c_each_command_is_on_a_line_of_its_own(terminal: Terminal, home: Home) -> None:
    terminal.shows("⏎ answer plan's question")

    terminal.keys("C-c")

    lines = terminal.shows("EXIT=130").splitlines()
    (run_id,) = home.run_ids()
    assert f"crew: stopped leading run {run_id}" in lines
    assert f"crew: continue it with `crew resume {run_id}`" in lines
    assert f"crew: end it with `crew cancel {run_id}`" in lines


@NO_TMUX
def test_an_answer_in_a_narrow_terminal_leaves_no_old_frame_behind(
    tmp_path: Path, home: Home
) -> None:
    question = "Which database should the service use in production, and why that one?"
    write_crew(tmp_path, [{"id": "plan", "prompt": f"ask:need_input:{question} ; read ; exit:0"}])
    crew = f"echo BEFORE THE VIEW; {shlex.quote(sys.executable)} -m crew run crew.toml"
    term = Terminal(f"crew-answer-{os.getpid()}", crew, tmp_path, width=45, height=80)
    try:
        term.shows("(1 waiting)")
        term.keys("Enter")
        term.shows("Answer (your answer")
        term.keys("Postgres, because we already run it everywhere else", "Enter")
        final = term.shows("EXIT=0")
    finally:
        term.close()
    above, frame = final.split("TASK ")
    assert "Answer (" not in final and "TASK " not in frame, final  # one frame: the last
    # What the terminal showed before the view is still there; nothing of the answer is.
    assert above.splitlines()[0] == "BEFORE THE VIEW", final
    assert "asks (need_input)" not in above, final
