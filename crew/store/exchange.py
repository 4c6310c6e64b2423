"""Swapping two file names in one step: Linux's `renameat2(RENAME_EXCHANGE)`, which Python's `os`
does not offer, called from the C library (glibc 2.28 and later; musl 1.2 and later).

Where the call or the flag is missing (another system, an older C library or kernel, a file
system that does not support it), `exchange` says so once and is not tried again: the caller
falls back to a plain rename.
"""

from __future__ import annotations

import errno
import functools
import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

_AT_FDCWD = -100
_RENAME_EXCHANGE = 2
#: The errors that mean "not here": the call, the flag, or the file system lacks it.
_UNSUPPORTED = {errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.ENOTSUP}

#: Set once the exchange failed as unsupported: it is not tried again.
_unsupported = False


def exchange(a: str, b: str) -> bool:
    """Swap the files named `a` and `b` (both must exist), atomically: a reader of either name
    sees one file or the other, never none. False when this system cannot (then neither name
    changed); raises OSError for any other failure (e.g. ENOENT when one is missing)."""
    global _unsupported  # noqa: PLW0603  # one answer per process
    call = None if _unsupported else _function()
    if call is None:
        return False
    if call(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    import ctypes  # loaded by `_function`

    code = ctypes.get_errno()
    if code in _UNSUPPORTED:
        _unsupported = True
        return False
    raise OSError(code, os.strerror(code), a, None, b)


@functools.cache
def _function() -> Callable[..., int] | None:
    """The C library's renameat2 (None if it has none)."""
    import ctypes  # here: a command that swaps no file spares its import

    try:
        function = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return None
    function.argtypes = [
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_uint,
    ]
    function.restype = ctypes.c_int
    return function
