"""Identifiers: generation, and validation before any id reaches a path."""

from __future__ import annotations

import os
import re
from datetime import UTC, datetime

from crew.errors import UsageError
from crew.text import clip

#: The patterns are the schemas' too, where `$` ends the text; Python's `$` also matches before a
#: final newline, so they are matched here with `fullmatch` (`t1\n` is no task id). Their digits
#: are `[0-9]`: `\d` is any Unicode digit, in Python's engine and in the models' alike.
TASK_ID_PATTERN = r"^[a-z0-9][a-z0-9_.-]{0,63}$"
RUN_ID_PATTERN = r"^[0-9]{8}-[0-9]{6}-[0-9a-f]{4,16}$"
MAX_ID_LENGTH = 64

_TASK_ID_RE = re.compile(TASK_ID_PATTERN)
_RUN_ID_RE = re.compile(RUN_ID_PATTERN)
# A run reference is `latest` or a prefix of a run id: digits, `-` and lowercase hex only.
_RUN_PREFIX_RE = re.compile(r"^[0-9a-f-]{1,64}$")
#: Session ids and idempotency keys: one line of printable text, at most this many characters.
MAX_TEXT_ID_LENGTH = 256
#: Sessions that start with this are workers' (`task:<taskId>`): only a worker acts as one.
WORKER_SESSION_PREFIX = "task:"

LATEST = "latest"


def new_run_id(moment: datetime | None = None) -> str:
    """A run id that is safe in paths and sorts in creation order: `20261130-034100-7f3a`.

    The last four hex digits are the fraction of the second (in 1/65536 s), so two runs created
    within the same second still sort right; a clash (same instant) is retried by the creator.
    """
    moment = (moment or datetime.now(UTC)).astimezone(UTC)
    fraction = moment.microsecond * 65536 // 1_000_000
    return f"{moment.strftime('%Y%m%d-%H%M%S')}-{fraction:04x}"


def new_message_id() -> str:
    return f"msg_{os.urandom(8).hex()}"


def new_event_id() -> str:
    return f"evt_{os.urandom(8).hex()}"


def new_contact_id() -> str:
    return f"q_{os.urandom(6).hex()}"


def new_worker_token() -> str:
    """A worker's secret (CREW_WORKER_TOKEN): 256 random bits."""
    import secrets  # here: a command that starts no worker spares its import (with hmac's)

    return secrets.token_urlsafe(32)


def token_hash(token: str) -> str:
    """What a run keeps of a worker's secret: its SHA-256, in hex."""
    import hashlib  # here: only a worker's command, and a leader, hash a token

    return hashlib.sha256(token.encode("utf-8", "surrogateescape")).hexdigest()


def is_task_id(value: str) -> bool:
    return _TASK_ID_RE.fullmatch(value) is not None


def is_run_id(value: str) -> bool:
    return _RUN_ID_RE.fullmatch(value) is not None


def check_task_id(value: str) -> str:
    """Return `value` if it is a valid task id, else raise UsageError (exit 2)."""
    if not is_task_id(value):
        raise UsageError(
            f"Invalid task id {shown(value)}: expected 1-64 characters of a-z, 0-9, '_', '.', '-' "
            "starting with a letter or digit."
        )
    return value


def check_run_ref(value: str) -> str:
    """Return `value` if it can name a run (`latest` or an id prefix), else raise UsageError."""
    if value != LATEST and _RUN_PREFIX_RE.fullmatch(value) is None:
        raise UsageError(
            f"Invalid run id {shown(value)}: expected a run id such as 20261130-034100-7f3a, "
            "a unique prefix of one, or 'latest'."
        )
    return value


def check_session(value: str, source: str = "") -> str:
    """A session id is free text, but one line of printable characters, never empty or over-long
    (`source` names where it came from: --session, CREW_SESSION_ID)."""
    return _check_text_id(value, "session id", source)


def check_session_option(session: str | None) -> None:
    """--session is one line of printable text (exit 2), checked before any run is looked up."""
    if session is not None:
        check_session(session, "--session")


def check_idempotency_key(value: str, source: str = "--idempotency-key") -> str:
    """An idempotency key: one line of printable characters, never empty or over-long."""
    return _check_text_id(value, "idempotency key", source)


def worker_session(task_id: str, run_id: str | None = None) -> str:
    """The session a task's worker acts as: `task:<taskId>` in its own run, and
    `task:<taskId>@<runId>` where another run names it (a run it owns)."""
    return f"{WORKER_SESSION_PREFIX}{task_id}" + (f"@{run_id}" if run_id else "")


def parse_worker_session(value: str) -> tuple[str, str | None] | None:
    """(task id, run id or None) of a worker's session; None if `value` is not one.

    Raises UsageError for a `task:` session that names no valid task (and run)."""
    if not value.startswith(WORKER_SESSION_PREFIX):
        return None
    task_id, _, run_id = value.removeprefix(WORKER_SESSION_PREFIX).partition("@")
    if not is_task_id(task_id) or (run_id and not is_run_id(run_id)):
        raise UsageError(
            f"Invalid worker session {shown(value)}: expected task:<taskId>, or "
            "task:<taskId>@<runId> for a worker of another run."
        )
    return task_id, run_id or None


def _check_text_id(value: str, what: str, source: str) -> str:
    where = f" ({source})" if source else ""
    if _has_surrogates(value):
        raise UsageError(f"Invalid {what}{where}: it is not UTF-8 text.")
    if not (
        0 < len(value) <= MAX_TEXT_ID_LENGTH and value.isprintable() and value == value.strip()
    ):
        raise UsageError(
            f"Invalid {what} {shown(value)}{where}: expected one line of 1-{MAX_TEXT_ID_LENGTH} "
            "printable characters, with no space at either end."
        )
    return value


def _has_surrogates(value: str) -> bool:
    """Whether `value` holds lone surrogates: how Python spells bytes that were not UTF-8 in an
    argument or an environment variable (`$'\\xff'` becomes '\\udcff')."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def shown(value: object) -> str:
    """A value quoted for an error message (an id, an option's value), cut short so a huge
    argument cannot flood the terminal."""
    if not isinstance(value, str):
        return repr(value)
    return repr(value if len(value) <= MAX_ID_LENGTH + 8 else clip(value, MAX_ID_LENGTH + 1))
