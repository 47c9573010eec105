"""An activity interceptor that records when an activity's attempts heartbeat, and can make one begin late."""

from __future__ import annotations

import time
from typing import Any

from temporalio import activity
from temporalio.worker import ActivityInboundInterceptor, ActivityOutboundInterceptor, ExecuteActivityInput, Interceptor


class Heartbeats(Interceptor):
    """Records when each attempt of an activity heartbeats: seconds after the server started it.

    Args:
        activity_type: The activity.
        begin_late: Block the worker's event loop this long before the first attempt begins, as a busy worker would.
    """

    def __init__(self, activity_type: str = "agent_runner.create_message", begin_late: float = 0.0) -> None:
        self.beats: list[list[float]] = []
        self.activity_type = activity_type
        self.begin_late = begin_late

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        log = self

        class Outbound(ActivityOutboundInterceptor):
            def heartbeat(self, *details: Any) -> None:
                if self.info().activity_type == log.activity_type:
                    log.beats[-1].append(time.time() - log.beats[-1][0])
                super().heartbeat(*details)

        class Inbound(ActivityInboundInterceptor):
            def init(self, outbound: ActivityOutboundInterceptor) -> None:
                super().init(Outbound(outbound))

            async def execute_activity(self, input: ExecuteActivityInput) -> Any:
                info = activity.info()
                if info.activity_type == log.activity_type:
                    log.beats.append([info.started_time.timestamp()])
                    if info.attempt == 1:
                        time.sleep(log.begin_late)  # noqa: ASYNC251 - the point: the whole event loop is held up
                return await super().execute_activity(input)

        return Inbound(next)
