"""`python -m bench [--quick] [--only NAME]`: run the benchmarks, print a table, save results."""

from __future__ import annotations

import argparse
import compileall
import json
import platform
import sys
import time
from pathlib import Path

import crew
from bench import (
    cli,
    delivery,
    history,
    leader_load,
    mcp,
    notify,
    oneshot,
    ray_scale,
    snapshots,
    storage,
    store,
)
from bench.common import Row

BENCHMARKS = {
    "history": history.run,
    "store": store.run,
    "snapshots": snapshots.run,
    "delivery": delivery.run,
    "notify": notify.run,
    "oneshot": oneshot.run,
    "leader_load": leader_load.run,
    "cli": cli.run,
    "storage": storage.run,
    "mcp": mcp.run,
    "ray": ray_scale.run,  # skipped, no rows, without Ray
}
RESULTS = Path(__file__).with_name("results.json")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller sizes, for a fast check")
    parser.add_argument("--only", choices=sorted(BENCHMARKS), action="append")
    parser.add_argument("--output", type=Path, default=RESULTS, help="where to write the JSON")
    args = parser.parse_args()
    # Every command is timed as an installed crew runs: its bytecode compiled (pip does that at
    # install; an editable checkout under PYTHONDONTWRITEBYTECODE would compile at every run).
    compileall.compile_dir(Path(crew.__file__).parent, quiet=1)
    rows: list[Row] = []
    started = time.time()
    for name in args.only or list(BENCHMARKS):
        print(f"running {name}…", file=sys.stderr, flush=True)
        rows.extend(BENCHMARKS[name](quick=args.quick))
    print_table(rows)
    args.output.write_text(
        json.dumps(
            {
                "machine": f"{platform.machine()}, {platform.system()} {platform.release()}, "
                f"Python {platform.python_version()}",
                "seconds": round(time.time() - started, 1),
                "rows": [r.to_json() for r in rows],
            },
            indent=2,
        )
        + "\n"
    )
    print(f"\nwrote {args.output}", file=sys.stderr)


def print_table(rows: list[Row]) -> None:
    headers = ("benchmark", "case", "median (min–max)", "ratio", "goal")
    cells = [(r.benchmark, r.case, r.result, r.ratio, r.goal) for r in rows]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(headers)]
    print("| " + " | ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for cell in cells:
        print("| " + " | ".join(c.ljust(w) for c, w in zip(cell, widths, strict=True)) + " |")


if __name__ == "__main__":
    main()
