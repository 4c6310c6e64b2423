"""What the commands that look after a home return: doctor, init, schema."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from crew.results import Result


@dataclass
class Finding:
    """One problem: where it is, what it is, and whether a repair fixed it."""

    run_id: str
    problem: str
    path: Path | None = None
    line: int | None = None
    repairable: bool = True
    repaired: bool = False

    def location(self) -> str:
        if self.path is None:
            return self.run_id
        return f"{self.path}:{self.line}" if self.line is not None else str(self.path)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"runId": self.run_id, "problem": self.problem}
        if self.path is not None:
            data["file"] = str(self.path)
        if self.line is not None:
            data["line"] = self.line
        data["repairable"] = self.repairable
        data["repaired"] = self.repaired
        return data


@dataclass
class DoctorReport(Result):
    """`crew doctor`: the runs it examined and what it found (and repaired)."""

    runs: list[str] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    repair: bool = False

    @property
    def clean(self) -> bool:
        """No problem left: none found, or (after a repair) every one fixed."""
        return all(f.repaired for f in self.findings)

    @property
    def exit_code(self) -> int:
        return 0 if self.clean else 1

    def to_json(self) -> dict[str, Any]:
        return {
            "clean": self.clean,
            "repair": self.repair,
            "runs": self.runs,
            "findings": [f.to_json() for f in self.findings],
        }


@dataclass
class Initialized(Result):
    """`crew init`: the home, and whether it was created (an existing one is left untouched)."""

    home: Path
    config_file: Path
    created: bool
    #: An existing home lacked its crew.toml: the template was written into it.
    wrote_config: bool = False

    def notes(self) -> list[str]:
        if self.created:
            return []
        if self.wrote_config:
            return [f"{self.home} already exists; wrote the {self.config_file.name} it lacked."]
        return [f"{self.home} already exists; left it untouched."]

    def to_json(self) -> dict[str, Any]:
        return {
            "home": str(self.home),
            "config": str(self.config_file),
            "created": self.created,
            "wroteConfig": self.created or self.wrote_config,
        }


@dataclass
class SchemaDoc(Result):
    """`crew schema`: one JSON Schema, or all of them by name."""

    document: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return self.document


@dataclass
class RemovedRun:
    """A run `crew rm` or `crew prune` removed (or, with --dry-run, would remove)."""

    run_id: str
    crew: str | None = None
    status: str | None = None
    created_at: str | None = None
    ended_at: str | None = None

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"runId": self.run_id}
        for key, value in (
            ("crew", self.crew),
            ("status", self.status),
            ("createdAt", self.created_at),
            ("endedAt", self.ended_at),
        ):
            if value is not None:
                data[key] = value
        return data


@dataclass
class KeptRun:
    """A run `crew prune` would have removed but kept, and why (its leader is alive, it has
    not ended)."""

    run_id: str
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {"runId": self.run_id, "reason": self.reason}


@dataclass
class Removed(Result):
    """`crew rm` and `crew prune`: the runs removed (or that would be, with --dry-run)."""

    removed: list[RemovedRun] = field(default_factory=list)
    kept: list[KeptRun] = field(default_factory=list)
    dry_run: bool = False
    #: Folders of removals cut short earlier (`runs/.rm-<id>`), deleted this time.
    leftovers: list[str] = field(default_factory=list)

    def notes(self) -> list[str]:
        kept = [f"kept run {k.run_id}: {k.reason}" for k in self.kept]
        cut = [f"deleted {n}, left by a removal that was cut short" for n in self.leftovers]
        return kept + cut

    def to_json(self) -> dict[str, Any]:
        return {
            "dryRun": self.dry_run,
            "removed": [r.to_json() for r in self.removed],
            "kept": [k.to_json() for k in self.kept],
        }
