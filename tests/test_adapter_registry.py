"""The one registry of adapters: every protocol has one, and a leader imports only those of the
protocols its agents speak."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from crew.adapters import ADAPTERS, adapter_for
from crew.adapters.base import Adapter
from crew.config import AgentConfig
from crew.registry import AgentProtocol

#: What the leader calls on every adapter (crew/adapters/base.py `Adapter`).
_ADAPTER_METHODS = [
    name for name in vars(Adapter) if not name.startswith("_") and callable(vars(Adapter)[name])
]


@pytest.mark.parametrize("protocol", list(AgentProtocol), ids=str)
def test_every_protocol_has_an_adapter(protocol: AgentProtocol) -> None:
    agent = AgentConfig(command=["agent"], protocol=protocol)
    first, second = adapter_for(agent), adapter_for(agent)
    assert first is not second  # one per worker: adapters keep its state
    missing = [name for name in _ADAPTER_METHODS if not callable(getattr(first, name, None))]
    assert not missing, f"{type(first).__name__} lacks {missing}"
    assert set(ADAPTERS) == set(AgentProtocol)


def test_a_leader_of_scripts_never_imports_an_agent_clis_adapter() -> None:
    probe = textwrap.dedent(
        """
        import json, sys
        import crew.leader
        from crew.adapters import adapter_for
        from crew.config import AgentConfig

        adapter_for(AgentConfig(command=["script"]))
        adapter_for(AgentConfig(command=["script"], protocol="text"))
        print(json.dumps(sorted(m for m in sys.modules if m.startswith("crew.adapters"))))
        """
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert json.loads(done.stdout) == [
        "crew.adapters",
        "crew.adapters.base",
        "crew.adapters.native",
    ]
