"""Publishing a model call's live events on its run's Workflow Stream (``agent_runner/contract/events.py`` lists them).

Each publish from an activity is a signal, one event in the run's history, so deltas are merged: consecutive
deltas of one block become one event, and what gathered is sent at most every ``FLUSH_INTERVAL`` seconds (the
attempt's start at once, so a client retracts a failed attempt's text promptly).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any

from temporalio.contrib.workflow_streams import WorkflowStreamClient

from agent_runner.contract.events import (
    DELTA_FIELDS,
    FLUSH_INTERVAL,
    MODEL_CALL_STARTED,
    DeltaEvent,
    RunEvent,
    parse_event,
)
from agent_runner.contract.types import EVENTS_TOPIC

logger = logging.getLogger(__name__)


class EventPublisher:
    """One model-call attempt's events, merged and sent to the run in few signals.

    Use it as an async context manager: leaving it sends what is left and waits until the run has it.

    Args:
        stream: The run's stream client (``WorkflowStreamClient.from_within_activity()``).
        iteration: The turn the call belongs to.
        attempt: The activity's attempt.
        interval: The least time between two sends, in seconds.
        clock: Monotonic seconds (tests may pass a fake one).
    """

    def __init__(
        self,
        stream: WorkflowStreamClient,
        *,
        iteration: int,
        attempt: int,
        interval: float = FLUSH_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._stream = stream
        self._topic = stream.topic(EVENTS_TOPIC)
        self._iteration = iteration
        self._attempt = attempt
        self._interval = interval
        self._clock = clock
        self._buffer: list[RunEvent] = []
        """Events not sent yet, typed: a field the event type does not have fails here, not in a client."""
        self._last_send = clock()
        self._sending: asyncio.Future[None] | None = None

    @property
    def interval(self) -> float:
        """The least time between two sends, in seconds."""
        return self._interval

    async def __aenter__(self) -> EventPublisher:
        self.publish(MODEL_CALL_STARTED)
        self.send()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.send()
        if self._sending is not None:
            await self._sending
        await self._flush()  # what a failed send left pending

    def publish(self, event_type: str, **fields: Any) -> None:
        """Queue one event of this attempt.

        Raises:
            pydantic.ValidationError: ``fields`` are not those of ``event_type`` (``contract/events.py``).
        """
        event = {"type": event_type, "iteration": self._iteration, "attempt": self._attempt, **fields}
        self._buffer.append(parse_event(event))
        self.tick()

    def delta(self, event_type: str, index: int, piece: str) -> None:
        """Queue a delta (``text``, ``thinking``, ``tool_input``) of block ``index``.

        It is merged into the event before it when that one is a delta of the same block still waiting to be sent.
        """
        key = DELTA_FIELDS[event_type]
        last = self._buffer[-1] if self._buffer else None
        if isinstance(last, DeltaEvent) and last.type == event_type and last.index == index:
            self._buffer[-1] = last.model_copy(update={key: getattr(last, key) + piece})
            self.tick()
        else:
            self.publish(event_type, index=index, **{key: piece})

    def tick(self) -> None:
        """Send what gathered if the last send was at least ``interval`` ago."""
        if self._buffer and self._clock() - self._last_send >= self._interval:
            self.send()

    def send(self) -> None:
        """Signal what gathered to the run, in the background."""
        if not self._buffer:
            return
        for event in self._buffer:
            self._topic.publish(event.to_wire())
        self._buffer = []
        self._last_send = self._clock()
        # A send still under way takes these along: `flush` loops until the client's buffer is empty.
        if self._sending is None or self._sending.done():
            self._sending = asyncio.ensure_future(self._flush())

    async def _flush(self) -> None:
        try:
            await self._stream.flush()
        except Exception as e:  # noqa: BLE001 (live events are best effort: the reply matters, not its preview)
            logger.warning("Could not publish the model call's live events: %s: %s", type(e).__name__, e)


def stream_client() -> WorkflowStreamClient:
    """The stream client of the run whose activity this is.

    The publisher calls its ``flush`` itself rather than running the client's background flusher: cancelling that
    task right after waking it can be lost on Python 3.11 (``asyncio.wait_for``), which hangs the exit.
    """
    return WorkflowStreamClient.from_within_activity()
