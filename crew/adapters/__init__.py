"""Adapters: how the leader speaks to each kind of agent, behind one interface (adapters/base.py).

An agent's `protocol` in crew.toml names its adapter in ADAPTERS; a new protocol joins by one
entry there (and one member of AgentProtocol in crew.registry). The leader asks `adapter_for()`
and never knows which adapter it talks to.

Each entry names the adapter's module and class, imported the first time a worker of that
protocol starts: a leader of scripts never imports the agent CLIs' adapters (~3% of its
start-up).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from crew.adapters.base import Adapter
from crew.config import AgentConfig
from crew.registry import AgentProtocol

#: A fresh adapter for one worker of an agent (adapters keep per-worker state).
AdapterFactory = Callable[[AgentConfig], Adapter]

#: The module and the class (an AdapterFactory) of each protocol's adapter.
ADAPTERS: dict[AgentProtocol, tuple[str, str]] = {
    AgentProtocol.CREW: ("crew.adapters.native", "CrewAdapter"),
    AgentProtocol.TEXT: ("crew.adapters.native", "TextAdapter"),
    AgentProtocol.PI: ("crew.adapters.pi", "PiAdapter"),
    AgentProtocol.CLAUDE_CODE: ("crew.adapters.claude_code", "ClaudeCodeAdapter"),
    AgentProtocol.CODEX: ("crew.adapters.codex", "CodexAdapter"),
}


def factory(protocol: AgentProtocol) -> AdapterFactory:
    """What makes the adapters of `protocol`'s workers (its module imported on first use)."""
    module, name = ADAPTERS[protocol]
    made: AdapterFactory = getattr(importlib.import_module(module), name)
    return made


def adapter_for(agent: AgentConfig) -> Adapter:
    """A fresh adapter for a worker of this agent."""
    return factory(agent.protocol)(agent)
