"""Cost of reading a run as its history grows: `crew status`, `crew mailbox`, a follower's poll.

`crew status` reads the snapshots, not the log, so its cost should not grow with the number of
events; `crew mailbox` reads the mailbox files, which hold every message (so the history here is
events that are not messages, beside a small fixed mailbox); a follower reads only the bytes
appended since its last poll. Both commands are timed in process and as `crew … --json`
subprocesses.

How commands grow with the mailbox is measured by bench/oneshot.py, each in a fresh process.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

from bench.common import Row, Timing, measure, measure_side_by_side
from bench.crews import crew_argv, crew_env
from crew.config import parse_config
from crew.domain import change, mailbox
from crew.domain.runs import create_run
from crew.ids import new_message_id
from crew.models import Event, MailboxMessage
from crew.paths import Home
from crew.registry import Direction, EventType, MessageKind, MessageStatus
from crew.store import jsonl
from crew.store.runstore import RunStore
from crew.views import mailbox_view, run_status

CONFIG = {
    "crew": {"name": "bench"},
    "agents": {"a": {"command": ["true"]}},
    "tasks": [{"id": f"t{i}", "agent": "a", "prompt": f"task {i}"} for i in range(8)],
}
#: Follow-ups posted before the bulk of the history: the whole mailbox of every run here.
MESSAGES = 4
HISTORY = f"events, {MESSAGES} of them messages"


def _follow_up(index: int, at: str) -> MailboxMessage:
    task_id = f"t{index % len(CONFIG['tasks'])}"
    return MailboxMessage(
        id=new_message_id(),
        direction=Direction.INBOX,
        kind=MessageKind.FOLLOW_UP,
        from_="leader",
        to=task_id,
        task_id=task_id,
        body=f"follow-up {index}",
        status=MessageStatus.PENDING,
        priority=MessageKind.FOLLOW_UP.default_priority,
        sent_at=at,
    )


def _post_mailbox(store: RunStore) -> None:
    with change(store) as txn:
        for index in range(MESSAGES):
            mailbox.post(txn, _follow_up(index, txn.at), EventType.AGENT_FOLLOWED_UP)


def _run_with_history(root: Path, events: int) -> RunStore:
    """A run whose log holds `events` events: MESSAGES follow-ups, then attention decisions
    (written in bulk, then marked applied)."""
    home = Home(root / ".crew")
    home.root.mkdir(parents=True)
    store = create_run(home, parse_config(CONFIG), crew_dir=root, session="bench@host")
    _post_mailbox(store)
    tasks = len(store.load().state.tasks)  # the appends below add none
    first = jsonl.last_record(store.paths.events, Event)
    assert first is not None
    seq = first.seq
    template = Event(
        id="evt_0000000000000000",
        seq=1,
        run_id=store.run_id,
        at="2026-11-30T03:41:00.123456Z",
        type=EventType.ATTENTION_DECISION,
        task_id="t1",
        message="continue: nothing more urgent arrived",
        data={"action": "continue", "reason": "heuristic"},
    )
    with store.paths.events.open("ab") as handle:
        batch: list[bytes] = []
        for _ in range(max(0, events - seq)):
            seq += 1
            batch.append(
                template.model_copy(update={"seq": seq, "id": f"evt_{seq:016x}"}).to_line()
            )
            if len(batch) == 10_000:
                handle.write(b"".join(batch))
                batch.clear()
        handle.write(b"".join(batch))
    store.write_applied(seq, tasks=tasks)  # the marker, as a transaction writes it
    return store


def _cli(argv: list[str], home: Home) -> Callable[[], None]:
    env = crew_env(home)

    def call() -> None:
        subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, check=True)

    return call


def _scaling(benchmark: str, times: dict[int, Timing], goal: str) -> list[Row]:
    """One row per history size, each as a ratio to the smallest."""
    smallest = min(times)
    return [
        Row(
            benchmark,
            f"{size:>9,} {HISTORY}",
            timing.show(),
            f"{timing.median / times[smallest].median:.2f}×",
            goal,
            {"size": size, "history": HISTORY, "seconds": timing.median},
        )
        for size, timing in times.items()
    ]


def run(quick: bool = False) -> list[Row]:
    sizes = [10, 10_000, 100_000] if quick else [10, 10_000, 1_000_000]
    cli_runs, cli_warmup = (5, 1) if quick else (15, 2)
    os.environ["CREW_FSYNC"] = "0"
    flat = "≤ 1.2× from 10 to the largest"
    with tempfile.TemporaryDirectory(prefix="crew-bench-") as folder:
        stores = {size: _run_with_history(Path(folder) / str(size), size) for size in sizes}
        assert all(store.load().clean for store in stores.values())
        status_times = measure_side_by_side(
            {size: (lambda store=store: run_status(store)) for size, store in stores.items()}
        )
        mailbox_times = measure_side_by_side(
            {size: (lambda store=store: mailbox_view(store)) for size, store in stores.items()}
        )
        cli_calls: dict[tuple[str, int], Callable[[], None]] = {}
        for size, store in stores.items():
            home = Home(Path(folder) / str(size) / ".crew")
            for command in ("status", "mailbox"):
                argv = crew_argv(command, store.run_id, "--json")
                cli_calls[command, size] = _cli(argv, home)
        cli_times = measure_side_by_side(cli_calls, runs=cli_runs, warmup=cli_warmup)
        followers = {}
        for size, store in stores.items():
            followers[size] = jsonl.Follower(store.paths.events, Event)
            followers[size].poll()

        def append_and_poll(size: int) -> None:
            with stores[size].transaction() as txn:
                txn.record(EventType.ATTENTION_DECISION, task_id="t1")
            assert len(followers[size].poll().records) == 1

        poll_times = measure_side_by_side(
            {size: (lambda size=size: append_and_poll(size)) for size in sizes}
        )
        full_read = measure(lambda: jsonl.read(stores[sizes[1]].paths.events, Event), runs=5)
    return [
        *_scaling("status vs history", status_times, flat),
        *_scaling("mailbox vs history", mailbox_times, flat),
        *_scaling(
            "`crew status --json` (CLI)",
            {size: cli_times["status", size] for size in sizes},
            flat,
        ),
        *_scaling(
            "`crew mailbox --json` (CLI)",
            {size: cli_times["mailbox", size] for size in sizes},
            flat,
        ),
        *_scaling("append + follower poll", poll_times, "flat: a poll reads only new bytes"),
        Row(
            "full re-read (for contrast)",
            f"{sizes[1]:>9,} events",
            full_read.show(),
            f"{full_read.median / poll_times[sizes[1]].median:.0f}× a poll",
            "",
            {"events": sizes[1], "seconds": full_read.median},
        ),
    ]
