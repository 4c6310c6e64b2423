"""`crew logs RUN [TASK…]` through the real command: every task's output interleaved in the
order the leader received it, task prefixes, --tail, --since, --timestamps, --json, following
a run to its end, and refusals."""

from __future__ import annotations

import json
import os
import pty
import re
import subprocess
import sys
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from conftest import snapshot_files
from leaders import Leader, eventually, store_of, write_crew

from crew.paths import Home
from crew.store import logindex
from crew.store.runstore import RunStore

#: Two workers that take turns, each step on the test's go-ahead (a file appearing): `a` prints
#: a1, `builder` b1, `a` a2, `builder` b2, `a` a3, in that order whatever the machine's load.
_WAIT = "until [ -e {0} ]; do sleep 0.01; done"
_TURNS = [
    {"id": "a", "prompt": f"echo a1; {_WAIT.format('g1')}; echo a2; {_WAIT.format('g3')}; echo a3"},
    {"id": "builder", "prompt": f"{_WAIT.format('g0')}; echo b1; {_WAIT.format('g2')}; echo b2"},
]
#: Each line, the task that prints it, and the go-ahead that lets the next one come.
_STEPS = [("a1", "a", "g0"), ("b1", "builder", "g1"), ("a2", "a", "g2"), ("b2", "builder", "g3")]
INTERLEAVED = "a       | a1\nbuilder | b1\na       | a2\nbuilder | b2\na       | a3\n"


def _crew(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "crew", *args],
        cwd=cwd, capture_output=True, text=True, check=False, timeout=60, env=env,
    )  # fmt: skip


def _take_turns(store: RunStore, tmp_path: Path, seen: Callable[[str, str], None]) -> None:
    """Let the workers print their lines in turn; `seen(task, line)` waits until it is out."""
    for line, task, go in _STEPS:
        seen(task, line)
        (tmp_path / go).touch()


def _in_log(store: RunStore) -> Callable[[str, str], None]:
    def seen(task: str, line: str) -> None:
        log = store.paths.log(task)
        eventually(lambda: log.is_file() and f"{line}\n" in log.read_text(), timeout=30)

    return seen


def _finished_run(tmp_path: Path, home: Home) -> RunStore:
    """A run whose two workers printed in turns, ended."""
    write_crew(tmp_path, _TURNS, command=["sh", "-c", "{prompt}"])
    leader = Leader("run", "crew.toml", cwd=tmp_path)
    store = store_of(home, leader.run_id)
    _take_turns(store, tmp_path, _in_log(store))
    assert leader.finish() == 0, leader.err
    return store


def test_every_task_interleaved_in_the_order_received_after_padded_prefixes(
    tmp_path: Path, home: Home
) -> None:
    store = _finished_run(tmp_path, home)

    shown = _crew("logs", store.run_id, cwd=tmp_path)
    named = _crew("logs", store.run_id, "builder", "a", "builder", cwd=tmp_path)
    one = _crew("logs", store.run_id, "builder", "--tail", "5", cwd=tmp_path)
    twice = _crew("logs", store.run_id, "a", "a", cwd=tmp_path)

    assert (shown.returncode, shown.stdout, shown.stderr) == (0, INTERLEAVED, "")
    assert named.stdout == INTERLEAVED  # those named, each once, in the order received
    assert one.stdout == "b1\nb2\n"  # one task: no prefix
    assert twice.stdout == "a1\na2\na3\n"  # one task named twice: its log as stored
    assert logindex.index_path(store.paths.log("a")).read_bytes().count(b"\n") >= 3


def test_tail_since_and_timestamps(tmp_path: Path, home: Home) -> None:
    store = _finished_run(tmp_path, home)
    stamped = _crew("logs", store.run_id, "--timestamps", cwd=tmp_path).stdout.splitlines()
    stamp = re.compile(r"^(a      |builder) \| (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z) (\w+)$")
    parsed = [stamp.match(line) for line in stamped]
    assert all(parsed), stamped
    times = [match.group(2) for match in parsed if match]
    b2 = times[3]

    tail = _crew("logs", store.run_id, "--tail", "1", cwd=tmp_path)
    none = _crew("logs", store.run_id, "--tail", "0", cwd=tmp_path)
    every = _crew("logs", store.run_id, "--tail", "9" * 30, cwd=tmp_path)
    since = _crew("logs", store.run_id, "--since", b2, cwd=tmp_path)
    recent = _crew("logs", store.run_id, "--since", "1h", cwd=tmp_path)

    assert [m.group(3) for m in parsed if m] == ["a1", "b1", "a2", "b2", "a3"]
    assert times == sorted(times)
    assert tail.stdout == "builder | b2\na       | a3\n"
    assert (none.returncode, none.stdout) == (0, "")
    assert (every.returncode, every.stdout) == (0, INTERLEAVED)
    assert since.stdout == "builder | b2\na       | a3\n"
    assert recent.stdout == INTERLEAVED


def test_json_lines_give_back_each_log(tmp_path: Path, home: Home) -> None:
    store = _finished_run(tmp_path, home)
    stamped = _crew("logs", store.run_id, "--timestamps", cwd=tmp_path).stdout.splitlines()

    shown = _crew("logs", store.run_id, "--json", cwd=tmp_path)
    lines = [json.loads(line) for line in shown.stdout.splitlines()]

    assert [sorted(line) for line in lines] == [["line", "task", "time"]] * 5
    assert [(line["task"], line["line"]) for line in lines] == [
        ("a", "a1"), ("builder", "b1"), ("a", "a2"), ("builder", "b2"), ("a", "a3"),
    ]  # fmt: skip
    for task in ("a", "builder"):
        text = "".join(line["line"] + "\n" for line in lines if line["task"] == task)
        assert text.encode() == store.paths.log(task).read_bytes()
    for line, stamped_line in zip(lines, stamped, strict=True):
        assert datetime.fromisoformat(line["time"]).tzname() == "UTC"
        assert line["time"][:23] in stamped_line  # the same time, to the millisecond


def test_follow_prints_lines_as_they_come_and_ends_with_the_run(tmp_path: Path, home: Home) -> None:
    write_crew(tmp_path, _TURNS, command=["sh", "-c", "{prompt}"])
    leader = Leader("run", "crew.toml", cwd=tmp_path)
    store = store_of(home, leader.run_id)
    follower = subprocess.Popen(
        [sys.executable, "-m", "crew", "logs", leader.run_id, "-f"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert follower.stdout is not None
    shown: list[str] = []

    def seen(task: str, line: str) -> None:
        shown.append(follower.stdout.readline())  # type: ignore[union-attr]  # piped above
        assert shown[-1] == f"{task:<7} | {line}\n"

    _take_turns(store, tmp_path, seen)
    out, err = follower.communicate(timeout=60)  # it ends by itself: the run has ended

    assert "".join(shown) + out == INTERLEAVED
    assert (follower.returncode, err) == (0, "")
    assert leader.finish() == 0, leader.err


def test_follow_of_named_tasks_ends_when_they_have_ended(tmp_path: Path, home: Home) -> None:
    go = tmp_path / "go"
    tasks = [
        {"id": "quick", "prompt": "echo done"},
        {"id": "slow", "prompt": f"{_WAIT.format(go)}; echo late"},
    ]
    write_crew(tmp_path, tasks, command=["sh", "-c", "{prompt}"])
    leader = Leader("run", "crew.toml", cwd=tmp_path)

    followed = _crew("logs", leader.run_id, "quick", "-f", "--timestamps", cwd=tmp_path)
    go.touch()

    assert followed.returncode == 0
    assert re.fullmatch(r"\d{4}-\S+Z done\n", followed.stdout), followed.stdout
    assert leader.finish() == 0, leader.err


def _written_logs(store: RunStore, logs: dict[str, bytes], index: dict[str, bytes]) -> None:
    store.paths.logs_dir.mkdir(exist_ok=True)
    for task, data in logs.items():
        store.paths.log(task).write_bytes(data)
    for task, data in index.items():
        logindex.index_path(store.paths.log(task)).write_bytes(data)


def test_since_a_duration_leaves_out_older_lines(make_run: Callable[..., RunStore]) -> None:
    store = make_run()
    now = logindex.now_us()
    _written_logs(
        store,
        {"plan": b"an hour ago\njust now\n"},
        {"plan": b"12 %d\n21 %d\n" % (now - 3600_000_000, now)},
    )

    shown = _crew("logs", "latest", "--since", "10m", cwd=store.paths.home.root.parent)
    one = _crew("logs", "latest", "plan", "--since", "2h", cwd=store.paths.home.root.parent)

    assert (shown.returncode, shown.stdout) == (0, "plan  | just now\n")
    assert one.stdout == "an hour ago\njust now\n"


def test_logs_without_an_index_come_whole_in_the_order_they_were_written(
    make_run: Callable[..., RunStore],
) -> None:
    store = make_run()  # as a crew before the index wrote them
    _written_logs(store, {"plan": b"p1\np2\n", "build": b"b1\nb2"}, {})
    os.utime(store.paths.log("build"), ns=(0, 1_000_000_000_000_000_000))
    os.utime(store.paths.log("plan"), ns=(0, 2_000_000_000_000_000_000))

    shown = _crew("logs", "latest", "--timestamps", cwd=store.paths.home.root.parent)

    assert shown.stdout == (
        "build | 2001-09-09T01:46:40.000Z b1\n"
        "build | 2001-09-09T01:46:40.000Z b2\n"
        "plan  | 2033-05-18T03:33:20.000Z p1\n"
        "plan  | 2033-05-18T03:33:20.000Z p2\n"
    )


def _on_a_terminal(args: list[str], cwd: Path, env: dict[str, str]) -> bytes:
    """What `crew ARGS` prints on a real terminal."""
    pid, fd = pty.fork()
    if pid == 0:  # the child: crew on the terminal
        os.chdir(cwd)
        os.execve(sys.executable, [sys.executable, "-m", "crew", *args], env)
    out = b""
    while True:
        try:
            data = os.read(fd, 65536)
        except OSError:  # the terminal closed: crew has exited
            break
        if not data:
            break
        out += data
    os.waitpid(pid, 0)
    os.close(fd)
    return out


def test_prefixes_are_coloured_per_task_on_a_terminal_unless_no_color(
    make_run: Callable[..., RunStore],
) -> None:
    store = make_run()
    _written_logs(
        store,
        {"plan": b"p1 \x1b[31mred\n", "build": b"b1\x1b]0;title\x07\n"},
        {"plan": b"12 100\n", "build": b"13 200\n"},
    )
    cwd = store.paths.home.root.parent
    env = {**os.environ, "TERM": "xterm-256color"}
    env.pop("NO_COLOR", None)

    coloured = _on_a_terminal(["logs", "latest"], cwd, env)
    plain = _on_a_terminal(["logs", "latest"], cwd, {**env, "NO_COLOR": "1"})
    piped = _crew("logs", "latest", cwd=cwd, env=env)

    assert coloured == (
        b"\x1b[96mplan  |\x1b[0m p1 \x1b[31mred\x1b[0m\r\n"
        b"\x1b[93mbuild |\x1b[0m b1\xe2\x90\x9b]0;title\xe2\x90\x87\r\n"
    )  # the worker's colour passes and ends with its line; other controls are shown as text
    assert plain.startswith(b"plan  | p1 ") and b"\x1b[96m" not in plain
    assert piped.stdout == "plan  | p1 \x1b[31mred\nbuild | b1\x1b]0;title\x07\n"  # as stored


def test_refusals_are_one_sentence_and_write_nothing(make_run: Callable[..., RunStore]) -> None:
    store = make_run()
    cwd = store.paths.home.root.parent
    before = snapshot_files(store.paths.home.root)
    cases = {
        ("latest", "plan", "nope"): (
            5, f"Run {store.run_id} has no task 'nope' (tasks: plan, build)."
        ),
        ("latest", "../x"): (
            2, "Invalid task id '../x': expected 1-64 characters of a-z, 0-9, '_', '.', '-' "
            "starting with a letter or digit.",
        ),
        ("latest", "--tail", "x"): (2, "--tail: expected a number of lines (0 or more), got 'x'."),
        ("latest", "--tail", "-1"): (
            2, "--tail: expected a number of lines (0 or more), got '-1'."
        ),
        ("latest", "--since", "soon"): (
            2, "--since: expected a duration like '10m' or an ISO 8601 time like "
            "'2026-11-30T12:00:00Z', got 'soon'.",
        ),
    }  # fmt: skip

    for args, (code, sentence) in cases.items():
        shown = _crew("logs", *args, cwd=cwd)
        assert (shown.returncode, shown.stdout, shown.stderr) == (
            code, "", f"crew: error: {sentence}\n"
        ), args  # fmt: skip

    assert snapshot_files(store.paths.home.root) == before


def test_a_resumed_run_times_the_lines_a_crashed_leader_left_unindexed(
    tmp_path: Path, home: Home
) -> None:
    go = tmp_path / "go"
    write_crew(tmp_path, [{"id": "t", "prompt": f"say:one ; until:{go} ; say:two ; exit:0"}])
    leader = Leader("run", "crew.toml", cwd=tmp_path)
    store = store_of(home, leader.run_id)
    log, index = store.paths.log("t"), logindex.index_path(store.paths.log("t"))
    eventually(lambda: log.is_file() and log.read_bytes() == b"attempt 1\none\n")
    leader.process.kill()  # SIGKILL: as if it died between writing the log and its index
    leader.finish()
    index.unlink()  # (or as a crew before the index wrote it)
    os.utime(log, ns=(0, 1_000_000_000_000_000_000))

    resumed = Leader("resume", leader.run_id, cwd=tmp_path)
    eventually(lambda: b"attempt 2\n" in log.read_bytes())
    go.touch()
    assert resumed.finish() == 0, resumed.err
    shown = _crew("logs", store.run_id, "--timestamps", cwd=tmp_path).stdout.splitlines()

    assert index.read_bytes().startswith(b"14 1000000000000000\n")  # what the log held, then
    assert shown[:2] == [
        "t | 2001-09-09T01:46:40.000Z attempt 1",
        "t | 2001-09-09T01:46:40.000Z one",
    ]
    assert [line[29:] for line in shown[2:]] == ["attempt 2", "one", "two"]
    assert all(line[4:8] >= "2026" for line in shown[2:])  # received by the new leader, now
