"""`crew validate`: check a crew definition without starting a run (nothing is written)."""

from __future__ import annotations

from pathlib import Path

from crew.config_checks import check_file
from crew.results.validating import Validation


def validate(path: Path) -> Validation:
    """Every problem of the crew.toml at `path`, each with its key and a fix; none when it is
    valid (the checks are those `crew run` makes before it creates a run)."""
    checked = check_file(path)
    config = checked.config
    if config is None:
        return Validation(path, checked.problems)
    return Validation(path, agents=len(config.agents), tasks=len(config.tasks))
