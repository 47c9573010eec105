"""MCP servers as tools, on the workflow's side: the run's list of their tools, pinned once, and where a call goes.

A run names servers its workers are configured with (``"mcp": ["files"]``). When it starts, one activity lists their
tools; that list, in the run's history, is the run's for good (continue-as-new carries it in ``RunState.tools``), so
a server that changes its list mid-run changes neither what Claude is offered nor the run's replay. A call of such a
tool is an activity like any tool's, under the policy the workers' configuration gives it (``mcp_config.py``).

This module is imported by workflow code, so it holds no I/O.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from agent_runner.contract.errors import ToolNotRegistered
    from agent_runner.contract.mcp import ListMcpToolsInput, ListMcpToolsOutput, McpCallInput
    from agent_runner.contract.types import LIST_MCP_TOOLS_ACTIVITY, RunToolInput, ToolSpec
    from agent_runner.workflows.failures import fail, failing_the_run

LIST_RETRY = RetryPolicy(maximum_interval=timedelta(seconds=10), maximum_attempts=10)
"""The listing's retries: a server that cannot be reached is tried again, 10 times in all, then the run fails. A worker
with no MCP servers hands an attempt back to the queue, and answers on the last (``activities/no_mcp.py``)."""


async def pin_mcp_tools(servers: list[str], taken: list[str]) -> list[ToolSpec]:
    """The tools of ``servers``, listed once (the activity's result in history is the run's list).

    Args:
        servers: The servers the run names.
        taken: The names of the run's other tools: an MCP tool of the same name is called ``<server>__<name>``.

    Raises:
        ApplicationError: ``ToolNotRegistered`` for a server no worker is configured with, or the listing's own
            failure after its retries.
    """
    with failing_the_run():
        listed: ListMcpToolsOutput = await workflow.execute_activity(
            LIST_MCP_TOOLS_ACTIVITY,
            ListMcpToolsInput(servers=servers, taken=taken),
            result_type=ListMcpToolsOutput,
            start_to_close_timeout=timedelta(minutes=2),
            retry_policy=LIST_RETRY,
            summary=f"MCP tools of {', '.join(servers)}",
        )
    if listed.missing:
        raise fail(
            ToolNotRegistered(
                f"No worker on task queue {workflow.info().task_queue!r} is configured with MCP server"
                f"{'s' if len(listed.missing) > 1 else ''} {', '.join(repr(s) for s in listed.missing)} (they have "
                f"{', '.join(repr(s) for s in listed.configured) or 'none'}). Add it to the file the workers get as "
                "--mcp-config (or AGENT_RUNNER_MCP_CONFIG), or leave it out of the run's `mcp`."
            )
        )
    return listed.tools


def mcp_call(spec: ToolSpec, call: RunToolInput) -> McpCallInput:
    """The input of the MCP call activity for ``call`` of the MCP tool ``spec``."""
    assert spec.mcp is not None
    return McpCallInput(server=spec.mcp.server, tool=spec.mcp.tool, call=call)
