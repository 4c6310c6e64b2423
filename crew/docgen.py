"""Generate the reference parts of docs/ from the code, so they cannot drift from it.

Some pages are generated whole (GENERATED). Others are written by hand around generated sections
(SECTIONS): each section sits between `<!-- generated: NAME -->` and `<!-- end -->`, and only
what lies between the two markers is rewritten. `python -m crew.docgen` rewrites them;
`python -m crew.docgen --check` fails when they are stale (the test suite runs the check).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from crew.env import VARIABLES, Scope
from crew.errors import EXIT_CODES, ExitCode
from crew.schemas import SCHEMAS, schema

DOCS = Path(__file__).resolve().parent.parent / "docs"


class DocError(Exception):
    """A page cannot be generated: a marker is missing, or the code lacks what a table needs."""


def _cell(text: str) -> str:
    """Text for one cell of a Markdown table."""
    return " ".join(text.split()).replace("|", "\\|")


FORMATS_INTRO = """\
# File formats

Every file of a run, as `crew schema NAME` prints its JSON Schema. Generated from the models by
`python -m crew.docgen`; do not edit by hand.

JSON names are camelCase. Optional fields are left out when empty. Timestamps are ISO-8601 UTC
with microseconds and a `Z` (`2026-11-30T03:41:00.123456Z`). Snapshots (`*.json`) are
pretty-printed with 2-space indents, keys in the order below and a trailing newline; JSONL files
hold one compact object per line, keys in the same order.

| file | schema |
| --- | --- |
| `manifest.json` | [manifest](#manifest) |
| `tasks/<taskId>.json` | [task](#task), one file per task; the run's task order is \
`config.tasks` in `manifest.json` |
| `tasks.json` (a run made by crew before the task files) | [tasks](#tasks): an array of \
[task](#task), in crew.toml order; converted to task files by the next writer |
| `events.jsonl` | [event](#event), one per line |
| `mailbox/inbox.jsonl`, `outbox.jsonl`, `steering.jsonl` | one per line: a [message](#message) \
whole when first written, then a [change](#change) (no `body`) for each later change of it; \
readers merge the lines by `id`, in order. A later whole line supersedes what came before (a \
crew before lean files wrote every change whole; those files read the same) |
| `logs/<taskId>.log` | the worker's stdout and stderr, every byte as received, nothing added \
(all its attempts, one after the other) |
| `logs/<taskId>.idx` | when the log's bytes were received: one line `<end> <time>` per write \
to the log — the log's size after it, and when the newest of its bytes was read \
(microseconds since 1970, UTC), e.g. `5271 1796077794116465`; a line's time is that of the \
first record whose end reaches the line's end, a line past the last record has the log's \
modification time (docs/design.md, "crew logs") |
| `.runtime/leader.json` | [leader](#leader) |
| `.runtime/applied`, `.runtime/<box>.pending.json`, `.runtime/<box>.keys.sqlite` | caches of \
what the files above say, rebuilt when missing or stale (docs/design.md: the applied marker, \
the pending index, idempotency keys indexed) |
| `.runtime/tasks/<taskId>.json`, `.runtime/leader.spare.json` | a task's snapshot, and the \
lease, before their last write: the spare the next write fills (docs/design.md, "Snapshots"); \
never read |
| `crew.toml` | [config](#config) |
"""


def _type_of(node: dict[str, Any], defs: dict[str, Any]) -> str:
    if "$ref" in node:
        name: str = node["$ref"].rsplit("/", 1)[-1]
        target = defs.get(name, {})
        if "enum" in target:
            return " \\| ".join(f"`{v}`" for v in target["enum"])
        for section, root in _ROOTS.items():
            if root == name:
                return f"[{section}](#{section})"
        return name
    if "enum" in node:
        return " \\| ".join(f"`{v}`" for v in node["enum"])
    if "anyOf" in node:
        parts = [_type_of(p, defs) for p in node["anyOf"] if p.get("type") != "null"]
        return " or ".join(parts)
    kind = node.get("type")
    if kind == "array":
        return f"array of {_type_of(node.get('items', {}), defs)}"
    if kind == "object" and "additionalProperties" in node:
        inner = node["additionalProperties"]
        return f"map of {_type_of(inner, defs)}" if isinstance(inner, dict) and inner else "object"
    if kind == "string" and node.get("pattern"):
        return "timestamp" if "T\\d{2}" in node["pattern"] else "string"
    return str(kind or "any")


def _fields_table(model: dict[str, Any], defs: dict[str, Any]) -> list[str]:
    required = set(model.get("required", []))
    lines = ["| field | type | required | meaning |", "| --- | --- | --- | --- |"]
    for name, node in model.get("properties", {}).items():
        text = " ".join(str(node.get("description", "")).split())
        default = node.get("default")
        if default not in (None, [], {}) and name not in required:
            if text and not text.endswith("."):
                text += "."
            text = f"{text} Default: `{_literal(default)}`.".strip()
        mandatory = "yes" if name in required else ""
        lines.append(f"| `{name}` | {_type_of(node, defs)} | {mandatory} | {_cell(text)} |")
    return lines


def _literal(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    return str(value)


def file_formats() -> str:
    out = [FORMATS_INTRO]
    for name, (description, _kind) in SCHEMAS.items():
        document = schema(name)
        defs = document.get("$defs", {})
        out.append(f"\n## {name}\n\n{description}.\n")
        if document.get("type") == "array":
            out.append(f"An array of [{_type_of(document['items'], defs).lower()}](#task).\n")
            continue
        out.extend(_fields_table(document, defs))
        for sub in _nested(document, defs):
            out.append(f"\n### {name}: {sub}\n")
            sub_doc = defs[sub]
            if sub_doc.get("description"):
                out.append(" ".join(sub_doc["description"].split()) + "\n")
            out.extend(_fields_table(sub_doc, defs))
    return "\n".join(out).rstrip() + "\n"


def _nested(document: dict[str, Any], defs: dict[str, Any]) -> list[str]:
    """Object types a schema refers to, in the order first met (enums are shown inline).

    A type with a section of its own (the crew.toml config inside the manifest) is not repeated.
    """
    found: list[str] = [_ROOTS[n] for n in _ROOTS if n != document["title"]]
    skip = len(found)

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if ref:
                name = ref.rsplit("/", 1)[-1]
                target = defs.get(name, {})
                if "properties" in target and name not in found:
                    found.append(name)
                    walk(target)
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk({key: value for key, value in document.items() if key != "$defs"})
    return found[skip:]


#: Schemas whose root type is documented in its own section.
_ROOTS = {"config": "CrewConfig"}


COMMANDS_INTRO = """\
# Command reference

Every `crew` command's `--help`, generated by `python -m crew.docgen` (a test fails when this page
and the commands drift apart). Exit codes are in [exit-codes.md](exit-codes.md); the verbs that
change a run are explained in [verbs.md](verbs.md); what `--json` prints is at the
[end of this page](#what---json-prints).
"""

JSON_OUTPUT = """\
## What `--json` prints

With `--json` a command prints one JSON document on stdout, or JSON lines for a stream. Warnings
and errors still go to stderr. Keys come in the order below (`?`: only when it applies); runs,
tasks, events and messages are as in [file-formats.md](file-formats.md). This table is written by
hand; tests/test_cli_json.py checks that each command prints these keys in this order.

| command | prints |
| --- | --- |
| `run`, `resume`, `rerun` | one line per event while the run goes, then `{runId, outcome, \
status, tasks, exitCode}`: `outcome` is `ended`, `interrupted` or `taken over`, `tasks` counts \
the tasks in each status |
| `run --detach`, `resume --detach`, `rerun --detach` | `{runId, pid}`: the run and the \
background leader |
| `wait` | `{runId, for, tasks}`: the tasks that made the condition hold |
| `runs`, `ps` | an array, newest first: each run's manifest without `config`, plus `tasks` \
(counts by status) and `problem?`; a run that cannot be read is `{runId, problem}` |
| `status` | `{run, tasks, pending, warnings, leader}`: `pending` maps each task to its \
undelivered messages by file, `leader` is `{alive, pid?, host?, heartbeatAt?}` |
| `mailbox` | an array: each message as last written, plus `box`, `history` (`{status, at?, \
reason?}` for each change of status) and `decisions` (the worker's attention decisions about it) |
| `events` | one line per event |
| `respond`, `steer`, `follow-up`, `nudge` | the message, plus `runId, replayed, dropped, \
pending, leader, warnings, overridden?, waitedFor?, error?` \
([verbs.md](verbs.md#what---json-prints)) |
| `cancel` | `{runId, task, cancelled, rejected, stopped, runStatus, already?, overridden?}` |
| `handoff` | `{runId, previous, owner, changed, overridden?}` |
| `init` | `{home, config, created, wroteConfig}` |
| `doctor` | `{clean, repair, runs, findings}`, each finding `{runId, problem, file?, line?, \
repairable, repaired}` |
| `schema` | the JSON Schema (always JSON); without NAME, every schema by name |
| `prune`, `rm` | `{dryRun, removed, kept}`: each run removed (or, with `--dry-run`, that would \
be) `{runId, crew?, status?, createdAt?, endedAt?}`, each run `prune` kept although it matched \
`{runId, reason}` |

`logs` and `watch` print text only.
"""


def command_reference() -> str:
    """`crew --help` and each command's `--help`, at a fixed width."""
    import contextlib
    import io
    import os

    import typer.core
    import typer.main

    from crew.cli import app

    # Built once, as a call of `app` builds it (completion options included), not anew each time.
    group = typer.main.get_command(app)
    assert isinstance(group, typer.core.TyperGroup)

    def help_of(*args: str) -> str:
        buffer = io.StringIO()
        with contextlib.redirect_stdout(buffer):
            group.main([*args, "--help"], prog_name="crew", standalone_mode=False)
        return buffer.getvalue().rstrip()

    saved = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "100"
    try:
        out = [COMMANDS_INTRO, "```text", help_of(), "```"]
        for name in group.commands:
            out += [f"\n## crew {name}\n", "```text", help_of(name), "```"]
        out.append(f"\n{JSON_OUTPUT.rstrip()}")
    finally:
        if saved is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = saved
    return "\n".join(out) + "\n"


def exit_code_table() -> str:
    """Every exit code, from crew.errors.EXIT_CODES."""
    lines = ["| code | `ExitCode` | meaning | examples |", "| --- | --- | --- | --- |"]
    for code in ExitCode:
        if code not in EXIT_CODES:
            raise DocError(f"ExitCode.{code.name} has no entry in crew.errors.EXIT_CODES")
        meaning, examples = EXIT_CODES[code]
        lines.append(f"| {int(code)} | `{code.name}` | {_cell(meaning)} | {_cell(examples)} |")
    return "\n".join(lines)


def variable_table(scope: Scope) -> str:
    """The environment variables of one scope, from crew.env.VARIABLES."""
    lines = ["| variable | meaning |", "| --- | --- |"]
    lines += [f"| `{v.name}` | {_cell(v.meaning)} |" for v in VARIABLES if scope in v.scopes]
    return "\n".join(lines)


GENERATED: dict[str, Callable[[], str]] = {
    "file-formats.md": file_formats,
    "commands.md": command_reference,
}


def schema_data() -> str:
    """Every JSON Schema by name, as `crew schema` prints them."""
    from crew.schemas import all_schemas

    return json.dumps(all_schemas(), ensure_ascii=False, indent=1) + "\n"


#: What of a JSON Schema crew/fast/shapes.py reads: the rest (descriptions, titles,
#: patterns, bounds) is the models' to check, and would triple what every command parses.
_SHAPE_KEYS = frozenset(
    {"$defs", "$ref", "properties", "anyOf", "enum", "type", "items", "additionalProperties"}
    | {"pattern", "minLength", "maxLength", "minItems", "maxItems"}
    | {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}
)


def shape_data() -> str:
    """The JSON Schemas, of what crew/fast/shapes.py reads of them (a default only where it
    is null: the one thing it asks of a default)."""
    from crew.schemas import all_schemas

    def lean(node: Any, properties: bool = False) -> Any:
        if not isinstance(node, dict):
            return node
        if properties:  # field names -> their schemas
            return {name: lean(field) for name, field in node.items()}
        kept = {
            k: lean(v, k in {"properties", "$defs"}) for k, v in node.items() if k in _SHAPE_KEYS
        }
        if kept.get("anyOf"):
            kept["anyOf"] = [lean(branch) for branch in node["anyOf"]]
        if "default" in node and node["default"] is None:
            kept["default"] = None
        return kept

    shapes = {name: lean(schema) for name, schema in all_schemas().items()}
    return json.dumps(shapes, ensure_ascii=False, separators=(",", ":")) + "\n"


#: Files of the package made from the models: the JSON Schemas the fast path prints
#: (`crew schema`), so that printing one needs no model built, and what of them it checks
#: records against (crew/fast/shapes.py).
DATA: dict[Path, Callable[[], str]] = {
    Path(__file__).resolve().parent / "fast" / "schemas.json": schema_data,
    Path(__file__).resolve().parent / "fast" / "shapes.json": shape_data,
}


def mcp_tools() -> str:
    """Every tool of `crew mcp`, read from the server's own tool list: what it does, whether it
    only reads, and its arguments (from the input schema the server publishes)."""
    import asyncio

    from crew.mcp_server import build_server
    from crew.paths import Home

    server = build_server(Home(DOCS / ".crew"), session="docs", read_only=False)
    blocks = []
    for tool in asyncio.run(server.list_tools()):
        schema = tool.input_schema
        reads = " (reads only)" if tool.annotations and tool.annotations.read_only_hint else ""
        summary = " ".join((tool.description or "").split())
        blocks.append(f"### `{tool.name}`{reads}\n\n{summary}\n")
        if schema.get("properties"):
            blocks.append("\n".join(_fields_table(schema, schema.get("$defs", {}))) + "\n")
    return "\n".join(blocks).rstrip()


#: page -> section name -> the section's text.
SECTIONS: dict[str, dict[str, Callable[[], str]]] = {
    "mcp.md": {"tools": mcp_tools},
    "exit-codes.md": {
        "exit codes": exit_code_table,
        "variables you set": partial(variable_table, Scope.USER),
        "variables a worker receives": partial(variable_table, Scope.LEADER),
        "variables a notify command receives": partial(variable_table, Scope.NOTIFY),
    },
}

_SECTION_RE = re.compile(
    r"(?P<start><!-- generated: (?P<name>[^>]*?) -->\n).*?(?P<end><!-- end -->)", re.DOTALL
)


def fill_sections(page: str, text: str, sections: dict[str, Callable[[], str]]) -> str:
    """`text` with each generated section rewritten; the prose around them is kept as it is."""
    found: set[str] = set()

    def rewrite(match: re.Match[str]) -> str:
        name = match["name"]
        if name not in sections:
            raise DocError(f"docs/{page}: no generator for the section {name!r}")
        found.add(name)
        return f"{match['start']}\n{sections[name]()}\n\n{match['end']}"

    filled = _SECTION_RE.sub(rewrite, text)
    for name in sections:
        if name not in found:
            raise DocError(
                f"docs/{page} has no section `<!-- generated: {name} -->` … `<!-- end -->`"
            )
    return filled


def generate(page: str) -> str:
    """The page as the code says it should be."""
    if page in GENERATED:
        return GENERATED[page]()
    path = DOCS / page
    if not path.exists():
        raise DocError(f"docs/{page} is missing: it holds generated sections")
    return fill_sections(page, path.read_text(), SECTIONS[page])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m crew.docgen", description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail if a generated doc is stale")
    args = parser.parse_args(argv)
    stale = []
    made: dict[Path, Callable[[], str]] = {
        DOCS / name: partial(generate, name) for name in [*GENERATED, *SECTIONS]
    }
    for path, make in {**made, **DATA}.items():
        name = path.name
        try:
            text = make()
        except DocError as error:
            print(f"crew.docgen: {error}", file=sys.stderr)
            return 1
        current = path.read_text() if path.exists() else None
        if current == text:
            continue
        if args.check:
            stale.append(name)
        else:
            path.write_text(text)
            print(f"wrote {path}")
    if stale:
        print(f"stale: {', '.join(stale)}; run `python -m crew.docgen`", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
