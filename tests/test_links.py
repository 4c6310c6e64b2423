"""No symbolic link inside a run is followed, and a state folder others may write to is refused.

A run folder can arrive by `git pull`, and git stores links: each test plants a link where a
run's file or folder should be, pointing at a file outside the run, and checks that crew refuses
naming the link, and leaves what it points to untouched.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import CliResult

from crew import fast
from crew.fast import runfiles
from crew.paths import RunPaths
from crew.registry import Box
from crew.store.runstore import RunStore

Cli = Callable[..., CliResult]
MakeRun = Callable[..., RunStore]

#: Where a planted link points: a file of the user's that crew must never write.
PRECIOUS = b"the user's own file\n"


def _plant(link: Path, tmp_path: Path) -> Path:
    """Replace `link` (a file or a folder of the run) by a link to a file outside the run."""
    target = tmp_path / "precious"
    if link.is_dir():
        target.mkdir()
        (target / "inbox.jsonl").write_bytes(PRECIOUS)
    else:
        target.write_bytes(PRECIOUS)
        link.unlink(missing_ok=True)
    if link.is_dir():
        link.rename(tmp_path / "moved-away")
    link.symlink_to(target)
    return target


@pytest.mark.parametrize(
    "where",
    [
        lambda p: p.events,
        lambda p: p.box(Box.INBOX),
        lambda p: p.lock,
        lambda p: p.applied,
        lambda p: p.task_file("plan"),
        lambda p: p.mailbox_dir,
        lambda p: p.tasks_dir,
    ],
    ids=["events", "inbox", "lock", "applied marker", "snapshot", "mailbox folder", "tasks"],
)
def test_a_link_in_a_run_is_refused_naming_it_and_its_target_is_untouched(
    cli: Cli, make_run: MakeRun, tmp_path: Path, where: Callable[[RunPaths], Path]
) -> None:
    store = make_run()
    store.paths.runtime_dir.mkdir(exist_ok=True)
    link = where(store.paths)
    target = _plant(link, tmp_path)

    sent = cli("follow-up", store.run_id, "plan", "more work")

    assert sent.code == 4, sent
    assert sent.err.startswith(f"crew: error: {link} is a symbolic link, and crew never follows")
    written = target / "inbox.jsonl" if target.is_dir() else target
    assert written.read_bytes() == PRECIOUS


def test_a_task_log_that_is_a_link_is_not_shown(
    cli: Cli, make_run: MakeRun, tmp_path: Path
) -> None:
    store = make_run()
    store.paths.logs_dir.mkdir(exist_ok=True)
    _plant(store.paths.log("plan"), tmp_path)

    shown = cli("logs", store.run_id, "plan")

    assert shown.code == 4 and shown.out == ""
    assert f"{store.paths.log('plan')} is a symbolic link" in shown.err


@pytest.mark.parametrize("folder", ["state", "state/runs"])
def test_a_state_folder_others_may_write_is_refused_with_the_fix(
    cli: Cli, make_run: MakeRun, folder: str
) -> None:
    store = make_run()
    shared = store.paths.home.root / folder
    shared.chmod(0o777)

    shown = cli("status", store.run_id)

    assert shown.code == 4 and shown.out == ""
    assert shown.err.startswith(f"crew: error: {shared} can be written by other users (mode 0777)")
    assert f"`chmod go-w {shared}`" in shown.err
    shared.chmod(0o755)
    assert cli("status", store.run_id).code == 0


def test_a_state_folder_kept_elsewhere_by_a_link_is_judged_by_where_it_leads(
    cli: Cli, make_run: MakeRun, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A link's own mode is 0777: crew refused every state folder kept on another disk, saying
    # it could be written by others, with a `chmod` that changes the target and cannot help.
    monkeypatch.setattr(runfiles, "wrote", False)
    store = make_run()
    state = store.paths.home.state_dir
    elsewhere = tmp_path / "other-disk"
    state.rename(elsewhere)
    state.symlink_to(elsewhere, target_is_directory=True)

    assert cli("status", store.run_id).code == 0
    assert cli("follow-up", store.run_id, "plan", "more work").code == 0
    assert (
        "more work" in (elsewhere / "runs" / store.run_id / "mailbox" / "inbox.jsonl").read_text()
    )
    assert cli("doctor").code == 0
    home = str(store.paths.home.root)  # and the fast path takes the commands, not the full one
    assert fast.fast(["status", store.run_id, "--home", home]) == 0
    assert fast.fast(["follow-up", store.run_id, "plan", "and more", "--home", home]) == 0

    elsewhere.chmod(0o777)
    shown = cli("status", store.run_id)
    assert shown.code == 4 and shown.out == ""
    assert shown.err.startswith(f"crew: error: {state} can be written by other users (mode 0777)")


def test_doctor_reports_a_run_with_a_link_and_checks_the_others(
    cli: Cli, make_run: MakeRun, tmp_path: Path
) -> None:
    linked, other = make_run(), make_run()
    _plant(linked.paths.events, tmp_path)
    with other.paths.events.open("ab") as log:
        log.write(b"junk\n")

    found = cli("doctor")

    assert found.code == 1
    assert f"{linked.paths.events} is a symbolic link" in found.out
    assert f"{other.paths.events}:" in found.out


def test_doctor_reports_a_run_it_cannot_read_and_checks_the_others(
    cli: Cli, make_run: MakeRun
) -> None:
    unreadable, other = make_run(), make_run()
    unreadable.paths.events.unlink()
    unreadable.paths.events.mkdir()  # a folder where the log should be
    with other.paths.events.open("ab") as log:
        log.write(b"junk\n")

    for repair in ((), ("--repair",)):
        found = cli("doctor", *repair)

        assert found.code == 1, found.err
        assert f"Is a directory: {unreadable.paths.events}." in found.out
        assert f"{other.paths.events}:" in found.out
        assert "Checked 2 runs" in found.out
    assert unreadable.paths.events.is_dir()
