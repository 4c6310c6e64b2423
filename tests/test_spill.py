"""What the leader keeps on disk (crew/store/spill.py): when SQLite cannot write to its folder
(the disk full), the database moves into memory, whole; nothing is lost, every lookup answers
as if it had been written, and nothing is tried again and again."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from crew.store import spill as spill_module
from crew.store.spill import Name, Rounds, Spill, Spilled, SpillLost


def _full(db: sqlite3.Connection) -> None:
    """No room for one more page, as on a full disk (SQLite raises SQLITE_FULL)."""
    pages = db.execute("PRAGMA page_count").fetchone()[0]
    db.execute(f"PRAGMA max_page_count = {pages}")


def test_a_spill_that_cannot_write_moves_into_memory_and_loses_nothing() -> None:
    spill = Spill()
    spill.put("msg_first", Spilled(0, "plan", [0]), first=True)
    spill.name(Name.KEY, "k0", "msg_first")
    spill.flush()
    _full(spill._db.connection)
    for n in range(1, 400):  # more than a page
        spill.put(f"msg_{n:04d}", Spilled(n * 100, "plan", [n * 100, n * 100 + 40]), first=True)
        spill.name(Name.KEY, f"k{n}", f"msg_{n:04d}")
    assert not spill._db.in_memory

    spill.flush()  # cannot be written to the disk: moved

    assert spill._db.in_memory and "full" in (spill._db.error or "")
    assert not spill._rows  # written, in memory
    assert spill.get("msg_0007") == Spilled(700, "plan", [700, 740])
    assert spill.get("msg_first") == Spilled(0, "plan", [0])  # what was on the disk came along
    assert (spill.named(Name.KEY, "k0"), spill.named(Name.KEY, "k399")) == ("msg_first", "msg_0399")
    assert [i for _, i in spill.of_task("plan")] == ["msg_first"] + [
        f"msg_{n:04d}" for n in range(1, 400)
    ]
    spill.drop("msg_0007")
    assert len(spill) == 399 and spill.get("msg_0007") is None
    spill.clear()
    assert len(spill) == 0


def test_rounds_that_cannot_be_written_move_into_memory_once() -> None:
    rounds = Rounds()
    _full(rounds._db.connection)
    moves = 0
    real = rounds._db._move

    def counted(error: Exception) -> None:
        nonlocal moves
        moves += 1
        real(error)

    rounds._db._move = counted  # type: ignore[method-assign]
    for n in range(Rounds.BATCH * 8):
        rounds.raise_to(f"msg_{n:04d}", n % 3)
    assert moves == 1 and rounds._db.in_memory and not rounds._held
    assert [rounds.get(f"msg_{n:04d}", -1) for n in range(6)] == [0, 1, 2, 0, 1, 2]
    rounds.raise_to("msg_0001", 0)  # never lowered
    assert rounds.get("msg_0001", -1) == 1
    rounds.raise_to("msg_0001", 5)
    assert rounds.get("msg_0001", -1) == 5 and rounds.get("msg_none", -1) == -1


def test_a_query_that_needs_the_disk_moves_into_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    spill = Spill()
    for n in range(10):
        spill.put(f"msg_{n}", Spilled(n, "plan", [n]), first=True)
    spill.flush()

    class Full:
        """A connection whose every query finds the disk full (a sort too big for the cache)."""

        def __init__(self, real: sqlite3.Connection) -> None:
            self.real = real

        def execute(self, *args: object) -> sqlite3.Cursor:
            raise sqlite3.OperationalError("database or disk is full")

        def __getattr__(self, name: str) -> object:
            return getattr(self.real, name)

    spill._db.connection = Full(spill._db.connection)  # type: ignore[assignment]
    assert [i for _, i in spill.places()] == [f"msg_{n}" for n in range(10)]
    assert spill._db.in_memory


def test_no_room_even_for_the_tables_starts_in_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    real = spill_module._connect

    def connect(name: str, schema: str) -> sqlite3.Connection:
        if name == "":
            raise sqlite3.OperationalError("unable to open database file")
        return real(name, schema)

    monkeypatch.setattr(spill_module, "_connect", connect)
    spill = Spill()
    spill.put("msg_a", Spilled(0, "plan", [0]), first=True)
    assert spill._db.in_memory and [i for _, i in spill.places()] == ["msg_a"]


def test_a_database_sqlite_cannot_read_back_is_lost_and_names_the_folder_to_free(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("SQLITE_TMPDIR", str(tmp_path))
    spill = Spill()

    class Broken:
        """A write cut short while the cache spilled: SQLite reads nothing back after it."""

        def __init__(self, real: sqlite3.Connection) -> None:
            self.real = real

        def executemany(self, *args: object) -> sqlite3.Cursor:
            raise sqlite3.OperationalError("database or disk is full")

        def backup(self, *args: object) -> None:
            raise sqlite3.OperationalError("database or disk is full")

        def __enter__(self) -> Broken:
            return self

        def __exit__(self, *args: object) -> None:
            self.real.rollback()

        def __getattr__(self, name: str) -> object:
            return getattr(self.real, name)

    spill._db.connection = Broken(spill._db.connection)  # type: ignore[assignment]
    spill.put("msg_a", Spilled(0, "plan", [0]), first=True)
    with pytest.raises(SpillLost) as lost:
        spill.flush()
    assert str(tmp_path) in str(lost.value) and "SQLITE_TMPDIR" in str(lost.value)
    assert "crew resume" in str(lost.value)
