"""Pydantic's plugin loader as crew's command line has it: no plugins.

Pydantic looks for plugins (packages that hook into every validation, for tracing) when it
builds its first validator: it imports `importlib.metadata` — with `email`, `zipfile`, `csv`
and `socket` behind it — and reads the entry points of every installed package. In a crew
command that is some 19 ms of a ~200 ms start-up, spent to find nothing: crew validates its
own files, and a plugin could only trace those (docs/performance.md: "Pydantic's plugins
skipped"). So `crew.fast.pause_collector` puts this module where pydantic imports its loader
from, before pydantic is imported; `import crew` as a library leaves pydantic as it is.

`get_plugins` is the one name pydantic imports from its loader (tests/test_fast.py checks the
installed pydantic). Any other a later pydantic asks for brings the real loader back, which
then loads plugins as pydantic always does.
"""

from __future__ import annotations

import importlib
import sys

TYPE_CHECKING = False  # `typing` costs a fast command a few milliseconds
if TYPE_CHECKING:
    from collections.abc import Iterable

#: Where pydantic imports its plugin loader from.
LOADER = "pydantic.plugin._loader"


def install() -> None:
    """Stand in for pydantic's loader, unless pydantic has already imported its own."""
    sys.modules.setdefault(LOADER, sys.modules[__name__])


def get_plugins() -> Iterable[object]:
    """The plugins crew's command line loads: none."""
    return ()


def __getattr__(name: str) -> object:
    if name.startswith("__"):  # what the import system asks of any module (`__path__`)
        raise AttributeError(name)
    if sys.modules.get(LOADER) is sys.modules[__name__]:
        del sys.modules[LOADER]
    return getattr(importlib.import_module(LOADER), name)
