"""A worker that serves some roles hands back the tasks of the others it gets from its queue.

Temporal offers an activity task to any worker polling its queue, whatever that worker registered. A fleet split by
role on one queue (``--serve workflows,model`` beside ``--serve tools``) therefore sends some tool calls to a worker
without tools, and some model calls or lookups to one with tools only. Left unregistered there, each such task fails
with the SDK's ``NotFoundError`` and waits out its retry policy's growing backoff (a minute after five misses).
Registered here as the worker's dynamic activity, each is handed back (``activities/tools.py``: ``hand_back``) and
offered again a second later; its last attempt fails saying what to start, and one of unlimited attempts is handed
back until a worker that serves it takes it. The queue may offer it to the same worker again (the tests saw four
misses in a row), so this is a safety net, not a deployment: every worker polling a queue should serve the same
roles, and roles split onto queues of their own (``--model-task-queue``, ``tool_options(task_queue=...)``).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import Any, NoReturn

from temporalio import activity
from temporalio.common import RawValue
from temporalio.exceptions import ApplicationError

from agent_runner.activities.tools import hand_back
from agent_runner.contract.types import NOT_SERVED_ERROR


def not_served(serve: Collection[str]) -> Callable[[Sequence[RawValue]], Any]:
    """The dynamic activity of a worker serving only ``serve``: every activity type it lacks is handed back."""
    roles = ",".join(serve)

    @activity.defn(dynamic=True)
    async def hand_back_what_is_not_served(_: Sequence[RawValue]) -> NoReturn:
        info = activity.info()
        # Unless this is the last attempt. An activity of unlimited attempts waits for a worker that serves it, as it
        # would in a queue no worker polled, its last failure saying why (the run's status shows it).
        hand_back(f"{info.activity_type} (it serves {roles})", unlimited=None)
        # No log line of its own: the SDK logs the failure, with the activity, workflow and attempt.
        raise ApplicationError(
            f"{info.activity_type} reached its last attempt on a worker of task queue {info.task_queue!r} that does "
            f"not run it (it serves {roles}): start a worker that serves all of its roles on that queue "
            "(python worker.py, or --serve workflows,model,tools), or give model calls and tools queues of their own "
            "(--model-task-queue, tool_options(task_queue=...)) so each queue's workers run the same activities.",
            type=NOT_SERVED_ERROR,
            non_retryable=True,
        )

    return hand_back_what_is_not_served
