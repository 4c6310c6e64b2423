"""`crew schema [NAME]` without typer or pydantic: the JSON Schemas as crew/schemas.py makes
them, read from `schemas.json` beside this module, which `python -m crew.docgen` writes from the
models (and tests/test_cli_admin.py keeps current). An unknown name is the full command's."""

from __future__ import annotations

import json
import os

from crew.fast.cmdline import Call, Fallback
from crew.fast.output import print_json

SCHEMAS = os.path.join(os.path.dirname(__file__), "schemas.json")


def schema(call: Call) -> int:
    try:
        with open(SCHEMAS, "rb") as handle:
            schemas = json.loads(handle.read())
    except (OSError, ValueError):
        raise Fallback from None
    name = call.arguments.get("name")
    if name is not None and name not in schemas:
        raise Fallback
    print_json(schemas if name is None else schemas[name])
    return 0
