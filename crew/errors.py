"""The one exception hierarchy of crew: each class carries its exit code."""

from __future__ import annotations

import errno
from enum import IntEnum


class ExitCode(IntEnum):
    """Process exit codes; docs/exit-codes.md is generated from EXIT_CODES below."""

    OK = 0
    FAILED = 1
    USAGE = 2
    TIMEOUT = 3
    REFUSED = 4
    NOT_FOUND = 5
    INTERRUPTED = 130  # 128 + SIGINT, as shells report a command stopped by Ctrl-C


#: What each exit code means, and examples of when crew uses it.
EXIT_CODES: dict[ExitCode, tuple[str, str]] = {
    ExitCode.OK: (
        "success",
        "the command did what it says; `crew doctor` found nothing (or repaired everything); "
        "`crew run` ended with every task completed (so did `crew wait` or `crew watch` of "
        "it); a replayed idempotent request; a message "
        "accepted by making room under backpressure (the oldest pending one was dropped: a "
        "warning on stderr, `dropped` in `--json`)",
    ),
    ExitCode.FAILED: (
        "the run ended with failed tasks, or an unexpected error",
        "`crew run` with a failed task, and `crew wait` (for the end) or `crew watch` of a run "
        "that failed or was cancelled; `crew doctor` found problems; a state file that cannot "
        "be read at all; a write that failed (disk full, a read-only folder); a leader that "
        "crashed (`leader.crashed`: the run can be resumed)",
    ),
    ExitCode.USAGE: (
        "usage error",
        "an unknown option or a missing argument; a `--jq` expression jq cannot compile; an "
        "invalid run or task id (`../x`, `/etc/passwd`, empty, over 64 "
        "characters); an invalid crew.toml; an empty or oversized message body; an ambiguous "
        "run prefix; a `CREW_LOCK_TIMEOUT` that is not a duration; `crew prune` without "
        "`--keep` or `--older-than`",
    ),
    ExitCode.TIMEOUT: (
        "timeout",
        "`crew wait --timeout`, `--wait --timeout`, `crew run --timeout`; the run lock stayed "
        "busy longer than `CREW_LOCK_TIMEOUT` (default 10 s)",
    ),
    ExitCode.REFUSED: (
        "refused: the request conflicts with the run's state",
        "the task is not waiting; the run has ended; the run belongs to another session (use "
        "`--force`); a second leader; a leader that another one took over; "
        "`crew wait` on a run whose leader is gone (it cannot progress until `crew resume`), or "
        "for a start or a question from a task that ended without one; `crew rerun` of a run "
        "that is led or has not ended, or `--failed` when every task completed; `crew rm` of a "
        "run whose leader is alive, or (without `--force`) that has not ended",
    ),
    ExitCode.NOT_FOUND: (
        "not found",
        "no crew home; no run matches; the run has no such task (`crew rerun`: in its crew "
        "definition)",
    ),
    ExitCode.INTERRUPTED: (
        "interrupted",
        "Ctrl-C (or SIGTERM, SIGHUP) stopped `crew run` or `crew resume`: the run stays "
        "resumable; Ctrl-C in any other command",
    ),
}


class CrewError(Exception):
    """Base of every error crew reports to a user: one sentence, an optional hint, an exit code.

    A subclass names its exit code in its bases: `class NotFound(CrewError, exit_code=…)`.
    """

    exit_code: ExitCode = ExitCode.FAILED

    def __init_subclass__(cls, *, exit_code: ExitCode | None = None, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if exit_code is not None:
            cls.exit_code = exit_code

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message


class UsageError(CrewError, exit_code=ExitCode.USAGE):
    """Bad input: an invalid id, a malformed body, an invalid crew.toml."""


class NotFound(CrewError, exit_code=ExitCode.NOT_FOUND):
    """A run, task or message that does not exist."""


class Refused(CrewError, exit_code=ExitCode.REFUSED):
    """The operation conflicts with the current state; nothing was written."""


class CrewTimeout(CrewError, exit_code=ExitCode.TIMEOUT):
    """A wait, a lock or a run exceeded its time bound."""


class Corrupt(CrewError, exit_code=ExitCode.FAILED):
    """A state file cannot be read; `crew doctor --repair` can fix it."""


class StoreError(CrewError, exit_code=ExitCode.FAILED):
    """A write to the state directory failed (disk full, permissions); nothing was recorded,
    unless `committed` says the change reached the event log (and only the files that mirror
    it lag behind: the next writer completes them)."""

    def __init__(
        self,
        message: str,
        *,
        hint: str | None = None,
        errno: int | None = None,
        committed: bool = False,
    ) -> None:
        super().__init__(message, hint=hint)
        #: The operating system's error number, when an OS error caused it (ENOSPC, EMFILE, …).
        self.errno = errno
        self.committed = committed


class LeaderCrashed(CrewError, exit_code=ExitCode.FAILED):
    """The leader met an error it cannot go on from; the run stays resumable."""


class StaleLeader(CrewError, exit_code=ExitCode.REFUSED):
    """A leader found a newer epoch in the manifest: it was taken over and must stop."""


def from_os_error(error: OSError) -> CrewError:
    """An operating-system error (a read-only folder, a full disk, a missing permission) as one
    sentence that names the file. A link where crew opened a run file (crew opens each one
    without following a link, and a link makes the open fail with ELOOP) is refused as such."""
    if error.errno == errno.ELOOP and error.filename is not None:
        return link_refused(error.filename)
    what = error.strerror or str(error) or type(error).__name__
    where = error.filename if error.filename is not None else "a file of the crew home"
    return StoreError(
        f"{what}: {where}.",
        hint="crew reads and writes its state folder: check its permissions and free space.",
        errno=error.errno,
    )


def link_refused(path: object) -> Refused:
    """A symbolic link found where crew reads or writes a run's file."""
    return Refused(
        f"{path} is a symbolic link, and crew never follows a link inside a run folder.",
        hint="If you trust it, replace the link with a copy of what it points to; "
        "otherwise remove it.",
    )


def error_for(code: int, message: str) -> CrewError:
    """Rebuild an error reported by another process from its exit code and message."""
    for kind in (UsageError, CrewTimeout, Refused, NotFound):
        if int(kind.exit_code) == code:
            return kind(message)
    return CrewError(message)


class ExecutorUnavailable(CrewError, exit_code=ExitCode.FAILED):
    """What runs the workers cannot be reached (a Ray cluster that is down, Ray not installed)."""
