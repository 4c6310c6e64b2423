"""Leading a run: `crew run`, `crew resume` and `--detach` as library calls."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from crew.adapters import check_supported
from crew.config import load_config
from crew.errors import CrewError, StoreError, error_for
from crew.models import Event
from crew.paths import Home
from crew.run import RunStore, create_run

if TYPE_CHECKING:
    from crew.leader.core import Leader

OnEvents = Callable[[list[Event]], None]


def start_run(home: Home, config_path: Path, *, session: str) -> RunStore:
    """Validate crew.toml and create a run from it (nothing is created if it is invalid)."""
    config = load_config(config_path)
    for agent in config.agents.values():
        check_supported(agent)
    return create_run(home, config, crew_dir=config_path.parent.resolve(), session=session)


def lead(
    store: RunStore,
    *,
    session: str,
    resume: bool = False,
    force: bool = False,
    max_parallel: int | None = None,
    run_timeout: float | None = None,
    on_events: OnEvents | None = None,
    on_ready: Callable[[], None] | None = None,
) -> int:
    """Become the run's leader and lead it to the end; returns the exit code.

    SIGINT, SIGTERM and SIGHUP stop the leader gracefully (the run stays resumable).
    """
    leader = become_leader(
        store,
        session=session,
        resume=resume,
        force=force,
        max_parallel=max_parallel,
        run_timeout=run_timeout,
        on_events=on_events,
    )
    if on_ready is not None:
        on_ready()
    with stop_on_signals(leader.request_stop):
        return leader.lead()


def become_leader(
    store: RunStore,
    *,
    session: str,
    resume: bool = False,
    force: bool = False,
    max_parallel: int | None = None,
    run_timeout: float | None = None,
    on_events: OnEvents | None = None,
) -> Leader:
    """Claim the run's lease (taking an interrupted run over with `resume`): a Leader ready to
    `lead()`, in this thread or another."""
    from crew.leader.core import Leader
    from crew.leader.takeover import claim

    takeover = claim(store, session=session, force=force, resume=resume)
    return Leader(
        store,
        takeover.lease,
        home_parent=store.paths.root.parents[3],
        max_parallel=max_parallel,
        run_timeout=run_timeout,
        on_events=on_events,
    )


@contextlib.contextmanager
def stop_on_signals(stop: Callable[[str], None]) -> Iterator[None]:
    """While in the block, SIGINT, SIGTERM and SIGHUP call `stop(name)` (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, _frame: FrameType | None) -> None:
        stop(signal.Signals(signum).name)

    previous = {
        sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    }
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def detach(store: RunStore, *, session: str, resume: bool = False, **options: object) -> int:
    """Lead the run from a background process; returns its pid once it holds the lease.

    The leader's own output goes to `.runtime/leader.log`. An error before it leads (another
    leader, ownership) is raised here, in the caller.
    """
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the leader
        os.close(read_end)
        code = 1
        try:
            os.setsid()
            _redirect(store.paths.runtime_dir / "leader.log")

            def ready() -> None:
                os.write(write_end, b"ok\n")
                os.close(write_end)

            code = lead(store, session=session, resume=resume, on_ready=ready, **options)  # type: ignore[arg-type]
        except CrewError as error:
            with contextlib.suppress(OSError):
                os.write(write_end, f"error:{error.exit_code}:{error.message}\n".encode())
            print(f"crew: error: {error.message}", file=sys.stderr)
        except BaseException as error:  # the background leader must never unwind into the CLI
            print(f"crew: leader crashed: {error!r}", file=sys.stderr)
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as reader:
        answer = reader.readline().decode(errors="replace").strip()
    if answer == "ok":
        return pid
    if answer.startswith("error:"):
        _, status, message = answer.split(":", 2)
        raise error_for(int(status), message)
    raise StoreError(
        f"The background leader exited before it could lead the run; see "
        f"{store.paths.runtime_dir / 'leader.log'}."
    )


def _redirect(log: Path) -> None:
    log.parent.mkdir(parents=True, exist_ok=True)
    null = os.open(os.devnull, os.O_RDONLY)
    out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(null, 0)
    os.dup2(out, 1)
    os.dup2(out, 2)
    os.close(null)
    os.close(out)
