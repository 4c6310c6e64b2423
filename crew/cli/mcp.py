"""`crew mcp`: serve the verbs to a lead agent over the Model Context Protocol."""

from __future__ import annotations

from typing import Annotated

import typer

from crew.cli.common import HomeOption, SessionOption, home_from
from crew.ids import check_session_option


def mcp(
    http: Annotated[
        str | None,
        typer.Option(
            "--http",
            help="Serve streamable HTTP on HOST:PORT (for a remote lead) instead of stdio.",
            metavar="HOST:PORT",
            show_default=False,
        ),
    ] = None,
    read_only: Annotated[
        bool,
        typer.Option("--read-only", help="Offer only the tools that read (for watchers)."),
    ] = False,
    session: SessionOption = None,
    home: HomeOption = None,
) -> int:
    """Serve the verbs as MCP tools and run files as resources, as this session (stdio)."""
    from crew.errors import UsageError

    check_session_option(session)
    address = None
    if http is not None:
        host, _, port = http.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise UsageError(f"--http: expected HOST:PORT such as 127.0.0.1:8765, got {http!r}.")
        address = (host.strip("[]"), int(port))
    crew_home = home_from(home)
    try:
        from crew.mcp_server import build_server
    except ImportError:
        raise UsageError(
            "crew mcp needs the MCP SDK, which is not installed.",
            hint="Install it with: pip install 'crew[mcp]'",
        ) from None
    server = build_server(crew_home, session=session, read_only=read_only)
    if address is None:
        server.run("stdio")
    else:
        server.run("streamable-http", host=address[0], port=address[1])
    return 0
