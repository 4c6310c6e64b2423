"""What every command returns: one dataclass per kind of result, each with `to_json()`.

The library returns these; the command line hands them to crew.render, which prints the JSON
document or the text view, and the result's warnings and notes on stderr. Whatever the text
view says, the JSON says too; docs/commands.md lists each shape. One module per command group,
so that a command loads only the results it can return:

- `sending`: respond, steer, follow-up, nudge (`Sent`), cancel, handoff;
- `reading`: runs, status, mailbox;
- `admin`: doctor, init, schema;
- `leading`: run, resume, wait;
- `validating`: validate.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from crew.errors import CrewError


@dataclass
class Result:
    """Base of every result: the JSON document, stderr lines, and the exit code."""

    #: Printed as one compact line (it ends a stream of JSON lines), not a pretty document.
    json_line = False

    def to_json(self) -> Any:
        raise NotImplementedError

    def warnings(self) -> list[str]:
        """Printed on stderr as `crew: warning: …` (and part of the JSON where it matters)."""
        return []

    def notes(self) -> list[str]:
        """Printed on stderr as `crew: …`: what was done beyond the result itself."""
        return []

    def quiet_lines(self) -> list[str]:
        """What --quiet keeps of the text view: ids a script needs, one a line (none by
        default: the exit code says it all)."""
        return []

    def failure(self) -> CrewError | None:
        """What went wrong after the result was made (printed as `crew: error: …` last)."""
        return None

    @property
    def exit_code(self) -> int:
        failure = self.failure()
        return int(failure.exit_code) if failure is not None else 0


def overridden_note(owner: str | None) -> list[str]:
    """The note a result of --force gives: whose run it acted on."""
    return [f"acted on a run owned by {owner} (--force; recorded)"] if owner else []
