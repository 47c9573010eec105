"""A run's live events: what a run publishes on its Workflow Stream (``EVENTS_TOPIC``), and how a client reads them.

Every event is a JSON object with ``type`` and ``iteration`` (the turn it belongs to, 1 for the first). The model
call publishes, for each attempt (``attempt``, 1 for the first):

- ``model_call_started``;
- ``block_start`` (``index``, ``block`` as started: a ``tool_use``'s ``id`` and ``name``, empty text, ...);
- ``text`` (``index``, ``text``), ``thinking`` (``index``, ``thinking``), ``tool_input`` (``index``,
  ``partial_json``): consecutive deltas of a block merged, written at most every ``FLUSH_INTERVAL`` seconds;
- ``block_stop`` (``index``).

These go to the run's live log in the content store (``ContentStore.append_live``), a side channel that costs the
run's history nothing: no signal, no workflow task. Everything else is published by the workflow on its Workflow
Stream (also at no cost in history: the stream is workflow state): ``iteration_started``, ``recorded_call``
(``attempt``: the model call's attempt whose reply the run recorded, after every live event of it), ``reply``
(``message``: the whole reply as recorded), ``tool_started`` (``tool_use_id``, ``name``, ``input``),
``approval_waiting`` (``approval``: the pending approval), ``approval_decided`` (``tool_use_id``, ``approved``,
``reason``), ``tool_finished`` (``tool_use_id``, ``name``, ``result``: the exact ``tool_result`` block),
``agent_started`` (``tool_use_id``, ``name``, ``run_id``: an agent call started a child run, ``subagents.py``),
``tool_outcome_unknown`` (``tool_use_id``, ``name``, ``detail``, ``on_unknown``: an ``at_most_once`` call's attempt
was lost and will not be re-run blindly), ``step_waiting`` (``status``: ``waiting_for_step`` after a reply,
``waiting_for_review`` before its tool results go out, in step mode), ``limit_reached`` (``limit``:
``max_iterations`` or ``budget_exhausted``, ``detail``) and, last, ``run_finished`` (``status``, ``detail``).

A model call that fails mid-stream is retried by Temporal: its next attempt starts again from the first token. A
client therefore reads the events through ``AttemptFilter`` (``Run.events`` does), which yields one ``retracted``
event (``iteration``, ``attempt``: the discarded one) when a new attempt starts after an earlier one streamed
something, and never yields events of a superseded attempt that arrive late (an attempt Temporal gave up on may
still be streaming on its worker).

``Run.events`` merges the two: a turn's live events come after its ``iteration_started`` and before its
``recorded_call``, and take the ``offset`` of the stream event they follow.

Each event type is a pydantic model here (``TextDelta``, ``ToolFinished``, ``RunFinished``, ...), and ``RunEvent``
their union, told apart by ``type``; ``parse_event`` reads one published event, and ``Event.to_wire`` gives back the
exact JSON object that was published (the wire format is the dicts above: a model never adds or drops a field).
``Run.events`` yields these models, each with its stream ``offset``.

This module is imported by workflow code, so it holds no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Final, Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from agent_runner.contract.steering import PendingApproval
from agent_runner.contract.types import OnUnknown, RunStatusName

FLUSH_INTERVAL = 0.3
"""The most often, in seconds, a model call writes its streamed deltas to the run's live log (one store write)."""

MODEL_CALL_STARTED: Final = "model_call_started"
BLOCK_START: Final = "block_start"
TEXT: Final = "text"
THINKING: Final = "thinking"
TOOL_INPUT: Final = "tool_input"
BLOCK_STOP: Final = "block_stop"
ITERATION_STARTED: Final = "iteration_started"
REPLY: Final = "reply"
TOOL_STARTED: Final = "tool_started"
TOOL_FINISHED: Final = "tool_finished"
AGENT_STARTED: Final = "agent_started"
TOOL_OUTCOME_UNKNOWN: Final = "tool_outcome_unknown"
APPROVAL_WAITING: Final = "approval_waiting"
APPROVAL_DECIDED: Final = "approval_decided"
STEP_WAITING: Final = "step_waiting"
LIMIT_REACHED: Final = "limit_reached"
RUN_FINISHED: Final = "run_finished"
RECORDED_CALL: Final = "recorded_call"
RETRACTED: Final = "retracted"
"""Made by ``AttemptFilter``, never published: drop what attempt ``attempt`` of turn ``iteration`` streamed."""

DELTA_FIELDS = {TEXT: "text", THINKING: "thinking", TOOL_INPUT: "partial_json"}
"""The delta events, and the field each one's piece of the block is in."""


class Event(BaseModel):
    """What every live event has: its turn, and (once read from the stream) its position there."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    iteration: int
    """The turn the event belongs to, 1 for the first."""
    offset: int | None = None
    """The event's position in the run's stream, set by the client that read it (never published): resume after it
    with ``Run.events(after=offset + 1)``. An event of a child run has the offset of its place in the child's stream."""
    path: tuple[str, ...] = ()
    """Whose event it is, set by the client that read it (never published): ``()`` for the run watched, the
    ``tool_use_id`` of the agent call that started a child run for that child's (``("toolu_A",)``), and one more per
    level below (``("toolu_A", "toolu_B")`` for a grandchild)."""

    def to_wire(self) -> dict[str, Any]:
        """The event as it is published on the stream: a JSON object, without the reader's ``offset``."""
        return self.model_dump(mode="json", exclude={"offset", "path"})


class ModelCallEvent(Event):
    """An event of one attempt of a turn's model call, published by the activity as the reply streams."""

    attempt: int
    """The model call activity's attempt, 1 for the first: a retried call streams again from its first token."""


class ModelCallStarted(ModelCallEvent):
    """An attempt of the model call began; what an earlier attempt of the turn streamed is void."""

    type: Literal["model_call_started"] = MODEL_CALL_STARTED


class BlockStart(ModelCallEvent):
    """A content block began: ``block`` as started (a ``tool_use``'s ``id`` and ``name``, an empty text, ...)."""

    type: Literal["block_start"] = BLOCK_START
    index: int
    block: dict[str, Any]


class TextDelta(ModelCallEvent):
    """More text of block ``index`` (consecutive deltas merged)."""

    type: Literal["text"] = TEXT
    index: int
    text: str


class ThinkingDelta(ModelCallEvent):
    """More thinking of block ``index`` (consecutive deltas merged)."""

    type: Literal["thinking"] = THINKING
    index: int
    thinking: str


class ToolInputDelta(ModelCallEvent):
    """More of a tool call's input JSON, block ``index`` (consecutive deltas merged)."""

    type: Literal["tool_input"] = TOOL_INPUT
    index: int
    partial_json: str


class BlockStop(ModelCallEvent):
    """Block ``index`` is complete."""

    type: Literal["block_stop"] = BLOCK_STOP
    index: int


class RecordedCall(ModelCallEvent):
    """Published by the run when it recorded a model call's reply: ``attempt`` is the attempt it kept.

    Every live event of that attempt came before it. ``Run.events`` places live events by it and does not yield it.
    """

    type: Literal["recorded_call"] = RECORDED_CALL


class Retracted(ModelCallEvent):
    """Made by ``AttemptFilter``, never published: drop what attempt ``attempt`` of turn ``iteration`` streamed."""

    type: Literal["retracted"] = RETRACTED


class IterationStarted(Event):
    """A turn began: its model call comes next."""

    type: Literal["iteration_started"] = ITERATION_STARTED


class ReplyReceived(Event):
    """Claude's whole reply of the turn, as the run recorded it (``message``, in the Messages API's shape)."""

    type: Literal["reply"] = REPLY
    message: dict[str, Any]


class ToolStarted(Event):
    """A tool call of the turn's reply started running."""

    type: Literal["tool_started"] = TOOL_STARTED
    tool_use_id: str
    name: str
    input: Any


class ToolFinished(Event):
    """A tool call finished: ``result`` is the exact ``tool_result`` block Claude gets."""

    type: Literal["tool_finished"] = TOOL_FINISHED
    tool_use_id: str
    name: str
    result: dict[str, Any]


class AgentStarted(Event):
    """An agent call started its child run (``run_id``), whose events a watcher of this run can follow too."""

    type: Literal["agent_started"] = AGENT_STARTED
    tool_use_id: str
    name: str
    run_id: str


class ToolOutcomeUnknown(Event):
    """An ``at_most_once`` call's attempt was lost; it is not run again blindly, ``on_unknown`` decides."""

    type: Literal["tool_outcome_unknown"] = TOOL_OUTCOME_UNKNOWN
    tool_use_id: str
    name: str
    detail: str
    on_unknown: OnUnknown


class ApprovalWaiting(Event):
    """A tool call waits for a person to approve or deny it."""

    type: Literal["approval_waiting"] = APPROVAL_WAITING
    approval: PendingApproval


class ApprovalDecided(Event):
    """A person approved or denied a waiting tool call (``reason``: what Claude is told of a denial)."""

    type: Literal["approval_decided"] = APPROVAL_DECIDED
    tool_use_id: str
    approved: bool
    reason: str | None


class StepWaiting(Event):
    """In step mode, the run waits to be advanced: after a reply, or before its tool results go out."""

    type: Literal["step_waiting"] = STEP_WAITING
    status: Literal["waiting_for_step", "waiting_for_review"]


class LimitReached(Event):
    """The run reached a limit: ``max_iterations`` or ``budget_exhausted`` (``detail`` says which and why)."""

    type: Literal["limit_reached"] = LIMIT_REACHED
    limit: Literal["max_iterations", "budget_exhausted"]
    detail: str | None


class RunFinished(Event):
    """The last event of a run: how it ended, and why when it did not end on its own."""

    type: Literal["run_finished"] = RUN_FINISHED
    status: RunStatusName
    detail: str | None


RunEvent: TypeAlias = Annotated[
    ModelCallStarted
    | BlockStart
    | TextDelta
    | ThinkingDelta
    | ToolInputDelta
    | BlockStop
    | RecordedCall
    | Retracted
    | IterationStarted
    | ReplyReceived
    | ToolStarted
    | ToolFinished
    | AgentStarted
    | ToolOutcomeUnknown
    | ApprovalWaiting
    | ApprovalDecided
    | StepWaiting
    | LimitReached
    | RunFinished,
    Field(discriminator="type"),
]
"""One live event of a run, its model chosen by ``type``."""

_RUN_EVENT: TypeAdapter[RunEvent] = TypeAdapter(RunEvent)

EVENT_TYPES = frozenset(DELTA_FIELDS) | {
    MODEL_CALL_STARTED,
    BLOCK_START,
    BLOCK_STOP,
    RECORDED_CALL,
    ITERATION_STARTED,
    REPLY,
    TOOL_STARTED,
    TOOL_FINISHED,
    AGENT_STARTED,
    TOOL_OUTCOME_UNKNOWN,
    APPROVAL_WAITING,
    APPROVAL_DECIDED,
    STEP_WAITING,
    LIMIT_REACHED,
    RUN_FINISHED,
}
"""The ``type`` of every published event (``retracted`` is never published)."""


def parse_event(data: Mapping[str, Any], *, offset: int | None = None) -> RunEvent:
    """The typed event for one published JSON object.

    Args:
        data: The event as published (``type``, ``iteration`` and the fields of its type).
        offset: Its position in the run's stream, when read from it.

    Raises:
        pydantic.ValidationError: An unknown ``type``, a missing field, or a field the type does not have.
    """
    return _RUN_EVENT.validate_python({**data, "offset": offset} if offset is not None else dict(data))


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
        if not isinstance(event, ModelCallEvent):
            return [event]
        iteration, attempt = event.iteration, event.attempt
        latest = self._latest.get(iteration)
        if latest is not None and attempt < latest:
            return []  # a zombie attempt still streaming: its turn has moved on
        out: list[RunEvent] = []
        if latest is not None and attempt > latest and (iteration, latest) in self._streamed:
            out.append(Retracted(iteration=iteration, attempt=latest, offset=event.offset))
        self._latest[iteration] = attempt
        if not isinstance(event, ModelCallStarted):
            self._streamed.add((iteration, attempt))
        out.append(event)
        return out
