"""Timing helpers shared by the benchmarks: medians of repeated runs, with min and max."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class Timing:
    """Seconds per call: the median of several runs, and their spread."""

    median: float
    low: float
    high: float
    runs: int

    @classmethod
    def of(cls, samples: list[float]) -> Timing:
        return cls(statistics.median(samples), min(samples), max(samples), len(samples))

    def show(self) -> str:
        return f"{ms(self.median)} ({ms(self.low)}–{ms(self.high)})"


def ms(seconds: float) -> str:
    """A duration in µs or ms."""
    if abs(seconds) < 0.001:
        return f"{seconds * 1e6:.0f} µs"
    return f"{seconds * 1e3:.2f} ms"


def spread(samples: list[float], show: Callable[[float], str]) -> str:
    """The median of samples, then their range in brackets, each shown by `show`."""
    return f"{show(statistics.median(samples))} ({show(min(samples))}–{show(max(samples))})"


def percentile(samples: list[float], percent: int) -> float:
    """The `percent`th percentile of samples (inclusive method: within their range)."""
    return statistics.quantiles(samples, n=100, method="inclusive")[percent - 1]


def measure(call: Callable[[], object], *, runs: int = 15, warmup: int = 2) -> Timing:
    """Time `call` `runs` times after `warmup` untimed calls."""
    for _ in range(warmup):
        call()
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        call()
        samples.append(time.perf_counter() - start)
    return Timing.of(samples)


def measure_side_by_side(
    calls: dict[Any, Callable[[], object]],
    *,
    runs: int = 31,
    warmup: int = 3,
    setup: dict[Any, Callable[[], object]] | None = None,
) -> dict[Any, Timing]:
    """Time several calls in turn, round after round, so drift on a busy machine hits all alike.

    `setup[key]`, if given, runs untimed before each call of `calls[key]`.
    """
    prepare = setup or {}
    for _ in range(warmup):
        for key, call in calls.items():
            prepare.get(key, _nothing)()
            call()
    samples: dict[Any, list[float]] = {key: [] for key in calls}
    for _ in range(runs):
        for key, call in calls.items():
            prepare.get(key, _nothing)()
            start = time.perf_counter()
            call()
            samples[key].append(time.perf_counter() - start)
    return {key: Timing.of(values) for key, values in samples.items()}


def _nothing() -> None:
    """The setup of a call that needs none."""


@dataclass
class Row:
    """One line of the results table."""

    benchmark: str
    case: str
    result: str
    ratio: str = ""
    goal: str = ""
    data: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)
