"""Blocking until something happens in a run, woken by file changes (never a sleep loop)."""

from __future__ import annotations

import time

from crew import clock
from crew.errors import CrewTimeout, Refused
from crew.follow import watch_folders
from crew.models import MailboxMessage
from crew.registry import MessageStatus
from crew.run import RunStore
from crew.store import jsonl

_REACHED = {
    MessageStatus.DELIVERED: frozenset({MessageStatus.DELIVERED, MessageStatus.ACKNOWLEDGED}),
    MessageStatus.ACKNOWLEDGED: frozenset({MessageStatus.ACKNOWLEDGED}),
}


def wait_for_message(
    store: RunStore,
    message: MailboxMessage,
    *,
    until: MessageStatus = MessageStatus.DELIVERED,
    timeout: float | None = None,
) -> MailboxMessage:
    """Block until `message` is delivered (or acknowledged); its latest state.

    Refused if it is rejected meanwhile; CrewTimeout (exit 3) when `timeout` passes first — the
    message stays pending either way.
    """
    wanted = _REACHED[until]
    deadline = None if timeout is None else time.monotonic() + timeout
    watcher = watch_folders([store.paths.mailbox_dir])  # before the first read: no change missed
    follower = jsonl.Follower(store.paths.box(message.kind.box), MailboxMessage)
    latest = message
    try:
        while True:
            for line in follower.poll().records:
                if line.id == message.id:
                    latest = line
            if latest.status in wanted:
                return latest
            if latest.status is MessageStatus.REJECTED:
                raise Refused(f"Message {message.id} was rejected: {latest.reason}.")
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise CrewTimeout(_still(latest, until, timeout or 0.0))
            watcher.wait(remaining)
    finally:
        watcher.close()


def _still(message: MailboxMessage, until: MessageStatus, timeout: float) -> str:
    waited = clock.format_duration(timeout)
    if message.status is MessageStatus.PENDING:
        return (
            f"Message {message.id} to {message.task_id} is still pending after {waited}; "
            "it stays queued and is delivered as soon as the task can take it."
        )
    return (
        f"Message {message.id} to {message.task_id} was delivered but not {until} after {waited}."
    )
