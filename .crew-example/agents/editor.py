"""Editor: reads along and steers the writer mid-draft, then asks before approving."""

import os
import subprocess
import sys
import time

from crew.worker import Worker

worker = Worker.from_env()
time.sleep(1.0)  # let the writer get going
worker.report("the intro reads too formally: steering the writer")
# Workers are crew users too: the editor steers the writer through the ordinary command.
subprocess.run(
    [sys.executable, "-m", "crew", "steer", os.environ["CREW_RUN_ID"], "draft",
     "Make the intro friendlier and shorter."],
    check=True, stdout=subprocess.DEVNULL,
)  # fmt: skip
answer = worker.ask("The draft looks good. Publish it once it is finished?", kind="need_confirmation")
print(f"publish approved: {answer}", flush=True)
if not answer.lower().startswith("y"):
    sys.exit(1)
