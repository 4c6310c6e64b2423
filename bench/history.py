"""Cost of reading a run as its history grows: `crew status` and a follower's poll.

`crew status` reads the snapshots, not the log, so its cost should not grow with the number of
events; a follower reads only the bytes appended since its last poll.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from bench.common import Row, measure, measure_side_by_side
from crew.config import parse_config
from crew.models import Event
from crew.paths import Home
from crew.registry import EventType
from crew.run import RunStore, create_run
from crew.store import jsonl
from crew.views import run_status

CONFIG = {
    "crew": {"name": "bench"},
    "agents": {"a": {"command": ["true"]}},
    "tasks": [{"id": f"t{i}", "agent": "a", "prompt": f"task {i}"} for i in range(8)],
}


def _run_with_history(root: Path, events: int) -> RunStore:
    """A run whose log holds `events` events (written in bulk, then marked applied)."""
    home = Home(root / ".crew")
    home.root.mkdir(parents=True)
    store = create_run(home, parse_config(CONFIG), crew_dir=root, session="bench@host")
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
    store.paths.applied.write_text(f"{seq}\n")
    return store


def run(quick: bool = False) -> list[Row]:
    sizes = [10, 10_000, 100_000] if quick else [10, 10_000, 1_000_000]
    os.environ["CREW_FSYNC"] = "0"
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="crew-bench-") as folder:
        stores = {size: _run_with_history(Path(folder) / str(size), size) for size in sizes}
        assert all(store.load().clean for store in stores.values())
        status_times = measure_side_by_side(
            {size: (lambda store=store: run_status(store)) for size, store in stores.items()}
        )
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
    smallest = sizes[0]
    for size in sizes:
        rows.append(
            Row(
                "status vs history",
                f"{size:>9,} events",
                status_times[size].show(),
                f"{status_times[size].median / status_times[smallest].median:.2f}×",
                "≤ 1.2× from 10 to the largest",
                {"events": size, "seconds": status_times[size].median},
            )
        )
    for size in sizes:
        rows.append(
            Row(
                "append + follower poll",
                f"{size:>9,} events",
                poll_times[size].show(),
                f"{poll_times[size].median / poll_times[smallest].median:.2f}×",
                "flat: a poll reads only new bytes",
                {"events": size, "seconds": poll_times[size].median},
            )
        )
    rows.append(
        Row(
            "full re-read (for contrast)",
            f"{sizes[1]:>9,} events",
            full_read.show(),
            f"{full_read.median / poll_times[sizes[1]].median:.0f}× a poll",
            "",
            {"events": sizes[1], "seconds": full_read.median},
        )
    )
    return rows
