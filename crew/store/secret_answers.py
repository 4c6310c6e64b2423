"""Answers to secret questions (an agent's `isSecret`): kept out of every file of the run.

The mailbox, the event log and every view hold only REDACTED in their place. The answer itself
waits in a file of its own outside the state folder — in `/dev/shm/crew-secrets-<uid>/`, a tmpfs,
readable by the user alone — from `crew respond` until the leader has given it to the agent, and is
then removed. A leader that dies in between finds it again when the run is resumed; a machine that
restarts loses it (the question is asked again). `CREW_SECRETS_DIR` names another folder (tests
do).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
import tempfile
from pathlib import Path

from crew import env
from crew.errors import CrewError, Refused, UsageError
from crew.ids import shown
from crew.models import MailboxMessage
from crew.paths import RunPaths
from crew.registry import MessageData

#: What the run's files say instead of a secret answer.
REDACTED = "•••••• (secret answer, not stored)"
#: Why a secret answer was not delivered (its question is asked again).
LOST = "secret answer lost: the machine restarted before it reached the agent; asked again"


def is_sealed(message: MailboxMessage) -> bool:
    """A message whose body stands in for a secret answer kept outside the run's files."""
    return bool((message.data or {}).get(MessageData.SECRET))


def keep(paths: RunPaths, message_id: str, answer: str) -> None:
    """Keep a secret answer for the leader to deliver (readable by this user alone)."""
    path = _folder(paths, create=True) / message_id
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(answer)


def reveal(paths: RunPaths, message: MailboxMessage) -> MailboxMessage | None:
    """The message with its real body, for the agent alone (a message that is not sealed as
    it is); None when the secret is gone (the machine restarted since it was given)."""
    if not is_sealed(message):
        return message
    try:
        answer = (_folder(paths, create=False) / message.id).read_text(encoding="utf-8")
    except (OSError, CrewError):
        return None
    return message.model_copy(update={"body": answer})


def forget(paths: RunPaths, message_id: str) -> None:
    """The answer reached the agent (or never will): remove it."""
    with contextlib.suppress(OSError, CrewError):
        (_folder(paths, create=False) / message_id).unlink()


def _folder(paths: RunPaths, *, create: bool) -> Path:
    """The run's folder of secret answers: one per run folder, under a base only we can read."""
    named = env.SECRETS_DIR.value()
    if named and not os.path.isabs(named):  # each process would find it where it started
        raise UsageError(
            f"{env.SECRETS_DIR.name} must be an absolute path, got {shown(named)}: the leader "
            "and `crew respond` resolve a relative one each from its own folder."
        )
    base = Path(named or _runtime_base())
    run = hashlib.sha256(str(paths.root.resolve()).encode()).hexdigest()[:16]
    folder = base / f"{paths.root.name}-{run}"
    if create:
        base.mkdir(mode=0o700, parents=True, exist_ok=True)
        folder.mkdir(mode=0o700, exist_ok=True)
    for each in (base, folder):
        _check_private(each)
    return folder


def _runtime_base() -> Path:
    """A per-user folder on a tmpfs where there is one, so a secret never reaches a disk. Not
    `$XDG_RUNTIME_DIR`: a leader started over ssh and a `crew respond` in a desktop session may
    see different ones (or none), and it is emptied at logout while a detached leader runs on."""
    shm = Path("/dev/shm")
    return (shm if shm.is_dir() else Path(tempfile.gettempdir())) / f"crew-secrets-{os.getuid()}"


def _check_private(folder: Path) -> None:
    """A folder of secrets must be ours, a real folder, and closed to everyone else: one
    another user made first (in /dev/shm, say) is refused."""
    info = folder.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise Refused(
            f"{folder} is not a private folder of yours: crew keeps no secret answer there.",
            hint="Remove it, or set CREW_SECRETS_DIR to a folder only you can read.",
        )
