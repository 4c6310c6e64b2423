"""`crew doctor` of a sound run without the models (crew/fast/examining.py): a run it calls
sound is one the library's doctor finds nothing wrong with, and every kind of damage that
doctor reports is left to it; what the command prints is the full command's, byte for byte."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import SESSION, CliResult
from test_fast import Twins, typer_free
from test_verbs import ask, start

from crew import verbs
from crew.doctor import doctor as library_doctor
from crew.domain import change, lease, tasks
from crew.fast import examining, fast, runfiles
from crew.paths import Home
from crew.registry import Box
from crew.store import marker
from crew.store.runstore import RunStore

MakeRun = Callable[..., RunStore]


def _sound(store: RunStore) -> bool:
    return examining.sound(runfiles.RunFiles(str(store.paths.home.root), store.run_id))


def _findings(store: RunStore) -> list[str]:
    report = library_doctor(store.paths.home, store.run_id)
    return [f.problem for f in report.findings]


def _talked(store: RunStore) -> None:
    """A run that has been talked to: a steer, a follow-up, an answered question, a nudge."""
    ask(store)
    verbs.respond(store, "plan", "sqlite", session=SESSION)
    verbs.steer(store, "plan", "smaller steps", session=SESSION)
    verbs.follow_up(store, "plan", "then the tests", session=SESSION)
    verbs.nudge(store, "plan", session=SESSION)


def _checkpointed(store: RunStore) -> None:
    start(store)
    _save_checkpoint(store)


def _save_checkpoint(store: RunStore) -> None:
    with change(store) as txn:
        tasks.checkpoint(txn, "plan", {"step": 2})


def _added(store: RunStore) -> None:
    verbs.add_task(store, agent="coder", prompt="more work", session=SESSION)


def _output_refreshed(store: RunStore) -> None:
    """The leader refreshes a task's lastOutputAt in its file without an event."""
    start(store)
    with change(store) as txn:
        txn.refresh("plan", last_output_at="2026-12-04T10:00:00.000000Z")


def _cancelled(store: RunStore) -> None:
    start(store)
    verbs.cancel(store, session=SESSION)


def _led(store: RunStore) -> None:
    """A run whose leader is alive (this process, beating now)."""
    start(store)
    lease.write_lease(store.paths, lease.new_lease(SESSION, 0))


SOUND: dict[str, Callable[[RunStore], None]] = {
    "just created": lambda store: None,
    "talked to": _talked,
    "checkpointed": _checkpointed,
    "a task added": _added,
    "output refreshed": _output_refreshed,
    "cancelled": _cancelled,
    "led": _led,
}


@pytest.mark.parametrize("scene", SOUND)
def test_a_sound_run_is_told_sound_and_printed_as_the_full_command_prints_it(
    make_run: MakeRun,
    cli: Callable[..., CliResult],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    scene: str,
) -> None:
    store = make_run()
    SOUND[scene](store)
    assert _findings(store) == []
    assert _sound(store)
    twins = Twins(store, tmp_path)
    for args in [(), ("--json",), ("-q",), (twins.run_id,), (twins.run_id[:10], "--json")]:
        full, quick = twins.both(cli, capsys, "doctor", *args)
        assert twins.portable(quick, twins.fast) == twins.portable(full, twins.full)
        assert quick.code == 0


def _remarked(store: RunStore) -> None:
    """The marker written again to describe the files as they are (damage a writer made before
    it wrote the marker): the examination cannot lean on the sizes."""
    applied = marker.read(store.paths)
    assert applied is not None
    marker.write(
        store.paths, marker.measured(store.paths, applied.seq, applied, applied.tasks or 0)
    )


def _append(path: Path, data: bytes) -> None:
    with path.open("ab") as handle:
        handle.write(data)


def _event_lines(store: RunStore) -> list[bytes]:
    return store.paths.events.read_bytes().splitlines(keepends=True)


def _edited_event(store: RunStore, index: int, edit: Callable[[dict[str, object]], None]) -> None:
    lines = _event_lines(store)
    event = json.loads(lines[index])
    edit(event)
    lines[index] = json.dumps(event, separators=(",", ":")).encode() + b"\n"
    store.paths.events.write_bytes(b"".join(lines))


def _edited_json(path: Path, **changes: object) -> None:
    document = json.loads(path.read_text())
    document.update(changes)
    path.write_text(json.dumps(document, separators=(",", ":")))


def _steered(store: RunStore) -> None:
    start(store)
    verbs.steer(store, "plan", "sent", session=SESSION)


def _bad_carried_task(store: RunStore) -> None:
    _edited_event(store, -1, lambda e: e["data"].update(task={"id": "plan"}))  # type: ignore[union-attr]


def _bad_carried_checkpoint(store: RunStore) -> None:
    """An invalid checkpoint: no file holds what the log carries, so only the line tells."""
    _save_checkpoint(store)
    _edited_event(store, -1, lambda e: e["data"].update(checkpoint={"taskId": "plan"}))  # type: ignore[union-attr]


def _log_cut_back(store: RunStore) -> None:
    """The last event gone (one that carries a checkpoint: no snapshot shows it), the marker
    still at it: the snapshots reflect more history than the log holds."""
    _save_checkpoint(store)
    store.paths.events.write_bytes(b"".join(_event_lines(store)[:-1]))


def _lone_surrogate(store: RunStore) -> None:
    """Python's json reads it; the models take it for invalid JSON."""
    _edited_event(store, -1, lambda e: e["data"].update(note="\udcff"))  # type: ignore[union-attr]


def _utf16_line(store: RunStore) -> None:
    """The line crew wrote, encoded as UTF-16 (which Python's json reads from bytes)."""
    steering = store.paths.box(Box.STEERING)
    line = steering.read_bytes().rstrip(b"\n")
    steering.write_bytes(line.decode().encode("utf-16") + b"\n")


def _deeply_nested(depth: int) -> Callable[[RunStore], None]:
    """Python's json reads a line nested 250 deep; the models refuse one 200 deep."""

    def nest(store: RunStore) -> None:
        lines = _event_lines(store)
        note = b',"note":' + b"[" * depth + b"]" * depth + b"}}\n"
        lines[-1] = lines[-1].rstrip(b"\n")[:-2] + note
        store.paths.events.write_bytes(b"".join(lines))

    return nest


def _long_number(store: RunStore) -> None:
    """1.0 spelled with 4,300 zeros: Python's json reads it, the models' parser says "number
    out of range"."""
    lines = _event_lines(store)
    lines[-1] = lines[-1].rstrip(b"\n")[:-2] + b',"note":1' + b"0" * 4300 + b"e-4300}}\n"
    store.paths.events.write_bytes(b"".join(lines))


def _long_number_in_the_manifest(store: RunStore) -> None:
    """The same, in manifest.json alone: the document equals the log's, the models refuse it."""
    raw = store.paths.manifest.read_bytes()
    assert b'"cpus": 1.0' in raw
    store.paths.manifest.write_bytes(
        raw.replace(b'"cpus": 1.0', b'"cpus": 1' + b"0" * 4300 + b"e-4300")
    )


def _defined_task_unrecorded(store: RunStore) -> None:
    """A task of crew.toml that no event records and no file holds."""
    queued = next(
        i
        for i, line in enumerate(_event_lines(store))
        if json.loads(line)["type"] == "task.queued" and json.loads(line)["taskId"] == "build"
    )
    _edited_event(store, queued, lambda e: e["data"].pop("task"))  # type: ignore[union-attr]
    store.paths.task_file("build").unlink()
    applied = marker.read(store.paths)
    assert applied is not None
    marker.write(store.paths, marker.measured(store.paths, applied.seq, applied, 1))


def _earlier_run_record_invalid(store: RunStore) -> None:
    """The first of two run records edited (a git workspace without its repo), the manifest
    and the last record as they were."""
    verbs.cancel(store, session=SESSION)
    lines = _event_lines(store)
    first = next(i for i, line in enumerate(lines) if (json.loads(line)["data"] or {}).get("run"))
    _edited_event(store, first, lambda e: e["data"]["run"]["config"]["ray"].update(workspace="git"))  # type: ignore[index]


def _cut(store: RunStore) -> None:
    _edited_event(store, -1, lambda e: e.update(endSeq=int(e["seq"]) + 1))  # type: ignore[call-overload]


def _seq_twice(store: RunStore) -> None:
    _append(store.paths.events, _event_lines(store)[-1])


def _seq_lost(store: RunStore) -> None:
    lines = _event_lines(store)
    store.paths.events.write_bytes(b"".join(lines[:1] + lines[2:]))


def _history_emptied(store: RunStore) -> None:
    store.paths.events.write_bytes(b"")


def _mail_line_lost(store: RunStore) -> None:
    store.paths.box(Box.STEERING).write_bytes(b"")


def _mail_line_planted(store: RunStore) -> None:
    (sent,) = store.messages(Box.STEERING)
    line = {**sent.to_dict(), "id": "msg_00000000000000aa", "body": "planted"}
    _append(store.paths.box(Box.STEERING), json.dumps(line).encode() + b"\n")


def _mail_line_moved(store: RunStore) -> None:
    steering = store.paths.box(Box.STEERING)
    _append(store.paths.box(Box.INBOX), steering.read_bytes())
    steering.write_bytes(b"")


def _mailbox_gone(store: RunStore) -> None:
    shutil.rmtree(store.paths.mailbox_dir)


def _task_changed(store: RunStore) -> None:
    _edited_json(store.paths.task_file("plan"), status="completed")


def _task_gone(store: RunStore) -> None:
    store.paths.task_file("build").unlink()


def _task_planted(store: RunStore) -> None:
    shutil.copy(store.paths.task_file("build"), store.paths.task_file("extra"))


def _manifest_changed(store: RunStore) -> None:
    _edited_json(store.paths.manifest, status="completed")


def _manifest_gone(store: RunStore) -> None:
    store.paths.manifest.unlink()


def _manifest_torn(store: RunStore) -> None:
    store.paths.manifest.write_text('{"runId": ')


def _leader_gone(store: RunStore) -> None:
    gone = lease.new_lease(SESSION, 0).model_copy(update={"pid": 2**22 + 12345})
    lease.write_lease(store.paths, gone)


def _temp_file(folder: str) -> Callable[[RunStore], None]:
    def plant(store: RunStore) -> None:
        where = store.paths.root / folder
        where.mkdir(parents=True, exist_ok=True)
        (where / f".x.json.{2**22 + 12345}.0a1b2c3d.tmp").write_text("{")

    return plant


#: Damage the library's doctor reports, each made to a run that a steer was sent in: a name,
#: the damage, and whether the marker is written again after it.
DAMAGED: dict[str, tuple[Callable[[RunStore], None], bool]] = {
    "an event that is no JSON": (lambda s: _append(s.paths.events, b"not json\n"), True),
    "an event of no known shape": (lambda s: _append(s.paths.events, b"{}\n"), True),
    "an event carrying an invalid task": (_bad_carried_task, True),
    "a torn tail": (lambda s: _append(s.paths.events, b'{"id": "evt_'), False),
    "an event carrying an invalid checkpoint": (_bad_carried_checkpoint, True),
    "the log cut back": (_log_cut_back, True),
    "a lone surrogate in an event": (_lone_surrogate, True),
    "an event nested 250 deep": (_deeply_nested(250), True),
    "an event nested 100,000 deep": (_deeply_nested(100_000), True),
    "a number of 4,300 digits in an event": (_long_number, True),
    "a number of 4,300 digits in the manifest": (_long_number_in_the_manifest, False),
    "a defined task no event records, and no file": (_defined_task_unrecorded, False),
    "an earlier run record edited": (_earlier_run_record_invalid, True),
    "a mailbox line in UTF-16": (_utf16_line, True),
    "a transaction cut short": (_cut, True),
    "a seq twice": (_seq_twice, True),
    "the history emptied": (_history_emptied, False),
    "a mailbox line lost": (_mail_line_lost, True),
    "a mailbox line planted": (_mail_line_planted, True),
    "a mailbox line in the wrong file": (_mail_line_moved, True),
    "the mailbox folder gone": (_mailbox_gone, False),
    "a torn mailbox line": (lambda s: _append(s.paths.box(Box.INBOX), b'{"id": "m'), False),
    "a task file edited": (_task_changed, False),
    "a task file gone": (_task_gone, False),
    "a task file planted": (_task_planted, False),
    "the manifest edited": (_manifest_changed, False),
    "the manifest gone": (_manifest_gone, False),
    "the manifest torn": (_manifest_torn, False),
    "the leader gone": (_leader_gone, False),
    **{
        f"a temp file in {folder or 'the run folder'}": (_temp_file(folder), False)
        for folder in examining.TEMP_FOLDERS
    },
}


@pytest.mark.parametrize("damage", DAMAGED)
def test_a_damaged_run_is_the_library_doctors_to_report(
    make_run: MakeRun,
    cli: Callable[..., CliResult],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    damage: str,
) -> None:
    store = make_run()
    _steered(store)
    hurt, remark = DAMAGED[damage]
    hurt(store)
    if remark:
        _remarked(store)
    assert _findings(store), "no damage the doctor reports"
    assert not _sound(store)
    twins = Twins(store, tmp_path)
    for args in [(), ("--json",)]:
        full, quick = twins.both(cli, capsys, "doctor", *args)
        assert twins.portable(quick, twins.fast) == twins.portable(full, twins.full)
        assert quick.code == 1


def test_one_damaged_run_of_a_home_is_the_library_doctors_to_report(
    make_run: MakeRun, cli: Callable[..., CliResult], capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:  # fmt: skip
    make_run()
    damaged = make_run()
    _manifest_torn(damaged)
    twins = Twins(damaged, tmp_path)

    full, quick = twins.both(cli, capsys, "doctor")

    assert twins.portable(quick, twins.fast) == twins.portable(full, twins.full)
    assert quick.code == 1 and "Checked 2 runs: 1 problem(s)." in quick.out


def test_a_half_created_run_is_the_library_doctors_to_report(
    make_run: MakeRun, home: Home, cli: Callable[..., CliResult],
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    make_run()
    (home.runs_dir / ".new-20261130-034100-7f3a").mkdir()
    code = fast(["doctor", "--home", str(home.root)])
    quick = capsys.readouterr()
    full = cli("doctor", "--home", str(home.root))
    assert (code, quick.out) == (full.code, full.out) == (1, full.out)
    assert "a run whose creation was interrupted" in quick.out


def test_a_run_too_big_to_read_without_the_models_is_theirs(
    make_run: MakeRun, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = make_run()
    _talked(store)
    assert _sound(store)
    monkeypatch.setattr(examining, "MOST_BYTES", store.paths.events.stat().st_size - 1)
    assert not _sound(store)


def _other_boot(store: RunStore) -> None:
    applied = marker.read(store.paths)
    assert applied is not None
    marker.write(store.paths, dataclasses.replace(applied, boot="0" * 36))


def _blank_line(store: RunStore) -> None:
    _append(store.paths.box(Box.STEERING), b"\n")
    _remarked(store)


#: Runs the library's doctor finds nothing wrong with, that the standard library cannot tell
#: sound: the doctor examines them.
UNCERTAIN: dict[str, Callable[[RunStore], None]] = {
    "a marker of another boot": _other_boot,
    "a seq lost": lambda store: (_seq_lost(store), _remarked(store)),  # not a doctor's finding
    "a field the models ignore": lambda store: _edited_json(store.paths.manifest, extra=1),
    "a blank line": _blank_line,
}


@pytest.mark.parametrize("case", UNCERTAIN)
def test_a_run_not_plainly_sound_is_the_library_doctors(
    make_run: MakeRun, cli: Callable[..., CliResult], capsys: pytest.CaptureFixture[str],
    tmp_path: Path, case: str,
) -> None:  # fmt: skip
    store = make_run()
    _steered(store)
    UNCERTAIN[case](store)
    assert _findings(store) == []
    assert not _sound(store)
    twins = Twins(store, tmp_path)
    full, quick = twins.both(cli, capsys, "doctor")
    assert twins.portable(quick, twins.fast) == twins.portable(full, twins.full)
    assert quick.code == 0


def test_doctor_of_a_sound_run_imports_no_pydantic(make_run: MakeRun) -> None:
    store = make_run()
    _talked(store)
    home = ["--home", str(store.paths.home.root)]
    assert typer_free(["doctor", *home], heavy=("pydantic", "typer", "filelock")) == (0, [])
    _manifest_torn(store)
    assert typer_free(["doctor", *home], heavy=("pydantic",)) == (1, ["pydantic"])


def test_doctor_of_a_sound_run_in_a_fresh_process(make_run: MakeRun) -> None:
    store = make_run()
    _talked(store)
    env = {**os.environ, "CREW_HOME": str(store.paths.home.root)}
    done = subprocess.run(
        [sys.executable, "-m", "crew", "doctor", store.run_id],
        capture_output=True, text=True, env=env, check=False,
    )  # fmt: skip
    assert (done.returncode, done.stdout, done.stderr) == (
        0,
        "Checked 1 run: no problems found.\n",
        "",
    )


def test_the_constants_are_those_of_the_definitions_they_mirror(make_run: MakeRun) -> None:
    from crew import models, registry
    from crew.paths import STAGING_PREFIX
    from crew.store import jsonl, state

    assert {k.value: k.box.value for k in registry.MessageKind} == examining.KIND_BOX
    assert set(examining.CARRIED) == {str(key) for key in models._CARRIED}
    assert {examining.VOLATILE} == {
        models.Task.model_fields[name].alias for name in state.VOLATILE_TASK_FIELDS
    }
    assert (runfiles.STAGING_PREFIX, runfiles.CORRUPT_SUFFIX) == (
        STAGING_PREFIX,
        jsonl.CORRUPT_SUFFIX,
    )
    store = make_run()
    folders = {Path(store.paths.root, f) for f in examining.TEMP_FOLDERS}
    assert folders == set(store.temp_folders())
