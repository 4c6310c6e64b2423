"""The benchmarks still run: they call into crew's library and its command, so a change there
can break them without any other test noticing. The quick sizes of the library-level ones, and
of delivery (the spawner, a live leader, a real `crew steer`) and of notify (a live leader
running a `[[notify]]` command) and mcp (a live `crew mcp`), are run here."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.bench
def test_the_quick_benchmarks_still_run(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CREW_")}
    only = ["--only", "store", "--only", "history", "--only", "delivery", "--only", "notify"]
    only += ["--only", "mcp"]
    output = ["--output", str(tmp_path / "results.json")]
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", *only, *output],
        check=False,
        cwd=ROOT,
        env={**env, "TMPDIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "crew follow-up transaction, fsync off" in done.stdout
    assert "`crew steer` started → worker read" in done.stdout
    assert "status vs history" in done.stdout
    assert "contact printed → `[[notify]]` command read it" in done.stdout
    assert "crew mcp: steer" in done.stdout
    assert (tmp_path / "results.json").is_file()


@pytest.mark.bench
@pytest.mark.ray
def test_the_quick_ray_benchmark_still_runs(tmp_path: Path) -> None:
    """Its own Ray test cluster, local and Ray side by side (`pytest -m 'bench and ray'`)."""
    pytest.importorskip("ray.cluster_utils")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CREW_", "RAY_"))}
    output = ["--output", str(tmp_path / "results.json")]
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--only", "ray", *output],
        check=False,
        cwd=ROOT,
        env={**env, "TMPDIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    for case in ("start-up: ray", "task.started → task.placed", "idle: ray leader"):
        assert case in done.stdout
    assert "delivery: ray, `crew steer` started → worker read" in done.stdout
    assert (tmp_path / "results.json").is_file()
