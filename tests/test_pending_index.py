"""The pending-message index (crew/store/pending.py): what it says equals a fold of the whole
mailbox file; it reads only what was appended since it was saved; it is rebuilt whenever the
file it covers is not the one it read, or the index itself is damaged."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import SESSION

from crew.store import pending
from crew.store.pending import BadLine, KeyIndex, PendingIndex
from crew.store.runstore import RunStore


def _line(message_id: str, status: str, task: str = "plan", kind: str = "steer") -> bytes:
    record = {"id": message_id, "kind": kind, "taskId": task, "status": status, "body": "x"}
    return json.dumps(record).encode() + b"\n"


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    return tmp_path / "steering.jsonl", tmp_path / "steering.pending.json"


def _index(files: tuple[Path, Path]) -> PendingIndex:
    return PendingIndex(str(files[0]), str(files[1]))


def test_the_index_is_the_fold_of_the_latest_lines(files: tuple[Path, Path]) -> None:
    mailbox, _ = files
    mailbox.write_bytes(
        _line("msg_a", "pending")
        + _line("msg_b", "pending", task="build", kind="nudge")
        + _line("msg_a", "delivered")
        + _line("msg_c", "pending")
        + _line("msg_c", "rejected")
        + _line("msg_a", "pending")  # carried back for the next attempt
    )

    index = _index(files)

    assert index.current() == {"msg_b": ("build", "nudge"), "msg_a": ("plan", "steer")}
    assert index.counts("plan") == {"steer": 1} and index.counts("build") == {"nudge": 1}


def test_a_saved_index_reads_only_what_was_appended(files: tuple[Path, Path]) -> None:
    mailbox, saved = files
    mailbox.write_bytes(b"".join(_line(f"msg_{n}", "pending") for n in range(100)))
    _index(files).current()  # saved: it had never been
    assert saved.exists()
    # Change an early line in place (the bytes just before the covered end stay): a reader that
    # read the file again would see msg_0 delivered; one that trusts the index does not.
    data = mailbox.read_bytes()
    early = _line("msg_0", "pending")
    mailbox.write_bytes(data.replace(early, early.replace(b"pending", b"xending"), 1))
    with mailbox.open("ab") as handle:
        handle.write(_line("msg_1", "acknowledged"))

    current = _index(files).current()

    assert "msg_0" in current and "msg_1" not in current and len(current) == 99


@pytest.mark.parametrize("change", ["replaced", "shorter", "rewritten", "torn index", "bad index"])
def test_an_index_that_no_longer_holds_is_rebuilt(files: tuple[Path, Path], change: str) -> None:
    mailbox, saved = files
    mailbox.write_bytes(b"".join(_line(f"msg_{n}", "pending") for n in range(10)))
    _index(files).current()
    fresh = _line("msg_new", "pending")
    if change == "replaced":
        mailbox.with_name("other").write_bytes(mailbox.read_bytes() + fresh)
        os.replace(mailbox.with_name("other"), mailbox)
    elif change == "shorter":
        mailbox.write_bytes(fresh)
    elif change == "rewritten":  # same length, other bytes at the end of what was covered
        last = _line("msg_9", "pending")
        mailbox.write_bytes(mailbox.read_bytes().replace(last, last.replace(b"pend", b"xend")))
    elif change == "torn index":
        saved.write_bytes(saved.read_bytes()[:20])
    else:
        saved.write_bytes(saved.read_bytes().replace(b"msg_3", b"msg_X"))

    expected = _fold(mailbox.read_bytes())

    assert _index(files).current() == expected


def _fold(data: bytes) -> dict[str, tuple[str, str]]:
    found: dict[str, tuple[str, str]] = {}
    for line in data.splitlines():
        if line.strip():
            record = json.loads(line)
            found.pop(record["id"], None)
            if record["status"] == "pending":
                found[record["id"]] = (record["taskId"], record["kind"])
    return found


def test_a_line_that_is_not_a_record_is_reported(files: tuple[Path, Path]) -> None:
    mailbox, saved = files
    mailbox.write_bytes(_line("msg_a", "pending") + b"{not json\n")
    with pytest.raises(BadLine):
        _index(files).current()
    assert not saved.exists()


def test_a_torn_last_line_waits_for_its_end(files: tuple[Path, Path]) -> None:
    mailbox, _ = files
    whole = _line("msg_b", "pending")
    mailbox.write_bytes(_line("msg_a", "pending") + whole[:10])
    index = _index(files)
    assert index.current() == {"msg_a": ("plan", "steer")}
    with mailbox.open("ab") as handle:
        handle.write(whole[10:])
    assert set(index.current()) == {"msg_a", "msg_b"}


def test_a_missing_mailbox_has_nothing_pending(files: tuple[Path, Path]) -> None:
    assert _index(files).current() == {}


def test_it_is_saved_again_only_when_well_behind(files: tuple[Path, Path]) -> None:
    mailbox, saved = files
    mailbox.write_bytes(_line("msg_a", "pending"))
    _index(files).current()
    first = saved.read_bytes()
    with mailbox.open("ab") as handle:
        handle.write(_line("msg_b", "pending"))
    _index(files).current()
    assert saved.read_bytes() == first  # a line behind: not worth a write
    with mailbox.open("ab") as handle:
        handle.write(
            b"".join(_line(f"msg_{n}", "delivered") for n in range(pending.SAVE_AFTER // 50))
        )
    _index(files).current()
    assert saved.read_bytes() != first


def test_a_save_removes_what_a_killed_save_left_and_nothing_of_a_live_one(
    files: tuple[Path, Path],
) -> None:
    # A save is the last write of a send, after its marker: no recovery comes after a kill then.
    mailbox, saved = files
    mailbox.write_bytes(_line("msg_a", "pending"))
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], check=True,
                          capture_output=True, text=True)  # fmt: skip
    left = saved.with_name(f".{saved.name}.{int(gone.stdout)}.0a1b2c3d.tmp")
    alive = saved.with_name(f".{saved.name}.{os.getppid()}.0a1b2c3d.tmp")
    other = saved.with_name(f".inbox.pending.json.{int(gone.stdout)}.0a1b2c3d.tmp")
    odd = saved.with_name(f".{saved.name}.\u00b2.0a1b2c3d.tmp")  # '²'.isdigit(), int() refuses
    for temp in (left, alive, other, odd):
        temp.write_bytes(b"{")

    _index(files).current()

    assert saved.exists() and not left.exists()
    assert alive.exists() and other.exists()  # a save in progress; another index's
    assert odd.exists()  # no writer crew names so: not its to remove


def _keyed(message_id: str, key: object, status: str = "pending", **fields: object) -> bytes:
    record = {"id": message_id, "kind": "followUp", "taskId": "plan", "status": status}
    return json.dumps({**record, "data": {"idempotencyKey": key}, **fields}).encode() + b"\n"


def _keys(mailbox: Path, saved: Path) -> KeyIndex:
    index = KeyIndex(str(mailbox), str(saved))
    index.advance()
    return index


def test_the_key_index_names_the_first_message_that_carried_each_key(
    files: tuple[Path, Path], tmp_path: Path
) -> None:
    mailbox, _ = files
    saved = tmp_path / "steering.keys.sqlite"
    mailbox.write_bytes(
        _keyed("msg_a", "k1")
        + _keyed("msg_a", "k1", status="acknowledged")
        + _line("msg_b", "pending")  # no data
        + _keyed("msg_c", "k2", data=None)
        + _keyed("msg_d", "k1")  # the key again: msg_a keeps it
        + _keyed("msg_b", "k3", status="delivered")  # a change that carries a key counts
    )
    lines = mailbox.read_bytes().splitlines(keepends=True)
    at = [sum(len(line) for line in lines[:n]) for n in range(len(lines) + 1)]
    expected = {"k1": ("msg_a", 0), "k2": None, "k3": ("msg_b", at[5]), "k4": None}

    assert {k: _keys(mailbox, saved).carried(k) for k in expected} == expected  # folded, saved
    assert saved.exists()
    with mailbox.open("ab") as handle:
        handle.write(_keyed("msg_e", "k4") + _keyed("msg_f", "k3"))
    assert {k: _keys(mailbox, saved).carried(k) for k in expected} == {
        **expected,
        "k4": ("msg_e", at[6]),
    }


@pytest.mark.parametrize(
    "line",
    [
        _keyed("msg_a", 7),
        b'{"id":"msg_a","kind":"steer","taskId":"plan","status":"pending","data":[1]}\n',
    ],
)
def test_a_key_the_models_would_not_read_is_reported(
    files: tuple[Path, Path], tmp_path: Path, line: bytes
) -> None:
    mailbox, _ = files
    mailbox.write_bytes(line)
    with pytest.raises(BadLine):
        _keys(mailbox, tmp_path / "keys.sqlite")


@pytest.mark.parametrize("change", ["replaced", "shorter", "not a database", "another format"])
def test_a_key_index_that_no_longer_holds_is_rebuilt(
    files: tuple[Path, Path], tmp_path: Path, change: str
) -> None:
    mailbox, _ = files
    saved = tmp_path / "steering.keys.sqlite"
    mailbox.write_bytes(b"".join(_keyed(f"msg_{n}", f"k{n}") for n in range(10)))
    _keys(mailbox, saved).close()
    if change == "replaced":  # another file, the same length: none of the old keys are in it
        mailbox.with_name("other").write_bytes(
            mailbox.read_bytes().replace(b'Key": "k', b'Key": "j')
        )
        os.replace(mailbox.with_name("other"), mailbox)
    elif change == "shorter":
        mailbox.write_bytes(_keyed("msg_x", "j1"))
    elif change == "not a database":
        saved.write_bytes(b"x" * 4096)
        for suffix in ("-wal", "-shm"):
            saved.with_name(saved.name + suffix).unlink(missing_ok=True)
    else:
        with sqlite3.connect(saved) as db:
            db.execute("UPDATE covered SET version = 99")
        db.close()
    index = _keys(mailbox, saved)
    now = {json.loads(line)["data"]["idempotencyKey"] for line in mailbox.read_bytes().splitlines()}

    assert {k for k in (*now, "k3", "j1", "j3") if index.carried(k)} == now
    index.close()
    assert {k for k in (*now, "k3") if _keys(mailbox, saved).carried(k)} == now  # saved so


def test_a_saved_key_index_reads_only_what_was_appended(
    files: tuple[Path, Path], tmp_path: Path
) -> None:
    mailbox, _ = files
    saved = tmp_path / "steering.keys.sqlite"
    mailbox.write_bytes(b"".join(_keyed(f"msg_{n}", f"k{n}") for n in range(100)))
    _keys(mailbox, saved).close()
    # An early key changed in place: a reader that read the file again would not find k0.
    mailbox.write_bytes(mailbox.read_bytes().replace(b'"k0"', b'"x0"', 1))
    with mailbox.open("ab") as handle:
        handle.write(_keyed("msg_new", "k-new"))

    index = _keys(mailbox, saved)

    assert (index.carried("k0"), index.carried("x0")) == (("msg_0", 0), None)
    assert (index.carried("k-new") or ("",))[0] == "msg_new"
    index.close()
    assert sorted(p.name for p in tmp_path.glob("steering.*")) == [  # the database alone
        "steering.jsonl",
        "steering.keys.sqlite",
    ]


def test_a_one_shot_keyed_lookup_reads_no_message_through_the_models(
    make_run: Callable[..., RunStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    from test_verbs import start

    from crew import verbs
    from crew.store.fold import MailboxFold

    store = make_run()
    start(store)
    verbs.follow_up(store, "plan", "x", idempotency_key="k1", session=SESSION)
    verbs.add_task(store, agent="coder", prompt="more", session=SESSION, idempotency_key="k2")

    def refused(self: MailboxFold) -> object:
        raise AssertionError(f"{self.path.name} read through the models")

    monkeypatch.setattr(MailboxFold, "current", refused)
    fresh = RunStore.open(store.paths.home, store.run_id)  # as a new command opens it
    added = verbs.add_task(
        fresh, agent="coder", prompt="again", session=SESSION, idempotency_key="k3"
    )
    assert not added.replayed and added.task.idempotency_key == "k3"
    with pytest.raises(AssertionError, match="read through the models"):  # a key carried: read
        verbs.add_task(fresh, agent="coder", prompt="x", session=SESSION, idempotency_key="k1")
