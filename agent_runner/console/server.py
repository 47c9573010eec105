"""Serve the console: ``python -m agent_runner.console [--host H] [--port P] [--token T]``."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

from aiohttp import web

from agent_runner.client import AgentRunner
from agent_runner.contract.errors import ConfigurationError

from .app import create_app
from .security import DEFAULT_HOST, DEFAULT_PORT, TOKEN_ENV, TOKEN_PARAM, check_binding

SHUTDOWN_GRACE = 2.0
"""Seconds a request in flight gets to finish when the console stops."""


@asynccontextmanager
async def serving(
    runner: AgentRunner, *, host: str = DEFAULT_HOST, port: int = 0, token: str | None = None
) -> AsyncIterator[str]:
    """Serve the console while the block runs.

    Args:
        runner: The client the console reads and steers runs with.
        host: The address to bind to: on a non-loopback one a token is required.
        port: The port; 0 picks a free one.
        token: The secret every request must carry, or ``None`` (a loopback address only).

    Yields:
        The console's address, ``http://HOST:PORT``.

    Raises:
        ConfigurationError: A non-loopback ``host`` without a token, or a token too short.
    """
    # handler_cancellation: a closed tab ends its event stream's handler at once, and with it the stream's polling of
    # the run (each poll is an update in the run's history), rather than at the next keep-alive write.
    app_runner = web.AppRunner(
        create_app(runner, host=host, token=token), shutdown_timeout=SHUTDOWN_GRACE, handler_cancellation=True
    )
    await app_runner.setup()
    try:
        await web.TCPSite(app_runner, host, port).start()
        bound = app_runner.addresses[0][1]
        yield f"http://{f'[{host}]' if ':' in host else host}:{bound}"
    finally:
        await app_runner.cleanup()


async def serve(
    runner: AgentRunner, *, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, token: str | None = None
) -> None:
    """Serve the console until cancelled; write ``READY <url>`` on standard output once it listens."""
    async with serving(runner, host=host, port=port, token=token) as url:
        sys.stdout.write(f"READY {url}/\n")
        if token is not None:
            sys.stdout.write(f"Open {url}/?{TOKEN_PARAM}=<token> once; the browser then keeps it in a cookie.\n")
        sys.stdout.flush()
        await asyncio.Event().wait()


async def _main(host: str, port: int, token: str | None) -> None:
    from agent_runner.connection import connect

    client, server = await connect()
    try:
        await serve(AgentRunner(client), host=host, port=port, token=token)
    finally:
        if server is not None:
            await server.astop()


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m agent_runner.console``: serve the operators' web console until Ctrl-C.

    It reaches Temporal as the other commands do (``TEMPORAL_ADDRESS``, profiles, or the embedded local server), and
    reads stored transcripts from ``AGENT_RUNNER_STORE`` as workers do.

    Returns:
        The exit code: 0 once stopped with Ctrl-C, 1 when Temporal cannot be reached or the port not bound, 2 for an
        address the console refuses to serve on as configured (beyond loopback without a token).
    """
    parser = argparse.ArgumentParser(
        prog="agent-runner console", description="A web console for operators: runs, transcripts, approvals."
    )
    parser.add_argument("--host", default=DEFAULT_HOST, help=f"the address to bind to (default {DEFAULT_HOST})")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"the port (default {DEFAULT_PORT})")
    parser.add_argument(
        "--token",
        default=None,
        help=f"the secret every request must carry (default ${TOKEN_ENV}); required on a non-loopback --host",
    )
    args = parser.parse_args(argv)
    token = args.token or os.environ.get(TOKEN_ENV) or None
    try:
        check_binding(args.host, token)  # before connecting: a refused address starts nothing
    except ConfigurationError as e:
        sys.stderr.write(f"error: {e}\n")
        return 2  # a usage error, as the CLI counts them
    try:
        asyncio.run(_main(args.host, args.port, token))
    except ConfigurationError as e:  # Temporal cannot be reached or started
        sys.stderr.write(f"error: {e}\n")
        return 1
    except OSError as e:
        sys.stderr.write(f"error: cannot serve on {args.host}:{args.port}: {e.strerror or e}\n")
        return 1
    except KeyboardInterrupt:
        return 0
    return 0
