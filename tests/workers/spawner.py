"""A worker that spawns one task with the SDK and waits for it: its prompt is the child's.

spawner.py AGENT PROMPT    spawn PROMPT for AGENT (wait=True), print what came back, exit 0
"""

import json
import sys

from crew.worker import Worker

worker = Worker.from_env()
print("spawning", flush=True)
result = worker.spawn(sys.argv[1], sys.argv[2], wait=True)
print(f"child result: {json.dumps(result, sort_keys=True)}", flush=True)
sys.exit(0 if result is not None and result.get("status") == "completed" else 1)
