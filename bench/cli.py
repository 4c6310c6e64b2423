"""CLI latency: every crew command, a fresh process each time, against the typer floor.

Each command is started by the spawner (bench/spawner.py): wall time from spawn to exit, and its
peak RSS. The floor is a minimal two-command typer app (`python app.py status --run x`): what any
typer CLI costs to start; `python -c pass` is shown too. Commands and floors take turns, round
after round.

The hot commands — the ones a person or an agent runs in a loop — act on a live run led by a
detached leader, whose one worker asks a question at start and again after each answer (so
before each timed `crew respond` the task is waiting again; that wait is not timed), answers a
nudge with a status and acknowledges every frame. `crew wait` waits on a second run that has
already finished. The other commands read the live run. `crew run` leads a crew of one trivial
task to its end, in a home of its own, on the fast path and through typer (`CREW_FAST=0`).
`crew rerun` leads a run of that crew again, the same two ways. `crew add`, `crew handoff`,
`crew cancel`, `crew rm` and `crew prune` act on runs no leader leads, in a home of their own;
`crew init` makes a crew home in a folder emptied before each round.
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

from bench.common import Row, ms, spread
from bench.crews import (
    PYTHON,
    SESSION,
    crew_argv,
    crew_env,
    detached_run,
    new_home,
    new_run,
    wait_all,
    write_crew,
    write_script,
)
from bench.spawner import Command, Spawned, interleaved, spawner
from crew import verbs
from crew.config import load_config
from crew.domain.runs import create_run
from crew.registry import TaskStatus
from crew.waiting import Until, wait_for_run

FLOOR_APP = """\
import typer

app = typer.Typer()


@app.command()
def status(run: str = typer.Option("latest", "--run")) -> None:
    print(run)


@app.command()
def steer(body: str = typer.Option("", "--body")) -> None:
    print(body)


if __name__ == "__main__":
    app()
"""
#: Asks a question at start and after each answer; reports when nudged; acknowledges all.
ASKER = """\
import json, sys

print("@supervisor need_input: again?", flush=True)
for line in sys.stdin:
    frame = json.loads(line)
    print(f"@supervisor ack: {frame['id']}", flush=True)
    if frame["type"] == "respond":
        print("@supervisor need_input: again?", flush=True)
    elif frame["type"] == "nudge":
        print("@supervisor status: idle", flush=True)
"""
FLOOR = "typer floor"
HOT = {
    "crew status RUN --json": ("status", "{run}", "--json"),
    "crew steer RUN TASK x": ("steer", "{run}", "t1", "x"),
    "crew respond RUN TASK x": ("respond", "{run}", "t1", "x"),
    "crew follow-up RUN TASK x": ("follow-up", "{run}", "t1", "x"),
    "crew nudge RUN TASK": ("nudge", "{run}", "t1"),
    "crew wait DONE": ("wait", "{done}"),
    "crew steer RUN TASK x --wait (until delivered)": (
        *("steer", "{run}", "t1", "x"),
        *("--wait", "--timeout", "30s"),
    ),
}
OTHER = {
    "crew runs": ("runs",),
    "crew status RUN": ("status", "{run}"),
    "crew mailbox RUN": ("mailbox", "{run}"),
    "crew events RUN": ("events", "{run}"),
    "crew logs RUN TASK": ("logs", "{run}", "t1"),
    "crew logs RUN TASK --tail 5 --timestamps": (
        "logs",
        "{run}",
        "t1",
        "--tail",
        "5",
        "--timestamps",
    ),
    "crew doctor RUN": ("doctor", "{run}"),
    "crew validate CREW_TOML": ("validate", "{toml}"),
    "crew schema": ("schema",),
    "crew --version": ("--version",),
    "crew --help": ("--help",),
}
#: Commands that change a run, on runs of their own no leader leads (in a home of their own, so
#: the runs they make do not lengthen the others' lists): `add` to one, `handoff` of another
#: (handed back, untimed, before each), `cancel` of a new run each time.
ADMIN = {
    "crew add RUN PROMPT --agent w": ("add", "{idle}", "more work", "--agent", "w"),
    "crew handoff RUN SESSION": ("handoff", "{given}", "other@bench"),
    "crew cancel RUN": ("cancel", "{fresh}"),
    "crew rm RUN": ("rm", "{fresh}"),
    "crew prune --keep 0 --dry-run": ("prune", "--keep", "0", "--dry-run"),
    "crew init DIR": ("init", "{empty}"),
}
#: A leader's start-up, with its one trivial worker's run: the fast path against typer.
LEAD = "crew run CREW_TOML (1 trivial task)"
LEAD_TYPER = "crew run CREW_TOML (1 trivial task), through typer"
#: The same, for `crew rerun` of an ended run of that crew.
RERUN = "crew rerun RUN (1 trivial task)"
RERUN_TYPER = "crew rerun RUN (1 trivial task), through typer"
THROUGH_TYPER = {LEAD: LEAD_TYPER, RERUN: RERUN_TYPER}


def _finished_run(folder: Path, home_env: dict[str, str]) -> str:
    """A run of one trivial task, led to its end in the foreground: its id."""
    home = new_home(folder)
    trivial = write_script(folder, "trivial.py", "print('done')\n")
    crew_toml = write_crew(folder, [PYTHON, "-S", str(trivial)], tasks=1, name="done.toml")
    subprocess.run(
        crew_argv("run", str(crew_toml), "--no-input"),
        env={**home_env, "CREW_HOME": str(home.root)},
        cwd=folder,
        capture_output=True,
        check=True,
    )
    return new_run(home).run_id


def _admin(
    folder: Path, crew_toml: Path, env: dict[str, str], commands: dict[str, Command]
) -> dict[str, Callable[[], object]]:
    """The ADMIN commands, added to `commands`, and what each needs done before it."""
    where = folder / "admin"
    where.mkdir()
    home = new_home(where)
    definition = load_config(crew_toml)
    idle, given = (create_run(home, definition, crew_dir=folder, session=SESSION) for _ in "ab")
    admin_env = {**env, "CREW_HOME": str(home.root)}
    empty = where / "empty"
    for key, argv in ADMIN.items():
        names = {"idle": idle.run_id, "given": given.run_id, "fresh": "", "empty": str(empty)}
        args = [arg.format(**names) for arg in argv]
        commands[key] = Command(crew_argv(*args), admin_env, where)
    cancel, remove = commands["crew cancel RUN"].argv, commands["crew rm RUN"].argv

    def fresh_run() -> None:
        cancel[-1] = create_run(home, definition, crew_dir=folder, session=SESSION).run_id

    def ended_run() -> None:
        store = create_run(home, definition, crew_dir=folder, session=SESSION)
        verbs.cancel(store, session=SESSION)
        remove[-1] = store.run_id

    def owned() -> None:
        if given.state().run.owner_session_id != SESSION:
            verbs.handoff(given, SESSION, session="other@bench")

    def emptied() -> None:
        shutil.rmtree(empty, ignore_errors=True)
        empty.mkdir()

    return {
        "crew cancel RUN": fresh_run,
        "crew rm RUN": ended_run,
        "crew handoff RUN SESSION": owned,
        "crew init DIR": emptied,
    }


def _rows(runs: dict[str, list[Spawned]]) -> list[Row]:
    floor = statistics.median(r.seconds for r in runs[FLOOR])
    rows = []
    for key, samples in runs.items():
        seconds = [r.seconds for r in samples]
        median = statistics.median(seconds)
        other = key in OTHER or key in ADMIN
        goal = "≤ 0.3× typer floor" if key in HOT else "≤ 1.0× typer floor" if other else ""
        if key in THROUGH_TYPER:
            typer_median = statistics.median(r.seconds for r in runs[THROUGH_TYPER[key]])
            goal = f"{median / typer_median:.2f}× through typer"
        rss = statistics.median(r.maxrss_kb for r in samples) / 1024
        rows.append(
            Row(
                "CLI latency",
                key,
                spread(seconds, ms),
                f"{median / floor:.2f}× floor",
                goal,
                {"seconds": seconds, "maxrssMB": rss},
            )
        )
    return rows


def run(quick: bool = False) -> list[Row]:
    rounds = 3 if quick else 15
    with tempfile.TemporaryDirectory(prefix="crew-bench-") as name:
        folder = Path(name)
        home = new_home(folder)
        env = crew_env(home)
        (folder / "done").mkdir()
        done = _finished_run(folder / "done", env)
        app = write_script(folder, "app.py", FLOOR_APP)
        asker = write_script(folder, "asker.py", ASKER)
        crew_toml = write_crew(folder, [PYTHON, "-S", str(asker)], tasks=1)
        with detached_run(home, crew_toml) as live, spawner(folder) as spawn:
            wait_all(live.store, TaskStatus.WAITING)
            commands = {
                FLOOR: Command([PYTHON, str(app), "status", "--run", "x"], env, folder),
                "python -c pass": Command([PYTHON, "-c", "pass"], env, folder),
            }
            for key, argv in {**HOT, **OTHER}.items():
                names = {"run": live.store.run_id, "done": done, "toml": str(crew_toml)}
                args = [arg.format(**names) for arg in argv]
                done_env = {**env, "CREW_HOME": str(folder / "done" / ".crew")}
                commands[key] = Command(
                    crew_argv(*args), done_env if key == "crew wait DONE" else env, folder
                )

            leading = folder / "lead"
            leading.mkdir()
            lead_env = {**env, "CREW_HOME": str(new_home(leading).root)}
            trivial = write_script(leading, "trivial.py", "print('done')\n")
            lead_toml = write_crew(leading, [PYTHON, "-S", str(trivial)], tasks=1)
            lead_argv = crew_argv("run", str(lead_toml), "--no-input", "-q")
            commands[LEAD] = Command(lead_argv, lead_env, leading)
            commands[LEAD_TYPER] = Command(lead_argv, {**lead_env, "CREW_FAST": "0"}, leading)
            again = folder / "again"
            again.mkdir()
            again_env = {**env, "CREW_HOME": str(folder / "again" / ".crew")}
            rerun_argv = crew_argv("rerun", _finished_run(again, env), "--no-input")
            commands[RERUN] = Command(rerun_argv, again_env, again)
            commands[RERUN_TYPER] = Command(rerun_argv, {**again_env, "CREW_FAST": "0"}, again)

            def waiting() -> None:
                wait_for_run(live.store, Until.WAITING, task_id="t1", timeout=30)

            setup = {"crew respond RUN TASK x": waiting, **_admin(folder, crew_toml, env, commands)}
            runs = interleaved(spawn, commands, rounds=rounds, setup=setup)
    return _rows(runs)
