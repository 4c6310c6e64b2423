"""Researcher: compares options, reports progress, and asks which one to use (a selection)."""

import sys
import time

from crew.worker import Worker

CANDIDATES = ["astro", "hugo", "eleventy"]

worker = Worker.from_env()
print(f"task: {sys.argv[1]}", flush=True)
for number, name in enumerate(CANDIDATES, 1):
    time.sleep(0.3)
    worker.report(f"looked at {name} ({number} of {len(CANDIDATES)})")
choice = worker.ask("Which site generator should the docs use?", kind="need_selection", options=CANDIDATES)
print(f"decision: {choice}", flush=True)
worker.report(f"recommending {choice}", kind="note")
