"""Writer: drafts notes, waiting at each checkpoint (a minute at most) until the lead steers it.

Waiting for the steer, rather than hoping it comes in time, makes the run come out the same on a
busy machine.
"""

import sys

from crew.worker import Worker

worker = Worker.from_env()
draft = worker.begin(sys.argv[1])  # the task's own work is the first focus
steer = ""
for section in ("summary", "changes", "upgrade"):
    worker.report(f"wrote {section}")
    decision = worker.checkpoint(wait=0 if steer else 60)
    if decision.action == "preempt" and decision.item is not None:
        steer = decision.item.body
        print(f"steered: {steer}", flush=True)
        worker.done("taken into account")
        worker.next(timeout=10)  # back to the draft
worker.done("notes drafted")
print(f"notes drafted ({steer or 'never steered'})", flush=True)
