"""An ended run's page, read from its Temporal history and the content store: no worker needs to answer.

A query to a closed run is a workflow task some worker must pick up and replay, so a page built from queries would
hang once the fleet is gone or serves other task queues. What the page needs is in the history already: the last
model call's input names the conversation it sent (the head of its chain in the store, and the messages after it),
its result is Claude's reply, and the run's result (or its failure) says how it ended.

The conversation is the one the run itself reports (``Run.transcript()``): the result carries it when it ends with
messages no model call stored (the tool results after a ``max_iterations`` cut-off, a message injected last;
``workflows/result_transcript.py``), else it is the last model call's and its reply, and a run that never called the
model shows its input's messages (an execution that continued a run as new: the conversation it carried). A run that
ended without a result (failed, cancelled, terminated) after a model call shows the conversation up to the last
reply: what came after it is only in the run's memory (``whole`` is ``False`` then).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from temporalio.api.common.v1 import Payloads
from temporalio.api.history.v1 import HistoryEvent
from temporalio.converter import DataConverter

from agent_runner.client import AgentRunner
from agent_runner.contract.lean import full_output_json
from agent_runner.contract.transcript import Transcript
from agent_runner.contract.types import CREATE_MESSAGE_ACTIVITY, RunResult, RunStatus, RunStatusName, Usage

_ENDED: dict[str, RunStatusName] = {
    "completed": "completed",
    "failed": "failed",
    "canceled": "cancelled",
    "terminated": "terminated",
    "timed_out": "timed_out",
}
"""The run's status for how Temporal says it ended (``Run.ended``), when its result does not say."""


class _Reading:
    """What the history says, event by event."""

    def __init__(self) -> None:
        self.turns: dict[int, dict[str, Any]] = {}
        """Each model call's ``turn`` (``ModelTurn`` as plain JSON), by its scheduled event's id."""
        self.last: tuple[dict[str, Any], dict[str, Any]] | None = None
        """The last model call that got a reply: its turn, and the reply as held."""
        self.replies = 0
        self.usage = Usage()
        self.result: dict[str, Any] | None = None
        self.detail: str | None = None
        self.input: dict[str, Any] | None = None
        """The run's input (the first event's), for the messages of a run that never called the model."""


@dataclass(frozen=True)
class EndedRun:
    """An ended run as its history and the content store tell it."""

    status: RunStatus
    messages: list[dict[str, Any]]
    """The conversation, in the Messages API's wire shape, stored content put back."""
    whole: bool
    """Whether ``messages`` is the whole conversation the run held; ``False`` for a run that ended without a result
    after a model call: then it ends with the last reply, and any tool results after it are missing."""


async def _payloads(converter: DataConverter, payloads: Payloads) -> list[Any]:
    # The client's converter, codec included: an encrypting fleet's console holds its keys.
    return await converter.decode(payloads.payloads) if payloads.payloads else []


async def _read(converter: DataConverter, event: HistoryEvent, reading: _Reading) -> None:
    if event.HasField("workflow_execution_started_event_attributes"):
        (run_input,) = await _payloads(converter, event.workflow_execution_started_event_attributes.input) or [None]
        reading.input = run_input if isinstance(run_input, dict) else None
    elif event.HasField("activity_task_scheduled_event_attributes"):
        scheduled = event.activity_task_scheduled_event_attributes
        if scheduled.activity_type.name == CREATE_MESSAGE_ACTIVITY:
            (model_input,) = await _payloads(converter, scheduled.input) or [{}]
            if isinstance(model_input, dict) and isinstance(model_input.get("turn"), dict):
                reading.turns[event.event_id] = model_input["turn"]
    elif event.HasField("activity_task_completed_event_attributes"):
        completed = event.activity_task_completed_event_attributes
        turn = reading.turns.get(completed.scheduled_event_id)
        if turn is not None:
            (output,) = await _payloads(converter, completed.result) or [{}]
            if isinstance(output, dict) and "length" not in turn:
                output = full_output_json(output)  # a lean result (``contract/lean.py``): the whole reply
            message = output.get("message") if isinstance(output, dict) else None
            if isinstance(message, dict):
                reading.last = (turn, message)
                reading.replies += 1
                usage = message.get("usage") or {}
                reading.usage = Usage(
                    input_tokens=reading.usage.input_tokens + int(usage.get("input_tokens") or 0),
                    output_tokens=reading.usage.output_tokens + int(usage.get("output_tokens") or 0),
                )
    elif event.HasField("workflow_execution_completed_event_attributes"):
        (result,) = await _payloads(converter, event.workflow_execution_completed_event_attributes.result) or [None]
        reading.result = result if isinstance(result, dict) else None
    elif event.HasField("workflow_execution_failed_event_attributes"):
        reading.detail = event.workflow_execution_failed_event_attributes.failure.message
    elif event.HasField("workflow_execution_terminated_event_attributes"):
        reading.detail = event.workflow_execution_terminated_event_attributes.reason or None


async def _input_messages(runner: AgentRunner, run_input: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The messages a run was started with, as plain JSON (a run that ended before any model call).

    An execution that continued a run as new starts from the conversation it carried, not its input's messages.
    """
    continued = (run_input or {}).get("continued")
    if isinstance(continued, dict):
        try:
            carried = Transcript.model_validate(continued["conversation"]["transcript"])
        except (KeyError, TypeError, ValueError):
            return []
        resolved: list[dict[str, Any]] = await runner.content.resolve(
            [*(await runner.content.messages(carried.head)), *carried.pending]
        )
        return resolved
    messages = (run_input or {}).get("messages")
    if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
        return []  # an input the run refused: it had no conversation
    # The Python client sends them held (big content stored, placeholder-shaped data escaped); others plain.
    return await runner.content.resolve(messages) if (run_input or {}).get("held") is True else messages


async def ended_run(runner: AgentRunner, run_id: str, ended: str) -> EndedRun:
    """An ended run's status and conversation, from its history and the content store.

    Args:
        runner: The client (its Temporal client and content store).
        run_id: The run.
        ended: How Temporal says it ended (``Run.ended``), for a run whose result does not say.

    Raises:
        AgentRunError: Temporal would not give the run's history.
    """
    reading = _Reading()
    async for event in runner.attach(run_id).history_events():
        await _read(runner.client.data_converter, event, reading)
    result = RunResult.model_validate(reading.result) if reading.result is not None else None
    stop_reason: str | None = None
    whole = True
    if result is not None and result.transcript is not None:
        held = [*(await runner.content.messages(result.transcript.head)), *result.transcript.pending]
        messages = await runner.content.resolve(held)
    elif reading.last is not None:
        turn, reply = reading.last
        held = [
            *(await runner.content.messages(turn.get("head"))),
            *(turn.get("pending") or []),
            {"role": "assistant", "content": reply.get("content") or []},
        ]
        messages = await runner.content.resolve(held)
        stop_reason = reply.get("stop_reason")
        whole = result is not None
    else:
        messages = await _input_messages(runner, reading.input)
    if result is not None:
        status = RunStatus(
            status=result.status,
            iterations=result.iterations,
            stop_reason=result.stop_reason,
            usage=result.usage,
            stop_reason_detail=result.detail,
            transcript_length=len(messages),
        )
    else:
        status = RunStatus(
            status=_ENDED.get(ended, "failed"),
            iterations=reading.replies,
            stop_reason=stop_reason,
            usage=reading.usage,
            stop_reason_detail=reading.detail,
            transcript_length=len(messages),
        )
    return EndedRun(status=status, messages=messages, whole=whole)


async def ended_page(runner: AgentRunner, run_id: str, ended: str) -> dict[str, Any]:
    """The page's data for a run that has ended: its status and conversation (``ended_run``).

    Args:
        runner: The console's runner (its client and content store).
        run_id: The run.
        ended: How Temporal says it ended (``Run.ended``), for a run whose result does not say.

    Raises:
        AgentRunError: Temporal would not give the run's history.
    """
    run = await ended_run(runner, run_id, ended)
    return {
        "id": run_id,
        "status": run.status.model_dump(mode="json"),
        "waiting": None,
        "transcript": {"version": None, "messages": run.messages},
        "events_offset": None,
    }
