"""When a running activity attempt heartbeats: as seldom as is safe, counted from when the server started it.

Temporal fails an attempt that sends no heartbeat within its heartbeat timeout, counted from the attempt's start on
the server, then from each heartbeat. A worker begins an attempt some time after that start (at once when it is idle,
seconds later when its event loop is busy), so an interval counted from the activity function's own start would let
a late attempt miss its timeout and be sent again: a model call billed twice, a tool run twice. Counted from both
(the later reading wins), a late attempt heartbeats at once, and a prompt one only after a whole interval, so a call
that ends within it sends none (a request to the server less). A worker clock ahead of the server's only makes the
first heartbeat come sooner; after it, the worker's own clock counts.

Each heartbeat is a write on the server, so they come no more often than ``EVERY``: at every second, each 1 s model
call of ``bench/load.py`` (300 runs) sent one, and the worker kept up with about 5% fewer iterations per second.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from temporalio import activity

EVERY = 1.5
"""Seconds between two heartbeats of a call whose heartbeat timeout allows it: half the model call's default 3 s
(``workflows/live.py``), which leaves as long again for a heartbeat to reach the server (Temporal's own default
waits up to 80% of the timeout). A cancelled run's call learns of it at its next heartbeat, so within about this."""


class HeartbeatClock:
    """The current attempt's heartbeats: every ``every`` seconds, at least twice per heartbeat timeout.

    Args:
        every: The longest time between two heartbeats, for an attempt whose heartbeat timeout allows it.
    """

    def __init__(self, every: float) -> None:
        info = activity.info()
        if info.heartbeat_timeout:
            every = min(every, info.heartbeat_timeout.total_seconds() / 2)
        self.every = every
        self._loop = asyncio.get_running_loop()
        self._last = self._loop.time()
        self._last_wall = info.started_time.timestamp()

    def left(self) -> float:
        """Seconds until the next heartbeat is due; 0 when it is."""
        since = max(self._loop.time() - self._last, time.time() - self._last_wall)
        return max(0.0, self.every - since)

    def beat_if_due(self) -> None:
        """Heartbeat if one is due."""
        if self.left() == 0:
            self.beat()

    def beat(self, *details: Any) -> None:
        """Heartbeat now, with ``details`` (what the next attempt gets if this one ends without another)."""
        heartbeat(*details)
        self._last, self._last_wall = self._loop.time(), time.time()


def heartbeat(*details: Any) -> None:
    """``activity.heartbeat``, but in a local activity (a ``local`` tool's call), which has no heartbeats to send."""
    if not activity.info().is_local:  # the worker's core refuses a local one's, with a warning each time
        activity.heartbeat(*details)


async def heartbeat_until(task: asyncio.Future[Any], every: float, deadline: float | None = None) -> bool:
    """Wait for ``task``, heartbeating as ``HeartbeatClock(every)`` says.

    Returns:
        ``True`` once it is done; ``False`` if ``deadline`` (on the event loop's clock) passes first, the task still
        running.
    """
    loop = asyncio.get_running_loop()
    heartbeats = HeartbeatClock(every)
    while not task.done():
        left = None if deadline is None else deadline - loop.time()
        if left is not None and left <= 0:
            return False
        due = heartbeats.left()
        await asyncio.wait({task}, timeout=due if left is None else min(left, due, 1.0))
        if not task.done():
            heartbeats.beat_if_due()
    return True
