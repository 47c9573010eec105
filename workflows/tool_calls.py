"""Tool execution and effects: one ``tool_use`` block becomes one ``tool_result`` block.

A call of a tool the run does not have (a raw definition, a withdrawn tool) gets the SDK's "not found" error; a call
that needs approval waits for it (``approvals.py``); the rest run as activities under the tool's effect policy: an
``idempotent`` tool is retried by Temporal, an ``at_most_once`` tool never runs twice, and a call whose outcome is
unknown becomes what its ``on_unknown`` says. Result hooks then see the reply's results together.
"""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError, FailureError

with workflow.unsafe.imports_passed_through():
    from agent_runner.contract import events
    from agent_runner.contract.mcp import McpCallInput
    from agent_runner.contract.run_input import RunSpec
    from agent_runner.contract.sleep import SLEEP_TOOL
    from agent_runner.contract.steering import DenyTool
    from agent_runner.contract.toolsets import (
        RECONCILE_TOOLSET_ACTION_ACTIVITY,
        RUN_TOOLSET_ACTION_ACTIVITY,
        ToolsetActionInput,
    )
    from agent_runner.contract.types import (
        CALL_MCP_TOOL_ACTIVITY,
        PROCESS_RESULTS_ACTIVITY,
        RECONCILE_TOOL_ACTIVITY,
        RUN_LOCAL_TOOL_ACTIVITY,
        RUN_TOOL_ACTIVITY,
        TOOL_NOT_STARTED_ERROR,
        TOOL_TIMEOUT_GRACE,
        TOOLS_NOT_HERE_ERROR,
        ProcessResultsInput,
        ProcessResultsOutput,
        ReconcileOutput,
        RunToolInput,
        ToolResult,
        ToolSpec,
    )
    from agent_runner.workflows.edits import QueuedAddTools, QueuedRemoveTools
    from agent_runner.workflows.failures import backoff, failing_the_run, retry_policy
    from agent_runner.workflows.history_size import input_idempotency_key, input_run_id
    from agent_runner.workflows.mcp import mcp_call
    from agent_runner.workflows.patches import implied
    from agent_runner.workflows.pending_edits import TOOL_ADDITIONS_PATCH, last_addition
    from agent_runner.workflows.recorded_results import RecordedResults
    from agent_runner.workflows.sleep import Sleeps
    from agent_runner.workflows.subagents import SubAgents
    from agent_runner.workflows.toolsets import Toolsets

if TYPE_CHECKING:
    from agent_runner.workflows.run_view import RunView

_ResultT = TypeVar("_ResultT", ToolResult, ReconcileOutput)

TOOL_AVAILABILITY_PATCH = "tool-availability-follows-the-conversation"
"""``workflow.patched`` id of the check that a tool the conversation withdrew is not run (issue 13)."""

MAX_UNKNOWN_ROUNDS = 3
"""How often an at-most-once call may be found not to have happened and run again before Claude is told."""

UNKNOWN_RUNS_COUNTED_PATCH = "unknown-outcome-runs-counted"
"""``workflow.patched`` id of telling Claude how many times an at-most-once call ran without an outcome (runs recorded
before said one more). Asked only where a call gives up so, so other runs carry no marker."""

UNKNOWN_CAUSE_JOINED_PATCH = "unknown-outcome-cause-joined"
"""``workflow.patched`` id of joining an unknown outcome's cause to what follows it without the cause's full stop
(runs recorded before told Claude "it was cancelled.; it was run 3 times"). Asked only there: other runs carry no
marker."""

NOT_HERE = [TOOLS_NOT_HERE_ERROR]
"""What a local call fails with at once on a worker running the run that does not run the tool (``run_local_tool``)."""

HOOKS_RETRY = RetryPolicy(maximum_interval=timedelta(seconds=10), maximum_attempts=10)
"""The result hooks' retries: bounded, so a hook that keeps failing fails the run saying so."""

RECONCILE_RETRY = RetryPolicy(maximum_attempts=5, maximum_interval=timedelta(seconds=10))
"""A ``reconcile``'s retries: bounded, so one that keeps failing leaves Claude told the outcome is unknown, and why."""


class ToolCalls:
    """The run's tool calls."""

    def __init__(self, run: RunView) -> None:
        self._run = run
        self.agents = SubAgents(run)
        self._added: dict[str, asyncio.Task[ToolSpec | None]] = {}
        """Tools a queued ``add_tools`` names, looked up for the reply being handled (once per name)."""
        self.sleeps = Sleeps(run)
        self.toolsets = Toolsets(run)
        self.recorded = RecordedResults(run)

    async def run(self, block: dict[str, Any], iteration: int | None = None) -> dict[str, Any]:
        """The ``tool_result`` block for the ``tool_use`` ``block`` (of reply number ``iteration``, the last one's)."""
        run = self._run
        iteration = iteration if iteration is not None else run.state.reply_count
        name = str(block.get("name"))
        tool_use_id = str(block.get("id"))
        tool_input = block.get("input")
        # A what-if run's call made as another run made it gets that run's result; nothing runs.
        recorded = self.recorded.answer(name, tool_input)
        if recorded is None and self.toolsets.takes(block):
            return await self.toolsets.call(block, iteration)  # an action of a runnable toolset
        spec = await self._runnable(name) if recorded is None else None
        run.event(events.TOOL_STARTED, iteration=iteration, tool_use_id=tool_use_id, name=name, input=tool_input)
        result: ToolResult
        if recorded is not None:
            result = recorded
        # An agent the run declared, or one a worker registered (described like a tool, so ``spec`` carries it).
        elif (agent := self.agents.find(name) if spec is None else spec.agent) is not None:
            result = await self.agents.call(agent, block)  # an agent is a tool: a child run answers the call
        elif spec is None and name == SLEEP_TOOL and run.spec is not None and run.spec.sleep is not None:
            result = await self.sleeps.call(block)  # the built-in sleep: a durable timer in the workflow
        elif spec is None:
            # Raw definitions (server tools among them) are sent, never executed, exactly as in the SDK.
            workflow.logger.warning(
                "Tool %r not found: it is not registered, or the conversation withdrew it (registered: %s). A raw "
                "tool definition is sent to Claude but never executed.",
                name,
                sorted(run.state.tools),
            )
            result = ToolResult(content=f"Error: Tool '{name}' not found", is_error=True)
        else:
            refusal, tool_input = await run.approvals.gate(block, spec, iteration)
            result = refusal if refusal is not None else await self._execute(spec, block, tool_input, iteration)
        tool_result = result.block(tool_use_id)
        run.event(events.TOOL_FINISHED, iteration=iteration, tool_use_id=tool_use_id, name=name, result=tool_result)
        return tool_result

    async def _runnable(self, name: str) -> ToolSpec | None:
        """The tool a call of ``name`` runs, or ``None`` if the run has none under that name now.

        A queued ``add_tools`` counts already, as the SDK's does for the reply being handled: a registered tool added
        by name runs, and a raw definition added under a tool's name stops it running.
        """
        state = self._run.state
        spec = state.tools.get(name) if not self.withdrawn(name) else None
        addition = last_addition(state.queue, name)
        # Asked only where the queue decides otherwise, so runs recorded before replay as they ran.
        if addition == "definition" and spec is not None and implied(TOOL_ADDITIONS_PATCH):
            return None
        if addition == "function" and spec is None and implied(TOOL_ADDITIONS_PATCH):
            task = self._added.get(name)
            if task is None:
                task = self._added[name] = asyncio.create_task(self._describe_added(name))
            return await task
        return spec

    async def _describe_added(self, name: str) -> ToolSpec | None:
        described = await self._run.describe_tools([name])
        return next((tool for tool in described.tools if tool.name == name), None)

    def withdrawn(self, name: str) -> bool:
        """Whether the conversation withdrew tool ``name``, so that a call to it is not run.

        The SDK dispatches only on the names its history leaves available (``Conversation.withdrawn_tools``). Queued
        ``remove_tools`` and ``add_tools`` count already, as the SDK's do for the reply being handled.
        """
        state = self._run.state
        if state.conversation is None or name not in state.tools:
            return False
        queued: list[tuple[str, bool]] = []
        for edit in state.queue:
            if isinstance(edit, QueuedRemoveTools):
                queued.extend((n, False) for n in edit.payload.names)
            elif isinstance(edit, QueuedAddTools):
                queued.extend((t, True) for t in edit.payload.tools if isinstance(t, str))
        # Runs recorded before this check ran withdrawn tools; they replay as they ran.
        return name in state.conversation.withdrawn_tools(queued) and implied(TOOL_AVAILABILITY_PATCH)

    async def process_results(
        self, spec: RunSpec, results: list[dict[str, Any]], tool_uses: list[dict[str, Any]]
    ) -> list[dict[str, Any]]:
        """Run the run's result hooks over the reply's tool results; a hook may end the run after them."""
        state = self._run.state
        with failing_the_run():
            output: ProcessResultsOutput = await workflow.execute_activity(
                PROCESS_RESULTS_ACTIVITY,
                ProcessResultsInput(
                    hooks=spec.result_hooks,
                    results=results,
                    tool_uses=tool_uses,
                    run_id=workflow.info().workflow_id,
                    iteration=state.reply_count,
                ),
                result_type=ProcessResultsOutput,
                start_to_close_timeout=timedelta(minutes=1),
                retry_policy=HOOKS_RETRY,
                summary=f"turn {state.reply_count} · result hooks",
            )
        if output.stop is not None and state.stop is None:
            state.stop = output.stop
        return output.results

    async def _execute(self, spec: ToolSpec, block: dict[str, Any], tool_input: Any, iteration: int) -> ToolResult:
        """Run the call under the tool's effect policy.

        An ``idempotent`` tool is retried by Temporal under its options. An ``at_most_once`` tool gets one attempt:
        an attempt that failed before the tool started is tried again, but one that may have started it (its
        worker died, it timed out) leaves the outcome unknown, and ``on_unknown`` decides what it becomes.
        """
        call = RunToolInput(
            name=spec.name,
            tool_use_id=str(block.get("id")),
            input=tool_input,
            run_id=input_run_id(),
            iteration=iteration,
            idempotency_key=input_idempotency_key(str(block.get("id"))),
        )
        if spec.effects != "at_most_once":
            if spec.local and spec.mcp is None:
                result = await self._local(spec, call)
                if result is not None:
                    return result
            try:
                return await self._activity(RUN_TOOL_ACTIVITY, spec, call, retry_policy(spec.options), ToolResult)
            except ActivityError as e:
                if isinstance(e.cause, CancelledError):
                    raise
                raise _tool_failure(spec, e) from None
        return await self.at_most_once(spec, block, call, iteration)

    async def at_most_once(
        self, spec: ToolSpec, block: dict[str, Any], call: RunToolInput, iteration: int, toolset: str | None = None
    ) -> ToolResult:
        """Run an ``at_most_once`` call: one attempt, then ``on_unknown`` if it may have started and was lost.

        Args:
            spec: The tool (or toolset) and its policy.
            block: The ``tool_use`` block.
            call: The call's activity input.
            iteration: The reply number that asked for the call.
            toolset: The family, for an action of a runnable toolset (``toolsets.py``): its own activities run it.
        """
        not_started = reruns = 0
        while True:
            try:
                return await self._activity(
                    RUN_TOOL_ACTIVITY, spec, call, RetryPolicy(maximum_attempts=1), ToolResult, toolset
                )
            except ActivityError as e:
                if isinstance(e.cause, CancelledError):
                    raise
                if _non_retryable(e):
                    raise _tool_failure(spec, e) from None  # decided before the tool started (a missing blob)
                if _failure_type(e) == TOOL_NOT_STARTED_ERROR:
                    not_started += 1
                    limit = spec.options.maximum_attempts
                    if limit and not_started >= limit:
                        raise _tool_failure(spec, e) from None
                    await workflow.sleep(backoff(spec.options, not_started))
                    continue
                cause = str(e.cause.message if isinstance(e.cause, FailureError) else e)
                workflow.logger.warning(
                    "Outcome of at-most-once tool %s (tool_use_id=%s) unknown: %s", spec.name, call.tool_use_id, cause
                )
                self._run.event(
                    events.TOOL_OUTCOME_UNKNOWN,
                    iteration=iteration,
                    tool_use_id=call.tool_use_id,
                    name=spec.name,
                    detail=cause,
                    on_unknown=spec.on_unknown,
                )
                settled = await self._settle_unknown(spec, block, call, iteration, cause, toolset)
                if settled is not None:
                    return settled
                abandoned = self._run.abandoned()
                if abandoned is not None:
                    return ToolResult(content=abandoned, is_error=True)  # it did not happen, and must not now
                reruns += 1  # it did not happen: run it again, a bounded number of times
                if reruns >= MAX_UNKNOWN_ROUNDS:
                    # `reruns` settlements found nothing after as many runs; runs recorded before said one more.
                    runs = reruns if implied(UNKNOWN_RUNS_COUNTED_PATCH) else reruns + 1
                    return ToolResult(
                        content=_unknown_text(spec.name, _joined(cause, f"it was run {runs} times without an outcome")),
                        is_error=True,
                    )

    async def _settle_unknown(
        self,
        spec: ToolSpec,
        block: dict[str, Any],
        call: RunToolInput,
        iteration: int,
        cause: str,
        toolset: str | None = None,
    ) -> ToolResult | None:
        """What an at-most-once call whose outcome is unknown becomes; ``None`` if it did not happen (run it again)."""
        tell = ToolResult(content=_unknown_text(spec.name, cause), is_error=True)
        if spec.on_unknown == "reconcile":
            try:
                answer = await self._activity(
                    RECONCILE_TOOL_ACTIVITY,
                    spec,
                    call,
                    RECONCILE_RETRY,
                    ReconcileOutput,
                    toolset,
                )
            except ActivityError as e:
                if isinstance(e.cause, CancelledError):
                    raise
                message = e.cause.message if isinstance(e.cause, FailureError) else str(e)
                return ToolResult(
                    content=_unknown_text(spec.name, _joined(cause, f"reconciling failed: {message}")), is_error=True
                )
            if answer.happened:
                return answer.result or ToolResult(content=None)
            return None
        if spec.on_unknown == "ask":
            decision = await self._run.approvals.ask(
                {**block, "input": call.input},
                spec.name,
                iteration,
                note=f"The outcome of this call is unknown ({cause}). Approve to run it again; deny to tell Claude "
                "that its outcome is unknown.",
            )
            if isinstance(decision, DenyTool):
                default = decision.reason == DenyTool(tool_use_id="").reason
                return tell if default else ToolResult(content=decision.reason, is_error=True)
            return None
        return tell

    async def _local(self, spec: ToolSpec, call: RunToolInput) -> ToolResult | None:
        """The call as a local activity on this worker (``ToolSpec.local``); ``None`` where this worker lacks the tool.

        No task goes through the server: the result is one marker event of the workflow task that ran it. A worker
        running the run may serve no tools (its ``serve``) or lack this one (a mixed fleet): its attempt fails at once,
        and the call goes through the queue as any other, to a worker that has the tool. Every worker that runs runs
        registers ``run_local_tool``, so the marker replays on any of them.
        """
        options = spec.options
        try:
            result: ToolResult = await workflow.execute_local_activity(
                RUN_LOCAL_TOOL_ACTIVITY,
                call,
                result_type=ToolResult,
                start_to_close_timeout=options.start_to_close_timeout + TOOL_TIMEOUT_GRACE,
                retry_policy=dataclasses.replace(retry_policy(options), non_retryable_error_types=NOT_HERE),
                # The marker holds the result, not the input: its id says which call it answers (console/ended.py).
                activity_id=call.tool_use_id,
                summary=f"turn {call.iteration} · {spec.name}",
            )
        except ApplicationError as e:  # a local activity's failure is its last attempt's own error
            if e.type in NOT_HERE:
                return None
            raise _tool_failure(spec, e) from None
        except ActivityError as e:  # but a timeout's, which comes wrapped
            if isinstance(e.cause, CancelledError):
                raise
            raise _tool_failure(spec, e) from None
        return result

    async def _activity(
        self,
        activity_name: str,
        spec: ToolSpec,
        call: RunToolInput,
        retry: RetryPolicy,
        result_type: type[_ResultT],
        toolset: str | None = None,
    ) -> _ResultT:
        options = spec.options
        payload: RunToolInput | McpCallInput | ToolsetActionInput = call
        summary = f"turn {call.iteration} · {spec.name}"
        if toolset is not None:  # an action of a runnable toolset
            activity_name = (
                RECONCILE_TOOLSET_ACTION_ACTIVITY
                if activity_name == RECONCILE_TOOL_ACTIVITY
                else RUN_TOOLSET_ACTION_ACTIVITY
            )
            payload, summary = ToolsetActionInput(toolset=toolset, call=call), f"turn {call.iteration} · {toolset}"
            summary += f" · {call.name}"
        elif spec.mcp is not None and activity_name == RUN_TOOL_ACTIVITY:
            activity_name, payload = CALL_MCP_TOOL_ACTIVITY, mcp_call(spec, call)  # a tool of an MCP server
        reconciling = activity_name in (RECONCILE_TOOL_ACTIVITY, RECONCILE_TOOLSET_ACTION_ACTIVITY)
        result: _ResultT = await workflow.execute_activity(
            activity_name,
            payload,
            result_type=result_type,
            # The worker enforces the tool's own timeout and reports it; Temporal's fires only for a silent worker.
            start_to_close_timeout=options.start_to_close_timeout + TOOL_TIMEOUT_GRACE,
            heartbeat_timeout=options.heartbeat_timeout,
            retry_policy=retry,
            task_queue=options.task_queue,
            summary=summary + (" · reconcile" if reconciling else ""),
        )
        return result


def _joined(cause: str, more: str) -> str:
    """``cause``, then ``more``, in one sentence."""
    return f"{cause.rstrip('.') if workflow.patched(UNKNOWN_CAUSE_JOINED_PATCH) else cause}; {more}"


def _unknown_text(name: str, cause: str) -> str:
    return (
        f"Error: The outcome of this call of '{name}' is unknown: {cause.rstrip('.')}. It may or may not have taken "
        "effect, and it was not run again. Check before calling it again."
    )


def _failure_type(error: ActivityError) -> str | None:
    return error.cause.type if isinstance(error.cause, ApplicationError) else None


def _non_retryable(error: ActivityError) -> bool:
    return isinstance(error.cause, ApplicationError) and error.cause.non_retryable


def _tool_failure(spec: ToolSpec, error: ActivityError | ApplicationError) -> ApplicationError:
    """The run's failure when a tool's activity (or a local one's last attempt) gave up: which tool, and what to do."""
    cause = error.cause if isinstance(error, ActivityError) else error
    if isinstance(cause, ApplicationError) and cause.non_retryable:
        # Decided at once (a missing blob): its own words say what to do.
        return ApplicationError(cause.message, *cause.details, type=cause.type, non_retryable=True)
    what = (cause.message if isinstance(cause, FailureError) else str(error)).rstrip(".")
    error_type = cause.type if isinstance(cause, ApplicationError) and cause.type else "ToolFailed"
    attempts = spec.options.maximum_attempts
    return ApplicationError(
        f"Tool '{spec.name}' could not be run{f' in {attempts} attempts' if attempts else ''}: {what}. Check the "
        "workers that serve it (their logs say why), then fork the run from its last turn to go on.",
        type=error_type,
        non_retryable=True,
    )
