"""The shell examples of docs/, run as written: what `test_docs_examples.py` checks them with.

A page marks what can run offline with two kinds of fenced block (Sybil finds them):

- ```` ```console ```` — a transcript: `$ command` lines (a trailing `\\` continues one), each
  followed by the output it prints (stdout and stderr together). In the expected output `...`
  matches any text within a line, a line that is only `...` matches any number of lines, and a
  run of spaces matches any run of spaces (a table's columns widen with their values). A
  command that must fail ends its output with its exit status in brackets, `[4]`, as cram does;
  any other non-zero exit fails the example.
- ```` ```toml file=.crew/crew.toml ```` (any language) — a file the reader saves: it is
  written, relative to the shell's current folder, before the blocks after it run.

Every block of a page runs in one shell, in order, so `cd` and variables carry over, as they
would in the reader's terminal.
"""

from __future__ import annotations

import contextlib
import os
import re
import select
import subprocess
import time
from collections.abc import Iterable
from pathlib import Path

from sybil import Document, Example, Region, Sybil
from sybil.parsers.markdown.lexers import RawFencedCodeBlockLexer

#: Longest a single documented command may take before the example fails.
COMMAND_TIMEOUT = 60.0
_END = "\x1e\x1ecrew-doc-example-end"
_ELLIPSIS = "..."


class Shell:
    """One bash for a page: commands in, their output and exit status out."""

    def __init__(self, cwd: Path, env: dict[str, str]) -> None:
        self.cwd = cwd
        self._process = subprocess.Popen(
            ["bash", "--noprofile", "--norc"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env=env,
            start_new_session=True,
        )

    def run(self, command: str) -> tuple[str, int]:
        """Run `command` (stdin from /dev/null); its output and exit status."""
        assert self._process.stdin is not None and self._process.stdout is not None
        script = f"{{\n{command}\n}} </dev/null 2>&1\nprintf '{_END} %d\\n' $?\n"
        self._process.stdin.write(script.encode())
        self._process.stdin.flush()
        output = b""
        deadline = time.monotonic() + COMMAND_TIMEOUT
        fd = self._process.stdout.fileno()
        while (end := output.find(_END.encode())) < 0:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise AssertionError(f"`{command}` did not finish in {COMMAND_TIMEOUT:.0f} s")
            chunk = os.read(fd, 65536)
            if not chunk:
                raise AssertionError(f"the shell exited running `{command}`")
            output += chunk
        while not output.endswith(b"\n"):  # the rest of the status line
            output += os.read(fd, 64)
        status = int(output[end + len(_END) :].split()[0])
        return output[:end].decode(), status

    def working_directory(self) -> Path:
        """The shell's current folder (after any `cd` of the examples)."""
        out, _ = self.run("pwd")
        return Path(out.strip())

    def close(self) -> None:
        """End the shell and anything the examples left running in it."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self._process.pid, 9)
        self._process.wait()


def matches(expected: list[str], actual: list[str]) -> bool:
    """Whether `actual` lines fit `expected`, where `...` stands for any text (or lines)."""
    if not expected:
        return not actual
    head, rest = expected[0], expected[1:]
    if head == _ELLIPSIS:
        return any(matches(rest, actual[i:]) for i in range(len(actual) + 1))
    if not actual:
        return False
    pattern = ".*".join(re.escape(_spaced(part)) for part in head.split(_ELLIPSIS))
    return re.fullmatch(pattern, _spaced(actual[0])) is not None and matches(rest, actual[1:])


def _spaced(line: str) -> str:
    """The line with each run of spaces as one: a table's columns widen with their values."""
    return re.sub(r"  +", " ", line)


def transcript(source: str) -> Iterable[tuple[str, list[str], int]]:
    """Each command of a console block, with the lines and exit status expected of it."""
    command: list[str] = []
    output: list[str] = []
    lines = source.splitlines()
    i = 0
    while i < len(lines):
        if not lines[i].startswith("$ "):
            raise ValueError(f"output before any command: {lines[i]!r}")
        command = [lines[i][2:]]
        while command[-1].endswith("\\") and i + 1 < len(lines):
            i += 1
            command.append(lines[i])
        i += 1
        output = []
        while i < len(lines) and not lines[i].startswith("$ "):
            output.append(lines[i])
            i += 1
        status = 0
        if output and re.fullmatch(r"\[\d+\]", output[-1]):
            status = int(output.pop()[1:-1])
        yield "\n".join(command), output, status


def _check_console(example: Example) -> str | None:
    shell: Shell = example.namespace["shell"]
    for command, expected, status in transcript(example.parsed):
        output, got = shell.run(command)
        actual = [line.rstrip() for line in output.splitlines()]  # tables pad their last cell
        if got != status or not matches(expected, actual):
            return (
                f"{example.path}, line {example.line}: `{command}` exited {got} "
                f"(expected {status}) and printed:\n{output}\nexpected:\n" + "\n".join(expected)
            )
    return None


def _save_file(example: Example) -> None:
    shell: Shell = example.namespace["shell"]
    path = shell.working_directory() / example.region.lexemes["file"]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(example.parsed)


def _parse_console(document: Document) -> Iterable[Region]:
    lexer = RawFencedCodeBlockLexer(info_pattern=re.compile(r"console$\n", re.MULTILINE))
    for region in lexer(document):
        region.parsed = region.lexemes["source"]
        region.evaluator = _check_console
        yield region


def _parse_files(document: Document) -> Iterable[Region]:
    lexer = RawFencedCodeBlockLexer(
        info_pattern=re.compile(r"\w+ file=(?P<file>\S+)$\n", re.MULTILINE)
    )
    for region in lexer(document):
        region.parsed = region.lexemes["source"]
        region.evaluator = _save_file
        yield region


PAGES = Sybil(parsers=[_parse_console, _parse_files])
