"""A worker written with the SDK, for the end-to-end test of the attention loop."""

import time

from crew.worker import Worker

worker = Worker.from_env()
database = worker.ask("Which database?", kind="need_selection", options=["postgres", "sqlite"])
worker.report(f"using {database}")
job = worker.next(timeout=30)
assert job is not None
print(f"working on {job.body}", flush=True)
for _ in range(600):
    time.sleep(0.05)
    decision = worker.checkpoint()
    if decision.action == "preempt":
        assert decision.item is not None
        print(f"preempted by {decision.item.body}", flush=True)
        worker.done("steer handled")
        break
again = worker.next(timeout=10)
assert again is job
print(f"resumed {again.body}", flush=True)
worker.done("finished")
