"""The one exception hierarchy of crew: each class carries its exit code."""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """Process exit codes, as documented in docs/exit-codes.md."""

    OK = 0
    FAILED = 1  # the run ended with failed tasks, or an unexpected error
    USAGE = 2
    TIMEOUT = 3
    REFUSED = 4  # state conflict: task not waiting, run terminal, ownership, backpressure
    NOT_FOUND = 5


class CrewError(Exception):
    """Base of every error crew reports to a user: one sentence, an optional hint, an exit code."""

    exit_code: ExitCode = ExitCode.FAILED

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message


class UsageError(CrewError):
    """Bad input: an invalid id, a malformed body, an invalid crew.toml."""

    exit_code = ExitCode.USAGE


class NotFound(CrewError):
    """A run, task or message that does not exist."""

    exit_code = ExitCode.NOT_FOUND


class Refused(CrewError):
    """The operation conflicts with the current state; nothing was written."""

    exit_code = ExitCode.REFUSED


class CrewTimeout(CrewError):
    """A wait, a lock or a run exceeded its time bound."""

    exit_code = ExitCode.TIMEOUT


class Corrupt(CrewError):
    """A state file cannot be read; `crew doctor --repair` can fix it."""

    exit_code = ExitCode.FAILED


class StoreError(CrewError):
    """A write to the state directory failed (disk full, permissions); nothing was recorded."""

    exit_code = ExitCode.FAILED


class StaleLeader(CrewError):
    """A leader found a newer epoch in the manifest: it was taken over and must stop."""

    exit_code = ExitCode.REFUSED


def error_for(code: int, message: str) -> CrewError:
    """Rebuild an error reported by another process from its exit code and message."""
    for kind in (UsageError, CrewTimeout, Refused, NotFound):
        if int(kind.exit_code) == code:
            return kind(message)
    return CrewError(message)
