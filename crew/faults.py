"""Fault injection for the crash tests: die at a chosen write, as a power cut or `kill -9` would.

`CREW_FAULT=<point>[@<n>][,…]` makes the process SIGKILL itself the n-th time (default: the
first) it passes `<point>`. Points are named after what was just done:

    append:<file>     after a JSONL append reached the file (events.jsonl, inbox.jsonl, …)
    tear:<file>       in the middle of an append: half the bytes written, then death
    temp:<file>       in an atomic snapshot replace: the temp file written, not yet renamed
    replace:<file>    after an atomic snapshot replace (manifest.json, leader.json, …; a task's is
                      tasks/<taskId>.json)
    write:<file>      after a file is overwritten in place (applied, the store's marker)
    read:<file>       as a tolerant read of a JSONL file begins
    deliver           after the leader wrote messages to a worker's stdin, before recording it
    enospc:<file>     not a crash: the append fails as if the disk were full (`edquot:<file>`:
                      as if the user's quota were; `eio:<file>`: as if the disk failed to write)
    raise:<place>     not a crash: an exception, as a bug would raise (`raise:leader`: in the
                      leader's loop; `raise:worker`: as the leader handles a worker's output;
                      `raise:exits`: as it records exits read together, before the commit)
    emfile:<place>    not a crash: an OSError, no file descriptor left (`emfile:spawn`: as a
                      worker is started; `enfile:<place>`: none left on the whole system)
    interrupt:<point> not a crash: SIGINT (Ctrl-C) at any of the points above
    stop:<point>      not a crash: SIGSTOP at any of the points above, as a hung process (stuck
                      in I/O, paused) would stay there, holding what it holds
    no-cgroups        not a crash: the leader acts as if it could not make cgroups for workers

Unset (always, outside tests), it costs one dictionary lookup per write.
"""

from __future__ import annotations

import errno
import os
import signal

from crew import env

_armed: dict[str, int] | None = None
_hits: dict[str, int] = {}


def _load() -> dict[str, int]:
    global _armed  # noqa: PLW0603  # parsed once per process
    if _armed is None:
        _armed = {}
        for item in (env.FAULT.value() or "").split(","):
            point, at, count = item.strip().rpartition("@")
            if not at:
                point, count = count, "1"
            if point and count.isascii() and count.isdigit():
                _armed[point] = int(count)
    return _armed


def armed(point: str) -> bool:
    """Whether this pass through `point` is the one chosen to fail (counts the pass)."""
    points = _load()
    if not points:
        return False
    wanted = points.get(point)
    if wanted is None:
        return False
    _hits[point] = _hits.get(point, 0) + 1
    return _hits[point] == wanted


def active(point: str) -> bool:
    """Whether `point` is armed at all: a condition to simulate (`no-cgroups`), not a pass."""
    return point in _load()


def fail_at(place: str) -> None:
    """Raise here, as a bug would, if `raise:<place>` is armed for this pass."""
    if not _load():
        return
    if armed(f"raise:{place}"):
        raise RuntimeError(f"injected failure at {place}")


def out_of_files_at(place: str) -> None:
    """Fail here with EMFILE, as a process out of file descriptors would, if `emfile:<place>`
    is armed for this pass (ENFILE, the whole system out of them, with `enfile:<place>`)."""
    if not _load():
        return
    for name, code in (("emfile", errno.EMFILE), ("enfile", errno.ENFILE)):
        if armed(f"{name}:{place}"):
            raise OSError(code, os.strerror(code))


#: The write errors an append can be made to fail with: `<name>:<file>`.
_DISK_ERRORS = {"enospc": errno.ENOSPC, "edquot": errno.EDQUOT, "eio": errno.EIO}


def disk_error_at(file: str) -> None:
    """Fail an append to `file` with ENOSPC, EDQUOT or EIO, if `<name>:<file>` is armed for this
    pass."""
    if not _load():
        return
    for name, code in _DISK_ERRORS.items():
        if armed(f"{name}:{file}"):
            raise OSError(code, f"{os.strerror(code)} (injected)")


def crash_at(point: str) -> None:
    """Die here, without cleanup, if `point` is armed for this pass (or, armed as
    `interrupt:<point>`, be interrupted as Ctrl-C would; armed as `stop:<point>`, hang)."""
    if not _load():
        return
    if armed(point):
        os.kill(os.getpid(), signal.SIGKILL)
    if armed(f"interrupt:{point}"):
        os.kill(os.getpid(), signal.SIGINT)
    if armed(f"stop:{point}"):
        os.kill(os.getpid(), signal.SIGSTOP)
