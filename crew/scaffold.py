"""`crew init`: create a crew home with a commented crew.toml and a private state folder."""

from __future__ import annotations

import os
from pathlib import Path

from crew import env
from crew.errors import UsageError
from crew.paths import CONFIG_FILENAME, HOME_DIRNAME, Home
from crew.results.admin import Initialized
from crew.store.files import make_dirs
from crew.store.snapshot import write_atomic

STATE_GITIGNORE = """\
# Volatile files of a live run: leader pid and heartbeat, locks. Never needed to read history.
**/.runtime/
**/*.lock
**/.lock
"""

STATE_GITATTRIBUTES = """\
# Append-only logs: two branches that appended to the same log merge by keeping both sides.
*.jsonl merge=union
"""

CONFIG_TEMPLATE = """\
# crew.toml: the crew definition. `crew run` reads it; `crew validate` checks it without running
# anything; `crew schema config` prints its schema.
# Durations are strings like "500ms", "30s", "2m", "1h", or numbers of seconds.

[crew]
name = "my-crew"
maxParallel = 4             # tasks running at once
leaderStaleAfter = "10s"    # a leader silent this long is considered gone (`crew resume`)

# An agent is a command. Placeholders: {prompt}, {task}, {run}, {crewDir} (this folder),
# {python} (the Python running crew).
# Pass {prompt} as its own argument: it is never run through a shell.
[agents.shell]
command = ["sh", "-c", "printf 'working on: %s\\n' \\"$1\\"; echo '@supervisor progress: done'",
           "sh", "{prompt}"]
input = "jsonl"             # messages arrive on stdin as JSON lines; "text" sends bare lines
# cwd = "."                 # relative to this folder; default: the folder holding .crew
# timeout = "30m"           # stop and fail a task that runs longer
# stallAfter = "2m"         # nudge a task that prints nothing for this long
# maxNudges = 2             # then flag it needs_review
# maxAttempts = 1           # re-run a failed task up to this many times in all
# waitTimeout = "1h"        # flag a task that waits for an answer longer than this

[[tasks]]
id = "hello"
agent = "shell"
prompt = "say hello"

# [[tasks]]
# id = "build"
# agent = "shell"
# prompt = "build it"
# dependsOn = ["hello"]

# [limits]                  # per task: pending messages before the oldest is dropped
# maxPendingSteers = 50     # steer + nudge
# maxPendingFollowUps = 50
# warnPending = 20

# [[autoRespond]]           # answer known questions unattended (an ordinary respond)
# type = "need_confirmation"
# match = "(?i)run the tests"
# answer = "yes"

# [[notify]]                # run a command when a worker asks, is flagged or fails
# on = ["contact", "flagged", "failed"]   # or any event type, such as "run.ended"
# command = ["notify-send", "crew", "a worker needs you"]   # gets the event as JSON on stdin
"""


def init_home(directory: Path | None = None) -> Initialized:
    """Create `directory/.crew` (or $CREW_HOME's folder when no directory is given).

    An existing home is left as it is, but for a crew.toml it lacks (the template is written:
    `crew run` sends whoever has none to `crew init`).
    """
    named = env.HOME.value()
    if directory is None and named:
        root = Path(named).expanduser()
    else:
        root = (directory or Path.cwd()) / HOME_DIRNAME
    root = root.absolute()
    if root.exists():
        if not root.is_dir():
            raise UsageError(f"{root} exists and is not a folder.")
        config = Home(root).config_file
        if os.path.lexists(config):
            return Initialized(root, config, created=False)
        write_atomic(config, CONFIG_TEMPLATE.encode())
        return Initialized(root, config, created=False, wrote_config=True)
    if not root.parent.is_dir():
        raise UsageError(f"Cannot create {root}: {root.parent} is not a folder.")
    make_dirs(root)
    home = Home(root)
    make_dirs(home.state_dir, mode=0o700)  # prompts and answers are private to the user
    make_dirs(home.runs_dir, mode=0o700)
    write_atomic(home.state_dir / ".gitignore", STATE_GITIGNORE.encode())
    write_atomic(home.state_dir / ".gitattributes", STATE_GITATTRIBUTES.encode())
    write_atomic(root / CONFIG_FILENAME, CONFIG_TEMPLATE.encode())
    return Initialized(root, home.config_file, created=True)
