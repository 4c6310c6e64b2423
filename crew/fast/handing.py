"""`crew handoff` without pydantic, in the common case: a person who owns a run that has not
ended gives it to another person's session. It writes what crew/verbs.py `handoff` writes —
the `ownership.transferred` event carrying the run as it becomes, manifest.json, the marker —
and prints what it prints. Every other case (--force, a worker's session on either side, a run
that ended, one whose files need recovery) is decided before anything is written, by raising
Fallback: crew/fast/changing.py then runs the library's handoff.
"""

from __future__ import annotations

from crew.fast import people
from crew.fast.cmdline import Call, Fallback
from crew.fast.committing import commit, event, owned
from crew.fast.output import out, print_json
from crew.fast.shapes import as_crew_writes
from crew.text import terminal_safe

#: The statuses of a run that has not ended (crew/registry.py RunStatus `terminal`).
LIVE_RUN = frozenset({"running", "needs_review"})
#: crew/registry.py EventType.OWNERSHIP_TRANSFERRED.
TRANSFERRED = "ownership.transferred"
#: crew/models.py Run's fields as manifest.json has them, in order.
RUN_FIELDS = (
    "runId", "crew", "status", "ownerSessionId", "leaderEpoch", "createdAt", "endedAt", "rerunOf",
    "crewDir", "config", "stateVersion",
)  # fmt: skip


def handoff(call: Call) -> int:
    """Hand the run over, or raise Fallback before anything is written."""
    new_owner = call.arguments["to"]
    if "--force" in call.options or not people.plain_session(new_owner):
        raise Fallback  # an override to record; a worker's session, or one to refuse
    with owned(call) as begun:
        files, marker, run, who = begun.files, begun.marker, begun.run, begun.who
        if not as_crew_writes(run, "manifest"):
            raise Fallback  # written anew as it is: the full command writes what the models make
        previous = who.name
        if run.get("status") not in LIVE_RUN:
            raise Fallback  # ended: refused
        if previous != new_owner:
            handed = {**run, "ownerSessionId": new_owner}
            said = f"ownership passed from {previous} to {new_owner} by {who.name}"
            data = {**who.stamp(), "from": previous, "to": new_owner, "by": who.name, "run": handed}
            passed = event(marker.seq + 1, run["runId"], people.now(), TRANSFERRED, said, data)
            commit(files, marker, [passed], run=handed)
    _print(call, run["runId"], previous, new_owner)
    return 0


def _print(call: Call, run_id: str, previous: str, owner: str) -> None:
    """crew/render.py's view of crew/results/sending.py `HandedOff`."""
    if "--json" in call.options:
        document = {"runId": run_id, "previous": previous, "owner": owner}
        print_json({**document, "changed": previous != owner})
    elif "--quiet" in call.options or "-q" in call.options:
        return
    elif previous == owner:
        out(terminal_safe(f"Run {run_id} is already owned by {owner}."))
    else:
        out(terminal_safe(f"Run {run_id} now belongs to {owner} (was {previous})."))
