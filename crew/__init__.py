"""crew: orchestrate crews of worker processes, with every bit of state in plain files.

The library is the product; the `crew` command is a thin layer over it. Public names are loaded
lazily so that `import crew` stays cheap for the command line.
"""

from __future__ import annotations

#: True for type checkers only: `typing` itself costs a fast command a few milliseconds.
TYPE_CHECKING = False

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
    "RunStore": "crew.store.runstore",
    "RunState": "crew.store.state",
    "create_run": "crew.domain.runs",
    "start_run": "crew.leader",
    "lead": "crew.leader",
    "LeadOptions": "crew.leader",
    "respond": "crew.verbs",
    "steer": "crew.verbs",
    "follow_up": "crew.verbs",
    "nudge": "crew.verbs",
    "cancel": "crew.verbs",
    "handoff": "crew.verbs",
    "add_task": "crew.verbs",
    "run_status": "crew.views",
    "list_runs": "crew.views",
    "mailbox_view": "crew.views",
    "wait_for_run": "crew.waiting",
    "load_config": "crew.config",
    "CrewConfig": "crew.config",
    "validate": "crew.validation",
    "InvalidConfig": "crew.config_checks",
    "ConfigProblem": "crew.config_checks",
    "Run": "crew.models",
    "Task": "crew.models",
    "Event": "crew.models",
    "MailboxMessage": "crew.models",
    "SupervisorContact": "crew.models",
}

__all__ = [
    "ConfigProblem",
    "Corrupt",
    "CrewConfig",
    "CrewError",
    "CrewTimeout",
    "Event",
    "ExitCode",
    "Home",
    "InvalidConfig",
    "LeadOptions",
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
    "add_task",
    "cancel",
    "create_run",
    "find_home",
    "follow_up",
    "handoff",
    "lead",
    "list_runs",
    "load_config",
    "mailbox_view",
    "nudge",
    "respond",
    "run_status",
    "start_run",
    "steer",
    "validate",
    "wait_for_run",
]

if TYPE_CHECKING:
    from typing import Any

    from crew.config import CrewConfig, load_config
    from crew.config_checks import ConfigProblem, InvalidConfig
    from crew.domain.runs import create_run
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
    from crew.leader import LeadOptions, lead, start_run
    from crew.models import Event, MailboxMessage, Run, SupervisorContact, Task
    from crew.paths import Home, find_home
    from crew.store.runstore import RunStore
    from crew.store.state import RunState
    from crew.validation import validate
    from crew.verbs import add_task, cancel, follow_up, handoff, nudge, respond, steer
    from crew.views import list_runs, mailbox_view, run_status
    from crew.waiting import wait_for_run


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'crew' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
