"""``AgentRun``: the SDK's tool-runner loop as a Temporal workflow.

Each iteration is one model call (an activity) followed, when Claude asked for tools, by one activity per
``tool_use`` block, run concurrently, whose results go back in block order in one user message. The loop ends as the
SDK's does (``anthropic/lib/tools/_beta_runner.py``, ``_steps``), with its rules named as there:

- ``_should_stop``: the run was closed (a ``stop``) or reached ``max_iterations``, checked before each request.
  ``max_iterations`` counts iterations as the SDK does: every reply, ``pause_turn`` resumes included, compactions not
  (``RunState.iterations``). The tools of the last reply before the cut-off still run (their results are kept in the
  transcript, not sent), as in the SDK. Beyond the SDK, a spent ``budget`` stops the run there too.
- ``next_step`` (the SDK's ``_determine_next_step_from_stop_reason``): ``tool_use`` runs the reply's client tools and
  sends the results (with no client tool in the reply, stop); ``pause_turn`` and ``compaction`` send the turn back
  unchanged so the server resumes it, and no tool runs; anything else (``end_turn``, ``stop_sequence``,
  ``max_tokens``, ``refusal``, absent or unknown) stops, and tools in such a reply never run, since executing them
  would fire side effects the model never confirmed.

Clients steer a running run with updates (``contract/steering.py``). Edits wait for the *iteration boundary*, the
point before the next model call, and apply there one by one in the order the run accepted them (``edits.py``). As
in the SDK, tool changes wait out a paused turn, a compaction waits for a resumed one and is not sent once the run
stops, and queued tool changes count for the reply being handled (``pending_edits.py``). An edit accepted while the
final reply was being written keeps the run going, as ``append_messages`` in the SDK's last loop body does; a
compaction asked for with it runs after it (``compaction_checks.py``). A reply that a pending retry will discard, or
that arrived after a stop, never has its tools run.

The rest has its own module: the run's durable state (``state.py``), continue-as-new (``carry.py``), approvals and
step mode (``approvals.py``), eager tools (``eager.py``), tool calls and their effects (``tool_calls.py``), search
attributes (``search_attributes.py``).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from datetime import timedelta
from typing import Any, Literal, NoReturn, TypeVar, cast

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.contrib.workflow_streams import WorkflowStream
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError, FailureError

with workflow.unsafe.imports_passed_through():
    from agent_runner.contract import events
    from agent_runner.contract.errors import InvalidRunInput, MalformedReply, ToolNotRegistered
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
        WAKE_UPDATE,
        AddTools,
        Advance,
        ApproveTool,
        Compact,
        DenyTool,
        EditOutcome,
        InjectMessage,
        RemoveTools,
        ReplaceHistory,
        RetryTurn,
        Stop,
        UpdateParams,
        Wake,
    )
    from agent_runner.contract.transcript import Transcript, message_ref, next_head
    from agent_runner.contract.types import (
        CREATE_MESSAGE_ACTIVITY,
        DESCRIBE_TOOLS_ACTIVITY,
        EVENTS_TOPIC,
        FORK_POINT_QUERY,
        REPLIES_QUERY,
        SEND_POINT_QUERY,
        STATUS_QUERY,
        THREAD_LOST_ERROR,
        TOOL_USE_READY_SIGNAL,
        TRANSCRIPT_QUERY,
        WORKFLOW_TYPE,
        CreateMessageInput,
        CreateMessageOutput,
        DescribeToolsInput,
        DescribeToolsOutput,
        RunResult,
        RunStatus,
        RunStatusName,
        Usage,
    )
    from agent_runner.workflows import live
    from agent_runner.workflows.approvals import Approvals, StepMode
    from agent_runner.workflows.background import BackgroundCompaction
    from agent_runner.workflows.carry import Carried, continuation_input, should_continue_as_new
    from agent_runner.workflows.compaction_checks import (
        COMPACTION_AT_THE_END_PATCH,
        EMPTY_COMPACTION_PATCH,
        check_can_compact,
        check_no_compaction_edit,
        context_management_after,
        final_reply,
        has_summary,
    )
    from agent_runner.workflows.continuation import continued_conversation, send_point
    from agent_runner.workflows.conversation import (
        THREAD_UNSUPPORTED_CODE,
        THREAD_UNSUPPORTED_ERROR,
        Conversation,
        served_by_fallback,
    )
    from agent_runner.workflows.eager import EagerTools
    from agent_runner.workflows.edits import (
        Edit,
        EditFailed,
        QueuedCompact,
        QueuedEdit,
        check_add_tools,
        check_history,
        check_inject,
        check_params,
        check_remove_tools,
        expected_version,
        parse_update,
        queued,
    )
    from agent_runner.workflows.failures import activity_failure, fail, refused, retry_policy
    from agent_runner.workflows.fallbacks import (
        FALLBACK_SPLICE_PATCH,
        REFUSAL_FALLBACKS_PATCH,
        Splice,
        credit_token,
        hop_turn,
        inherits_fast_speed,
        without_fast_speed,
    )
    from agent_runner.workflows.mcp import pin_mcp_tools
    from agent_runner.workflows.metrics import count, record_reply
    from agent_runner.workflows.pending_edits import (
        PAUSE_HOLDS_PATCH,
        TOOL_ADDITIONS_PATCH,
        replaced_by_definitions,
        turn_is_paused,
        waits_out_the_pause,
    )
    from agent_runner.workflows.plain_json import as_held
    from agent_runner.workflows.reply import reply_problems
    from agent_runner.workflows.run_input import (
        RunSpec,
        parse_run_input,
    )
    from agent_runner.workflows.search_attributes import publish
    from agent_runner.workflows.state import RunState
    from agent_runner.workflows.subagents import STOP_FROM_PARENT_SIGNAL
    from agent_runner.workflows.tool_calls import ToolCalls

THREAD_FALLBACKS_PATCH = "thread-fallbacks-as-the-sdk"
"""``workflow.patched`` id of the SDK's thread fallbacks (issue 13): resend without a thread after
``thread_unsupported_request`` or a thread lost again right after a replay, and a new thread after a reply a fallback
model served. Asked where one of them first decides, so runs recorded before keep the rules they ran with
(``Conversation.thread_fallbacks``)."""

REFUSED_TURN_PATCH = "refused-turn-not-kept-on-a-thread"
"""``workflow.patched`` id of leaving a refused reply out of a threaded history, as the SDK does (issue 13); runs
recorded before keep it in their history."""

Step = Literal["run_tools", "resume", "stop"]

_STOP_REASON_STEPS: dict[str, Step] = {
    "tool_use": "run_tools",
    "pause_turn": "resume",
    "compaction": "resume",
}
"""Stop reasons that continue the loop; every other one, absent and unknown ones included, stops it."""


def next_step(stop_reason: str | None) -> Step:
    """How the loop treats a finished reply (the SDK's ``_determine_next_step_from_stop_reason``)."""
    return _STOP_REASON_STEPS.get(stop_reason or "", "stop")


def tool_uses(reply: dict[str, Any]) -> list[dict[str, Any]]:
    """The reply's ``tool_use`` blocks, in order: the calls the run makes (server tools' blocks have other types)."""
    return [b for b in reply.get("content") or [] if b.get("type") == "tool_use"]


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
            raise refused(str(e)) from None

    return cast(_ValidatorT, checked)


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
        """The state a previous run of this chain handed over (``continued``)."""
        # Restored here rather than in `run`, so edits that reach the continuation first find the run's state.
        self._state = (
            self._carried.state()
            if self._carried is not None
            else RunState(started_at=workflow.info().start_time, stored=False)
        )
        """Everything the run keeps; continue-as-new carries it whole."""
        self._stream = WorkflowStream(prior_state=self._carried.stream if self._carried else None)
        """The run's live events (``EVENTS_TOPIC``), offset-addressed for late subscribers."""
        self._input: dict[str, Any] = (
            {k: v for k, v in raw_input.items() if k != "continued"} if isinstance(raw_input, dict) else {}
        )
        """The run's input as the client sent it (without the state a continuation carries)."""
        self._spec: RunSpec | None = None
        self._status: RunStatusName = "running"
        # This execution's own state: none of it outlives the execution (it is empty at the boundary).
        self._updates = 0
        """Updates this execution took (Temporal allows 2,000 per execution)."""
        self._signals = 0
        self._ended = False
        self._continuing = False
        self._draining = False
        """Set while the run waits for its handlers before continuing as new."""
        self._in_flight: int | None = None
        """The reply number of the model call under way."""
        self._reply_attempt = 0
        """The attempt that wrote the last reply."""
        self._approvals = Approvals(self)
        self._steps = StepMode(self)
        self._eager = EagerTools(self)
        self._tool_calls = ToolCalls(self)
        self._background = BackgroundCompaction(self)

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
            raise fail(e) from None
        self._spec = spec
        if self._carried is not None:
            spec = self._route_model_calls(spec, self._carried.model_task_queue)
        else:
            count("agent_runner_runs_started", "Runs started")
            spec = await self._begin(spec)
        conversation = self._state.conversation
        assert conversation is not None
        failure: str | None = None
        evicted = False
        try:
            result = await self._loop(spec, conversation)
        except GeneratorExit:
            # The worker evicted the run from its cache and closes the coroutine: the run goes on elsewhere, so
            # nothing ended (and no workflow API may be called here, outside the workflow's event loop).
            evicted = True
            raise
        except asyncio.CancelledError:
            self._status = "cancelled"
            raise
        except FailureError as e:
            self._status = "cancelled" if isinstance(e.cause or e, CancelledError) else "failed"
            failure = e.message
            raise
        finally:
            if not self._continuing and not evicted:  # a continuation takes the queued edits over
                self._ended = True
                self._fail_queued_edits()
                self._event(events.RUN_FINISHED, status=self._status, detail=failure or self._state.stop)
                count(
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
        state = self._state
        names = [t for t in spec.tools if isinstance(t, str)]
        if spec.continue_from is not None and spec.continue_from.tools is not None:
            names = spec.continue_from.tools  # Run.send: the tools the ended run could run, as it left them
        described = await self._describe_tools(names, spec.result_hooks)
        if described.missing or described.missing_hooks:
            raise fail(self._not_registered(described.missing + described.missing_hooks))
        state.tools = {tool.name: tool for tool in described.tools}
        state.registered = sorted(described.registered) if described.registered is not None else None
        state.search_attributes = described.search_attributes
        spec = self._route_model_calls(spec, described.model_task_queue)
        # A send's tools as its input named them (one the ended run removed stands for its name, for the MCP tools).
        definitions = [
            t if isinstance(t, dict) else state.tools[t].definition if t in state.tools else {"name": t}
            for t in spec.tools
        ]
        messages = as_held(spec.messages, spec.held)
        if spec.mcp:  # the tools of the MCP servers the run names, listed once: the run's list for good
            mcp_tools = await pin_mcp_tools(spec.mcp, [str(d.get("name")) for d in definitions])
            state.tools.update({tool.name: tool for tool in mcp_tools})
            definitions += [tool.definition for tool in mcp_tools]
        state.conversation = Conversation.start(spec.params, definitions, messages, threading=spec.thread)
        if spec.continue_from is not None:  # Run.send: the conversation of an ended run goes on
            state.conversation = continued_conversation(spec.continue_from, messages)
            state.usage = spec.continue_from.usage
            state.fallback_index = spec.continue_from.fallback_index
        return spec

    def _route_model_calls(self, spec: RunSpec, task_queue: str | None) -> RunSpec:
        """The fleet routes model calls to their own queue (with its rate limit): follow it, unless the run chose."""
        if spec.model_activity.task_queue is None and task_queue is not None:
            options = spec.model_activity.model_copy(update={"task_queue": task_queue})
            spec = spec.model_copy(update={"model_activity": options})
            self._spec = spec
        return spec

    # --- The loop ----------------------------------------------------------------------------------------------

    async def _loop(self, spec: RunSpec, conversation: Conversation) -> RunResult:
        """The SDK's ``_steps``, with the boundary's edits and the step-mode pause between its moves."""
        state = self._state
        while True:
            await self._boundary()
            stop = self._should_stop(spec)
            if stop is not None:
                await self._end(stop, spec, conversation)
                break
            await self._make_room(spec, conversation)
            reply, eager = await self._turn(spec, conversation)
            step, calls = next_step(reply.get("stop_reason")), tool_uses(reply)
            advance = await self._steps.pause("waiting_for_step") if spec.step is not None else None
            if state.stop is not None:
                self._status = "stopped"  # the SDK's close(): this reply's tools do not run
                break
            if state.retry_queued or step == "resume":
                continue  # a retry discards this reply, so its tools must not run; a paused turn is sent back
            if step == "stop" or not calls:
                if state.message_queued:
                    continue  # a message arrived during the final turn: the conversation goes on
                await self._compact_after_final_turn()
                self._status = "completed"
                break
            conversation.append_user_content(await self._tool_results(spec, calls, eager, advance))
            state.version += 1
        await self._background.settle(conversation, wait=True)
        last = final_reply(state.replies)
        return RunResult(
            status=self._status,
            iterations=state.iterations,
            stop_reason=last.get("stop_reason") if last else None,
            final_message=last,
            usage=state.usage,
            detail=state.stop,
        )

    def _should_stop(self, spec: RunSpec) -> RunStatusName | None:
        """The status to end with, or ``None`` to send the next request.

        The SDK's ``_should_stop`` (closed, or ``max_iterations`` reached), and the run's budget.
        """
        state = self._state
        if state.stop is not None:
            return "stopped"
        if spec.max_iterations is not None and state.iterations >= spec.max_iterations:
            return "max_iterations"
        if spec.budget.spent(state.usage, state.started_at, workflow.now()) is not None:
            return "budget_exhausted"
        return None

    async def _end(self, status: RunStatusName, spec: RunSpec, conversation: Conversation) -> None:
        """End the loop with ``status``: say which limit was reached, and let Claude sum up if the budget asks."""
        if status == "max_iterations":
            self._event(events.LIMIT_REACHED, limit="max_iterations", detail=f"{spec.max_iterations} replies")
        elif status == "budget_exhausted":
            spent = spec.budget.spent(self._state.usage, self._state.started_at, workflow.now())
            self._state.stop = f"The {spent} is spent."
            if spec.budget.summarize:
                await self._summary_turn(spec, conversation)
            self._event(events.LIMIT_REACHED, limit="budget_exhausted", detail=self._state.stop)
        self._status = status

    async def _make_room(self, spec: RunSpec, conversation: Conversation) -> None:
        """Before a request: compact the conversation, or start a fresh Temporal history, when either is big.

        The conversation is compacted when the last turn's input passed ``auto_compact``.
        """
        if (
            spec.auto_compact is not None
            and self._state.turn_input_tokens >= spec.auto_compact.input_tokens
            and not self._paused(turn_is_paused)
        ):
            workflow.logger.info(
                "Compacting: the last turn's input was %d tokens (threshold %d)",
                self._state.turn_input_tokens,
                spec.auto_compact.input_tokens,
            )
            await self._compact(
                conversation,
                spec.auto_compact.compaction,
                spec.auto_compact.keep_recent_turns,
                background=spec.auto_compact.background,
            )
        if should_continue_as_new(spec.continue_as_new, self._updates, self._signals):
            await self._continue_as_new(spec)

    async def _turn(
        self, spec: RunSpec, conversation: Conversation
    ) -> tuple[dict[str, Any], dict[str, asyncio.Task[dict[str, Any]]]]:
        """One request and its reply, taken into the run; with the tools started early for the reply's calls."""
        reply = await self._create_message(spec, conversation)
        eager = self._eager.take(reply, self._reply_attempt)
        record_reply(reply)
        self._take_reply(conversation, reply)
        self._publish_search_attributes()
        self._state.version += 1
        return reply, eager

    async def _tool_results(
        self,
        spec: RunSpec,
        calls: list[dict[str, Any]],
        eager: dict[str, asyncio.Task[dict[str, Any]]],
        advance: Advance | None,
    ) -> list[dict[str, Any]]:
        """The user content that answers the reply's tool calls (the SDK's ``generate_tool_call_response``)."""
        if advance is not None and advance.tool_results is not None:
            return as_held(advance.tool_results, advance.held)  # the client built them; no tool runs
        results = list(await asyncio.gather(*(eager.get(str(b.get("id"))) or self._tool_calls.run(b) for b in calls)))
        if spec.result_hooks:
            results = await self._tool_calls.process_results(spec, results, calls)
        if spec.step is not None and spec.step.review_results and self._state.stop is None:
            results = await self._steps.review(results)
        return results

    async def _continue_as_new(self, spec: RunSpec) -> NoReturn:
        """Start a fresh history for the same run, carrying its whole state: the boundary has nothing in flight.

        Live-event subscribers are released first and follow the run to its continuation.
        """
        assert self._state.conversation is not None
        await self._background.settle(self._state.conversation, wait=True)  # its task cannot go across
        self._stream.detach_pollers()
        self._draining = True  # an `advance` waiting for a pause gives up: none comes in this execution
        await workflow.wait_condition(workflow.all_handlers_finished)
        # A continuation goes on from the carried state: the conversation a `send` started from is in it already.
        own_input = {k: v for k, v in self._input.items() if k != "continue_from"}
        run_input = continuation_input(self._state, self._stream, own_input, spec.model_activity.task_queue)
        self._continuing = True
        workflow.continue_as_new(run_input)

    async def _summary_turn(self, spec: RunSpec, conversation: Conversation) -> None:
        """One last request without tools, so Claude sums up instead of being cut off."""
        conversation.join_user_content(
            [
                {
                    "type": "text",
                    "text": f"{self._state.stop} Do not call tools any more: answer now with what you have.",
                }
            ]
        )
        conversation.params["tool_choice"] = {"type": "none"}
        reply = await self._create_message(spec, conversation)
        self._take_reply(conversation, reply)
        self._state.version += 2

    async def _compact(
        self,
        conversation: Conversation,
        compaction: dict[str, Any],
        keep_recent_turns: int = 0,
        *,
        edit: bool = False,
        background: bool = False,
    ) -> None:
        """Replace the history by Claude's summary of it (a compaction request on a new thread).

        Args:
            conversation: The run's conversation.
            compaction: The request's ``compaction`` field.
            keep_recent_turns: Summarize only the history before the last this many turns, which follow the summary.
            edit: Whether a client asked for it: with nothing old enough to summarize, the edit fails saying so;
                ``auto_compact`` just waits for the history to grow.
            background: Let the run go on meanwhile (``background.py``).
        """
        assert self._spec is not None
        state = self._state
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
        if background:
            if self._background.running:
                if edit:
                    raise EditFailed("Compaction skipped: a background compaction is under way.")
                return
            self._background.start(
                conversation, compaction, len(conversation.transcript) if keep_from is None else keep_from
            )
            state.turn_input_tokens = 0
            return
        reply = await self._create_message(self._spec, conversation, compaction, keep_from)
        state.replies.append(reply)
        state.fork_points.append(None)
        state.compactions += 1
        state.usage = state.usage.add(reply.get("usage"))
        state.turn_input_tokens = 0
        if not has_summary(reply) and workflow.patched(EMPTY_COMPACTION_PATCH):
            workflow.logger.warning("Compaction produced no summary; keeping the conversation as it is.")
            if edit:
                raise EditFailed("Compaction produced no summary; the conversation was kept as it is. Ask again.")
            return
        conversation.record_compaction(reply, keep_from)

    def _take_reply(self, conversation: Conversation, reply: dict[str, Any]) -> None:
        """Add a reply to the run: its replies, usage, fork points and history (stored when the call says so)."""
        state = self._state
        transcript = conversation.transcript
        # A fork starts from the history Claude answered, named by its head (unknown for runs older than the store).
        state.fork_points.append(transcript.head if state.stored else None)
        state.replies.append(reply)
        state.usage = state.usage.add(reply.get("usage"))
        state.turn_input_tokens = Usage().add(reply.get("usage")).all_input_tokens
        if self._drops_refused_turn(conversation, reply):
            # The SDK does not record a refused turn on a thread (`_thread_state.py`, before `_store_turn`): the
            # conversation goes on without it, on a new thread.
            if conversation.previous_message_id is not None:
                conversation.start_new_thread("refusal")
        else:
            conversation.record_reply(reply)
        if state.stored:
            transcript.store_pending()

    # --- The iteration boundary ---------------------------------------------------------------------------------

    async def _boundary(self) -> None:
        """Apply every queued edit, in the order accepted, before the next model call."""
        state = self._state
        if state.conversation is not None:
            await self._background.settle(state.conversation, wait=False)
        held: list[QueuedEdit] = []
        while state.queue:
            edit = state.queue.pop(0)
            if self._held(edit):
                held.append(edit)
                continue
            await self._apply_queued(edit)
        state.queue[:0] = held

    async def _apply_queued(self, edit: QueuedEdit) -> None:
        state = self._state
        try:
            await self._apply(edit)
            state.edits_applied += 1
            state.version += 1
            state.outcomes[edit.seq] = EditOutcome(seq=edit.seq, version=state.version)
        except EditFailed as e:
            state.outcomes[edit.seq] = EditOutcome(seq=edit.seq, error=str(e))

    def _held(self, edit: QueuedEdit) -> bool:
        """Whether ``edit`` stays queued at this boundary.

        It waits out a paused turn, or it is a compaction and the run stops here: the SDK checks its stop rules before
        a pending compaction, so none is sent then.
        """
        if self._paused(functools.partial(waits_out_the_pause, edit)):
            return True
        spec = self._spec
        return (
            isinstance(edit, QueuedCompact)
            and spec is not None
            and self._should_stop(spec) is not None
            and workflow.patched(COMPACTION_AT_THE_END_PATCH)
        )

    async def _compact_after_final_turn(self) -> None:
        """Apply the compactions queued when the final turn ended, as the SDK compacts after its final turn.

        Skipped, as there, when the final reply has tool calls without results (``_apply`` says so).
        """
        state = self._state
        compactions = [edit for edit in state.queue if isinstance(edit, QueuedCompact)]
        if compactions and workflow.patched(COMPACTION_AT_THE_END_PATCH):
            for edit in compactions:
                state.queue.remove(edit)
                await self._apply_queued(edit)

    def _paused(self, holds: Callable[[str | None], bool]) -> bool:
        """Whether ``holds`` keeps something back for the turn the last reply paused (``pending_edits.py``).

        Asked of the patch only where it holds something, so runs recorded before replay as they ran.
        """
        last = self._state.last_reply
        return holds(last.get("stop_reason") if last else None) and workflow.patched(PAUSE_HOLDS_PATCH)

    async def _apply(self, edit: QueuedEdit) -> None:
        state = self._state
        conversation = state.conversation
        assert conversation is not None
        expected = expected_version(edit.payload)
        # The version was checked when the edit was accepted. Since then the run's own tool results (for the reply
        # the client saw) may have moved it; only another edit applied in between makes this one stale.
        stale = expected != state.version if edit.edits_applied is None else edit.edits_applied != state.edits_applied
        if expected is not None and stale:
            raise EditFailed(
                f"The transcript changed since version {expected} (it is now at {state.version}); nothing was "
                "changed. Read the transcript again and resend the edit with its version."
            )
        match edit.payload:
            case InjectMessage(content=content, held=held):
                content = as_held(content, held)
                conversation.join_user_content(
                    [{"type": "text", "text": content}] if isinstance(content, str) else content
                )
            case RetryTurn():
                try:
                    dropped = conversation.drop_last_reply()
                except ValueError as e:
                    raise EditFailed(f"Cannot retry: {e}. Replace the history instead.") from None
                if not dropped:
                    raise EditFailed("There is no reply to retry.")
            case ReplaceHistory(messages=messages, held=held):
                conversation.replace_messages(as_held(messages, held))
            case UpdateParams(params=params):
                for key, value in params.items():
                    if value is None:
                        conversation.params.pop(key, None)
                    else:
                        conversation.params[key] = value
            case AddTools(tools=tools):
                described = await self._describe_tools([t for t in tools if isinstance(t, str)])
                if described.missing:
                    raise EditFailed(str(self._not_registered(described.missing)))
                specs = {tool.name: tool for tool in described.tools}
                replaced = replaced_by_definitions(tools, state.tools)
                if replaced and workflow.patched(TOOL_ADDITIONS_PATCH):
                    for name in replaced:
                        state.tools.pop(name)  # a raw definition is sent, never run, as in the SDK
                state.tools.update(specs)
                definitions = [specs[t].definition if isinstance(t, str) else t for t in tools]
                conversation.append_system_content(
                    [
                        {"type": "tool_addition", "tool": {"type": "tool_definition", "definition": d}}
                        for d in definitions
                    ]
                )
            case Compact(compaction=compaction, keep_recent_turns=keep_recent_turns, background=background):
                transcript = conversation.transcript
                if transcript.role(len(transcript) - 1) == "assistant":
                    last = transcript.pending[-1] if transcript.pending else (state.last_reply or {})
                    if any(isinstance(b, dict) and b.get("type") == "tool_use" for b in last.get("content") or []):
                        raise EditFailed("Compaction skipped: the last reply's tool calls have no results yet.")
                await self._compact(conversation, compaction, keep_recent_turns, edit=True, background=background)
            case RemoveTools(names=names):
                for name in names:
                    state.tools.pop(name, None)
                conversation.append_system_content(
                    [{"type": "tool_removal", "tool": {"type": "tool_reference", "name": n}} for n in names]
                )

    def _enqueue(self, edit: Edit) -> dict[str, Any]:
        state = self._state
        self._updates += 1
        state.next_seq += 1
        state.queue.append(queued(state.next_seq, edit, state.edits_applied))
        return {"seq": state.next_seq, "version": state.version}

    def _fail_queued_edits(self) -> None:
        """Edits still queued when the run ends are answered, never silently dropped."""
        state = self._state
        for edit in state.queue:
            state.outcomes[edit.seq] = EditOutcome(
                seq=edit.seq,
                error=f"The run ended ({self._status}) before this edit could apply; nothing was changed. Start a "
                "new run from its transcript to go on.",
            )
        state.queue.clear()

    def _abandoned(self) -> str | None:
        """Why a tool call of the current reply must not start now: the run is stopping or the turn is retried."""
        if self._state.stop is not None:
            return "The run was stopped before this call was executed."
        if self._state.retry_queued:
            return "The turn is being retried; this call was not executed."
        return None

    def _check_open(self) -> None:
        # An edit sent before the run set up its conversation is queued like any other: it applies at the first
        # boundary, before the first request.
        if self._ended:
            raise ValueError(
                f"The run has ended ({self._status}); it takes no edits. Start a new run from its transcript to go on."
            )

    def _check_version(self, expected: int | None) -> None:
        if expected is not None and expected != self._state.version:
            raise ValueError(
                f"The transcript changed since version {expected} (it is now at {self._state.version}). Read "
                "the transcript again and resend the edit with its version."
            )

    # --- Edits ---------------------------------------------------------------------------------------------------

    @workflow.update(name=INJECT_MESSAGE_UPDATE)
    def inject_message(self, raw: dict[str, Any]) -> dict[str, Any]:
        """Queue user content; it joins the next user message, beside any tool results."""
        return self._enqueue(parse_update(InjectMessage, raw))

    @inject_message.validator
    @_refusing
    def _validate_inject_message(self, raw: dict[str, Any]) -> None:
        edit = parse_update(InjectMessage, raw)
        self._check_open()
        self._check_version(edit.expected_version)
        check_inject(edit)

    @workflow.update(name=RETRY_TURN_UPDATE)
    def retry_turn(self, raw: dict[str, Any]) -> dict[str, Any]:
        """Queue a retry: Claude's last reply (and what followed it) is discarded and the turn sent again."""
        return self._enqueue(parse_update(RetryTurn, raw or {}))

    @retry_turn.validator
    @_refusing
    def _validate_retry_turn(self, raw: dict[str, Any]) -> None:
        edit = parse_update(RetryTurn, raw or {})
        self._check_open()
        self._check_version(edit.expected_version)
        if not self._state.replies:
            raise ValueError("There is no reply to retry yet.")

    @workflow.update(name=REPLACE_HISTORY_UPDATE)
    def replace_history(self, raw: dict[str, Any]) -> dict[str, Any]:
        """Queue a new history; one that changes what the server holds starts a new thread."""
        return self._enqueue(parse_update(ReplaceHistory, raw))

    @replace_history.validator
    @_refusing
    def _validate_replace_history(self, raw: dict[str, Any]) -> None:
        edit = parse_update(ReplaceHistory, raw)
        self._check_open()
        self._check_version(edit.expected_version)
        check_history(edit)

    @workflow.update(name=UPDATE_PARAMS_UPDATE)
    def update_params(self, raw: dict[str, Any]) -> dict[str, Any]:
        """Queue new request parameters for every later turn."""
        return self._enqueue(parse_update(UpdateParams, raw))

    @update_params.validator
    @_refusing
    def _validate_update_params(self, raw: dict[str, Any]) -> None:
        edit = parse_update(UpdateParams, raw)
        self._check_open()
        check_params(edit, self._state.conversation)
        if "context_management" in edit.params and any(e.kind == "compact" for e in self._state.queue):
            check_no_compaction_edit(edit.params["context_management"])

    @workflow.update(name=ADD_TOOLS_UPDATE)
    def add_tools(self, raw: dict[str, Any]) -> dict[str, Any]:
        """Queue tools to make available from the next turn on, announced in a ``tool_addition`` system message."""
        return self._enqueue(parse_update(AddTools, raw))

    @add_tools.validator
    @_refusing
    def _validate_add_tools(self, raw: dict[str, Any]) -> None:
        edit = parse_update(AddTools, raw)
        self._check_open()
        check_add_tools(edit, self._state.registered)

    @workflow.update(name=REMOVE_TOOLS_UPDATE)
    def remove_tools(self, raw: dict[str, Any]) -> dict[str, Any]:
        """Queue tools to take away from the next turn on; later calls to them are not executed."""
        return self._enqueue(parse_update(RemoveTools, raw))

    @remove_tools.validator
    @_refusing
    def _validate_remove_tools(self, raw: dict[str, Any]) -> None:
        edit = parse_update(RemoveTools, raw)
        self._check_open()
        conversation = self._state.conversation
        definitions = conversation.tools if conversation else self._input.get("tools") or []
        check_remove_tools(edit, self._state.tools, definitions)

    @workflow.update(name=COMPACT_UPDATE)
    def compact(self, raw: dict[str, Any]) -> dict[str, Any]:
        """Queue a compaction: the whole history is summarized before the next turn, which continues from it."""
        return self._enqueue(parse_update(Compact, raw or {}))

    @compact.validator
    @_refusing
    def _validate_compact(self, raw: dict[str, Any]) -> None:
        parse_update(Compact, raw or {})
        self._check_open()
        conversation = self._state.conversation
        check_can_compact(
            context_management_after(conversation.params if conversation else self._input, self._state.queue)
        )

    @workflow.query(name=EDIT_OUTCOME_QUERY)
    def edit_outcome(self, seq: int) -> dict[str, Any] | None:
        """What became of the edit queued as ``seq``: its version, its error, or ``None`` while it waits."""
        outcome = self._state.outcomes.get(seq)
        return outcome.model_dump() if outcome is not None else None

    @workflow.update(name=STOP_UPDATE)
    def stop(self, raw: dict[str, Any]) -> dict[str, Any]:
        """End the run at the next step: a reply that has not run its tools yet never runs them."""
        edit = parse_update(Stop, raw or {})
        self._updates += 1
        if self._state.stop is None:
            self._state.stop = edit.reason
        return {"version": self._state.version}

    @stop.validator
    @_refusing
    def _validate_stop(self, raw: dict[str, Any]) -> None:
        parse_update(Stop, raw or {})
        if self._ended:
            raise ValueError(f"The run has already ended ({self._status}).")

    # --- Approvals and step mode (approvals.py) ------------------------------------------------------------------

    @workflow.update(name=APPROVE_TOOL_UPDATE)
    def approve_tool(self, raw: dict[str, Any]) -> dict[str, Any]:
        """Let a waiting tool call run, with Claude's input or an edited one."""
        decision = parse_update(ApproveTool, raw)
        self._updates += 1
        self._approvals.decisions[decision.tool_use_id] = decision
        return {"version": self._state.version}

    @approve_tool.validator
    @_refusing
    def _validate_approve_tool(self, raw: dict[str, Any]) -> None:
        self._approvals.check_waiting(parse_update(ApproveTool, raw).tool_use_id)

    @workflow.update(name=DENY_TOOL_UPDATE)
    def deny_tool(self, raw: dict[str, Any]) -> dict[str, Any]:
        """Refuse a waiting tool call: it never runs, and Claude sees the reason."""
        decision = parse_update(DenyTool, raw)
        self._updates += 1
        self._approvals.decisions[decision.tool_use_id] = decision
        return {"version": self._state.version}

    @deny_tool.validator
    @_refusing
    def _validate_deny_tool(self, raw: dict[str, Any]) -> None:
        self._approvals.check_waiting(parse_update(DenyTool, raw).tool_use_id)

    @workflow.update(name=ADVANCE_UPDATE)
    async def advance(self, raw: dict[str, Any]) -> dict[str, Any]:
        """In step mode, let the run go on past the reply it paused after."""
        edit = parse_update(Advance, raw or {})
        self._updates += 1
        await self._steps.accept(edit)
        return {"version": self._state.version}

    @advance.validator
    @_refusing
    def _validate_advance(self, raw: dict[str, Any]) -> None:
        self._steps.check(parse_update(Advance, raw or {}))

    @workflow.update(name=WAKE_UPDATE)
    def wake(self, raw: dict[str, Any]) -> dict[str, Any]:
        """Cut short the sleep Claude asked for (the built-in ``sleep`` tool, ``sleep.py``)."""
        edit = parse_update(Wake, raw or {})
        self._updates += 1
        self._tool_calls.sleeps.wake(edit)
        return {"version": self._state.version}

    @wake.validator
    @_refusing
    def _validate_wake(self, raw: dict[str, Any]) -> None:
        parse_update(Wake, raw or {})
        self._tool_calls.sleeps.check_wake()

    # --- Live events, eager tools, search attributes -------------------------------------------------------------

    def _event(self, event_type: str, **fields: Any) -> None:
        """Publish a live event (``contract/events.py``) of the current reply unless it names its ``iteration``.

        Publishing from the workflow costs no history: the stream is workflow state, rebuilt on replay.
        """
        turn = self._in_flight or self._state.reply_count + (event_type == events.ITERATION_STARTED)
        self._stream.topic(EVENTS_TOPIC).publish({"type": event_type, "iteration": turn, **fields})

    @workflow.signal(name=STOP_FROM_PARENT_SIGNAL)
    def stop_from_parent(self, reason: str) -> None:
        """A parent run that was stopped stops this child run too, as ``stop`` does (``subagents.py``)."""
        self._signals += 1
        if self._state.stop is None and not self._ended:
            self._state.stop = reason

    @workflow.signal(name=TOOL_USE_READY_SIGNAL)
    def tool_use_ready(self, raw: Any) -> None:
        """With ``eager_tools``: start a tool whose ``tool_use`` block is complete while the reply still streams."""
        self._signals += 1
        self._eager.ready(raw)

    def _set_status(self, status: RunStatusName) -> None:
        self._status = status
        self._publish_search_attributes()

    def _publish_search_attributes(self) -> None:
        publish(self._state, self._status)

    def _iteration_in_flight(self) -> int | None:
        """The iteration the model call under way will be, if its reply is not a compaction."""
        return None if self._in_flight is None else self._in_flight - self._state.compactions

    # --- Activities ----------------------------------------------------------------------------------------------

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
        """One model call. The reply is returned, not recorded; ``RunState.stored`` says whether it stored the turn.

        A compaction that keeps recent turns sends only the messages before ``keep_from``.
        """
        state = self._state
        options = spec.model_activity
        reply_number = state.reply_count + 1
        eager = spec.eager_tools and spec.step is None and compaction is None
        self._event(events.ITERATION_STARTED)
        token: str | None = None
        refusal: dict[str, Any] | None = None  # the refusal being fallen back from, while hopping down the chain
        chain: Splice | None = None  # the middleware's streaming splice of the hops (fallbacks.py)
        with_partial = True  # False once the hop's server rejected the prefill: it is sent once more without it
        without_speed = False  # True once an entry that inherited `speed: fast` was over capacity
        while True:
            turn = conversation.turn(compaction, keep_from)
            if spec.refusal_fallbacks:
                index = state.fallback_index
                splice = None
                if chain is not None and index is not None:
                    splice = chain.hop(str(spec.refusal_fallbacks[index]["model"]), with_partial=with_partial)
                entries = without_fast_speed(spec.refusal_fallbacks, index) if without_speed else spec.refusal_fallbacks
                turn = hop_turn(turn, entries, index, token, splice)
            model = str((turn.settings or {}).get("params", {}).get("model"))
            if turn.settings_ref == state.settings_stored:
                turn = turn.model_copy(update={"settings": None})
            try:
                self._in_flight = reply_number
                self._eager.token = str(workflow.uuid4()) if eager else ""
                output: CreateMessageOutput = await workflow.execute_activity(
                    CREATE_MESSAGE_ACTIVITY,
                    CreateMessageInput(
                        turn=turn,
                        replies_head=state.replies_head,
                        run_id=workflow.info().workflow_id,
                        iteration=reply_number,
                        eager_tools=eager,
                        eager_token=self._eager.token,
                    ),
                    result_type=CreateMessageOutput,
                    start_to_close_timeout=options.start_to_close_timeout,
                    heartbeat_timeout=live.model_heartbeat_timeout(options),
                    retry_policy=retry_policy(options),
                    task_queue=options.task_queue,
                    summary=f"turn {reply_number} · {conversation.params['model']}",
                )
                problems = reply_problems(output.message)
                if problems:
                    raise fail(MalformedReply(f"Claude's reply cannot be used: {'; '.join(problems)}."))
                state.stored = output.stored
                hop = self._falls_back(spec, conversation, output.message)
                if output.stored:
                    state.settings_stored = turn.settings_ref
                    if not hop:  # a refused hop is not one of the run's replies
                        state.replies_head = next_head(state.replies_head, message_ref(output.message))
                    if keep_from is None:
                        # The call stored the turn's pending messages, which are the history's only when it sent
                        # the whole history.
                        conversation.transcript.store_pending()
                self._reply_attempt = output.attempt
                if hop:
                    token, refusal, with_partial = credit_token(output.message), output.message, True
                    without_speed = False
                    if chain is not None and turn.splice is not None:
                        chain.refused(output.message, turn.splice, output.attempt)
                    elif workflow.patched(FALLBACK_SPLICE_PATCH):
                        chain = Splice(output.message, model, output.attempt)
                    continue
                if live.records_calls():
                    self._event(events.RECORDED_CALL, attempt=output.attempt)
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
                if (
                    not without_speed
                    and inherits_fast_speed(spec.refusal_fallbacks, state.fallback_index, conversation.params, cause)
                    and workflow.patched(FALLBACK_SPLICE_PATCH)
                ):
                    without_speed = True  # as the middleware: once more on that entry, without `speed`
                    continue
                if refusal is not None:
                    # As the middleware: a hop that fails is skipped (its token was never redeemed, so it goes on
                    # to the next entry); when every entry failed, the refusal stands.
                    if chain is not None and with_partial and chain.rejected_prefill(turn.splice, cause):
                        with_partial = False
                        chain.failed(options.maximum_attempts)
                        continue
                    with_partial = True
                    without_speed = False
                    if self._skips_failed_hop(spec, e):
                        if chain is not None:
                            chain.failed(options.maximum_attempts)
                        continue
                    if chain is not None:  # replayed as the middleware does, through the model call that records it
                        kind = cause.type if isinstance(cause, ApplicationError) else None
                        stood = chain.standing(refusal, model, kind)
                        refusal = await self._record_replay(spec, conversation, stood, reply_number)
                    state.replies_head = next_head(state.replies_head, message_ref(refusal))
                    self._event(events.REPLY, message=refusal)
                    return refusal
                raise activity_failure(e) from None
            finally:
                self._in_flight = None
                self._eager.token = ""

    async def _record_replay(
        self, spec: RunSpec, conversation: Conversation, reply: dict[str, Any], reply_number: int
    ) -> dict[str, Any]:
        """Store ``reply`` as the model call stores a reply, without calling the API; the reply as stored."""
        state = self._state
        turn = conversation.turn().model_copy(update={"replay": reply})
        options = spec.model_activity
        output: CreateMessageOutput = await workflow.execute_activity(
            CREATE_MESSAGE_ACTIVITY,
            CreateMessageInput(
                turn=turn, replies_head=state.replies_head, run_id=workflow.info().workflow_id, iteration=reply_number
            ),
            result_type=CreateMessageOutput,
            start_to_close_timeout=options.start_to_close_timeout,
            retry_policy=retry_policy(options),
            task_queue=options.task_queue,
            summary=f"turn {reply_number} · the refusal stands",
        )
        state.settings_stored = turn.settings_ref
        conversation.transcript.store_pending()
        return output.message

    @staticmethod
    def _drops_refused_turn(conversation: Conversation, reply: dict[str, Any]) -> bool:
        """Whether a refused reply stays out of a threaded history, unless this run was recorded keeping it."""
        return reply.get("stop_reason") == "refusal" and conversation.threading and workflow.patched(REFUSED_TURN_PATCH)

    def _falls_back(self, spec: RunSpec, conversation: Conversation, reply: dict[str, Any]) -> bool:
        """Whether a refused reply goes down the ``refusal_fallbacks`` chain (``fallbacks.py``).

        If it does, the run is pinned to the next entry, and the refused hop's usage, which is billed, is counted. A
        refused ``continue`` is sent again on a new thread, since the server may hold the refused turn (the rule
        ``Conversation.record_reply`` follows for a refusal the run keeps).
        """
        state = self._state
        following = -1 if state.fallback_index is None else state.fallback_index
        if (
            reply.get("stop_reason") != "refusal"
            or following + 1 >= len(spec.refusal_fallbacks)
            or not workflow.patched(REFUSAL_FALLBACKS_PATCH)
        ):
            return False
        if credit_token(reply) is None and reply.get("content") and workflow.patched(FALLBACK_SPLICE_PATCH):
            # As the middleware's stream: a refusal after output goes down the chain only with a credit token.
            workflow.logger.info("Refused after output without a fallback credit token: the refusal stands")
            return False
        state.fallback_index = following + 1
        state.usage = state.usage.add(reply.get("usage"))
        if conversation.threading and conversation.previous_message_id is not None:
            conversation.start_new_thread("refusal")
        workflow.logger.info(
            "Refused (%s): trying the turn again on fallback %d, %s",
            reply.get("model"),
            state.fallback_index,
            spec.refusal_fallbacks[state.fallback_index].get("model"),
        )
        return True

    def _skips_failed_hop(self, spec: RunSpec, error: ActivityError) -> bool:
        """Whether the run goes on to the next ``refusal_fallbacks`` entry after a hop's request failed."""
        state = self._state
        assert state.fallback_index is not None
        failed = spec.refusal_fallbacks[state.fallback_index].get("model")
        if state.fallback_index + 1 >= len(spec.refusal_fallbacks):
            workflow.logger.warning("The last refusal fallback, %s, failed (%s); the refusal stands", failed, error)
            return False
        state.fallback_index += 1
        workflow.logger.warning(
            "Refusal fallback %s failed (%s); trying %s",
            failed,
            error,
            spec.refusal_fallbacks[state.fallback_index].get("model"),
        )
        return True

    @staticmethod
    def _take_thread_fallbacks(conversation: Conversation) -> None:
        """Follow the SDK's thread fallbacks from now on, unless this run was recorded without them.

        Asked only where one of them decides differently, so the marker is recorded there and nowhere else.
        """
        if not conversation.thread_fallbacks and workflow.patched(THREAD_FALLBACKS_PATCH):
            conversation.thread_fallbacks = True

    # --- Queries -------------------------------------------------------------------------------------------------

    @workflow.query(name=STATUS_QUERY)
    def status(self) -> RunStatus:
        """The run's state: status, iterations, usage, transcript version and pending approvals."""
        state, spec = self._state, self._spec
        last = state.last_reply
        return RunStatus(
            status=self._status,
            iterations=state.iterations,
            replies=state.reply_count,
            stop_reason=last.get("stop_reason") if last else None,
            usage=state.usage,
            transcript_length=len(state.conversation.transcript) if state.conversation else 0,
            version=state.version,
            pending_approvals=self._approvals.waiting(),
            stop_reason_detail=state.stop,
            cost_usd=spec.budget.prices.cost(state.usage) if spec and spec.budget.prices else None,
            tool_results_under_review=self._steps.under_review,
            replies_head=state.replies_head,
            reply_offset=state.reply_offset,
            continuations=state.continuations,
            agents=[child.model_dump() for child in state.children],
            sleeping_until=self._tool_calls.sleeps.sleeping_until(),
        )

    @workflow.query(name=PENDING_APPROVALS_QUERY)
    def pending_approvals(self) -> list[dict[str, Any]]:
        """Tool calls waiting for a person."""
        return self._approvals.waiting()

    @workflow.query(name=FORK_POINT_QUERY)
    def fork_point(self, iteration: int) -> dict[str, Any]:
        """What a new run whose first request is this run's request for ``iteration`` (1 is the first) starts from.

        ``iteration`` is a reply number: compactions count (and cannot be forked from).

        Returns:
            ``{"input": …, "head": …}``: this run's input, and the head of the history Claude saw then (in the store).
        """
        state = self._state
        total = state.fork_offset + len(state.fork_points)
        if not 1 <= iteration <= total:
            raise ValueError(f"Iteration {iteration} does not exist; the run has {total} replies.")
        if iteration <= state.fork_offset:
            raise ValueError(
                f"Iteration {iteration} is too old to fork from this run (it continued as new since); fork from "
                f"iteration {state.fork_offset + 1} or later, or start a run from the transcript."
            )
        head = state.fork_points[iteration - state.fork_offset - 1]
        if head is None:
            raise ValueError(
                f"Iteration {iteration} cannot be forked: it is a compaction, or the run started before transcripts "
                "were stored. Fork from another iteration, or start a run from the transcript."
            )
        conversation = state.conversation
        # A continuation whose input left its big parameters to the carried conversation forks with those.
        params = conversation.params if conversation is not None and state.input_trimmed else {}
        # A fork starts from the history at `head`, which holds what a `send` continued from.
        own_input = {k: v for k, v in self._input.items() if k != "continue_from"}
        return {"input": {**params, **own_input}, "head": head}

    @workflow.query(name=SEND_POINT_QUERY)
    def send_point(self) -> dict[str, Any]:
        """What a new run that goes on with this ended run's conversation starts from (``Run.send``).

        Returns:
            ``{"input": …, "continue_from": …}``: this run's input, and its ``continue_from`` (``continuation.py``).
        """
        state = self._state
        if not self._ended:
            raise ValueError(
                f"The run is still {self._status}: send it a message with `inject` instead, or wait for it to end."
            )
        if state.conversation is None:
            raise ValueError("The run ended before it had a conversation; start a new run instead.")
        params = state.conversation.params if state.input_trimmed else {}
        run_input = {k: v for k, v in {**params, **self._input}.items() if k not in ("messages", "continue_from")}
        point = send_point(
            workflow.info().workflow_id, state.conversation, state.usage, state.fallback_index, state.tools
        )
        return {"input": run_input, "continue_from": point}

    @workflow.query(name=REPLIES_QUERY)
    def replies(self, after: int = 0) -> list[dict[str, Any]]:
        """Claude's replies, whole (id, content, stop reason, usage), from reply number ``after + 1`` on."""
        state = self._state
        if after < state.reply_offset:
            raise ValueError(
                f"Replies before iteration {state.reply_offset + 1} are no longer held by the run (it continued as "
                "new); read them from the store (`replies_head` in the status), as AgentRunner does."
            )
        return state.replies[after - state.reply_offset :]

    @workflow.query(name=TRANSCRIPT_QUERY)
    def transcript(self) -> dict[str, Any]:
        """The whole conversation, by reference, and its version.

        Returns:
            ``{"version", "head", "pending", "length"}``: the messages are those of the transcript ``head`` in the
            store, then ``pending``, in the Messages API's wire shape once placeholders are resolved
            (``AgentRunner`` does both).
        """
        conversation = self._state.conversation
        transcript = conversation.transcript if conversation else Transcript()
        return {
            "version": self._state.version,
            "head": transcript.head,
            "pending": transcript.pending,
            "length": len(transcript),
        }
