"""What the leader keeps on disk (crew/store/spill.py): a batch SQLite cannot write, its disk
full, is held in memory and written with the next one; nothing is lost, every lookup answers
as if it had been written."""

from __future__ import annotations

import sqlite3

from crew.store.spill import Name, Rounds, Spill, Spilled


def _full(db: sqlite3.Connection) -> None:
    """No room for one more page, as on a full disk (SQLite raises SQLITE_FULL)."""
    pages = db.execute("PRAGMA page_count").fetchone()[0]
    db.execute(f"PRAGMA max_page_count = {pages}")


def _room(db: sqlite3.Connection) -> None:
    db.execute("PRAGMA max_page_count = 1073741823")


def test_a_spill_that_cannot_write_holds_its_rows_and_writes_them_later() -> None:
    spill = Spill()
    spill.put("msg_first", Spilled(0, "plan", [0]), first=True)
    spill.flush()
    _full(spill._db)
    for n in range(1, 400):  # more than a page
        spill.put(f"msg_{n:04d}", Spilled(n * 100, "plan", [n * 100, n * 100 + 40]), first=True)
        spill.name(Name.KEY, f"k{n}", f"msg_{n:04d}")
    spill.flush()  # fails: held

    assert spill.get("msg_0007") == Spilled(700, "plan", [700, 740])
    assert spill.named(Name.KEY, "k7") == "msg_0007"
    assert spill.get("msg_first") == Spilled(0, "plan", [0])
    _room(spill._db)
    assert [i for _, i in spill.of_task("plan")] == ["msg_first"] + [
        f"msg_{n:04d}" for n in range(1, 400)
    ]
    assert not spill._rows and len(spill) == 400  # written at last
    assert spill.named(Name.KEY, "k399") == "msg_0399"


def test_rounds_that_cannot_be_written_are_held_and_written_later() -> None:
    rounds = Rounds()
    _full(rounds._db)
    for n in range(Rounds.BATCH * 2):
        rounds.raise_to(f"msg_{n:04d}", n % 3)
    assert len(rounds._held) == Rounds.BATCH * 2  # every batch failed: all held
    assert [rounds.get(f"msg_{n:04d}", -1) for n in range(6)] == [0, 1, 2, 0, 1, 2]

    _room(rounds._db)
    rounds.raise_to("msg_0001", 0)  # never lowered
    assert not rounds._held and rounds.get("msg_0001", -1) == 1
    rounds.raise_to("msg_0001", 5)
    assert rounds.get("msg_0001", -1) == 5 and rounds.get("msg_none", -1) == -1
