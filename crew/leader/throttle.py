"""Reports (progress, status, note) rate-limited per task: a pure decision on a clock.

A worker may print progress lines as fast as it likes: its log keeps every byte, but the event
log and outbox.jsonl take at most REPORTS_PER_WINDOW reports of a task per REPORT_WINDOW seconds.
The rest of a window's reports are folded: once the window ends (or the worker exits), the
latest of them is recorded, saying how many it stands for.
"""

from __future__ import annotations

from dataclasses import dataclass

from crew.protocol import Report

#: How many reports of one task are recorded one by one in each window.
REPORTS_PER_WINDOW = 10
#: How long a window lasts, in seconds (it starts at the first report after the last one ended).
REPORT_WINDOW = 10.0


@dataclass(frozen=True)
class Folded:
    """Reports not recorded one by one: the latest of them, and how many there were."""

    latest: Report
    count: int


@dataclass
class ReportThrottle:
    """One task's reports in the current window (monotonic seconds)."""

    window_ends: float | None = None
    recorded: int = 0
    folded: int = 0
    latest: Report | None = None

    def admit(self, report: Report, now: float) -> bool:
        """Whether to record `report` now; if not, it is folded into the window's summary.
        Take the summary of an ended window (`summary`) first."""
        if self.window_ends is None or now >= self.window_ends:
            self.window_ends, self.recorded = now + REPORT_WINDOW, 0
        if self.recorded < REPORTS_PER_WINDOW:
            self.recorded += 1
            return True
        self.folded += 1
        self.latest = report
        return False

    def summary(self, now: float, *, final: bool = False) -> Folded | None:
        """The folded reports to record now: once their window has ended, or at the end of the
        worker's output (`final`). None when there are none (yet)."""
        if self.latest is None or not (final or now >= (self.window_ends or now)):
            return None
        folded = Folded(self.latest, self.folded)
        self.folded, self.latest = 0, None
        return folded

    def due(self) -> float | None:
        """When folded reports are next to be recorded (None: there are none)."""
        return self.window_ends if self.latest is not None else None
