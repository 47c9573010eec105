"""MCP servers as tools: a worker's connections to the servers its configuration names, and their two activities.

``agent_runner.list_mcp_tools`` lists the tools of the servers a run names, once, when the run starts: its result,
in the run's history, is the run's list for good, whatever the server lists later. ``agent_runner.call_mcp_tool``
runs one call. A call's result is what the SDK's ``mcp_tool`` helper makes of it (``anthropic/lib/tools/mcp.py``,
which this module calls): the server's content blocks; ``isError`` gives an ``is_error`` result with them;
structured content alone is sent as JSON text; content Claude cannot take (audio, a resource link) or an error the
server answers with gives the SDK's ``is_error`` text. Those are results. A server that cannot be reached, or whose
connection drops mid-call (its process died), is an activity failure instead, which Temporal retries under the
tool's policy (``mcp_config.py``) on a new connection; an ``at_most_once`` tool is not run again blindly. A connection
kept open between calls is pinged before the next call's request leaves, so a server that died while idle is
connected to again rather than taken for one that died during the call.

Each worker holds one connection per server, opened on first use and shared by concurrent calls; a stdio server runs
as this worker's child process. What the worker knows of how to reach a server (its command, environment, URL and
headers, credentials among them) never leaves the worker: neither results nor failure messages carry it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from collections.abc import AsyncIterator, Awaitable
from typing import Any, TypeVar, cast
from urllib.parse import parse_qsl, urlsplit

import anyio
import httpx2
from anthropic.lib.tools.mcp import async_mcp_tool
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.types import CallToolResult, Tool
from mcp_types import CONNECTION_CLOSED
from temporalio import activity
from temporalio.exceptions import ApplicationError

from agent_runner.activities.heartbeats import EVERY, heartbeat_until
from agent_runner.activities.tools import (
    _error_text,
    _own_timeout,
    _result_of,
    hand_back,
    offloaded,
    own_deadline,
    own_run,
    specs_by_reference,
)
from agent_runner.content import Content
from agent_runner.contract.mcp import (
    MCP_NAME_SEPARATOR,
    ListMcpToolsInput,
    ListMcpToolsOutput,
    McpCallInput,
    mcp_task_queue,
)
from agent_runner.contract.types import (
    CALL_MCP_TOOL_ACTIVITY,
    LIST_MCP_TOOLS_ACTIVITY,
    TOOL_NOT_STARTED_ERROR,
    McpToolRef,
    ToolResult,
    ToolSpec,
)
from agent_runner.mcp_config import McpConfig, McpServer

logger = logging.getLogger(__name__)

_T = TypeVar("_T")

CONNECT_TIMEOUT = 60.0
"""Seconds a server may take to start and answer the handshake."""

SERVER_LOST_ERROR = "McpServerLost"
"""The ``ApplicationError.type`` of a call whose server could not be reached or went away mid-call (retryable)."""

PING_TIMEOUT = 5.0
"""Seconds a connection kept open between calls has to answer the ping that checks it before a call."""

LIST_PAGES = 100
"""The most pages of a server's tool list read (a server whose cursor never ends is cut off there)."""


_TRANSPORT_ERRORS = (OSError, anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream, httpx2.HTTPError)
"""What the connection raises when it failed, rather than the server answering."""


class _ServerLost(Exception):
    """The connection to the server failed: the call's outcome is the transport's, not the tool's."""


class McpConnection:
    """One worker's connection to one MCP server: opened on first use, opened again after it was lost.

    The MCP client's context must be entered and left by one task, so a task of its own holds it open.
    """

    def __init__(self, name: str, server: McpServer) -> None:
        self.name = name
        self._server = server
        self._client: Client | None = None
        self._stop: asyncio.Event | None = None
        self._holder: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()

    async def live_client(self) -> Client:
        """The open connection, once it answered a ping; a new one if its server went away while the worker idled.

        A server that died between calls (a stdio process killed, an HTTP server restarted) is found here, before the
        call's request leaves: the call goes to a new connection instead of failing as if its server died during it.

        Raises:
            _ServerLost: the server could not be started or reached, or did not answer the handshake.
        """
        async with self._lock:
            if self._client is not None and not await self._answers(self._client):
                logger.warning("MCP server %s went away since its last call: connecting again", self.name)
                await self._close()
            if self._client is None:
                await self._open()
            assert self._client is not None
            return self._client

    async def _answers(self, client: Client) -> bool:
        """Whether the connection is still there: a ping it answers, with anything but a closed connection."""
        try:
            # The session's ping, not `Client.send_ping`, which warns on every call that the 2026-07-28 protocol
            # removed ping: a server on it answers "method not found", and that is an answer too.
            await asyncio.wait_for(client.session.send_ping(), PING_TIMEOUT)
        except MCPError as e:
            return e.code != CONNECTION_CLOSED  # an answer, even an error, is a live server
        except TimeoutError:
            return True  # busy, not gone: closing would end the calls it is running
        except Exception as e:
            logger.info("MCP server %s did not answer a ping: %s", self.name, self.scrub(e))
            return False
        return True

    async def lost(self, client: Client) -> None:
        """The connection ``client`` failed: close it, so the next call opens a new one."""
        async with self._lock:
            if self._client is client:
                await self._close()

    async def aclose(self) -> None:
        """Close the connection (a stdio server's process ends)."""
        async with self._lock:
            await self._close()

    async def _open(self) -> None:
        ready: asyncio.Future[Client] = asyncio.get_running_loop().create_future()
        stop = asyncio.Event()
        holder = asyncio.create_task(self._hold(ready, stop), name=f"mcp-server-{self.name}")
        try:
            client = await asyncio.wait_for(asyncio.shield(ready), CONNECT_TIMEOUT)
        except BaseException as e:
            stop.set()
            holder.cancel()
            with contextlib.suppress(BaseException):
                await holder
            if isinstance(e, asyncio.CancelledError):
                raise
            what = f"did not answer within {CONNECT_TIMEOUT:g} s" if isinstance(e, TimeoutError) else self.scrub(e)
            raise _ServerLost(f"could not connect: {what}") from e
        self._client, self._stop, self._holder = client, stop, holder
        logger.info("Connected to MCP server %s", self.name)

    async def _hold(self, ready: asyncio.Future[Client], stop: asyncio.Event) -> None:
        server = self._server
        try:
            async with contextlib.AsyncExitStack() as stack:
                if server.url is not None:
                    http = await stack.enter_async_context(create_mcp_http_client(headers=server.headers or None))
                    target: Any = streamable_http_client(server.url, http_client=http)
                else:
                    assert server.command is not None
                    target = StdioServerParameters(
                        command=server.command, args=server.args, env=server.env or None, cwd=server.cwd
                    )
                # No response cache: a run's list is read once, and must be the server's list at that moment.
                client = await stack.enter_async_context(Client(target, cache=None))
                ready.set_result(client)
                await stop.wait()
        except BaseException as e:  # the connection's own end: whoever waits for it hears of it
            if not ready.done():
                ready.set_exception(e if isinstance(e, Exception) else _ServerLost(repr(e)))
            elif not isinstance(e, asyncio.CancelledError):
                logger.warning("MCP server %s: the connection ended with %s", self.name, self.scrub(e))

    async def _close(self) -> None:
        stop, holder = self._stop, self._holder
        self._client = self._stop = self._holder = None
        if stop is None or holder is None:
            return
        stop.set()
        done, _ = await asyncio.wait({holder}, timeout=10)
        if not done:
            holder.cancel()
            with contextlib.suppress(BaseException):
                await holder

    def scrub(self, error: BaseException) -> str:
        """``error`` as text, without the secrets of the server's configuration (env, headers, the URL's query)."""
        # anyio's task groups, under the MCP SDK's transports, wrap what a connection raised in a group of one.
        while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
            error = error.exceptions[0]
        text = _error_text(error)
        url = urlsplit(self._server.url or "")
        in_url = [url.password or "", *(value for _, value in parse_qsl(url.query))]
        for secret in [*self._server.env.values(), *self._server.headers.values(), *in_url]:
            if len(secret) >= 4:
                text = text.replace(secret, "***")
        return text


class McpActivities:
    """The MCP activities of one worker, over the servers of its configuration.

    Args:
        config: The servers (``agent_runner.mcp_config``).
        content: Where a big result is stored apart (the worker's content store).
        heartbeat_every: Seconds between heartbeats while a call runs.
    """

    def __init__(self, config: McpConfig, *, content: Content | None = None, heartbeat_every: float = EVERY) -> None:
        self._config = config
        self._content = content or Content()
        self._heartbeat_every = heartbeat_every
        self._connections = {name: McpConnection(name, server) for name, server in config.servers.items()}

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """While a worker runs: its connections close (stdio servers end) when it stops."""
        try:
            yield
        finally:
            await self.aclose()

    async def aclose(self) -> None:
        """Close every connection."""
        for connection in self._connections.values():
            await connection.aclose()

    @activity.defn(name=LIST_MCP_TOOLS_ACTIVITY)
    async def list_mcp_tools(self, input: ListMcpToolsInput) -> ListMcpToolsOutput:
        """The tools of the servers a run names, as the run will know them: its list for good."""
        servers = list(dict.fromkeys(input.servers))
        missing = [s for s in servers if s not in self._connections]
        if missing:
            # Another worker of the queue may be configured with them (a rollout that adds a server).
            hand_back(f"the listing of MCP servers {', '.join(map(repr, missing))}")
            return ListMcpToolsOutput(missing=missing, configured=sorted(self._connections))
        listed: list[tuple[str, Tool]] = []
        for server in servers:
            listed += [(server, tool) for tool in await self._list(server)]
        counts = Counter(tool.name for _, tool in listed)
        taken = set(input.taken)
        specs: list[ToolSpec] = []
        for server, tool in listed:
            # A name another tool of the run has gets the server's name before it, on every side of the collision.
            name = tool.name if counts[tool.name] == 1 and tool.name not in taken else f"{server}__{tool.name}"
            definition = dict(async_mcp_tool(tool, cast(Any, None)).to_dict())  # the SDK's own definition
            options, approval, effects, on_unknown = self._config.servers[server].policy(tool.name)
            if options.task_queue is None:  # to the workers with this configuration only, this one among them
                options = options.model_copy(update={"task_queue": mcp_task_queue(activity.info().task_queue)})
            specs.append(
                ToolSpec(
                    name=name,
                    definition={**definition, "name": name},
                    options=options,
                    requires_approval=approval,
                    effects=effects,
                    on_unknown=on_unknown,
                    mcp=McpToolRef(server=server, tool=tool.name),
                )
            )
        names = Counter(spec.name for spec in specs)
        clashes = sorted(n for n in names if names[n] > 1 or (n in taken and MCP_NAME_SEPARATOR in n))
        if clashes:
            raise ApplicationError(
                f"The MCP tools {clashes} still share a name with another of the run's tools after their server's "
                "name was put before them. Rename a tool or a server in the workers' MCP configuration.",
                type="ToolNotRegistered",
                non_retryable=True,
            )
        return ListMcpToolsOutput(
            tools=await specs_by_reference(self._content, specs), configured=sorted(self._connections)
        )

    async def _list(self, server: str) -> list[Tool]:
        connection = self._connections[server]
        client: Client | None = None
        try:
            client = await self._heartbeating(connection.live_client())
            tools: list[Tool] = []
            cursor: str | None = None
            for _ in range(LIST_PAGES):
                activity.heartbeat()
                page = await self._heartbeating(client.list_tools(cursor=cursor))
                tools += page.tools
                cursor = page.next_cursor
                if cursor is None:
                    break
            return tools
        except Exception as e:
            if client is not None:
                await connection.lost(client)
            # A command that cannot be run will not run on a retry either: the run fails at once, saying so.
            unrunnable = isinstance(e, _ServerLost) and isinstance(e.__cause__, FileNotFoundError | PermissionError)
            raise ApplicationError(
                f"Could not list the tools of MCP server {server!r}: "
                f"{str(e) if isinstance(e, _ServerLost) else connection.scrub(e)}. Check the server and the workers' "
                "MCP configuration (the worker's log has the server's own output).",
                type=SERVER_LOST_ERROR,
                non_retryable=unrunnable,
            ) from None

    @activity.defn(name=CALL_MCP_TOOL_ACTIVITY)
    async def call_mcp_tool(self, input: McpCallInput) -> ToolResult:
        """One call of a tool of an MCP server, as its ``tool_result``."""
        call = own_run(input.call)
        connection = self._connections.get(input.server)
        if connection is None:
            raise ApplicationError(
                f"No worker on task queue {activity.info().task_queue!r} is configured with MCP server "
                f"{input.server!r} (this one has {sorted(self._connections) or 'none'}). Start workers with the same "
                "--mcp-config as the ones the run started on.",
                type="ToolNotRegistered",
                non_retryable=True,
            )
        logger.info(
            "Calling MCP tool: run=%s iteration=%d server=%s tool=%s tool_use_id=%s attempt=%d",
            call.run_id,
            call.iteration,
            input.server,
            input.tool,
            call.tool_use_id,
            activity.info().attempt,
        )
        # Until the request leaves for the server, the tool has not started: even an at-most-once call may be
        # tried again (TOOL_NOT_STARTED_ERROR).
        try:
            arguments = await self._content.resolve(call.input)
            client = await self._heartbeating(connection.live_client())
        except ApplicationError:
            raise  # a missing or corrupted blob: final, and says so
        except Exception as e:
            raise ApplicationError(
                f"Could not call MCP tool '{input.tool}' of server {input.server!r}: "
                f"{e if isinstance(e, _ServerLost) else _error_text(e)}; the call did not start.",
                type=TOOL_NOT_STARTED_ERROR,
            ) from None
        try:
            tool = async_mcp_tool(Tool(name=input.tool, input_schema={"type": "object"}), cast(Any, _Session(client)))
            task = asyncio.ensure_future(tool.call(arguments))
            await self._wait(task, call.run_id, input)
            if isinstance(task.exception(), _ServerLost):
                raise cast(_ServerLost, task.exception())
        except _ServerLost as e:
            await connection.lost(client)
            raise ApplicationError(
                f"MCP server {input.server!r} failed during the call of '{input.tool}': {e}. The next attempt "
                "opens a new connection.",
                type=SERVER_LOST_ERROR,
            ) from None
        # The same conversion as a registered tool's: ToolError (isError) content, exceptions as the SDK's text.
        result = _result_of(call.model_copy(update={"name": input.tool}), task)
        activity.metric_meter().create_counter("agent_runner_tool_calls", "Tool calls, by tool and outcome").add(
            1, {"tool": call.name, "outcome": "error" if result.is_error else "ok"}
        )
        return await offloaded(self._content, call.name, result)

    async def _heartbeating(self, step: Awaitable[_T]) -> _T:
        """``step``'s result, heartbeating meanwhile: starting a server can take longer than a heartbeat timeout."""
        task = asyncio.ensure_future(step)
        try:
            await heartbeat_until(task, self._heartbeat_every)
        except asyncio.CancelledError:
            task.cancel()
            raise
        return task.result()

    async def _wait(self, task: asyncio.Future[Any], run_id: str, input: McpCallInput) -> None:
        """Heartbeat until the call ends; past the tool's own timeout it is cancelled, and the attempt fails."""
        try:
            if not await heartbeat_until(task, self._heartbeat_every, own_deadline()):
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
                logger.warning("MCP tool %s of run %s did not finish in time", input.tool, run_id)
                own = _own_timeout(activity.info())
                raise ApplicationError(
                    f"MCP tool '{input.tool}' of server {input.server!r} did not finish within "
                    f"{own.total_seconds() if own else 0:g} s; it was cancelled.",
                    type="ToolTimedOut",
                )
        except asyncio.CancelledError:
            task.cancel()
            raise


class _Session:
    """What the SDK's ``async_mcp_tool`` calls: the connection, with its transport failures told apart."""

    def __init__(self, client: Client) -> None:
        self._client = client

    async def call_tool(self, name: str, arguments: dict[str, Any] | None = None) -> CallToolResult:
        try:
            return await self._client.call_tool(name, arguments)
        except MCPError as e:
            if e.code == CONNECTION_CLOSED:
                raise _ServerLost("the connection closed") from e
            raise  # the server's own answer: a result, as in the SDK
        except _TRANSPORT_ERRORS as e:
            raise _ServerLost(type(e).__name__) from e
