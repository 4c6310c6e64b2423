"""MCP latency: a tool call through a live `crew mcp`, side by side with the same verb through
the CLI (a fresh `crew` process each time).

One run, led by a detached leader, whose one worker reads every frame on its stdin and
acknowledges it. One `crew mcp` serves it over stdio to the MCP SDK's own client, started once
(a lead agent keeps its MCP server for the whole session). A tool call is timed from the
client's request to its result: `status`, and `steer` of the running task. The same verbs run as
`crew status RUN --json` and `crew steer RUN t1 …`, started by the spawner (bench/spawner.py),
timed from spawn to exit. The two take turns, round after round.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.common import Row, ms, percentile, spread
from bench.crews import PYTHON, crew_argv, crew_env, detached_run, new_home, write_crew
from bench.crews import write_script as write_file
from bench.spawner import Command, spawner
from crew.waiting import Until, wait_for_run

#: Reads frames on stdin and acknowledges each, so steers never pile up.
READER = """\
import json, sys

while line := sys.stdin.readline():
    print(f"@supervisor ack: {json.loads(line)['id']}", flush=True)
"""
GOAL = "p50 < 10 ms"


def run(quick: bool = False) -> list[Row]:
    rounds = 10 if quick else 100
    with tempfile.TemporaryDirectory(prefix="crew-bench-") as name:
        folder = Path(name)
        home = new_home(folder)
        env = crew_env(home)
        reader = write_file(folder, "reader.py", READER)
        crew_toml = write_crew(folder, [PYTHON, "-S", str(reader)], tasks=1)
        with detached_run(home, crew_toml) as live, spawner(folder) as spawn:
            run_id = live.store.run_id
            wait_for_run(live.store, Until.STARTED, task_id="t1", timeout=60)
            commands = {
                "status": Command(crew_argv("status", run_id, "--json"), env, folder),
                "steer": Command(crew_argv("steer", run_id, "t1", "bench"), env, folder),
            }
            calls = {
                "status": {"run": run_id},
                "steer": {"run": run_id, "task": "t1", "body": "bench"},
            }

            def cli(verb: str) -> float:
                return spawn.run(commands[verb]).seconds

            served = asyncio.run(_side_by_side(env, calls, cli, rounds))
    return _rows(served)


async def _side_by_side(
    env: dict[str, str],
    calls: dict[str, dict[str, Any]],
    cli: Callable[[str], float],
    rounds: int,
) -> dict[tuple[str, str], list[float]]:
    """Each verb through MCP then through the CLI, round after round (the first round untimed)."""
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    params = StdioServerParameters(command=PYTHON, args=["-m", "crew", "mcp"], env=env)
    samples: dict[tuple[str, str], list[float]] = {}
    with open(os.devnull, "w") as quiet:
        served = stdio_client(params, errlog=quiet)
        async with served as (read, write), ClientSession(read, write) as client:
            await client.initialize()
            for index in range(rounds + 1):
                for verb, arguments in calls.items():
                    start = time.perf_counter()
                    result = await client.call_tool(verb, arguments)
                    seconds = time.perf_counter() - start
                    if result.is_error:
                        raise RuntimeError(f"{verb} through MCP failed: {result.content}")
                    shell = cli(verb)
                    if index > 0:
                        samples.setdefault(("crew mcp", verb), []).append(seconds)
                        samples.setdefault(("crew CLI", verb), []).append(shell)
    return samples


def _rows(samples: dict[tuple[str, str], list[float]]) -> list[Row]:
    rows = []
    for (how, verb), seconds in samples.items():
        cli = statistics.median(samples[("crew CLI", verb)])
        median = statistics.median(seconds)
        p99 = percentile(seconds, 99)
        rows.append(
            Row(
                "MCP latency",
                f"{how}: {verb}",
                f"{spread(seconds, ms)}, p99 {ms(p99)}",
                f"{median / cli:.2f}× CLI",
                GOAL if how == "crew mcp" else "",
                {"seconds": seconds, "p50": median, "p99": p99},
            )
        )
    return rows
