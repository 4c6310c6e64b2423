"""A worker that prints hostile lines, for the leader's robustness tests.

`hostile.py COUNT` prints COUNT lines cycling through what a broken or malicious worker might
print: JSON nested far too deep, lines of megabytes, a question with 110,000 options, invalid
UTF-8, control characters, half `@supervisor` markers and floods of progress; then exits 0.
"""

import sys

DEEP = b'{"a":' * 100_000 + b"1" + b"}" * 100_000
ONCE = [
    b"@supervisor decision: " + DEEP,
    b"@supervisor decision: " + b'{"a":' * 900 + b"1" + b"}" * 900,
    b"@supervisor decision: " + b'{"a":' * 220 + b"1" + b"}" * 220,
    b'@supervisor decision: {"x": "' + b"y" * (1024 * 1024) + b'"}',
    b'@supervisor checkpoint: {"x": "' + b"y" * (2 * 1024 * 1024) + b'"}',
    b"@supervisor need_selection: pick [" + b"|".join(b"o%d" % i for i in range(110_000)) + b"]",
    b"@supervisor need_selection: pick [" + b"|".join(b"o%d" % i for i in range(50_000)) + b"]",
    b"plain " + b"z" * (3 * 1024 * 1024),
]
CYCLE = [
    b"@supervisor progress: %d",
    b"@supervisor progress: %d",
    b"@supervisor progress: %d",
    b"@supervisor status: step %d",
    b"@supervisor note: \xff\xfe\xc0 invalid utf-8 %d",
    b"@supervisor \x00\x1b[31m\x9b\x7f %d",
    b"@superv",
    b"@supervisor",
    b"@supervisor need_input",
    b"@supervisor decision: {%d",
    b"@supervisor decision: " + b"[" * 100,
    b"@supervisor ack: msg_%d",
    b"\x1b]0;title\x07\x1b[2J %d",
    b"@supervisor progress: \xe2\x80\xa8split\xc2\x85here %d",
]


def main() -> None:
    count = int(sys.argv[1])
    out = sys.stdout.buffer
    for line in ONCE:
        out.write(line + b"\n")
    for i in range(count - len(ONCE)):
        line = CYCLE[i % len(CYCLE)]
        out.write((line % i if b"%d" in line else line) + b"\n")
    out.flush()


if __name__ == "__main__":
    main()
