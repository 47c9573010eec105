"""An ended run's page, read from its Temporal history and the content store: no worker needs to answer.

A query to a closed run is a workflow task some worker must pick up and replay, so a page built from queries would
hang once the fleet is gone or serves other task queues. What the page needs is in the history already: each model
call's input names the conversation it sent (the head of its chain in the store, and the messages after it), its
result is Claude's reply, each tool call's result is its activity's, and the run's result (or its failure) says how
it ended.

The conversation is the one the run itself reports (``Run.transcript()``): the result carries it when it ends with
messages no model call stored (the tool results after a ``max_iterations`` cut-off, a message injected last;
``workflows/result_transcript.py``), else it is the last model call's and its reply. A run that ended without a
result (failed, cancelled, terminated) shows what it had when it ended: the request of its last model call, if that
got no reply (under way, or failed for good); else Claude's last reply followed by the ``tool_result`` blocks of its
tool calls that completed, as their activities (or an agent's child run) returned them (``unfinished`` names the
calls that had not). A call the run answers itself, without a tool activity (the built-in sleep, a denial, a tool it
does not have, a toolset action), or an agent call whose child run ended without a result, leaves no result the
history shows as one: it is named among ``unfinished`` too. A run that never called the model shows its input's
messages: after the conversation it continued (``Run.send``), or the one it carried (continue-as-new).

A result that carries the run's last status (``RunResult.last_status``) gives the status whole, as the ``status``
query gave it (transcript version, cost, child runs); without one, the history's own account is given.

``agent-runner follow`` reads an ended run's turns here too (``ended_turns``): each reply with its tool calls'
results, from every execution of a run that continued as new, what each model call streamed from the run's live log
while the store keeps it, which calls waited for approval (the run's policy and its tools' own rules, as the run
decides), the requests for more budget a person answered (each showing the budget as the run held it then) and the
pauses of a step-mode run, so that it prints what following the run live printed. A call that would
have waited but never started (its run stopped first) is told as waiting all the same: the history does not say.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from datetime import UTC
from typing import Any

from temporalio.api.common.v1 import Payloads
from temporalio.api.enums.v1 import ContinueAsNewInitiator
from temporalio.api.history.v1 import HistoryEvent
from temporalio.converter import DataConverter

from agent_runner.client import AgentRunner, Run, first_value
from agent_runner.contract.agents import agent_answer
from agent_runner.contract.budget import BUDGET_APPROVAL, Budget, is_budget_request
from agent_runner.contract.continuation import ContinueFrom
from agent_runner.contract.conversation import Conversation
from agent_runner.contract.errors import StoreError
from agent_runner.contract.events import (
    ApprovalWaiting,
    AttemptFilter,
    BlockStart,
    BlockStop,
    ModelCallEvent,
    ModelCallStarted,
    ReplyReceived,
    RunEvent,
    StepWaiting,
    TextDelta,
    ToolFinished,
    ToolStarted,
)
from agent_runner.contract.lean import full_output_json
from agent_runner.contract.steering import APPROVE_TOOL_UPDATE, DENY_TOOL_UPDATE, PendingApproval
from agent_runner.contract.tool_result_refs import whole_pending
from agent_runner.contract.transcript import Transcript
from agent_runner.contract.types import (
    CALL_MCP_TOOL_ACTIVITY,
    CREATE_MESSAGE_ACTIVITY,
    DECIDE_BUDGET_ACTIVITY,
    DESCRIBE_TOOLS_ACTIVITY,
    LAST_STATUS_DETAIL,
    PROCESS_RESULTS_ACTIVITY,
    RUN_LOCAL_TOOL_ACTIVITY,
    RUN_TOOL_ACTIVITY,
    RunResult,
    RunStatus,
    RunStatusName,
    ToolResult,
    Usage,
)
from agent_runner.live import read_live_log

_ENDED: dict[str, RunStatusName] = {
    "completed": "completed",
    "failed": "failed",
    "canceled": "cancelled",
    "terminated": "terminated",
    "timed_out": "timed_out",
}
"""The run's status for how Temporal says it ended (``Run.ended``), when its result does not say."""


@dataclass
class _Turn:
    """One turn as the history tells it, while it is read."""

    iteration: int
    reply: dict[str, Any]
    attempt: int
    """The model call's attempt that got the reply (0: a run recorded before calls said)."""
    results: dict[str, dict[str, Any]]
    """``_Reading.results`` while this turn's tools ran (the same dict; a later model call starts a new one)."""
    agents: dict[str, dict[str, Any]]
    """``_Reading.agents`` likewise."""
    waited: list[str]
    """The ``tool_use_id`` of each call that waited for a person's approval, in the reply's order."""
    replied_at: str
    """When the reply was recorded (ISO 8601): about when its calls began to wait."""
    paused: bool
    """Whether the run paused after the reply (step mode)."""
    budget_answers: list[tuple[str, dict[str, Any] | None]] = field(default_factory=list)
    """After a summary turn of a run asking for more budget: each answer, in order, as ``(request id, limits)``:
    a person's (``budget_1``, ...; ``None`` limits for a denial) or its policy's (``""``)."""
    after: list[dict[str, Any]] | None = None
    """The messages the next model call sent after the stored ones: where the results of the calls that no activity
    ran (a denial, the built-in sleep, a tool the run does not have) are."""


@dataclass
class _Reading:
    """What the history says, event by event."""

    turns: dict[int, dict[str, Any]] = field(default_factory=dict)
    """Each model call's ``turn`` (``ModelTurn`` as plain JSON), by its scheduled event's id."""
    last: tuple[dict[str, Any], dict[str, Any]] | None = None
    """The last model call that got a reply: its turn, and the reply as held."""
    under_way: dict[str, Any] | None = None
    """The turn of the last model call (not a compaction) if it got no reply: under way when the run ended, or failed
    for good (the run failed with it); a later call supersedes it."""
    under_way_iteration: int = 0
    """Its turn number."""
    iterations: dict[int, int] = field(default_factory=dict)
    """The turn number of each model call (not a compaction), by its scheduled event's id."""
    tool_calls: dict[int, str] = field(default_factory=dict)
    """The ``tool_use_id`` of each tool call's activity, by its scheduled event's id."""
    hooks: set[int] = field(default_factory=set)
    """The scheduled events of the result hooks' activities."""
    results: dict[str, dict[str, Any]] = field(default_factory=dict)
    """The ``tool_result`` block of each tool call that completed since the last model call began, held, by
    ``tool_use_id``."""
    agents: dict[str, dict[str, Any]] = field(default_factory=dict)
    """The result (``RunResult`` as plain JSON) of each agent call's child run that completed since the last model call
    began, by ``tool_use_id``."""
    replies: int = 0
    log: list[_Turn] = field(default_factory=list)
    """Each turn's last reply with its tool calls' results, in order."""
    first_pending: list[dict[str, Any]] | None = None
    """The messages the first model call (not a compaction) sent after the stored ones."""
    continued: str = ""
    """The run id of the execution this one continued as new, if it did."""
    last_status: dict[str, Any] | None = None
    """What the ``status`` query answered as the run failed (``LAST_STATUS_DETAIL``), from runs that carry it."""
    approval: list[str] | str = field(default_factory=list)
    """The run's ``approval`` policy's ``tools``: the names whose calls wait for a person, or ``"all"``."""
    specs: dict[str, dict[str, Any]] = field(default_factory=dict)
    """The run's registered tools (``ToolSpec`` as plain JSON), by name: carried into the execution, and described."""
    describes: set[int] = field(default_factory=set)
    """The scheduled events of the ``describe_tools`` activities."""
    policies: set[int] = field(default_factory=set)
    """The scheduled events of the budget policy's activities."""
    step: bool = False
    """Whether the run was started in step mode: it pauses after each reply."""
    usage: Usage = field(default_factory=Usage)
    result: dict[str, Any] | None = None
    detail: str | None = None
    input: dict[str, Any] | None = None
    """The run's input (the first event's), for the messages of a run that never called the model."""


@dataclass(frozen=True)
class EndedRun:
    """An ended run as its history and the content store tell it."""

    status: RunStatus
    messages: list[dict[str, Any]]
    """The conversation, in the Messages API's wire shape, stored content put back."""
    unfinished: list[dict[str, str]] = field(default_factory=list)
    """The tool calls of Claude's last reply that had not completed when a run without a result ended (``tool_use_id``
    and ``name``, in the reply's order): ``messages`` ends with the results of the others."""


async def _payload(converter: DataConverter, payloads: Payloads) -> Any:
    # The client's converter, codec included: an encrypting fleet's console holds its keys.
    return await first_value(converter, payloads.payloads)


def _tool_result(tool_use_id: str, output: Any) -> dict[str, Any] | None:
    """The ``tool_result`` block a tool call's ``ToolResult`` becomes, as ``workflows/tool_calls.py`` builds it."""
    if not isinstance(output, dict) or "content" not in output:
        return None
    # Constructed, not validated: the history's JSON as it is (``is_error`` is left out when false).
    return ToolResult.model_construct(content=output["content"], is_error=bool(output.get("is_error"))).block(
        tool_use_id
    )


LOCAL_ACTIVITY_MARKER = "core_local_activity"
"""The marker Temporal's SDKs record a local activity's outcome in: its ``data`` names the activity, ``result`` holds
what it returned."""


def _described(reading: _Reading, output: Any) -> None:
    """Take the tools a ``describe_tools`` lookup answered with, by name."""
    for spec in output.get("tools") or [] if isinstance(output, dict) else []:
        if isinstance(spec, dict) and isinstance(spec.get("name"), str):
            reading.specs[spec["name"]] = spec


async def _read(converter: DataConverter, event: HistoryEvent, reading: _Reading) -> None:
    if event.HasField("workflow_execution_started_event_attributes"):
        started = event.workflow_execution_started_event_attributes
        run_input = await _payload(converter, started.input)
        reading.input = run_input if isinstance(run_input, dict) else None
        if started.initiator == ContinueAsNewInitiator.CONTINUE_AS_NEW_INITIATOR_WORKFLOW:
            reading.continued = started.continued_execution_run_id
        if reading.input is not None:
            reading.step = reading.input.get("step") not in (None, False)
            approval = reading.input.get("approval")
            reading.approval = approval.get("tools") or [] if isinstance(approval, dict) else []
            continued = reading.input.get("continued")
            carried = continued.get("tools") if isinstance(continued, dict) else None
            reading.specs.update(carried if isinstance(carried, dict) else {})
    elif event.HasField("activity_task_scheduled_event_attributes"):
        scheduled = event.activity_task_scheduled_event_attributes
        name = scheduled.activity_type.name
        if name == CREATE_MESSAGE_ACTIVITY:
            model_input = await _payload(converter, scheduled.input)
            turn = model_input.get("turn") if isinstance(model_input, dict) else None
            if isinstance(turn, dict):
                reading.turns[event.event_id] = turn
                if turn.get("compaction") is None:
                    reading.under_way = turn
                    reading.iterations[event.event_id] = model_input.get("iteration") or 0
                    reading.under_way_iteration = reading.iterations[event.event_id]
                    # The results so far are in this request: only the coming reply's tools (started after this,
                    # eagerly or not) are its calls', and a later reply may use the same ids. New dicts, not
                    # cleared ones: the last turn keeps its own.
                    reading.results = {}
                    reading.agents = {}
                    if reading.log and reading.log[-1].after is None:
                        reading.log[-1].after = whole_pending(turn)
                    if reading.first_pending is None:
                        reading.first_pending = whole_pending(turn)
        elif name in (RUN_TOOL_ACTIVITY, CALL_MCP_TOOL_ACTIVITY):
            call = await _payload(converter, scheduled.input)
            if isinstance(call, dict) and name == CALL_MCP_TOOL_ACTIVITY:
                call = call.get("call")  # McpCallInput: the server's tool, and the run's call of it
            if isinstance(call, dict) and isinstance(call.get("tool_use_id"), str):
                reading.tool_calls[event.event_id] = call["tool_use_id"]
        elif name == PROCESS_RESULTS_ACTIVITY:
            reading.hooks.add(event.event_id)
        elif name == DESCRIBE_TOOLS_ACTIVITY:
            reading.describes.add(event.event_id)
        elif name == DECIDE_BUDGET_ACTIVITY:
            reading.policies.add(event.event_id)
    elif event.HasField("activity_task_completed_event_attributes"):
        completed = event.activity_task_completed_event_attributes
        scheduled_id = completed.scheduled_event_id
        if scheduled_id in reading.turns:
            output = await _payload(converter, completed.result)
            if isinstance(output, dict) and "length" not in reading.turns[scheduled_id]:
                output = full_output_json(output)  # a lean result (``contract/lean.py``): the whole reply
            message = output.get("message") if isinstance(output, dict) else None
            if isinstance(message, dict):
                turn = reading.turns[scheduled_id]
                reading.last = (turn, message)
                if reading.under_way is turn:
                    reading.under_way = None
                reading.replies += 1
                reading.usage = reading.usage.add(message.get("usage"))
                if scheduled_id in reading.iterations:  # a turn's reply, not a compaction's
                    replied_at = event.event_time.ToDatetime(tzinfo=UTC).isoformat()
                    _log(reading, reading.iterations[scheduled_id], message, output.get("attempt") or 0, replied_at)
        elif scheduled_id in reading.tool_calls:
            tool_use_id = reading.tool_calls[scheduled_id]
            block = _tool_result(tool_use_id, await _payload(converter, completed.result))
            if block is not None:
                reading.results[tool_use_id] = block
        elif scheduled_id in reading.describes:
            _described(reading, await _payload(converter, completed.result))
        elif scheduled_id in reading.policies and reading.log:
            decision = await _payload(converter, completed.result)
            limits = decision.get("limits") if isinstance(decision, dict) else None
            if isinstance(limits, dict):
                reading.log[-1].budget_answers.append(("", limits))
        elif scheduled_id in reading.hooks:
            # The hooks' results are the ones the run keeps, in place of the tools' own.
            output = await _payload(converter, completed.result)
            for block in output.get("results") or [] if isinstance(output, dict) else []:
                if isinstance(block, dict) and isinstance(block.get("tool_use_id"), str):
                    reading.results[block["tool_use_id"]] = block
    elif event.HasField("workflow_execution_update_accepted_event_attributes"):
        request = event.workflow_execution_update_accepted_event_attributes.accepted_request.input
        if request.name in (APPROVE_TOOL_UPDATE, DENY_TOOL_UPDATE) and reading.log:
            decision = await first_value(converter, list(request.args.payloads))
            request_id = str(decision.get("tool_use_id")) if isinstance(decision, dict) else ""
            if is_budget_request(request_id):
                limits = decision.get("input") if request.name == APPROVE_TOOL_UPDATE else None
                reading.log[-1].budget_answers.append((request_id, limits if isinstance(limits, dict) else None))
    elif event.HasField("marker_recorded_event_attributes"):
        marker = event.marker_recorded_event_attributes
        # Runs begun since the umbrella patch look their tools up in a local activity (``workflows/tool_lookup.py``),
        # and call a ``local`` tool in one, whose id is the call's ``tool_use_id`` (``workflows/tool_calls.py``).
        if marker.marker_name == LOCAL_ACTIVITY_MARKER and "result" in marker.details:
            data = await _payload(converter, marker.details["data"]) if "data" in marker.details else None
            if isinstance(data, dict) and data.get("activity_type") == DESCRIBE_TOOLS_ACTIVITY:
                _described(reading, await _payload(converter, marker.details["result"]))
            elif isinstance(data, dict) and data.get("activity_type") == RUN_LOCAL_TOOL_ACTIVITY:
                tool_use_id = str(data.get("activity_id"))
                block = _tool_result(tool_use_id, await _payload(converter, marker.details["result"]))
                if block is not None:
                    reading.results[tool_use_id] = block
    elif event.HasField("child_workflow_execution_completed_event_attributes"):
        child = event.child_workflow_execution_completed_event_attributes
        outcome = await _payload(converter, child.result)
        if isinstance(outcome, dict):  # an agent call's child run: its id is the parent's, "/", the call's
            reading.agents[child.workflow_execution.workflow_id.rsplit("/", 1)[-1]] = outcome
    elif event.HasField("workflow_execution_completed_event_attributes"):
        result = await _payload(converter, event.workflow_execution_completed_event_attributes.result)
        reading.result = result if isinstance(result, dict) else None
    elif event.HasField("workflow_execution_failed_event_attributes"):
        failure = event.workflow_execution_failed_event_attributes.failure
        reading.detail = failure.message
        for payload in failure.application_failure_info.details.payloads:
            detail = await first_value(converter, [payload])
            if isinstance(detail, dict) and isinstance(detail.get(LAST_STATUS_DETAIL), dict):
                reading.last_status = detail[LAST_STATUS_DETAIL]
    elif event.HasField("workflow_execution_terminated_event_attributes"):
        reading.detail = event.workflow_execution_terminated_event_attributes.reason or None


async def _held(runner: AgentRunner, head: Any, pending: Any) -> list[dict[str, Any]]:
    """The messages of ``head`` in the store and then ``pending``, stored content put back."""
    held = [*(await runner.content.messages(head if isinstance(head, str) else None)), *(pending or [])]
    resolved: list[dict[str, Any]] = await runner.content.resolve(held)
    return resolved


async def _input_messages(runner: AgentRunner, run_input: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The messages a run was started with, as plain JSON (a run that ended before any model call).

    An execution that continued a run as new starts from the conversation it carried; a run that continues an ended
    one (``Run.send``) from that run's conversation with its own messages joined to it, as the run joins them
    (``workflows/continuation.py``).
    """
    run_input = run_input or {}
    messages = run_input.get("messages")
    continued = run_input.get("continued")
    if isinstance(continued, dict):
        try:
            carried = Transcript.model_validate(continued["conversation"]["transcript"])
        except (KeyError, TypeError, ValueError):
            return []
        return await _held(runner, carried.head, carried.pending)
    if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
        return []  # an input the run refused: it had no conversation
    if run_input.get("continue_from") is not None:
        try:
            conversation: Conversation = ContinueFrom.model_validate(run_input["continue_from"]).conversation
        except ValueError:
            return []  # a continuation the run refused: it had no conversation
        for message in messages:
            content = message.get("content")
            conversation.join_user_content([{"type": "text", "text": content}] if isinstance(content, str) else content)
        return await _held(runner, conversation.transcript.head, conversation.transcript.pending)
    # The Python client sends them held (big content stored, placeholder-shaped data escaped); others plain.
    return await runner.content.resolve(messages) if run_input.get("held") is True else messages


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
    return await _ended(runner, reading, ended)


async def _ended(runner: AgentRunner, reading: _Reading, ended: str) -> EndedRun:
    """The ``EndedRun`` that the reading of a run's (last) history tells."""
    result = RunResult.model_validate(reading.result) if reading.result is not None else None
    stop_reason = reading.last[1].get("stop_reason") if reading.last is not None else None
    unfinished: list[dict[str, str]] = []
    if result is not None and result.transcript is not None:
        messages = await _held(runner, result.transcript.head, result.transcript.pending)
    elif result is None and reading.under_way is not None:
        # Its last model call got no reply: that request holds everything the run had.
        messages = await _held(runner, reading.under_way.get("head"), whole_pending(reading.under_way))
    elif reading.last is not None:
        turn, reply = reading.last
        held = [*whole_pending(turn), {"role": "assistant", "content": reply.get("content") or []}]
        if result is None:
            done, unfinished = _tool_results(reply, reading.results, reading.agents)
            if done:
                held.append({"role": "user", "content": done})
        messages = await _held(runner, turn.get("head"), held)
    else:
        messages = await _input_messages(runner, reading.input)
    if result is not None and result.last_status is not None:
        status = result.last_status
    elif result is not None:
        status = RunStatus(
            status=result.status,
            iterations=result.iterations,
            stop_reason=result.stop_reason,
            usage=result.usage,
            stop_reason_detail=result.detail,
            transcript_length=len(messages),
            version=None,
        )
    elif reading.last_status is not None:
        status = RunStatus.model_validate(reading.last_status).model_copy(
            update={"status": "failed", "pending_approvals": [], "tool_results_under_review": None}
        )
    else:
        status = RunStatus(
            status=_ENDED.get(ended, "failed"),
            iterations=reading.replies,
            stop_reason=stop_reason,
            usage=reading.usage,
            stop_reason_detail=reading.detail,
            transcript_length=len(messages),
            version=None,
        )
    return EndedRun(status=status, messages=messages, unfinished=unfinished)


def _tool_results(
    reply: dict[str, Any], results: dict[str, dict[str, Any]], agents: dict[str, dict[str, Any]]
) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    """The ``tool_result`` blocks of the reply's tool calls that completed, and the calls that had not.

    Args:
        reply: Claude's reply.
        results: The ``tool_result`` blocks the history shows for its calls, by ``tool_use_id``.
        agents: The results of its agent calls' child runs, by ``tool_use_id``.
    """
    done: list[dict[str, Any]] = []
    unfinished: list[dict[str, str]] = []
    for block in reply.get("content") or []:
        if not isinstance(block, dict) or block.get("type") != "tool_use":
            continue
        tool_use_id, name = str(block.get("id")), str(block.get("name"))
        if tool_use_id in results:
            done.append(results[tool_use_id])
        elif tool_use_id in agents:
            content, is_error = agent_answer(name, agents[tool_use_id])
            done.append(ToolResult(content=content, is_error=is_error).block(tool_use_id))
        else:
            unfinished.append({"tool_use_id": tool_use_id, "name": name})
    return done, unfinished


def _log(reading: _Reading, iteration: int, message: dict[str, Any], attempt: int, replied_at: str) -> None:
    """Log turn ``iteration``'s reply; its tools' results are those the history shows until the next model call."""
    if reading.log and reading.log[-1].iteration == iteration:
        reading.log.pop()  # the turn called the model again (a refusal's fallback, a retry): the last reply stands
    waited = [str(call.get("id")) for call in _calls(message) if _waits(reading, str(call.get("name")))]
    logged = _Turn(iteration, message, attempt, reading.results, reading.agents, waited, replied_at, reading.step)
    reading.log.append(logged)


def _waits(reading: _Reading, name: str) -> bool:
    """Whether a call of tool ``name`` waits for approval, as ``workflows/approvals.py`` decides (``needed``).

    A registered tool's call does, by its own rule or the run's policy; an agent, the built-in sleep or a tool the
    run does not have never waits.
    """
    spec = reading.specs.get(name)
    if spec is None or spec.get("agent") is not None:
        return False
    return bool(spec.get("requires_approval")) or reading.approval == "all" or name in reading.approval


@dataclass(frozen=True)
class EndedTurn:
    """One turn of an ended run: Claude's reply, and the results of its tool calls that completed."""

    iteration: int
    """The turn's number in the run (across its continue-as-new chain), 1 for the first."""
    reply: dict[str, Any] | None
    """The reply, in the Messages API's wire shape, stored content put back; ``None`` for a model call that got none
    (under way when the run ended, or failed for good): only what it streamed is known."""
    results: list[dict[str, Any]]
    """The ``tool_result`` block of each of the reply's tool calls that completed, in the reply's order."""
    streamed: tuple[RunEvent, ...] = ()
    """What the turn's model call streamed, attempt by attempt, as its live log holds it; empty when the log does not
    hold the reply whole (swept after the store's retention, or a store that keeps none)."""
    waited: tuple[PendingApproval, ...] = ()
    """The reply's calls that waited for a person's approval, in its order (``requested_at``: when the reply was
    recorded)."""
    paused: bool = False
    """Whether the run paused after the reply (step mode)."""
    budget_request: PendingApproval | None = None
    """The request for more budget a person was asked after the reply (Claude's summary), if one was."""

    def events(self) -> list[RunEvent]:
        """The turn's live events, as a watcher of the run from its start saw them (``Run.events``).

        The streamed ones are the live log's (a cut-off attempt's text, then its ``retracted``), or else made from the
        reply, block by block; then the reply, the step-mode pause after it, each call's start (and its wait for
        approval), and the results. A step-mode run's pause before its tool results go out (``review_results``) is
        not told.
        """
        turn = self.iteration
        attempts = AttemptFilter()
        events: list[RunEvent] = [out for event in self.streamed for out in attempts.feed(event)]
        if self.reply is None:
            return events
        if not events:
            events = self._blocks(self.reply)
        events.append(ReplyReceived(iteration=turn, message=self.reply))
        if self.paused:
            events.append(StepWaiting(iteration=turn, status="waiting_for_step"))
        if self.budget_request is not None:
            events.append(ApprovalWaiting(iteration=turn, approval=self.budget_request))
        names: dict[str, str] = {}
        waits = {approval.tool_use_id: approval for approval in self.waited}
        for call in _calls(self.reply):
            names[call["id"]] = call["name"]
            events.append(ToolStarted(iteration=turn, tool_use_id=call["id"], name=call["name"], input=call["input"]))
            if call["id"] in waits:
                events.append(ApprovalWaiting(iteration=turn, approval=waits[call["id"]]))
        for result in self.results:
            call_id = str(result["tool_use_id"])
            events.append(ToolFinished(iteration=turn, tool_use_id=call_id, name=names[call_id], result=result))
        return events

    def _blocks(self, reply: dict[str, Any]) -> list[RunEvent]:
        """The reply's blocks as one attempt streams them: text in a delta, every other block whole."""
        turn = self.iteration
        events: list[RunEvent] = [ModelCallStarted(iteration=turn, attempt=1)]
        for index, block in enumerate(reply.get("content") or []):
            if block.get("type") == "text":  # text streams; every other block is whole once it stops
                events.append(BlockStart(iteration=turn, attempt=1, index=index, block={"type": "text", "text": ""}))
                events.append(TextDelta(iteration=turn, attempt=1, index=index, text=str(block.get("text") or "")))
            else:
                events.append(BlockStart(iteration=turn, attempt=1, index=index, block=block))
            events.append(BlockStop(iteration=turn, attempt=1, index=index))
        return events


def _streamed(live: list[RunEvent], iteration: int, attempt: int, reply: dict[str, Any] | None) -> tuple[RunEvent, ...]:
    """The live log's events of turn ``iteration``'s model call up to ``attempt`` (the one that got ``reply``).

    With a reply, only if they hold it whole: that attempt stopped every block of it (a log swept meanwhile, or
    written in part, is not used). Without one (no reply came), all of them; ``attempt`` 0: up to the last.
    """
    turn = [e for e in live if isinstance(e, ModelCallEvent) and e.iteration == iteration]
    attempt = attempt or max((e.attempt for e in turn), default=0)
    streamed: list[RunEvent] = []
    stopped: set[int] = set()
    for event in live:
        if isinstance(event, ModelCallEvent) and event.iteration == iteration and event.attempt <= attempt:
            streamed.append(event)
            if isinstance(event, BlockStop) and event.attempt == attempt:
                stopped.add(event.index)
    whole = reply is None or stopped >= set(range(len(reply.get("content") or [])))
    return tuple(streamed) if streamed and whole else ()


def _calls(reply: dict[str, Any]) -> list[dict[str, Any]]:
    """The reply's calls of the run's own tools (``tool_use`` blocks: the server runs the others)."""
    return [b for b in reply.get("content") or [] if isinstance(b, dict) and b.get("type") == "tool_use"]


async def _executions(runner: AgentRunner, run_id: str) -> list[_Reading]:
    """The readings of the run's executions, the first one first: each one that continued as new, then the latest.

    Read from the latest back, each execution's first event naming the one it continued; each turn's results that
    came after its execution's last model call are then in the next one's first request.
    """
    readings: list[_Reading] = []
    execution = runner.attach(run_id)
    while True:
        reading = _Reading()
        async for event in execution.history_events():
            await _read(runner.client.data_converter, event, reading)
        readings.insert(0, reading)
        if not reading.continued:
            break
        execution = Run(runner.client.get_workflow_handle(run_id, run_id=reading.continued), runner=runner)
    for reading, following in zip(readings, readings[1:], strict=False):
        if reading.log and reading.log[-1].after is None:
            reading.log[-1].after = following.first_pending
    return readings


async def ended_turns(runner: AgentRunner, run_id: str, ended: str) -> tuple[EndedRun, list[EndedTurn]]:
    """An ended run (``ended_run``) and its turns, from the histories of its executions and the content store.

    A run that continued as new has its earlier turns in the histories of the executions before; each is read. A
    tool call that no activity ran (a denial, the built-in sleep, a tool the run does not have) has its result in
    the next request, or for the last turn in the run's conversation. A reply whose tool calls had not all
    completed when the run ended lists the results of those that had.

    Args:
        runner: The client (its Temporal client and content store).
        run_id: The run.
        ended: How Temporal says it ended (``Run.ended``), for a run whose result does not say.

    Raises:
        AgentRunError: Temporal would not give a history.
    """
    readings = await _executions(runner, run_id)
    reading = readings[-1]
    log = [logged for each in readings for logged in each.log]
    run = await _ended(runner, reading, ended)
    try:
        live = await read_live_log(runner.content.store, run_id)
    except StoreError:
        live = []  # previews are best effort, as for a watcher: each reply is then made into its blocks
    last = max((i for i, m in enumerate(run.messages) if m.get("role") == "assistant"), default=len(run.messages))
    tail = run.messages[last + 1 :]  # what followed Claude's last reply in the run's conversation
    held: list[list[Any]] = []  # each turn's [reply, results], as JSON
    for number, logged in enumerate(log):
        done = {b["tool_use_id"]: b for b in _tool_results(logged.reply, logged.results, logged.agents)[0]}
        after = logged.after if logged.after is not None else tail if number == len(log) - 1 else []
        for message in after:  # the calls no activity ran, answered in the messages that followed
            content = message.get("content")
            for block in content if isinstance(content, list) else []:
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    done.setdefault(str(block.get("tool_use_id")), block)
        held.append([logged.reply, [done[call["id"]] for call in _calls(logged.reply) if call["id"] in done]])
    resolved = await runner.content.resolve(held)  # stored content put back, in as few reads as it takes
    asked = _budget_requests(readings[0].input, log)
    turns: list[EndedTurn] = []
    for logged, (reply, results) in zip(log, resolved, strict=True):
        streamed = _streamed(live, logged.iteration, logged.attempt, reply)
        waited = tuple(
            PendingApproval(
                tool_use_id=call["id"],
                name=call["name"],
                input=call.get("input"),
                iteration=logged.iteration,
                requested_at=logged.replied_at,
            )
            for call in _calls(reply)
            if call["id"] in logged.waited
        )
        turn_of = EndedTurn(logged.iteration, reply, results, streamed, waited, logged.paused, asked.get(id(logged)))
        turns.append(turn_of)
    turn = reading.under_way_iteration
    if reading.result is None and reading.under_way is not None and (not log or log[-1].iteration != turn):
        # Its last model call got no reply: what it streamed before the run ended is all there is of that turn.
        turns.append(EndedTurn(turn, None, [], _streamed(live, turn, 0, None)))
    return run, turns


def _budget_requests(run_input: dict[str, Any] | None, log: list[_Turn]) -> dict[int, PendingApproval]:
    """The request for more budget a person was asked after each summary turn (by ``id`` of its ``_Turn``).

    Each shows the budget as the run held it then (``workflows/budget_requests.py``): the input's, with the limits
    approved before (a person's, or its policy's where no person was asked after it).
    """
    try:
        budget = Budget.model_validate((run_input or {}).get("budget") or {})
    except ValueError:
        return {}
    asked: dict[int, PendingApproval] = {}
    for logged in log:
        answers = logged.budget_answers
        for number, (request_id, limits) in enumerate(answers):
            if request_id and id(logged) not in asked:
                shown = budget.model_dump(mode="json", exclude_defaults=True)
                asked[id(logged)] = PendingApproval(
                    tool_use_id=request_id,
                    name=BUDGET_APPROVAL,
                    input=shown,
                    iteration=logged.iteration,
                    requested_at=logged.replied_at,
                )
            person_after = any(later for later, _ in answers[number + 1 :])
            if limits is not None and (request_id or not person_after):  # a policy's refused limits were not taken
                with contextlib.suppress(ValueError):
                    budget = budget.with_limits(limits)
    return asked


async def ended_status(runner: AgentRunner, run_id: str, ended: str) -> RunStatus:
    """An ended run's status (``ended_run``), each child run's nested in its ``agents`` entry as ``status_tree`` does.

    A child that has ended is read from its history too; one still open (it outlived its parent) is asked.

    Raises:
        AgentRunError: Temporal would not give a run's history.
        NoWorker: An open child's query found no worker.
    """
    status = (await ended_run(runner, run_id, ended)).status
    if not status.agents:
        return status

    async def nested(entry: dict[str, Any]) -> dict[str, Any]:
        child = runner.attach(str(entry.get("id") or f"{run_id}/{entry['tool_use_id']}"))
        child_ended = await child.ended()
        if child_ended is None:
            child_status = await child.status(tree=True)
        else:
            child_status = await ended_status(runner, child.id, child_ended)
        return {**entry, "run": child_status.model_dump(mode="json")}

    agents = await asyncio.gather(*(nested(entry) for entry in status.agents))
    return status.model_copy(update={"agents": list(agents)})


async def ended_page(runner: AgentRunner, run_id: str, ended: str) -> dict[str, Any]:
    """The page's data for a run that has ended: its status and conversation (``ended_run``).

    ``unfinished`` names the tool calls that had not completed when it ended (``EndedRun.unfinished``).

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
        "unfinished": run.unfinished,
        "events_offset": None,
    }
