"""One-shot commands against a long mailbox, each a fresh process, as a person runs them.

Every message ever sent stays in its mailbox file. For each size (10 … 100,000 messages per
mailbox file), a live run: a detached leader and one worker that reports progress once, then
acknowledges every frame it reads. One real steer and one real follow-up are sent and
acknowledged, and the worker's report is in the outbox; those three records are the templates
of the history, appended to steering.jsonl, inbox.jsonl and outbox.jsonl under the run lock with
new ids and bodies (one line a message, in its final state: acknowledged, except one in
OPEN_EVERY left delivered, i.e. open; one follow-up in KEY_EVERY carries an idempotency key),
each recorded by an event, as every mailbox line is.
The leader reads them as any appended line, and is left to settle before timing starts.
`crew doctor RUN` checks the largest run once.

`crew status RUN --json`, `crew steer RUN t1 x`, `crew follow-up RUN t1 x`, and the same
follow-up under an idempotency key no message carried yet (a new key each time, as a script
that retries gives each new request) and under one key throughout (each run after the first a
retry, replayed), then run for every size in turn, round after round, each
started fresh by the spawner (bench/spawner.py): wall time from spawn to exit, and the peak RSS
of the command alone. The round before the timed ones builds the indexes a long run without
them is read into once (docs/design.md, "The pending index"). The live worker acknowledges what is
sent meanwhile, so nothing piles up as pending. Beside them, what each run's leader holds in
memory once the commands are done (its RSS).
"""

from __future__ import annotations

import contextlib
import functools
import json
import secrets
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.common import Row, ms, spread
from bench.crews import (
    PYTHON,
    cpu_ns,
    crew_argv,
    crew_env,
    detached_run,
    new_home,
    wait_all,
    write_crew,
    write_script,
)
from bench.spawner import Command, Spawned, Spawner, interleaved, spawner
from crew.registry import Box, TaskStatus
from crew.store import eventlog, mailfile
from crew.store.runstore import RunStore

ACKER = """\
import json, sys

print("@supervisor progress: started", flush=True)
for line in sys.stdin:
    print(f"@supervisor ack: {json.loads(line)['id']}", flush=True)
"""
OPEN_EVERY = 1000
KEY_EVERY = 10
CLOSED = "acknowledged"
#: The event that records a message of each kind the history copies.
_RECORDED_AS = {
    "steer": "agent.steered",
    "followUp": "agent.followed_up",
    "report": "supervisor.report",
}
COMMANDS = {
    "crew status RUN --json": ("status", "{run}", "--json"),
    "crew steer RUN TASK x": ("steer", "{run}", "t1", "x"),
    "crew follow-up RUN TASK x": ("follow-up", "{run}", "t1", "x"),
    "crew follow-up RUN TASK x --idempotency-key NEW": (
        *("follow-up", "{run}", "t1", "x"),
        *("--idempotency-key", "{key}"),
    ),
    "crew follow-up RUN TASK x --idempotency-key SAME (replayed)": (
        *("follow-up", "{run}", "t1", "x"),
        *("--idempotency-key", "retried"),
    ),
}


def read_box(path: Path) -> dict[str, dict[str, Any]]:
    """A mailbox file folded by id: the latest state of each message, as whole records (a later
    line may be a change, which names only what changed)."""
    return {id_: m.to_dict() for id_, m in mailfile.fold(mailfile.read(path)).items()}


def _seeded(spawn: Spawner, store: RunStore, env: dict[str, str], cwd: Path) -> None:
    """One real steer and follow-up, acknowledged, and the worker's report in the outbox."""
    for verb in ("steer", "follow-up"):
        spawn.run(Command(crew_argv(verb, store.run_id, "t1", f"first {verb}"), env, cwd))
    deadline = time.monotonic() + 30
    while True:
        sent = [*read_box(store.paths.box(Box.STEERING)).values()]
        sent += read_box(store.paths.box(Box.INBOX)).values()
        if read_box(store.paths.box(Box.OUTBOX)) and all(m["status"] == CLOSED for m in sent):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"the seed messages of {store.run_id} were not acknowledged")
        time.sleep(0.05)


def _history(template: dict[str, Any], count: int) -> bytes:
    """`count` messages like `template`: new ids and bodies, a few left open, some keyed."""
    prefix = secrets.token_hex(4)
    lines = []
    for index in range(count):
        record = {**template, "id": f"msg_{prefix}{index:08x}", "body": f"history {index}"}
        if template["status"] == CLOSED and index % OPEN_EVERY == OPEN_EVERY // 2:
            record["status"] = "delivered"
            record.pop("acknowledgedAt", None)
        if template["kind"] == "followUp" and index % KEY_EVERY == 0:
            record["data"] = {**(template.get("data") or {}), "idempotencyKey": f"k{prefix}{index}"}
        lines.append(json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n")
    return "".join(lines).encode()


def _recorded(lines: bytes, run_id: str, after: int) -> bytes:
    """The events that record each of a history's mailbox lines, numbered on from seq `after`,
    as the command that sent it (or the worker that reported it) records one: every mailbox
    line is written after the event that carries it (`crew doctor` sets aside one no event
    records)."""
    prefix = secrets.token_hex(4)
    events = []
    for index, line in enumerate(lines.splitlines()):
        message = json.loads(line)
        event = {
            "id": f"evt_{prefix}{index:08x}",
            "seq": after + index + 1,
            "runId": run_id,
            "at": message["sentAt"],
            "type": _RECORDED_AS[message["kind"]],
            "taskId": message["taskId"],
            "message": message["body"],
            "data": {"mailboxMessage": message},
        }
        events.append(json.dumps(event, ensure_ascii=False, separators=(",", ":")) + "\n")
    return "".join(events).encode()


def _fill(store: RunStore, messages: int) -> None:
    """Bring each mailbox file to `messages` messages, each recorded in the event log (appended
    under the run lock)."""
    with store.lock():
        tasks = len(store.recover().state.tasks)  # the appends below add none
        last_seq = eventlog.tail(store.paths.events).last_seq
        for box in (Box.STEERING, Box.INBOX, Box.OUTBOX):
            path = store.paths.box(box)
            held = read_box(path)
            template = next(iter(held.values()))
            lines = _history(template, messages - len(held))
            with store.paths.events.open("ab") as handle:
                handle.write(_recorded(lines, store.run_id, last_seq))
            last_seq += lines.count(b"\n")
            with path.open("ab") as handle:
                handle.write(lines)
        # The files now hold what a long run leaves: a marker that says so, as every
        # transaction's would (without it, every command would check the run from scratch).
        store.write_applied(last_seq, tasks=tasks)


def _new_key(argv: list[str]) -> None:
    """A key no message carried yet, in place of the last one (the command's last argument)."""
    argv[-1] = f"k-{secrets.token_hex(8)}"


def _settle(pid: int, *, quiet: int = 5_000_000, timeout: float = 120) -> None:
    """Wait until the leader has read the history: less than `quiet` ns of CPU in 0.5 s."""
    deadline = time.monotonic() + timeout
    before = cpu_ns(pid)
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = cpu_ns(pid)
        if now - before < quiet:
            return
        before = now
    raise TimeoutError(f"leader {pid} still busy after {timeout:g}s")


def _resident_mb(pid: int) -> float:
    """What a process holds in memory now (VmRSS), in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def _leader_rows(sizes: list[int], resident: dict[int, float]) -> list[Row]:
    base = resident[sizes[0]]
    return [
        Row(
            "one-shot vs mailbox",
            f"the run's leader, {size:,} messages per mailbox file: RSS after the commands",
            f"{resident[size]:.1f} MB",
            f"{resident[size] / base:.2f}× {sizes[0]} messages",
            "flat",
            {"messages": size, "rssMB": resident[size]},
        )
        for size in sizes
    ]


def _rows(sizes: list[int], runs: dict[Any, list[Spawned]]) -> list[Row]:
    smallest = sizes[0]
    rows = []
    for name in COMMANDS:
        base = runs[name, smallest]
        base_time = statistics.median(r.seconds for r in base)
        base_rss = statistics.median(r.maxrss_kb for r in base)
        for size in sizes:
            samples = runs[name, size]
            seconds = [r.seconds for r in samples]
            rss = [r.maxrss_kb / 1024 for r in samples]
            rows.append(
                Row(
                    "one-shot vs mailbox",
                    f"{name}, {size:,} messages per mailbox file",
                    spread(seconds, ms),
                    f"{statistics.median(seconds) / base_time:.2f}× {smallest} messages",
                    "≤ 1.2× at 100,000",
                    {"command": name, "messages": size, "seconds": seconds, "maxrssMB": rss},
                )
            )
            rows.append(
                Row(
                    "one-shot vs mailbox",
                    f"{name}, {size:,} messages: peak RSS",
                    spread(rss, lambda mb: f"{mb:.1f} MB"),
                    f"{statistics.median(rss) * 1024 / base_rss:.2f}× {smallest} messages",
                    "flat",
                )
            )
    return rows


def run(quick: bool = False) -> list[Row]:
    sizes = [10, 1_000, 10_000] if quick else [10, 1_000, 10_000, 100_000]
    rounds = 3 if quick else 7
    with (
        tempfile.TemporaryDirectory(prefix="crew-bench-") as name,
        contextlib.ExitStack() as stack,
    ):
        folder = Path(name)
        spawn = stack.enter_context(spawner(folder))
        commands: dict[tuple[str, int], Command] = {}
        setup: dict[tuple[str, int], Callable[[], None]] = {}
        leaders: dict[int, int] = {}
        for size in sizes:
            where = folder / str(size)
            where.mkdir()
            home = new_home(where)
            acker = write_script(where, "acker.py", ACKER)
            crew_toml = write_crew(where, [PYTHON, "-S", str(acker)], tasks=1)
            live = stack.enter_context(detached_run(home, crew_toml))
            wait_all(live.store, TaskStatus.RUNNING)
            env = crew_env(home)
            _seeded(spawn, live.store, env, where)
            _fill(live.store, size)
            _settle(live.pid)
            leaders[size] = live.pid
            for label, argv in COMMANDS.items():
                args = [arg.format(run=live.store.run_id, key="") for arg in argv]
                commands[label, size] = Command(crew_argv(*args), env, where)
                if "{key}" in argv:
                    setup[label, size] = functools.partial(_new_key, commands[label, size].argv)
        # the largest run's state is sound: crew doctor exits non-zero on any finding
        spawn.run(Command(crew_argv("doctor", live.store.run_id), env, where))
        runs = interleaved(spawn, commands, rounds=rounds, setup=setup)
        for pid in leaders.values():
            _settle(pid)  # done with what the commands sent
        resident = {size: _resident_mb(pid) for size, pid in leaders.items()}
    return [*_rows(sizes, runs), *_leader_rows(sizes, resident)]
