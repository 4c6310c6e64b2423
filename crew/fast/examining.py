"""Whether `crew doctor` would find nothing wrong with a run, told without the models.

The library's doctor (crew/doctor.py) reads a run through crew's models, which cost more to
import than the whole typer floor. But a sound run can be told sound by conditions that are
each as strict as one of its checks, or stricter, in the standard library alone — and a run
that meets them all is one on which every check of the full doctor finds nothing:

- no temp file of an interrupted write in any folder crew writes one in;
- every file JSON the models' parser reads as Python's does: UTF-8, no escaped lone surrogate,
  no number of a thousand digits, no line nested MOST_DEPTH deep;
- every line of every log whole, a JSON object of the shape the models write (an event's
  carried state too: crew/fast/shapes.py), events numbered 1, 2, 3, … and the last one closing
  its transaction (none cut short), the applied marker at that last event;
- manifest.json equal to the run state the log last records, every run state it records of
  the same crew definition (which never changes in a run), and the task files, one for each
  task the log records and each task crew.toml defines, each equal to its last recorded state
  but for the field the leader refreshes without an event (crew/store/state.py
  VOLATILE_TASK_FIELDS) — the full doctor rebuilds the state from the same records, so equal
  documents are equal models;
- each mailbox file holding exactly the lines the log's events carry for it, in their order:
  then no message lacks its latest version and no line is one no event records;
- a run not ended has a leader that is not gone.

At the first doubt — a condition not met, a file of a shape not expected, logs too big to read
in the moment the run lock may be held — it says no, and the full doctor examines the run and
reports what it finds (tests/test_fast_doctor.py makes each kind of damage and checks both).
What it cannot see is what the models check of a crew definition beyond its JSON schema (a git
workspace's repository, an autoRespond rule's pattern, a notify trigger, a duration's range),
and only in a definition edited by hand alike in manifest.json and in every run state of the
log: no crew writes one, and one edited anywhere else is a mismatch.
"""

from __future__ import annotations

import json
import os
import re

from crew.fast import people
from crew.fast.cmdline import Fallback
from crew.fast.runfiles import BOXES, RunFiles, RunLock, read_file
from crew.fast.shapes import as_crew_writes
from crew.fast.status import TERMINAL_RUN_STATUSES, read_run
from crew.store.taskfiles import read_task_snapshots

TYPE_CHECKING = False  # `typing` costs a fast command a few milliseconds
if TYPE_CHECKING:
    from typing import Any

#: The folders crew/store/runstore.py `temp_folders` names, below the run's folder.
TEMP_FOLDERS = ("", "tasks", "checkpoints", ".runtime", "mailbox", ".runtime/tasks")
#: crew/registry.py: the mailbox file of each kind of message.
KIND_BOX = {
    "respond": "inbox",
    "followUp": "inbox",
    "steer": "steering",
    "nudge": "steering",
    "contact": "outbox",
    "report": "outbox",
    "ack": "outbox",
}
#: crew/models.py `_CARRIED`: the state an event's data may carry, and the shape of each.
CARRIED = {"run": "manifest", "task": "task", "mailboxMessage": None, "checkpoint": "checkpoint"}
#: What Python's json reads and the models' parser does not, in a field of any type, where no
#: record crew writes holds it: a JSON escape of a UTF-16 surrogate (`\ud83d`, invalid alone;
#: crew writes text as UTF-8), or a number of thousands of digits ("number out of range" past
#: 4,300; a string of a thousand digits is no record crew writes either), found as a run of
#: DIGIT_RUN in the bytes with every digit made "0" and all else " " (a search of the pattern
#: `[0-9]{1000}` takes ten times as long).
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
_DIGITS_ALONE = bytes(0x30 if 0x30 <= byte <= 0x39 else 0x20 for byte in range(256))
DIGIT_RUN = b"0" * 1000
#: How deep a line may nest: the models' parser refuses a line nested 200 deep, Python's json
#: reads one five times as deep (crew's own records nest a dozen levels, a worker's JSON 64).
MOST_DEPTH = 100
#: crew/store/state.py VOLATILE_TASK_FIELDS, as the task files name it.
VOLATILE = "lastOutputAt"
#: How many bytes of logs the examination reads under the run lock: 4 MiB hold the leader up
#: 1 to 5 ms. The logs of a bigger run are the library doctor's, which reads them unlocked, pinned
#: (crew/store/pin.py). Below it the standard library is the faster at every size measured
#: (docs/performance.md: "`doctor` of a sound run without the models").
MOST_BYTES = 4 << 20


def sound(files: RunFiles) -> bool:
    """Whether the full doctor would find nothing wrong with the run (False: it must look)."""
    try:
        files.check_folders()
        with RunLock(files.root):  # the files as one writer left them, read in a moment
            found = _Read(files)
        return found.sound()
    except (Fallback, OSError, ValueError, RecursionError):  # no JSON, or nested past reading
        return False


class _Read:
    """A run's files, as read under its lock."""

    def __init__(self, files: RunFiles) -> None:
        self.files = files
        if any(_temp_files(f"{files.root}/{folder}") for folder in TEMP_FOLDERS):
            raise Fallback
        self.marker = files.clean()  # the logs are the sizes it names
        if self.marker.events_size + sum(self.marker.sizes) > MOST_BYTES:
            raise Fallback
        self.run = read_run(files)
        self.task_files = read_task_snapshots(files.root)
        self.logs = {name: read_file(files.box(name)) for name in BOXES}
        self.events = read_file(files.events)
        read = [self.events, *self.logs.values(), read_file(files.manifest)]
        if any(map(_not_the_models_json, [*read, *(self.task_files or {}).values()])):
            raise Fallback

    def sound(self) -> bool:
        events = _lines(self.events)
        if not all(_event(e) for e in events):
            return False
        if [e["seq"] for e in events] != list(range(1, len(events) + 1)):
            return False  # a seq lost, or two copies of the log merged
        last = events[-1] if events else None
        if last is None or last.get("endSeq", last["seq"]) > last["seq"]:
            return False  # no history, or a transaction cut short
        if self.marker.seq != last["seq"]:
            return False
        return self._state_sound(events) and self._mail_sound(events) and self._leader_sound()

    def _state_sound(self, events: list[dict[str, Any]]) -> bool:
        run, tasks = None, {}
        for event in events:
            data = event.get("data") or {}
            if data.get("run") is not None:
                run = data["run"]
            task = data.get("task")
            if task is not None:
                tasks[task["id"]] = task
        if run is None or run != self.run or self.task_files is None:
            return False
        if any(e["data"]["run"]["config"] != run["config"] for e in events if _carries_run(e)):
            return False  # a run's definition never changes: an earlier record edited
        defined = {task["id"] for task in run["config"]["tasks"]}
        if set(tasks) != set(self.task_files) or not defined <= set(tasks):
            return False  # a task file missing, or one of no task the log records
        for task_id, recorded in tasks.items():
            snapshot = json.loads(self.task_files[task_id].decode())
            if not as_crew_writes(snapshot, "task") or _steady(snapshot) != _steady(recorded):
                return False
        return as_crew_writes(self.run, "manifest")

    def _mail_sound(self, events: list[dict[str, Any]]) -> bool:
        carried: dict[str, list[dict[str, Any]]] = {name: [] for name in BOXES}
        for event in events:
            line = (event.get("data") or {}).get("mailboxMessage")
            if line is not None:
                carried[KIND_BOX[line["kind"]]].append(line)
        # Lines equal to those the events carry are as valid as those, checked already.
        return all(_lines(self.logs[name]) == carried[name] for name in BOXES)

    def _leader_sound(self) -> bool:
        if self.run["status"] in TERMINAL_RUN_STATUSES:
            return True
        stale_after = float(self.run["config"]["crew"]["leaderStaleAfter"])
        return people.lease(self.files, stale_after).state != people.STALE


def _not_the_models_json(data: bytes) -> bool:
    """Whether a file holds JSON that Python's json reads and the models' parser refuses."""
    return _SURROGATE_ESCAPE.search(data) is not None or DIGIT_RUN in data.translate(_DIGITS_ALONE)


def _temp_files(folder: str) -> bool:
    """Whether a folder holds a file named as crew/store/snapshot.py's temp files are (one of a
    write in progress too: the full doctor tells those apart)."""
    try:
        names = os.listdir(folder)
    except (FileNotFoundError, NotADirectoryError):
        return False
    return any(name.startswith(".") and name.endswith(".tmp") for name in names)


def _lines_of(data: bytes) -> list[bytes]:
    """A log's lines: every one whole, none blank (Fallback otherwise)."""
    if not data:
        return []
    if not data.endswith(b"\n"):
        raise Fallback  # a torn tail
    lines = data[:-1].split(b"\n")
    if not all(lines) or any(line.isspace() for line in lines):
        raise Fallback
    return lines


def _lines(data: bytes) -> list[Any]:
    """A log's lines, each parsed as the models parse it: UTF-8 (Python's json would take
    UTF-16 too), no `NaN` (crew writes none), nested no deeper than MOST_DEPTH."""
    lines = []
    for raw in _lines_of(data):
        line = json.loads(raw.decode(), parse_constant=_no_constant)
        if raw.count(b"[") + raw.count(b"{") > MOST_DEPTH and not _shallow(line):
            raise Fallback
        lines.append(line)
    return lines


def _shallow(value: object) -> bool:
    """Whether a parsed line nests no deeper than MOST_DEPTH."""
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MOST_DEPTH:
            return False
        inner = node.values() if isinstance(node, dict) else node if isinstance(node, list) else ()
        stack.extend((child, depth + 1) for child in inner if isinstance(child, dict | list))
    return True


def _carries_run(event: dict[str, Any]) -> bool:
    return (event.get("data") or {}).get("run") is not None


def _event(event: object) -> bool:
    """Whether a line is an event as crew writes it, and any state it carries too."""
    if not isinstance(event, dict) or not as_crew_writes(event, "event"):
        return False
    data = event.get("data") or {}
    for key, kind in CARRIED.items():
        state = data.get(key)
        if state is None:
            continue
        if not (_mail_line(state) if kind is None else as_crew_writes(state, kind)):
            return False
    return True


def _mail_line(line: object) -> bool:
    """Whether a line is a mailbox line as crew writes it: a whole message, or a change."""
    shape = _mail_shape(line)
    return shape is not None and as_crew_writes(line, shape)


def _mail_shape(line: object) -> str | None:
    """The shape of a mailbox line: a whole message, or a change (None: no line of a box)."""
    if not isinstance(line, dict) or line.get("kind") not in KIND_BOX:
        return None
    return "message" if "body" in line else "change"


def _steady(task: dict[str, Any]) -> dict[str, Any]:
    """A task but for the field the leader refreshes without an event."""
    return {key: value for key, value in task.items() if key != VOLATILE}


def _no_constant(name: str) -> object:
    raise ValueError(f"{name} is not JSON the models read")
