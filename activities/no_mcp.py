"""``agent_runner.list_mcp_tools`` on a worker that serves no MCP server: it hands the listing back to the queue.

A run that names MCP servers lists their tools once, when it starts, on its task queue (``workflows/mcp.py``), where
any worker polling activities may get the listing: one without an MCP configuration (or not serving ``tools``) too.
Such a worker cannot tell the run that no server is configured, since another worker of the queue may have the
configuration; nor may it leave the activity unregistered, which Temporal retries for a minute before the run fails
with ``NotFoundError``. It hands the listing back, and only the listing's last attempt answers.

This module needs no ``mcp`` package: every worker registers it (``plugin.py``) but those that list MCP servers
(``activities/mcp.py``).
"""

from __future__ import annotations

import logging

from temporalio import activity

from agent_runner.activities.tools import hand_back
from agent_runner.contract.mcp import ListMcpToolsInput, ListMcpToolsOutput
from agent_runner.contract.types import LIST_MCP_TOOLS_ACTIVITY

logger = logging.getLogger(__name__)


@activity.defn(name=LIST_MCP_TOOLS_ACTIVITY)
async def list_mcp_tools_elsewhere(input: ListMcpToolsInput) -> ListMcpToolsOutput:
    """Hand the listing back to the queue; on the listing's last attempt, answer that no server is configured.

    Handed back (``activities/tools.py``: ``hand_back``), the listing is a retryable failure offered again a second
    later (not after the listing's backoff) to any worker of the queue: one that has the configuration gets it as
    many times as it did when this activity was not registered here (``LIST_RETRY``'s 10 attempts), but within 10 s
    rather than a minute. Only when
    the last attempt still finds a worker without MCP servers does the run fail, with ``ToolNotRegistered`` and the
    message a worker configured without these servers gives (``workflows/mcp.py``), instead of ``NotFoundError``.
    """
    info = activity.info()
    servers = list(dict.fromkeys(input.servers))
    hand_back(f"the listing of MCP servers {', '.join(map(repr, servers))}")  # unless this is the last attempt
    logger.warning(
        "Workflow %s names MCP servers %s: attempt %d of their listing on task queue %s, its last, found this "
        "worker, which has no MCP configuration: the run fails saying no worker is configured with them",
        info.workflow_id,
        servers,
        info.attempt,
        info.task_queue,
    )
    return ListMcpToolsOutput(missing=servers, configured=[])
