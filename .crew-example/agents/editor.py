"""Editor: steers the writer mid-draft, then asks before approving."""

import os
import subprocess
import sys

from crew.worker import Worker

worker = Worker.from_env()
run = os.environ["CREW_RUN_ID"]
# Workers are crew users too: the editor uses the ordinary commands. A steer reaches a task
# that has started, so the editor first waits for the draft to start (it waits for the steer).
crew = [sys.executable, "-m", "crew"]
subprocess.run([*crew, "wait", run, "--for", "started", "--task", "draft", "--timeout", "1m"],
               check=True, stdout=subprocess.DEVNULL)  # fmt: skip
worker.report("the intro reads too formally: steering the writer")
subprocess.run([*crew, "steer", run, "draft", "Make the intro friendlier and shorter."],
               check=True, stdout=subprocess.DEVNULL)  # fmt: skip
answer = worker.ask("The draft looks good. Publish it once it is finished?", kind="need_confirmation")
print(f"publish approved: {answer}", flush=True)
if not answer.lower().startswith("y"):
    sys.exit(1)
