"""crew: orchestrate crews of worker processes, with every bit of state in plain files.

The library is the product; the `crew` command is a thin layer over it. Public names are loaded
lazily so that `import crew` stays cheap for the command line.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS = {
    "CrewError": "crew.errors",
    "NotFound": "crew.errors",
    "Refused": "crew.errors",
    "UsageError": "crew.errors",
    "CrewTimeout": "crew.errors",
    "Corrupt": "crew.errors",
    "StoreError": "crew.errors",
    "ExitCode": "crew.errors",
    "Home": "crew.paths",
    "find_home": "crew.paths",
    "RunStore": "crew.run",
    "RunState": "crew.run",
    "create_run": "crew.run",
    "load_config": "crew.config",
    "CrewConfig": "crew.config",
    "Run": "crew.models",
    "Task": "crew.models",
    "Event": "crew.models",
    "MailboxMessage": "crew.models",
    "SupervisorContact": "crew.models",
}

__all__ = [
    "Corrupt",
    "CrewConfig",
    "CrewError",
    "CrewTimeout",
    "Event",
    "ExitCode",
    "Home",
    "MailboxMessage",
    "NotFound",
    "Refused",
    "Run",
    "RunState",
    "RunStore",
    "StoreError",
    "SupervisorContact",
    "Task",
    "UsageError",
    "__version__",
    "create_run",
    "find_home",
    "load_config",
]

if TYPE_CHECKING:
    from crew.config import CrewConfig, load_config
    from crew.errors import (
        Corrupt,
        CrewError,
        CrewTimeout,
        ExitCode,
        NotFound,
        Refused,
        StoreError,
        UsageError,
    )
    from crew.models import Event, MailboxMessage, Run, SupervisorContact, Task
    from crew.paths import Home, find_home
    from crew.run import RunState, RunStore, create_run


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'crew' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
