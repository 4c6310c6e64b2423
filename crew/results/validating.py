"""What `crew validate` returns: the crew definition it checked and every problem it found."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from crew.config_checks import ConfigProblem, InvalidConfig
from crew.errors import ExitCode
from crew.results import Result


@dataclass
class Validation(Result):
    """`crew validate`: the file, its problems (exit 2 if any), and what a valid one defines."""

    file: Path
    problems: list[ConfigProblem] = field(default_factory=list)
    #: How many agents and tasks it defines (None unless it is valid).
    agents: int | None = None
    tasks: int | None = None

    @property
    def valid(self) -> bool:
        return not self.problems

    def refusal(self) -> InvalidConfig | None:
        """The problems as the error `crew run` refuses with (the text view prints it; with
        --json the document says it all, so it is not repeated on stderr)."""
        return InvalidConfig(str(self.file), self.problems) if self.problems else None

    @property
    def exit_code(self) -> int:
        return int(ExitCode.USAGE) if self.problems else int(ExitCode.OK)

    def to_json(self) -> dict[str, Any]:
        return {
            "file": str(self.file),
            "valid": self.valid,
            "agents": self.agents,
            "tasks": self.tasks,
            "problems": [{"file": str(self.file), **p.to_json()} for p in self.problems],
        }
