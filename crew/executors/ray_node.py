"""The part of the Ray executor that runs on a node: one actor per worker, which starts the
worker's process there, streams its output back, writes to its stdin and signals it
(crew/executors/ray.py is the leader's side).

Only the standard library and Ray: the leader ships this module to the cluster by value, so a
node needs Ray and Python, not crew (the worker's own command may need more: docs/scale-out.md).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import selectors
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from typing import Any

#: A stream item: which stream (1 stdout, 2 stderr) and what it printed; the last item is
#: (0, its exit status as Popen gives it).
Item = tuple[int, bytes | int]

_READ = 65536
#: The most one stream item carries, and the least time between two items of a worker.
_GATHER = 1024 * 1024
_GAP = 0.002
_PR_SET_PDEATHSIG = 1


def _die_with_the_actor() -> None:
    """In the worker's process, before its program runs: SIGKILL when the actor's process dies
    (a node lost, a leader gone and its actors with it), so no worker outlives its actor."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


class NodeProcess:
    """One worker process on this node. Its constructor starts the process: Ray runs it on the
    actor's main thread, which lives as long as the actor (the parent-death signal is bound to
    the thread that forked)."""

    def __init__(self, launch: dict[str, Any]) -> None:
        self.error: tuple[str, int, str, str | None] | None = None
        self.workdir: str | None = None
        self.process: subprocess.Popen[bytes] | None = None
        try:
            cwd = self._workspace(launch)
            self.process = subprocess.Popen(
                launch["argv"],
                cwd=cwd,
                env={**os.environ, **launch["env"]},
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT if launch["merge_stderr"] else subprocess.PIPE,
                start_new_session=True,
                close_fds=True,
                bufsize=0,
                # Safe here: Ray runs the constructor before the actor takes calls on threads.
                preexec_fn=_die_with_the_actor,  # noqa: PLW1509
            )
        except (OSError, ValueError, subprocess.SubprocessError) as error:
            self.error = _describe(error)

    def placement(self) -> dict[str, Any]:
        """Where the process runs (node id and address, pid), or why it could not start."""
        import ray

        if self.error is not None:
            kind, code, text, filename = self.error
            return {"error": {"kind": kind, "errno": code, "text": text, "filename": filename}}
        assert self.process is not None
        return {
            "pid": self.process.pid,
            "nodeId": ray.get_runtime_context().get_node_id(),
            "address": ray.util.get_node_ip_address(),
        }

    def stream(self) -> Iterator[Item]:
        """Its output as it comes, then its exit status (a streaming generator)."""
        process = self.process
        if process is None:
            yield (0, 127)
            return
        selector = selectors.DefaultSelector()
        streams = {s.fileno(): n for n, s in ((1, process.stdout), (2, process.stderr)) if s}
        for fd in streams:
            os.set_blocking(fd, False)
            selector.register(fd, selectors.EVENT_READ)
        last = 0.0
        exit_fd = os.pidfd_open(process.pid)
        selector.register(exit_fd, selectors.EVENT_READ)
        try:
            while streams:
                for key, _ in selector.select():
                    if key.fd == exit_fd:  # exited: what its pipes hold now, and no more
                        selector.unregister(exit_fd)
                        for fd, number in list(streams.items()):
                            yield from _drain(fd, number)
                        streams.clear()
                        break
                    data = _read(key.fd, _READ)
                    if data is None:
                        continue
                    if data:
                        # Ray's cost is per item: output that comes fast goes in fewer, larger
                        # items, at most one per _GAP (a line on its own goes at once).
                        wait = last + _GAP - time.monotonic()
                        if wait > 0:
                            time.sleep(wait)
                            data += _read(key.fd, _GATHER - len(data)) or b""
                        yield (streams[key.fd], data)
                        last = time.monotonic()
                    else:
                        selector.unregister(key.fd)
                        del streams[key.fd]
            status = process.wait()
            _end_group(process.pid)
            self._clean_up()  # before the last item: the leader stops reading at it
            yield (0, status)
        finally:
            selector.close()
            os.close(exit_fd)

    def write(self, data: bytes) -> bool:
        """Write to its stdin; False once the worker has closed it."""
        stdin = self.process.stdin if self.process is not None else None
        if stdin is None or stdin.closed:
            return False
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(stdin.fileno(), view) :]
        except OSError as error:
            if error.errno not in {errno.EPIPE, errno.EBADF}:
                raise
            return False
        return True

    def close_stdin(self) -> None:
        if self.process is not None and self.process.stdin is not None:
            with contextlib.suppress(OSError):
                self.process.stdin.close()

    def signal(self, number: int) -> bool:
        """Signal its process group; False when it is gone."""
        if self.process is None or self.process.poll() is not None:
            return False
        try:
            os.killpg(self.process.pid, number)
        except ProcessLookupError:
            return False
        return True

    def _workspace(self, launch: dict[str, Any]) -> str:
        """The folder the worker runs in: the leader's (shared), the uploaded copy Ray made the
        actor's working folder (upload), or a fresh clone of a repository (git)."""
        workspace = launch["workspace"]
        if workspace["kind"] == "upload":  # Ray made the job's copy the actor's folder
            return os.path.join(os.getcwd(), workspace["within"])
        if workspace["kind"] == "git":
            self.workdir = tempfile.mkdtemp(prefix="crew-worker-")
            subprocess.run(
                ["git", "clone", "--quiet", workspace["repo"], self.workdir],
                check=True,
                capture_output=True,
            )
            subprocess.run(
                ["git", "checkout", "--quiet", workspace["ref"]],
                cwd=self.workdir,
                check=True,
                capture_output=True,
            )
            return self.workdir
        return str(launch["cwd"])

    def _clean_up(self) -> None:
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None


def _end_group(pid: int) -> None:
    """The worker exited: what it left running in its group is the task's no longer."""
    with contextlib.suppress(OSError):
        os.killpg(pid, signal.SIGTERM)


def _read(fd: int, limit: int) -> bytes | None:
    """What the pipe holds now, up to `limit` (b"" at its end; None if it holds nothing)."""
    chunks: list[bytes] = []
    size = 0
    while size < limit:
        try:
            data = os.read(fd, min(_READ, limit - size))
        except BlockingIOError:
            break
        except OSError:
            data = b""
        if not data:
            if not chunks:
                return b""
            break
        chunks.append(data)
        size += len(data)
    return b"".join(chunks) if chunks else None


def _drain(fd: int, number: int) -> Iterator[Item]:
    while data := _read(fd, _GATHER):
        yield (number, data)


def _describe(error: BaseException) -> tuple[str, int, str, str | None]:
    """An error that kept the process from starting, as plain values for the leader."""
    if isinstance(error, subprocess.CalledProcessError):  # git clone or checkout failed
        said = (error.stderr or b"").decode(errors="replace").strip().splitlines()
        return ("workspace", 0, said[-1] if said else str(error), None)
    if isinstance(error, OSError):
        return ("os", error.errno or 0, error.strerror or str(error), error.filename)
    return ("value", 0, str(error), None)
