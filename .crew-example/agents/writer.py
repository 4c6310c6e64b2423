"""Writer: drafts a page section by section, checking for interruptions between sections.

Until the editor's steer has come, each checkpoint waits for it (a minute at most): the steer
preempts the drafting, and once it is handled the draft resurfaces from next() and continues
where it left off. Waiting at a checkpoint, rather than hoping the steer comes in time, is what
makes the run come out the same on a busy machine.
"""

import sys
import time

from crew.worker import Worker

SECTIONS = ["title", "intro", "what's new", "upgrade notes", "thanks"]

worker = Worker.from_env()
draft = worker.begin(sys.argv[1])  # the task's own work is the first focus
written: list[str] = []
steered = False
while len(written) < len(SECTIONS):
    section = SECTIONS[len(written)]
    time.sleep(0.4)
    written.append(section)
    worker.report(f"wrote {section} ({len(written)} of {len(SECTIONS)})")
    decision = worker.checkpoint(wait=0 if steered else 60)
    if decision.action == "preempt" and decision.item is not None:
        steered = True
        print(f"pausing the draft for: {decision.item.body}", flush=True)
        time.sleep(0.3)
        print("revised the intro", flush=True)
        worker.done("revised")
        resumed = worker.next(timeout=10)
        assert resumed is draft, "the draft comes back once the steer is handled"
        print("back to the draft", flush=True)
worker.done("draft complete")
print("draft: " + ", ".join(written), flush=True)
