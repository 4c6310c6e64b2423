"""Scout: asks the lead where to start, then reports what it found there."""

import sys

from crew.worker import Worker

worker = Worker.from_env()
print(f"task: {sys.argv[1]}", flush=True)
area = worker.ask("Which part of the code should I survey first?", kind="need_input")
worker.report(f"surveying {area}")
print(f"survey: {area} is where the risk is", flush=True)
