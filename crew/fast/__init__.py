"""The `crew` command's entry point, and a fast path for the commands people and scripts type
most: `status`, `runs`, `mailbox`, `steer`, `follow-up`, `nudge`, `respond`, `logs`, `events`,
`schema`, `--version`, and a `wait` whose condition already holds, with the standard library
alone; `add`, `handoff`, `cancel`, `rm` and `prune` too in their common case
(crew/fast/adding.py, handing.py, cancelling.py, removing.py), and `doctor` of sound runs
(crew/fast/examining.py); and `doctor`, `validate`, `init`, `run`, `resume`, `rerun`, `add`,
`handoff` and `cancel` without typer (crew/fast/doctor.py, validating.py, initializing.py,
leading.py, changing.py: they need the models, or write as the library writes).

A full command pays for importing typer and pydantic, and for building crew's models, before it
reads a byte: about 200 ms, where the work itself takes a few. The fast path does the common
case of these commands with the standard library alone — the same checks, the same records,
the same output, byte for byte — and hands everything else to the full command before it has
written anything: a refusal to explain, a warning to give, recovery to run, an option it does
not take. So an error is always the full command's, worded once.

`CREW_FAST=0` turns the fast path off. tests/test_fast.py runs each case both ways and compares
what they print and write.
"""

from __future__ import annotations

import gc
import importlib
import os
import sys

from crew.fast import no_plugins, runfiles
from crew.fast.cmdline import Call, Fallback, is_plain_duration, parse

TYPE_CHECKING = False  # `typing` costs a fast command a few milliseconds
if TYPE_CHECKING:
    from collections.abc import Callable

#: Values of CREW_FAST that turn the fast path off (crew/env.py's switch values).
_OFF = frozenset({"", "0", "false", "no", "off"})


#: Each command the fast path takes (crew/fast/cmdline.py SPECS): the function that runs it.
RUNNERS: dict[str, tuple[str, str]] = {
    "status": ("crew.fast.status", "status"),
    "runs": ("crew.fast.runs", "runs"),
    "ps": ("crew.fast.runs", "runs"),
    "mailbox": ("crew.fast.mailbox", "mailbox"),
    "events": ("crew.fast.events", "events"),
    "logs": ("crew.fast.logs", "logs"),
    "schema": ("crew.fast.schema", "schema"),
    "wait": ("crew.fast.waiting", "wait"),
    "doctor": ("crew.fast.doctor", "doctor"),
    "run": ("crew.fast.leading", "run"),
    "resume": ("crew.fast.leading", "resume"),
    "rerun": ("crew.fast.leading", "rerun"),
    "validate": ("crew.fast.validating", "validate"),
    "init": ("crew.fast.initializing", "init"),
    "rm": ("crew.fast.removing", "rm"),
    "prune": ("crew.fast.removing", "prune"),
    "add": ("crew.fast.changing", "add"),
    "handoff": ("crew.fast.changing", "handoff"),
    "cancel": ("crew.fast.changing", "cancel"),
    **dict.fromkeys(("steer", "follow-up", "nudge", "respond"), ("crew.fast.sending", "send")),
}


#: What click's shell completion sets when a shell asks `crew` to complete its command line.
COMPLETION = "_CREW_COMPLETE"


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point."""
    args = sys.argv[1:] if argv is None else argv
    _stand_in_for_closed_streams()
    _escape_what_the_streams_cannot_encode()
    code = fast(args)
    if code is None:
        pause_collector()  # until the command begins (crew/cli/__init__.py `_root`)
        from crew.cli import main as full

        full(args)  # exits
    try:
        sys.stdout.flush()
    except OSError as error:
        code = code or _unwritable(error)
    gc.freeze()  # nothing is left to collect: spare the interpreter's last walk over every object
    sys.exit(code)


def _unwritable(error: OSError) -> int:
    """stdout refused what was printed (`crew --version >/dev/full`, a reader gone): a sentence,
    not a traceback; 0 for a reader that went away, as for every command."""
    from crew.render import silence_stdout

    silence_stdout()
    if isinstance(error, BrokenPipeError):
        return 0
    sys.stderr.write(f"crew: error: Cannot write the output: {error.strerror or error}.\n")
    return 1


def _stand_in_for_closed_streams() -> None:
    """Started with stdin, stdout or stderr closed (`crew status RUN >&-`): /dev/null in its
    place, as for a reader that went away (crew/render.py `silence_stdout`). Else the first
    file crew opens would take the stream's number, and what is printed would land in it."""
    for fd, name in enumerate(("stdin", "stdout", "stderr")):
        if getattr(sys, name) is None:  # how Python starts with a closed descriptor
            os.dup2(os.open(os.devnull, os.O_RDWR), fd)  # the lowest free number: fd itself
            mode = "r" if fd == 0 else "w"
            stream = open(fd, mode, encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115
            setattr(sys, name, stream)


def _escape_what_the_streams_cannot_encode() -> None:
    """Where stdout or stderr is not UTF-8 (`PYTHONIOENCODING=ascii`, a C locale without UTF-8
    mode), a character it cannot encode is written as a JSON escape (`\\u2713`), which reads
    in text and keeps JSON valid, instead of failing the command (or a leader mid-run)."""
    narrow = [
        stream
        for stream in (sys.stdout, sys.stderr)
        if (getattr(stream, "encoding", None) or "utf-8").lower().replace("-", "") != "utf8"
    ]
    if narrow:
        import codecs

        codecs.register_error(_ESCAPE, _json_escape)
        for stream in narrow:
            stream.reconfigure(errors=_ESCAPE)  # type: ignore[union-attr]


_ESCAPE = "crew.json-escape"


def _json_escape(error: UnicodeError) -> tuple[str, int]:
    """The characters the stream could not encode, as JSON writes them escaped (a character
    beyond the first plane as its two surrogates)."""
    if not isinstance(error, UnicodeEncodeError):
        raise error
    escaped = []
    for character in error.object[error.start : error.end]:
        code = ord(character)
        if code > 0xFFFF:
            code -= 0x10000
            escaped.append(f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}")
        else:
            escaped.append(f"\\u{code:04x}")
    return "".join(escaped), error.end


def pause_collector() -> None:
    """Before crew's models are built. A start-up (typer and the adapters it builds, crew's
    modules and models) makes objects by the thousand that live as long as the process, and no
    garbage: the collector is paused until `resume_collector` (left on, it ran some 90 times in
    a full command's start-up: ~30 ms). And pydantic is spared its search for plugins
    (crew/fast/no_plugins.py: ~19 ms)."""
    gc.disable()
    no_plugins.install()


def resume_collector() -> None:
    """The start-up is over: what it made is frozen, so no collection walks it again, and the
    collector runs again. Nothing if `pause_collector` did not pause it (a test's process)."""
    if not gc.isenabled():
        gc.freeze()
        gc.enable()


def committed(call: Call, module: str) -> None:
    """A command that needs crew's models (`run`, `resume`, `add`, …), once its command line
    is read: import `module` with the collector paused (`pause_collector`), take --quiet as
    the typer command's callback takes it, and never hand over to the full command from here
    (`runfiles.wrote`): what it does next may write, and must not be done twice."""
    runfiles.wrote = True
    pause_collector()
    try:
        importlib.import_module(module)
        from crew.output import SETTINGS
    finally:
        resume_collector()
    SETTINGS.quiet = "--quiet" in call.options or "-q" in call.options


def fast(argv: list[str]) -> int | None:
    """Run the command on the fast path; None if the full command must run it (nothing was
    written then)."""
    if _left_to_the_full_command():
        return None
    runfiles.wrote = False  # one call, one command
    if argv == ["--version"]:
        from crew import __version__

        try:
            sys.stdout.write(f"crew {__version__}\n")
            sys.stdout.flush()
        except OSError as error:
            return _unwritable(error)
        return 0
    try:
        call = parse(argv)
        module, function = RUNNERS[call.command]
        run: Callable[[Call], int] = getattr(importlib.import_module(module), function)
        return run(call)
    except Fallback as error:
        if runfiles.wrote:  # never after a write: the full command would make the change again
            from crew.render import internal_error

            return internal_error(error)
        return None
    except (LookupError, TypeError, ValueError, AttributeError) as error:
        if runfiles.wrote:
            from crew.render import internal_error

            return internal_error(error)
        return None  # a file of an unexpected shape: the full command reads it, and says why
    except BrokenPipeError:  # the reader went away (`crew status --json | head -1`)
        from crew.render import silence_stdout

        silence_stdout()
        return 0
    except KeyboardInterrupt:
        sys.stderr.write("crew: interrupted\n")
        return 130
    except Exception as error:  # a write that failed after its commit point, a read cut short
        if isinstance(error, OSError) and error.filename is not None and not runfiles.wrote:
            return None  # a file it could not read (a link, unreadable): the full command says why
        from crew.errors import CrewError, from_os_error
        from crew.render import error as report

        if isinstance(error, OSError):
            error = from_os_error(error)
        if not isinstance(error, CrewError):  # as the full command says it (crew/cli `run_app`)
            from crew.render import internal_error

            return internal_error(error)
        return report(error)


def _left_to_the_full_command() -> bool:
    """What in the environment sends every command to the full command."""
    if os.environ.get("CREW_FAST", "1").strip().lower() in _OFF or sys.platform != "linux":
        return True
    if os.environ.get("CREW_FAULT") or os.environ.get("CREW_DEBUG", "").strip().lower() not in _OFF:
        return True  # injected faults and tracebacks are the full command's
    if COMPLETION in os.environ:
        return True  # a shell asks the full command (click) to complete a command line
    timeout = os.environ.get("CREW_LOCK_TIMEOUT")
    # The full command checks an unusual one (the fast path never waits for the lock).
    return timeout is not None and not is_plain_duration(timeout)
