"""Start, follow and cancel agent runs from Python.

Example::

    runner = await AgentRunner.connect()
    run = await runner.start(
        model="claude-sonnet-4-5",
        max_tokens=1024,
        messages=[{"role": "user", "content": "What's the weather in Paris?"}],
        tools=[get_weather],          # a @beta_tool a worker registered, or its name, or a raw definition
    )
    async for message in run:         # each reply as the run produces it, like the SDK's tool runner
        print(message.content)
    final = await run.until_done()
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import Any

from anthropic.types.beta import BetaMessage
from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
)
from temporalio.exceptions import ApplicationError, CancelledError, TerminatedError
from temporalio.service import RPCError, RPCStatusCode

from workflows.errors import ERRORS_BY_NAME, AgentRunError, AgentRunnerError, RunCancelled, RunNotFound
from workflows.types import (
    REPLIES_QUERY,
    STATUS_QUERY,
    TASK_QUEUE,
    TRANSCRIPT_QUERY,
    WORKFLOW_TYPE,
    RunResult,
    RunStatus,
)

_POLL_MIN = 0.05
_POLL_MAX = 1.0


class AgentRunner:
    """A Temporal client for agent runs.

    Args:
        client: A client connected with ``agent_runner.connect()`` (the pydantic data converter).
        task_queue: The task queue runs start on.
    """

    def __init__(self, client: Client, *, task_queue: str = TASK_QUEUE) -> None:
        self.client = client
        self.task_queue = task_queue

    @classmethod
    async def connect(cls, *, task_queue: str = TASK_QUEUE) -> AgentRunner:
        """Connect as Temporal's environment configuration says (``TEMPORAL_ADDRESS``, profiles, ...).

        With nothing configured this connects to the embedded server on 127.0.0.1:7233, starting it if need be.
        """
        from agent_runner.connection import connect

        client, _server = await connect()
        return cls(client, task_queue=task_queue)

    async def start(
        self,
        *,
        model: str,
        max_tokens: int,
        messages: Iterable[Mapping[str, Any]],
        tools: Iterable[Any] = (),
        max_iterations: int | None = None,
        thread: bool = True,
        id: str | None = None,
        **params: Any,
    ) -> Run:
        """Start a run.

        Args:
            model: The Claude model.
            max_tokens: The most tokens each reply may have.
            messages: The conversation so far.
            tools: ``@beta_tool`` functions (a worker must have registered them), their names, or raw tool
                definitions (sent to Claude, never executed: server tools, for instance).
            max_iterations: The most replies to ask for; ``None`` for no limit.
            thread: Keep the conversation on a server-side message thread (the SDK's default), or resend the full
                history every turn (``False``).
            id: The run's workflow id; a new ``agent-<uuid>`` by default.
            **params: Any other Messages API parameter (``system``, ``tool_choice``, ``thinking``, ``metadata``,
                ``model_activity`` for the model call's timeouts, ...), passed through unchanged.

        Returns:
            A handle on the running run.
        """
        run_input: dict[str, Any] = {
            "model": model,
            "max_tokens": max_tokens,
            "messages": [dict(m) for m in messages],
            **params,
        }
        tool_list = [_tool_param(t) for t in tools]
        if tool_list:
            run_input["tools"] = tool_list
        if max_iterations is not None:
            run_input["max_iterations"] = max_iterations
        if not thread:
            run_input["thread"] = False
        handle: WorkflowHandle[Any, Any] = await self.client.start_workflow(
            WORKFLOW_TYPE,
            run_input,
            id=id or f"agent-{uuid.uuid4()}",
            task_queue=self.task_queue,
        )
        return Run(handle)

    def attach(self, run_id: str) -> Run:
        """A handle on an existing run, started here or anywhere else."""
        return Run(self.client.get_workflow_handle(run_id))

    async def list(self, query: str | None = None, *, limit: int = 50) -> list[RunSummary]:
        """Runs, newest first, optionally filtered by a Temporal visibility query."""
        full_query = f"WorkflowType = '{WORKFLOW_TYPE}'" + (f" AND ({query})" if query else "")
        summaries: list[RunSummary] = []
        async for execution in self.client.list_workflows(full_query, limit=limit):
            summaries.append(
                RunSummary(
                    id=execution.id,
                    status=execution.status.name.lower() if execution.status else "unknown",
                    start_time=execution.start_time.isoformat(),
                    close_time=execution.close_time.isoformat() if execution.close_time else None,
                )
            )
        return summaries


class RunSummary:
    """One line of ``AgentRunner.list``."""

    def __init__(self, *, id: str, status: str, start_time: str, close_time: str | None) -> None:
        self.id = id
        self.status = status
        self.start_time = start_time
        self.close_time = close_time

    def __repr__(self) -> str:
        return f"RunSummary(id={self.id!r}, status={self.status!r}, start_time={self.start_time!r})"


class Run:
    """A handle on one run. ``async for message in run`` yields each of Claude's replies as it arrives."""

    def __init__(self, handle: WorkflowHandle[Any, Any]) -> None:
        self.handle = handle

    @property
    def id(self) -> str:
        """The run's workflow id."""
        return self.handle.id

    def __aiter__(self) -> AsyncIterator[BetaMessage]:
        return self.messages()

    async def messages(self, *, from_iteration: int = 1) -> AsyncIterator[BetaMessage]:
        """Claude's replies from iteration ``from_iteration`` (1 is the first) until the run ends.

        Works for a run started anywhere, and for a finished run (it yields what the run produced). Ends by raising
        the run's failure, if it failed.
        """
        seen = max(0, from_iteration - 1)
        delay = _POLL_MIN
        while True:
            done = await self._is_closed()
            replies = await self._query(REPLIES_QUERY, seen)
            for reply in replies:
                seen += 1
                yield BetaMessage.model_validate(reply)
            if done:
                await self.until_done()  # raises the run's failure, if any
                return
            delay = _POLL_MIN if replies else min(delay * 2, _POLL_MAX)
            await asyncio.sleep(delay)

    async def until_done(self) -> BetaMessage:
        """Wait for the run to end and return its last reply.

        Raises:
            RunCancelled: the run was cancelled or terminated.
            AgentRunError: (or a subclass such as ``ModelRequestRejected``) the run failed.
        """
        result = await self.result()
        if result.final_message is None:
            raise AgentRunError(f"Run {self.id} ended without a reply from Claude.")
        return BetaMessage.model_validate(result.final_message)

    async def result(self) -> RunResult:
        """Wait for the run to end and return its result: status, iterations, stop reason, usage, last reply."""
        try:
            raw = await self.handle.result()
        except WorkflowFailureError as e:
            raise error_from_failure(self.id, e) from e
        except RPCError as e:
            raise _rpc_error(self.id, e) from e
        return RunResult.model_validate(raw)

    async def status(self) -> RunStatus:
        """The run's status, iteration count, last stop reason and token usage."""
        return RunStatus.model_validate(await self._query(STATUS_QUERY))

    async def transcript(self) -> list[dict[str, Any]]:
        """The whole conversation so far, in the Messages API's wire shape."""
        return list(await self._query(TRANSCRIPT_QUERY))

    async def cancel(self) -> None:
        """Ask the run to stop. Tools already running are cancelled; the run ends as cancelled."""
        try:
            await self.handle.cancel()
        except RPCError as e:
            raise _rpc_error(self.id, e) from e

    async def _query(self, name: str, *args: Any) -> Any:
        try:
            return await self.handle.query(name, *args)
        except RPCError as e:
            raise _rpc_error(self.id, e) from e

    async def _is_closed(self) -> bool:
        try:
            description = await self.handle.describe()
        except RPCError as e:
            raise _rpc_error(self.id, e) from e
        return description.status not in (None, WorkflowExecutionStatus.RUNNING)


def error_from_failure(run_id: str, failure: WorkflowFailureError) -> AgentRunnerError:
    """The error class a run failed with, rebuilt from the workflow's failure."""
    cause = failure.cause
    if isinstance(cause, (CancelledError, TerminatedError)):
        return RunCancelled(f"Run {run_id} was {'cancelled' if isinstance(cause, CancelledError) else 'terminated'}.")
    if isinstance(cause, ApplicationError):
        cls = ERRORS_BY_NAME.get(cause.type or "", AgentRunError)
        return cls(cause.message)
    return AgentRunError(f"Run {run_id} failed: {cause or failure}")


def _rpc_error(run_id: str, error: RPCError) -> AgentRunnerError:
    if error.status == RPCStatusCode.NOT_FOUND:
        return RunNotFound(f"No run with id {run_id!r}. List runs with `agent-runner list`.")
    return AgentRunError(f"Temporal refused the request for run {run_id}: {error.message}")


def _tool_param(tool: Any) -> str | dict[str, Any]:
    """A run's ``tools`` entry: a registered tool's name, or a raw definition sent as is."""
    if isinstance(tool, str):
        return tool
    if isinstance(tool, Mapping):
        return dict(tool)
    name = getattr(tool, "name", None)
    if isinstance(name, str) and hasattr(tool, "to_dict"):
        return name
    raise TypeError(
        f"tools takes @beta_tool functions, tool names or tool definition dicts, got {type(tool).__name__}."
    )
