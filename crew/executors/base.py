"""What the leader asks of whatever runs its workers: an Executor starts a worker's command and
hands back a Handle to its process, wherever that process runs (docs/design.md, "Executors").

The leader's loop watches descriptors of this machine (crew/leader/processes.py): a handle's
streams are pipes the loop reads and writes, and its `exit_fd` becomes readable once the process
has ended. An executor whose processes run elsewhere bridges them to local pipes; adapters and
the worker protocol never know which executor runs them.
"""

from __future__ import annotations

import signal
from typing import TYPE_CHECKING, BinaryIO, Protocol

if TYPE_CHECKING:
    from crew.leader.spawn import Launch
    from crew.procs import tree


class Handle(Protocol):
    """One started worker process."""

    @property
    def pid(self) -> int | None:
        """Its process id where it runs (its process group's id too); None until a remote
        worker is placed."""

    @property
    def node(self) -> str | None:
        """Where it runs: None on the leader's machine, else the executor's name for the node."""

    @property
    def stdin(self) -> BinaryIO | None:
        """Its stdin, a non-blocking pipe (stdout and stderr too)."""

    @property
    def stdout(self) -> BinaryIO | None: ...

    @property
    def stderr(self) -> BinaryIO | None:
        """None when stderr shares stdout's pipe."""

    @property
    def exit_fd(self) -> int | None:
        """A descriptor readable once it has ended (None: the end of its output is the cue)."""

    @property
    def lost(self) -> str | None:
        """Why it ended without an exit status of its own (its node went away), once it has
        ended; None for a process that exited."""

    def settle(self) -> bool:
        """Take what `exit_fd` announced: True once it has ended (`wait` then returns at once);
        False when it announced where it runs (`node` and `pid` are known from then on)."""

    @property
    def failure(self) -> str | None:
        """Why it never ran, where starting it went on after `start` returned (a remote node
        could not run its command); None otherwise."""

    def signal(self, sig: signal.Signals) -> None:
        """Signal it and everything it started (never blocks on a remote node)."""

    def poll(self) -> int | None:
        """Its exit status if it has ended (as Popen gives it: -N when signal N killed it)."""

    def wait(self) -> int:
        """Its exit status, once `exit_fd` is readable or its output has ended."""

    def leftovers(self, now: float) -> tree.Leftovers | None:
        """Once it has exited: SIGTERM what it left running, which SIGKILL is due for later
        (None when nothing is left, or the node cleans up after itself)."""

    def close(self) -> None:
        """Close what the leader holds of it (its pipes, its exit descriptor)."""


class Executor(Protocol):
    """Starts workers (crew.toml `[crew] executor`)."""

    #: Its name in crew.toml.
    name: str

    def start(
        self,
        launch: Launch,
        *,
        merge_stderr: bool,
        task_id: str,
        attempt: int,
        resources: dict[str, float],
    ) -> Handle:
        """Start a worker (OSError when its command cannot be started, ValueError when a value
        cannot be passed to it)."""

    def close(self) -> None:
        """The leader stops: let go of what the executor holds (its workers are gone)."""
