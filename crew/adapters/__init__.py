"""Adapters: how the leader speaks to each kind of agent, behind one interface (adapters/base.py).

An agent's `protocol` in crew.toml names its adapter in ADAPTERS; a new protocol joins by one
entry there (and one member of AgentProtocol in crew.registry). The leader asks `adapter_for()`
and never knows which adapter it talks to.
"""

from __future__ import annotations

from collections.abc import Callable

from crew.adapters.base import Adapter
from crew.adapters.claude_code import ClaudeCodeAdapter
from crew.adapters.codex import CodexAdapter
from crew.adapters.native import CrewAdapter, TextAdapter
from crew.adapters.pi import PiAdapter
from crew.config import AgentConfig
from crew.registry import AgentProtocol

#: A fresh adapter for one worker of an agent (adapters keep per-worker state).
AdapterFactory = Callable[[AgentConfig], Adapter]

ADAPTERS: dict[AgentProtocol, AdapterFactory] = {
    AgentProtocol.CREW: CrewAdapter,
    AgentProtocol.TEXT: TextAdapter,
    AgentProtocol.PI: PiAdapter,
    AgentProtocol.CLAUDE_CODE: ClaudeCodeAdapter,
    AgentProtocol.CODEX: CodexAdapter,
}


def adapter_for(agent: AgentConfig) -> Adapter:
    """A fresh adapter for a worker of this agent."""
    return ADAPTERS[agent.protocol](agent)
