"""`--json` of every command: the exact keys of its document, and every fact its text view shows.

Each test runs a command with --json and checks the keys of the document (in their documented
order), then runs it without --json and checks that the text is written from facts the document
holds: the helpers below rebuild each text view from a JSON document alone. What a command prints
on stderr (warnings, the --force note) is printed in both modes and is in the document too.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import SESSION, CliResult, config, snapshot_files
from leaders import WORKER, Leader, store_of, write_crew
from test_cli_inspect import waiting_run
from test_verbs import ask, start

from crew import verbs
from crew.domain import change, mailbox
from crew.models import Event
from crew.paths import Home
from crew.registry import Box, EventType
from crew.render_streams import progress_line
from crew.schemas import SCHEMAS
from crew.store import jsonl
from crew.store.runstore import RunStore
from crew.text import format_counts, short
from crew.waiting import Until, wait_for_run

Cli = Callable[..., CliResult]
MakeRun = Callable[..., RunStore]
Doc = dict[str, Any]

#: A pid beyond pid_max: no process has it, so whoever cancels finds the worker gone.
GONE_PID = 2**22 + 12345

#: A message, as the mailbox holds it, before it is delivered.
MESSAGE_KEYS = [
    "id", "direction", "kind", "from", "to", "taskId", "body", "status", "priority", "sentAt", "data",
]  # fmt: skip
#: What a send adds to its message.
SENT_KEYS = [*MESSAGE_KEYS, "runId", "replayed", "dropped", "pending", "leader", "warnings"]
EVENT_KEYS = ["id", "seq", "runId", "at", "type", "taskId", "message", "data", "endSeq"]
TERMINAL = {"completed", "failed", "cancelled"}


def rows(out: str) -> dict[str, list[str]]:
    """A table printed by rich (no borders) as its cells, by the first cell of each row."""
    table = {}
    for line in out.splitlines():
        cells = re.split(r" {2,}", line.strip())
        table[cells[0]] = cells
    return table


# ----------------------------------------------------------------------------- sending


#: How the text view names what was sent, by message kind.
NOUNS = {"respond": "answer", "steer": "steer", "followUp": "follow-up", "nudge": "nudge"}


def sent_text(doc: Doc) -> str:
    """The text view of respond, steer, follow-up or nudge, written from its JSON document."""
    message, run = doc["id"], doc["runId"]
    if doc["replayed"]:
        lines = [f"Already sent as {message} (same idempotency key): nothing new was written."]
    else:
        lines = [f"Sent {NOUNS[doc['kind']]} {message} to {doc['taskId']} in run {run}."]
    if doc["leader"] != "alive" and doc["status"] == "pending":
        lines.append(
            f"No leader is running: it is delivered once one leads the run (`crew resume {run}`)."
        )
    if "waitedFor" in doc:
        lines.append(f"{message} {doc['status']}.")
    return "".join(f"{line}\n" for line in lines)


def stderr_of(doc: Doc) -> str:
    """What a verb prints on stderr, written from its JSON document: warnings, the --force note."""
    text = "".join(f"crew: warning: {warning}\n" for warning in doc.get("warnings", []))
    if "overridden" in doc:
        text += f"crew: acted on a run owned by {doc['overridden']} (--force; recorded)\n"
    return text


def sent_then_replayed(cli: Cli, *args: str) -> Doc:
    """Send once (text view), then repeat the very request (same --idempotency-key) with --json
    and as text: the text of the send and of the replay are both written from the replay's JSON."""
    sent = cli(*args)
    replay = cli(*args, "--json")
    again = cli(*args)

    assert (sent.code, replay.code, again.code) == (0, 0, 0)
    doc: Doc = json.loads(replay.out)
    assert doc["replayed"] is True
    assert sent.out == sent_text({**doc, "replayed": False})
    assert again.out == sent_text(doc)
    assert replay.err == again.err == ""  # a replay writes nothing: no warning, no override
    return doc


def test_respond_json_has_the_answer_and_the_question_it_closes(
    cli: Cli, make_run: MakeRun
) -> None:
    store = make_run()
    contact = ask(store)

    result = cli("respond", store.run_id, "plan", "Postgres", "--json")

    assert result.code == 0 and result.err == ""
    doc = json.loads(result.out)
    assert list(doc) == SENT_KEYS
    (answer,) = store.messages(Box.INBOX)
    assert doc == {
        **answer.to_dict(),
        "runId": store.run_id,
        "replayed": False,
        "dropped": [],
        "pending": 1,
        "leader": "absent",
        "warnings": [],
    }
    assert doc["kind"] == "respond" and doc["data"]["contactId"] == contact.id

    ask(store)
    replayed = sent_then_replayed(
        cli, "respond", store.run_id, "plan", "sqlite", "--idempotency-key", "answer-2"
    )
    assert list(replayed) == SENT_KEYS
    assert replayed["body"] == "sqlite" and replayed["data"]["idempotencyKey"] == "answer-2"


def test_respond_wait_ack_json_says_what_it_waited_for(
    cli: Cli, tmp_path: Path, home: Home
) -> None:
    write_crew(
        tmp_path, [{"id": "plan", "prompt": "ask:need_input:Which database? ; read ; ack ; exit:0"}]
    )
    leader = Leader("run", "crew.toml", cwd=tmp_path)
    store = store_of(home, leader.run_id)
    (task,) = wait_for_run(store, Until.WAITING, timeout=20).tasks
    assert task.contact is not None
    answer = ("respond", leader.run_id, "plan", "Postgres", "--idempotency-key", "answer-1")
    args = (*answer, "--wait-ack", "--timeout", "20s")

    result = cli(*args, "--json")

    assert result.code == 0 and result.err == ""
    doc = json.loads(result.out)
    assert list(doc) == [
        *MESSAGE_KEYS[:10],
        "deliveredAt",
        "acknowledgedAt",
        "data",
        *SENT_KEYS[len(MESSAGE_KEYS) :],
        "waitedFor",
    ]
    assert doc["waitedFor"] == doc["status"] == "acknowledged"
    assert doc["leader"] == "alive"
    assert doc["replayed"] is False and doc["data"]["contactId"] == task.contact.id
    assert leader.finish() == 0
    retried = cli(*args)
    assert retried == CliResult(0, sent_text({**doc, "replayed": True, "leader": "absent"}), "")
    assert retried.out == (
        f"Already sent as {doc['id']} (same idempotency key): nothing new was written.\n"
        f"{doc['id']} acknowledged.\n"
    )


def test_steer_json_tells_a_retried_ci_step_that_it_was_replayed(
    cli: Cli, make_run: MakeRun
) -> None:
    store = make_run()
    start(store)
    args = ("steer", store.run_id, "plan", "deploy to staging", "--idempotency-key", "job-7")

    first = cli(*args, "--json")
    before = snapshot_files(store.paths.root)
    retry = cli(*args, "--json")

    assert (first.code, retry.code) == (0, 0)
    sent, replayed = json.loads(first.out), json.loads(retry.out)
    assert list(sent) == list(replayed) == SENT_KEYS
    assert (sent["replayed"], replayed["replayed"]) == (False, True)
    assert replayed["id"] == sent["id"] and replayed["body"] == "deploy to staging"
    assert (sent["kind"], sent["priority"], sent["leader"]) == ("steer", "high", "absent")
    assert snapshot_files(store.paths.root) == before
    again = sent_then_replayed(
        cli, "steer", store.run_id, "plan", "use sqlite", "--idempotency-key", "job-8"
    )
    assert list(again) == SENT_KEYS and again["id"] != sent["id"]


def test_follow_up_json_has_what_backpressure_dropped_and_the_warnings(
    cli: Cli, make_run: MakeRun
) -> None:
    store = make_run(config(limits={"maxPendingFollowUps": 2, "warnPending": 1}))
    backlog = (
        "task build has 2 undelivered message(s) of this kind (warning above 1; beyond 2 the "
        "oldest is dropped)"
    )

    def send(body: str, *json_flag: str) -> tuple[CliResult, Doc]:
        result = cli("follow-up", store.run_id, "build", body, *json_flag)
        assert result.code == 0
        latest = store.messages(Box.INBOX)[-1]
        return result, json.loads(result.out) if json_flag else {"id": latest.id}

    _, one = send("item 1", "--json")
    second, two = send("item 2", "--json")
    third, three = send("item 3", "--json")

    assert list(one) == list(two) == list(three) == SENT_KEYS
    assert (one["pending"], one["dropped"], one["warnings"]) == (1, [], [])
    assert (two["pending"], two["dropped"], two["warnings"]) == (2, [], [backlog])
    assert (three["pending"], three["dropped"]) == (2, [one["id"]])
    assert three["warnings"] == [
        f"dropped the oldest pending followUp {one['id']} to build: more than 2 were waiting "
        "(backpressure)",
        backlog,
    ]
    assert second.err == stderr_of(two) and third.err == stderr_of(three)

    shown, four = send("item 4")
    assert shown.out == sent_text({**three, "id": four["id"]})
    assert shown.err == stderr_of(
        {"warnings": [w.replace(one["id"], two["id"]) for w in three["warnings"]]}
    )


def test_nudge_json_names_the_owner_that_force_overrode(cli: Cli, make_run: MakeRun) -> None:
    store = make_run(session="owner@host")
    start(store)

    result = cli("nudge", store.run_id, "plan", "--force", "--json")

    assert result.code == 0
    doc = json.loads(result.out)
    assert list(doc) == [*SENT_KEYS, "overridden"]
    assert doc["overridden"] == "owner@host"
    assert doc["kind"] == "nudge" and doc["data"]["source"] == "nudge"
    assert doc["body"] == "Please report your current status, blocker, or smallest next step."
    assert result.err == stderr_of(doc)
    assert result.err == "crew: acted on a run owned by owner@host (--force; recorded)\n"

    shown = cli("nudge", store.run_id, "plan", "where are you?", "--force")
    latest = store.messages(Box.STEERING)[-1]
    assert shown == CliResult(0, sent_text({**doc, "id": latest.id}), result.err)
    replayed = sent_then_replayed(
        cli, "nudge", store.run_id, "plan", "status?", "--force", "--idempotency-key", "n-1"
    )
    assert list(replayed) == SENT_KEYS  # a replay writes nothing, so it overrides nothing


# ----------------------------------------------------------------------------- cancel, handoff


def cancel_text(doc: Doc) -> str:
    """The text view of a cancel, written from its JSON document."""
    if "already" in doc:
        return f"Nothing to cancel: {doc['already']}.\n"
    lines = [f"Cancelled {', '.join(doc['cancelled']) or 'nothing'} in run {doc['runId']}."]
    if doc["rejected"]:
        lines.append(f"Rejected {len(doc['rejected'])} pending message(s) (task cancelled).")
    lines += [f"Worker of {s['task']} (pid {s['pid']}): {s['outcome']}." for s in doc["stopped"]]
    if doc["runStatus"] in TERMINAL:
        lines.append(f"The run has ended ({doc['runStatus']}).")
    return "".join(f"{line}\n" for line in lines)


def test_cancel_json_lists_what_ended_what_was_rejected_and_which_workers_stopped(
    cli: Cli, make_run: MakeRun
) -> None:
    def cancellable() -> RunStore:
        store = make_run(session="owner@host")
        start(store, pid=GONE_PID)
        verbs.steer(store, "plan", "hurry", session="owner@host")
        return store

    shown, documented = cancellable(), cancellable()

    result = cli("cancel", documented.run_id, "--force", "--json")

    assert result.code == 0
    doc = json.loads(result.out)
    assert list(doc) == [
        "runId",
        "task",
        "cancelled",
        "rejected",
        "stopped",
        "runStatus",
        "overridden",
    ]
    (steer,) = documented.messages(Box.STEERING)
    assert doc == {
        "runId": documented.run_id,
        "task": None,
        "cancelled": ["plan", "build"],
        "rejected": [steer.id],
        "stopped": [{"task": "plan", "pid": GONE_PID, "outcome": "gone"}],
        "runStatus": "cancelled",
        "overridden": "owner@host",
    }
    assert result.err == stderr_of(doc)
    text = cli("cancel", shown.run_id, "--force")
    assert text == CliResult(0, cancel_text({**doc, "runId": shown.run_id}), result.err)

    again = cli("cancel", documented.run_id, "--force", "--json")
    ended = json.loads(again.out)
    assert list(ended) == [
        "runId",
        "task",
        "cancelled",
        "rejected",
        "stopped",
        "runStatus",
        "already",
    ]
    assert ended["already"] == f"run {documented.run_id} already ended (cancelled)"
    assert (ended["cancelled"], ended["rejected"], ended["stopped"]) == ([], [], [])
    assert again.err == ""  # nothing was done, so nothing was overridden
    assert cli("cancel", documented.run_id, "--force") == CliResult(0, cancel_text(ended), "")


def handoff_text(doc: Doc) -> str:
    """The text view of a handoff, written from its JSON document."""
    if not doc["changed"]:
        return f"Run {doc['runId']} is already owned by {doc['owner']}.\n"
    return f"Run {doc['runId']} now belongs to {doc['owner']} (was {doc['previous']}).\n"


def test_handoff_json_says_who_owned_the_run_and_who_owns_it_now(
    cli: Cli, make_run: MakeRun
) -> None:
    shown, documented = make_run(), make_run()

    result = cli("handoff", documented.run_id, "ci@runner", "--json")

    assert result.code == 0 and result.err == ""
    doc = json.loads(result.out)
    assert list(doc) == ["runId", "previous", "owner", "changed"]
    assert doc == {
        "runId": documented.run_id,
        "previous": SESSION,
        "owner": "ci@runner",
        "changed": True,
    }
    assert cli("handoff", shown.run_id, "ci@runner") == CliResult(
        0, handoff_text({**doc, "runId": shown.run_id}), ""
    )

    forced = cli("handoff", documented.run_id, SESSION, "--force", "--json")
    back = json.loads(forced.out)
    assert list(back) == ["runId", "previous", "owner", "changed", "overridden"]
    assert (back["previous"], back["owner"], back["overridden"]) == (
        "ci@runner",
        SESSION,
        "ci@runner",
    )
    assert forced.err == stderr_of(back)
    assert cli("handoff", shown.run_id, SESSION, "--force") == CliResult(
        0, handoff_text({**back, "runId": shown.run_id}), forced.err
    )

    same = json.loads(cli("handoff", documented.run_id, SESSION, "--json").out)
    assert same == {
        "runId": documented.run_id,
        "previous": SESSION,
        "owner": SESSION,
        "changed": False,
    }
    assert cli("handoff", documented.run_id, SESSION) == CliResult(0, handoff_text(same), "")


# ----------------------------------------------------------------------------- inspecting


def test_runs_json_holds_every_column_of_the_table(cli: Cli, make_run: MakeRun) -> None:
    unreadable, ended, live, recovered = make_run(), make_run(), make_run(), make_run()
    unreadable.paths.manifest.write_text("{")
    unreadable.paths.events.write_text("junk\n")
    verbs.cancel(ended, session=SESSION)
    ask(live)
    recovered.paths.task_file("plan").unlink()

    result = cli("runs", "--json")

    assert result.code == 0 and result.err == ""
    docs = json.loads(result.out)
    problem = docs.pop(0)
    assert problem["runId"] == recovered.run_id
    assert problem["problem"] == (
        "tasks/plan.json is missing; showing the state rebuilt from events.jsonl"
    )
    assert [d["runId"] for d in docs] == [live.run_id, ended.run_id, unreadable.run_id]
    run_keys = ["runId", "crew", "status", "ownerSessionId", "leaderEpoch", "createdAt"]
    assert list(docs[0]) == [*run_keys, "crewDir", "stateVersion", "tasks"]
    assert list(docs[1]) == [*run_keys, "endedAt", "crewDir", "stateVersion", "tasks"]
    assert list(docs[2]) == ["runId", "problem"]
    assert docs[0]["tasks"] == {"waiting": 1, "queued": 1}
    assert docs[1]["tasks"] == {"cancelled": 2}
    assert docs[2]["problem"].startswith(f"Run {unreadable.run_id} has no readable state")

    text = cli("runs")
    assert text.code == 0 and text.err == ""
    shown, _, noted = text.out.partition("\n! ")
    assert noted == f"{recovered.run_id}: {problem['problem']}\n"  # a readable run's problem
    table = rows(shown + "\n")
    assert list(table) == ["RUN", problem["runId"], *(d["runId"] for d in docs)]
    for doc in docs[:2]:
        cells = table[doc["runId"]]
        created = cells.pop(4)
        assert re.fullmatch(r"\S+ ago", created)  # createdAt, as an age
        assert cells == [
            doc["runId"],
            doc["crew"],
            doc["status"],
            format_counts(doc["tasks"]),
            doc["ownerSessionId"],
        ]
    assert table[unreadable.run_id] == [unreadable.run_id, "?", "unreadable", docs[2]["problem"]]


def test_status_json_has_the_leader_and_everything_the_table_shows(
    cli: Cli, tmp_path: Path, home: Home
) -> None:
    write_crew(
        tmp_path,
        [
            {
                "id": "plan",
                "prompt": "ask:need_selection:Which database? [postgres|sqlite] ; read ; exit:0",
            },
            {"id": "build", "prompt": "exit:0", "dependsOn": ["plan"]},
        ],
    )
    leader = Leader("run", "crew.toml", cwd=tmp_path)
    store = store_of(home, leader.run_id)
    wait_for_run(store, Until.WAITING, timeout=20)
    verbs.follow_up(store, "build", "and add tests", session=SESSION)

    result = cli("status", leader.run_id, "--json")

    assert result.code == 0 and result.err == ""
    doc = json.loads(result.out)
    assert list(doc) == ["run", "tasks", "pending", "warnings", "leader"]
    assert list(doc["leader"]) == ["alive", "pid", "host", "heartbeatAt"]
    assert doc["leader"]["alive"] is True
    assert (doc["leader"]["pid"], doc["leader"]["host"]) == (leader.pid, socket.gethostname())
    state = store.state()
    assert doc["run"] == state.run.to_dict()
    assert doc["tasks"] == [t.to_dict() for t in state.task_list()]
    assert doc["pending"] == {
        "plan": {"inbox": 0, "steering": 0},
        "build": {"inbox": 1, "steering": 0},
    }
    assert doc["warnings"] == []
    plan = doc["tasks"][0]
    contact = plan["contact"]

    text = cli("status", leader.run_id)

    assert text.code == 0 and text.err == ""
    run = doc["run"]
    header, *lines = text.out.splitlines()
    assert header.startswith(
        f"Run {run['runId']} · crew {run['crew']} · {run['status']} · owner "
        f"{run['ownerSessionId']} · created "
    )
    assert header.endswith(f" ago · leader pid {doc['leader']['pid']}")
    table = rows("\n".join(lines))
    assert table["plan"][:4] == ["plan", "waiting", "w", str(plan["attempt"])]  # no failures
    assert re.fullmatch(r"\S+ ago", table["plan"][4])  # waitingSince, as an age
    assert table["plan"][5:] == ["-", f"? {contact['prompt']}"]  # no pending message; the question
    assert table["build"] == ["build", "queued", "w", "0", "-", "1 inbox", "after plan"]
    assert (
        "\nWaiting for an answer:\n"
        f"  plan ({contact['id']}) {contact['type']}: {contact['prompt']} "
        f"[{'|'.join(contact['options'])}]\n"
        f'    answer with: crew respond {run["runId"]} plan "…"\n'
    ) in text.out
    assert "Warnings:" not in text.out

    leader.process.kill()  # SIGKILL: leader.json stays behind, naming a pid that is gone
    leader.finish()
    stale = json.loads(cli("status", leader.run_id, "--json").out)
    assert list(stale["leader"]) == list(doc["leader"]) and stale["leader"]["alive"] is False
    assert (stale["leader"]["pid"], stale["leader"]["host"]) == (leader.pid, socket.gethostname())
    assert stale["warnings"] == [
        f"the leader is gone (leader pid {leader.pid} on {socket.gethostname()} is gone): "
        f"run `crew resume {leader.run_id}` to lead the run again"
    ]
    shown = cli("status", leader.run_id).out
    assert "leader pid" not in shown.splitlines()[0]
    assert shown.endswith(f"\nWarnings:\n  ! {stale['warnings'][0]}\n")


def timeline_text(docs: list[Doc]) -> str:
    """The text view of `crew mailbox`, written from its JSON document (the decisions used here
    are preemptions: the preempted message names the one that preempted it, `by`)."""
    lines: list[str] = []
    current = None
    for message in docs:
        if message["taskId"] != current:
            lines += [""] if current is not None else []
            current = message["taskId"]
            lines.append(current)
        arrow = "→" if message["direction"] == "inbox" else "←"
        lines.append(
            f"  {arrow} {message['kind']:<8} {message['id']}  {message['priority']:<6} "
            f"{short(message['body'], 70)!r}"
        )
        steps = " → ".join(
            f"{h['status']} {h.get('at', '')[11:23]}".rstrip() for h in message["history"]
        )
        reason = f" ({message['reason']})" if "reason" in message else ""
        lines.append(f"      {steps}{reason}")
        decided = [
            f"preempted by {d['by']}" if "by" in d else f"preempted ({d['reason']})"
            for d in message["decisions"]
        ]
        if decided:
            times = [d["at"][11:23] for d in message["decisions"]]
            lines.append(
                "      " + " → ".join(f"{d} {t}" for d, t in zip(decided, times, strict=True))
            )
    return "".join(f"{line}\n" for line in lines)


def test_mailbox_json_holds_each_message_its_history_and_the_decisions_about_it(
    cli: Cli, make_run: MakeRun
) -> None:
    store = waiting_run(make_run)  # plan: one steer delivered, one pending
    delivered, pending = store.messages(Box.STEERING)
    verbs.follow_up(store, "build", "later", session=SESSION)
    with change(store) as txn:
        (later,) = txn.messages(Box.INBOX).values()
        mailbox.reject(txn, later, "no longer needed")
        decision = {
            "action": "preempt",
            "item": pending.id,
            "focus": delivered.id,
            "reason": "urgent",
        }
        mailbox.decide(txn, "plan", decision)

    result = cli("mailbox", store.run_id, "--json")

    assert result.code == 0 and result.err == ""
    docs = json.loads(result.out)
    assert [d["id"] for d in docs] == [delivered.id, pending.id, later.id]
    timeline = ["box", "history", "decisions"]
    assert list(docs[0]) == [*MESSAGE_KEYS[:10], "deliveredAt", *timeline]
    assert list(docs[1]) == [*MESSAGE_KEYS, *timeline]
    assert list(docs[2]) == [*MESSAGE_KEYS[:10], "reason", "data", *timeline]
    assert [d["box"] for d in docs] == ["steering", "steering", "inbox"]
    assert [[h["status"] for h in d["history"]] for d in docs] == [
        ["pending", "delivered"],
        ["pending"],
        ["pending", "rejected"],
    ]
    assert all(set(h) == {"status", "at"} for h in docs[0]["history"])
    assert docs[2]["history"][-1]["reason"] == docs[2]["reason"] == "no longer needed"
    assert [d["action"] for d in docs[0]["decisions"]] == ["preempt"]
    assert docs[0]["decisions"][0]["by"] == pending.id
    assert docs[1]["decisions"][0]["reason"] == "urgent"

    text = cli("mailbox", store.run_id)

    assert text == CliResult(0, timeline_text(docs), "")


def event_text(doc: Doc) -> str:
    """One line of `crew events`, written from the event's JSON line."""
    task = doc.get("taskId", "-")
    return f"{doc['at']}  #{doc['seq']:<5} {doc['type']:<22} {task:<16} {doc.get('message', '')}".rstrip()


def test_events_json_lines_are_the_log_and_the_text_is_written_from_them(
    cli: Cli, make_run: MakeRun
) -> None:
    store = waiting_run(make_run)
    with store.paths.events.open("ab") as handle:
        handle.write(b"garbage\n")
    with change(store) as txn:
        txn.record(EventType.ATTENTION_DECISION, task_id="plan")

    result = cli("events", store.run_id, "--json")

    assert result.code == 0
    lines = result.out.splitlines()
    assert lines == [
        line for line in store.paths.events.read_text().splitlines() if line != "garbage"
    ]
    docs = [json.loads(line) for line in lines]
    for doc in docs:
        assert list(doc) == [k for k in EVENT_KEYS if k in doc]
        assert {"id", "seq", "runId", "at", "type"} <= set(doc)
    assert result.err.startswith(f"crew: warning: skipped {store.paths.events}:")

    text = cli("events", store.run_id)

    assert text == CliResult(0, "".join(event_text(d) + "\n" for d in docs), result.err)


def waited_text(doc: Doc) -> str:
    """The text view of `crew wait`, written from its JSON document."""
    lines = []
    for task in doc["tasks"]:
        contact = task.get("contact")
        if contact and task["status"] not in TERMINAL:
            options = f" [{'|'.join(contact['options'])}]" if contact["options"] else ""
            lines.append(
                f"{task['id']} {task['status']} ({contact['id']}): {contact['prompt']}{options}"
            )
        else:
            lines.append(f"{task['id']} {task['status']}")
    return "".join(f"{line}\n" for line in lines)


def test_wait_json_holds_the_tasks_the_text_lists(cli: Cli, make_run: MakeRun) -> None:
    store = waiting_run(make_run)

    result = cli("wait", store.run_id, "--for", "waiting", "--json")

    assert result.code == 0 and result.err == ""
    doc = json.loads(result.out)
    assert list(doc) == ["runId", "for", "tasks"]
    assert doc == {
        "runId": store.run_id,
        "for": "waiting",
        "tasks": [store.state().tasks["plan"].to_dict()],
    }
    shown = cli("wait", store.run_id, "--for", "waiting")
    assert shown == CliResult(0, waited_text(doc), "")
    assert shown.out == "plan waiting (q_abc123): Which database? [postgres|sqlite]\n"

    verbs.cancel(store, session=SESSION)
    done = json.loads(cli("wait", store.run_id, "--json").out)
    assert list(done) == ["runId", "for", "tasks"] and done["for"] == "done"
    assert done["tasks"] == [t.to_dict() for t in store.state().task_list()]
    assert cli("wait", store.run_id) == CliResult(1, waited_text(done), "")  # a cancelled run: 1


def test_wait_for_started_holds_the_tasks_that_run_and_refuses_one_that_never_will(
    cli: Cli, make_run: MakeRun
) -> None:
    store = make_run()
    start(store, "plan")

    doc = json.loads(cli("wait", store.run_id, "--for", "started", "--json").out)

    assert doc == {
        "runId": store.run_id,
        "for": "started",
        "tasks": [store.state().tasks["plan"].to_dict()],
    }
    verbs.cancel(store, session=SESSION)  # build is cancelled before it ever started
    refused = cli("wait", store.run_id, "--for", "started", "--task", "build")
    assert refused.code == 4 and refused.out == ""
    assert refused.err == "crew: error: Task build ended (cancelled) without starting.\n"
    assert cli("wait", store.run_id, "--for", "started", "--task", "plan").code == 0
    wrong = cli("wait", store.run_id, "--for", "begun")
    assert wrong.code == 2 and "expected one of 'started', 'waiting', 'done'" in wrong.err


# ----------------------------------------------------------------------------- admin


def test_init_json_says_where_the_home_is_and_whether_it_was_created(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CREW_HOME")
    documented, shown = tmp_path / "one", tmp_path / "two"
    documented.mkdir()
    shown.mkdir()

    result = cli("init", str(documented), "--json")

    assert result.code == 0 and result.err == ""
    doc = json.loads(result.out)
    assert list(doc) == ["home", "config", "created", "wroteConfig"]
    home = documented / ".crew"
    config = str(home / "crew.toml")
    assert doc == {"home": str(home), "config": config, "created": True, "wroteConfig": True}
    # The text names the crew definition and the state folder, which every home has (SPEC §1).
    assert cli("init", str(shown)) == CliResult(
        0,
        f"Created {shown / '.crew'}\n"
        "  crew.toml   the crew definition: edit it, then `crew run`\n"
        "  state/      runs, events and mailboxes (private to you)\n",
        "",
    )

    again = cli("init", str(documented), "--json")
    assert json.loads(again.out) == {**doc, "created": False, "wroteConfig": False}
    assert again.err == f"crew: {doc['home']} already exists; left it untouched.\n"
    assert cli("init", str(documented)) == CliResult(0, "", again.err)
    (home / "crew.toml").unlink()  # a home that lacks its crew.toml gets the template
    completed = cli("init", str(documented), "--json")
    assert json.loads(completed.out) == {**doc, "created": False, "wroteConfig": True}


def doctor_text(doc: Doc) -> str:
    """The text view of `crew doctor`, written from its JSON document."""
    lines = []
    for finding in doc["findings"]:
        where = finding.get("file", finding["runId"])
        if "line" in finding:
            where += f":{finding['line']}"
        mark = " [needs attention]" if not finding["repairable"] else ""
        lines.append(
            f"{where}: {finding['problem']}{' [repaired]' if finding['repaired'] else mark}"
        )
    runs = f"{len(doc['runs'])} run{'s' * (len(doc['runs']) != 1)}"
    left = [f for f in doc["findings"] if not f["repaired"]]
    if not doc["findings"]:
        lines.append(f"Checked {runs}: no problems found.")
    elif doc["clean"]:
        lines.append(f"Checked {runs}: repaired {len(doc['findings'])} problem(s).")
    else:
        repairable = not doc["repair"] and any(f["repairable"] for f in left)
        hint = " Run `crew doctor --repair` to fix what can be fixed." if repairable else ""
        lines.append(f"Checked {runs}: {len(left)} problem(s).{hint}")
    return "".join(f"{line}\n" for line in lines)


def test_doctor_json_lists_every_finding_the_text_reports(cli: Cli, make_run: MakeRun) -> None:
    def damaged() -> RunStore:
        store = make_run()
        with store.paths.events.open("ab") as handle:
            handle.write(b"not json at all\n")
        (store.paths.mailbox_dir / "inbox.jsonl").write_bytes(b'{"id": "msg_1", "truncated')
        store.paths.leader.parent.mkdir(parents=True, exist_ok=True)
        store.paths.leader.write_text(
            json.dumps(
                {
                    "pid": GONE_PID,
                    "host": os.uname().nodename,
                    "session": "x",
                    "epoch": 1,
                    "startedAt": "2026-11-30T03:41:00.123456Z",
                    "heartbeatAt": "2026-11-30T03:41:00.123456Z",
                }
            )
        )
        return store

    documented, shown = damaged(), damaged()

    result = cli("doctor", documented.run_id, "--json")

    assert result.code == 1 and result.err == ""
    doc = json.loads(result.out)
    assert list(doc) == ["clean", "repair", "runs", "findings"]
    assert (doc["clean"], doc["repair"], doc["runs"]) == (False, False, [documented.run_id])
    in_file = ["runId", "problem", "file", "line", "repairable", "repaired"]
    assert [list(f) for f in doc["findings"]] == [
        in_file,
        in_file,
        ["runId", "problem", "file", "repairable", "repaired"],
    ]
    assert [f["file"] for f in doc["findings"]] == [
        str(documented.paths.events),
        str(documented.paths.mailbox_dir / "inbox.jsonl"),
        str(documented.paths.leader),
    ]
    assert [f["repairable"] for f in doc["findings"]] == [True, True, False]

    def as_shown(output: str) -> Doc:
        """The document `shown` would have: the same damage, under its own run id."""
        twin: Doc = json.loads(output.replace(documented.run_id, shown.run_id))
        return twin

    assert cli("doctor", shown.run_id) == CliResult(1, doctor_text(as_shown(result.out)), "")

    repaired = cli("doctor", documented.run_id, "--repair", "--json")
    after = json.loads(repaired.out)
    assert repaired.code == 1  # the stale leader needs a person: `crew resume`
    assert (after["clean"], after["repair"]) == (False, True)
    assert [f["repaired"] for f in after["findings"]] == [True, True, False]
    assert cli("doctor", shown.run_id, "--repair") == CliResult(
        1, doctor_text(as_shown(repaired.out)), ""
    )


def test_schema_is_always_json(cli: Cli) -> None:
    result = cli("schema")

    assert result.code == 0 and result.err == ""
    doc = json.loads(result.out)
    assert list(doc) == list(SCHEMAS)
    for name in SCHEMAS:
        assert json.loads(cli("schema", name).out) == doc[name]
    assert list(doc["message"]["properties"]) == [
        *MESSAGE_KEYS[:10],
        "deliveredAt",
        "acknowledgedAt",
        "reason",
        "data",
    ]


# ----------------------------------------------------------------------------- leading


def _crew(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "crew", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _progress(store: RunStore, *, after: int = 0) -> str:
    """What `crew run` shows a person while it leads: a line per event worth showing (of the
    events after the first `after`)."""
    lines = [progress_line(e) for e in jsonl.read(store.paths.events, Event).records[after:]]
    return "".join(f"{line}\n" for line in lines if line)


LED_KEYS = ["runId", "outcome", "status", "tasks", "exitCode"]


def test_run_json_streams_every_event_then_one_summary_line(tmp_path: Path, home: Home) -> None:
    write_crew(
        tmp_path, [{"id": "ok", "prompt": "say:hi ; exit:0"}, {"id": "bad", "prompt": "exit:3"}]
    )

    result = _crew("run", "crew.toml", "--json", "--no-input", cwd=tmp_path)

    *events, last = result.stdout.splitlines()
    summary = json.loads(last)
    assert list(summary) == LED_KEYS
    store = store_of(home, summary["runId"])
    assert summary == {
        "runId": store.run_id,
        "outcome": "ended",
        "status": "failed",
        "tasks": {"completed": 1, "failed": 1},
        "exitCode": 1,
    }
    assert result.returncode == summary["exitCode"]
    assert events == store.paths.events.read_text().splitlines()
    assert json.loads(events[0])["type"] == "run.created"
    assert json.loads(events[-1])["type"] == "run.ended"
    # The text view's summary, printed on stderr in both modes: status and counts, and for a
    # failed run how to run again what failed.
    assert result.stderr == (
        f"crew: run {store.run_id} {summary['status']}: {format_counts(summary['tasks'])}\n"
        f"crew: run what did not complete again with `crew rerun {store.run_id} --failed`\n"
    )

    shown = _crew("run", "crew.toml", "--no-input", cwd=tmp_path)
    other = store_of(home, shown.stderr.split()[2])
    assert shown.returncode == 1
    assert shown.stdout == _progress(other)  # a line per event: all of them are in the stream
    assert shown.stderr == f"crew: run {other.run_id}\n" + result.stderr.replace(
        store.run_id, other.run_id
    )


def test_run_detach_json_names_the_run_and_the_leader_process(tmp_path: Path, home: Home) -> None:
    write_crew(tmp_path, [{"id": "t", "prompt": "ask:need_input:Go on? ; read ; exit:0"}])

    result = _crew("run", "crew.toml", "--detach", "--json", cwd=tmp_path)
    shown = _crew("run", "crew.toml", "--detach", cwd=tmp_path)

    assert (result.returncode, result.stderr) == (0, "")
    doc = json.loads(result.stdout)
    assert list(doc) == ["runId", "pid"]
    store = store_of(home, doc["runId"])
    other = store_of(home, shown.stdout.strip())
    assert shown.stdout == f"{other.run_id}\n" and (shown.returncode, shown.stderr) == (0, "")
    for each in (store, other):
        wait_for_run(each, Until.WAITING, timeout=20)
    assert json.loads(store.paths.leader.read_text())["pid"] == doc["pid"]
    for each in (store, other):
        verbs.respond(each, "t", "yes", session=SESSION)
        assert wait_for_run(each, Until.DONE, timeout=20).tasks[0].status == "completed"


def test_resume_json_streams_the_run_and_ends_with_the_summary(
    tmp_path: Path, make_run: MakeRun
) -> None:
    crew = config(
        agents={"w": {"command": [sys.executable, str(WORKER), "{prompt}"]}},
        tasks=[{"id": "t", "agent": "w", "prompt": "say:again ; exit:0"}],
    )
    documented, shown = make_run(crew), make_run(crew)
    history = len(documented.paths.events.read_text().splitlines())  # the run's creation

    result = _crew("resume", documented.run_id, "--json", "--no-input", cwd=tmp_path)

    assert result.returncode == 0, result.stderr
    *events, last = result.stdout.splitlines()
    summary = json.loads(last)
    assert list(summary) == LED_KEYS
    assert summary == {
        "runId": documented.run_id,
        "outcome": "ended",
        "status": "completed",
        "tasks": {"completed": 1},
        "exitCode": 0,
    }
    # What happens from the resume on: the run's history is `crew events`'.
    assert events == documented.paths.events.read_text().splitlines()[history:]
    assert "run.resumed" in [json.loads(line)["type"] for line in events]
    assert result.stderr == f"crew: run {documented.run_id} completed: 1 completed\n"

    text = _crew("resume", shown.run_id, "--no-input", cwd=tmp_path)

    assert text.returncode == 0
    assert text.stdout == _progress(shown, after=history)
    assert text.stderr == (
        f"crew: run {shown.run_id} resumed\n"
        + result.stderr.replace(documented.run_id, shown.run_id)
    )


def test_every_kind_of_result_has_a_text_view() -> None:
    import crew.results.admin
    import crew.results.leading
    import crew.results.reading
    import crew.results.sending
    import crew.results.validating
    from crew.render import _TEXT_VIEWS
    from crew.results import Result

    modules = [
        crew.results.admin,
        crew.results.leading,
        crew.results.reading,
        crew.results.sending,
        crew.results.validating,
    ]
    kinds = {
        name
        for module in modules
        for name, value in vars(module).items()
        if isinstance(value, type) and issubclass(value, Result) and value is not Result
    }
    assert kinds == set(_TEXT_VIEWS)
