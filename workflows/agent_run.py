"""``AgentRun``: the SDK's tool-runner loop as a Temporal workflow.

Each iteration is one model call (an activity) followed, when Claude asked for tools, by one activity per
``tool_use`` block, run concurrently, whose results go back in block order in one user message. The loop ends as the
SDK's does (``anthropic/lib/tools/_beta_runner.py``, ``_STOP_REASON_STEPS``):

- ``tool_use``: run the reply's client tools and send the results; with no client tool in the reply, stop.
- ``pause_turn``, ``compaction``: send the turn back unchanged so the server resumes it; no tool runs.
- anything else (``end_turn``, ``stop_sequence``, ``max_tokens``, ``refusal``, unknown): stop. Tools in such a
  reply never run, since executing them would fire side effects the model never confirmed.

``max_iterations`` is checked before each request and counts every reply, ``pause_turn`` resumes included; the tools
of the last reply before the cut-off still run (their results are kept in the transcript, not sent), as in the SDK.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError

with workflow.unsafe.imports_passed_through():
    from workflows.conversation import Conversation
    from workflows.errors import AgentRunnerError, InvalidRunInput, ToolNotRegistered
    from workflows.run_input import RunSpec, parse_run_input
    from workflows.types import (
        CREATE_MESSAGE_ACTIVITY,
        DESCRIBE_TOOLS_ACTIVITY,
        REPLIES_QUERY,
        RUN_TOOL_ACTIVITY,
        STATUS_QUERY,
        THREAD_LOST_ERROR,
        TRANSCRIPT_QUERY,
        WORKFLOW_TYPE,
        ActivityOptions,
        CreateMessageInput,
        CreateMessageOutput,
        DescribeToolsInput,
        DescribeToolsOutput,
        RunResult,
        RunStatus,
        RunStatusName,
        RunToolInput,
        ToolResult,
        ToolSpec,
        Usage,
    )

_STOP_REASON_STEPS = {
    "tool_use": "run_tools",
    "pause_turn": "resume",
    "compaction": "resume",
}
"""Stop reasons that continue the loop; every other one, absent and unknown ones included, stops it."""


def _retry_policy(options: ActivityOptions, non_retryable: list[str] | None = None) -> RetryPolicy:
    return RetryPolicy(
        initial_interval=options.initial_interval,
        maximum_interval=options.maximum_interval,
        maximum_attempts=options.maximum_attempts,
        non_retryable_error_types=non_retryable,
    )


@workflow.defn(name=WORKFLOW_TYPE)
class AgentRun:
    """One agent run: Claude and its tools in a loop until a stop reason or ``max_iterations`` ends it."""

    def __init__(self) -> None:
        self._status: RunStatusName = "running"
        self._conversation: Conversation | None = None
        self._replies: list[dict[str, Any]] = []
        self._usage = Usage()
        self._tools: dict[str, ToolSpec] = {}

    @workflow.run
    async def run(self, raw_input: dict[str, Any]) -> dict[str, Any]:
        """Run the loop.

        Args:
            raw_input: The run's JSON input: Messages API parameters plus runner options (see ``run_input.py``).

        Returns:
            A ``RunResult`` as JSON.
        """
        try:
            spec = parse_run_input(raw_input)
        except InvalidRunInput as e:
            raise _fail(e) from None
        self._tools = await self._describe_tools(spec)
        definitions = [self._tools[t].definition if isinstance(t, str) else t for t in spec.tools]
        self._conversation = Conversation(
            params=spec.params, tools=definitions, messages=spec.messages, threading=spec.thread
        )
        try:
            result = await self._loop(spec, self._conversation)
        except asyncio.CancelledError:
            self._status = "cancelled"
            raise
        return result.model_dump(mode="json")

    async def _loop(self, spec: RunSpec, conversation: Conversation) -> RunResult:
        stop_reason: str | None = None
        while True:
            if spec.max_iterations is not None and len(self._replies) >= spec.max_iterations:
                self._status = "max_iterations"
                break
            reply = await self._create_message(spec, conversation)
            self._replies.append(reply)
            self._usage = self._usage.add(reply.get("usage"))
            conversation.record_reply(reply)
            stop_reason = reply.get("stop_reason")
            step = _STOP_REASON_STEPS.get(stop_reason or "", "stop")
            if step == "resume":
                continue
            tool_uses = [b for b in reply.get("content") or [] if b.get("type") == "tool_use"]
            if step == "stop" or not tool_uses:
                self._status = "completed"
                break
            results = await asyncio.gather(*(self._run_tool(block) for block in tool_uses))
            conversation.append_user_content(list(results))
        return RunResult(
            status=self._status,
            iterations=len(self._replies),
            stop_reason=stop_reason,
            final_message=self._replies[-1] if self._replies else None,
            usage=self._usage,
        )

    async def _describe_tools(self, spec: RunSpec) -> dict[str, ToolSpec]:
        names = [t for t in spec.tools if isinstance(t, str)]
        if not names:
            return {}
        described: DescribeToolsOutput = await workflow.execute_activity(
            DESCRIBE_TOOLS_ACTIVITY,
            DescribeToolsInput(names=names),
            result_type=DescribeToolsOutput,
            start_to_close_timeout=timedelta(seconds=30),
            retry_policy=RetryPolicy(maximum_interval=timedelta(seconds=10)),
        )
        if described.missing:
            raise _fail(
                ToolNotRegistered(
                    f"No worker on task queue {workflow.info().task_queue!r} registered "
                    f"{', '.join(repr(n) for n in described.missing)}. Start a worker with "
                    "`python worker.py --tools <module that defines it>`, or pass the tool's definition as a "
                    "JSON object to send it without running it."
                )
            )
        return {tool.name: tool for tool in described.tools}

    async def _create_message(self, spec: RunSpec, conversation: Conversation) -> dict[str, Any]:
        options = spec.model_activity
        while True:
            try:
                output: CreateMessageOutput = await workflow.execute_activity(
                    CREATE_MESSAGE_ACTIVITY,
                    CreateMessageInput(
                        request=conversation.request(),
                        run_id=workflow.info().workflow_id,
                        iteration=len(self._replies) + 1,
                    ),
                    result_type=CreateMessageOutput,
                    start_to_close_timeout=options.start_to_close_timeout,
                    heartbeat_timeout=options.heartbeat_timeout,
                    retry_policy=_retry_policy(options),
                    task_queue=options.task_queue,
                    summary=f"turn {len(self._replies) + 1} · {spec.params['model']}",
                )
                return output.message
            except ActivityError as e:
                cause = e.cause
                if (
                    isinstance(cause, ApplicationError)
                    and cause.type == THREAD_LOST_ERROR
                    and conversation.previous_message_id is not None
                ):
                    workflow.logger.info(
                        "Replaying the full message history under a new thread: reason=%s previous_message_id=%s",
                        cause.message,
                        conversation.previous_message_id,
                    )
                    conversation.start_new_thread()
                    continue
                if isinstance(cause, CancelledError):
                    raise  # the run was cancelled: let it end as cancelled, not failed
                raise _activity_failure(e) from None

    async def _run_tool(self, block: dict[str, Any]) -> dict[str, Any]:
        name = str(block.get("name"))
        tool_use_id = str(block.get("id"))
        spec = self._tools.get(name)
        result: ToolResult
        if spec is None:
            # Raw definitions (server tools among them) are sent, never executed, exactly as in the SDK.
            workflow.logger.warning(
                "Tool %r not found: it is not registered (available: %s). A raw tool definition is sent to Claude "
                "but never executed.",
                name,
                sorted(self._tools),
            )
            result = ToolResult(content=f"Error: Tool '{name}' not found", is_error=True)
        else:
            options = spec.options
            result = await workflow.execute_activity(
                RUN_TOOL_ACTIVITY,
                RunToolInput(
                    name=name,
                    tool_use_id=tool_use_id,
                    input=block.get("input"),
                    run_id=workflow.info().workflow_id,
                    iteration=len(self._replies),
                ),
                result_type=ToolResult,
                start_to_close_timeout=options.start_to_close_timeout,
                heartbeat_timeout=options.heartbeat_timeout,
                retry_policy=_retry_policy(options),
                task_queue=options.task_queue,
                summary=f"turn {len(self._replies)} · {name}",
            )
        tool_result: dict[str, Any] = {"type": "tool_result", "tool_use_id": tool_use_id, "content": result.content}
        if result.is_error:
            tool_result["is_error"] = True
        return tool_result

    @workflow.query(name=STATUS_QUERY)
    def status(self) -> RunStatus:
        """The run's state: status, iterations, usage and the last stop reason."""
        return RunStatus(
            status=self._status,
            iterations=len(self._replies),
            stop_reason=self._replies[-1].get("stop_reason") if self._replies else None,
            usage=self._usage,
            transcript_length=len(self._conversation.messages) if self._conversation else 0,
        )

    @workflow.query(name=REPLIES_QUERY)
    def replies(self, after: int = 0) -> list[dict[str, Any]]:
        """Claude's replies, whole (id, content, stop reason, usage), from iteration ``after + 1`` on."""
        return self._replies[after:]

    @workflow.query(name=TRANSCRIPT_QUERY)
    def transcript(self) -> list[dict[str, Any]]:
        """The whole conversation in the Messages API's wire shape, tool results included."""
        return list(self._conversation.messages) if self._conversation else []


def _fail(error: AgentRunnerError) -> ApplicationError:
    """The workflow failure that carries ``error`` to the client as the same class (``errors.ERRORS_BY_NAME``)."""
    return ApplicationError(str(error), type=type(error).__name__, non_retryable=True)


def _activity_failure(error: ActivityError) -> ApplicationError:
    """Fail the run with the activity's own error type and message, so the client sees the API's words."""
    cause = error.cause
    if isinstance(cause, ApplicationError):
        return ApplicationError(cause.message, *cause.details, type=cause.type, non_retryable=True)
    return ApplicationError(str(cause or error), type="AgentRunError", non_retryable=True)
