"""A run's live events: what a run publishes on its Workflow Stream (``EVENTS_TOPIC``), and how a client reads them.

Every event is a JSON object with ``type`` and ``iteration`` (the turn it belongs to, 1 for the first). The model
call publishes, for each attempt (``attempt``, 1 for the first):

- ``model_call_started``;
- ``block_start`` (``index``, ``block`` as started: a ``tool_use``'s ``id`` and ``name``, empty text, ...);
- ``text`` (``index``, ``text``), ``thinking`` (``index``, ``thinking``), ``tool_input`` (``index``,
  ``partial_json``): consecutive deltas of a block merged, published at most every ``FLUSH_INTERVAL`` seconds, so a
  long reply costs a few signals in the run's history rather than one per token;
- ``block_stop`` (``index``).

The workflow publishes (at no cost in history): ``iteration_started``, ``reply`` (``message``: the whole reply as
recorded), ``tool_started`` (``tool_use_id``, ``name``, ``input``), ``approval_waiting`` (``approval``: the pending
approval), ``approval_decided`` (``tool_use_id``, ``approved``, ``reason``), ``tool_finished`` (``tool_use_id``,
``name``, ``result``: the exact ``tool_result`` block), ``tool_outcome_unknown`` (``tool_use_id``, ``name``,
``detail``, ``on_unknown``: an ``at_most_once`` call's attempt was lost and will not be re-run blindly),
``step_waiting`` (``status``: ``waiting_for_step`` after a
reply, ``waiting_for_review`` before its tool results go out, in step mode), ``limit_reached`` (``limit``:
``max_iterations`` or ``budget_exhausted``, ``detail``) and, last, ``run_finished`` (``status``, ``detail``).

A model call that fails mid-stream is retried by Temporal: its next attempt starts again from the first token. A
client therefore reads the events through ``AttemptFilter`` (``Run.events`` does), which yields one ``retracted``
event (``iteration``, ``attempt``: the discarded one) when a new attempt starts after an earlier one streamed
something, and never yields events of a superseded attempt that arrive late (an attempt Temporal gave up on may
still be streaming on its worker).

This module is imported by workflow code, so it holds no I/O.
"""

from __future__ import annotations

from typing import Any, Required, TypedDict

FLUSH_INTERVAL = 0.3
"""The most often, in seconds, a model call sends its streamed deltas to the run (one signal each time)."""

MODEL_CALL_STARTED = "model_call_started"
BLOCK_START = "block_start"
TEXT = "text"
THINKING = "thinking"
TOOL_INPUT = "tool_input"
BLOCK_STOP = "block_stop"
ITERATION_STARTED = "iteration_started"
REPLY = "reply"
TOOL_STARTED = "tool_started"
TOOL_FINISHED = "tool_finished"
TOOL_OUTCOME_UNKNOWN = "tool_outcome_unknown"
APPROVAL_WAITING = "approval_waiting"
APPROVAL_DECIDED = "approval_decided"
STEP_WAITING = "step_waiting"
LIMIT_REACHED = "limit_reached"
RUN_FINISHED = "run_finished"
RETRACTED = "retracted"
"""Made by ``AttemptFilter``, never published: drop what attempt ``attempt`` of turn ``iteration`` streamed."""

DELTA_FIELDS = {TEXT: "text", THINKING: "thinking", TOOL_INPUT: "partial_json"}
"""The delta events, and the field each one's piece of the block is in."""


class RunEvent(TypedDict, total=False):
    """One live event of a run; which fields it has depends on its ``type`` (see the module's docstring)."""

    type: Required[str]
    iteration: Required[int]
    offset: int
    """The event's position in the run's stream: resume after it with ``Run.events(after=offset + 1)``."""
    attempt: int
    index: int
    text: str
    thinking: str
    partial_json: str
    block: dict[str, Any]
    message: dict[str, Any]
    tool_use_id: str
    name: str
    input: Any
    result: dict[str, Any]
    approval: dict[str, Any]
    approved: bool
    reason: str | None
    limit: str
    status: str
    detail: str | None
    on_unknown: str


class AttemptFilter:
    """Keeps only the events of each turn's latest model-call attempt, and says when an earlier one is discarded."""

    def __init__(self) -> None:
        self._latest: dict[int, int] = {}
        self._streamed: set[tuple[int, int]] = set()

    def feed(self, event: RunEvent) -> list[RunEvent]:
        """The events to yield for ``event``.

        None for a late event of a superseded attempt; else the event, after a ``retracted`` event for the turn's
        previous attempt when this one replaces an attempt that streamed something.
        """
        attempt = event.get("attempt")
        if attempt is None:
            return [event]
        iteration = event["iteration"]
        latest = self._latest.get(iteration)
        if latest is not None and attempt < latest:
            return []  # a zombie attempt still streaming: its turn has moved on
        out: list[RunEvent] = []
        if latest is not None and attempt > latest and (iteration, latest) in self._streamed:
            retracted: RunEvent = {"type": RETRACTED, "iteration": iteration, "attempt": latest}
            if "offset" in event:
                retracted["offset"] = event["offset"]
            out.append(retracted)
        self._latest[iteration] = attempt
        if event["type"] != MODEL_CALL_STARTED:
            self._streamed.add((iteration, attempt))
        out.append(event)
        return out
