"""What travels between a run and the MCP activities (``activities/mcp.py``): part of the durable contract.

A run names MCP servers that its workers are configured with (``"mcp": ["files"]``); their tools are listed once,
when the run starts, and the list (``ListMcpToolsOutput``, in the run's history) is the run's for good.

This module is imported by workflow code, so it holds no I/O.
"""

from __future__ import annotations

from pydantic import BaseModel

from agent_runner.contract.types import RunToolInput, ToolSpec

MCP_NAME_SEPARATOR = "__"
"""Joins a server's name and a tool's when the tool's own name collides with another tool of the run."""


def mcp_task_queue(task_queue: str) -> str:
    """The task queue of the calls of MCP tools listed on ``task_queue``, which only workers configured with MCP poll.

    Every worker of a queue polls its activities, one without an MCP configuration too: a call offered to such a
    worker fails (an ``at_most_once`` tool's outcome is then unknown). A worker that lists a run's servers sends
    their tools' calls here instead (unless the configuration names a ``task_queue``), and polls it itself.
    """
    return f"{task_queue}-mcp"


class ListMcpToolsInput(BaseModel):
    """Input of ``agent_runner.list_mcp_tools``: the servers a run uses, and the names its other tools take."""

    servers: list[str]
    taken: list[str] = []
    """Names of the run's other tools (registered, raw, agents): an MCP tool of the same name is renamed."""


class ListMcpToolsOutput(BaseModel):
    """The servers' tools as the run will see them, in server order, and the servers no worker is configured with."""

    tools: list[ToolSpec] = []
    missing: list[str] = []
    configured: list[str] = []
    """Every server the answering worker is configured with, for the error a missing one gets."""


class McpCallInput(BaseModel):
    """Input of ``agent_runner.call_mcp_tool``: one ``tool_use`` block for a tool of an MCP server."""

    server: str
    tool: str
    """The tool's name on the server (the run may know it by another)."""
    call: RunToolInput
