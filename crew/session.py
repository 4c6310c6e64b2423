"""Who is acting: the session recorded as a run's owner and checked by every mutating command."""

from __future__ import annotations

import getpass
import os
import socket

from crew import env
from crew.ids import check_session


def current_session(explicit: str | None = None) -> str:
    """`explicit` (--session), else $CREW_SESSION_ID, else `<user>@<host>`."""
    if explicit is not None:
        return check_session(explicit, "--session")
    from_env = env.SESSION.value()
    if from_env:
        return check_session(from_env, env.SESSION.name)
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    return f"{user}@{socket.gethostname()}"
