"""Start, follow and cancel agent runs from Python.

Example::

    runner = await AgentRunner.connect()
    run = await runner.start(
        model="claude-sonnet-5-5",
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
import contextlib
import logging
import math
import shlex
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar, cast

from temporalio.api.common.v1 import Payload
from temporalio.api.common.v1 import WorkflowExecution as ExecutionRef
from temporalio.api.enums.v1 import TaskQueueKind, TaskQueueType, WorkflowTaskFailedCause
from temporalio.api.history.v1 import HistoryEvent
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest, GetWorkflowExecutionHistoryReverseRequest
from temporalio.client import (
    Client,
    WorkflowExecution,
    WorkflowExecutionDescription,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowQueryFailedError,
    WorkflowQueryRejectedError,
    WorkflowUpdateFailedError,
)
from temporalio.common import Priority, SearchAttributeKey, WorkflowIDReusePolicy
from temporalio.contrib.workflow_streams import WorkflowStreamClient
from temporalio.converter import DataConverter
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    CancelledError,
    TerminatedError,
    WorkflowAlreadyStartedError,
)
from temporalio.service import RPCError, RPCStatusCode

from agent_runner import priority as run_priority
from agent_runner.agent_tree import follow_tree, status_tree
from agent_runner.content import Content
from agent_runner.contract.agents import AgentSpec
from agent_runner.contract.big_params import read_by_fallbacks, slim_params
from agent_runner.contract.errors import (
    ERRORS_BY_NAME,
    AgentRunError,
    AgentRunnerError,
    EditQueued,
    EditRejected,
    InvalidRunInput,
    NoWorker,
    RunAlreadyExists,
    RunCancelled,
    RunNotFound,
    RunStuck,
)
from agent_runner.contract.events import (
    EVENT_TYPES,
    AttemptFilter,
    RecordedCall,
    RunEvent,
    RunFinished,
    parse_event,
)
from agent_runner.contract.recorded_results import ToolResultsSource, recorded_from, tool_use_ids
from agent_runner.contract.steering import (
    ADD_TOOLS_UPDATE,
    ADVANCE_UPDATE,
    APPROVE_TOOL_UPDATE,
    COMPACT_UPDATE,
    DENY_TOOL_UPDATE,
    EDIT_OUTCOME_QUERY,
    INJECT_MESSAGE_UPDATE,
    PENDING_APPROVALS_QUERY,
    REMOVE_TOOLS_UPDATE,
    REPLACE_HISTORY_UPDATE,
    RETRY_TURN_UPDATE,
    STOP_UPDATE,
    TO_GO_ON,
    UPDATE_PARAMS_UPDATE,
    WAKE_UPDATE,
    PendingApproval,
)
from agent_runner.contract.transcript import canonical, escape, stored
from agent_runner.contract.types import (
    EVENTS_TOPIC,
    FORK_POINT_QUERY,
    REPLIES_QUERY,
    SEND_POINT_QUERY,
    STATUS_QUERY,
    TASK_QUEUE,
    TRANSCRIPT_QUERY,
    WORKFLOW_TYPE,
    RunResult,
    RunStatus,
    RunStatusName,
)
from agent_runner.live import LIVE_POLL, LiveMerge
from agent_runner.store import ContentStore

# anthropic, and the contract modules built on its types, are imported where they are used: importing anthropic takes
# seconds, and most CLI commands (status, follow, approve, ...) only talk to Temporal.
if TYPE_CHECKING:
    from anthropic.types.beta import BetaMessage

    from agent_runner.temporal_server import EmbeddedTemporal

T = TypeVar("T")

logger = logging.getLogger(__name__)

_POLL_MIN = 0.05
_POLL_MAX = 1.0


class _Backoff:
    """The client's polling pace: from ``_POLL_MIN``, doubling up to ``_POLL_MAX`` while nothing new comes."""

    def __init__(self) -> None:
        self._delay = _POLL_MIN

    def reset(self) -> None:
        """Something new came: poll again soon."""
        self._delay = _POLL_MIN

    async def wait(self) -> None:
        """Sleep the current delay, and double the next one."""
        await asyncio.sleep(self._delay)
        self._delay = min(self._delay * 2, _POLL_MAX)


_EVENTS_POLL = timedelta(seconds=0.2)
"""The least time between two polls of a run's live events once caught up (each poll is an update in its history)."""

_WORKER_CHECK = 1.0
"""How long a query, update or wait may go unanswered before the client checks that a worker polls the run's task
queue: without one, it would wait silently until the RPC times out, or forever."""
_WORKER_RECHECK_MAX = 30.0

_TASK_FAILING = "Workflow Task in failed state"
"""How Temporal refuses a query or an update to a run whose workflow task keeps failing."""
_ROUTINE_TASK_FAILURES = frozenset(
    (
        WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_UNHANDLED_COMMAND,
        WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_UNHANDLED_UPDATE,
        WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_RESET_STICKY_TASK_QUEUE,
        WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_FORCE_CLOSE_COMMAND,
        WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_FAILOVER_CLOSE_COMMAND,
        WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_RESET_WORKFLOW,
        WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_WORKFLOW_PAUSE_REQUESTED_BEFORE_TASK_STARTED,
    )
)
"""Workflow task failures Temporal causes in its routine work (a signal that came during the task, a worker's cache
dropped): the next attempt goes through."""
_TASK_FAILURE_EVENTS = 50
"""Events read back from a run's history for its last workflow task failure (the retried failures are not recorded,
so the last one is near the end)."""

_CONTINUED_RESENDS = 5
"""How often an edit that reached an execution as it continued as new is sent again, to the next one."""

_WORKER_SEEN_FOR = 10.0
"""How long an edit takes a worker it saw polling the run's queue to be there still, without asking again."""

WORKER_COMMAND = "python worker.py --tools agent_runner.example_tools"
"""The command ``NoWorker`` suggests (with ``--task-queue`` when the queue is not the default one)."""

DEV_COMMAND = "agent-runner dev --detach"
"""The development stack ``NoWorker`` also suggests: a worker with the example tools, and Claude or a fake of it."""

CLOSED_STATUSES: Mapping[WorkflowExecutionStatus, RunStatusName] = {
    WorkflowExecutionStatus.FAILED: "failed",
    WorkflowExecutionStatus.CANCELED: "cancelled",
    WorkflowExecutionStatus.TERMINATED: "terminated",
    WorkflowExecutionStatus.TIMED_OUT: "timed_out",
}
"""How Temporal says a run ended, when the run's own state cannot say it: a run that failed its input check, or was
cancelled before its loop began, still reports ``running``; a terminated one, whatever it was doing then."""

LISTED_RUNS = f"WorkflowType = '{WORKFLOW_TYPE}' AND ExecutionStatus != 'ContinuedAsNew'"
"""The visibility query of every run, each once: the executions a run continued as new from are not runs of their
own (a run that continued as new three times was four lines, three of them ``continued_as_new``)."""

STATUS_ATTRIBUTE = SearchAttributeKey.for_keyword("AgentRunStatus")
"""The run's own status, which its workers keep current with ``--search-attributes``
(``workflows/search_attributes.py``)."""


def listed_status(execution: WorkflowExecution) -> str:
    """A run's status as a listing knows it, from Temporal's visibility store.

    Its own (``stopped``, ``waiting_for_approval``, ...) when its workers keep it as a search attribute, else
    Temporal's word; Temporal's when the run could not say how it ended (failed, cancelled, terminated).
    """
    temporal = execution.status
    if temporal is not None and temporal in CLOSED_STATUSES:
        return CLOSED_STATUSES[temporal]
    own = execution.typed_search_attributes.get(STATUS_ATTRIBUTE)
    if own is not None:
        return own
    return temporal.name.lower() if temporal is not None else "unknown"


WAITING_STATUSES = frozenset({"waiting_for_approval", "waiting_for_step", "waiting_for_review", "sleeping"})
"""Statuses in which the run waits for a person before it goes on."""


class AgentRunner:
    """A Temporal client for agent runs.

    Args:
        client: A client connected with ``agent_runner.connect()`` (the pydantic data converter).
        task_queue: The task queue runs start on.
        store: Where the workers keep transcripts (``AGENT_RUNNER_STORE`` by default, as for workers): replies and
            transcripts are read from it.
    """

    def __init__(self, client: Client, *, task_queue: str = TASK_QUEUE, store: ContentStore | None = None) -> None:
        self.client = client
        self.task_queue = task_queue
        self.content = Content(store)
        self.embedded_server: EmbeddedTemporal | None = None
        """The embedded Temporal server ``connect`` started for this runner, if it started one."""

    @classmethod
    async def connect(cls, *, task_queue: str = TASK_QUEUE) -> AgentRunner:
        """Connect as Temporal's environment configuration says (``TEMPORAL_ADDRESS``, profiles, ...).

        With nothing configured this connects to the embedded server on 127.0.0.1:7233, starting it if need be; a
        server it started is kept in ``embedded_server`` and runs on after this process unless ``close`` stops it.

        Raises:
            ConfigurationError: Temporal cannot be reached or started (the message says what to fix).
        """
        from agent_runner.connection import connect

        client, server = await connect()
        runner = cls(client, task_queue=task_queue)
        runner.embedded_server = server
        return runner

    async def close(self) -> None:
        """Stop the embedded Temporal server ``connect`` started, if any (runs on it wait until it starts again)."""
        server, self.embedded_server = self.embedded_server, None
        if server is not None:
            await server.astop()

    @property
    def address(self) -> str:
        """The Temporal server's address (``HOST:PORT``)."""
        return self.client.service_client.config.target_host

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
        output_format: type[Any] | None = None,
        priority: Priority | None = None,
        **params: Any,
    ) -> Run:
        """Start a run.

        Args:
            model: The Claude model.
            max_tokens: The most tokens each reply may have.
            messages: The conversation so far.
            tools: ``@beta_tool`` functions and ``AgentSpec`` agents (a worker must have registered them), their
                names, or raw tool definitions (sent to Claude, never executed: server tools, for instance).
            max_iterations: The most replies to ask for; ``None`` for no limit.
            thread: Keep the conversation on a server-side message thread (the SDK's default), or resend the full
                history every turn (``False``).
            id: The run's workflow id; a new ``agent-<uuid>`` by default.
            output_format: A type (a pydantic model, a dataclass, ...) Claude's replies must follow, as the SDK's
                ``output_format``: its JSON schema goes to Claude as ``output_config.format``, and the replies this
                handle returns are ``ParsedBetaMessage`` with ``parsed_output``. ``attach`` a handle with the same
                type to parse elsewhere.
            priority: The run's place in its task queues (``temporalio.common.Priority``): a ``priority_key`` (1
                first to 5 last) and a tenant's ``fairness_key`` (and ``fairness_weight``). Its model calls, tools,
                sub-agents and continuations carry it (``agent_runner/priority.py``).
            **params: Any other Messages API parameter (``system``, ``tool_choice``, ``thinking``, ``metadata``,
                ``model_activity`` for the model call's timeouts, ...), passed through unchanged.

        Returns:
            A handle on the running run.

        Raises:
            RunAlreadyExists: A run with this id exists, running or ended.
            InvalidRunInput: Both ``output_format`` and ``output_config.format`` were given, or ``output_format`` has
                no JSON schema, or ``priority`` is out of the server's range.
        """
        priority = Priority.default if priority is None else run_priority.checked(priority)
        if output_format is not None:
            params["output_config"] = _with_output_format(params.get("output_config"), output_format)
        await _store_big_params(self.content, params)
        run_input: dict[str, Any] = {
            "model": model,
            "max_tokens": max_tokens,
            **params,
            "messages": await self.content.offload_messages([dict(m) for m in messages]),
            "held": True,  # the messages are held already: the run takes their placeholders as ours
        }
        tool_list = await self.content.tools_by_reference([_tool_param(t) for t in tools])
        if tool_list:
            run_input["tools"] = tool_list
        if max_iterations is not None:
            run_input["max_iterations"] = max_iterations
        if not thread:
            run_input["thread"] = False
        run_id = id or f"agent-{uuid.uuid4()}"
        try:
            handle: WorkflowHandle[Any, Any] = await self.client.start_workflow(
                WORKFLOW_TYPE,
                run_input,
                id=run_id,
                task_queue=self.task_queue,
                # A run's id names its transcript and history for good: an ended run's id is not given to a new one.
                id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                priority=priority,
            )
        except WorkflowAlreadyStartedError as e:
            raise RunAlreadyExists(
                f"A run with id {run_id!r} already exists: pick another id, or attach to it with "
                f"`runner.attach({run_id!r})`."
            ) from e
        except RPCError as e:
            raise AgentRunError(f"Temporal refused to start the run: {e.message}") from e
        run = Run(handle, step=params.get("step") not in (None, False), runner=self, output_format=output_format)
        run._task_queue = self.task_queue  # known: an edit's check for a worker need not ask Temporal for it
        return run

    def attach(self, run_id: str, *, step: bool = False, output_format: type[Any] | None = None) -> Run:
        """A handle on an existing run, started here or anywhere else.

        Args:
            run_id: The run's workflow id.
            step: Drive a step-mode run: ``async for`` advances it after each reply. A plain watcher leaves this off.
            output_format: Parse the run's replies into this type (``ParsedBetaMessage.parsed_output``), as ``start``
                does for the run it starts.
        """
        return Run(self.client.get_workflow_handle(run_id), step=step, runner=self, output_format=output_format)

    async def list(self, query: str | None = None, *, limit: int = 50) -> list[RunSummary]:
        """Runs, newest first, optionally filtered by a Temporal visibility query.

        Raises:
            AgentRunError: Temporal refused the query (a malformed one, say).
        """
        full_query = LISTED_RUNS + (f" AND ({query})" if query else "")
        summaries: list[RunSummary] = []
        try:
            async for execution in self.client.list_workflows(full_query, limit=limit):
                summaries.append(
                    RunSummary(
                        id=execution.id,
                        status=listed_status(execution),
                        start_time=execution.start_time.isoformat(),
                        close_time=execution.close_time.isoformat() if execution.close_time else None,
                    )
                )
        except RPCError as e:
            raise AgentRunError(f"Temporal refused to list runs: {e.message}") from e
        return summaries


async def first_value(converter: DataConverter, payloads: Sequence[Payload]) -> Any:
    """The first of ``payloads`` decoded (codec included), or ``None`` if there is none or it cannot be decoded.

    A run's start input may be what no converter reads (JSON nested too deep, an unknown encoding): the run failed on
    it at once (``workflows/start_input.py``), and a reader of its history goes on as without an input.
    """
    try:
        values = await converter.decode(payloads) if payloads else []
    except (ValueError, RuntimeError):
        return None
    return values[0] if values else None


class Transcript(NamedTuple):
    """A run's conversation at one version."""

    version: int
    messages: list[dict[str, Any]]


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
    """A handle on one run. ``async for message in run`` yields each of Claude's replies as it arrives.

    For a step-mode run that this handle drives (started here, or attached with ``step=True``), the same loop is
    the SDK's loop body: the run waits while the body runs, and the next iteration advances it.

    A query or an edit that goes unanswered while no worker polls the run's task queue raises ``NoWorker`` (with the
    command that starts one) rather than time out without saying why, and ``RunStuck`` while the run's workflow task
    keeps failing on the workers. Waiting for the run's result or its events goes on, since a worker may yet come (the
    queue is durable) and fixed workers carry a stuck run on, and tells ``wait_notice``.

    Attributes:
        wait_for_people: Whether an edit waited for (``wait=True``) keeps waiting while the run waits for a person (an
            approval, a step-mode pause or review). When ``False`` it raises ``EditQueued`` saying what the run waits
            for; the edit stays queued. A program that answers the person's part itself keeps the default.
        interrupted_edits: The ``seq`` of each edit this handle stopped waiting for when it was cancelled: the run
            still holds them queued, and applies them at its next boundary.
        wait_notice: Called when a wait for the run's result or events finds that the run cannot go on by itself:
            with a ``NoWorker`` when no worker polls its task queue, with a ``RunStuck`` when its workflow task keeps
            failing on the workers. Once each time it happens (shared by this handle's waits); the wait goes on.
            ``None``: wait silently.
    """

    def __init__(
        self,
        handle: WorkflowHandle[Any, Any],
        *,
        step: bool = False,
        runner: AgentRunner | None = None,
        output_format: type[Any] | None = None,
    ) -> None:
        self.handle = handle
        self.step = step
        self.output_format = output_format
        self._runner = runner
        self._content = runner.content if runner is not None else Content()
        self._task_queue: str | None = None
        self._worker_seen_at = -math.inf
        """When an edit last found a worker polling the run's queue (the event loop's clock)."""
        self.wait_for_people = True
        self.interrupted_edits: list[int] = []
        self.wait_notice: Callable[[NoWorker | RunStuck], None] | None = None
        self._noticed: type[NoWorker | RunStuck] | None = None
        """What ``wait_notice`` was last told, until a wait finds the run going on again."""

    @property
    def id(self) -> str:
        """The run's workflow id."""
        return self.handle.id

    @property
    def runner(self) -> AgentRunner | None:
        """The client this handle came from (``AgentRunner.start``, ``attach``); ``None`` for a bare ``Run(handle)``."""
        return self._runner

    def __aiter__(self) -> AsyncIterator[BetaMessage]:
        return self.steps() if self.step else self.messages()

    async def messages(self, *, from_iteration: int = 1) -> AsyncIterator[BetaMessage]:
        """Claude's replies from iteration ``from_iteration`` (1 is the first) until the run ends.

        Works for a run started anywhere, and for a finished run (it yields what the run produced). Ends by raising
        the run's failure, if it failed.
        """
        seen = max(0, from_iteration - 1)
        backoff = _Backoff()
        while True:
            done = await self._is_closed()
            replies = await self._replies(seen)
            for reply in replies:
                seen += 1
                yield reply
            if done:
                await self.until_done()  # raises the run's failure, if any
                return
            if replies:
                backoff.reset()
            await backoff.wait()

    async def events(self, after: int = 0, *, agents: bool = True) -> AsyncIterator[RunEvent]:
        """The run's live events (``contract/events.py``), each with its stream ``offset``, until it finishes.

        Text arrives as it streams, read from the run's live log in the content store (so this client must use the
        workers' store), each piece with the ``offset`` of the stream event before it. When a model call fails
        mid-stream and Temporal retries it, a ``retracted`` event says which attempt's text to drop, and late events
        of that attempt are never yielded. Works for a
        finished run too: from offset 0 it yields the whole run.

        With ``agents``, the events of the child runs its agent calls start come too (``agent_tree.py``), each with
        the ``path`` of agent calls down to its run (``("toolu_A",)``, ``("toolu_A", "toolu_B")`` for a grandchild)
        and the ``offset`` of its place in that run's stream: a child's every event comes after the parent's
        ``agent_started`` for it and before the parent's ``tool_finished`` of the call. Resuming ``after`` a
        child's ``agent_started``, a child whose call is still open there comes again from its first event.

        Args:
            after: The stream offset to start at (``event.offset + 1`` resumes after an event).
            agents: Whether the events of the run's child runs (and theirs) come too.

        Yields:
            Typed events (``TextDelta``, ``ReplyReceived``, ``ToolFinished``, ... of the ``RunEvent`` union), each
            with its ``offset``; the run's ``RunFinished`` last. The iterator also ends when the run closed without
            one (it failed before it began). An event of a type this client does not know (a newer worker's) is
            skipped.

        Raises:
            RunNotFound: No run has this id.
        """
        if not agents:
            async for event in self._own_events(after):
                yield event
            return
        async for event in follow_tree(self, after):
            yield event

    async def _own_events(self, after: int) -> AsyncIterator[RunEvent]:
        """The run's own live events, as ``events`` without ``agents``."""
        stream = WorkflowStreamClient.create(self._client, self.id)
        attempts = AttemptFilter()
        live = LiveMerge(self._content.store, self.id)  # what the model call streams (agent_runner/live.py)

        def subscribe(offset: int) -> AsyncGenerator[Any, None]:
            # An async generator, though typed as an iterator: closed here, since its steps are awaited one by one.
            return cast(
                AsyncGenerator[Any, None],
                stream.subscribe([EVENTS_TOPIC], from_offset=offset, poll_cooldown=_EVENTS_POLL),
            )

        items = subscribe(after)
        step: asyncio.Future[Any] | None = None
        pause = _WORKER_CHECK
        try:
            async with contextlib.AsyncExitStack() as stack:
                stack.push_async_callback(lambda: items.aclose())  # whichever subscription is the last
                try:
                    while True:
                        step = step or asyncio.ensure_future(self._answered(anext(items), durable=True))
                        if not (await asyncio.wait({step}, timeout=LIVE_POLL))[0]:
                            for event in await live.poll() if live.streaming else []:
                                for out in attempts.feed(event):
                                    yield out
                            continue
                        done, step = step, None
                        try:
                            item = done.result()
                        except StopAsyncIteration:
                            return
                        except RunStuck as e:
                            # Temporal refuses the stream's poll while the run's workflow task keeps failing, which
                            # ends the subscription. The run goes on once its workers are fixed: so does the wait.
                            self._notice(e)
                            await items.aclose()
                            await asyncio.sleep(pause)
                            pause = min(pause * 2, _WORKER_RECHECK_MAX)
                            items = subscribe(after)
                            continue
                        after, pause = item.offset + 1, _WORKER_CHECK
                        if not isinstance(item.data, dict) or item.data.get("type") not in EVENT_TYPES:
                            # A newer worker's event this client does not know: following goes on without it.
                            logger.debug("Run %s: skipped an unknown live event %r", self.id, item.data)
                            continue
                        # A reply or tool result may carry big content as placeholders: put it back from the store.
                        event = parse_event(await self._content.resolve(item.data), offset=item.offset)
                        for merged in [*(await live.before(event)), event, *live.after(event)]:
                            for out in attempts.feed(merged):
                                if not isinstance(out, RecordedCall):  # the merge's mark, not news to a watcher
                                    yield out
                        if isinstance(event, RunFinished):
                            return
                finally:
                    # A step of an async generator must end before the generator is closed (on leaving the
                    # `async with`), or closing it fails with "asynchronous generator is already running".
                    if step is not None and not step.done():
                        step.cancel()
                        await asyncio.wait({step})
        except RPCError as e:
            raise _rpc_error(self.id, e) from e

    async def until_done(self) -> BetaMessage:
        """Wait for the run to end and return its last reply.

        With an ``output_format``, a ``ParsedBetaMessage`` whose ``parsed_output`` is the reply parsed into it (a
        reply that does not parse raises pydantic's ``ValidationError``, as the SDK's runner does).

        Raises:
            RunCancelled: the run was cancelled or terminated.
            AgentRunError: (or a subclass such as ``ModelRequestRejected``) the run failed.
        """
        result = await self.result()
        if result.final_message is None:
            raise AgentRunError(f"Run {self.id} ended without a reply from Claude.")
        from anthropic.types.beta import BetaMessage

        return self._parsed(BetaMessage.model_validate(result.final_message))

    async def _replies(self, after: int) -> list[BetaMessage]:
        """The replies from iteration ``after + 1`` on, with their stored content put back."""
        try:
            held = await self._answered(self.handle.query(REPLIES_QUERY, after))
        except WorkflowQueryFailedError:
            # The run continued as new since: the replies it no longer holds are in the store.
            status = RunStatus.model_validate(await self._query(STATUS_QUERY))
            if after >= status.reply_offset:
                raise
            older = (await self._content.messages(status.replies_head))[after : status.reply_offset]
            held = [*older, *await self._query(REPLIES_QUERY, status.reply_offset)]
        except RPCError as e:
            raise _rpc_error(self.id, e) from e
        replies = await self._content.resolve(held)
        from anthropic.types.beta import BetaMessage

        return [self._parsed(BetaMessage.model_validate(reply)) for reply in replies]

    def _parsed(self, message: BetaMessage) -> BetaMessage:
        """``message`` parsed into ``output_format`` as the SDK's ``parse`` does, or as it is without one."""
        if self.output_format is None:
            return message
        # The SDK's own structured-output helpers (what its `parse` and tool runner use), so a run asks for and parses
        # a format exactly as the SDK does; anthropic is pinned, so these private names cannot move under us.
        from anthropic.lib._parse._response import parse_beta_response

        return parse_beta_response(output_format=self.output_format, response=message)

    async def result(self) -> RunResult:
        """Wait for the run to end and return its result: status, iterations, stop reason, usage, last reply."""
        try:
            raw = await self._answered(self.handle.result(), durable=True)
        except WorkflowFailureError as e:
            raise error_from_failure(self.id, e) from e
        except RPCError as e:
            raise _rpc_error(self.id, e) from e
        result = RunResult.model_validate(raw)
        if result.final_message is not None:
            result = result.model_copy(update={"final_message": await self._content.resolve(result.final_message)})
        return result

    async def status(self, *, tree: bool = False) -> RunStatus:
        """The run's status: iterations, stop reason, usage (and cost, given prices), pending approvals.

        Also the latest failure of a model or tool call that Temporal is still retrying, such as an overloaded API.
        A run that has ended reports how it ended as Temporal knows it (``CLOSED_STATUSES``): ``failed`` for a run
        whose input was rejected, ``terminated``, ``timed_out``; and it no longer waits for anything.

        Args:
            tree: Whether each entry of ``agents`` (a child run an agent call started) holds that child's status too,
                under ``run``, with its own children's nested the same way.

        Raises:
            RunNotFound: No run has this id.
            NoWorker: No worker polls the run's task queue to answer.
        """
        if tree:
            return await status_tree(self)
        description = await self._describe()
        # Pending approvals' inputs and results under review, as plain JSON: what ``approve``/``advance`` take back.
        status = RunStatus.model_validate(await self._content.resolve(await self._query(STATUS_QUERY)))
        closed = CLOSED_STATUSES.get(description.status) if description.status is not None else None
        if closed is not None:
            return status.model_copy(
                update={"status": closed, "pending_approvals": [], "tool_results_under_review": None}
            )
        failures = [
            f"{activity.activity_type.name} (attempt {activity.attempt}): {activity.last_failure.message}"
            for activity in description.raw_description.pending_activities
            if activity.HasField("last_failure")
        ]
        return status.model_copy(update={"last_error": failures[-1] if failures else None})

    def child(self, tool_use_id: str) -> Run:
        """A handle on the child run that this run's agent call ``tool_use_id`` started (id ``<id>/<tool_use_id>``).

        Steer it, approve its tool calls or watch it as any run; ``status().agents`` names each child's call.
        """
        child = Run(self._client.get_workflow_handle(f"{self.id}/{tool_use_id}"), runner=self._runner)
        child._content = self._content
        child.wait_for_people = self.wait_for_people
        child.wait_notice = self.wait_notice
        return child

    async def transcript(self) -> list[dict[str, Any]]:
        """The whole conversation so far, in the Messages API's wire shape."""
        return (await self.versioned_transcript()).messages

    async def versioned_transcript(self) -> Transcript:
        """The conversation and its version, which an edit can name to be refused if the run moved on."""
        version, held = await self._held_transcript()
        return Transcript(version=version, messages=await self._content.resolve(held))

    async def _held_transcript(self) -> tuple[int, list[dict[str, Any]]]:
        """The conversation's version and its messages as the run holds them (stored content as placeholders)."""
        raw = await self._query(TRANSCRIPT_QUERY)
        return int(raw["version"]), [*(await self._content.messages(raw["head"])), *raw["pending"]]

    # --- Steering ----------------------------------------------------------------------------------------------
    #
    # An edit is accepted (checked and queued in the run's state, so it can no longer be lost) at once, and applies
    # at the run's next iteration boundary. With ``wait`` the call returns the transcript version the edit produced
    # (or raises ``EditRejected`` if it could not apply); without, it returns ``None`` once the run accepted it.
    # ``wait`` defaults to off for a step-mode run this handle drives, whose boundary only comes after the loop body
    # advances it.

    async def inject(
        self,
        content: str | list[dict[str, Any]],
        *,
        expected_version: int | None = None,
        wait: bool | None = None,
    ) -> int | None:
        """Add user content before the next turn; it joins the tool results' message when there are any."""
        if isinstance(content, list):
            content = await self._content.offload_content(content)
        payload = {"content": content, "expected_version": expected_version, "held": True}
        return await self._edit(INJECT_MESSAGE_UPDATE, payload, wait)

    async def retry(self, *, expected_version: int | None = None, wait: bool | None = None) -> int | None:
        """Discard Claude's last reply (its tools do not run if they have not yet) and send the turn again."""
        return await self._edit(RETRY_TURN_UPDATE, {"expected_version": expected_version}, wait)

    async def replace_history(
        self, messages: list[dict[str, Any]], *, expected_version: int, wait: bool | None = None
    ) -> int | None:
        """Replace the whole conversation, if it is still at ``expected_version``."""
        messages = await self._content.offload_messages(messages)
        payload = {"messages": messages, "expected_version": expected_version, "held": True}
        return await self._edit(REPLACE_HISTORY_UPDATE, payload, wait)

    async def update_params(self, *, wait: bool | None = None, **params: Any) -> int | None:
        """Change request parameters (``max_tokens``, ``tool_choice``, ...) for later turns; ``None`` removes one.

        A big parameter the run only passes through (a long ``system``, an ``output_config`` schema) is stored and sent
        by reference, as ``AgentRunner.start`` sends it.
        """
        held = await _store_big_params(self._content, params)
        payload: dict[str, Any] = {"params": params, **({"held": True} if held else {})}
        return await self._edit(UPDATE_PARAMS_UPDATE, payload, wait)

    async def add_tools(self, *tools: Any, wait: bool | None = None) -> int | None:
        """Make registered tools (or raw definitions) available from the next turn on.

        A raw definition's big fields (a long input schema) are stored and sent by reference, as ``AgentRunner.start``
        sends them.
        """
        # A definition goes into the conversation (a `tool_addition` block), so it is held as content is: escaped.
        added = await self._content.tools_by_reference([escape(_tool_param(t)) for t in tools])
        held = any(isinstance(t, dict) for t in added)
        return await self._edit(ADD_TOOLS_UPDATE, {"tools": added, **({"held": True} if held else {})}, wait)

    async def remove_tools(self, *names: str, wait: bool | None = None) -> int | None:
        """Take tools away from the next turn on."""
        return await self._edit(REMOVE_TOOLS_UPDATE, {"names": list(names)}, wait)

    async def compact(
        self,
        compaction: dict[str, Any] | None = None,
        *,
        keep_recent_turns: int = 0,
        background: bool = False,
        wait: bool | None = None,
    ) -> int | None:
        """Summarize the history before the next turn (the SDK's ``compact_before_next_turn``).

        Args:
            compaction: The request's ``compaction`` field; ``{"type": "summarize"}`` by default.
            keep_recent_turns: Keep the last this many turns verbatim after the summary, summarizing only the history
                before them (``0``: all of it). A turn starts with a reply of Claude's that follows a user or system
                message. The edit fails, changing nothing, while the history has no older turn.
            background: Let the run go on while the summary is written: the history as it is now (less the kept
                turns) is summarized, and the summary takes its place at the first boundary after it arrived, with
                every later message kept after it. Then the version returned is the one the edit applied at, before
                the summary is in place.
            wait: Wait for the edit to apply (the default unless the run is in step mode).

        Returns:
            The transcript version the compaction produced, when waited for.

        Raises:
            EditRejected: A bad value (a negative ``keep_recent_turns``), the run has ended, or the compaction could
                not apply.
        """
        # Left out at 0, so the update stays the one workers from before the option take.
        keep = keep_recent_turns if keep_recent_turns != 0 else None
        payload: dict[str, Any] = {"compaction": compaction, "keep_recent_turns": keep}
        if background:  # left out otherwise, as `keep_recent_turns`
            payload["background"] = True
        return await self._edit(COMPACT_UPDATE, payload, wait)

    async def stop(self, reason: str = "stopped by a client") -> None:
        """End the run at its next step (the SDK's ``close``): a reply whose tools have not run yet never runs them."""
        await self._edit(STOP_UPDATE, {"reason": reason}, True)

    async def approve(self, tool_use_id: str, *, input: dict[str, Any] | None = None) -> None:
        """Let a tool call that waits for approval run, optionally with edited input.

        A run asking for more budget (``budget={"on_spent": "ask"}``) waits on an approval named ``budget``
        (``budget_1``, ...): approve it with the new limits as ``input`` (``{"max_output_tokens": 40000}``) to go on.
        """
        held = None if input is None else escape(input)  # the tool gets it as given (``transcript.escape``)
        await self._edit(
            APPROVE_TOOL_UPDATE, {"tool_use_id": tool_use_id, "input": held, "held": held is not None or None}, True
        )

    async def deny(self, tool_use_id: str, reason: str = "The user denied this tool call.") -> None:
        """Refuse a waiting tool call: it never runs, and Claude sees ``reason`` as an error result.

        Denying a budget request (``budget_1``, ...) ends the run with Claude's summary as its last reply.
        """
        await self._edit(DENY_TOOL_UPDATE, {"tool_use_id": tool_use_id, "reason": reason}, True)

    async def pending_approvals(self) -> list[PendingApproval]:
        """Tool calls waiting for a person (none once the run has ended, as ``status()`` says)."""
        if await self._is_closed():
            return []  # a terminated or cancelled run's query would still name the calls it was waiting on
        pending = await self._content.resolve(await self._query(PENDING_APPROVALS_QUERY))
        return [PendingApproval.model_validate(p) for p in pending]

    async def advance(self, *, tool_results: list[dict[str, Any]] | None = None, iteration: int | None = None) -> None:
        """In step mode, let the run go on; with ``tool_results`` the client answers the tool calls itself.

        Args:
            tool_results: ``tool_result`` blocks for the last reply's ``tool_use`` blocks; then no tool runs.
            iteration: The iteration the run paused after, as read; by default the run's status is read for it. The
                run refuses the advance if it has moved on since.
        """
        if tool_results is not None:
            tool_results = await self._content.offload_content(tool_results)
        if iteration is None:
            status = await self.status()
            if status.status in ("waiting_for_step", "waiting_for_review"):
                iteration = status.iterations
        held = True if tool_results is not None else None
        await self._edit(ADVANCE_UPDATE, {"tool_results": tool_results, "iteration": iteration, "held": held}, True)

    async def wake(self, reason: str | None = None) -> None:
        """Cut short the sleep Claude asked for with the built-in ``sleep`` tool (a run started with ``sleep``).

        Claude reads in the sleep's result that a person woke it, and ``reason`` if given.

        Raises:
            EditRejected: The run is not sleeping.
        """
        await self._edit(WAKE_UPDATE, {"reason": reason}, True)

    async def steps(self) -> AsyncIterator[BetaMessage]:
        """Drive a step-mode run as the SDK's loop: each reply is yielded while the run waits.

        Asking for the next reply advances the run, unless the loop body already did (with
        ``advance(tool_results=...)``) or stopped it. A run started with ``review_results`` also pauses once the
        reply's tools have run: the loop lets their results go as they are (the body had the reply before its tools
        ran; to review them, drive the run with ``status()`` and ``advance`` instead).
        """
        seen = 0
        backoff = _Backoff()
        while True:
            status = await self.status()
            # `seen` counts replies, compactions included (they are yielded too, as the SDK's loop yields them); the
            # run's pause and `advance` are numbered by iterations, which leave compactions out.
            if _replies_of(status) > seen and status.status == "waiting_for_step":
                for reply in await self._replies(seen):
                    seen += 1
                    yield reply
                after = await self.status()
                if after.status == "waiting_for_step" and _replies_of(after) == seen:
                    await self.advance(iteration=after.iterations)
                backoff.reset()
                continue
            if status.status == "waiting_for_review" and _replies_of(status) == seen:
                await self.advance(iteration=status.iterations)
                backoff.reset()
                continue
            if await self._is_closed():
                for reply in await self._replies(seen):
                    seen += 1
                    yield reply
                await self.until_done()
                return
            await backoff.wait()

    async def _edit(self, update: str, payload: dict[str, Any], wait: bool | None) -> int | None:
        arg = {k: v for k, v in payload.items() if v is not None}
        for attempt in range(_CONTINUED_RESENDS + 1):
            try:
                accepted = await self._execute_update(update, arg)
                break
            except WorkflowUpdateFailedError as e:
                cause = e.cause
                message = cause.message if isinstance(cause, ApplicationError) else str(cause or e)
                raise EditRejected(f"{update} was refused: {message}") from e
            except RPCError as e:
                if e.status == RPCStatusCode.NOT_FOUND and "already completed" in e.message:
                    # The execution it reached closed before taking it: if the run continued as new, its next
                    # execution takes it (it was never accepted, so it is not sent twice).
                    if attempt < _CONTINUED_RESENDS and await self.ended() in (None, "continued_as_new"):
                        await asyncio.sleep(0.1 * (attempt + 1))  # the next execution may not be there yet
                        continue
                    raise EditRejected(f"{update} was refused: run {self.id} has already ended. {TO_GO_ON}") from e
                raise _rpc_error(self.id, e) from e
        seq = accepted.get("seq") if isinstance(accepted, dict) else None
        if seq is None or not (wait if wait is not None else not self.step):
            return None
        try:
            return await self._edit_applied(update, int(seq))
        except asyncio.CancelledError:
            self.interrupted_edits.append(int(seq))  # the run still holds it: it applies at the next boundary
            raise

    async def _execute_update(self, update: str, arg: dict[str, Any]) -> Any:
        """Send an update, waiting out Temporal's limit of 10 updates in flight per run instead of failing.

        Raises:
            NoWorker: No worker polls the run's task queue. Checked before the update is sent: Temporal keeps an
                update it was sent for the run's next workflow task, so one sent with no worker to take it applies
                once a worker starts, even after its sender was told it failed (and a resent one applies twice).
        """
        await self._check_worker_before_edit()
        backoff = _Backoff()
        for _ in range(60):
            try:
                return await self._answered(self.handle.execute_update(update, arg), edit=True)
            except RPCError as e:
                if e.status != RPCStatusCode.RESOURCE_EXHAUSTED:
                    raise
                await backoff.wait()
        return await self._answered(self.handle.execute_update(update, arg), edit=True)

    async def _check_worker_before_edit(self) -> None:
        """Raise ``NoWorker`` (nothing sent) unless a worker polls the run's queue.

        A worker that is just starting has ``_WORKER_CHECK`` seconds to poll; a run that has ended, or that no run
        has, is left to the update to say so.
        """
        loop = asyncio.get_running_loop()
        if loop.time() - self._worker_seen_at < _WORKER_SEEN_FOR:
            return  # Temporal itself remembers a poller for minutes: asking again so soon would say nothing new
        deadline = loop.time() + _WORKER_CHECK
        try:
            task_queue = await self.task_queue()
            while not await has_worker(self._client, task_queue):
                if loop.time() >= deadline:
                    if await self.ended() is None:
                        raise no_worker(task_queue, sent=False)
                    return
                await asyncio.sleep(0.1)
            self._worker_seen_at = loop.time()
        except RPCError as e:
            if e.status == RPCStatusCode.NOT_FOUND:
                return  # no such run: the update says so
            logger.debug("Could not check run %s's task queue for a worker: %s", self.id, e.message)

    async def _edit_applied(self, update: str, seq: int) -> int:
        """Wait for a queued edit to apply at the run's boundary; its version, or ``EditRejected`` with the reason.

        Raises:
            EditQueued: The run waits for a person first, and ``wait_for_people`` is off.
        """
        backoff = _Backoff()
        while True:
            outcome = await self._query(EDIT_OUTCOME_QUERY, seq)
            if outcome is not None:
                if outcome.get("error"):
                    raise EditRejected(f"{update} could not apply: {outcome['error']}")
                return int(outcome["version"])
            if await self._is_closed():
                # Ended (terminated, say) without answering the edit: it never will. Read once more, since the run
                # may have answered it just before it closed.
                outcome = await self._query(EDIT_OUTCOME_QUERY, seq)
                if outcome is None:
                    raise EditRejected(
                        f"{update} did not apply: run {self.id} ended ({(await self.status()).status}) before its "
                        f"next turn; nothing was changed. {TO_GO_ON}"
                    )
                continue
            if not self.wait_for_people:
                status = await self.status()
                if status.status in WAITING_STATUSES:
                    raise EditQueued(
                        f"{update} is queued: it applies once run {self.id} goes on, and the run waits "
                        f"({status.status}).",
                        seq=seq,
                    )
            await backoff.wait()

    async def fork(
        self,
        from_iteration: int,
        *,
        id: str | None = None,
        task_queue: str | None = None,
        priority: Priority | None = None,
        changes: Mapping[str, Any] | None = None,
        tool_results: ToolResultsSource = "run",
    ) -> Run:
        """Start a new run whose first request is this run's request for ``from_iteration``.

        The new run has the same parameters, tools and options, and the history up to that point, on the same task
        queue unless ``task_queue`` names another, with this run's priority unless ``priority`` is given; this run is
        left as it is. Use it to resume a failed or stopped run from a chosen turn, or to try a turn again.

        With ``changes`` and ``tool_results``, it is a what-if run: the same run from that turn on with another
        model, system prompt or worker code, whose tool calls made as this run made them get this run's results
        instead of running (``contract/recorded_results.py``), so it costs only what the change changed.

        Args:
            from_iteration: The reply whose request the new run's first request is (1 is the first).
            id: The new run's workflow id; a new ``agent-<uuid>`` by default.
            task_queue: Where the new run goes; this run's task queue by default.
            priority: The new run's priority and fairness key; this run's by default.
            changes: Run input fields the new run sets otherwise (``model``, ``system``, ``max_tokens``,
                ``thinking``, ``max_iterations``, ...; a ``None`` value leaves one out); its messages and tools are
                the fork point's.
            tool_results: ``"run"``: tools run as in any run. ``"recorded"``: a call of a tool with the same input
                as one this run made from ``from_iteration`` on gets that call's result (each once, in this run's
                order), and only the others run. ``"recorded_only"``: as ``"recorded"``, but the others do not
                run either: Claude is told so, in an error result (a dry run).

        Raises:
            InvalidRunInput: ``changes`` would make an input the run refuses, or sets its messages or tools, or the
                record is over ``RECORDED_LIMIT``; nothing was started.
        """
        point = await self._query(
            FORK_POINT_QUERY, from_iteration, refusing=f"fork run {self.id} from iteration {from_iteration}"
        )
        held_point = await self._content.messages(point["head"])
        messages = await self._content.resolve(held_point)
        own = {k: v for k, v in point["input"].items() if k not in ("recorded_tool_results", "unrecorded_tool_calls")}
        changed = _fork_changes(changes)
        run_input = {**own, **changed, "messages": messages}
        for key in [key for key, value in changed.items() if value is None]:
            del run_input[key]  # a change to None leaves the field out
        if tool_results != "run":
            _, held = await self._held_transcript()
            # The calls in the history the fork starts from are there already, with their results.
            recorded = recorded_from(held, skip=tool_use_ids(held_point))
            size = len(canonical(recorded))
            if size > RECORDED_LIMIT:
                raise InvalidRunInput(
                    f"Run {self.id} made {len(recorded)} tool calls from turn {from_iteration} on, {size:,} bytes of "
                    f"record: more than a run's input carries ({RECORDED_LIMIT:,}). Fork from a later turn."
                )
            run_input["recorded_tool_results"] = recorded
            if tool_results == "recorded_only":
                run_input["unrecorded_tool_calls"] = "refuse"
        if changes:
            check_run_input({**run_input, "held": True})
        if task_queue is None:
            task_queue = await self.task_queue()  # where the original runs, by default
        priority = priority or await self.priority()
        return await AgentRunner(self._client, task_queue=task_queue).start(**run_input, id=id, priority=priority)

    async def send(
        self,
        content: str | list[dict[str, Any]],
        *,
        id: str | None = None,
        task_queue: str | None = None,
        priority: Priority | None = None,
    ) -> Run:
        """Go on with this ended run's conversation: a new run that starts with ``content`` as the user's next message.

        The new run carries this run's transcript (by reference), its parameters, tools and options, its place on
        the server-side thread (so its first turn sends only ``content``), its usage and its refusal-fallback pin;
        its input names this run in ``continue_from``. This run is left as it is, its fork points included. To add
        to a run that is still going, use ``inject``.

        Args:
            content: The user's message: text, or content blocks.
            id: The new run's workflow id; a new ``agent-<uuid>`` by default.
            task_queue: Where the new run goes; this run's task queue by default.
            priority: The new run's priority and fairness key; this run's by default.

        Returns:
            A handle on the new run.

        Raises:
            InvalidRunInput: ``content`` is no message the API takes (empty text, say); nothing was started.
            AgentRunError: The run has not ended (it answers with what to do instead).
        """
        from agent_runner.contract.run_input import message_problems

        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else list(content)
        problems = message_problems([{"role": "user", "content": blocks}])
        if problems:  # checked before anything starts, as `run` does: the new run would fail at once
            raise InvalidRunInput("The message was rejected:\n" + "\n".join(f"- {p}" for p in problems))
        point = await self._query(SEND_POINT_QUERY, refusing=f"send a message after run {self.id}")
        run_input = {
            **point["input"],
            "messages": [{"role": "user", "content": blocks}],
            "continue_from": point["continue_from"],
        }
        if task_queue is None:
            task_queue = await self.task_queue()
        priority = priority or await self.priority()
        return await AgentRunner(self._client, task_queue=task_queue).start(**run_input, id=id, priority=priority)

    async def terminate(self, reason: str) -> None:
        """End the run at once, without letting it finish anything (a last resort; prefer ``stop`` or ``cancel``).

        Raises:
            RunNotFound: No run has this id.
            AgentRunError: The run has already ended (it is left as it ended).
        """
        try:
            await self.handle.terminate(reason=reason)
        except RPCError as e:
            raise await self._ended_or(e, "terminate") from e

    async def cancel(self) -> None:
        """Cancel the run: running activities are cancelled and the run ends as cancelled (``RunCancelled``).

        Raises:
            RunNotFound: No run has this id.
            AgentRunError: The run has already ended (it is left as it ended).
        """
        # Temporal takes a cancellation of a run that has ended, and nothing happens: say so instead.
        ended = await self.ended()
        if ended is not None:
            raise _already_ended(self.id, ended, "cancel")
        try:
            await self.handle.cancel()
        except RPCError as e:
            raise await self._ended_or(e, "cancel") from e

    async def _ended_or(self, error: RPCError, what: str) -> AgentRunnerError:
        """The error for ``error``: that the run has ended, when Temporal refused because it had (``NOT_FOUND``)."""
        if error.status == RPCStatusCode.NOT_FOUND:
            with contextlib.suppress(RunNotFound):
                ended = await self.ended()
                if ended is not None:
                    return _already_ended(self.id, ended, what)
        return _rpc_error(self.id, error)

    async def _query(self, name: str, *args: Any, refusing: str | None = None) -> Any:
        """Ask the run a query.

        ``refusing`` names what the caller does, for a query whose refusal is an answer (a fork from an iteration the
        run no longer holds): the error then reads ``Cannot <refusing>: <the run's reason>``.
        """
        try:
            return await self._answered(self.handle.query(name, *args))
        except RPCError as e:
            raise _rpc_error(self.id, e) from e
        except (WorkflowQueryFailedError, WorkflowQueryRejectedError) as e:
            if refusing is not None and isinstance(e, WorkflowQueryFailedError):
                raise AgentRunError(f"Cannot {refusing}: {e}") from e
            raise AgentRunError(f"Run {self.id} could not answer {name!r}: {e}") from e

    @property
    def _client(self) -> Client:
        return self._runner.client if self._runner is not None else self.handle._client

    async def _describe(self) -> WorkflowExecutionDescription:
        try:
            description = await self.handle.describe()
        except RPCError as e:
            raise _rpc_error(self.id, e) from e
        self._task_queue = description.task_queue
        return description

    async def priority(self) -> Priority | None:
        """The run's priority and fairness key, as it was started with them; ``None`` if it has none."""
        return run_priority.from_proto((await self._describe()).raw_description.workflow_execution_info.priority)

    async def task_queue(self) -> str:
        """The task queue the run's workflow tasks go to (where its workers must poll)."""
        if self._task_queue is None:
            await self._describe()
        assert self._task_queue is not None
        return self._task_queue

    async def _is_closed(self) -> bool:
        return await self.ended() is not None

    async def ended(self) -> str | None:
        """How the run ended as Temporal records it, or ``None`` while it is open.

        One of ``completed``, ``failed``, ``canceled``, ``terminated``, ``timed_out``, ``continued_as_new``: what
        Temporal knows even of a run whose worker is gone, where ``status()`` needs a worker to answer.

        Raises:
            RunNotFound: No run has this id.
        """
        status = (await self._describe()).status
        if status is None or status == WorkflowExecutionStatus.RUNNING:
            return None
        return status.name.lower()

    async def history_events(self) -> AsyncIterator[HistoryEvent]:
        """The run's Temporal history, event by event (payloads as Temporal holds them, decoded by the caller).

        What an ended run's readers use (the console's page, ``agent-runner status`` without a worker).

        Raises:
            AgentRunError: Temporal would not give the history.
        """
        try:
            async for event in self.handle.fetch_history_events():
                yield event
        except RPCError as e:
            raise AgentRunError(f"Temporal would not give run {self.id}'s history: {e.message}") from e

    async def started_in_step_mode(self) -> bool:
        """Whether the run was started with ``step``: then its edits apply only once a client advances it.

        Read from the run's start input (the first event of its history), since a step-mode run that is busy with a
        model call does not look paused yet, and a plain ``attach`` does not know.

        Raises:
            RunNotFound: No run has this id.
        """
        try:
            async for event in self.handle.fetch_history_events(page_size=1):
                if not event.HasField("workflow_execution_started_event_attributes"):
                    return False
                payloads = event.workflow_execution_started_event_attributes.input.payloads
                raw = await first_value(self._client.data_converter, payloads)
                return isinstance(raw, Mapping) and raw.get("step") not in (None, False)
        except RPCError as e:
            raise _rpc_error(self.id, e) from e
        return False

    async def _answered(self, call: Awaitable[T], *, durable: bool = False, edit: bool = False) -> T:
        """``call``'s answer, or ``NoWorker`` if no worker polls the run's task queue to give it.

        The queue is checked for pollers only once ``call`` has gone unanswered for a moment, so an answer costs
        nothing more and a worker that is just starting has time to poll; then again now and then, in case the
        worker goes away during a long wait.

        Args:
            call: A query, an update, or a durable wait.
            durable: ``call`` waits for the run itself (its result, its events), which a worker that comes later
                (or a fixed one) answers: tell ``wait_notice`` instead of raising, and go on waiting. A call Temporal
                refuses because the run's workflow task keeps failing still raises ``RunStuck``: it cannot go on.
            edit: ``call`` sends an edit (an update), which Temporal keeps for the run once sent.
        """
        task = asyncio.ensure_future(call)
        timeout = _WORKER_CHECK
        sent = True if edit else None
        try:
            while True:
                done, _ = await asyncio.wait({task}, timeout=timeout)
                if done:
                    try:
                        answer = task.result()
                    except RPCError as e:
                        if e.status == RPCStatusCode.FAILED_PRECONDITION and _TASK_FAILING in e.message:
                            raise await self._stuck(sent=False if edit else None, waiting=durable) from e
                        raise
                    if durable:
                        self._noticed = None
                    return answer
                try:
                    task_queue = await self.task_queue()
                    polled = await has_worker(self._client, task_queue)
                    failing = await self._task_failing() if polled else None
                except RPCError as e:
                    # The check is advisory: Temporal failing to answer it (an RPC cancelled or timed out under load)
                    # says nothing of the run, whose own call goes on and fails by itself if Temporal is gone.
                    logger.debug("Could not check run %s's task queue for a worker: %s", self.id, e.message)
                else:
                    if failing is not None:
                        stuck = run_stuck(self.id, failing, sent=sent, waiting=durable)
                        if not durable:
                            raise stuck
                        self._notice(stuck)
                    elif not polled:
                        if not durable:
                            raise no_worker(task_queue, sent=sent)
                        self._notice(no_worker(task_queue))
                    else:
                        self._noticed = None
                timeout = min(timeout * 2, _WORKER_RECHECK_MAX)
        finally:
            if not task.done():
                task.cancel()
                await asyncio.wait({task})  # a step of an async generator must end before the generator is closed
                if not task.cancelled():
                    task.exception()  # read, so asyncio does not log it as never retrieved: the caller was told

    async def _task_failing(self) -> str | None:
        """How the run's workflow task keeps failing, if it does: retried after a failure of the workers' code.

        A workflow task retried after a timeout (its worker was killed) is not failing: another worker takes it.
        """
        description = await self.handle.describe()
        if not description.raw_description.HasField("pending_workflow_task"):
            return None
        attempt = description.raw_description.pending_workflow_task.attempt
        if attempt < 2:
            return None
        request = GetWorkflowExecutionHistoryReverseRequest(
            namespace=self._client.namespace,
            execution=ExecutionRef(workflow_id=self.id),
            maximum_page_size=_TASK_FAILURE_EVENTS,
        )
        history = await self._client.workflow_service.get_workflow_execution_history_reverse(request)
        for event in history.history.events:
            if event.HasField("workflow_task_timed_out_event_attributes"):
                return None
            if event.HasField("workflow_task_failed_event_attributes"):
                failed = event.workflow_task_failed_event_attributes
                if failed.cause in _ROUTINE_TASK_FAILURES:
                    return None
                cause = WorkflowTaskFailedCause.Name(failed.cause).removeprefix("WORKFLOW_TASK_FAILED_CAUSE_")
                return f"attempt {attempt}; {cause}: {failed.failure.message}"
        return None

    async def _stuck(self, *, sent: bool | None, waiting: bool) -> RunStuck:
        """``RunStuck`` for a call Temporal refused because the run's workflow task is failing, saying how if it can."""
        try:
            failing = await self._task_failing()
        except RPCError:
            failing = None
        return run_stuck(self.id, failing, sent=sent, waiting=waiting)

    def _notice(self, notice: NoWorker | RunStuck) -> None:
        """Tell ``wait_notice`` why a wait goes on, unless it was told so since the run last went on."""
        if type(notice) is not self._noticed:
            self._noticed = type(notice)
            if self.wait_notice is not None:
                self.wait_notice(notice)


def run_stuck(run_id: str, failing: str | None, *, sent: bool | None, waiting: bool = False) -> RunStuck:
    """The error for a run whose workflow task keeps failing on the workers, with where to look.

    Args:
        run_id: The run.
        failing: The task's attempt and last failure, when known.
        sent: For an edit: whether it was sent (it may then still apply once the run goes on) or not.
        waiting: Whether it is said to a wait for the run's result or events, which goes on.
    """
    how = f" ({failing})" if failing else ""
    fate = {
        None: "",
        False: " The edit was not sent; nothing was changed.",
        True: (
            " The edit was sent: it may still apply once the run goes on, so check the transcript before sending it "
            "again."
        ),
    }[sent]
    state = "is not going on" if waiting else "cannot answer now"
    after = ", and this wait with it" if waiting else ""
    return RunStuck(
        f"Run {run_id} {state}: its workflow task keeps failing on the workers{how}.{fate} The workers' log says why "
        f"(`temporal workflow show --workflow-id {run_id}` shows the first failure); once workers run code that can "
        f"go on with the run, it goes on by itself{after}."
    )


RECORDED_LIMIT = 1_000_000
"""The most bytes of recorded tool results a what-if fork's input carries (Temporal refuses inputs over 2 MB; big
results are carried by reference, so this is thousands of calls)."""

_FORK_KEEPS = (
    "messages",
    "tools",
    "held",
    "forked_from",
    "continue_from",
    "recorded_tool_results",
    "unrecorded_tool_calls",
)
"""Run input a fork's ``changes`` cannot set: the fork point's, or what ``tool_results`` sets."""


def _fork_changes(changes: Mapping[str, Any] | None) -> dict[str, Any]:
    """``Run.fork``'s ``changes``, refused if they set what the fork point decides."""
    kept = sorted(key for key in changes or {} if key in _FORK_KEEPS)
    if kept:
        raise InvalidRunInput(
            f"A fork's changes cannot set {', '.join(f'`{key}`' for key in kept)}: its messages and tools are the "
            "fork point's, and `tool_results` says how its tool calls are answered. Fork from another iteration, or "
            "start a new run with `AgentRunner.start`."
        )
    return dict(changes or {})


def check_run_input(run_input: Mapping[str, Any]) -> None:
    """Check a run's JSON input as the run will when it starts, so a bad one fails before anything starts.

    Raises:
        InvalidRunInput: The input would fail the run, naming every problem.
    """
    from agent_runner.contract.run_input import parse_run_input

    parse_run_input(dict(run_input))


async def has_worker(client: Client, task_queue: str) -> bool:
    """Whether a worker polls ``task_queue`` for workflow tasks (Temporal remembers a poller for a few minutes)."""
    response = await client.workflow_service.describe_task_queue(
        DescribeTaskQueueRequest(
            namespace=client.namespace,
            task_queue=TaskQueue(name=task_queue, kind=TaskQueueKind.TASK_QUEUE_KIND_NORMAL),
            task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
        )
    )
    return len(response.pollers) > 0


def no_worker(task_queue: str, *, sent: bool | None = None) -> NoWorker:
    """The error for a task queue that no worker polls, with the command that starts one.

    Args:
        task_queue: The queue.
        sent: For an edit: whether it was sent (Temporal then keeps it for the run, which takes it once a worker
            polls) or not (nothing was changed).
    """
    queue = "" if task_queue == TASK_QUEUE else f" --task-queue {shlex.quote(task_queue)}"
    fate = {
        None: "",
        False: " The edit was not sent; nothing was changed.",
        True: (
            " The edit was sent, and Temporal keeps it for the run: it applies (or is refused) once a worker polls, "
            "so do not send it again; check the transcript then."
        ),
    }[sent]
    return NoWorker(
        f"No worker is polling task queue {task_queue!r}.{fate} Start one: {WORKER_COMMAND}{queue} (or, to try "
        f"things out, the whole development stack: {DEV_COMMAND}{queue})"
    )


def error_from_failure(run_id: str, failure: WorkflowFailureError) -> AgentRunnerError:
    """The error class a run failed with, rebuilt from the workflow's failure."""
    cause = failure.cause
    if isinstance(cause, (CancelledError, TerminatedError)):
        return RunCancelled(f"Run {run_id} was {'cancelled' if isinstance(cause, CancelledError) else 'terminated'}.")
    if isinstance(cause, ActivityError) and isinstance(cause.cause, ApplicationError):
        # A tool call that failed for good (a missing blob, say) fails the run as is: report the activity's own error.
        cause = cause.cause
    if isinstance(cause, ApplicationError):
        cls = ERRORS_BY_NAME.get(cause.type or "", AgentRunError)
        return cls(cause.message)
    return AgentRunError(f"Run {run_id} failed: {cause or failure}")


def _already_ended(run_id: str, ended: str, what: str) -> AgentRunError:
    return AgentRunError(f"Run {run_id} has already ended ({ended}); there is nothing to {what}.")


def _rpc_error(run_id: str, error: RPCError) -> AgentRunnerError:
    if error.status == RPCStatusCode.NOT_FOUND:
        return RunNotFound(f"No run with id {run_id!r}. List runs with `agent-runner list`.")
    return AgentRunError(f"Temporal refused the request for run {run_id}: {error.message}")


async def _store_big_params(content: Content, params: dict[str, Any]) -> bool:
    """Store the big parameters of ``params`` and put their placeholders in their place (``big_params.py``).

    Stored, not carried: a long ``system`` or a big ``output_config`` schema would push the run's input past
    Temporal's payload limit. A value of the wrong type stays, for the run to refuse with the usual message.

    Returns:
        Whether any was stored.
    """
    from agent_runner.contract.params import param_problems
    from agent_runner.contract.run_input import API_PARAMS, EXTRA_BODY_PARAMS

    api = {key: value for key, value in params.items() if key in API_PARAMS | EXTRA_BODY_PARAMS}
    slim = slim_params(api, keep=read_by_fallbacks(params.get("refusal_fallbacks")))
    big = {key: api[key] for key, value in slim.items() if value is not api[key]}
    refused = param_problems({**big, "model": "m", "max_tokens": 1})
    big = {key: value for key, value in big.items() if not any(f"`{key}" in problem for problem in refused)}
    for key, value in big.items():
        params[key] = stored(await content.put_value(value))
    return bool(big)


def _tool_param(tool: Any) -> str | dict[str, Any]:
    """A run's ``tools`` entry: a registered tool's (or agent's) name, or a raw definition sent as is."""
    if isinstance(tool, str):
        return tool
    if isinstance(tool, AgentSpec):
        return tool.name  # an agent the workers registered; one the run declares goes in ``agents``
    if isinstance(tool, Mapping):
        return dict(tool)
    name = getattr(tool, "name", None)
    if isinstance(name, str) and hasattr(tool, "to_dict"):
        return name
    raise TypeError(
        f"tools takes @beta_tool functions, registered AgentSpecs, tool names or tool definition dicts, got "
        f"{type(tool).__name__}."
    )


def _with_output_format(output_config: Any, output_format: type[Any]) -> dict[str, Any]:
    """``output_config`` with ``output_format``'s JSON schema as its ``format``, as the SDK builds each request's."""
    from anthropic import AnthropicError, omit
    from anthropic.lib._parse._transform import (
        merge_output_config,
        to_json_output_format,
        validate_output_config_conflict,
    )

    try:
        validate_output_config_conflict(output_config if output_config is not None else omit, output_format)
        format_param = to_json_output_format(output_format)
    except (AnthropicError, TypeError) as e:
        raise InvalidRunInput(f"{e}".rstrip(".") + ".") from e
    merged = merge_output_config(output_config or omit, format_param)
    assert isinstance(merged, dict)  # a format was given, so the merge is a dict
    return dict(merged)


def _replies_of(status: RunStatus) -> int:
    """The run's reply count; a worker older than ``RunStatus.replies`` counted no compactions apart."""
    return status.replies if status.replies is not None else status.iterations
