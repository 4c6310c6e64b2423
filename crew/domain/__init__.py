"""The rules of a run, as functions over a transaction, one module per life-cycle:

- `tasks`: a task's status and fields (the transition table, retries, dependents);
- `mailbox`: a message's status (sent, delivered, acknowledged, decided, rejected, carried over);
- `runs`: the run record (created, led, owned, ended; its status follows its tasks);
- `gate`: what a request must pass before anything is written (ownership, replay, limits);
- `lease`: who leads a run, and whether that leader is alive.

Every change goes through `change()`: a transaction of the store that settles the rules before it
commits.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from crew.store.runstore import RunStore
    from crew.store.txn import Txn


def change(store: RunStore, *, epoch: int | None = None) -> AbstractContextManager[Txn]:
    """A transaction on the run that applies the rules before it commits.

    `epoch` fences a leader: one that was taken over stops without writing (StaleLeader).
    """
    return store.transaction(epoch=epoch, settle=settle)


def settle(txn: Txn) -> None:
    """Apply the rules that follow from what a transaction staged: a queued task whose
    dependency failed or was cancelled is cancelled; a task waiting for the tasks it spawned gets
    their results once they have all ended; messages still pending for a task that ended are
    rejected; the run's status follows its tasks."""
    from crew.domain import adding, mailbox, runs, tasks  # here: reading a run never loads rules

    tasks.cancel_dependents(txn)
    adding.results_to_parents(txn)
    mailbox.reject_undeliverable(txn, tasks.ended(txn))
    runs.follow_tasks(txn)
