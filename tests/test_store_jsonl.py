"""The JSONL store: atomic appends, torn tails, tolerant and incremental reads, following."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from crew.errors import StoreError
from crew.models import Event
from crew.store import jsonl
from crew.store.snapshot import write_atomic


def event(seq: int, message: str = "") -> Event:
    return Event(
        id=f"evt_{seq:016x}",
        seq=seq,
        run_id="20261130-034100-7f3a",
        at="2026-11-30T03:41:00.123456Z",
        type="task.started",
        task_id="plan",
        message=message or None,
    )


def test_append_then_read_returns_records_in_order(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    jsonl.append(path, [event(1).to_line(), event(2).to_line()])
    jsonl.append(path, [event(3).to_line()])

    result = jsonl.read(path, Event)

    assert [e.seq for e in result.records] == [1, 2, 3]
    assert result.bad == []
    assert result.offset == path.stat().st_size
    assert result.line == 4
    assert result.tail_bytes == 0


def test_lines_are_compact_with_keys_in_schema_order(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    jsonl.append(path, [event(1, "hello").to_line()])

    line = path.read_bytes()

    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert b" " not in line.replace(b"hello", b"")  # compact separators
    keys = [k.split('"')[1] for k in line.decode().split(",") if k.startswith('"')]
    assert line.startswith(b'{"id":"evt_')
    assert keys == ["seq", "runId", "at", "type", "taskId", "message"]


def test_a_torn_tail_is_moved_aside_before_the_next_append(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    jsonl.append(path, [event(1).to_line()])
    torn = event(2).to_line()[:25]
    with path.open("ab") as handle:
        handle.write(torn)  # a crash cut this write short

    assert [e.seq for e in jsonl.read(path, Event).records] == [1]  # the tail is "not yet written"
    jsonl.append(path, [event(3).to_line()])

    result = jsonl.read(path, Event)
    assert [e.seq for e in result.records] == [1, 3]
    assert result.bad == []
    assert path.with_name("events.jsonl.corrupt").read_bytes() == torn + b"\n"


def test_a_torn_tail_longer_than_a_read_block_is_moved_whole(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    jsonl.append(path, [event(1).to_line()])
    torn = b'{"id":"' + b"x" * 200_000
    with path.open("ab") as handle:
        handle.write(torn)

    jsonl.append(path, [event(2).to_line()])

    assert [e.seq for e in jsonl.read(path, Event).records] == [1, 2]
    assert path.with_name("events.jsonl.corrupt").read_bytes() == torn + b"\n"


def test_a_file_holding_only_a_torn_line_is_emptied_before_appending(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    path.write_bytes(b'{"id":"evt_')

    jsonl.append(path, [event(1).to_line()])

    assert path.read_bytes() == event(1).to_line()


def test_oversized_and_multiline_records_are_refused_and_nothing_is_written(
    tmp_path: Path,
) -> None:
    path = tmp_path / "events.jsonl"
    jsonl.append(path, [event(1).to_line()])
    before = path.read_bytes()

    with pytest.raises(StoreError, match="limit is 100 bytes"):
        jsonl.append(path, [event(2, "x" * 200).to_line()], limit=100)
    with pytest.raises(StoreError, match="exactly one newline-terminated line"):
        jsonl.append(path, [b'{"a":1}\n{"b":2}\n'])
    with pytest.raises(StoreError, match="exactly one newline-terminated line"):
        jsonl.append(path, [b'{"a":1}'])

    assert path.read_bytes() == before


def test_a_short_write_is_rolled_back_and_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "events.jsonl"
    jsonl.append(path, [event(1).to_line()])
    before = path.read_bytes()
    real_write = os.write

    def short_write(fd: int, data: bytes) -> int:
        return real_write(fd, bytes(data)[:10])  # the disk filled up mid-record

    monkeypatch.setattr(os, "write", short_write)
    with pytest.raises(StoreError, match="disk full"):
        jsonl.append(path, [event(2).to_line()])
    monkeypatch.undo()

    assert path.read_bytes() == before


def test_a_failed_write_says_the_disk_is_full(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "events.jsonl"
    jsonl.append(path, [event(1).to_line()])

    def no_space(fd: int, data: bytes) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", no_space)
    with pytest.raises(StoreError, match=r"the disk is full\. Nothing was recorded"):
        jsonl.append(path, [event(2).to_line()])
    monkeypatch.undo()

    assert [e.seq for e in jsonl.read(path, Event).records] == [1]


def test_bad_lines_are_skipped_and_counted_with_line_numbers(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    path.write_bytes(
        event(1).to_line()
        + b"not json\n"
        + b"\n"
        + b'{"id":"evt_1","seq":"x"}\n'
        + b"\xff\xfe\x00\n"
        + event(2).to_line()
    )

    result = jsonl.read(path, Event)

    assert [e.seq for e in result.records] == [1, 2]
    assert [b.line for b in result.bad] == [2, 4, 5]
    assert all(b.path == path for b in result.bad)
    assert "seq" in result.bad[1].reason


def test_reading_from_an_offset_returns_only_what_follows(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    jsonl.append(path, [event(1).to_line(), event(2).to_line()])
    first = jsonl.read(path, Event)
    jsonl.append(path, [event(3).to_line()])

    second = jsonl.read(path, Event, offset=first.offset, line=first.line)

    assert [e.seq for e in second.records] == [3]
    assert second.line == 4


def test_reading_from_an_offset_does_not_read_the_bytes_before_it(
    tmp_path: Path,
) -> None:
    path = tmp_path / "events.jsonl"
    path.write_bytes(b"\xff" * 1000 + b"\n")  # garbage an incremental reader must not look at
    offset = path.stat().st_size
    jsonl.append(path, [event(1).to_line()])

    result = jsonl.read(path, Event, offset=offset)

    assert [e.seq for e in result.records] == [1]
    assert result.bad == []


def test_last_record_skips_a_torn_tail_and_corrupt_lines(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    path.write_bytes(event(1).to_line() + event(2).to_line() + b"garbage\n" + b'{"id":"ev')

    last = jsonl.last_record(path, Event)

    assert last is not None and last.seq == 2
    assert jsonl.last_record(tmp_path / "missing.jsonl", Event) is None


def test_last_record_finds_a_record_across_read_blocks(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    lines = [event(i, "m" * 1000).to_line() for i in range(1, 300)]
    path.write_bytes(b"".join(lines))

    assert jsonl.last_record(path, Event).seq == 299  # type: ignore[union-attr]
    assert [e.seq for e in jsonl.tail_records(path, Event, 3)] == [297, 298, 299]


def test_fold_keeps_the_latest_record_per_key_in_first_seen_order() -> None:
    records = [event(1, "a"), event(2, "b"), event(1, "c")]
    records[2] = records[2].model_copy(update={"id": records[0].id})

    folded = jsonl.fold(records, lambda e: e.id)

    assert [e.message for e in folded.values()] == ["c", "b"]


def test_a_follower_reads_only_new_lines(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    follower = jsonl.Follower(path, Event)
    assert follower.poll().records == []

    jsonl.append(path, [event(1).to_line()])
    assert [e.seq for e in follower.poll().records] == [1]
    with path.open("ab") as handle:
        handle.write(event(2).to_line()[:10])  # half-written
    assert follower.poll().records == []
    with path.open("ab") as handle:
        handle.write(event(2).to_line()[10:])
    assert [e.seq for e in follower.poll().records] == [2]
    assert follower.poll().records == []


def test_a_follower_reads_a_long_file_a_piece_at_a_time(tmp_path: Path) -> None:
    # A lean fold reads a file a few hundred lines at a time, so as not to hold it all: each
    # piece ends with the line that crosses the limit, read whole, and nothing is read twice.
    path = tmp_path / "events.jsonl"
    lines = [event(i, "m" * (50 if i % 7 else 3000)).to_line() for i in range(1, 101)]
    jsonl.append(path, lines)
    with path.open("ab") as handle:
        handle.write(event(101, "torn" * 2000).to_line()[:-1])  # a torn tail longer than a piece
    follower = jsonl.Follower(path, Event)
    pieces = []
    while True:
        poll = follower.poll(2000)
        pieces.append([e.seq for e in poll.records])
        if not poll.more:
            break

    assert [seq for piece in pieces for seq in piece] == list(range(1, 101))
    assert len(pieces) > 10
    for piece in pieces:
        if piece:
            assert sum(len(lines[seq - 1]) for seq in piece[:-1]) < 2000
    assert follower.poll(2000).records == [] and follower.offset == sum(map(len, lines))


def test_a_follower_starts_over_when_the_file_is_replaced(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    jsonl.append(path, [event(1).to_line(), b"junk\n", event(2).to_line()])
    follower = jsonl.Follower(path, Event)
    first = follower.poll()
    assert [e.seq for e in first.records] == [1, 2] and len(first.bad) == 1

    jsonl.rewrite_clean(path, Event)  # a repair: new inode, junk moved aside
    jsonl.append(path, [event(3).to_line()])
    again = follower.poll()

    assert again.reset
    assert [e.seq for e in again.records] == [1, 2, 3]


def test_a_follower_takes_what_its_process_wrote_without_reading_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer that follows its own file is told what it appended: the next poll takes those
    records as they are and reads only what others appended after them."""
    path = tmp_path / "events.jsonl"
    follower = jsonl.Follower(path, Event)
    jsonl.append(path, [event(1).to_line()])
    follower.poll()
    reads: list[int] = []
    real = jsonl.read
    monkeypatch.setattr(jsonl, "read", lambda *a, **k: reads.append(k["offset"]) or real(*a, **k))

    mine = [event(2), event(3)]
    lines = [e.to_line() for e in mine]
    follower.wrote(jsonl.append(path, lines), mine, [len(line) for line in lines])
    took = follower.poll()
    assert took.records == mine and reads == []
    assert took.starts == [len(event(1).to_line()), len(event(1).to_line() + lines[0])]

    follower.wrote(jsonl.append(path, [event(4).to_line()]), [event(4)], [len(event(4).to_line())])
    jsonl.append(path, [event(5).to_line()])  # another process, after it
    assert [e.seq for e in follower.poll().records] == [4, 5]
    assert reads == [path.stat().st_size - len(event(5).to_line())]  # only the other's line


def test_a_follower_reads_what_it_wrote_if_the_file_changed_meanwhile(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    follower = jsonl.Follower(path, Event)
    jsonl.append(path, [event(1).to_line()])
    follower.poll()

    jsonl.append(path, [event(2).to_line()])  # another process, not yet read
    line = event(3).to_line()
    follower.wrote(jsonl.append(path, [line]), [event(99)], [len(line)])  # after a gap: ignored
    assert [e.seq for e in follower.poll().records] == [2, 3]

    line = event(4).to_line()
    follower.wrote(jsonl.append(path, [line]), [event(99)], [len(line)])
    write_atomic(path, path.read_bytes())  # a repair: the same lines in a new file
    again = follower.poll()
    assert again.reset and [e.seq for e in again.records] == [1, 2, 3, 4]


def test_a_follower_starts_over_when_the_file_shrinks(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    jsonl.append(path, [event(1).to_line(), event(2).to_line()])
    follower = jsonl.Follower(path, Event)
    follower.poll()

    with path.open("r+b") as handle:
        handle.truncate(len(event(1).to_line()))
    again = follower.poll()

    assert again.reset and [e.seq for e in again.records] == [1]


def test_rewrite_clean_moves_bad_lines_and_the_torn_tail_aside(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    path.write_bytes(event(1).to_line() + b"junk\n" + event(2).to_line() + b'{"torn')

    cleanup = jsonl.rewrite_clean(path, Event)

    assert [b.line for b in cleanup.bad] == [2]
    assert cleanup.torn_bytes == len(b'{"torn')
    assert path.read_bytes() == event(1).to_line() + event(2).to_line()
    assert path.with_name("events.jsonl.corrupt").read_bytes() == b'junk\n{"torn\n'


def test_atomic_snapshot_write_leaves_no_temp_file(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    folder.mkdir()
    path = folder / "manifest.json"
    write_atomic(path, b"{}\n")
    write_atomic(path, b'{"a": 1}\n')

    assert path.read_bytes() == b'{"a": 1}\n'
    assert [p.name for p in folder.iterdir()] == ["manifest.json"]


def test_appends_and_snapshots_are_fsynced_by_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setenv("CREW_FSYNC", "1")
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd)))

    jsonl.append(tmp_path / "a.jsonl", [event(1).to_line()])  # file + its new directory entry
    assert len(synced) == 2
    write_atomic(tmp_path / "m.json", b"{}\n")  # temp file + directory after the rename
    assert len(synced) == 4

    monkeypatch.setenv("CREW_FSYNC", "0")
    jsonl.append(tmp_path / "a.jsonl", [event(2).to_line()])
    assert len(synced) == 4


@pytest.mark.parametrize(
    ("content", "count", "kept", "aside"),
    [
        (b"a\nb\nc\n", 1, b"a\nb\n", b"c\n"),
        (b"a\nb\nc\n", 3, b"", b"a\nb\nc\n"),
        (b"a\nb\nc\n", 0, b"a\nb\nc\n", b""),
        (b"a\nb\ntor", 1, b"a\n", b"b\ntor\n"),
        (b"a\nb\ntor", 0, b"a\nb\n", b"tor\n"),
    ],
)
def test_the_last_lines_and_a_torn_tail_are_set_aside_whole(
    tmp_path: Path, content: bytes, count: int, kept: bytes, aside: bytes
) -> None:
    path = tmp_path / "events.jsonl"
    path.write_bytes(content)

    moved = jsonl.set_aside_last(path, count)

    assert path.read_bytes() == kept
    assert moved == len(content) - len(kept)
    corrupt = path.with_name("events.jsonl.corrupt")
    assert (corrupt.read_bytes() if corrupt.exists() else b"") == aside
