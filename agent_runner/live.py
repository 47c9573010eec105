"""A run's live events as a watcher sees them: its durable stream events with its live log put among them.

The run publishes turn boundaries, replies and tool results on its Workflow Stream; the model call writes what it
streams to the run's live log in the content store (``activities/live_events.py``), not to the run's history.
``LiveMerge`` puts each live event where it belongs: after its turn's ``iteration_started`` and before that turn's
``recorded_call`` (or ``reply``, for a run recorded before ``recorded_call`` existed), which the run publishes only
once the call's every live event is in the log. A late event of a turn already recorded (a superseded attempt still
streaming on its worker) is dropped; ``AttemptFilter`` then retracts a failed attempt's text when the next one starts.

A live event has no stream offset of its own: it takes the offset of the stream event before it (its turn's
``iteration_started``), so a watcher that resumes after that offset (``Run.events(after=offset + 1)``, a browser's
``Last-Event-ID``) does not get the turn's streamed text again (nor an earlier turn's), and gets the turn's reply
whole: a watcher gets the live events of the turns whose ``iteration_started`` it saw, and of no other.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from pydantic import ValidationError

from agent_runner.contract.errors import StoreError
from agent_runner.contract.events import (
    EVENT_TYPES,
    IterationStarted,
    RecordedCall,
    ReplyReceived,
    RunEvent,
    parse_event,
)
from agent_runner.store import LIVE_READ_LIMIT, ContentStore

logger = logging.getLogger(__name__)

LIVE_POLL = 0.1
"""Seconds between two reads of a run's live log while a watcher waits for its next stream event."""


class LiveMerge:
    """Reads one run's live log and says which live events to yield, and when.

    Args:
        store: The store the run's workers write live events to.
        run_id: The run's workflow id.
    """

    def __init__(self, store: ContentStore, run_id: str) -> None:
        self._store = store
        self._run_id = run_id
        self._read = 0
        """The live log's position read up to."""
        self._turn = 0
        """The latest turn a stream event was seen of: live events of later turns wait for its ``iteration_started``."""
        self._recorded: set[int] = set()
        """Turns whose call the run recorded: a live event of one of them comes from an attempt that lost."""
        self._started: set[int] = set()
        """Turns whose ``iteration_started`` the watcher saw: only their live events come after its resume point."""
        self._held: list[dict[str, Any]] = []
        self._offset: int | None = None
        self._broken = False

    @property
    def streaming(self) -> bool:
        """Whether a turn the watcher saw start has not been recorded yet: only then can its live log have news.

        A watcher of a run that waits (for a tool, a person, a timer) reads nothing from the store meanwhile.
        """
        return self._turn in self._started and self._turn not in self._recorded

    async def poll(self) -> list[RunEvent]:
        """The live events to yield now, in order (each with the ``offset`` of the stream event before it)."""
        out: list[RunEvent] = []
        while not self._broken:
            try:
                rows = await self._store.read_live(self._run_id, self._read)
            except StoreError as e:
                # Previews are best effort: the stream's events (replies whole) still come.
                logger.warning("Run %s: cannot read its live events, so replies arrive whole: %s", self._run_id, e)
                self._broken = True
                break
            for seq, data in rows:
                self._read = seq
                self._take(data, out)
            if len(rows) < LIVE_READ_LIMIT:
                break
        return out

    async def before(self, event: RunEvent) -> list[RunEvent]:
        """The live events to yield before the stream event ``event``."""
        if isinstance(event, IterationStarted):
            self._started.add(event.iteration)
        else:
            self._advance(event.iteration)
        out = await self.poll()
        if isinstance(event, (RecordedCall, ReplyReceived)):
            self._recorded.add(event.iteration)
        return out

    def after(self, event: RunEvent) -> list[RunEvent]:
        """The live events to yield right after the stream event ``event``: those that waited for its turn."""
        self._offset = event.offset
        out: list[RunEvent] = []
        if event.iteration > self._turn:
            self._advance(event.iteration)
            held, self._held = self._held, []
            for data in held:
                self._take(data, out)
        return out

    def _advance(self, turn: int) -> None:
        self._turn = max(self._turn, turn)

    def _take(self, raw: bytes | dict[str, Any], out: list[RunEvent]) -> None:
        data = _readable(self._run_id, raw)
        if data is None:
            return
        turn = data["iteration"]
        if turn in self._recorded:
            return
        if turn > self._turn:
            self._held.append(data)
            return
        if turn not in self._started:
            # The watcher resumed after this turn's `iteration_started` (a turn before the first it saw, or the one it
            # resumed inside): the turn's live events have that event's offset, so they are before the resume point
            # (its reply comes whole). Marking only the turn of the first event seen was not enough: the live log of
            # every earlier turn was held as "later" and then yielded once the next `iteration_started` released it.
            return
        event = _parsed(self._run_id, data, self._offset)
        if event is not None:
            out.append(event)


async def read_live_log(store: ContentStore, run_id: str) -> list[RunEvent]:
    """A run's whole live log, as events in the order written: what its model calls streamed, attempt by attempt.

    For a run that has ended (``console/ended.py``); a watcher of a running one reads it through ``LiveMerge``.

    Raises:
        StoreError: The store cannot read it.
    """
    events: list[RunEvent] = []
    read = 0
    while True:
        rows = await store.read_live(run_id, read)
        for seq, raw in rows:
            read = seq
            data = _readable(run_id, raw)
            event = _parsed(run_id, data, None) if data is not None else None
            if event is not None:
                events.append(event)
        if len(rows) < LIVE_READ_LIMIT:
            return events


def _readable(run_id: str, raw: bytes | dict[str, Any]) -> dict[str, Any] | None:
    """A live log entry as JSON, if it is an event of a type this client knows, with its turn; else ``None``."""
    try:
        data = json.loads(raw) if isinstance(raw, bytes) else raw
    except ValueError:
        logger.debug("Run %s: skipped a live event that is not JSON", run_id)
        return None
    known = isinstance(data, dict) and data.get("type") in EVENT_TYPES
    if not known or not isinstance(data.get("iteration"), int):
        logger.debug("Run %s: skipped an unknown live event %r", run_id, data)
        return None
    return data


def _parsed(run_id: str, data: dict[str, Any], offset: int | None) -> RunEvent | None:
    try:
        return parse_event(data, offset=offset)
    except ValidationError:
        logger.debug("Run %s: skipped a live event this client cannot read %r", run_id, data)
        return None
