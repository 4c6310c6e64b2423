"""CLI latency: `crew status`, `crew steer` and `crew respond` against a minimal typer app.

Every command is a subprocess of the same interpreter with the same environment, timed round
after round side by side. The floor is a two-command typer app (`python app.py cmd --opt x`):
what any typer CLI costs to start. The run is led by a detached leader; its one worker asks a
question at start and again after every frame it reads, so before each timed `crew respond` the
task is waiting again (that wait is not timed).

`crew status` runs a second time with a warm bytecode cache of its own (PYTHONPYCACHEPREFIX in the
temp folder): where PYTHONDONTWRITEBYTECODE is set and crew is installed editable, as in a dev
checkout, crew's modules are compiled from source at every start, while typer's come compiled.

`python -X importtime` of `crew status` and of the floor app gives the import costs.
"""

from __future__ import annotations

import statistics
import subprocess
import tempfile
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.common import Row, measure_side_by_side
from bench.crews import (
    PYTHON,
    crew_argv,
    crew_env,
    detached_run,
    environment,
    new_home,
    wait_all,
    write_crew,
    write_script,
)
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
#: Asks a question at start and after every frame it reads.
ASKER = """\
import sys

print("@supervisor need_input: again?", flush=True)
while sys.stdin.buffer.readline():
    print("@supervisor need_input: again?", flush=True)
"""
TOP_IMPORTS = 10
CACHED = "crew status RUN --json, bytecode cached"


def _runner(argv: list[str], env: dict[str, str], cwd: Path) -> Callable[[], None]:
    def call() -> None:
        done = subprocess.run(
            argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False
        )
        if done.returncode != 0:
            raise RuntimeError(f"{argv} exited {done.returncode}: {done.stderr.decode().strip()}")

    return call


def _import_times(argv: list[str], env: dict[str, str], cwd: Path) -> dict[str, tuple[int, int]]:
    """`-X importtime` of a command: module -> (self µs, cumulative µs)."""
    done = subprocess.run(
        [PYTHON, "-X", "importtime", *argv[1:]],
        env=env,
        cwd=cwd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        check=True,
    )
    times: dict[str, tuple[int, int]] = {}
    for line in done.stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        own, cumulative, module = line.removeprefix("import time:").split("|")
        times[module.strip()] = (int(own), int(cumulative))
    return times


def _top(samples: dict[str, list[int]], name: str, unit: str) -> list[dict[str, Any]]:
    """The TOP_IMPORTS largest by median (µs samples), in ms."""
    medians = {key: statistics.median(values) / 1000 for key, values in samples.items()}
    ranked = sorted(medians, key=medians.__getitem__, reverse=True)[:TOP_IMPORTS]
    return [{name: key, unit: round(medians[key], 1)} for key in ranked]


def _import_profile(
    argv: list[str], floor: list[str], env: dict[str, str], cwd: Path, *, runs: int
) -> Row:
    """Median import costs over `runs` runs of each, alternated."""
    cumulative: dict[str, list[int]] = defaultdict(list)
    package_self: dict[str, list[int]] = defaultdict(list)
    crew_self: dict[str, list[int]] = defaultdict(list)
    totals: dict[str, list[int]] = {"crew": [], "floor": []}
    for _ in range(runs):
        for name, command in (("crew", argv), ("floor", floor)):
            times = _import_times(command, env, cwd)
            totals[name].append(sum(own for own, _ in times.values()))
            if name == "floor":
                continue
            per_package: dict[str, int] = defaultdict(int)
            for module, (own, total) in times.items():
                cumulative[module].append(total)
                per_package[module.split(".")[0]] += own
                if module.split(".")[0] == "crew":
                    crew_self[module].append(own)
            for package, own in per_package.items():
                package_self[package].append(own)
    crew_ms = statistics.median(totals["crew"]) / 1000
    floor_ms = statistics.median(totals["floor"]) / 1000
    return Row(
        "CLI imports",
        "python -X importtime -m crew status RUN --json: all imports",
        f"{crew_ms:.0f} ms ({min(totals['crew']) / 1000:.0f}–{max(totals['crew']) / 1000:.0f})",
        f"{crew_ms / floor_ms:.2f}× floor",
        "top 10 in data",
        {
            "runs": runs,
            "importMs": crew_ms,
            "floorImportMs": floor_ms,
            "topCumulative": _top(cumulative, "module", "ms"),
            "topPackagesBySelfTime": _top(package_self, "package", "selfMs"),
            "topCrewModulesBySelfTime": _top(crew_self, "module", "selfMs"),
        },
    )


def run(quick: bool = False) -> list[Row]:
    runs, warmup, import_runs = (5, 1, 3) if quick else (21, 2, 5)
    with (
        environment(CREW_FSYNC="0"),
        tempfile.TemporaryDirectory(prefix="crew-bench-") as name,
    ):
        folder = Path(name)
        home = new_home(folder)
        env = crew_env(home)
        app = write_script(folder, "app.py", FLOOR_APP)
        asker = write_script(folder, "asker.py", ASKER)
        crew_toml = write_crew(folder, [PYTHON, "-S", str(asker)], tasks=1)
        with detached_run(home, crew_toml) as live:
            run_id = live.store.run_id
            wait_all(live.store, TaskStatus.WAITING)
            commands = {
                "typer floor": [PYTHON, str(app), "status", "--run", "x"],
                "crew status RUN --json": crew_argv("status", run_id, "--json"),
                "crew steer RUN TASK x": crew_argv("steer", run_id, "t1", "x"),
                "crew respond RUN TASK x": crew_argv("respond", run_id, "t1", "x"),
            }
            calls = {key: _runner(argv, env, folder) for key, argv in commands.items()}
            cached = {k: v for k, v in env.items() if k != "PYTHONDONTWRITEBYTECODE"}
            cached["PYTHONPYCACHEPREFIX"] = str(folder / "pycache")
            calls[CACHED] = _runner(commands["crew status RUN --json"], cached, folder)
            timings = measure_side_by_side(
                calls,
                runs=runs,
                warmup=warmup,
                setup={
                    "crew respond RUN TASK x": lambda: wait_for_run(
                        live.store, Until.WAITING, task_id="t1", timeout=30
                    )
                },
            )
            imports = _import_profile(
                commands["crew status RUN --json"],
                commands["typer floor"],
                env,
                folder,
                runs=import_runs,
            )
    floor = timings["typer floor"].median
    rows = [
        Row(
            "CLI latency",
            key,
            timing.show(),
            f"{timing.median / floor:.2f}× floor",
            "≤ 1.0× typer floor" if key != "typer floor" else "",
            {"seconds": timing.median, "runs": timing.runs},
        )
        for key, timing in timings.items()
    ]
    return [*rows, imports]
