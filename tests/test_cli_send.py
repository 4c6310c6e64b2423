"""The sending verbs from a shell: exit codes, exact error sentences, stdin, CI patterns."""

from __future__ import annotations

import json
import os
import pty
import select
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import SESSION, CliResult, config, snapshot_files
from leaders import eventually
from test_verbs import ask, start

from crew import fast
from crew.cli.send import SECRET_PROMPT
from crew.domain import change, mailbox
from crew.errors import EXIT_CODES, ExitCode
from crew.models import Event, MailboxMessage
from crew.registry import Box, EventType, MessageStatus, TaskStatus
from crew.store import jsonl, secret_answers
from crew.store.runstore import RunStore

Cli = Callable[..., CliResult]
MakeRun = Callable[..., RunStore]


def test_respond_from_the_shell(cli: Cli, make_run: MakeRun) -> None:
    store = make_run()
    ask(store)

    result = cli("respond", store.run_id, "plan", "Use Postgres")

    assert result.code == 0
    assert result.out.startswith("Sent answer msg_")
    assert f"to plan in run {store.run_id}.\n" in result.out
    assert (
        f"No leader is running: it is delivered once one leads the run (`crew resume {store.run_id}`)."
        in result.out
    )
    assert result.err == ""
    assert store.state().tasks["plan"].status is TaskStatus.RUNNING


def test_a_dash_reads_the_body_from_stdin(cli: Cli, make_run: MakeRun) -> None:
    store = make_run()
    ask(store)

    result = cli("respond", "latest", "plan", "-", "--json", stdin="line one\nline two\n\n")

    assert result.code == 0
    assert json.loads(result.out)["body"] == "line one\nline two"


def test_json_prints_the_message(cli: Cli, make_run: MakeRun) -> None:
    store = make_run()
    start(store)

    result = cli("steer", "latest", "plan", "go", "--json")

    message = MailboxMessage.model_validate_json(result.out)
    assert message.kind == "steer" and message.body == "go" and message.status == "pending"
    assert store.messages(Box.STEERING) == [message]


@pytest.mark.parametrize(
    ("args", "code", "error"),
    [
        (("respond", "latest", "plan", "x"), 4, "crew: error: Task plan is running: respond needs a task that is waiting for an answer (or flagged needs_review).\nIt asks nothing now (a question it asked was answered, by someone else perhaps, or taken back); `crew steer` redirects a running task.\n"),
        (("steer", "latest", "build", "x"), 4, "crew: error: Task build is queued: steer needs a task that is running or waiting.\nIt has not started yet; `crew follow-up` queues work for it.\n"),
        (("steer", "latest", "deploy", "x"), 5, "crew: error: Run {run} has no task 'deploy' (tasks: plan, build).\n"),
        (("steer", "1999", "plan", "x"), 5, "crew: error: No run matches '1999' in {runs}.\nSee `crew runs`.\n"),
        (("steer", "latest", "../plan", "x"), 2, "crew: error: Invalid task id '../plan': expected 1-64 characters of a-z, 0-9, '_', '.', '-' starting with a letter or digit.\n"),
        (("steer", "latest", "plan", " "), 2, "crew: error: The message body is empty.\n"),
        (("steer", "latest", "plan", "x" * 70000), 2, "crew: error: The message body is 70000 bytes; the limit is 65536 bytes.\nWrite the content to a file and send its path instead.\n"),
        (("steer", "latest", "plan", "x", "--wait", "--timeout", "soon"), 2, "crew: error: --timeout: expected a duration like '500ms', '30s', '2m', '1h' or a number, got 'soon'.\n"),
        (("steer", "latest", "plan", "x", "--session", "intruder@elsewhere"), 4, "crew: error: Run {run} is owned by session 'tester@ci', and you are session 'intruder@elsewhere'.\nUse --force to act anyway (it is recorded), or ask the owner to `crew handoff {run} intruder@elsewhere`.\n"),
    ],
)  # fmt: skip
def test_refusals_print_one_sentence_exit_with_the_code_and_write_nothing(
    cli: Cli, make_run: MakeRun, args: tuple[str, ...], code: int, error: str
) -> None:
    store = make_run()
    start(store)
    home = store.paths.root.parent.parent.parent
    before = snapshot_files(home)

    result = cli(*args)

    assert result.code == code
    assert result.out == ""
    assert result.err == error.format(run=store.run_id, runs=store.paths.root.parent)
    assert snapshot_files(home) == before


def test_a_run_that_ended_takes_no_more_messages(cli: Cli, make_run: MakeRun) -> None:
    store = make_run()
    assert cli("cancel", "latest").code == 0

    result = cli("follow-up", "latest", "plan", "more")

    assert result.code == 4
    assert (
        result.err
        == f"crew: error: Run {store.run_id} has ended (cancelled): it takes no more messages.\n"
    )


def test_force_is_recorded_and_said(cli: Cli, make_run: MakeRun) -> None:
    store = make_run(session="owner@host")
    start(store)

    result = cli("nudge", "latest", "plan", "--force")

    assert result.code == 0
    assert result.err == "crew: acted on a run owned by owner@host (--force; recorded)\n"
    overridden = [
        e
        for e in jsonl.read(store.paths.events, Event).records
        if e.type is EventType.OWNERSHIP_OVERRIDDEN
    ]
    assert overridden[0].data == {"owner": "owner@host", "session": SESSION, "verb": "nudge"}


def test_sixty_follow_ups_keep_fifty_and_warn_from_the_twenty_first(
    cli: Cli, make_run: MakeRun
) -> None:
    store = make_run()

    warned = []
    for n in range(1, 61):
        result = cli("follow-up", "latest", "build", f"item {n}")
        assert result.code == 0
        if "undelivered message(s) of this kind (warning above 20" in result.err:
            warned.append(n)

    assert warned == list(range(21, 61))
    inbox = store.messages(Box.INBOX)
    assert Counter(m.status for m in inbox) == {
        MessageStatus.PENDING: 50,
        MessageStatus.REJECTED: 10,
    }
    assert [m.body for m in inbox if m.status is MessageStatus.REJECTED] == [
        f"item {n}" for n in range(1, 11)
    ]
    dropped = [
        e
        for e in jsonl.read(store.paths.events, Event).records
        if e.type is EventType.MAILBOX_DROPPED
    ]
    assert len(dropped) == 10


def test_a_send_that_makes_room_exits_as_the_exit_code_table_says(
    cli: Cli, make_run: MakeRun
) -> None:
    store = make_run(config(limits={"maxPendingFollowUps": 2}))

    sent = [cli("follow-up", store.run_id, "build", f"item {n}") for n in range(3)]

    assert [s.code for s in sent] == [0, 0, 0]  # each message was accepted
    assert "crew: warning: dropped the oldest pending followUp" in sent[2].err
    table = (Path(__file__).parent.parent / "docs" / "exit-codes.md").read_text()
    rows = [line for line in table.splitlines() if line.startswith("| ") and "backpressure" in line]
    assert [row.split("|")[1].strip() for row in rows] == ["0"]
    assert [code for code, text in EXIT_CODES.items() if "backpressure" in " ".join(text)] == [
        ExitCode.OK
    ]


def _crew(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "crew", *args], capture_output=True, text=True, check=False
    )


def test_a_ci_retry_loop_with_an_idempotency_key_sends_exactly_once(make_run: MakeRun) -> None:
    store = make_run()
    start(store)

    outputs = [
        _crew(
            "steer",
            store.run_id,
            "plan",
            "deploy to staging",
            "--idempotency-key",
            "job-7",
            "--json",
        )
        for _ in range(3)
    ]

    assert [o.returncode for o in outputs] == [0, 0, 0]
    ids = {json.loads(o.stdout)["id"] for o in outputs}
    assert len(ids) == 1
    assert [m.body for m in store.messages(Box.STEERING)] == ["deploy to staging"]
    changed = _crew("steer", store.run_id, "plan", "deploy to prod", "--idempotency-key", "job-7")
    assert changed.returncode == 4
    assert "Idempotency key 'job-7' was already used for a steer to plan" in changed.stderr


def test_concurrent_cli_processes_lose_nothing(make_run: MakeRun, tmp_path: Path) -> None:
    store = make_run()
    script = tmp_path / "send.sh"
    script.write_text(
        "for n in 1 2 3; do\n"
        f'  "{sys.executable}" -m crew follow-up {store.run_id} build "from $1 #$n" || exit 1\n'
        "done\n"
    )
    writers = [
        subprocess.Popen(["sh", str(script), str(w)], stdout=subprocess.DEVNULL, env=os.environ)
        for w in range(8)
    ]
    assert [w.wait(timeout=120) for w in writers] == [0] * 8

    lines = jsonl.read(store.paths.box(Box.INBOX), MailboxMessage)
    assert lines.bad == [] and lines.tail_bytes == 0
    bodies = Counter(m.body for m in lines.records)
    assert len(bodies) == 24 and set(bodies.values()) == {1}
    assert len({m.id for m in lines.records}) == 24
    seqs = [e.seq for e in jsonl.read(store.paths.events, Event).records]
    assert seqs == list(range(1, len(seqs) + 1))


def _until_steered(store: RunStore) -> None:
    """Until the command has written its steer (however long it takes to start), and a moment
    more: it is waiting by then (were it not, it would still see what comes next)."""
    steering = store.paths.box(Box.STEERING)
    eventually(lambda: steering.exists() and steering.stat().st_size > 0, timeout=60)
    time.sleep(0.1)


def test_wait_blocks_until_the_message_is_delivered(cli: Cli, make_run: MakeRun) -> None:
    store = make_run()
    start(store)

    def deliver() -> None:
        _until_steered(store)
        with change(store) as txn:
            message = next(iter(txn.messages(Box.STEERING).values()))
            mailbox.post(
                txn,
                message.model_copy(
                    update={"status": MessageStatus.DELIVERED, "delivered_at": txn.at}
                ),
                EventType.MAILBOX_DELIVERED,
            )

    thread = threading.Thread(target=deliver)
    thread.start()
    result = cli("steer", "latest", "plan", "go", "--wait", "--timeout", "60s")
    thread.join()

    assert result.code == 0
    assert result.out.endswith(" delivered.\n")


def test_wait_gives_up_after_the_timeout_and_the_message_stays_queued(
    cli: Cli, make_run: MakeRun
) -> None:
    store = make_run()
    start(store)

    result = cli("steer", "latest", "plan", "go", "--wait-ack", "--timeout", "200ms")

    assert result.code == 3
    (message,) = store.messages(Box.STEERING)
    assert result.err == (
        f"crew: error: Message {message.id} to plan is still pending after 200ms; it stays "
        "queued and is delivered as soon as the task can take it.\n"
    )
    assert message.status is MessageStatus.PENDING


def test_a_wait_that_times_out_still_says_what_was_sent(cli: Cli, make_run: MakeRun) -> None:
    store = make_run()
    start(store)

    result = cli("steer", "latest", "plan", "go", "--wait", "--timeout", "100ms", "--json")

    assert result.code == 3
    (message,) = store.messages(Box.STEERING)
    sent = json.loads(result.out)
    assert sent["id"] == message.id and sent["status"] == "pending"
    assert sent["waitedFor"] == "delivered"
    assert sent["error"].startswith(f"Message {message.id} to plan is still pending after 100ms")
    assert result.err == f"crew: error: {sent['error']}\n"
    text = cli("steer", "latest", "plan", "again", "--wait", "--timeout", "100ms")
    assert text.code == 3
    assert text.out.splitlines()[0].startswith("Sent steer msg_")
    assert text.out.splitlines()[-1].endswith(" pending.")


def test_wait_reports_a_message_rejected_meanwhile(cli: Cli, make_run: MakeRun) -> None:
    store = make_run()
    start(store)

    def cancel_soon() -> None:
        _until_steered(store)
        from crew import verbs

        verbs.cancel(store, "plan", session=SESSION, grace=0.1)

    thread = threading.Thread(target=cancel_soon)
    thread.start()
    result = cli("steer", "latest", "plan", "go", "--wait")
    thread.join()

    assert result.code == 4
    assert "was rejected: task cancelled before delivery." in result.err


def test_cancel_and_handoff_from_the_shell(cli: Cli, make_run: MakeRun) -> None:
    store = make_run()
    start(store)

    handed = cli("handoff", "latest", "ci@runner")
    assert handed == CliResult(
        0, f"Run {store.run_id} now belongs to ci@runner (was {SESSION}).\n", ""
    )
    refused = cli("cancel", "latest")
    assert refused.code == 4 and "is owned by session 'ci@runner'" in refused.err

    cancelled = cli("cancel", "latest", "--session", "ci@runner", "--json")
    assert cancelled.code == 0
    data = json.loads(cancelled.out)
    assert data["cancelled"] == ["plan", "build"] and data["runStatus"] == "cancelled"

    again = cli("cancel", "latest", "--session", "ci@runner")
    assert again == CliResult(
        0, f"Nothing to cancel: run {store.run_id} already ended (cancelled).\n", ""
    )


def _read_until(fd: int, marker: bytes, timeout: float = 20.0) -> bytes:
    """What the terminal shows until `marker` appears, or until the program exits (b"" marker)."""
    shown, deadline = b"", time.monotonic() + timeout
    while not marker or marker not in shown:
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        assert ready, f"the terminal showed no {marker!r} within {timeout}s: {shown!r}"
        try:
            data = os.read(fd, 65536)
        except OSError:  # the terminal closed: the program has exited
            data = b""
        if not data:
            assert not marker, f"the program exited before showing {marker!r}: {shown!r}"
            return shown
        shown += data
    return shown


def test_a_secret_answer_typed_on_a_terminal_is_not_shown(make_run: MakeRun) -> None:
    store = make_run()
    ask(store, secret=True)
    argv = [sys.executable, "-m", "crew", "respond", "latest", "plan", "-"]
    pid, fd = pty.fork()
    if pid == 0:  # the child: crew on a terminal
        os.chdir(store.paths.home.root.parent)
        os.execve(sys.executable, argv, dict(os.environ))
    try:
        shown = _read_until(fd, SECRET_PROMPT.encode())
        os.write(fd, b"hunter2-deploy-token\n")
        shown += _read_until(fd, b"")
    except BaseException:
        os.kill(pid, signal.SIGKILL)  # it may still wait for its answer
        raise
    finally:
        _, status = os.waitpid(pid, 0)
        os.close(fd)

    assert os.waitstatus_to_exitcode(status) == 0, shown
    assert b"hunter2-deploy-token" not in shown  # neither echoed as typed nor printed after
    (answer,) = store.messages(Box.INBOX)
    assert answer.body == secret_answers.REDACTED


@pytest.mark.parametrize("folder", [" ", "secrets", "./secrets"])
def test_a_relative_secrets_folder_is_refused_and_nothing_is_written(
    cli: Cli, make_run: MakeRun, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, folder: str
) -> None:
    # The leader and `crew respond` each resolved it from their own folder: the answer was left
    # on disk where the command ran, and the leader called it lost.
    store = make_run()
    ask(store, secret=True)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CREW_SECRETS_DIR", folder)
    home = store.paths.root.parent.parent.parent
    before = snapshot_files(home), sorted(tmp_path.iterdir())

    result = cli("respond", "latest", "plan", "-", stdin="hunter2\n")

    assert (result.code, result.out) == (2, "")
    assert result.err.startswith(
        f"crew: error: CREW_SECRETS_DIR must be an absolute path, got {folder!r}"
    )
    assert (snapshot_files(home), sorted(tmp_path.iterdir())) == before


@pytest.mark.parametrize("user", ["bad\nname", "x" * 300, " spaced "])
def test_a_user_name_no_session_can_be_is_refused_naming_where_it_came_from(
    cli: Cli, make_run: MakeRun, monkeypatch: pytest.MonkeyPatch, user: str
) -> None:
    # CREW_SESSION_ID so named was refused, the same LOGNAME was recorded as the session.
    store = make_run()
    start(store)
    monkeypatch.delenv("CREW_SESSION_ID", raising=False)
    monkeypatch.setenv("LOGNAME", user)
    home = store.paths.root.parent.parent.parent
    before = snapshot_files(home)

    refused = cli("steer", "latest", "plan", "x", "--force")
    fast_path = fast.fast(["steer", "latest", "plan", "x", "--force", "--home", str(home)])

    assert (refused.code, refused.out, fast_path) == (2, "", None)
    assert refused.err.startswith("crew: error: Invalid session id ")
    assert "(from LOGNAME; set CREW_SESSION_ID or --session)" in refused.err
    assert snapshot_files(home) == before
    named = cli("steer", "latest", "plan", "x", "--session", SESSION)
    assert named.code == 0 and "defaultSession" not in store.paths.events.read_text()
