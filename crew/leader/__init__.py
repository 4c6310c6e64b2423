"""Leading a run: `crew run`, `crew resume` and `--detach` as library calls."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from crew.config import load_config
from crew.domain.runs import create_run
from crew.errors import CrewError, ExitCode, StoreError, error_for
from crew.executors import check_executor
from crew.paths import Home
from crew.results.leading import Led
from crew.session import Actor, as_actor
from crew.store.files import open_fd
from crew.store.runstore import RunStore
from crew.text import counts

if TYPE_CHECKING:
    from crew.domain.rerun import RerunPlan
    from crew.leader.loop import Leader
    from crew.leader.view import OnEvents


def start_run(home: Home, config_path: Path, *, session: str | Actor) -> RunStore:
    """Validate crew.toml and create a run from it (nothing is created if it is invalid), owned
    by `session` (a worker's run is owned by `task:<taskId>@<its runId>`)."""
    actor = as_actor(session)
    if actor.worker is not None:
        from crew.domain.gate import check_worker

        check_worker(actor.worker, home)
    config = load_config(config_path)
    check_executor(config)  # a cluster that is down: an error now, and no run left behind
    return create_run(home, config, crew_dir=config_path.parent.resolve(), session=actor)


def start_rerun(
    store: RunStore, names: Sequence[str] = (), *, failed: bool = False, session: str | Actor
) -> tuple[RunStore, RerunPlan]:
    """Create a run that runs an ended run's tasks again — those named, or with `failed` those
    that did not complete, or all — carrying the others as they ended (crew/domain/rerun.py)."""
    from crew.domain.rerun import rerun

    actor = as_actor(session)
    home = store.paths.home
    if actor.worker is not None:
        from crew.domain.gate import check_worker

        check_worker(actor.worker, home)
    return rerun(home, store, names, failed=failed, session=actor)


@dataclass(frozen=True)
class LeadOptions:
    """How to lead a run."""

    #: Take over an interrupted run: its unfinished tasks restart as new attempts.
    resume: bool = False
    #: Lead a run another session owns (recorded).
    force: bool = False
    #: Run at most this many tasks at once (default: crew.toml's maxParallel).
    max_parallel: int | None = None
    #: Cancel what is left after this many seconds; the run fails.
    run_timeout: float | None = None


def lead(
    store: RunStore,
    *,
    session: str | Actor,
    options: LeadOptions = LeadOptions(),
    on_events: OnEvents | None = None,
    on_ready: Callable[[], None] | None = None,
) -> ExitCode:
    """Become the run's leader and lead it to the end; returns the exit code.

    SIGINT, SIGTERM and SIGHUP stop the leader gracefully (the run stays resumable).
    """
    leader = become_leader(store, session=session, options=options, on_events=on_events)
    if on_ready is not None:
        on_ready()
    with stop_on_signals(leader.request_stop):
        return leader.lead()


def become_leader(
    store: RunStore,
    *,
    session: str | Actor,
    options: LeadOptions = LeadOptions(),
    on_events: OnEvents | None = None,
) -> Leader:
    """Claim the run's lease (taking an interrupted run over with `resume`): a Leader ready to
    `lead()`, in this thread or another."""
    from crew.executors import open_executor
    from crew.leader.loop import Leader
    from crew.leader.takeover import claim

    executor = open_executor(
        store.state().run.config, store.paths.home
    )  # before the lease: a cluster may be down
    # A store of its own, keeping only the messages waiting to be delivered: the leader's memory
    # would otherwise grow with every message of a run that lasts hours (crew/store/fold.py).
    lean = RunStore(store.paths, lean_mail=True)
    lean.adopt(store)  # the run as `store` just read it: not every task file again
    store = lean
    try:
        takeover = claim(store, session=session, force=options.force, resume=options.resume)
        return Leader(
            store,
            takeover.lease,
            executor,
            max_parallel=options.max_parallel,
            run_timeout=options.run_timeout,
            on_events=on_events,
            # A resumed run's output goes on from the resume: its history is `crew events`'.
            events_from=takeover.events_at if options.resume else 0,
        )
    except BaseException:
        executor.close()
        raise


def outcome(store: RunStore, code: ExitCode) -> Led:
    """How leading the run ended, as a result for the command line."""
    state = store.state()
    return Led(store.run_id, code, state.run.status, counts(t.status for t in state.task_list()))


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


def detach(store: RunStore, *, session: str | Actor, options: LeadOptions = LeadOptions()) -> int:
    """Lead the run from a background process; returns its pid once it holds the lease.

    The leader's own output goes to `.runtime/leader.log` (a crash with its traceback). An error
    before it leads (another leader, ownership) is raised here, in the caller.
    """
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the leader
        os.close(read_end)
        code = int(ExitCode.FAILED)
        try:
            os.setsid()
            _redirect(store.paths.leader_log)

            def ready() -> None:
                os.write(write_end, b"ok\n")
                os.close(write_end)

            code = lead(store, session=session, options=options, on_ready=ready)
        except CrewError as error:
            with contextlib.suppress(OSError):
                os.write(write_end, f"error:{error.exit_code}:{error.message}\n".encode())
            print(f"crew: error: {error.message}", file=sys.stderr)
        except BaseException:  # the background leader must never unwind into the CLI
            print("crew: the leader crashed:", file=sys.stderr)
            traceback.print_exc()
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
        f"The background leader exited before it could lead the run; see {store.paths.leader_log}."
    )


def _redirect(log: Path) -> None:
    log.parent.mkdir(parents=True, exist_ok=True)
    null = os.open(os.devnull, os.O_RDONLY)
    out = open_fd(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    os.dup2(null, 0)
    os.dup2(out, 1)
    os.dup2(out, 2)
    os.close(null)
    os.close(out)
