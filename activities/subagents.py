"""What a child run spent, read for its parent when the child ended without a result (``workflows/subagents.py``).

A child that completes returns its usage in its result. One that failed, was cancelled, terminated or timed out
returns nothing, yet what it spent is still in its state: this activity asks it (its ``status`` query, which a
worker answers for a closed run too) so that the parent's usage and budget count it.
"""

from __future__ import annotations

from temporalio import activity
from temporalio.client import WorkflowQueryFailedError, WorkflowQueryRejectedError
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError

from agent_runner.contract.types import CHILD_USAGE_ACTIVITY, STATUS_QUERY, Usage


@activity.defn(name=CHILD_USAGE_ACTIVITY)
async def child_usage(run_id: str) -> Usage:
    """What the run ``run_id`` (its latest execution) spent, its own children's included, as far as it is known."""
    handle = activity.client().get_workflow_handle(run_id)
    try:
        raw = await handle.query(STATUS_QUERY)
    except (WorkflowQueryFailedError, WorkflowQueryRejectedError) as e:
        # The run cannot say (its input never parsed, say): asking again will not change that.
        raise ApplicationError(f"Run {run_id} cannot tell its usage: {e}", non_retryable=True) from e
    except RPCError as e:
        raise ApplicationError(f"Temporal refused the status query of run {run_id}: {e.message}") from e
    return Usage.model_validate((raw or {}).get("usage") or {})
