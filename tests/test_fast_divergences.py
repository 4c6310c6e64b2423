"""Where the fast path and the full command were found apart: a lease the fast path cannot read
after its commit, a task file gone, task files and a manifest of an older crew's shape, a task
file that is a link, a manifest without `createdAt`. Each case is run both ways on twin copies
of a run, the fast twin as the `crew` command runs it: the fast path, then the full command if
the fast path hands the command over."""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from conftest import SESSION, CliResult
from test_fast import MakeRun, Twins, _alive, _keyed_add, _normal
from test_verbs import ask, start

from crew import clock, fast, verbs
from crew.fast import runfiles
from crew.store.runstore import RunStore

_DEFAULTED = ("waitingFor", "failures", "nudges")  # an older crew's task file had none of them


@pytest.fixture(autouse=True)
def _fresh_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runfiles, "wrote", False)  # each test's command a process of its own


def _as_crew(
    cli: Callable[..., CliResult], capsys: pytest.CaptureFixture[str], twins: Twins, *args: str
) -> tuple[CliResult, CliResult]:
    """The full command on one twin; on the other the fast path, then the full command if the
    fast path handed the command over (what `crew` does: crew/fast `main`)."""
    full = cli(*args, "--home", str(twins.full))
    capsys.readouterr()
    code = fast.fast([*args, "--home", str(twins.fast)])
    out = capsys.readouterr()
    if code is not None:
        return full, CliResult(code, out.out, out.err)
    then = cli(*args, "--home", str(twins.fast))
    return full, CliResult(then.code, out.out + then.out, out.err + then.err)


def _alike(twins: Twins, full: CliResult, quick: CliResult) -> None:
    """The same exit code, output and run files both ways (ids, times and folders aside, and
    the padding of a table's columns, which a time ago of another width changes)."""
    assert quick.code == full.code

    def shown(text: str, home: Path) -> bytes:
        return re.sub(rb" +", b" ", _normal(text.encode(), home))

    assert shown(quick.err, twins.fast) == shown(full.err, twins.full)
    assert shown(quick.out, twins.fast) == shown(full.out, twins.full)
    twins.same_files()  # and the same task files


def _edit(path: Path, edit: Callable[[dict[str, Any]], object]) -> None:
    """A JSON file changed in place, written as crew writes it."""
    document = json.loads(path.read_bytes())
    edit(document)
    path.write_text(json.dumps(document, indent=2, ensure_ascii=False) + "\n")


def _drop_defaults(task: dict[str, Any]) -> None:
    for name in _DEFAULTED:
        task.pop(name, None)


def _older_tasks(store: RunStore) -> None:
    """Every task file of the run as an older crew wrote it."""
    for name in ("plan", "build"):
        _edit(store.paths.root / "tasks" / f"{name}.json", _drop_defaults)


# ------------------------------------------------------------------ a lease unreadable after commit


@pytest.mark.parametrize("lease", ["", "{}", '{"pid": 1, "host": "x", "heartbeatAt": "soon"}'])
@pytest.mark.parametrize(
    "args",
    [
        ("add", "x", "--agent", "coder"),
        ("steer", "plan", "hello"),
        ("follow-up", "plan", "later", "--json"),
        ("nudge", "plan"),
        ("respond", "plan", "Use Postgres"),
    ],
)
def test_a_change_whose_lease_is_unreadable_is_made_once(
    make_run: MakeRun,
    cli: Callable[..., CliResult],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    lease: str,
    args: tuple[str, ...],
) -> None:
    # The fast path read the lease after its commit, then handed over: the change made twice.
    store = make_run()
    if args[0] == "respond":
        ask(store)
    else:
        start(store)
    store.paths.leader.parent.mkdir(exist_ok=True)
    store.paths.leader.write_text(lease)
    twins = Twins(store, tmp_path)

    full, quick = _as_crew(cli, capsys, twins, args[0], twins.run_id, *args[1:])

    assert full.code == 0
    _alike(twins, full, quick)


# ------------------------------------------------------------------------ a task whose file is gone


def test_an_add_under_the_id_of_a_task_whose_file_is_gone_is_refused(
    make_run: MakeRun,
    cli: Callable[..., CliResult],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    # The fast path took the tasks folder for the run's tasks, and added a second `plan`.
    store = make_run()
    start(store)
    (store.paths.root / "tasks" / "plan.json").unlink()
    twins = Twins(store, tmp_path)

    args = ("add", twins.run_id, "x", "--agent", "coder", "--id", "plan")
    full, quick = _as_crew(cli, capsys, twins, *args)

    assert full.code == 4 and "already has a task 'plan'" in full.err
    _alike(twins, full, quick)


# --------------------------------------------------------------------- task files of an older shape


@pytest.mark.parametrize("args", [(), ("build",), ("plan", "--json")])
def test_a_cancel_of_tasks_of_an_older_shape_writes_their_defaults(
    make_run: MakeRun,
    cli: Callable[..., CliResult],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    args: tuple[str, ...],
) -> None:
    # The fast path wrote the task files, and the events' tasks, without the models' defaults.
    store = make_run()
    start(store)
    _older_tasks(store)
    twins = Twins(store, tmp_path)

    full, quick = _as_crew(cli, capsys, twins, "cancel", twins.run_id, *args)

    assert full.code == 0
    _alike(twins, full, quick)


@pytest.mark.parametrize("field", ["waitingFor", "failures"])
def test_an_answer_to_a_task_of_an_older_shape_writes_its_defaults(
    make_run: MakeRun,
    cli: Callable[..., CliResult],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    field: str,
) -> None:
    # The fast path wrote the answered task without the field the full command fills in.
    store = make_run()
    ask(store)
    _edit(store.paths.root / "tasks" / "plan.json", lambda task: task.pop(field))
    twins = Twins(store, tmp_path)

    full, quick = _as_crew(cli, capsys, twins, "respond", twins.run_id, "plan", "Use Postgres")

    assert full.code == 0
    _alike(twins, full, quick)


def test_a_replayed_add_of_a_task_of_an_older_shape_prints_its_defaults(
    make_run: MakeRun,
    cli: Callable[..., CliResult],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    # The fast path printed the keyed task as its file has it, without the models' defaults.
    store = make_run()
    start(store)
    _keyed_add(store)
    _edit(store.paths.root / "tasks" / "coder-1.json", _drop_defaults)
    twins = Twins(store, tmp_path)

    args = ("add", twins.run_id, "x", "--agent", "coder", "--idempotency-key", "k", "--json")
    full, quick = _as_crew(cli, capsys, twins, *args)

    assert full.code == 0 and json.loads(full.out)["task"]["waitingFor"] == []
    _alike(twins, full, quick)


# --------------------------------------------------------------------- a manifest of an older shape


@pytest.mark.parametrize("args", [("handoff", "o@ci"), ("cancel",)])
def test_a_change_to_a_manifest_without_a_defaulted_limit_writes_the_default(
    make_run: MakeRun,
    cli: Callable[..., CliResult],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    args: tuple[str, ...],
) -> None:
    # The fast path copied the config as found; the full command writes it as the models do.
    store = make_run()
    start(store)
    _edit(store.paths.manifest, lambda run: run["config"]["limits"].pop("maxDepth"))
    twins = Twins(store, tmp_path)

    full, quick = _as_crew(cli, capsys, twins, args[0], twins.run_id, *args[1:])

    assert full.code == 0
    _alike(twins, full, quick)
    written = json.loads((twins.fast / "state/runs" / twins.run_id / "manifest.json").read_bytes())
    assert written["config"]["limits"]["maxDepth"] == 3


# ----------------------------------------------------------------------- a task file that is a link


@pytest.mark.parametrize(
    "args",
    [
        ("cancel", "plan"),
        ("status",),
        ("add", "x", "--agent", "coder", "--idempotency-key", "k"),
    ],
)
def test_a_task_file_that_is_a_link_is_refused_naming_the_link(
    make_run: MakeRun,
    cli: Callable[..., CliResult],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    args: tuple[str, ...],
) -> None:
    # The fast path opened the link without following it, and said "Too many levels", exit 1.
    store = make_run()
    start(store)
    task = store.paths.root / "tasks" / "build.json"
    shutil.copy(task, store.paths.root / "build-copy.json")
    task.unlink()
    task.symlink_to("../build-copy.json")
    twins = Twins(store, tmp_path)

    full, quick = _as_crew(cli, capsys, twins, args[0], twins.run_id, *args[1:])

    assert full.code == 4 and "build.json is a symbolic link" in full.err
    assert twins.portable(quick, twins.fast) == twins.portable(full, twins.full)


@pytest.mark.parametrize(
    ("name", "args"),
    [
        ("events.jsonl", ("events",)),
        ("mailbox/steering.jsonl", ("mailbox",)),
        ("mailbox/steering.jsonl", ("status",)),
        ("mailbox/steering.jsonl", ("steer", "plan", "again", "--idempotency-key", "k")),
        ("mailbox/outbox.jsonl", ("mailbox", "--json")),
    ],
)
def test_a_log_or_mailbox_file_that_is_a_link_is_refused_naming_the_link(
    make_run: MakeRun,
    cli: Callable[..., CliResult],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    name: str,
    args: tuple[str, ...],
) -> None:
    # The fast path followed the link (`events`, `mailbox`: exit 0), or its index of pending
    # messages said "Too many levels of symbolic links" (`status`: exit 1).
    store = make_run()
    start(store)
    verbs.steer(store, "plan", "hello", session=SESSION, idempotency_key="k")
    path = store.paths.root / name
    shutil.copy(path, store.paths.root / "copy.jsonl")
    path.unlink()
    path.symlink_to(os.path.relpath(store.paths.root / "copy.jsonl", path.parent))
    twins = Twins(store, tmp_path)

    full, quick = _as_crew(cli, capsys, twins, args[0], twins.run_id, *args[1:])

    assert full.code == 4 and f"{path.name} is a symbolic link" in full.err
    assert twins.portable(quick, twins.fast) == twins.portable(full, twins.full)


# ------------------------------------------------------------ a removal of a run crew did not write


def _ended_run(make_run: MakeRun, edit: Callable[[dict[str, Any]], object]) -> RunStore:
    store = make_run()
    verbs.cancel(store, session=SESSION)
    _edit(store.paths.manifest, edit)
    return store


@pytest.mark.parametrize("command", [("rm", "{run}", "--json"), ("prune", "--keep", "0", "--json")])
def test_a_removal_of_a_run_without_created_at_prints_it_removed(
    make_run: MakeRun,
    cli: Callable[..., CliResult],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    command: tuple[str, ...],
) -> None:
    # The fast path removed the run, then handed over: "No run matches", or `"removed": []`.
    twins = Twins(_ended_run(make_run, lambda run: run.pop("createdAt")), tmp_path)

    full, quick = _as_crew(cli, capsys, twins, *(a.format(run=twins.run_id) for a in command))

    removed = [run["runId"] for run in json.loads(full.out)["removed"]]
    assert full.code == 0 and removed == [twins.run_id]
    assert (quick.code, quick.err) == (full.code, full.err)
    assert _normal(quick.out.encode()) == _normal(full.out.encode())
    assert [list((home / "state/runs").iterdir()) for home in twins.homes()] == [[], []]


@pytest.mark.parametrize("command", [("rm", "{run}"), ("prune", "--keep", "0")])
def test_a_removal_names_the_crew_the_full_command_names(
    make_run: MakeRun,
    cli: Callable[..., CliResult],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    command: tuple[str, ...],
) -> None:
    # The fast path printed the manifest's `crew` (5); the full command the crew's name (test).
    twins = Twins(_ended_run(make_run, lambda run: run.update(crew=5)), tmp_path)
    now = clock.moment() + timedelta(seconds=2)
    monkeypatch.setattr(clock, "moment", lambda: now)  # "ended 2s ago" the same both ways

    full, quick = _as_crew(cli, capsys, twins, *(a.format(run=twins.run_id) for a in command))

    assert full.code == 0 and f"{twins.run_id} (cancelled, crew test, " in full.out
    assert (quick.code, quick.out, quick.err) == (full.code, full.out, full.err)


# ---------------------------------------------------------------- what the reading commands show


@pytest.mark.parametrize(
    ("args", "damage"),
    [
        (("status", "--json"), "tasks"),
        (("status", "--json"), "manifest"),
        (("wait", "--for", "started", "--json"), "tasks"),
    ],
)
def test_a_run_of_an_older_shape_is_shown_with_the_models_defaults(
    make_run: MakeRun,
    cli: Callable[..., CliResult],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    args: tuple[str, ...],
    damage: str,
) -> None:
    # The fast path printed the task files and the manifest as found.
    store = make_run()
    start(store)
    _alive(store)
    if damage == "tasks":
        _older_tasks(store)
    else:
        _edit(store.paths.manifest, lambda run: run["config"]["limits"].pop("maxDepth"))
    twins = Twins(store, tmp_path)

    full, quick = _as_crew(cli, capsys, twins, args[0], twins.run_id, *args[1:])

    assert full.code == 0
    _alike(twins, full, quick)


@pytest.mark.parametrize("args", [(), ("--json",), ("--task", "alpha")])
def test_the_mailbox_lists_added_tasks_in_the_order_they_were_added(
    make_run: MakeRun,
    cli: Callable[..., CliResult],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    args: tuple[str, ...],
) -> None:
    # The fast path ranked only crew.toml's tasks: an added task's messages split by another's.
    store = make_run()
    start(store)
    for task_id in ("zeta", "alpha"):
        verbs.add_task(store, agent="coder", prompt="more", task_id=task_id, session=SESSION)
    for task_id, body in [("zeta", "z1"), ("alpha", "a1"), ("zeta", "z2")]:
        verbs.follow_up(store, task_id, body, session=SESSION)
    twins = Twins(store, tmp_path)

    full, quick = _as_crew(cli, capsys, twins, "mailbox", twins.run_id, *args)

    assert full.code == 0
    _alike(twins, full, quick)


@pytest.mark.parametrize(
    "edit",
    [
        lambda info: info.pop("startedAt"),
        lambda info: info.update(watcher="bogus"),
    ],
    ids=["without startedAt", "a watcher unknown"],
)
@pytest.mark.parametrize(
    "args", [("status",), ("status", "--json"), ("steer", "plan", "x", "--json")]
)
def test_a_lease_the_models_cannot_read_is_stale_both_ways(
    make_run: MakeRun,
    cli: Callable[..., CliResult],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    edit: Callable[[dict[str, Any]], object],
    args: tuple[str, ...],
) -> None:
    # The fast path read the pid, host and heartbeat alone, and called the leader alive.
    now = clock.moment()
    monkeypatch.setattr(clock, "moment", lambda: now)  # "created 2s ago" the same both ways
    store = make_run()
    start(store)
    _alive(store)
    _edit(store.paths.leader, edit)
    twins = Twins(store, tmp_path)

    full, quick = _as_crew(cli, capsys, twins, args[0], twins.run_id, *args[1:])

    _alike(twins, full, quick)


def test_events_leave_out_a_null_field_as_the_full_command_does(
    make_run: MakeRun,
    cli: Callable[..., CliResult],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    # The fast path printed the line as found, its null with it.
    store = make_run()
    lines = store.paths.events.read_bytes().splitlines(keepends=True)
    first = json.loads(lines[0])
    assert "taskId" not in first
    nulled = {key: first[key] for key in ("id", "seq", "runId", "at", "type")}
    nulled.update(taskId=None, **{k: v for k, v in first.items() if k not in nulled})
    null = len(b'"taskId":null,')
    nulled["message"] = first["message"][:-null]  # the log's size as the marker has it
    lines[0] = json.dumps(nulled, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"
    store.paths.events.write_bytes(b"".join(lines))
    twins = Twins(store, tmp_path)

    full, quick = _as_crew(cli, capsys, twins, "events", twins.run_id, "--json")

    assert full.code == 0
    _alike(twins, full, quick)


@pytest.mark.parametrize(
    "change",
    [
        {"endSeq": 0},
        {"runId": "other"},
        {"data": {"y": 1e-7}},
    ],
    ids=["an endSeq of 0", "another run's id", "a float written otherwise"],
)
def test_an_event_the_models_would_skip_or_write_otherwise_is_the_full_commands(
    make_run: MakeRun,
    cli: Callable[..., CliResult],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    change: dict[str, Any],
) -> None:
    # The fast path checked these fields' types alone, and printed the line as it found it.
    store = make_run()
    last = json.loads(store.paths.events.read_bytes().splitlines()[-1])
    added = {**last, "id": "evt_added", "seq": last["seq"] + 1, **change}
    with store.paths.events.open("a") as handle:
        handle.write(json.dumps(added, ensure_ascii=False, separators=(",", ":")) + "\n")
    twins = Twins(store, tmp_path)

    for args in [(), ("--json",)]:
        full, quick = _as_crew(cli, capsys, twins, "events", twins.run_id, *args)
        assert full.code == 0
        _alike(twins, full, quick)


def test_logs_of_a_run_whose_logs_folder_is_a_file_name_what_the_full_command_names(
    make_run: MakeRun,
    cli: Callable[..., CliResult],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    # The fast path's lstat met "Not a directory" and said so of another file.
    store = make_run()
    logs = store.paths.root / "logs"
    shutil.rmtree(logs)
    logs.write_text("")
    twins = Twins(store, tmp_path)

    for args in [(), ("--tail", "1")]:
        full, quick = _as_crew(cli, capsys, twins, "logs", twins.run_id, *args)
        assert full.code == 1
        _alike(twins, full, quick)


def test_a_file_the_fast_path_cannot_read_is_left_to_the_full_command(
    make_run: MakeRun, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An empty steering.jsonl of mode 000 (for a user without root's override): the fast
    # path said "Permission denied", exit 1, where the full command, which needs nothing of
    # an empty file, printed the status.
    store = make_run()
    start(store)
    verbs.steer(store, "plan", "hello", session=SESSION)
    denied = str(store.paths.root / "mailbox" / "steering.jsonl")
    real_open = os.open

    def open_(path: Any, *args: Any, **kwargs: Any) -> int:
        if os.fspath(path) == denied:
            raise PermissionError(13, "Permission denied", denied)
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", open_)

    assert fast.fast(["status", store.run_id, "--home", str(store.paths.home.root)]) is None


# ----------------------------------------------------------- files edited so that no crew wrote them


def _surrogate(document: dict[str, Any], key: str) -> str:
    """The document as JSON text, `key` holding a lone surrogate (which pydantic refuses)."""
    document[key] = "SURROGATE"
    return json.dumps(document, indent=2).replace('"SURROGATE"', '"x\\udcff"') + "\n"


_MANIFEST_EDITS: dict[str, Callable[[dict[str, Any]], object]] = {
    "an epoch below 0": lambda run: run.update(leaderEpoch=-1),
    "an epoch of true": lambda run: run.update(leaderEpoch=True),
    "a time not crew's": lambda run: run.update(createdAt="yesterday"),
    "a time with a newline": lambda run: run.update(createdAt=run["createdAt"] + "\n"),
    "an unknown key": lambda run: run.update(zzz=1),
    "a limit below 0": lambda run: run["config"]["limits"].update(warnPending=-1),
    "an unknown key in the definition": lambda run: run["config"].update(zzz=1),
}
_TASK_EDITS: dict[str, Callable[[dict[str, Any]], object]] = {
    "an attempt of true": lambda task: task.update(attempt=True),
    "an attempt below 0": lambda task: task.update(attempt=-1),
    "a status not crew's": lambda task: task.update(status="bogus"),
    "a time not crew's": lambda task: task.update(startedAt="soon"),
}
_READS = [
    *[("status",), ("status", "--json"), ("runs",), ("runs", "--json")],
    *[("wait", "--for", "started"), ("wait", "--for", "started", "--json")],
]


def _edited(name: str, edit: Callable[[dict[str, Any]], object]) -> Callable[[RunStore], None]:
    return lambda store: _edit(store.paths.root / name, edit)


def _surrogate_in_error(store: RunStore) -> None:
    """The task's `error` holding a lone surrogate: Python's json reads `\\udcff`, pydantic
    takes it for invalid JSON."""
    path = store.paths.root / "tasks" / "plan.json"
    path.write_text(_surrogate(json.loads(path.read_bytes()), "error"))


_DAMAGES: dict[str, Callable[[RunStore], None]] = {
    **{f"manifest.json, {k}": _edited("manifest.json", e) for k, e in _MANIFEST_EDITS.items()},
    **{f"tasks/plan.json, {k}": _edited("tasks/plan.json", e) for k, e in _TASK_EDITS.items()},
    "tasks/plan.json, a lone surrogate": _surrogate_in_error,
}


@pytest.mark.parametrize("args", [*_READS, ("steer", "plan", "hi")])
@pytest.mark.parametrize("damage", _DAMAGES, ids=str)
def test_a_file_edited_so_no_crew_wrote_it_is_the_full_commands(
    make_run: MakeRun,
    cli: Callable[..., CliResult],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    damage: str,
    args: tuple[str, ...],
) -> None:
    # The fast path printed (or went by) the values as found, where the full command warns
    # that the file is unreadable and shows the state the event log says.
    store = make_run()
    start(store)
    _alive(store)  # no warning of a leader gone: the fast path would print the status
    _DAMAGES[damage](store)
    twins = Twins(store, tmp_path)

    run = () if args[0] == "runs" else (twins.run_id,)
    full, quick = _as_crew(cli, capsys, twins, args[0], *run, *args[1:])

    _alike(twins, full, quick)


@pytest.mark.parametrize(
    "args",
    [*_READS, ("mailbox",), ("add", "again", "--agent", "coder"), ("steer", "plan", "hi")],
)
def test_an_added_task_whose_file_was_deleted_is_shown_and_its_id_never_taken_again(
    make_run: MakeRun,
    cli: Callable[..., CliResult],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    args: tuple[str, ...],
) -> None:
    # Nothing but the log names an added task, and the marker said the files were clean: both
    # ways the task was left out as if never added, and `crew add` gave its id to a new task.
    store = make_run()
    start(store)
    _alive(store)
    added = verbs.add_task(store, agent="coder", prompt="more", session=SESSION).task
    (store.paths.root / "tasks" / f"{added.id}.json").unlink()
    twins = Twins(store, tmp_path)
    folder = twins.full / "state" / "runs" / twins.run_id / "tasks"
    before = set(os.listdir(folder))

    run = () if args[0] == "runs" else (twins.run_id,)
    full, quick = _as_crew(cli, capsys, twins, args[0], *run, *args[1:])

    _alike(twins, full, quick)
    assert full.code == 0
    made = set(os.listdir(folder)) - before
    if args[0] == "add":  # a writer rebuilds the file first, then adds under a new id
        assert added.id not in full.out
        assert made == {f"{added.id}.json", f"{added.id[:-1]}2.json"}
    elif args[0] == "steer":  # so does any writer
        assert made == {f"{added.id}.json"}
    else:  # a reader shows the task and says what is wrong
        assert not made
        if args[0] in {"status", "runs"}:
            assert "disagree with events.jsonl" in full.err + full.out
        if args[0] == "status":
            assert added.id in full.out


@pytest.mark.parametrize("args", [("mailbox",), ("mailbox", "--json")])
def test_a_mailbox_line_edited_in_place_so_no_crew_wrote_it_is_the_full_commands(
    make_run: MakeRun,
    cli: Callable[..., CliResult],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    args: tuple[str, ...],
) -> None:
    # Of the same size, so the marker still says the files are clean: the fast path showed
    # the message, which the full command leaves out (its line is not one the models read),
    # saying so as `crew events` says it of a line it skips.
    store = make_run()
    start(store)
    _alive(store)
    verbs.steer(store, "plan", "hello", session=SESSION)
    box = store.paths.root / "mailbox" / "steering.jsonl"
    edited = box.read_bytes().replace(b'"priority":"high"', b'"priority":"High"')
    assert len(edited) == box.stat().st_size and edited != box.read_bytes()
    box.write_bytes(edited)
    twins = Twins(store, tmp_path)

    full, quick = _as_crew(cli, capsys, twins, args[0], twins.run_id, *args[1:])

    assert "hello" not in full.out
    assert f"crew: warning: skipped {box}:1: message.priority: Input should be" in full.err
    _alike(twins, full, quick)


@pytest.mark.parametrize("verb", ["steer", "follow-up", "nudge"])
def test_a_send_under_the_key_a_task_was_added_under_is_refused(
    make_run: MakeRun,
    cli: Callable[..., CliResult],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    verb: str,
) -> None:
    # Keys share one namespace per run: an add under a key a message carries is refused, and
    # a message under a key a task was added under was sent, both ways.
    store = make_run()
    start(store)
    verbs.add_task(store, agent="coder", prompt="more", session=SESSION, idempotency_key="k")
    twins = Twins(store, tmp_path)

    body = () if verb == "nudge" else ("hello",)
    args = (verb, twins.run_id, "plan", *body, "--idempotency-key", "k")
    full, quick = _as_crew(cli, capsys, twins, *args)

    assert full.code == 4
    assert "Idempotency key 'k' was already used to add task coder-" in full.err
    _alike(twins, full, quick)
