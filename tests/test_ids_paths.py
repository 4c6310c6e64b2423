"""Ids are validated before they reach a path; homes and runs are found as documented."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crew import ids
from crew.errors import NotFound, UsageError
from crew.fast import runfiles
from crew.fast.cmdline import Fallback
from crew.paths import Home, find_home, home_option

HOSTILE = ["../x", "/etc/passwd", "a/../../b", "", "a" * 65, "..", ".", "a/b", "A", "x\x00y", "a\n"]


@pytest.mark.parametrize("value", HOSTILE)
def test_hostile_task_ids_are_refused(value: str) -> None:
    with pytest.raises(UsageError, match="Invalid task id"):
        ids.check_task_id(value)


@pytest.mark.parametrize("value", [v for v in HOSTILE if v not in {"A"}])
def test_hostile_run_ids_are_refused_before_any_path_is_built(value: str, home: Home) -> None:
    with pytest.raises(UsageError, match="Invalid run id"):
        home.resolve_run(value)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=80))
def test_an_accepted_task_id_is_always_a_plain_file_name(value: str) -> None:
    try:
        accepted = ids.check_task_id(value)
    except UsageError:
        return
    assert set(accepted) <= set("abcdefghijklmnopqrstuvwxyz0123456789_.-")
    assert accepted not in {".", ".."} and 1 <= len(accepted) <= 64
    assert Path(accepted).name == accepted


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=80))
def test_an_accepted_run_reference_never_leaves_the_runs_folder(value: str) -> None:
    try:
        ids.check_run_ref(value)
    except UsageError:
        return
    assert value == "latest" or set(value) <= set("0123456789abcdef-")


def test_new_run_ids_are_valid_and_time_sortable() -> None:
    from datetime import UTC, datetime

    early = ids.new_run_id(datetime(2026, 11, 30, 3, 41, 0, tzinfo=UTC))
    late = ids.new_run_id(datetime(2026, 11, 30, 3, 41, 1, tzinfo=UTC))

    assert re.match(r"^20261130-034100-[0-9a-f]{4}$", early)
    assert ids.is_run_id(early) and early < late


def test_message_event_and_contact_ids_have_their_prefixes() -> None:
    assert ids.new_message_id().startswith("msg_")
    assert ids.new_event_id().startswith("evt_")
    assert ids.new_contact_id().startswith("q_")
    assert len({ids.new_message_id() for _ in range(1000)}) == 1000


def test_runs_resolve_by_latest_full_id_and_unique_prefix(home: Home) -> None:
    for run_id in ("20261130-034100-aaaa", "20261130-034100-bbbb", "20261130-034200-cccc"):
        (home.runs_dir / run_id).mkdir(parents=True)
    (home.runs_dir / ".new-20261130-050000-dddd").mkdir()  # a run being created: not listed
    arabic = "".join(chr(0x0660 + int(d)) for d in "20261204")  # `\d` matches these digits too
    (home.runs_dir / f"{arabic}-210914-65ac").mkdir()  # no run crew made: never `latest`

    assert home.run_ids() == runfiles.run_ids(str(home.root)) == [
        "20261130-034100-aaaa", "20261130-034100-bbbb", "20261130-034200-cccc",
    ]  # fmt: skip
    assert home.resolve_run("latest").run_id == "20261130-034200-cccc"
    assert home.resolve_run("20261130-034100-bbbb").run_id == "20261130-034100-bbbb"
    assert home.resolve_run("20261130-034100-a").run_id == "20261130-034100-aaaa"
    assert home.resolve_run("20261130-0342").run_id == "20261130-034200-cccc"
    with pytest.raises(UsageError, match="ambiguous: it matches 2 runs"):
        home.resolve_run("20261130-0341")
    with pytest.raises(NotFound, match="No run matches"):
        home.resolve_run("1999")


def test_latest_in_an_empty_home_is_not_found(home: Home) -> None:
    with pytest.raises(NotFound, match="No runs in"):
        home.resolve_run("latest")


def test_the_home_is_found_by_walking_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CREW_HOME")
    nested = tmp_path / "a" / "b"
    nested.mkdir(parents=True)

    assert find_home(nested).root == (tmp_path / ".crew").resolve()


def test_crew_home_and_the_home_option_name_a_home_directly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = tmp_path / "elsewhere"
    other.mkdir()
    monkeypatch.setenv("CREW_HOME", str(other))

    assert find_home().root == other.resolve()
    assert find_home(explicit=tmp_path / ".crew").root == (tmp_path / ".crew").resolve()
    with pytest.raises(NotFound, match=r"No crew home at .*missing \(from --home\)"):
        find_home(explicit=tmp_path / "missing")


def test_no_home_anywhere_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CREW_HOME")
    bare = tmp_path / "bare"
    bare.mkdir()
    (tmp_path / ".crew").rmdir()

    with pytest.raises(NotFound, match=r"No \.crew folder here or in any parent") as raised:
        find_home(bare)
    assert raised.value.hint == "Create one with `crew init`, or name one with --home or CREW_HOME."


def test_no_home_points_at_a_folder_beside_that_keeps_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`crew run .crew-example/crew.toml` kept its runs beside its crew.toml: a later `crew
    status` from the same folder is told where they are."""
    monkeypatch.delenv("CREW_HOME")
    (tmp_path / ".crew").rmdir()
    (tmp_path / ".crew-example" / "state" / "runs").mkdir(parents=True)
    (tmp_path / "my crew" / "state" / "runs").mkdir(parents=True)
    (tmp_path / "src").mkdir()  # holds no runs: not named

    with pytest.raises(NotFound) as raised:
        find_home(tmp_path)

    assert raised.value.hint == (
        "This folder keeps runs in .crew-example, my crew: add --home .crew-example or "
        "--home 'my crew'; or create a home with `crew init`."
    )


def test_home_option_is_what_a_command_typed_here_needs_to_reach_a_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CREW_HOME")
    monkeypatch.chdir(tmp_path)
    beside = tmp_path / "example"
    beside.mkdir()

    assert home_option(Home(tmp_path / ".crew")) == ""  # found from here anyway
    assert home_option(Home(beside)) == "--home example"
    monkeypatch.chdir(beside)  # the .crew above is found here, and is not `beside`
    assert home_option(Home(beside)) == "--home ."
    (tmp_path / "src").mkdir()
    monkeypatch.chdir(tmp_path / "src")  # not below the home: its whole path
    assert home_option(Home(beside)) == f"--home {beside.resolve()}"
    monkeypatch.setenv("CREW_HOME", str(beside))
    assert home_option(Home(beside)) == ""


def test_a_folder_the_fast_path_may_not_look_into_is_the_full_commands(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `Path.is_dir` raises there (the full command names the folder); `os.path.isdir` said no,
    # and the fast path went on to a home further up (the fixtures' tmp_path/.crew).
    shut = tmp_path / "shut"
    shut.mkdir()
    monkeypatch.chdir(shut)
    monkeypatch.delenv("CREW_HOME", raising=False)
    real_stat = os.stat

    def stat(path: str, *args: object, **kwargs: object) -> os.stat_result:
        if str(path).startswith(str(shut)):
            raise PermissionError(13, "Permission denied", str(path))
        return real_stat(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "stat", stat)
    with pytest.raises(Fallback):
        runfiles.find_home(None)
