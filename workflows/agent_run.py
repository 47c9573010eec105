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

Clients steer a running run with updates (``contract/steering.py``). Edits wait for the *iteration boundary*, the
point before the next model call, and apply there one by one in the order the run accepted them. An edit accepted
while the final reply was being written keeps the run going, as ``append_messages`` in the SDK's last loop body
does. A reply that a pending retry will discard, or that arrived after a stop, never has its tools run.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, NoReturn, TypeVar, cast

from temporalio import workflow
from temporalio.common import RetryPolicy, SearchAttributeKey
from temporalio.contrib.workflow_streams import WorkflowStream
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError, FailureError

with workflow.unsafe.imports_passed_through():
    from agent_runner.contract import events
    from agent_runner.contract.errors import (
        AgentRunnerError,
        EditRejected,
        InvalidRunInput,
        MalformedReply,
        ToolNotRegistered,
    )
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
        UPDATE_PARAMS_UPDATE,
        AddTools,
        Advance,
        ApproveTool,
        Compact,
        DenyTool,
        EditFailed,
        EditOutcome,
        InjectMessage,
        PendingApproval,
        QueuedEdit,
        RemoveTools,
        ReplaceHistory,
        RetryTurn,
        Stop,
        UpdateParams,
        parse_update,
    )
    from agent_runner.contract.transcript import (
        Transcript,
        canonical,
        is_placeholder,
        message_ref,
        next_head,
        ref_for,
        stored,
    )
    from agent_runner.contract.types import (
        CREATE_MESSAGE_ACTIVITY,
        DESCRIBE_TOOLS_ACTIVITY,
        EVENTS_TOPIC,
        FORK_POINT_QUERY,
        PROCESS_RESULTS_ACTIVITY,
        RECONCILE_TOOL_ACTIVITY,
        REPLIES_QUERY,
        RUN_TOOL_ACTIVITY,
        SEARCH_ATTRIBUTE_TYPES,
        STATUS_QUERY,
        THREAD_LOST_ERROR,
        TOOL_NOT_STARTED_ERROR,
        TOOL_TIMEOUT_GRACE,
        TOOL_USE_READY_SIGNAL,
        TRANSCRIPT_QUERY,
        WORKFLOW_TYPE,
        ActivityOptions,
        CreateMessageInput,
        CreateMessageOutput,
        DescribeToolsInput,
        DescribeToolsOutput,
        ProcessResultsInput,
        ProcessResultsOutput,
        ReconcileOutput,
        RunResult,
        RunStatus,
        RunStatusName,
        RunToolInput,
        ToolResult,
        ToolSpec,
        Usage,
    )
    from agent_runner.workflows.budget import HistoryLimits
    from agent_runner.workflows.carry import (
        CARRIED_BYTES,
        CARRIED_EVENTS,
        CARRIED_FORK_POINTS,
        CARRIED_INPUT_MESSAGES_BYTES,
        CARRIED_OUTCOMES,
        CARRIED_REPLIES,
        CARRIED_REPLY_BYTES,
        Carried,
    )
    from agent_runner.workflows.conversation import (
        THREAD_UNSUPPORTED_CODE,
        THREAD_UNSUPPORTED_ERROR,
        Conversation,
        served_by_fallback,
    )
    from agent_runner.workflows.params import param_problems
    from agent_runner.workflows.reply import parse_tool_use_ready, reply_problems
    from agent_runner.workflows.run_input import (
        API_PARAMS,
        EXTRA_BODY_PARAMS,
        RunSpec,
        message_problems,
        parse_run_input,
    )

STREAM_OFFSET_QUERY = "__temporal_workflow_stream_offset"

_ResultT = TypeVar("_ResultT", ToolResult, ReconcileOutput)

TOOL_AVAILABILITY_PATCH = "tool-availability-follows-the-conversation"
"""``workflow.patched`` id of the check that a tool the conversation withdrew is not run (issue 13)."""

THREAD_FALLBACKS_PATCH = "thread-fallbacks-as-the-sdk"
"""``workflow.patched`` id of the SDK's thread fallbacks (issue 13): resend without a thread after
``thread_unsupported_request`` or a thread lost again right after a replay, and a new thread after a reply a fallback
model served. Asked where one of them first decides, so runs recorded before keep the rules they ran with
(``Conversation.thread_fallbacks``)."""

_STOP_REASON_STEPS = {
    "tool_use": "run_tools",
    "pause_turn": "resume",
    "compaction": "resume",
}
"""Stop reasons that continue the loop; every other one, absent and unknown ones included, stops it."""


def _retry_policy(options: ActivityOptions) -> RetryPolicy:
    return RetryPolicy(
        initial_interval=options.initial_interval,
        maximum_interval=options.maximum_interval,
        maximum_attempts=options.maximum_attempts,
    )


_ValidatorT = TypeVar("_ValidatorT", bound=Callable[..., None])


def _refusing(validator: _ValidatorT) -> _ValidatorT:
    """A validator whose refusals reach every client as final: ``EditRejected``, not retryable.

    A plain ``ValueError`` reaches the stock ``temporal`` CLI as ``ValueError, retryable: true``, which invites
    resending what can never be accepted.
    """

    @functools.wraps(validator)
    def checked(*args: Any) -> None:
        try:
            validator(*args)
        except ValueError as e:
            raise _refused(str(e)) from None

    return cast(_ValidatorT, checked)


def _refused(reason: str) -> ApplicationError:
    return _fail(EditRejected(reason))


@workflow.defn(name=WORKFLOW_TYPE)
class AgentRun:
    """One agent run: Claude and its tools in a loop until a stop reason, ``max_iterations`` or a stop ends it."""

    @workflow.init
    def __init__(self, raw_input: Any = None) -> None:
        # `Any`, with a default: the stock CLI can start a run with no input or a non-object one, and the data
        # converter must hand it over as it is, so that the run fails with InvalidRunInput instead of the workflow
        # task failing (and being retried) for ever.
        continued = raw_input.get("continued") if isinstance(raw_input, dict) else None
        self._carried = Carried.model_validate(continued) if continued is not None else None
        """The state a previous run of this chain handed over (``continued``), applied when the run starts."""
        self._stream = WorkflowStream(prior_state=self._carried.stream if self._carried else None)
        """The run's live events (``EVENTS_TOPIC``), offset-addressed for late subscribers."""
        self._status: RunStatusName = "running"
        self._spec: RunSpec | None = None
        self._conversation: Conversation | None = None
        self._replies: list[dict[str, Any]] = []
        """This run's replies (and the last few of the runs before it, after ``_reply_offset`` others)."""
        self._reply_offset = 0
        self._replies_head: str | None = None
        """Every reply of the run chain, in the store."""
        self._fork_offset = 0
        self._started_at: datetime = workflow.info().start_time
        """When the first run of the chain started: the wall-clock budget counts from there."""
        self._continuations = 0
        self._updates = 0
        """Updates this execution took (Temporal allows 2,000 per execution)."""
        self._signals = 0
        self._continuing = False
        self._draining = False
        """Set while the run waits for its handlers before continuing as new."""
        self._input_trimmed = False
        """Whether this continuation's input left the run's big parameters to the carried conversation."""
        self._edits_applied = 0
        """Edits applied so far over the run chain: an edit's ``expected_version`` is judged against the ones that
        applied after it was accepted, not the run's own tool results."""
        self._turn_input_tokens = 0
        """The last turn's input tokens (cache reads and writes included), which ``auto_compact`` watches."""
        self._usage = Usage()
        self._tools: dict[str, ToolSpec] = {}
        """The tools a ``tool_use`` can run, by name."""
        self._version = 0
        self._queue: list[QueuedEdit] = []
        """Accepted edits waiting for the boundary, in the order accepted."""
        self._next_seq = 0
        self._outcomes: dict[int, EditOutcome] = {}
        self._ended = False
        self._stop: str | None = None
        self._pending: dict[str, PendingApproval] = {}
        self._decisions: dict[str, ApproveTool | DenyTool] = {}
        self._waiting_for_step = False
        self._advance: Advance | None = None
        self._under_review: list[dict[str, Any]] | None = None
        """Tool results a step-mode client reviews before Claude sees them."""
        self._input: dict[str, Any] = (
            {k: v for k, v in raw_input.items() if k != "continued"} if isinstance(raw_input, dict) else {}
        )
        """The run's input as the client sent it (without the state a continuation carries)."""
        self._search_attributes = False
        self._published: dict[str, Any] = {}
        self._fork_points: list[str | None] = []
        """For each reply, the head of the history Claude saw when it wrote it; ``None`` for a compaction."""
        self._registered: set[str] | None = None
        """The tools the workers registered."""
        self._compactions = 0
        """Compaction replies among ``_replies``: like the SDK, ``max_iterations`` does not count them."""
        self._eager: dict[str, tuple[dict[str, Any], asyncio.Task[dict[str, Any]]]] = {}
        """With ``eager_tools``: the blocks and tasks of tools started before the reply ended, by ``tool_use_id``."""
        self._eager_attempt = 0
        """The model-call attempt whose ``tool_use`` blocks ``_eager`` holds."""
        self._eager_token = ""
        """The token of the model call under way with ``eager_tools``: only its signals start tools."""
        self._in_flight: int | None = None
        """The iteration whose model call is under way."""
        self._reply_attempt = 0
        """The attempt that wrote the last reply."""
        self._stored = False
        """Whether the last model call stored its turn (every call since the transcript store does)."""
        self._settings_stored: str | None = None
        """The ref of the request settings (parameters and tools) last stored, so unchanged ones are not resent."""
        if self._carried is not None:
            # Restored here rather than in `run`, so edits that reach the continuation first find the run's state.
            self._restore(self._carried)

    @workflow.run
    async def run(self, raw_input: Any = None) -> dict[str, Any]:
        """Run the loop.

        Args:
            raw_input: The run's JSON input: Messages API parameters plus runner options (see ``run_input.py``).

        Returns:
            A ``RunResult`` as JSON.
        """
        try:
            spec = parse_run_input(raw_input if not isinstance(raw_input, dict) else self._input)
        except InvalidRunInput as e:
            raise _fail(e) from None
        self._spec = spec
        if self._carried is not None:
            spec = self._route_model_calls(spec, self._carried.model_task_queue)
        else:
            _count("agent_runner_runs_started", "Runs started")
            spec = await self._begin(spec)
        conversation = self._conversation
        assert conversation is not None
        failure: str | None = None
        try:
            result = await self._loop(spec, conversation)
        except asyncio.CancelledError:
            self._status = "cancelled"
            raise
        except FailureError as e:
            self._status = "cancelled" if isinstance(e.cause or e, CancelledError) else "failed"
            failure = e.message
            raise
        finally:
            if not self._continuing:  # a continuation takes the queued edits over
                self._ended = True
                self._fail_queued_edits()
                self._event(events.RUN_FINISHED, status=self._status, detail=failure or self._stop)
                _count(
                    "agent_runner_runs_finished",
                    "Runs ended, by status (running = started - finished)",
                    status=self._status,
                )
                self._stream.detach_pollers()  # subscribers' long polls must not keep the run open
        self._publish_search_attributes()
        await workflow.wait_condition(workflow.all_handlers_finished)
        return result.model_dump(mode="json")

    async def _begin(self, spec: RunSpec) -> RunSpec:
        """Look up the run's tools and set up its conversation."""
        names = [t for t in spec.tools if isinstance(t, str)]
        described = await self._describe_tools(names, spec.result_hooks)
        if described.missing or described.missing_hooks:
            raise _fail(self._not_registered(described.missing + described.missing_hooks))
        self._tools = {tool.name: tool for tool in described.tools}
        self._registered = set(described.registered) if described.registered is not None else None
        self._search_attributes = described.search_attributes
        spec = self._route_model_calls(spec, described.model_task_queue)
        definitions = [self._tools[t].definition if isinstance(t, str) else t for t in spec.tools]
        self._conversation = Conversation.start(spec.params, definitions, spec.messages, threading=spec.thread)
        return spec

    def _restore(self, carried: Carried) -> None:
        """Take over the state the previous run of this chain handed over."""
        self._conversation = carried.conversation
        self._settings_stored = carried.settings_stored
        self._stored = carried.stored
        self._replies = carried.replies
        self._reply_offset = carried.reply_offset
        self._replies_head = carried.replies_head
        self._compactions = carried.compactions
        self._usage = carried.usage
        self._tools = dict(carried.tools)
        self._registered = set(carried.registered) if carried.registered is not None else None
        self._search_attributes = carried.search_attributes
        self._published = dict(carried.published)
        self._version = carried.version
        self._queue = list(carried.queue)
        self._next_seq = carried.next_seq
        self._outcomes = dict(carried.outcomes)
        self._stop = carried.stop
        self._fork_points = list(carried.fork_points)
        self._fork_offset = carried.fork_offset
        self._started_at = carried.started_at
        self._continuations = carried.continuations
        self._turn_input_tokens = carried.turn_input_tokens
        self._edits_applied = carried.edits_applied
        self._input_trimmed = carried.input_trimmed

    def _route_model_calls(self, spec: RunSpec, task_queue: str | None) -> RunSpec:
        """The fleet routes model calls to their own queue (with its rate limit): follow it, unless the run chose."""
        if spec.model_activity.task_queue is None and task_queue is not None:
            options = spec.model_activity.model_copy(update={"task_queue": task_queue})
            spec = spec.model_copy(update={"model_activity": options})
            self._spec = spec
        return spec

    def _should_continue_as_new(self, limits: HistoryLimits) -> bool:
        info = workflow.info()
        return (
            info.is_continue_as_new_suggested()
            or info.get_current_history_length() >= limits.events
            or info.get_current_history_size() >= limits.history_bytes
            or self._updates >= limits.updates
            or self._signals >= limits.signals
        )

    async def _continue_as_new(self, spec: RunSpec) -> NoReturn:
        """Start a fresh history for the same run, carrying everything: the iteration boundary has nothing in flight.

        Live-event subscribers are released first and follow the run to its continuation, which keeps the last
        ``CARRIED_EVENTS`` events for a subscriber a poll behind; older events are dropped from the log (the
        transcript keeps what they said).
        """
        conversation = self._conversation
        assert conversation is not None
        self._stream.detach_pollers()
        self._draining = True  # an `advance` waiting for a pause gives up: none comes in this execution
        await workflow.wait_condition(workflow.all_handlers_finished)
        # The stream's own offset query is the public way to read its length from workflow code.
        offset_query = workflow.get_query_handler(STREAM_OFFSET_QUERY)
        assert offset_query is not None
        offset = offset_query()
        self._stream.truncate(max(0, offset - CARRIED_EVENTS))
        workflow.logger.info(
            "Continuing as new after %d iterations: history has %d events, %d bytes",
            self._iterations,
            workflow.info().get_current_history_length(),
            workflow.info().get_current_history_size(),
        )
        kept_outcomes = sorted(self._outcomes)[-CARRIED_OUTCOMES:]
        dropped_forks = max(0, len(self._fork_points) - CARRIED_FORK_POINTS)
        dropped_replies = _replies_to_drop(self._replies)
        carried = Carried(
            conversation=conversation.model_copy(update={"transcript": conversation.transcript.carry()}),
            settings_stored=self._settings_stored,
            stored=self._stored,
            replies=self._replies[dropped_replies:],
            reply_offset=self._reply_offset + dropped_replies,
            replies_head=self._replies_head,
            compactions=self._compactions,
            usage=self._usage,
            tools=self._tools,
            registered=sorted(self._registered) if self._registered is not None else None,
            search_attributes=self._search_attributes,
            published=self._published,
            model_task_queue=spec.model_activity.task_queue,
            version=self._version,
            queue=self._queue,
            next_seq=self._next_seq,
            outcomes={seq: self._outcomes[seq] for seq in kept_outcomes},
            stop=self._stop,
            fork_points=self._fork_points[dropped_forks:],
            fork_offset=self._fork_offset + dropped_forks,
            started_at=self._started_at,
            continuations=self._continuations + 1,
            turn_input_tokens=self._turn_input_tokens,
            edits_applied=self._edits_applied,
            input_trimmed=self._input_trimmed,
            stream=self._stream.get_state(),
        )
        if len(canonical(carried.model_dump(mode="json"))) > CARRIED_BYTES:
            # Big events (a long reply, whole tool results) must not push the input past Temporal's payload limit.
            self._stream.truncate(offset)
            carried = carried.model_copy(update={"stream": self._stream.get_state()})
        self._continuing = True
        run_input = dict(self._input)
        if len(canonical(run_input.get("messages"))) > CARRIED_INPUT_MESSAGES_BYTES:
            # The conversation travels by reference; the first messages only have to stay a valid input.
            run_input["messages"] = [{"role": "user", "content": "(the conversation continues from `continued`)"}]
        if len(canonical(run_input)) > CARRIED_INPUT_MESSAGES_BYTES:
            # A big parameter (a long `system`) is in the carried conversation already: never carry it twice, or a
            # prompt that fit at start would push the continuation past Temporal's payload limit.
            run_input = {k: v for k, v in run_input.items() if k not in API_PARAMS | EXTRA_BODY_PARAMS}
            run_input.update(model=conversation.params["model"], max_tokens=conversation.params["max_tokens"])
            carried = carried.model_copy(update={"input_trimmed": True})
        workflow.continue_as_new({**run_input, "continued": carried.model_dump(mode="json")})

    async def _loop(self, spec: RunSpec, conversation: Conversation) -> RunResult:
        stop_reason: str | None = None
        while True:
            await self._boundary()
            if self._stop is not None:
                self._status = "stopped"
                break
            if spec.max_iterations is not None and self._iterations >= spec.max_iterations:
                self._status = "max_iterations"
                self._event(events.LIMIT_REACHED, limit="max_iterations", detail=f"{spec.max_iterations} replies")
                break
            spent = spec.budget.spent(self._usage, self._started_at, workflow.now())
            if spent is not None:
                self._stop = f"The {spent} is spent."
                if spec.budget.summarize:
                    await self._summary_turn(spec, conversation)
                self._status = "budget_exhausted"
                self._event(events.LIMIT_REACHED, limit="budget_exhausted", detail=self._stop)
                break
            if spec.auto_compact is not None and self._turn_input_tokens >= spec.auto_compact.input_tokens:
                workflow.logger.info(
                    "Compacting: the last turn's input was %d tokens (threshold %d)",
                    self._turn_input_tokens,
                    spec.auto_compact.input_tokens,
                )
                await self._compact(conversation, spec.auto_compact.compaction, spec.auto_compact.keep_recent_turns)
            if self._should_continue_as_new(spec.continue_as_new):
                await self._continue_as_new(spec)
            reply = await self._create_message(spec, conversation)
            eager = self._take_eager(reply)
            _record_reply_metrics(reply)
            self._take_reply(conversation, reply)
            self._publish_search_attributes()
            self._version += 1
            stop_reason = reply.get("stop_reason")
            step = _STOP_REASON_STEPS.get(stop_reason or "", "stop")
            tool_uses = [b for b in reply.get("content") or [] if b.get("type") == "tool_use"]
            advance = await self._wait_for_step("waiting_for_step") if spec.step is not None else None
            if self._stop is not None:
                self._status = "stopped"  # the SDK's close(): this reply's tools do not run
                break
            if self._retry_queued:
                continue  # the boundary discards this reply, so its tools must not run
            if step == "resume":
                continue
            if step == "stop" or not tool_uses:
                if self._message_queued:
                    continue  # a message arrived during the final turn: the conversation goes on
                self._status = "completed"
                break
            if advance is not None and advance.tool_results is not None:
                results = advance.tool_results  # the client built them; no tool runs
            else:
                results = list(
                    await asyncio.gather(*(eager.get(str(b.get("id"))) or self._run_tool(b) for b in tool_uses))
                )
                if spec.result_hooks:
                    results = await self._process_results(spec, results, tool_uses)
                if spec.step is not None and spec.step.review_results and self._stop is None:
                    results = await self._review(results)
            conversation.append_user_content(results)
            self._version += 1
        return RunResult(
            status=self._status,
            iterations=self._iterations,
            stop_reason=self._replies[-1].get("stop_reason") if self._replies else None,
            final_message=self._replies[-1] if self._replies else None,
            usage=self._usage,
            detail=self._stop,
        )

    async def _summary_turn(self, spec: RunSpec, conversation: Conversation) -> None:
        """One last request without tools, so Claude sums up instead of being cut off."""
        conversation.join_user_content(
            [
                {
                    "type": "text",
                    "text": f"{self._stop} Do not call tools any more: answer now with what you have.",
                }
            ]
        )
        conversation.params["tool_choice"] = {"type": "none"}
        reply = await self._create_message(spec, conversation)
        self._take_reply(conversation, reply)
        self._version += 2

    async def _compact(
        self, conversation: Conversation, compaction: dict[str, Any], keep_recent_turns: int = 0, *, edit: bool = False
    ) -> None:
        """Replace the history by Claude's summary of it (a compaction request on a new thread).

        Args:
            conversation: The run's conversation.
            compaction: The request's ``compaction`` field.
            keep_recent_turns: Summarize only the history before the last this many turns, which follow the summary.
            edit: Whether a client asked for it: with nothing old enough to summarize, the edit fails saying so;
                ``auto_compact`` just waits for the history to grow.
        """
        assert self._spec is not None
        keep_from = None
        if keep_recent_turns:
            keep_from = conversation.recent_turns_start(keep_recent_turns + 1)
            if keep_from is None:
                reason = f"the history has no turn older than the last {keep_recent_turns} to summarize"
                if edit:
                    raise EditFailed(f"Compaction skipped: {reason}.")
                workflow.logger.info("Not compacting yet: %s", reason)
                return
            keep_from = conversation.recent_turns_start(keep_recent_turns)
        reply = await self._create_message(self._spec, conversation, compaction, keep_from)
        self._replies.append(reply)
        self._fork_points.append(None)
        self._compactions += 1
        self._usage = self._usage.add(reply.get("usage"))
        self._turn_input_tokens = 0
        conversation.record_compaction(reply, keep_from)

    def _take_reply(self, conversation: Conversation, reply: dict[str, Any]) -> None:
        """Add a reply to the run: its replies, usage, fork points and history (stored when the call says so)."""
        transcript = conversation.transcript
        # A fork starts from the history Claude answered, named by its head (unknown for runs older than the store).
        self._fork_points.append(transcript.head if self._stored else None)
        self._replies.append(reply)
        self._usage = self._usage.add(reply.get("usage"))
        self._turn_input_tokens = Usage().add(reply.get("usage")).all_input_tokens
        conversation.record_reply(reply)
        if self._stored:
            transcript.store_pending()

    # --- The iteration boundary -------------------------------------------------------------------------------
    #
    # An edit's update only checks it and queues it, then returns its sequence number: Temporal allows 10 updates in
    # flight per run, so an update must not stay open until the boundary. The queue is workflow state, so an
    # accepted edit survives crashes; the boundary applies it and records its outcome, which the client reads with
    # the `edit_outcome` query.

    async def _boundary(self) -> None:
        """Apply every queued edit, in the order accepted, before the next model call."""
        while self._queue:
            edit = self._queue.pop(0)
            try:
                await self._apply(edit)
                self._edits_applied += 1
                self._version += 1
                self._outcomes[edit.seq] = EditOutcome(seq=edit.seq, version=self._version)
            except EditFailed as e:
                self._outcomes[edit.seq] = EditOutcome(seq=edit.seq, error=str(e))

    async def _apply(self, edit: QueuedEdit) -> None:
        conversation = self._conversation
        assert conversation is not None
        expected = edit.payload.get("expected_version")
        # The version was checked when the edit was accepted. Since then the run's own tool results (for the reply
        # the client saw) may have moved it; only another edit applied in between makes this one stale.
        stale = expected != self._version if edit.edits_applied is None else edit.edits_applied != self._edits_applied
        if expected is not None and stale:
            raise EditFailed(
                f"The transcript changed since version {expected} (it is now at {self._version}); nothing was "
                "changed. Read the transcript again and resend the edit with its version."
            )
        if edit.kind == INJECT_MESSAGE_UPDATE:
            content = InjectMessage.model_validate(edit.payload).content
            conversation.join_user_content([{"type": "text", "text": content}] if isinstance(content, str) else content)
        elif edit.kind == RETRY_TURN_UPDATE:
            try:
                dropped = conversation.drop_last_reply()
            except ValueError as e:
                raise EditFailed(f"Cannot retry: {e}. Replace the history instead.") from None
            if not dropped:
                raise EditFailed("There is no reply to retry.")
        elif edit.kind == REPLACE_HISTORY_UPDATE:
            conversation.replace_messages(ReplaceHistory.model_validate(edit.payload).messages)
        elif edit.kind == UPDATE_PARAMS_UPDATE:
            for key, value in UpdateParams.model_validate(edit.payload).params.items():
                if value is None:
                    conversation.params.pop(key, None)
                else:
                    conversation.params[key] = value
        elif edit.kind == ADD_TOOLS_UPDATE:
            tools = AddTools.model_validate(edit.payload).tools
            described = await self._describe_tools([t for t in tools if isinstance(t, str)])
            if described.missing:
                raise EditFailed(str(self._not_registered(described.missing)))
            specs = {tool.name: tool for tool in described.tools}
            self._tools.update(specs)
            definitions = [specs[t].definition if isinstance(t, str) else t for t in tools]
            conversation.append_system_content(
                [{"type": "tool_addition", "tool": {"type": "tool_definition", "definition": d}} for d in definitions]
            )
        elif edit.kind == COMPACT_UPDATE:
            transcript = conversation.transcript
            if transcript.role(len(transcript) - 1) == "assistant":
                last = transcript.pending[-1] if transcript.pending else (self._replies or [{}])[-1]
                if any(isinstance(b, dict) and b.get("type") == "tool_use" for b in last.get("content") or []):
                    raise EditFailed("Compaction skipped: the last reply's tool calls have no results yet.")
            compact = Compact.model_validate(edit.payload)
            await self._compact(conversation, compact.compaction, compact.keep_recent_turns, edit=True)
        elif edit.kind == REMOVE_TOOLS_UPDATE:
            names = RemoveTools.model_validate(edit.payload).names
            for name in names:
                self._tools.pop(name, None)
            conversation.append_system_content(
                [{"type": "tool_removal", "tool": {"type": "tool_reference", "name": n}} for n in names]
            )

    def _enqueue(self, kind: str, payload: dict[str, Any]) -> dict[str, Any]:
        self._updates += 1
        self._next_seq += 1
        self._queue.append(
            QueuedEdit(seq=self._next_seq, kind=kind, payload=payload, edits_applied=self._edits_applied)
        )
        return {"seq": self._next_seq, "version": self._version}

    def _fail_queued_edits(self) -> None:
        """Edits still queued when the run ends are answered, never silently dropped."""
        for edit in self._queue:
            self._outcomes[edit.seq] = EditOutcome(
                seq=edit.seq,
                error=f"The run ended ({self._status}) before this edit could apply; nothing was changed. Start a "
                "new run from its transcript to go on.",
            )
        self._queue.clear()

    @property
    def _retry_queued(self) -> bool:
        return any(e.kind == RETRY_TURN_UPDATE for e in self._queue)

    @property
    def _message_queued(self) -> bool:
        """Whether a queued edit adds to the conversation, which keeps a finished turn going."""
        return any(e.kind in (INJECT_MESSAGE_UPDATE, RETRY_TURN_UPDATE, REPLACE_HISTORY_UPDATE) for e in self._queue)

    def _check_open(self) -> None:
        # An edit sent before the run set up its conversation is queued like any other: it applies at the first
        # boundary, before the first request.
        if self._ended:
            raise ValueError(
                f"The run has ended ({self._status}); it takes no edits. Start a new run from its transcript to go on."
            )

    def _check_version(self, expected_version: int | None) -> None:
        if expected_version is not None and expected_version != self._version:
            raise ValueError(
                f"The transcript changed since version {expected_version} (it is now at {self._version}). Read "
                "the transcript again and resend the edit with its version."
            )

    # --- Edits ---------------------------------------------------------------------------------------------------

    @workflow.update(name=INJECT_MESSAGE_UPDATE)
    def inject_message(self, raw: dict[str, Any]) -> dict[str, Any]:
        """Queue user content; it joins the next user message, beside any tool results."""
        return self._enqueue(INJECT_MESSAGE_UPDATE, parse_update(InjectMessage, raw).model_dump())

    @inject_message.validator
    @_refusing
    def _validate_inject_message(self, raw: dict[str, Any]) -> None:
        edit = parse_update(InjectMessage, raw)
        self._check_open()
        self._check_version(edit.expected_version)
        if isinstance(edit.content, list):
            for i, block in enumerate(edit.content):
                if is_placeholder(block):
                    continue  # content the client stored
                if not isinstance(block.get("type"), str):
                    raise ValueError(f"content[{i}] must be a content block with a string `type`.")
                if block["type"] in ("tool_result", "tool_use"):
                    raise ValueError(
                        f"content[{i}] is a `{block['type']}` block: tool results come from the run's tools (or "
                        "from `advance` in step mode), never from an injected message."
                    )

    @workflow.update(name=RETRY_TURN_UPDATE)
    def retry_turn(self, raw: dict[str, Any]) -> dict[str, Any]:
        """Queue a retry: Claude's last reply (and what followed it) is discarded and the turn sent again."""
        return self._enqueue(RETRY_TURN_UPDATE, parse_update(RetryTurn, raw or {}).model_dump())

    @retry_turn.validator
    @_refusing
    def _validate_retry_turn(self, raw: dict[str, Any]) -> None:
        edit = parse_update(RetryTurn, raw or {})
        self._check_open()
        self._check_version(edit.expected_version)
        if not self._replies:
            raise ValueError("There is no reply to retry yet.")

    @workflow.update(name=REPLACE_HISTORY_UPDATE)
    def replace_history(self, raw: dict[str, Any]) -> dict[str, Any]:
        """Queue a new history; one that changes what the server holds starts a new thread."""
        return self._enqueue(REPLACE_HISTORY_UPDATE, parse_update(ReplaceHistory, raw).model_dump())

    @replace_history.validator
    @_refusing
    def _validate_replace_history(self, raw: dict[str, Any]) -> None:
        edit = parse_update(ReplaceHistory, raw)
        self._check_open()
        self._check_version(edit.expected_version)
        problems = message_problems(edit.messages)
        if problems:
            raise ValueError("The new history was rejected:\n- " + "\n- ".join(problems))

    @workflow.update(name=UPDATE_PARAMS_UPDATE)
    def update_params(self, raw: dict[str, Any]) -> dict[str, Any]:
        """Queue new request parameters for every later turn."""
        return self._enqueue(UPDATE_PARAMS_UPDATE, parse_update(UpdateParams, raw).model_dump())

    @update_params.validator
    @_refusing
    def _validate_update_params(self, raw: dict[str, Any]) -> None:
        edit = parse_update(UpdateParams, raw)
        self._check_open()
        allowed = API_PARAMS | EXTRA_BODY_PARAMS
        unknown = sorted(set(edit.params) - allowed)
        if unknown:
            raise ValueError(f"Unknown parameters {unknown}; allowed: {', '.join(sorted(allowed))}.")
        for required in ("model", "max_tokens"):
            if required in edit.params and edit.params[required] is None:
                raise ValueError(f"`{required}` cannot be removed.")
        current = self._conversation.params if self._conversation is not None else {}
        merged = {**current, **{k: v for k, v in edit.params.items() if v is not None}}
        merged = {**merged, "model": str(merged.get("model") or "m"), "max_tokens": merged.get("max_tokens", 1)}
        problems = [p for p in param_problems(merged) if any(f"`{key}" in p for key in edit.params)]
        if problems:
            raise ValueError("The new parameters were rejected:\n- " + "\n- ".join(problems))
        if (
            self._conversation is not None
            and self._conversation.threading
            and "system" in edit.params
            and edit.params["system"] != self._conversation.params.get("system")
        ):
            raise ValueError(
                "Cannot change `system` on a thread: the server keeps the one the thread was created with. To change "
                "it, start a new run with `thread: false` or from this run's transcript."
            )

    @workflow.update(name=ADD_TOOLS_UPDATE)
    def add_tools(self, raw: dict[str, Any]) -> dict[str, Any]:
        """Queue tools to make available from the next turn on, announced in a ``tool_addition`` system message."""
        return self._enqueue(ADD_TOOLS_UPDATE, parse_update(AddTools, raw).model_dump())

    @add_tools.validator
    @_refusing
    def _validate_add_tools(self, raw: dict[str, Any]) -> None:
        edit = parse_update(AddTools, raw)
        self._check_open()
        unknown = [
            t for t in edit.tools if isinstance(t, str) and self._registered is not None and t not in self._registered
        ]
        if unknown:
            raise ValueError(
                f"No worker registered {unknown}; registered: {sorted(self._registered or [])}. Register the tool with "
                "`python worker.py --tools <module>`, or add its definition as a JSON object."
            )

    @workflow.update(name=REMOVE_TOOLS_UPDATE)
    def remove_tools(self, raw: dict[str, Any]) -> dict[str, Any]:
        """Queue tools to take away from the next turn on; later calls to them are not executed."""
        return self._enqueue(REMOVE_TOOLS_UPDATE, parse_update(RemoveTools, raw).model_dump())

    @remove_tools.validator
    @_refusing
    def _validate_remove_tools(self, raw: dict[str, Any]) -> None:
        edit = parse_update(RemoveTools, raw)
        self._check_open()
        definitions = self._conversation.tools if self._conversation else self._input.get("tools") or []
        current = set(self._tools) | {str(d.get("name")) if isinstance(d, dict) else str(d) for d in definitions}
        unknown = [n for n in edit.names if n not in current]
        if unknown:
            raise ValueError(f"The run has no tools named {unknown}; it has {sorted(current)}.")

    @workflow.query(name=EDIT_OUTCOME_QUERY)
    def edit_outcome(self, seq: int) -> dict[str, Any] | None:
        """What became of the edit queued as ``seq``: its version, its error, or ``None`` while it waits."""
        outcome = self._outcomes.get(seq)
        return outcome.model_dump() if outcome is not None else None

    def _publish_search_attributes(self) -> None:
        """Keep the run's search attributes current, when the fleet registered them; only changes are written."""
        if not self._search_attributes:
            return
        waiting = {"waiting_for_approval": "approval", "waiting_for_step": "step", "waiting_for_review": "review"}
        values: dict[str, Any] = {
            "AgentRunStatus": self._status,
            "AgentRunIterations": self._iterations,
            "AgentRunTokens": self._usage.input_tokens + self._usage.output_tokens,
            "AgentRunWaiting": waiting.get(self._status, ""),
            "AgentRunModel": str(self._conversation.params.get("model", "")) if self._conversation else "",
        }
        changed = {k: v for k, v in values.items() if self._published.get(k) != v}
        if not changed:
            return
        self._published.update(changed)
        workflow.upsert_search_attributes([_SEARCH_KEYS[k].value_set(v) for k, v in changed.items()])

    @property
    def _iterations(self) -> int:
        return self._reply_count - self._compactions

    @property
    def _reply_count(self) -> int:
        """Replies over the whole run (compactions included)."""
        return self._reply_offset + len(self._replies)

    @workflow.update(name=COMPACT_UPDATE)
    def compact(self, raw: dict[str, Any]) -> dict[str, Any]:
        """Queue a compaction: the whole history is summarized before the next turn, which continues from it."""
        return self._enqueue(COMPACT_UPDATE, parse_update(Compact, raw or {}).model_dump())

    @compact.validator
    @_refusing
    def _validate_compact(self, raw: dict[str, Any]) -> None:
        parse_update(Compact, raw or {})
        self._check_open()

    @workflow.update(name=STOP_UPDATE)
    def stop(self, raw: dict[str, Any]) -> dict[str, Any]:
        """End the run at the next step: a reply that has not run its tools yet never runs them."""
        edit = parse_update(Stop, raw or {})
        self._updates += 1
        if self._stop is None:
            self._stop = edit.reason
        return {"version": self._version}

    @stop.validator
    @_refusing
    def _validate_stop(self, raw: dict[str, Any]) -> None:
        parse_update(Stop, raw or {})
        if self._ended:
            raise ValueError(f"The run has already ended ({self._status}).")

    # --- Approvals and step mode -----------------------------------------------------------------------------

    @workflow.update(name=APPROVE_TOOL_UPDATE)
    def approve_tool(self, raw: dict[str, Any]) -> dict[str, Any]:
        """Let a waiting tool call run, with Claude's input or an edited one."""
        decision = parse_update(ApproveTool, raw)
        self._updates += 1
        self._decisions[decision.tool_use_id] = decision
        return {"version": self._version}

    @approve_tool.validator
    @_refusing
    def _validate_approve_tool(self, raw: dict[str, Any]) -> None:
        self._check_pending(parse_update(ApproveTool, raw).tool_use_id)

    @workflow.update(name=DENY_TOOL_UPDATE)
    def deny_tool(self, raw: dict[str, Any]) -> dict[str, Any]:
        """Refuse a waiting tool call: it never runs, and Claude sees the reason."""
        decision = parse_update(DenyTool, raw)
        self._updates += 1
        self._decisions[decision.tool_use_id] = decision
        return {"version": self._version}

    @deny_tool.validator
    @_refusing
    def _validate_deny_tool(self, raw: dict[str, Any]) -> None:
        self._check_pending(parse_update(DenyTool, raw).tool_use_id)

    def _check_pending(self, tool_use_id: str) -> None:
        if tool_use_id not in self._pending or tool_use_id in self._decisions:
            waiting = sorted(t for t in self._pending if t not in self._decisions)
            raise ValueError(f"Tool call {tool_use_id!r} is not waiting for approval. Waiting: {waiting or 'none'}.")

    @workflow.update(name=ADVANCE_UPDATE)
    async def advance(self, raw: dict[str, Any]) -> dict[str, Any]:
        """In step mode, let the run go on past the reply it paused after."""
        edit = parse_update(Advance, raw or {})
        self._updates += 1
        if not self._waiting_for_step:
            # Accepted for an iteration whose pause had not begun yet (see the validator): wait for it, or refuse
            # once the run has gone past it.
            await workflow.wait_condition(
                lambda: (
                    self._waiting_for_step or self._ended or self._draining or self._iterations > (edit.iteration or 0)
                )
            )
            if self._draining and not self._waiting_for_step:
                raise _refused(
                    f"The run is continuing as new; it was not paused after iteration {edit.iteration}. Read its "
                    "status again and advance the pause it reports."
                )
            if not self._waiting_for_step:
                raise _refused(self._not_paused())
            if self._iterations != edit.iteration:
                raise _refused(self._stale_advance(edit))
        problem = self._tool_results_problem(edit)
        if problem is not None:
            raise _refused(problem)
        self._advance = edit
        self._waiting_for_step = False
        return {"version": self._version}

    @advance.validator
    @_refusing
    def _validate_advance(self, raw: dict[str, Any]) -> None:
        edit = parse_update(Advance, raw or {})
        if edit.tool_results is not None and any(b.get("type") != "tool_result" for b in edit.tool_results):
            raise ValueError("`tool_results` may hold only `tool_result` blocks.")
        if self._waiting_for_step:
            if edit.iteration is not None and edit.iteration != self._iterations:
                raise ValueError(self._stale_advance(edit))
            problem = self._tool_results_problem(edit)
            if problem is not None:
                raise ValueError(problem)
            return
        # Temporal can hand an update to the run in the same task as the model or tool result the run is about to
        # pause on (a worker replaying the run does), before the run has reacted to it: an advance for that very
        # iteration is accepted and waits for the pause.
        spec = self._spec
        reply_coming = self._in_flight is not None and self._in_flight - self._compactions == edit.iteration
        review_coming = (
            spec is not None
            and spec.step is not None
            and spec.step.review_results
            and self._status == "running"
            and edit.iteration == self._iterations
        )
        if edit.iteration is not None and not self._ended and (reply_coming or review_coming):
            return
        raise ValueError(self._not_paused())

    def _stale_advance(self, edit: Advance) -> str:
        return f"The run is paused after iteration {self._iterations}, not {edit.iteration}: read its status again."

    def _not_paused(self) -> str:
        return (
            f"The run is not paused for a step (it is {self._status}); `advance` applies to a run started with "
            "`step`, after each reply (and after its tool results with `review_results`)."
        )

    def _tool_results_problem(self, edit: Advance) -> str | None:
        """Why ``edit``'s client-built tool results do not answer the last reply, or ``None``."""
        if edit.tool_results is None:
            return None
        wanted = [b.get("id") for b in self._replies[-1].get("content") or [] if b.get("type") == "tool_use"]
        given = [b.get("tool_use_id") for b in edit.tool_results]
        if sorted(map(str, given)) != sorted(map(str, wanted)):
            return (
                f"`tool_results` must answer each `tool_use` of the last reply exactly once: expected {wanted}, got "
                f"{given}."
            )
        return None

    async def _review(self, results: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Pause with the tool results before Claude sees them; ``advance`` may send changed ones instead."""
        self._under_review = results
        try:
            advance = await self._wait_for_step("waiting_for_review")
        finally:
            self._under_review = None
        if advance is not None and advance.tool_results is not None:
            return advance.tool_results
        return results

    async def _wait_for_step(self, status: RunStatusName) -> Advance | None:
        spec = self._spec
        assert spec is not None and spec.step is not None
        self._advance = None
        self._waiting_for_step = True
        self._status = status
        self._publish_search_attributes()
        self._event(events.STEP_WAITING, status=status)
        try:
            await workflow.wait_condition(
                lambda: not self._waiting_for_step or self._stop is not None, timeout=spec.step.timeout
            )
        except TimeoutError:
            if spec.step.on_timeout == "stop":
                self._stop = f"No client advanced the run within {spec.step.timeout}."
        finally:
            self._waiting_for_step = False
            self._status = "running"
            self._publish_search_attributes()
        return self._advance

    def _abandoned(self) -> str | None:
        """Why a tool call of the current reply must not start now: the run is stopping or the turn is retried."""
        if self._stop is not None:
            return "The run was stopped before this call was executed."
        if self._retry_queued:
            return "The turn is being retried; this call was not executed."
        return None

    async def _approval(
        self, block: dict[str, Any], spec: ToolSpec, iteration: int, note: str | None = None
    ) -> ApproveTool | DenyTool:
        run_spec = self._spec
        assert run_spec is not None
        tool_use_id = str(block.get("id"))
        self._pending[tool_use_id] = PendingApproval(
            tool_use_id=tool_use_id,
            name=spec.name,
            input=block.get("input"),
            iteration=iteration,
            requested_at=workflow.now().isoformat(),
            note=note,
        )
        self._event(events.APPROVAL_WAITING, iteration=iteration, approval=self._pending[tool_use_id].model_dump())
        _count("agent_runner_approvals_requested", "Tool calls that waited for approval", tool=spec.name)
        self._status = "waiting_for_approval"
        self._publish_search_attributes()
        policy = run_spec.approval
        try:
            await workflow.wait_condition(
                lambda: tool_use_id in self._decisions or self._abandoned() is not None, timeout=policy.timeout
            )
            decision = self._decisions.get(tool_use_id) or DenyTool(
                tool_use_id=tool_use_id, reason=self._abandoned() or "Not executed."
            )
        except TimeoutError:
            decision = (
                ApproveTool(tool_use_id=tool_use_id)
                if policy.on_timeout == "approve"
                else DenyTool(tool_use_id=tool_use_id, reason=f"No approval within {policy.timeout}; not executed.")
            )
        finally:
            del self._pending[tool_use_id]
            self._decisions.pop(tool_use_id, None)
            if not self._pending:
                self._status = "running"
                self._publish_search_attributes()
        _count(
            "agent_runner_approvals_decided",
            "Approvals decided, by outcome (waiting = requested - decided)",
            tool=spec.name,
            outcome="approved" if isinstance(decision, ApproveTool) else "denied",
        )
        self._event(
            events.APPROVAL_DECIDED,
            iteration=iteration,
            tool_use_id=tool_use_id,
            approved=isinstance(decision, ApproveTool),
            reason=decision.reason if isinstance(decision, DenyTool) else None,
        )
        return decision

    def _needs_approval(self, spec: ToolSpec) -> bool:
        assert self._spec is not None
        tools = self._spec.approval.tools
        return spec.requires_approval or tools == "all" or spec.name in tools

    # --- Live events and eager tools --------------------------------------------------------------------------

    def _event(self, event_type: str, **fields: Any) -> None:
        """Publish a live event (``contract/events.py``) of the current turn unless it names its ``iteration``.

        Publishing from the workflow costs no history: the stream is workflow state, rebuilt on replay.
        """
        turn = self._in_flight or self._reply_count + (event_type == events.ITERATION_STARTED)
        self._stream.topic(EVENTS_TOPIC).publish({"type": event_type, "iteration": turn, **fields})

    @workflow.signal(name=TOOL_USE_READY_SIGNAL)
    def tool_use_ready(self, raw: Any) -> None:
        """With ``eager_tools``: start a tool whose ``tool_use`` block is complete while the reply still streams.

        Only a well-formed block of the model call under way counts, carrying that call's token, of a registered
        tool that needs no approval; a later attempt's blocks replace an earlier one's (whose tools already ran, as
        the SDK's eager mode also runs tools before the reply is final). Anything else is dropped with a warning:
        a signal must never be able to wedge the run or run a tool the run did not ask for.
        """
        self._signals += 1
        ready, problem = parse_tool_use_ready(raw)
        if ready is None or not self._eager_token or ready.token != self._eager_token:
            workflow.logger.warning("Ignored a tool_use_ready signal: %s", problem or "not from the call under way")
            return
        if ready.iteration != self._in_flight or ready.attempt < self._eager_attempt:
            return
        block = ready.block
        # An unknown tool only gets an error, and a person must not be asked about a call that the reply may yet not
        # run: both start with the reply instead.
        spec = self._tools.get(str(block["name"]))
        if spec is None or self._needs_approval(spec) or self._withdrawn(spec.name):
            return
        if ready.attempt > self._eager_attempt:
            self._eager, self._eager_attempt = {}, ready.attempt
        tool_use_id = str(block["id"])
        if tool_use_id not in self._eager:
            task = asyncio.create_task(self._run_tool(block, iteration=ready.iteration))
            self._eager[tool_use_id] = (block, task)

    def _take_eager(self, reply: dict[str, Any]) -> dict[str, asyncio.Task[dict[str, Any]]]:
        """The tools started early for ``reply``'s own ``tool_use`` blocks (same attempt, same block).

        The others are dropped: they ran, but their results are never sent.
        """
        started, self._eager, attempt, self._eager_attempt = self._eager, {}, self._eager_attempt, 0
        if attempt != self._reply_attempt:
            return {}
        # Only a block the reply itself holds, whole: same id, name and input (the reply may carry a big input as a
        # placeholder instead). Any other started tool ran, but its result is never sent.
        replied = {str(b.get("id")): b for b in reply.get("content") or [] if b.get("type") == "tool_use"}
        return {i: task for i, (block, task) in started.items() if i in replied and _same_call(block, replied[i])}

    # --- Activities ----------------------------------------------------------------------------------------

    async def _describe_tools(self, names: list[str], hooks: list[str] | None = None) -> DescribeToolsOutput:
        described: DescribeToolsOutput = await workflow.execute_activity(
            DESCRIBE_TOOLS_ACTIVITY,
            DescribeToolsInput(names=names, hooks=hooks or []),
            result_type=DescribeToolsOutput,
            start_to_close_timeout=timedelta(seconds=30),
            retry_policy=RetryPolicy(maximum_interval=timedelta(seconds=10), maximum_attempts=10),
        )
        return described

    @staticmethod
    def _not_registered(missing: list[str]) -> ToolNotRegistered:
        return ToolNotRegistered(
            f"No worker on task queue {workflow.info().task_queue!r} registered "
            f"{', '.join(repr(n) for n in missing)}. Start a worker with "
            "`python worker.py --tools <module that defines it>`, or pass the tool's definition as a "
            "JSON object to send it without running it."
        )

    async def _create_message(
        self,
        spec: RunSpec,
        conversation: Conversation,
        compaction: dict[str, Any] | None = None,
        keep_from: int | None = None,
    ) -> dict[str, Any]:
        """One model call. The reply is returned, not recorded; ``_stored`` says whether the call stored the turn.

        A compaction that keeps recent turns sends only the messages before ``keep_from``.
        """
        options = spec.model_activity
        iteration = self._reply_count + 1
        eager = spec.eager_tools and spec.step is None and compaction is None
        self._event(events.ITERATION_STARTED)
        while True:
            turn = conversation.turn(compaction, keep_from)
            if turn.settings_ref == self._settings_stored:
                turn = turn.model_copy(update={"settings": None})
            try:
                self._in_flight = iteration
                self._eager_token = str(workflow.uuid4()) if eager else ""
                output: CreateMessageOutput = await workflow.execute_activity(
                    CREATE_MESSAGE_ACTIVITY,
                    CreateMessageInput(
                        turn=turn,
                        replies_head=self._replies_head,
                        run_id=workflow.info().workflow_id,
                        iteration=iteration,
                        eager_tools=eager,
                        eager_token=self._eager_token,
                    ),
                    result_type=CreateMessageOutput,
                    start_to_close_timeout=options.start_to_close_timeout,
                    heartbeat_timeout=options.heartbeat_timeout,
                    retry_policy=_retry_policy(options),
                    task_queue=options.task_queue,
                    summary=f"turn {self._reply_count + 1} · {conversation.params['model']}",
                )
                problems = reply_problems(output.message)
                if problems:
                    raise _fail(MalformedReply(f"Claude's reply cannot be used: {'; '.join(problems)}."))
                self._stored = output.stored
                if output.stored:
                    self._settings_stored = turn.settings_ref
                    self._replies_head = next_head(self._replies_head, message_ref(output.message))
                    if keep_from is None:
                        # The call stored the turn's pending messages, which are the history's only when it sent
                        # the whole history.
                        conversation.transcript.store_pending()
                self._reply_attempt = output.attempt
                self._event(events.REPLY, message=output.message)
                if conversation.threading and served_by_fallback(output.message):
                    self._take_thread_fallbacks(conversation)
                return output.message
            except ActivityError as e:
                cause = e.cause
                if isinstance(cause, ApplicationError) and cause.type in (THREAD_LOST_ERROR, THREAD_UNSUPPORTED_ERROR):
                    code = cause.message if cause.type == THREAD_LOST_ERROR else THREAD_UNSUPPORTED_CODE
                    previous = turn.previous_message_id
                    if conversation.takes_thread_fallback(code, continuing=previous is not None):
                        self._take_thread_fallbacks(conversation)
                    if conversation.recover(code, continuing=previous is not None):
                        if conversation.threading:
                            workflow.logger.info(
                                "Replaying the full message history under a new thread: reason=%s "
                                "previous_message_id=%s",
                                code,
                                previous,
                            )
                        else:
                            workflow.logger.info(
                                "Continuing without a thread for the rest of the run: reason=%s previous_message_id=%s",
                                code,
                                previous,
                            )
                        continue
                    if cause.type == THREAD_UNSUPPORTED_ERROR:
                        # Not recoverable here (the run does not thread, or it predates the fallback): a rejection.
                        raise ApplicationError(
                            cause.message, *cause.details, type="ModelRequestRejected", non_retryable=True
                        ) from None
                if isinstance(cause, CancelledError):
                    raise  # the run was cancelled: let it end as cancelled, not failed
                raise _activity_failure(e) from None
            finally:
                self._in_flight = None
                self._eager_token = ""

    @staticmethod
    def _take_thread_fallbacks(conversation: Conversation) -> None:
        """Follow the SDK's thread fallbacks from now on, unless this run was recorded without them.

        Asked only where one of them decides differently, so the marker is recorded there and nowhere else.
        """
        if not conversation.thread_fallbacks and workflow.patched(THREAD_FALLBACKS_PATCH):
            conversation.thread_fallbacks = True

    async def _run_tool(self, block: dict[str, Any], iteration: int | None = None) -> dict[str, Any]:
        name = str(block.get("name"))
        tool_use_id = str(block.get("id"))
        tool_input = block.get("input")
        spec = self._tools.get(name) if not self._withdrawn(name) else None
        iteration = iteration if iteration is not None else self._reply_count
        self._event(events.TOOL_STARTED, iteration=iteration, tool_use_id=tool_use_id, name=name, input=tool_input)
        result: ToolResult
        if spec is None:
            # Raw definitions (server tools among them) are sent, never executed, exactly as in the SDK.
            workflow.logger.warning(
                "Tool %r not found: it is not registered, or the conversation withdrew it (registered: %s). A raw "
                "tool definition is sent to Claude but never executed.",
                name,
                sorted(self._tools),
            )
            result = ToolResult(content=f"Error: Tool '{name}' not found", is_error=True)
        else:
            decision = await self._approval(block, spec, iteration) if self._needs_approval(spec) else None
            abandoned = self._abandoned()
            if isinstance(decision, DenyTool):
                result = ToolResult(content=decision.reason, is_error=True)
            elif abandoned is not None:
                # The reply this call belongs to was stopped or is being retried while the call waited: it never
                # runs (its result is discarded with the reply, or ends the run's transcript).
                result = ToolResult(content=abandoned, is_error=True)
            else:
                if decision is not None and decision.input is not None:
                    tool_input = decision.input
                result = await self._execute_tool(spec, block, tool_input, iteration)
        tool_result: dict[str, Any] = {"type": "tool_result", "tool_use_id": tool_use_id, "content": result.content}
        if result.is_error:
            tool_result["is_error"] = True
        self._event(events.TOOL_FINISHED, iteration=iteration, tool_use_id=tool_use_id, name=name, result=tool_result)
        return tool_result

    def _withdrawn(self, name: str) -> bool:
        """Whether the conversation withdrew tool ``name``, so that a call to it is not run.

        The SDK dispatches only on the names its history leaves available (``Conversation.withdrawn_tools``). Queued
        ``remove_tools`` and ``add_tools`` count already, as the SDK's do for the reply being handled.
        """
        if self._conversation is None or name not in self._tools:
            return False
        queued: list[tuple[str, bool]] = []
        for edit in self._queue:
            if edit.kind == REMOVE_TOOLS_UPDATE:
                queued.extend((n, False) for n in edit.payload["names"])
            elif edit.kind == ADD_TOOLS_UPDATE:
                queued.extend((t, True) for t in edit.payload["tools"] if isinstance(t, str))
        # Runs recorded before this check ran withdrawn tools; they replay as they ran.
        return name in self._conversation.withdrawn_tools(queued) and workflow.patched(TOOL_AVAILABILITY_PATCH)

    async def _process_results(
        self, spec: RunSpec, results: list[dict[str, Any]], tool_uses: list[dict[str, Any]]
    ) -> list[dict[str, Any]]:
        """Run the run's result hooks over the reply's tool results; a hook may end the run after them."""
        try:
            output: ProcessResultsOutput = await workflow.execute_activity(
                PROCESS_RESULTS_ACTIVITY,
                ProcessResultsInput(
                    hooks=spec.result_hooks,
                    results=results,
                    tool_uses=tool_uses,
                    run_id=workflow.info().workflow_id,
                    iteration=self._reply_count,
                ),
                result_type=ProcessResultsOutput,
                start_to_close_timeout=timedelta(minutes=1),
                retry_policy=RetryPolicy(maximum_interval=timedelta(seconds=10), maximum_attempts=10),
                summary=f"turn {self._reply_count} · result hooks",
            )
        except ActivityError as e:
            if isinstance(e.cause, CancelledError):
                raise
            raise _activity_failure(e) from None
        if output.stop is not None and self._stop is None:
            self._stop = output.stop
        return output.results

    async def _execute_tool(self, spec: ToolSpec, block: dict[str, Any], tool_input: Any, iteration: int) -> ToolResult:
        """Run the call under the tool's effect policy.

        An ``idempotent`` tool is retried by Temporal under its options. An ``at_most_once`` tool gets one attempt:
        an attempt that failed before the tool started is tried again, but one that may have started it (its
        worker died, it timed out) leaves the outcome unknown, and ``on_unknown`` decides what it becomes.
        """
        call = RunToolInput(
            name=spec.name,
            tool_use_id=str(block.get("id")),
            input=tool_input,
            run_id=workflow.info().workflow_id,
            iteration=iteration,
            idempotency_key=_idempotency_key(str(block.get("id"))),
        )
        if spec.effects != "at_most_once":
            try:
                return await self._tool_activity(RUN_TOOL_ACTIVITY, spec, call, _retry_policy(spec.options), ToolResult)
            except ActivityError as e:
                if isinstance(e.cause, CancelledError):
                    raise
                raise _tool_failure(spec, e) from None
        not_started = reruns = 0
        while True:
            try:
                return await self._tool_activity(
                    RUN_TOOL_ACTIVITY, spec, call, RetryPolicy(maximum_attempts=1), ToolResult
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
                    await workflow.sleep(_backoff(spec.options, not_started))
                    continue
                cause = str(e.cause.message if isinstance(e.cause, FailureError) else e)
                workflow.logger.warning(
                    "Outcome of at-most-once tool %s (tool_use_id=%s) unknown: %s", spec.name, call.tool_use_id, cause
                )
                self._event(
                    events.TOOL_OUTCOME_UNKNOWN,
                    iteration=iteration,
                    tool_use_id=call.tool_use_id,
                    name=spec.name,
                    detail=cause,
                    on_unknown=spec.on_unknown,
                )
                settled = await self._settle_unknown(spec, block, call, iteration, cause)
                if settled is not None:
                    return settled
                abandoned = self._abandoned()
                if abandoned is not None:
                    return ToolResult(content=abandoned, is_error=True)  # it did not happen, and must not now
                reruns += 1  # it did not happen: run it again, a bounded number of times
                if reruns >= MAX_UNKNOWN_ROUNDS:
                    return ToolResult(
                        content=_unknown_text(spec.name, f"{cause}; it was run {reruns + 1} times without an outcome"),
                        is_error=True,
                    )

    async def _settle_unknown(
        self, spec: ToolSpec, block: dict[str, Any], call: RunToolInput, iteration: int, cause: str
    ) -> ToolResult | None:
        """What an at-most-once call whose outcome is unknown becomes; ``None`` if it did not happen (run it again)."""
        tell = ToolResult(content=_unknown_text(spec.name, cause), is_error=True)
        if spec.on_unknown == "reconcile":
            try:
                answer = await self._tool_activity(
                    RECONCILE_TOOL_ACTIVITY,
                    spec,
                    call,
                    RetryPolicy(maximum_attempts=5, maximum_interval=timedelta(seconds=10)),
                    ReconcileOutput,
                )
            except ActivityError as e:
                if isinstance(e.cause, CancelledError):
                    raise
                message = e.cause.message if isinstance(e.cause, FailureError) else str(e)
                return ToolResult(
                    content=_unknown_text(spec.name, f"{cause}; reconciling failed: {message}"), is_error=True
                )
            if answer.happened:
                return answer.result or ToolResult(content=None)
            return None
        if spec.on_unknown == "ask":
            decision = await self._approval(
                {**block, "input": call.input},
                spec,
                iteration,
                note=f"The outcome of this call is unknown ({cause}). Approve to run it again; deny to tell Claude "
                "that its outcome is unknown.",
            )
            if isinstance(decision, DenyTool):
                default = decision.reason == DenyTool(tool_use_id="").reason
                return tell if default else ToolResult(content=decision.reason, is_error=True)
            return None
        return tell

    async def _tool_activity(
        self, activity_name: str, spec: ToolSpec, call: RunToolInput, retry: RetryPolicy, result_type: type[_ResultT]
    ) -> _ResultT:
        options = spec.options
        result: _ResultT = await workflow.execute_activity(
            activity_name,
            call,
            result_type=result_type,
            # The worker enforces the tool's own timeout and reports it; Temporal's fires only for a silent worker.
            start_to_close_timeout=options.start_to_close_timeout + TOOL_TIMEOUT_GRACE,
            heartbeat_timeout=options.heartbeat_timeout,
            retry_policy=retry,
            task_queue=options.task_queue,
            summary=f"turn {call.iteration} · {spec.name}"
            + (" · reconcile" if activity_name == RECONCILE_TOOL_ACTIVITY else ""),
        )
        return result

    # --- Queries ---------------------------------------------------------------------------------------------

    @workflow.query(name=STATUS_QUERY)
    def status(self) -> RunStatus:
        """The run's state: status, iterations, usage, transcript version and pending approvals."""
        return RunStatus(
            status=self._status,
            iterations=self._iterations,
            stop_reason=self._replies[-1].get("stop_reason") if self._replies else None,
            usage=self._usage,
            transcript_length=len(self._conversation.transcript) if self._conversation else 0,
            version=self._version,
            pending_approvals=[p.model_dump() for p in self._pending.values() if p.tool_use_id not in self._decisions],
            stop_reason_detail=self._stop,
            cost_usd=self._spec.budget.prices.cost(self._usage) if self._spec and self._spec.budget.prices else None,
            tool_results_under_review=self._under_review,
            replies_head=self._replies_head,
            reply_offset=self._reply_offset,
            continuations=self._continuations,
        )

    @workflow.query(name=PENDING_APPROVALS_QUERY)
    def pending_approvals(self) -> list[dict[str, Any]]:
        """Tool calls waiting for a person."""
        return [p.model_dump() for p in self._pending.values() if p.tool_use_id not in self._decisions]

    @workflow.query(name=FORK_POINT_QUERY)
    def fork_point(self, iteration: int) -> dict[str, Any]:
        """What a new run whose first request is this run's request for ``iteration`` (1 is the first) starts from.

        Returns:
            ``{"input": …, "head": …}``: this run's input, and the head of the history Claude saw then (in the store).
        """
        total = self._fork_offset + len(self._fork_points)
        if not 1 <= iteration <= total:
            raise ValueError(f"Iteration {iteration} does not exist; the run has {total} replies.")
        if iteration <= self._fork_offset:
            raise ValueError(
                f"Iteration {iteration} is too old to fork from this run (it continued as new since); fork from "
                f"iteration {self._fork_offset + 1} or later, or start a run from the transcript."
            )
        head = self._fork_points[iteration - self._fork_offset - 1]
        if head is None:
            raise ValueError(
                f"Iteration {iteration} cannot be forked: it is a compaction, or the run started before transcripts "
                "were stored. Fork from another iteration, or start a run from the transcript."
            )
        conversation = self._conversation
        # A continuation whose input left its big parameters to the carried conversation forks with those.
        params = conversation.params if conversation is not None and self._input_trimmed else {}
        return {"input": {**params, **self._input}, "head": head}

    @workflow.query(name=REPLIES_QUERY)
    def replies(self, after: int = 0) -> list[dict[str, Any]]:
        """Claude's replies, whole (id, content, stop reason, usage), from iteration ``after + 1`` on."""
        if after < self._reply_offset:
            raise ValueError(
                f"Replies before iteration {self._reply_offset + 1} are no longer held by the run (it continued as "
                "new); read them from the store (`replies_head` in the status), as AgentRunner does."
            )
        return self._replies[after - self._reply_offset :]

    @workflow.query(name=TRANSCRIPT_QUERY)
    def transcript(self) -> dict[str, Any]:
        """The whole conversation, by reference, and its version.

        Returns:
            ``{"version", "head", "pending", "length"}``: the messages are those of the transcript ``head`` in the
            store, then ``pending``, in the Messages API's wire shape once placeholders are resolved
            (``AgentRunner`` does both).
        """
        transcript = self._conversation.transcript if self._conversation else Transcript()
        return {
            "version": self._version,
            "head": transcript.head,
            "pending": transcript.pending,
            "length": len(transcript),
        }


_SEARCH_KEYS: dict[str, Any] = {
    name: (SearchAttributeKey.for_int(name) if kind == "Int" else SearchAttributeKey.for_keyword(name))
    for name, kind in SEARCH_ATTRIBUTE_TYPES.items()
}


def _record_reply_metrics(reply: dict[str, Any]) -> None:
    """Iterations and tokens, by model; the workflow's meter skips them while replaying, so nothing counts twice."""
    meter = workflow.metric_meter().with_additional_attributes({"model": str(reply.get("model") or "")})
    meter.create_counter("agent_runner_iterations", "Replies received from Claude").add(1)
    usage = reply.get("usage") or {}
    tokens = meter.create_counter("agent_runner_tokens", "Tokens used, by kind", "tokens")
    for kind in ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"):
        count = int(usage.get(kind) or 0)
        if count:
            tokens.add(count, {"kind": kind.removesuffix("_tokens")})


def _count(name: str, description: str, **attributes: str) -> None:
    """Add one to a counter of the workflow's meter (which counts nothing while replaying)."""
    workflow.metric_meter().create_counter(name, description).add(1, attributes)


def _fail(error: AgentRunnerError) -> ApplicationError:
    """The workflow failure that carries ``error`` to the client as the same class (``errors.ERRORS_BY_NAME``)."""
    return ApplicationError(str(error), type=type(error).__name__, non_retryable=True)


def _activity_failure(error: ActivityError) -> ApplicationError:
    """Fail the run with the activity's own error type and message, so the client sees the API's words."""
    cause = error.cause
    if isinstance(cause, ApplicationError):
        return ApplicationError(cause.message, *cause.details, type=cause.type, non_retryable=True)
    return ApplicationError(str(cause or error), type="AgentRunError", non_retryable=True)


MAX_UNKNOWN_ROUNDS = 3
"""How often an at-most-once call may be found not to have happened and run again before Claude is told."""


def _idempotency_key(tool_use_id: str) -> str:
    """Stable for one ``tool_use`` of one run: the chain's first run id survives continue-as-new; a fork has its own."""
    seed = f"{workflow.info().first_execution_run_id}/{tool_use_id}"
    return hashlib.sha256(seed.encode()).hexdigest()[:32]


def _unknown_text(name: str, cause: str) -> str:
    return (
        f"Error: The outcome of this call of '{name}' is unknown: {cause.rstrip('.')}. It may or may not have taken "
        "effect, and it was not run again. Check before calling it again."
    )


def _failure_type(error: ActivityError) -> str | None:
    return error.cause.type if isinstance(error.cause, ApplicationError) else None


def _non_retryable(error: ActivityError) -> bool:
    return isinstance(error.cause, ApplicationError) and error.cause.non_retryable


def _backoff(options: ActivityOptions, attempt: int) -> timedelta:
    delay: timedelta = options.initial_interval * (2 ** (attempt - 1))
    return min(delay, options.maximum_interval)


def _tool_failure(spec: ToolSpec, error: ActivityError) -> ApplicationError:
    """The run's failure when a tool's activity gave up: which tool, after what, and what to do."""
    cause = error.cause
    if isinstance(cause, ApplicationError) and cause.non_retryable:
        return _activity_failure(error)  # decided at once (a missing blob): its own words say what to do
    what = (cause.message if isinstance(cause, FailureError) else str(error)).rstrip(".")
    error_type = cause.type if isinstance(cause, ApplicationError) and cause.type else "ToolFailed"
    attempts = spec.options.maximum_attempts
    return ApplicationError(
        f"Tool '{spec.name}' could not be run{f' in {attempts} attempts' if attempts else ''}: {what}. Check the "
        "workers that serve it (their logs say why), then fork the run from its last turn to go on.",
        type=error_type,
        non_retryable=True,
    )


def _same_call(started: dict[str, Any], replied: dict[str, Any]) -> bool:
    """Whether a block a tool started from is the reply's own block (whose big input may be stored apart)."""
    if started.get("name") != replied.get("name"):
        return False
    given, held = started.get("input"), replied.get("input")
    if is_placeholder(held) and not is_placeholder(given):
        return bool(held == stored(ref_for(canonical(given))))
    return canonical(given) == canonical(held)


def _replies_to_drop(replies: list[dict[str, Any]]) -> int:
    """How many of the oldest replies a continuation leaves to the store: it carries the last few, within a budget.

    The last reply is always carried (the loop reads it); a continuation's input must stay far below Temporal's
    2 MiB payload limit.
    """
    kept, size = 0, 0
    for reply in reversed(replies[-CARRIED_REPLIES:]):
        size += len(canonical(reply))
        if kept and size > CARRIED_REPLY_BYTES:
            break
        kept += 1
    return len(replies) - kept
