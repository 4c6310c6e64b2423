"""The run lock (crew/store/lock.py): an exclusive `flock` another process's filelock respects,
one hold per thread (taken again by the thread that holds it), none inherited by a fork, no
link followed."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from crew.errors import CrewTimeout, Refused
from crew.procs.liveness import started
from crew.store.lock import locked

#: Takes the lock file named by argv[1] with filelock, without waiting: prints taken or busy.
FILELOCK_TAKE = """
import sys, filelock
try:
    filelock.FileLock(sys.argv[1]).acquire(blocking=False)
    print("taken")
except filelock.Timeout:
    print("busy")
"""


def _filelock_take(path: Path) -> str:
    done = subprocess.run(
        [sys.executable, "-c", FILELOCK_TAKE, str(path)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return done.stdout.strip()


def _lock_file(tmp_path: Path) -> Path:
    path = tmp_path / ".lock"
    path.touch()
    return path


def test_a_held_lock_is_busy_for_filelock_in_another_process_and_free_once_let_go(
    tmp_path: Path,
) -> None:
    path = _lock_file(tmp_path)
    with locked(path):
        assert _filelock_take(path) == "busy"
    assert _filelock_take(path) == "taken"


def test_a_lock_filelock_holds_elsewhere_times_out_naming_the_lock(tmp_path: Path) -> None:
    path = _lock_file(tmp_path)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, filelock; l = filelock.FileLock(sys.argv[1]); "
            "l.acquire(); print('held', flush=True); sys.stdin.read()",
            str(path),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "held"
        with (
            pytest.raises(CrewTimeout, match=r"waiting for the lock .*\.lock"),
            locked(path, timeout=0.05),
        ):
            pass
    finally:
        holder.communicate("", timeout=60)
    with locked(path, timeout=0):
        pass


def test_two_threads_exclude_each_other(tmp_path: Path) -> None:
    path = _lock_file(tmp_path)
    outcome: list[str] = []

    def other() -> None:
        try:
            with locked(path, timeout=0.05):
                outcome.append("taken")
        except CrewTimeout:
            outcome.append("busy")

    with locked(path):
        thread = threading.Thread(target=other)
        thread.start()
        thread.join(timeout=60)
    thread = threading.Thread(target=other)
    thread.start()
    thread.join(timeout=60)
    assert outcome == ["busy", "taken"]


def test_a_thread_may_take_again_what_it_holds_and_holds_it_until_its_last_release(
    tmp_path: Path,
) -> None:
    path = _lock_file(tmp_path)
    with locked(path):
        with locked(path, timeout=0):
            assert _filelock_take(path) == "busy"
        assert _filelock_take(path) == "busy"  # the outer hold goes on
    assert _filelock_take(path) == "taken"


def test_a_forked_child_does_not_inherit_the_hold(tmp_path: Path) -> None:
    path = _lock_file(tmp_path)
    told, tell = os.pipe()  # the child's word: whether the lock was busy for it
    go, let_go = os.pipe()  # the parent's: the child may exit
    with locked(path):
        pid = os.fork()
        if pid == 0:  # the child: the parent holds the lock, so it is busy here
            os.close(let_go)
            try:
                with locked(path, timeout=0.05):
                    os.write(tell, b"taken")
            except CrewTimeout:
                os.write(tell, b"busy")
            os.read(go, 1)  # alive, with whatever it inherited, until the parent says
            os._exit(0)
        try:
            assert os.read(told, 16) == b"busy"
        finally:
            os.close(told)
            os.close(tell)
            os.close(go)
    try:
        assert _filelock_take(path) == "taken"  # let go, though the child lives on
    finally:
        os.close(let_go)
        os.waitpid(pid, 0)


def test_a_missing_lock_file_is_made_at_its_first_take_private_to_writers(
    tmp_path: Path,
) -> None:
    path = tmp_path / ".lock"
    with locked(path):
        assert _filelock_take(path) == "busy"
    assert path.stat().st_mode & 0o777 == 0o644 & ~_umask()
    with locked(path):  # and the next take is the direct one
        assert _filelock_take(path) == "busy"


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_a_link_where_the_lock_file_is_is_refused_and_not_followed(tmp_path: Path) -> None:
    target = tmp_path / "precious"
    target.write_text("keep me\n")
    path = tmp_path / ".lock"
    path.symlink_to(target)
    with pytest.raises(Refused, match="symbolic link"), locked(path):
        pass
    assert target.read_text() == "keep me\n"


def test_a_hand_whose_pid_another_process_took_since_is_taken_down(tmp_path: Path) -> None:
    # A waiter killed with its hand up left the hand; a process that later got its pid kept
    # it "alive", and every writer waited its whole timeout for a free lock.
    path = _lock_file(tmp_path)
    hand = tmp_path / ".next.lock"
    other = subprocess.Popen([sys.executable, "-c", "input()"], stdin=subprocess.PIPE, text=True)
    try:
        start = started(other.pid)
        assert start is not None
        hand.write_text(f"{other.pid}:1:{start}")  # its waiter lives: its turn comes first
        with pytest.raises(CrewTimeout), locked(path, timeout=0.05):
            pass
        hand.write_text(f"{other.pid}:1:{start + 1}")  # a later process with the waiter's pid
        with locked(path, timeout=0.05):
            assert not hand.exists()
        hand.write_text(f"{other.pid}:1")  # an older crew's hand: its pid alone decides
        with pytest.raises(CrewTimeout), locked(path, timeout=0.05):
            pass
    finally:
        other.communicate("\n", timeout=60)
