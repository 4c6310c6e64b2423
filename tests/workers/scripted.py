"""A worker that follows a script, for the leader's end-to-end tests.

The script is the task's prompt: steps separated by " ; ", each `verb` or `verb:argument`:
    say:TEXT          print TEXT on stdout          err:TEXT     print TEXT on stderr
    ask:TYPE:PROMPT   print an @supervisor TYPE line (selection options go in PROMPT as [a|b])
    read              read one stdin line and print `got <type> <body>` (JSON frames) or `got <line>`
    ack               acknowledge the last frame read
    sleep:SECONDS     sleep                          exit:CODE   exit with CODE
    drain             read stdin until EOF, printing `got …` for each line, then exit 0
    await:TYPE        read (and ack) frames until one of TYPE has arrived (or already had)
    hang              ignore SIGTERM and sleep for a minute
    until:PATH        wait until the file PATH exists (a test's go-ahead)
    hostile:COUNT     become hostile.py: COUNT hostile lines, then exit 0
The worker prints `attempt N` first.
"""

import json
import os
import signal
import sys
import time


def main() -> None:
    print(f"attempt {os.environ.get('CREW_ATTEMPT')}", flush=True)
    last = None
    seen: set[str] = set()
    for step in sys.argv[1].split(" ; "):
        verb, _, arg = step.partition(":")
        if verb == "say":
            print(arg, flush=True)
        elif verb == "err":
            print(arg, file=sys.stderr, flush=True)
        elif verb == "ask":
            kind, _, prompt = arg.partition(":")
            print(f"@supervisor {kind}: {prompt}", flush=True)
        elif verb == "read":
            last = show(sys.stdin.readline())
        elif verb == "ack" and last is not None:
            print(f"@supervisor ack: {last['id']}", flush=True)
        elif verb == "sleep":
            time.sleep(float(arg))
        elif verb == "exit":
            sys.exit(int(arg))
        elif verb == "drain":
            for line in sys.stdin:
                show(line)
            print("got EOF", flush=True)
            sys.exit(0)
        elif verb == "await":
            while arg not in seen:
                frame = show(sys.stdin.readline())
                if frame is not None:
                    print(f"@supervisor ack: {frame['id']}", flush=True)
                    seen.add(frame["type"])
        elif verb == "until":
            while not os.path.exists(arg):
                time.sleep(0.01)
        elif verb == "hostile":
            hostile = os.path.join(os.path.dirname(__file__), "hostile.py")
            os.execv(sys.executable, [sys.executable, hostile, arg])
        elif verb == "hang":
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            time.sleep(60)


def show(line: str) -> dict | None:
    if not line:
        print("got EOF", flush=True)
        sys.exit(0)
    try:
        frame = json.loads(line)
    except ValueError:
        print(f"got {line.rstrip()}", flush=True)
        return None
    print(f"got {frame['type']} {frame['body']}", flush=True)
    return frame


if __name__ == "__main__":
    main()
