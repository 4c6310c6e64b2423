"""The Ray executor's bridge: a remote worker as the leader's loop sees it (RayHandle: pipes and
an exit descriptor), and the coroutines that carry its output, its stdin and its end between
those pipes and its actor on the node (crew/executors/ray.py starts them; ray_node.py is the
actor). They all run on one thread of the leader, an asyncio loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import signal
import threading
import time
from typing import Any, BinaryIO

from crew.procs import tree

#: The most of a worker's stdin one call to its actor carries.
_READ = 65536
#: How long a killed worker's end may take to come back before its node is taken for lost.
_UNANSWERED = 10.0
#: The pause before the next worker after one Ray lost before placing it, and the longest.
_FIRST_PAUSE = 0.5
_MAX_PAUSE = 30.0


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


class Pacing:
    """When the next worker may be created: at once, unless Ray lost the last ones before it
    placed them (their node gone, or the cluster left without nodes); then after a pause that
    doubles with each such loss, up to _MAX_PAUSE, until a worker is placed again. Without it,
    a cluster with no node left has the leader create and lose workers as fast as it can, each
    attempt an event."""

    def __init__(self) -> None:
        self.losses = 0
        self.not_before = 0.0

    def placed(self) -> None:
        self.losses, self.not_before = 0, 0.0

    def lost_unplaced(self) -> None:
        self.losses += 1
        pause = min(_MAX_PAUSE, _FIRST_PAUSE * 2 ** (self.losses - 1))
        self.not_before = time.monotonic() + pause

    def check(self) -> None:
        """OSError EAGAIN while the pause lasts: the leader holds the start back (degraded),
        and tries again."""
        wait = self.not_before - time.monotonic()
        if wait > 0:
            said = f"Ray lost the last {self.losses} worker(s) before placing them; next in"
            raise OSError(errno.EAGAIN, f"{said} {wait:.1f} s")


async def bridge(handle: RayHandle, pacing: Pacing) -> None:
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
        pacing.placed()
        stdin = asyncio.get_running_loop().create_task(_carry_stdin(handle))
        ending["status"] = await _stream_output(handle)
    except Exception as error:
        ending.update(_lost_or_failed(handle, error))
        if "lost" in ending and handle.node is None:
            pacing.lost_unplaced()
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
        said = f"{type(cause).__name__}: {first_line(cause)}"
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


def _pipe() -> tuple[int, int]:
    read, write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    return read, write


def _cannot_start(program: str, error: dict[str, Any]) -> str:
    """As crew.leader.spawn.failure says it of a local worker."""
    where = f": {error['filename']}" if error.get("filename") else ""
    return f"cannot start {program!r} on its node: {error['text']}{where}"


def first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__
