"""What runs a run's workers: the leader's own machine, or the nodes of a Ray cluster
(crew/executors/base.py says what an executor does; docs/scale-out.md, how to choose)."""

from __future__ import annotations

from crew.config import CrewConfig
from crew.executors.base import Executor, Handle
from crew.paths import Home
from crew.registry import ExecutorKind

__all__ = ["Executor", "Handle", "check_executor", "open_executor"]


def check_executor(config: CrewConfig) -> None:
    """What a run needs of its executor, checked before the run is made, cheaply (Ray is not
    imported): ExecutorUnavailable when it is missing or its cluster is down."""
    if config.crew.executor is ExecutorKind.RAY:
        from crew.executors.ray import check

        check(config.ray)


def open_executor(config: CrewConfig, home: Home) -> Executor:
    """The executor crew.toml names for a run of `home`, ready to start workers
    (ExecutorUnavailable when it cannot be reached: Ray not installed, a cluster that is down)."""
    if config.crew.executor is ExecutorKind.RAY:
        from crew.executors.ray import RayExecutor

        refs = {task.id: task.ref for task in config.tasks if task.ref is not None}
        return RayExecutor.connect(config.ray, home, refs=refs)
    from crew.executors.local import LocalExecutor

    return LocalExecutor()
