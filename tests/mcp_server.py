"""A tiny MCP server for the tests (``mcp``'s ``MCPServer``, FastMCP in mcp 1).

Run as ``python tests/mcp_server.py`` (stdio), or ``python tests/mcp_server.py http PORT`` (streamable HTTP).
``MCP_TEST_DIR`` names a folder where it notes what happened (``calls``: one line per call) and where ``die_once``
leaves its mark; ``MCP_TEST_TOKEN`` (or, over HTTP, the ``Authorization`` header) is the credential the worker's
configuration gives it, which ``authorized`` checks against ``expected_token.txt`` without ever returning it.
``MCP_TEST_SLOW_SECONDS`` is how long ``slow`` takes (2 by default).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("test-tools")
state = Path(os.environ.get("MCP_TEST_DIR", "."))


def _note(line: str) -> None:
    with (state / "calls").open("a") as f:
        f.write(line + "\n")


@server.tool(description="Look up a city's weather.")
def lookup(city: str) -> str:
    _note(f"lookup {city}")
    return f"{city}: 21C"


@server.tool(description="Always fails.")
def fail(reason: str) -> str:
    _note(f"fail {reason}")
    raise ToolError(reason)  # the server answers with isError


@server.tool(description="Withdraw lookup and offer late instead.")
def change_tools() -> str:
    _note("change_tools")
    server.remove_tool("lookup")
    server.add_tool(late)
    return "changed"


def late() -> str:
    """A tool the server offers only after change_tools."""
    return "late"


@server.tool(description="Whether the worker gave this server the expected credential.")
def authorized(ctx: Context) -> str:
    expected = (state / "expected_token.txt").read_text().strip()
    given = os.environ.get("MCP_TEST_TOKEN")
    if ctx.headers and "authorization" in ctx.headers:  # over HTTP, the worker sends it as a header
        given = ctx.headers["authorization"].removeprefix("Bearer ")
    return "authorized" if given == expected else "unauthorized"


@server.tool(description="The first call kills the server mid-call; later ones (a new process) answer.")
def die_once(what: str) -> str:
    _note(f"die_once {what}")
    mark = state / "died"
    if not mark.exists():
        mark.write_text("1")
        os._exit(1)
    return f"survived {what}"


@server.tool(description="Takes two seconds.")
async def slow(what: str) -> str:
    _note(f"slow {what}")
    await anyio.sleep(float(os.environ.get("MCP_TEST_SLOW_SECONDS", "2")))  # longer for a test that kills a worker
    return f"slow {what}"


if __name__ == "__main__":
    if "MCP_TEST_DIR" in os.environ:  # ``pids``: one line per process started, so a test can kill one while idle
        with (state / "pids").open("a") as f:
            f.write(f"{os.getpid()}\n")
    if sys.argv[1:2] == ["http"]:  # python tests/mcp_server.py http PORT: streamable HTTP on 127.0.0.1:PORT/mcp
        server.run("streamable-http", port=int(sys.argv[2]))
    else:
        server.run("stdio")
