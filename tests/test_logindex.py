"""The log index (crew/store/logindex.py): reading a worker's log as lines with receive times,
tolerant of an index that is missing, lagging, torn or wrong; and the leader's first record."""

from __future__ import annotations

import os
from pathlib import Path

from crew.store import logindex
from crew.store.logindex import TaskLog, TimedLine


def _log(tmp_path: Path, data: bytes, index: bytes | None) -> Path:
    log = tmp_path / "t.log"
    log.write_bytes(data)
    if index is not None:
        logindex.index_path(log).write_bytes(index)
    return log


def _lines(log: Path, *, final: bool = True) -> list[tuple[bytes, int]]:
    return [(line.text, line.time_us) for line in TaskLog("t", log).lines(final=final)]


def test_each_line_has_the_time_of_the_first_record_reaching_its_end(tmp_path: Path) -> None:
    log = _log(tmp_path, b"one\ntwo\nthree\n", b"4 100\n14 200\n")

    assert _lines(log) == [(b"one", 100), (b"two", 200), (b"three", 200)]


def test_without_an_index_lines_keep_file_order_at_the_log_modification_time(
    tmp_path: Path,
) -> None:
    log = _log(tmp_path, b"one\ntwo", None)
    os.utime(log, ns=(0, 1_500_000_000_123_456_000))

    assert _lines(log) == [(b"one", 1_500_000_000_123_456), (b"two", 1_500_000_000_123_456)]


def test_lines_past_the_last_record_get_the_modification_time(tmp_path: Path) -> None:
    log = _log(tmp_path, b"one\ntwo\n", b"4 100\n8 3")  # the last record torn by a crash
    os.utime(log, ns=(0, 900_000))

    assert _lines(log) == [(b"one", 100), (b"two", 900)]


def test_records_that_are_not_records_or_go_backwards_are_ignored(tmp_path: Path) -> None:
    log = _log(tmp_path, b"a\nb\nc\n", b"2 100\ngarbage\n2 50\n1 60\n-4 7\n6 300\n")

    assert _lines(log) == [(b"a", 100), (b"b", 300), (b"c", 300)]


def test_times_never_go_back_within_a_task(tmp_path: Path) -> None:
    log = _log(tmp_path, b"a\nb\n", b"2 500\n4 400\n")  # the clock was set back

    assert _lines(log) == [(b"a", 500), (b"b", 500)]


def test_following_waits_for_a_line_the_index_does_not_cover_yet(tmp_path: Path) -> None:
    log = _log(tmp_path, b"one\ntwo\nthr", b"4 100\n")
    index = logindex.index_path(log)
    reader = TaskLog("t", log)

    first = list(reader.lines(final=False))
    with index.open("ab") as handle:
        handle.write(b"8 200\n")
    second = list(reader.lines(final=False))
    with log.open("ab") as handle:
        handle.write(b"ee\n")
    with index.open("ab") as handle:
        handle.write(b"14 300\n")
    third = list(reader.lines(final=False))

    assert first == [TimedLine("t", b"one", 100)]
    assert second == [TimedLine("t", b"two", 200)]
    assert third == [TimedLine("t", b"three", 300)]
    assert list(reader.lines(final=True)) == []


def test_the_end_shows_a_last_line_without_a_newline(tmp_path: Path) -> None:
    log = _log(tmp_path, b"one\nno newline", b"4 100\n15 200\n")
    reader = TaskLog("t", log)

    assert [line.text for line in reader.lines(final=False)] == [b"one"]
    assert list(reader.lines(final=True)) == [TimedLine("t", b"no newline", 200)]


def test_a_line_longer_than_the_limit_comes_in_pieces(tmp_path: Path) -> None:
    data = b"x" * (logindex.MAX_LINE + 10) + b"\n"
    log = _log(tmp_path, data, b"%d 100\n" % len(data))

    lines = _lines(log)

    assert [len(text) for text, _ in lines] == [logindex.MAX_LINE, 10]
    assert b"".join(text for text, _ in lines) + b"\n" == data


def test_a_missing_log_has_no_lines(tmp_path: Path) -> None:
    assert _lines(tmp_path / "t.log") == []


def test_a_leader_appending_to_a_log_first_records_what_it_holds(tmp_path: Path) -> None:
    log = _log(tmp_path, b"from a leader that crashed\n", None)
    os.utime(log, ns=(0, 7_000_000_000))
    fd = os.open(log, os.O_WRONLY | os.O_APPEND)
    try:
        index_fd, size = logindex.open_index(log, fd)
        os.close(index_fd)
    finally:
        os.close(fd)

    assert size == 27
    assert logindex.index_path(log).read_bytes() == b"27 7000000\n"


def test_a_leader_never_writes_an_index_through_a_link(tmp_path: Path) -> None:
    log = _log(tmp_path, b"", None)
    target = tmp_path / "elsewhere"
    logindex.index_path(log).symlink_to(target)
    fd = os.open(log, os.O_WRONLY | os.O_APPEND)
    try:
        assert logindex.open_index(log, fd) == (-1, 0)
    finally:
        os.close(fd)

    assert not target.exists()


def test_following_holds_lines_received_after_the_horizon(tmp_path: Path) -> None:
    log = _log(tmp_path, b"one\ntwo\n", b"4 100\n8 200\n9 30")  # the last record not ended
    reader = TaskLog("t", log)

    newest = reader.newest()
    early = list(reader.lines(final=False, until_us=150))
    later = list(reader.lines(final=False, until_us=200))

    assert newest == 200
    assert early == [TimedLine("t", b"one", 100)]
    assert later == [TimedLine("t", b"two", 200)]
