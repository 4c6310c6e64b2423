"""Codex's approval requests (codex 0.171.0) as yes/no questions, and their answers.

Commands (`item/commandExecution/requestApproval`), file changes
(`item/fileChange/requestApproval`) and permissions (`item/permissions/requestApproval`). Each
can be allowed for the rest of the thread where codex offers it: `acceptForSession` for a
command whose `availableDecisions` list it (or list none) and for any file change; a permission
grant with `scope: "session"`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

#: Makes an approval's result from the decision (True: approved; and for the session).
Decide = Callable[[bool, bool], dict[str, Any]]
#: The decision that accepts a command or a file change and its like for the rest of the thread.
_FOR_SESSION = "acceptForSession"


def approval(
    method: str, params: dict[str, Any], changes: dict[str, list[Any]]
) -> tuple[str, Decide, bool] | None:
    """An approval request as a yes/no question, how to answer it, and whether it can be
    allowed for the session (None: not an approval)."""
    decide: Decide = _decision
    session = True
    if method == "item/commandExecution/requestApproval":
        command = params.get("command")
        prompt = f"Run `{command}`?" if command else "Run a command?"
        offered = params.get("availableDecisions")  # none listed: every decision is open
        session = not isinstance(offered, list) or _FOR_SESSION in offered
    elif method == "item/fileChange/requestApproval":
        prompt = f"Apply changes to {_files(changes.get(str(params.get('itemId')), []))}?"
    elif method == "item/permissions/requestApproval":
        asked = _dict(params.get("permissions"))
        prompt = f"Grant {_permissions(asked)}?"
        decide = functools.partial(_grant, asked)
    else:
        return None
    if params.get("reason"):
        prompt += f" ({params['reason']})"
    return prompt, decide, session


def _decision(yes: bool, session: bool) -> dict[str, Any]:
    if yes:
        return {"decision": _FOR_SESSION if session else "accept"}
    return {"decision": "decline"}  # decline: the turn goes on without it


def _grant(asked: dict[str, Any], yes: bool, session: bool) -> dict[str, Any]:
    return {"permissions": asked if yes else {}, "scope": "session" if session else "turn"}


def _files(changes: list[Any]) -> str:
    named = []
    for change in map(_dict, changes):
        kind = _dict(change.get("kind"))
        how = f"move to {kind['move_path']}" if kind.get("move_path") else kind.get("type")
        named.append(f"{change.get('path')} ({how})")
    return ", ".join(named) or "files"


def _permissions(asked: dict[str, Any]) -> str:
    wanted = ["network access"] if _dict(asked.get("network")).get("enabled") else []
    files = _dict(asked.get("fileSystem"))
    wanted += [
        f"{access} access to {', '.join(map(str, files[access]))}"
        for access in ("read", "write")
        if files.get(access)
    ]
    for entry in map(_dict, files.get("entries") or []):
        path = _dict(entry.get("path"))
        where = path.get("path") or path.get("pattern") or _dict(path.get("value")).get("kind")
        wanted.append(f"{entry.get('access')} access to {where}")
    return ", ".join(wanted) or "more permissions"


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}
