"""Marks the activities a workflow starts after a wait of its own, so backpressure does not take the wait for load.

A worker's backpressure (``agent_runner/backpressure.py``) measures each run's *step*: from the end of its last
activity on this process to the moment Temporal scheduled its next one. That gap is the workflow task between them
(its wait on the sticky queue and its processing), the very wait that times out on a process that cannot keep up.
But a run may also wait on purpose between two activities: for an approval, a durable sleep, a child run, a retry's
backoff, or a ``tool_use`` signalled before its reply ended. Counted as steps, those waits would make a healthy
process look slow and shut its slots.

So every workflow's outbound calls are watched here (a plain Temporal interceptor, which the plugin installs for
all workflows of its workers): an activity started in a workflow task that took no activity result is one the run
started after waiting for something else, and it carries the ``AFTER_WAIT_HEADER``; the activity side leaves such a
step out. A task is told apart by its time (``workflow.now()``, the same all through one workflow task).

Nothing here changes what a workflow does on replay: headers are not compared, and the mark costs a few bytes of
history only on the activities that follow a wait.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from temporalio import workflow
from temporalio.api.common.v1 import Payload
from temporalio.worker import (
    Interceptor,
    StartActivityInput,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
    WorkflowOutboundInterceptor,
)

__all__ = ["AFTER_WAIT_HEADER", "AfterWaitInterceptor"]

AFTER_WAIT_HEADER = "agent-runner-after-wait"
"""The header of an activity a workflow started after waiting for something other than an activity's result."""

_MARK = Payload(metadata={"encoding": b"binary/null"})


class AfterWaitInterceptor(Interceptor):
    """Puts ``AFTER_WAIT_HEADER`` on each activity a workflow starts after a wait of its own."""

    def workflow_interceptor_class(self, input: WorkflowInterceptorClassInput) -> type[WorkflowInboundInterceptor]:  # noqa: A002
        """Every workflow of the worker."""
        del input
        return _Inbound


class _Inbound(WorkflowInboundInterceptor):
    def init(self, outbound: WorkflowOutboundInterceptor) -> None:
        super().init(_Outbound(outbound))


class _Outbound(WorkflowOutboundInterceptor):
    def __init__(self, next: WorkflowOutboundInterceptor) -> None:  # noqa: A002
        super().__init__(next)
        self._result_task: datetime | None = None  # the workflow task that last took an activity's result

    def start_activity(self, input: StartActivityInput) -> workflow.ActivityHandle[Any]:  # noqa: A002
        if self._result_task is not None and self._result_task != workflow.now():
            input.headers = {**input.headers, AFTER_WAIT_HEADER: _MARK}
        handle = super().start_activity(input)
        handle.add_done_callback(self._took_result)
        return handle

    def _took_result(self, _: object) -> None:
        self._result_task = workflow.now()
