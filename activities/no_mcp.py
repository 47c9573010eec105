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
from datetime import timedelta

from temporalio import activity
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory

from agent_runner.contract.mcp import ListMcpToolsInput, ListMcpToolsOutput
from agent_runner.contract.types import LIST_MCP_TOOLS_ACTIVITY
from agent_runner.workflows.mcp import LIST_RETRY

logger = logging.getLogger(__name__)

HAND_BACK_DELAY = timedelta(seconds=1)
"""How soon a listing handed back by a worker without MCP servers is offered again (the server's retry timers do
not fire sooner)."""

MCP_NOT_HERE_ERROR = "McpNotConfiguredHere"
"""The ``ApplicationError.type`` of a listing handed back by a worker without MCP servers (retryable, benign)."""


@activity.defn(name=LIST_MCP_TOOLS_ACTIVITY)
async def list_mcp_tools_elsewhere(input: ListMcpToolsInput) -> ListMcpToolsOutput:
    """Hand the listing back to the queue; on the listing's last attempt, answer that no server is configured.

    Handed back, the listing is a retryable failure offered again after ``HAND_BACK_DELAY`` (not the listing's
    backoff) to any worker of the queue: one that has the configuration gets it as many times as it did when this
    activity was not registered here (``LIST_RETRY``'s 10 attempts), but within 10 s rather than a minute. Only when
    the last attempt still finds a worker without MCP servers does the run fail, with ``ToolNotRegistered`` and the
    message a worker configured without these servers gives (``workflows/mcp.py``), instead of ``NotFoundError``.
    """
    info = activity.info()
    servers = list(dict.fromkeys(input.servers))
    policy = info.retry_policy
    last = policy.maximum_attempts if policy is not None and policy.maximum_attempts > 0 else 0
    last = last or LIST_RETRY.maximum_attempts
    if info.attempt >= last:
        logger.warning(
            "Workflow %s names MCP servers %s: attempt %d of their listing on task queue %s, its last, found this "
            "worker, which has no MCP configuration: the run fails saying no worker is configured with them",
            info.workflow_id,
            servers,
            info.attempt,
            info.task_queue,
        )
        return ListMcpToolsOutput(missing=servers, configured=[])
    logger.info(
        "Workflow %s names MCP servers %s: this worker has no MCP configuration, so it handed the listing back to "
        "task queue %s (attempt %d of %d)",
        info.workflow_id,
        servers,
        info.task_queue,
        info.attempt,
        last,
    )
    raise ApplicationError(
        f"This worker has no MCP configuration: it handed the listing of {', '.join(map(repr, servers))} back to "
        f"task queue {info.task_queue!r}, for a worker that has (attempt {info.attempt} of {last}).",
        type=MCP_NOT_HERE_ERROR,
        next_retry_delay=HAND_BACK_DELAY,
        category=ApplicationErrorCategory.BENIGN,  # the SDK logs it at DEBUG, with no traceback
    )
