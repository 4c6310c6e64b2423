"""The Ray executor: each worker is a process on a node of a Ray cluster, owned there by one actor
(crew/executors/ray_node.py), and bridged here to local pipes, so the leader's loop reads and
writes it as it does a child of its own.

One thread of the leader runs an asyncio loop, the bridge, for every remote worker: it streams
each worker's output into its pipes, carries what the leader writes to its stdin to the actor in
order, and says through the handle's `exit_fd` when the worker was placed and when it ended. The
leader's own thread never waits on a node: it only starts actors and sends signals, and Ray
queues both. A worker whose actor or node is lost ends `lost`: the leader records its attempt as
interrupted, and it runs again elsewhere (docs/scale-out.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import logging
import os
import socket
import threading
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

from crew.config import RaySection
from crew.errors import ExecutorUnavailable
from crew.executors import ray_node
from crew.executors.ray_bridge import Pacing, RayHandle, bridge, first_line
from crew.leader import spawn
from crew.paths import Home
from crew.registry import RayWorkspace

#: Calls an actor runs at once: its output stream, a write, a signal.
_CONCURRENCY = 4
#: How long the cluster's address may take to accept a connection.
_CONNECT_TIMEOUT = 10.0
_ADDRESS_HINT = "Check RAY_ADDRESS or crew.toml's [ray] address, and that the cluster is up."


class RayExecutor:
    """Starts workers as Ray actors, on the nodes that have the resources they ask for."""

    name = "ray"

    def __init__(
        self,
        section: RaySection,
        actor_class: Any,
        uploaded: Path | None,
        refs: dict[str, str] | None = None,
    ) -> None:
        self._section = section
        self._actor_class = actor_class
        self._uploaded = uploaded
        #: The git refs tasks check out instead of `[ray] ref`, by task id.
        self._refs = refs or {}
        self._pacing = Pacing()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="crew-ray-bridge")
        self._thread.daemon = True
        self._thread.start()

    @classmethod
    def connect(
        cls, section: RaySection, home: Home, *, refs: dict[str, str] | None = None
    ) -> RayExecutor:
        """Join the cluster (RAY_ADDRESS, else `[ray] address`, else a Ray of the leader's own).
        With `workspace = "upload"`, the home's project folder goes to the cluster (Ray uploads
        a folder for a whole job only), without the home itself."""
        address = check(section)
        import ray
        from ray import cloudpickle

        _quiet(ray)
        uploaded = home.project_dir.resolve() if section.workspace is RayWorkspace.UPLOAD else None
        try:
            if not ray.is_initialized():
                ray.init(
                    address=address,
                    runtime_env=_uploading(uploaded, home) if uploaded else None,
                    namespace="crew",
                    log_to_driver=False,
                    configure_logging=False,
                    include_dashboard=False,
                )
        except Exception as error:  # Ray raises ConnectionError, RuntimeError, ValueError…
            where = f"at {address}" if address else "on this machine"
            raise ExecutorUnavailable(
                f"Cannot reach the Ray cluster {where}: {first_line(error)}",
                hint=_ADDRESS_HINT,
            ) from None
        # Shipped by value: the nodes need Ray, not crew.
        cloudpickle.register_pickle_by_value(ray_node)
        actor_class = ray.remote(max_concurrency=_CONCURRENCY)(ray_node.NodeProcess)
        return cls(section, actor_class, uploaded, refs)

    def start(
        self,
        launch: spawn.Launch,
        *,
        merge_stderr: bool,
        task_id: str,
        attempt: int,
        resources: dict[str, float],
    ) -> RayHandle:
        """Create the worker's actor (Ray places it once a node has its resources) and bridge
        it; its pid and node are known once it is placed."""
        self._pacing.check()
        custom = {k: v for k, v in resources.items() if k not in {"CPU", "GPU", "memory"}}
        options: dict[str, Any] = {
            "num_cpus": resources.get("CPU", 1.0),
            "num_gpus": resources.get("GPU", 0.0),
            "resources": custom,
            "max_restarts": 0,
            "max_task_retries": 0,
            "name": None,
        }
        if "memory" in resources:
            options["memory"] = int(resources["memory"])
        remote_launch = self._remote_launch(launch, merge_stderr, task_id)
        actor = self._actor_class.options(**options).remote(remote_launch)
        handle = RayHandle(actor, launch.argv[0], merge_stderr=merge_stderr)
        self._submit(bridge(handle, self._pacing))
        return handle

    def close(self) -> None:
        """The leader stops: the bridge ends, and the leader's actors with its Ray session."""
        import ray

        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
        with contextlib.suppress(Exception):
            ray.shutdown()

    def _remote_launch(
        self, launch: spawn.Launch, merge_stderr: bool, task_id: str
    ) -> dict[str, Any]:
        """What the node needs to start the worker. Of the environment, only what the leader
        set or changed travels: the rest is the node's own (its PATH, its HOME)."""
        changed = {k: v for k, v in launch.env.items() if os.environ.get(k) != v}
        section = self._section
        ref = self._refs.get(task_id, section.ref)
        workspace = {"kind": str(section.workspace), "repo": section.repo, "ref": ref}
        if self._uploaded is not None:  # where the worker's folder is in the uploaded copy
            folder = launch.cwd.resolve()
            if not folder.is_relative_to(self._uploaded):
                raise ValueError(f"its folder {folder} is outside the uploaded {self._uploaded}")
            workspace["within"] = str(folder.relative_to(self._uploaded))
        return {
            "argv": launch.argv,
            "cwd": str(launch.cwd),
            "env": changed,
            "merge_stderr": merge_stderr,
            "workspace": workspace,
        }

    def _submit(self, coroutine: Coroutine[Any, Any, None]) -> None:
        asyncio.run_coroutine_threadsafe(coroutine, self._loop)


def _uploading(folder: Path, home: Home) -> dict[str, Any]:
    """The job's runtime environment that uploads `folder`, the home (the run's state) left out."""
    state = home.root.resolve()
    kept_out = [f"/{state.relative_to(folder)}/"] if state.is_relative_to(folder) else []
    return {"working_dir": str(folder), "excludes": kept_out}


def check(section: RaySection) -> str | None:
    """That Ray is installed and the cluster's address takes a connection, before a run is
    made (without joining the cluster; `auto` is looked up as Ray does); the address.
    `ray.init` would retry an address that is down for minutes, printing warnings of its own."""
    if importlib.util.find_spec("ray") is None:
        raise ExecutorUnavailable(
            'crew.toml says executor = "ray", but Ray is not installed here.',
            hint="Install it with `pip install 'crew[ray]'`.",
        )
    address = os.environ.get("RAY_ADDRESS") or section.address
    if not address:  # Ray starts one of the leader's own
        return address
    try:
        where = _host_and_port(address)
        if where is None:  # not ours to find: ray.init will say
            return address
        with socket.create_connection(where, timeout=_CONNECT_TIMEOUT):
            return address
    except (OSError, ValueError) as error:
        raise ExecutorUnavailable(
            f"Cannot reach the Ray cluster at {address}: {first_line(error)}",
            hint=_ADDRESS_HINT,
        ) from None


def _host_and_port(address: str) -> tuple[str, int] | None:
    """Where a cluster's address points. `auto` is the cluster Ray started last on this
    machine, found as Ray finds it (importing part of Ray, which starts no thread: the leader
    may still fork); ConnectionError when there is none, None when this Ray cannot say."""
    if address == "auto":
        try:
            from ray._private import services
        except ImportError:
            return None
        address = services.canonicalize_bootstrap_address_or_die("auto")
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not (port.isascii() and port.isdigit()):
        raise ValueError(f"{address!r} is not a host:port address")
    return host, int(port)


def _quiet(ray: Any) -> None:
    """Keep Ray's own messages out of the leader's output, which is the run's: with
    `log_to_driver` off, Ray still prints a node's death to stdout (through a hook of its own)
    and errors of calls whose results crew never reads (a signal to a worker already gone)."""
    os.environ.setdefault("RAY_IGNORE_UNHANDLED_ERRORS", "1")
    # Its warnings reach stderr through Python's last-resort handler (crew configures no
    # logging), e.g. that a Ray started for the leader has token authentication on.
    logging.getLogger("ray").setLevel(logging.ERROR)
    worker = getattr(getattr(ray, "_private", None), "worker", None)
    if worker is not None and hasattr(worker, "print_to_stdstream"):
        worker.print_to_stdstream = lambda *args, **kwargs: None
