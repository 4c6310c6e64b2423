"""A stand-in for the lead agent of .crew-example/lead: the MCP SDK's stdio client, run as the
lead task's worker, doing what the lead's prompt asks of Claude Code.

It starts the server exactly as the MCP config JSON (argv[1]) says, and prints each tool call and
its result as one JSON line (`{"tool", "arguments", "result"}`) for the test to read in its log.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client


async def tool(mcp: ClientSession, name: str, **arguments: Any) -> tuple[bool, Any, str]:
    """Call a tool and log it: (is it an error, its structured content, its text)."""
    result = await mcp.call_tool(name, arguments)
    text = result.content[0].text  # type: ignore[union-attr]  # a text block
    print(json.dumps({"tool": name, "arguments": arguments, "error": result.is_error}), flush=True)
    return result.is_error, result.structured_content, text


async def call(mcp: ClientSession, name: str, **arguments: Any) -> Any:
    """The tool's document; a tool error ends the lead (exit 1, the error in its log)."""
    error, _, text = await tool(mcp, name, **arguments)
    if error:
        print(f"tool error: {text}", flush=True)
        sys.exit(1)
    return json.loads(text)


async def wait(mcp: ClientSession, run: str, until: str, task: str) -> Any:
    """`wait`, called again on a TIMEOUT error, as the prompt tells the lead."""
    while True:
        error, data, text = await tool(mcp, "wait", run=run, until=until, task=task, timeout=60)
        if not error:
            return json.loads(text)
        if (data or {}).get("exitCode") != "TIMEOUT":
            print(f"tool error: {text}", flush=True)
            sys.exit(1)


async def lead(config_path: str) -> None:
    (server,) = json.loads(Path(config_path).read_text())["mcpServers"].values()
    params = StdioServerParameters(
        command=server["command"],
        args=server.get("args", []),
        env={**os.environ, **server.get("env", {})},
    )
    run = os.environ["CREW_RUN_ID"]
    async with stdio_client(params) as (read, write), ClientSession(read, write) as mcp:
        await mcp.initialize()
        asked = await wait(mcp, run, "waiting", "survey")
        print(f"question: {asked['tasks'][0]['contact']['prompt']}", flush=True)
        await call(mcp, "respond", run=run, task="survey", body="the parser")
        await wait(mcp, run, "started", "draft")
        await call(
            mcp, "steer", run=run, task="draft", body="Keep the notes to three bullet points."
        )
        await call(
            mcp,
            "add_task",
            run=run,
            agent="checker",
            task_id="check",
            depends_on=["survey", "draft"],
            prompt="Check the notes against the survey.",
        )
        await wait(mcp, run, "done", "check")
        status = await call(mcp, "status", run=run)
    for task in status["tasks"]:
        print(f"{task['id']}: {task['status']}", flush=True)


if __name__ == "__main__":
    asyncio.run(lead(sys.argv[1]))
