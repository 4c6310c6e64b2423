"""Deleting a run folder that was set aside for removal (crew/store/removal.py), and all it
holds, with the standard library alone: the fast path's `crew rm` and `crew prune` delete with
it too. Links are removed, not followed; what another removal deleted first is not an error.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys

TYPE_CHECKING = False  # `typing` costs a fast command a few milliseconds
if TYPE_CHECKING:
    from collections.abc import Callable


def delete(folder: str | os.PathLike[str]) -> None:
    """Delete `folder` and everything in it."""
    if os.path.islink(folder):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(folder)
        return
    if sys.version_info >= (3, 12):  # `onerror` is deprecated from 3.12 on
        shutil.rmtree(folder, onexc=_unless_gone)
    else:
        shutil.rmtree(folder, onerror=_unless_gone)


def _unless_gone(_function: Callable[..., object], _path: str, info: object) -> None:
    error = info[1] if isinstance(info, tuple) else info
    if not isinstance(error, FileNotFoundError):
        raise error if isinstance(error, BaseException) else OSError(str(error))
