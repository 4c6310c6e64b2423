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
    from crew.ids import shown

    check_session_option(session)
    address = None
    if http is not None:
        host, _, port = http.rpartition(":")
        if not host or not (port.isascii() and port.isdigit()) or not 0 < int(port) < 65536:
            raise UsageError(
                f"--http: expected HOST:PORT such as 127.0.0.1:8765, got {shown(http)}."
            )
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
        _check_listen(*address)
        _warn_if_reachable(address[0], session)
        server.run("streamable-http", host=address[0], port=address[1])
    _leave_waits()
    return 0


def _leave_waits() -> None:
    """The server has stopped: a `wait` its client left still holds a thread until its timeout
    (up to a minute), which the interpreter would join at exit. It only reads: leave it."""
    import os
    import sys
    import threading

    if threading.active_count() > 1:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


def _warn_if_reachable(host: str, session: str | None) -> None:
    """Say so when others may reach the server: it has no authentication, and the SDK guards
    against DNS rebinding only on 127.0.0.1, localhost and ::1."""
    if host in {"127.0.0.1", "localhost", "::1"}:
        return
    from crew.render import warn
    from crew.session import current_actor

    who = current_actor(session).owner_name
    warn(
        f"serving {host} with no authentication: whoever can reach it acts as {who} "
        "(serve on 127.0.0.1, or behind something that authenticates)"
    )


def _check_listen(host: str, port: int) -> None:
    """Refuse an address the server cannot listen on, as crew says so, before the HTTP server
    (which reports it in a log line of its own and exits 3, crew's code for a timeout)."""
    import socket

    from crew.errors import CrewError, UsageError

    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError) as error:
        raise UsageError(f"--http: cannot resolve the host {host!r}: {error}.") from None
    family, kind, proto, _, where = found[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server binds it
        try:
            probe.bind(where)
        except OSError as error:
            raise CrewError(
                f"crew mcp cannot listen on {host}:{port}: {error.strerror or error}.",
                hint="Name another port (`--http HOST:PORT`), or stop what listens there.",
            ) from None
