"""One worker process of the leader: its pipes, its output split into lines and logged, its
stdin, its exit (crew/leader/processes.py holds them all).

A worker's output goes to its log exactly as received (what a full disk keeps out waits in
`unlogged`, in order), and when it was received to the log's index (crew/store/logindex.py).
Messages written to its stdin are `in_flight` until the pipe has taken every byte; only then are
they recorded as delivered.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
from dataclasses import dataclass, field

from crew import faults
from crew.adapters.base import Adapter
from crew.executors.base import Handle
from crew.leader import monitors
from crew.leader.signals import AgentState
from crew.models import MailboxMessage
from crew.store import logindex

_READ = 65536
#: A line longer than this without a newline is taken as it is (it is not a protocol line).
MAX_LINE = 1024 * 1024
#: How much of a line not yet ended waits to go to the log whole.
_UNENDED = 64 * 1024


class LineSplitter:
    """Complete lines out of chunks of output."""

    def __init__(self, limit: int = MAX_LINE) -> None:
        self._partial = bytearray()
        self._limit = limit

    def feed(self, data: bytes) -> list[bytes]:
        """The lines `data` completes (without their newlines)."""
        self._partial += data
        lines = [bytes(line) for line in self._partial.split(b"\n")]
        self._partial = bytearray(lines.pop())
        if len(self._partial) > self._limit:
            lines.append(bytes(self._partial))
            self._partial.clear()
        return lines

    def rest(self) -> list[bytes]:
        """At the end of the output: a last line without a newline, if there is one."""
        if not self._partial:
            return []
        line, self._partial = bytes(self._partial), bytearray()
        return [line]


@dataclass
class WorkerProcess:
    """A live worker process of this leader: one attempt of one task."""

    task_id: str
    attempt: int
    #: Its process, wherever the executor runs it (crew/executors).
    handle: Handle
    adapter: Adapter
    log_fd: int
    clock: monitors.Clock
    agent: AgentState = field(default_factory=AgentState)
    lines: LineSplitter = field(default_factory=LineSplitter)
    to_write: bytearray = field(default_factory=bytearray)
    #: Messages whose frames are in `to_write`: delivered once it drains.
    in_flight: list[MailboxMessage] = field(default_factory=list)
    stdin_closed: bool = False
    open_streams: int = 2
    #: Output read but not yet in the log (the disk could not take it yet).
    unlogged: bytearray = field(default_factory=bytearray)
    #: Per stream, the start of a line not yet ended, when stdout and stderr are two pipes (an
    #: agent's): a line of one goes to the log whole, never with a line of the other inside it.
    unended: dict[int, bytearray] = field(default_factory=dict)
    #: While paused, the selector registrations set aside (see Workers.pause).
    paused: list[tuple[object, int, object]] | None = None
    exit_code: int | None = None
    #: A remote worker's placement was recorded.
    placed: bool = False
    #: When an idle agent's stdin gets closed (agent `keepOpen`), once its turn has ended.
    close_at: float | None = None
    #: When an interrupted agent gets SIGTERM (it was given a moment to wind down first).
    term_at: float | None = None
    #: When a worker that was asked to stop gets SIGKILL.
    kill_at: float | None = None
    #: The log's index (-1: none), the log's size, and when the newest output was read.
    index_fd: int = -1
    logged: int = 0
    received_us: int = 0

    @property
    def pid(self) -> int | None:
        return self.handle.pid

    @property
    def exited(self) -> bool:
        return self.exit_code is not None

    @property
    def stopping(self) -> bool:
        return self.kill_at is not None

    def streams(self) -> list[int]:
        """The descriptors of its output streams still open (stdout, then stderr)."""
        found = []
        for stream in (self.handle.stdout, self.handle.stderr):
            if stream is not None and not stream.closed:
                found.append(stream.fileno())
        return found

    def read(self, fd: int) -> bytes | None:
        """Read what `fd` has (it waits in `unlogged` for `flush_log`); None at the end of the
        stream."""
        try:
            data = os.read(fd, _READ)
        except BlockingIOError:
            return b""
        except OSError:
            data = b""
        if not data:
            self.unlogged += self.unended.pop(fd, b"")  # the stream's last bytes, ended or not
            return None
        self.received_us = logindex.now_us()
        if self.handle.stderr is None:  # one stream: the log gets it as it comes
            self.unlogged += data
            return data
        pending = self.unended.setdefault(fd, bytearray())
        pending += data
        end = pending.rfind(b"\n") + 1
        if len(pending) > _UNENDED:  # a line this long goes to the log in pieces
            end = len(pending)
        self.unlogged += pending[:end]
        del pending[:end]
        return data

    def flush_log(self, *, unended: bool = False) -> None:
        """Append what was read to the task's log (`unended`: lines not ended yet too, as it
        stops). An OSError (a full disk) leaves what was not written in `unlogged`, for the
        next call."""
        if unended:
            for pending in self.unended.values():
                self.unlogged += pending
            self.unended.clear()
        start = self.logged
        try:
            while self.unlogged:
                written = os.write(self.log_fd, self.unlogged)
                del self.unlogged[:written]
                self.logged += written
        finally:
            if self.logged > start and self.index_fd >= 0:
                logindex.append(self.index_fd, self.logged, self.received_us)

    def drain(self, *, parse: bool) -> list[bytes]:
        """Once it has exited: log what its pipes still hold; the complete stdout lines."""
        lines: list[bytes] = []
        stdout = self.handle.stdout
        for fd in self.streams():
            while True:
                data = self.read(fd)
                if not data:  # end of stream, or a grandchild still holds the pipe open
                    break
                if parse and stdout is not None and fd == stdout.fileno():
                    lines += self.lines.feed(data)
        return lines

    def write(self, data: bytes) -> bool:
        """Queue bytes for its stdin and write what the pipe takes now. True when everything
        queued has been written (the in-flight messages are then delivered)."""
        self.to_write += data
        stdin = self.handle.stdin
        if stdin is None or self.stdin_closed:
            return False
        try:
            while self.to_write:
                written = os.write(stdin.fileno(), self.to_write)
                del self.to_write[:written]
        except BlockingIOError:
            return False  # the pipe is full: the loop waits until it can take more
        except OSError as exc:
            if exc.errno not in {errno.EPIPE, errno.EBADF}:
                raise
            self.to_write.clear()
            self.in_flight = []
            self.stdin_closed = True  # the worker closed its stdin: messages stay pending
            return False
        return True

    def take_delivered(self) -> list[MailboxMessage]:
        """The in-flight messages, now that their bytes are written."""
        if not self.in_flight:
            return []
        faults.crash_at("deliver")
        delivered, self.in_flight = self.in_flight, []
        return delivered

    def close_stdin(self) -> None:
        stdin = self.handle.stdin
        if stdin is not None and not self.stdin_closed:
            with contextlib.suppress(OSError):
                stdin.close()
        self.stdin_closed = True

    def signal(self, sig: signal.Signals) -> None:
        """Signal it and everything it started."""
        self.handle.signal(sig)

    def wait(self) -> int:
        """Reap it; its exit code (128 + the signal's number when a signal killed it)."""
        code = self.handle.wait()
        self.exit_code = code if code >= 0 else 128 - code
        return code

    def close(self) -> None:
        """Close the descriptors the leader holds for the process (its log stays open until
        `close_log`: what a fault kept out of it may still be written)."""
        self.handle.close()

    def discard(self) -> None:
        """Kill it: its start could not be recorded, and nothing may run unrecorded."""
        self.signal(signal.SIGKILL)
        self.wait()
        self.close()
        self.close_log()

    def close_log(self, *, flush: bool = False) -> None:
        """Close its log (`flush`: after writing what it can of what was read)."""
        if self.log_fd < 0:
            return
        if flush:
            with contextlib.suppress(OSError):
                self.flush_log(unended=True)
        os.close(self.log_fd)
        self.log_fd = -1
        if self.index_fd >= 0:
            os.close(self.index_fd)
            self.index_fd = -1
