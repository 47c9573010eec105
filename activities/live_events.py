"""Writing a model call's live events to its run's live log (``agent_runner/contract/events.py`` lists them).

The live log is the content store's side channel (``ContentStore.append_live``): what the reply streams reaches
watchers without a signal, a history event or a workflow task. Deltas are merged (consecutive deltas of one block
become one event) and what gathered is written every ``FLUSH_INTERVAL`` seconds at most, in one store write, so a
client retracts a failed attempt's text within that time of the next attempt's start. Leaving the publisher writes
what is left and waits for it, so every event of an attempt is in the log before the attempt's reply reaches the
run; or the model call takes what is left (``take``) and writes it in the commit that stores the reply.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any

from agent_runner.contract.events import DELTA_FIELDS, FLUSH_INTERVAL, MODEL_CALL_STARTED, parse_event
from agent_runner.store import ContentStore, LiveEntries

logger = logging.getLogger(__name__)


class EventPublisher:
    """One model-call attempt's events, merged and written to the run's live log in few store writes.

    Use it as an async context manager: leaving it writes what is left and waits until the store has it.

    Args:
        store: The content store the run's watchers read (``Run.events``).
        run_id: The run's workflow id.
        iteration: The turn the call belongs to.
        attempt: The activity's attempt.
        interval: The least time between two writes, in seconds.
        clock: Monotonic seconds (tests may pass a fake one).
    """

    def __init__(
        self,
        store: ContentStore,
        run_id: str,
        *,
        iteration: int,
        attempt: int,
        interval: float = FLUSH_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store = store
        self._run_id = run_id
        self._iteration = iteration
        self._attempt = attempt
        self._interval = interval
        self._clock = clock
        self._buffer: list[dict[str, Any]] = []
        """Events not written yet, as published; a delta's pieces are joined when it is written."""
        self._pieces: list[str] = []
        """The pieces of the last buffered event when it is a delta: joined once, not on every token."""
        self._outbox: list[bytes] = []
        self._last_send = clock()
        self._sending: asyncio.Future[None] | None = None

    @property
    def interval(self) -> float:
        """The least time between two writes, in seconds."""
        return self._interval

    async def __aenter__(self) -> EventPublisher:
        # Written with what follows it (`tick`), so a reply's events cost one store write per `interval` and none
        # while the model has sent nothing.
        self.publish(MODEL_CALL_STARTED)
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.flush()

    async def flush(self) -> None:
        """Write what gathered, and wait until every event queued so far is written (or failed to be)."""
        self.send()
        while self._sending is not None and not self._sending.done():
            await asyncio.shield(self._sending)

    async def take(self) -> LiveEntries:
        """What is left to write, for the caller to write itself (``ContentStore.commit``), after the writes under way.

        The caller then writes it in the same commit as the reply (one disk sync instead of two), and the log keeps
        the events' order. Leaving the publisher afterwards writes only what was published since.
        """
        while self._sending is not None and not self._sending.done():
            await asyncio.shield(self._sending)
        self._close_delta()
        entries = [*self._outbox, *(json.dumps(event, separators=(",", ":")).encode() for event in self._buffer)]
        self._outbox, self._buffer = [], []
        return self._run_id, entries

    def publish(self, event_type: str, **fields: Any) -> None:
        """Queue one event of this attempt.

        Raises:
            pydantic.ValidationError: ``fields`` are not those of ``event_type`` (``contract/events.py``).
        """
        event = {"type": event_type, "iteration": self._iteration, "attempt": self._attempt, **fields}
        parse_event(event)  # a field the event type does not have fails here, not in a client
        self._close_delta()
        self._buffer.append(event)

    def delta(self, event_type: str, index: int, piece: str) -> None:
        """Queue a delta (``text``, ``thinking``, ``tool_input``) of block ``index``.

        It is merged into the event before it when that one is a delta of the same block still waiting to be written.
        This runs for every token, so it only appends a string.
        """
        last = self._buffer[-1] if self._buffer else None
        if last is not None and self._pieces and last["type"] == event_type and last["index"] == index:
            self._pieces.append(piece)
            return
        self._close_delta()
        self._buffer.append(
            {"type": event_type, "iteration": self._iteration, "attempt": self._attempt, "index": index}
        )
        self._pieces = [piece]

    def _close_delta(self) -> None:
        if self._pieces:
            last = self._buffer[-1]
            last[DELTA_FIELDS[last["type"]]] = "".join(self._pieces)
            self._pieces = []

    def tick(self) -> None:
        """Write what gathered if the last write was at least ``interval`` ago.

        A first attempt's ``model_call_started`` alone waits for the reply's first event: the run's
        ``iteration_started`` already told watchers the turn began, and the model takes seconds to begin a reply, so
        writing it alone would cost a store write per turn for nothing. A retry's is written alone, so watchers drop
        the failed attempt's text within ``interval`` of the retry's start.
        """
        if not self._buffer or self._clock() - self._last_send < self._interval:
            return
        if self._attempt == 1 and len(self._buffer) == 1 and self._buffer[0]["type"] == MODEL_CALL_STARTED:
            return
        self.send()

    def send(self) -> None:
        """Write what gathered to the run's live log, in the background and in order."""
        if not self._buffer:
            return
        self._close_delta()
        self._outbox.extend(json.dumps(event, separators=(",", ":")).encode() for event in self._buffer)
        self._buffer = []
        self._last_send = self._clock()
        # One writer at a time, so the log keeps the events' order: a write under way takes these along.
        if self._sending is None or self._sending.done():
            self._sending = asyncio.ensure_future(self._write())

    async def _write(self) -> None:
        while self._outbox:
            batch, self._outbox = self._outbox, []
            try:
                await self._store.append_live(self._run_id, batch)
            except Exception as e:  # noqa: BLE001 (live events are best effort: the reply matters, not its preview)
                logger.warning("Could not write the model call's live events: %s: %s", type(e).__name__, e)
