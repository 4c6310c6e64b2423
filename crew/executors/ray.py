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
import errno
import importlib.util
import logging
import os
import signal
import socket
import threading
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, BinaryIO

from crew.config import RaySection
from crew.errors import ExecutorUnavailable
from crew.executors import ray_node
from crew.leader import spawn
from crew.paths import Home
from crew.procs import tree
from crew.registry import RayWorkspace

#: The most of a worker's stdin one call to its actor carries.
_READ = 65536
#: Calls an actor runs at once: its output stream, a write, a signal.
_CONCURRENCY = 4
#: How long a killed worker's end may take to come back before its node is taken for lost.
_UNANSWERED = 10.0
#: How long the cluster's address may take to accept a connection.
_CONNECT_TIMEOUT = 10.0
_ADDRESS_HINT = "Check RAY_ADDRESS or crew.toml's [ray] address, and that the cluster is up."


class RayHandle:
    """A worker on a Ray node, as the leader's loop sees it: pipes and an exit descriptor."""

    def __init__(self, actor: Any, program: str, *, merge_stderr: bool) -> None:
        self.actor = actor
        self.program = program
        self._pid: int | None = None
        self._node: str | None = None
        self._status: int | None = None
        self._lost: str | None = None
        self.failure: str | None = None
        self.killed = False
        self.ended = threading.Event()
        self._ending = threading.Lock()
        out_r, self.out_w = _pipe()
        err_r: int | None = None
        self.err_w: int | None = None
        if not merge_stderr:
            err_r, self.err_w = _pipe()
        self.in_r, in_w = _pipe()
        self._ctl_r, self._ctl_w = _pipe()
        self.stdout: BinaryIO | None = os.fdopen(out_r, "rb", buffering=0)
        self.stderr: BinaryIO | None = (
            os.fdopen(err_r, "rb", buffering=0) if err_r is not None else None
        )
        self.stdin: BinaryIO | None = os.fdopen(in_w, "wb", buffering=0)

    @property
    def pid(self) -> int | None:
        return self._pid

    @property
    def node(self) -> str | None:
        return self._node

    @property
    def exit_fd(self) -> int | None:
        return self._ctl_r if self._ctl_r >= 0 else None

    @property
    def lost(self) -> str | None:
        return self._lost

    # ------------------------------------------------------------------ the leader's side

    def settle(self) -> bool:
        """Take what `exit_fd` announced; True once the worker has ended."""
        with contextlib.suppress(BlockingIOError, OSError):
            while os.read(self._ctl_r, 64):
                pass
        return self.ended.is_set()

    def signal(self, sig: signal.Signals) -> None:
        """Signal the worker's process group on its node (Ray queues the call: it never waits
        on the node); SIGKILL ends the actor too, placed or not."""
        if self.ended.is_set():
            return
        self.actor.signal.remote(int(sig))
        if sig == signal.SIGKILL:
            import ray

            self.killed = True
            ray.kill(self.actor, no_restart=True)

    def poll(self) -> int | None:
        return self._status if self.ended.is_set() else None

    def wait(self) -> int:
        """Its exit status; a worker whose bridge has not ended it within `_UNANSWERED` (the
        leader killed it, and its node does not answer) is taken for lost."""
        if not self.ended.wait(_UNANSWERED):
            where = f"node {self._node}" if self._node else "its node"
            self._finish(-signal.SIGKILL, f"{where} did not answer for {_UNANSWERED:g} s", None)
        assert self._status is not None
        return self._status

    def leftovers(self, now: float) -> tree.Leftovers | None:
        return None  # the actor ends the worker's group on its node

    def close(self) -> None:
        for stream in (self.stdin, self.stdout, self.stderr):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
        if self._ctl_r >= 0:
            os.close(self._ctl_r)
            self._ctl_r = -1

    # ------------------------------------------------------------------ the bridge's side

    def placed(self, pid: int, node: str) -> None:
        self._pid, self._node = pid, node
        with self._ending:
            self._announce()

    def end(self, status: int = 127, lost: str | None = None, failure: str | None = None) -> None:
        """The worker ended (or was lost, or never started): the bridge's ends of its pipes
        close, and the leader hears (unless it gave up on it first: `wait`)."""
        for fd in (self.out_w, self.err_w, self.in_r):
            if fd is not None and fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self.out_w = self.err_w = self.in_r = -1
        self._finish(status, lost, failure)
        with self._ending:
            os.close(self._ctl_w)
            self._ctl_w = -1

    def _finish(self, status: int, lost: str | None, failure: str | None) -> None:
        """How it ended, decided once: by the bridge, or by a leader that stopped waiting (which
        leaves the bridge's descriptors to the bridge: closing one under it could make a write
        of its land in a file opened since)."""
        with self._ending:
            if self.ended.is_set():
                return
            self._status, self._lost, self.failure = status, lost, failure
            self.ended.set()
            self._announce()

    def _announce(self) -> None:
        """Wake the leader (under `_ending`: the descriptor is closed under it too)."""
        if self._ctl_w >= 0:
            with contextlib.suppress(BlockingIOError, OSError):
                os.write(self._ctl_w, b".")


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
                    logging_level=logging.ERROR,
                    configure_logging=False,
                    include_dashboard=False,
                )
        except Exception as error:  # Ray raises ConnectionError, RuntimeError, ValueError…
            where = f"at {address}" if address else "on this machine"
            raise ExecutorUnavailable(
                f"Cannot reach the Ray cluster {where}: {_first_line(error)}",
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
        self._submit(_bridge(handle))
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


async def _bridge(handle: RayHandle) -> None:
    """Bridge one worker from its placement to its end."""
    stdin: asyncio.Task[None] | None = None
    ending: dict[str, Any] = {"status": 127}
    try:
        placement = await handle.actor.placement.remote()
        if "error" in placement:
            ending["failure"] = _cannot_start(handle.program, placement["error"])
            return
        node = f"{placement['nodeId'][:8]}@{placement['address']}"
        handle.placed(placement["pid"], node)
        stdin = asyncio.get_running_loop().create_task(_carry_stdin(handle))
        ending["status"] = await _stream_output(handle)
    except Exception as error:
        ending.update(_lost_or_failed(handle, error))
    finally:
        if stdin is not None:
            stdin.cancel()
            with contextlib.suppress(BaseException):
                await stdin
        handle.end(**ending)
        with contextlib.suppress(Exception):
            import ray

            ray.kill(handle.actor, no_restart=True)  # its resources go to the next worker now


async def _stream_output(handle: RayHandle) -> int:
    """The worker's output into its pipes, as it comes; its exit status."""
    async for ref in handle.actor.stream.remote():
        number, payload = await ref
        if number == 0:
            return int(payload)
        fd = handle.err_w if number == 2 and handle.err_w is not None else handle.out_w
        await _write_all(fd, payload)
    raise RuntimeError("its output ended without an exit status")


def _lost_or_failed(handle: RayHandle, error: Exception) -> dict[str, Any]:
    """How an attempt ended that Ray cut short: killed (crew's SIGKILL), lost (its actor or
    node went away: an interruption), or failed (crew's code on the node raised, or the bridge
    itself: a bug kept to its task, as the leader keeps one)."""
    import ray.exceptions as errors

    lost = (errors.RayActorError, errors.ObjectLostError, errors.RaySystemError)
    if isinstance(error, errors.RayTaskError) or not isinstance(error, lost):
        cause = getattr(error, "cause", None) or error  # a RayTaskError carries the original
        said = f"{type(cause).__name__}: {_first_line(cause)}"
        return {"status": 1, "failure": f"its Ray actor failed: {said}"}
    if handle.killed:
        return {"status": -signal.SIGKILL}
    where = f"node {handle.node}" if handle.node else "the node it was placed on"
    return {"status": -signal.SIGKILL, "lost": f"{where} was lost (Ray: {type(error).__name__})"}


async def _carry_stdin(handle: RayHandle) -> None:
    """What the leader writes to the worker's stdin, to the actor, in order; the end of input
    too. When the worker has closed its stdin, the pipe closes: the leader's next write fails
    as it would for a local worker."""
    loop = asyncio.get_running_loop()
    while True:
        data = await _read(loop, handle.in_r)
        if not data:
            await handle.actor.close_stdin.remote()
            return
        if not await handle.actor.write.remote(data):
            with contextlib.suppress(OSError):
                os.close(handle.in_r)
            handle.in_r = -1
            return


async def _read(loop: asyncio.AbstractEventLoop, fd: int) -> bytes:
    while True:
        try:
            return os.read(fd, _READ)
        except BlockingIOError:
            await _ready(loop, fd, loop.add_reader, loop.remove_reader)
        except OSError:
            return b""


async def _write_all(fd: int | None, data: bytes) -> None:
    """Write all of `data` to a pipe the leader reads, waiting while it is full (the leader
    paused the worker, or is busy); nothing when the leader has closed it."""
    loop = asyncio.get_running_loop()
    view = memoryview(data)
    while view and fd is not None and fd >= 0:
        try:
            view = view[os.write(fd, view) :]
        except BlockingIOError:
            await _ready(loop, fd, loop.add_writer, loop.remove_writer)
        except OSError as error:
            if error.errno in {errno.EPIPE, errno.EBADF}:
                return
            raise


async def _ready(loop: asyncio.AbstractEventLoop, fd: int, add: Any, remove: Any) -> None:
    ready: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    add(fd, wake)
    try:
        await ready
    finally:
        remove(fd)


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
            f"Cannot reach the Ray cluster at {address}: {_first_line(error)}",
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
    if not host or not port.isdigit():
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


def _pipe() -> tuple[int, int]:
    read, write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    return read, write


def _cannot_start(program: str, error: dict[str, Any]) -> str:
    """As crew.leader.spawn.failure says it of a local worker."""
    where = f": {error['filename']}" if error.get("filename") else ""
    return f"cannot start {program!r} on its node: {error['text']}{where}"


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__
