"""Bytes a run's files gain per message and per progress line (`--only storage`).

A steer of 1 KiB and one of 64 KiB, each sent to a live worker that acknowledges it
(`crew steer … --wait-ack`: pending → delivered → acknowledged): what every file of the run
gained, summed (events.jsonl, the mailbox files, the task's log and snapshots; not `.runtime/`),
divided by the body's size. And progress lines printed by a worker: what events.jsonl and
outbox.jsonl gained per line, over a run whose worker prints none (the task's log holds every
line whole either way).

Only the standard library and `python -m crew` processes: `python -m bench.storage`, run from
another checkout (main, say), measures that checkout the same way, for a before/after table.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import Row

ROOT = Path(__file__).resolve().parent.parent
ACKER = """\
import json, sys
for line in sys.stdin:
    print(f"@supervisor ack: {json.loads(line)['id']}", flush=True)
"""
REPORTER = """\
import sys
count, width = (int(n) for n in sys.argv[1].split())
for i in range(count):
    text = f"step {i:04d} of {count}: "
    print("@supervisor progress: " + text + "p" * max(0, width - len(text)), flush=True)
"""
STEERS = {"1 KiB": 1024, "64 KiB": 64 * 1024}
#: (lines, characters a line) of each progress case.
PROGRESS = {
    "one 80-character line": (1, 80),
    "one 4 KiB line": (1, 4096),
    "a burst of 800 80-character lines": (800, 80),
}


def _crew(home: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CREW_")}
    env.update(CREW_HOME=str(home), CREW_FSYNC="0", CREW_SESSION_ID="bench@storage")
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run(
        [sys.executable, "-m", "crew", *args],
        cwd=home.parent,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    if check and done.returncode != 0:
        raise RuntimeError(f"crew {' '.join(args[:2])} failed: {done.stderr[-500:]}")
    return done


def _home(folder: Path, command: str, script: str) -> Path:
    home = folder / ".crew"
    home.mkdir(parents=True)
    (folder / "worker.py").write_text(script)
    (home / "crew.toml").write_text(
        f'[crew]\nname = "storage"\n[agents.py]\ncommand = {command}\n'
        '[[tasks]]\nid = "t"\nagent = "py"\nprompt = "0 0"\n'
    )
    return home


def _run_root(home: Path) -> Path:
    (root,) = (home / "state" / "runs").iterdir()
    return root


def _size(root: Path, names: tuple[str, ...] | None = None) -> int:
    """The bytes of the run's files (all but `.runtime/` and the lock; or those `names`)."""
    total = 0
    for path in root.rglob("*"):
        relative = path.relative_to(root)
        if not path.is_file() or relative.parts[0] in {".runtime", ".lock"}:
            continue
        if names is None or str(relative) in names:
            total += path.stat().st_size
    return total


def _settled(root: Path) -> int:
    """The run's size once the leader has written what follows the ack (lastOutputAt)."""
    last, since = _size(root), time.monotonic()
    while time.monotonic() - since < 1.5:
        time.sleep(0.1)
        now = _size(root)
        if now != last:
            last, since = now, time.monotonic()
    return last


def steer_growth(size: int, rounds: int) -> list[int]:
    """Bytes the run's files gained for each of `rounds` steers of `size` bytes."""
    grown: list[int] = []
    with tempfile.TemporaryDirectory() as folder:
        home = _home(Path(folder), '["python3", "worker.py"]', ACKER)
        _crew(home, "run", "--detach")
        try:
            _crew(home, "steer", "latest", "t", "warm up", "--wait-ack", "--timeout", "60")
            root = _run_root(home)
            for index in range(rounds):
                before = _settled(root)
                body = (f"{index:04d}" + "abcdefghij" * size)[:size]
                _crew(home, "steer", "latest", "t", body, "--wait-ack", "--timeout", "60")
                grown.append(_settled(root) - before)
        finally:
            _crew(home, "cancel", "latest", check=False)
    return grown


def progress_growth(count: int, width: int) -> tuple[int, int]:
    """Bytes events.jsonl and outbox.jsonl gained for `count` progress lines of `width`
    characters, over a run of the same worker printing none; and the log's gain."""
    sizes: list[tuple[int, int]] = []
    for lines in (0, count):
        with tempfile.TemporaryDirectory() as folder:
            home = _home(Path(folder), '["python3", "worker.py", "{prompt}"]', REPORTER)
            toml = home / "crew.toml"
            toml.write_text(toml.read_text().replace('"0 0"', f'"{lines} {width}"'))
            _crew(home, "run")
            root = _run_root(home)
            logs = _size(root, ("logs/t.log",))
            sizes.append((_size(root, ("events.jsonl", "mailbox/outbox.jsonl")), logs))
    return sizes[1][0] - sizes[0][0], sizes[1][1] - sizes[0][1]


def measure(*, quick: bool = False) -> list[dict[str, Any]]:
    """The figures, as plain records."""
    rounds = 2 if quick else 5
    records: list[dict[str, Any]] = []
    for name, size in STEERS.items():
        grown = steer_growth(size, rounds)
        ratio = statistics.median(grown) / size
        records.append({"case": f"steer of {name}", "bytes": grown, "size": size, "ratio": ratio})
    for name, (count, width) in PROGRESS.items():
        kept, logged = progress_growth(count, width)
        records.append(
            {"case": f"progress: {name}", "bytes": kept, "lines": count, "logged": logged}
        )
    return records


def run(*, quick: bool = False) -> list[Row]:
    """The rows of `python -m bench --only storage`."""
    rows = []
    for record in measure(quick=quick):
        if "ratio" in record:
            grown = record["bytes"]
            rows.append(
                Row(
                    "bytes written",
                    f"{record['case']} → delivered → acknowledged: all run files",
                    f"{statistics.median(grown):,.0f} B ({min(grown):,}–{max(grown):,})",
                    f"{record['ratio']:.2f}× the body",
                    "< 1.5× the body",
                    record,
                )
            )
        else:
            per_line = record["bytes"] / record["lines"]
            rows.append(
                Row(
                    "bytes written",
                    f"{record['case']}: events.jsonl + outbox.jsonl",
                    f"{per_line:,.0f} B a line",
                    f"log: {record['logged'] / record['lines']:,.0f} B a line",
                    "bounded whatever the line's length",
                    record,
                )
            )
    return rows


if __name__ == "__main__":
    for found in measure(quick="--quick" in sys.argv):
        print(json.dumps(found))
