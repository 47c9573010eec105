"""How a run looks its tools up on the workers: ``describe_tools``, a local activity in runs begun since the umbrella.

A regular activity costs the history six events a run (scheduled, started, completed, and the workflow task that
reads its result) and a round trip through the server before the first model call. Every worker that runs
``AgentRun`` registers ``describe_tools`` (``plugin.py``: ``serve`` ``workflows``), so a run begun under
``UMBRELLA_PATCH`` runs it as a local activity on its own worker: one marker event holding the same answer, in the
run's first workflow task. A run begun before keeps the regular activity its history holds.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, TimeoutError

from agent_runner.contract.types import DESCRIBE_TOOLS_ACTIVITY, DescribeToolsInput, DescribeToolsOutput
from agent_runner.workflows.failures import failing_the_run, local_activity_failure
from agent_runner.workflows.patches import begun_since

TIMEOUT = timedelta(seconds=30)
"""How long one lookup may take."""

RETRY = RetryPolicy(maximum_interval=timedelta(seconds=10), maximum_attempts=10)
"""Lookups retried as before the umbrella: a worker's registry answers at once, or its store is briefly away."""


LOOKUP_HANDED_BACK_PATCH = "lookup-of-missing-tools-handed-back"
"""``workflow.patched`` id: a run whose local lookup finds a tool or hook missing asks the queue again, with
``hand_back`` (``HAND_BACK_RETRY``), before it fails with ``ToolNotRegistered``."""

HAND_BACK_RETRY = RetryPolicy(maximum_interval=timedelta(seconds=1), maximum_attempts=10)
"""A lookup handed back is offered again a second later (the hand-back's own ``next_retry_delay``), 10 times: on a
queue half of whose workers lack the tool, all 10 find one without it once in a thousand runs."""


async def describe_tools(names: list[str], hooks: list[str]) -> DescribeToolsOutput:
    """The named tools and result hooks as the workers registered them (``DESCRIBE_TOOLS_ACTIVITY``)."""
    lookup = DescribeToolsInput(names=names, hooks=hooks)
    if not begun_since():
        with failing_the_run():  # the run fails saying the lookup gave up, and why
            described: DescribeToolsOutput = await workflow.execute_activity(
                DESCRIBE_TOOLS_ACTIVITY,
                lookup,
                result_type=DescribeToolsOutput,
                start_to_close_timeout=TIMEOUT,
                retry_policy=RETRY,
            )
        return described
    try:
        local: DescribeToolsOutput = await workflow.execute_local_activity(
            DESCRIBE_TOOLS_ACTIVITY,
            lookup,
            result_type=DescribeToolsOutput,
            start_to_close_timeout=TIMEOUT,
            retry_policy=RETRY,
        )
    except ApplicationError as e:
        # As above; a local activity's failure is its last attempt's own error, with no ActivityError around it.
        raise local_activity_failure(DESCRIBE_TOOLS_ACTIVITY, e) from None
    except ActivityError as e:
        # Except a timeout: the last attempt's timeout comes wrapped (its retry state says "cancel requested").
        if not isinstance(e.cause, TimeoutError):
            raise
        raise local_activity_failure(DESCRIBE_TOOLS_ACTIVITY, e.cause) from None
    if (local.missing or local.missing_hooks) and workflow.patched(LOOKUP_HANDED_BACK_PATCH):
        # This worker lacks some: in a mixed fleet (a rolling upgrade) another worker of the queue may have them.
        with failing_the_run():
            handed: DescribeToolsOutput = await workflow.execute_activity(
                DESCRIBE_TOOLS_ACTIVITY,
                lookup.model_copy(update={"hand_back": True}),
                result_type=DescribeToolsOutput,
                start_to_close_timeout=TIMEOUT,
                retry_policy=HAND_BACK_RETRY,
            )
        return handed
    return local
