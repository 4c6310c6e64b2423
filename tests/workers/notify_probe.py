"""A `[[notify]]` command for the tests: it saves what it was given, then ends as told.

    notify_probe.py FOLDER [hang]

It writes FOLDER/<seq>-<pid>.json (atomically): its stdin, its CREW_* variables, its pid,
process group and session. With `hang` it first starts `sleep 1000` (in its own process group)
and writes it down as `child`, then waits for it.
"""

import json
import os
import subprocess
import sys

folder = sys.argv[1]
document = sys.stdin.read()
seq = json.loads(document)["seq"]
found = {
    "stdin": document,
    "env": {k: v for k, v in os.environ.items() if k.startswith("CREW_")},
    "pid": os.getpid(),
    "pgid": os.getpgid(0),
    "sid": os.getsid(0),
}
child = None
if sys.argv[2:] == ["hang"]:
    child = subprocess.Popen(["sleep", "1000"])
    found["child"] = child.pid
path = os.path.join(folder, f"{seq}-{os.getpid()}.json")
with open(path + ".tmp", "w") as handle:
    json.dump(found, handle)
os.rename(path + ".tmp", path)
if child is not None:
    child.wait()
