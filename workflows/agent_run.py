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

The rest has its own module, and each room sees the run only through ``RunView`` (``run_view.py``): the run's durable
state (``state.py``), the model call (``model_calls.py``), the boundary's edits (``boundary.py``), compaction
(``compaction.py``), continue-as-new (``carry.py``), approvals and step mode (``approvals.py``), eager tools
(``eager.py``), tool calls and their effects (``tool_calls.py``), queries (``queries.py``), search attributes
(``search_attributes.py``).
"""

from __future__ import annotations

import asyncio
from typing import Any, Literal, NoReturn

from temporalio import workflow
from temporalio.common import RawValue
from temporalio.contrib.workflow_streams import WorkflowStream
from temporalio.exceptions import ApplicationError, CancelledError, FailureError

with workflow.unsafe.imports_passed_through():
    from agent_runner.contract import events
    from agent_runner.contract.errors import InvalidRunInput
    from agent_runner.contract.steering import (
        ADD_TOOLS_UPDATE,
        ADVANCE_UPDATE,
        APPROVE_TOOL_UPDATE,
        COMPACT_BETA,
        COMPACT_UPDATE,
        DENY_TOOL_UPDATE,
        EDIT_OUTCOME_QUERY,
        INJECT_MESSAGE_UPDATE,
        INLINE_TOOLS_BETA,
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
        InjectMessage,
        RemoveTools,
        ReplaceHistory,
        RetryTurn,
        Stop,
        UpdateParams,
        Wake,
    )
    from agent_runner.contract.types import (
        EVENTS_TOPIC,
        FORK_POINT_QUERY,
        REPLIES_QUERY,
        SEND_POINT_QUERY,
        STATUS_QUERY,
        TOOL_USE_READY_SIGNAL,
        TRANSCRIPT_QUERY,
        WORKFLOW_TYPE,
        DescribeToolsOutput,
        RunResult,
        RunStatus,
        RunStatusName,
    )
    from agent_runner.workflows import start_input, tool_lookup
    from agent_runner.workflows.approvals import Approvals, StepMode
    from agent_runner.workflows.background import BackgroundCompaction
    from agent_runner.workflows.boundary import Boundary, paused
    from agent_runner.workflows.budget_requests import BudgetRequests, Decision, summary_request, went_on
    from agent_runner.workflows.carry import Carried, continuation_input, should_continue_as_new
    from agent_runner.workflows.compaction import Compactions
    from agent_runner.workflows.compaction_checks import (
        check_can_compact,
        check_no_compaction_edit,
        final_reply,
    )
    from agent_runner.workflows.conversation import Conversation
    from agent_runner.workflows.eager import EagerTools
    from agent_runner.workflows.edits import (
        EDIT_SEES_REPLIES_PATCH,
        Edit,
        check_add_tools,
        check_first_in_line,
        check_history,
        check_inject,
        check_open,
        check_params,
        check_remove_tools,
        check_toolsets_fixed,
        check_version,
        expected_version,
        parse_update,
        queued,
    )
    from agent_runner.workflows.failures import fail, not_registered, refused, refusing, with_last_status
    from agent_runner.workflows.forking import forked_tools, keep_only
    from agent_runner.workflows.metrics import count, record_reply
    from agent_runner.workflows.model_calls import ModelCalls, take_reply
    from agent_runner.workflows.needed_betas import check_beta, check_compaction_beta_kept, param_after
    from agent_runner.workflows.new_conversation import start_conversation
    from agent_runner.workflows.pending_edits import turn_is_paused
    from agent_runner.workflows.plain_json import as_held
    from agent_runner.workflows.queries import fork_point_of, replies_after, send_point_of, status_of, transcript_of
    from agent_runner.workflows.request_shape import decide_before_the_first_turn
    from agent_runner.workflows.result_transcript import result_status, result_transcript
    from agent_runner.workflows.run_input import (
        LATE_INPUT_CHECKS_PATCH,
        RunSpec,
        inline_tools_problems,
        late_problems,
        parse_run_input,
    )
    from agent_runner.workflows.search_attributes import publish
    from agent_runner.workflows.start_input import NO_INPUT, one_raw_input
    from agent_runner.workflows.state import RunState
    from agent_runner.workflows.subagents import STOP_FROM_PARENT_SIGNAL
    from agent_runner.workflows.tool_calls import ToolCalls

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


ENDED_STATUS_PATCH = "search-attributes-say-failed-or-cancelled"
"""``workflow.patched`` id of a failed or cancelled run publishing its last status, as a completed run does: runs
recorded before failed without it."""


# Outside Temporal's sandbox: the sandbox re-imports a workflow's module for every run and routes each activation
# through its restricted importer (about a sixth of a worker's CPU per iteration here), and what it checks is pinned
# instead by the replay tests, which replay every recorded history inside Temporal's strict sandbox
# (tests/test_replay.py). A user's own workflows on the same worker keep the sandbox.
@workflow.defn(name=WORKFLOW_TYPE, sandboxed=False)
class AgentRun:
    """One agent run: Claude and its tools in a loop until a stop reason, ``max_iterations`` or a stop ends it."""

    @workflow.init
    @one_raw_input
    def __init__(self, raw_input: RawValue = NO_INPUT, *more: object) -> None:
        # Undecoded, with a default and room for more: the stock CLI can start a run with no input, several, or one
        # no converter can read, and the run must fail with InvalidRunInput instead of its workflow task failing (and
        # being retried) for ever (`start_input.py`).
        raw, self._unreadable = start_input.read(raw_input, more)
        """Why the run's input cannot be read, if it cannot: the run fails with it at once."""
        continued = raw.get("continued") if isinstance(raw, dict) else None
        self._carried: Carried | None = None
        """The state a previous run of this chain handed over (``continued``)."""
        if continued is not None:
            try:
                self._carried = Carried.model_validate(continued)
            except ValueError as e:
                if workflow.info().continued_run_id is not None:
                    # A real continuation this code cannot read was written by newer code: its workflow task fails
                    # and is retried, for a worker of that code to take (upgrade every worker before rolling back).
                    raise
                self._unreadable = (
                    f"`continued` is not the state a run hands its continuation ({start_input.first_line(e)}): a "
                    "run writes it when it continues as new; start the run without it."
                )
        # Restored here rather than in `run`, so edits that reach the continuation first find the run's state.
        self._state = (
            self._carried.state()
            if self._carried is not None
            else RunState(started_at=workflow.info().start_time, stored=False)
        )
        """Everything the run keeps; continue-as-new carries it whole."""
        self._stream = WorkflowStream(prior_state=self._carried.stream if self._carried else None)
        """The run's live events (``EVENTS_TOPIC``), offset-addressed for late subscribers."""
        self._raw_input = raw
        """The run's input, decoded."""
        self._input: dict[str, Any] = (
            {k: v for k, v in raw.items() if k != "continued"} if isinstance(raw, dict) else {}
        )
        """The run's input as the client sent it (without the state a continuation carries)."""
        self._spec: RunSpec | None = None
        self._status: RunStatusName = "running"
        # This execution's own state: none of it outlives the execution (it is empty at the boundary).
        self._updates = 0
        """Updates this execution took (Temporal allows 2,000 per execution)."""
        self._signals = 0
        self._replies_before = self._state.reply_count
        """Replies the run had when this execution began: a continuation moves on only once it added one."""
        self._ended = False
        self._failure: str | None = None  # what the run failed with, which its status then gives as the detail
        self._continuing = False
        self._draining = False
        """Set while the run waits for its handlers before continuing as new."""
        self._approvals = Approvals(self)
        self._budget_requests = BudgetRequests(self)
        self._steps = StepMode(self)
        self._eager = EagerTools(self)
        self._model_calls = ModelCalls(self, self._eager)
        self._tool_calls = ToolCalls(self)
        self._background = BackgroundCompaction(self)
        self._compactions = Compactions(self, self._model_calls, self._background)
        self._edits = Boundary(self, self._compactions, self._background, self._stops_here)

    @workflow.run
    @one_raw_input
    async def run(self, raw_input: RawValue = NO_INPUT, *more: object) -> dict[str, Any]:  # noqa: ARG002
        """Run the loop.

        Args:
            raw_input: The run's JSON input: Messages API parameters plus runner options (see ``run_input.py``),
                undecoded (``__init__`` read it).
            more: Further inputs, which a run never takes: it fails saying so.

        Returns:
            A ``RunResult`` as JSON.
        """
        try:
            if self._unreadable is not None:
                raise InvalidRunInput(self._unreadable)
            raw = self._raw_input
            run_input = raw if not isinstance(raw, dict) else self._input
            # The later checks refuse a new run only: the patch marks the runs they failed, and a run in flight
            # started with such input (no marker) goes on with it on replay and across continue-as-new.
            late = late_problems(run_input) if isinstance(run_input, dict) and self._carried is None else []
            if late and workflow.patched(LATE_INPUT_CHECKS_PATCH):
                raise InvalidRunInput("The run's input was rejected:\n- " + "\n- ".join(late))
            spec = parse_run_input(run_input, late_checks=False)
        except InvalidRunInput as e:
            raise fail(e) from None
        if self._state.budget is not None:  # a person approved more before the run continued as new
            spec = spec.model_copy(update={"budget": self._state.budget})
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
            if self._status == "failed" and isinstance(e, ApplicationError):
                self._failure = e.message
                raise with_last_status(e, self.status().model_dump(mode="json")) from e.__cause__
            raise
        finally:
            if not self._continuing and not evicted:  # a continuation takes the queued edits over
                self._ended = True
                self._edits.fail_queued()
                self.event(events.RUN_FINISHED, status=self._status, detail=failure or self._state.stop)
                count(
                    "agent_runner_runs_finished",
                    "Runs ended, by status (running = started - finished)",
                    status=self._status,
                )
                self._stream.detach_pollers()  # subscribers' long polls must not keep the run open
                if self._status in ("failed", "cancelled") and workflow.patched(ENDED_STATUS_PATCH):
                    # Its search attributes say how it ended, as a completed run's do, so a query for running or
                    # waiting runs leaves it out (a terminated run's cannot: none of its code runs then).
                    self._publish_search_attributes()
        self._publish_search_attributes()
        await workflow.wait_condition(workflow.all_handlers_finished)
        return result.model_dump(mode="json")

    async def _begin(self, spec: RunSpec) -> RunSpec:
        """Look up the run's tools and set up its conversation (``new_conversation.py``)."""
        state = self._state
        shape = decide_before_the_first_turn(spec)  # before the tool lookup, a local activity (request_shape.py)
        names = [t for t in spec.tools if isinstance(t, str)]
        if spec.continue_from is not None and spec.continue_from.tools is not None:
            names = spec.continue_from.tools  # Run.send: the tools the ended run could run, as it left them
        runnable = forked_tools(spec)  # Run.fork: those the run could run at the fork point
        if runnable is not None:
            names = [*names, *(name for name in runnable if name not in names)]
        policies = [spec.budget.policy] if spec.budget.policy is not None else []
        described = await self.describe_tools(names, [*spec.result_hooks, *policies])
        if described.missing or described.missing_hooks:
            raise fail(not_registered(described.missing + described.missing_hooks))
        state.tools = {tool.name: tool for tool in described.tools}
        state.registered = sorted(described.registered) if described.registered is not None else None
        state.search_attributes = described.search_attributes
        spec = self._route_model_calls(spec, described.model_task_queue)
        await start_conversation(state, spec)
        if shape is not None and state.conversation is not None:
            state.conversation.sdk_request_shape = shape
        if runnable is not None:
            keep_only(state, runnable)
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
            if stop == "budget_exhausted" and spec.budget.on_spent == "ask":
                extended = await self._ask_for_budget(spec, conversation)
                if extended is None:
                    break
                spec = extended  # with what a person approved
                continue
            if stop is not None:
                await self._end(stop, spec, conversation)
                break
            await self._make_room(spec, conversation)
            reply, eager = await self._turn(spec, conversation)
            self._edits.fail_stale()  # edits sent against the transcript before this reply: never acted on
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
                await self._edits.after_final_turn()
                self._status = "completed"
                break
            conversation.append_user_content(await self._tool_results(spec, calls, eager, advance))
            if spec.budget.advise and (note := spec.budget.advice(state.usage, state.started_at, workflow.now())):
                conversation.join_user_content([{"type": "text", "text": note}])
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
            transcript=result_transcript(state.conversation),
            last_status=result_status(self),
        )

    async def _boundary(self) -> None:
        """Apply every queued edit, in the order accepted, before the next model call (``boundary.py``)."""
        await self._edits.apply()

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

    def _stops_here(self) -> bool:
        """Whether the run stops at this boundary (``_should_stop``), once it has its spec."""
        return self._spec is not None and self._should_stop(self._spec) is not None

    async def _end(self, status: RunStatusName, spec: RunSpec, conversation: Conversation) -> None:
        """End the loop with ``status``: say which limit was reached, and let Claude sum up if the budget asks."""
        if status == "max_iterations":
            self.event(events.LIMIT_REACHED, limit="max_iterations", detail=f"{spec.max_iterations} replies")
        elif status == "budget_exhausted":
            spent = spec.budget.spent(self._state.usage, self._state.started_at, workflow.now())
            self._state.stop = f"The {spent} is spent."
            if spec.budget.summarize:
                await self._summary_turn(spec, conversation)
            self.event(events.LIMIT_REACHED, limit="budget_exhausted", detail=self._state.stop)
        self._status = status

    async def _make_room(self, spec: RunSpec, conversation: Conversation) -> None:
        """Before a request: compact the conversation, or start a fresh Temporal history, when either is big.

        The conversation is compacted when the last turn's input passed ``auto_compact``.
        """
        if (
            spec.auto_compact is not None
            and self._state.turn_input_tokens >= spec.auto_compact.input_tokens
            and not paused(self._state, turn_is_paused)
        ):
            workflow.logger.info(
                "Compacting: the last turn's input was %d tokens (threshold %d)",
                self._state.turn_input_tokens,
                spec.auto_compact.input_tokens,
            )
            await self._compactions.compact(
                conversation,
                spec.auto_compact.compaction,
                spec.auto_compact.keep_recent_turns,
                background=spec.auto_compact.background,
            )
        # A continuation goes on only after a reply of its own: one whose starting history already passes a limit
        # (a low `history_bytes`, a server that suggests continuing early) would otherwise start the next one at
        # once, and so on, without end.
        made_progress = self._carried is None or self._state.reply_count > self._replies_before
        if made_progress and should_continue_as_new(spec.continue_as_new, self._updates, self._signals):
            await self._continue_as_new(spec)

    async def _turn(
        self, spec: RunSpec, conversation: Conversation
    ) -> tuple[dict[str, Any], dict[str, asyncio.Task[dict[str, Any]]]]:
        """One request and its reply, taken into the run; with the tools started early for the reply's calls."""
        reply = await self._model_calls.create(spec, conversation)
        eager = self._eager.take(reply, self._model_calls.reply_attempt)
        record_reply(reply)
        take_reply(self._state, conversation, reply)
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

    async def _ask_for_budget(self, spec: RunSpec, conversation: Conversation) -> RunSpec | None:
        """The budget is spent and ``on_spent="ask"``: Claude sums up, its policy or a person decides.

        Returns:
            The run's spec with the budget approved (``budget_requests.py``), to go on with; ``None``: the run ends.
        """
        state = self._state
        spent = spec.budget.spent(state.usage, state.started_at, workflow.now())
        assert spent is not None
        self.event(events.LIMIT_REACHED, limit="budget_exhausted", detail=f"The {spent} is spent.")
        tool_choice = conversation.params.get("tool_choice")
        await self._summary_turn(spec, conversation, summary_request(spent))
        decision = await self._budget_requests.decide(spent) if state.stop is None else Decision()
        budget = decision.budget
        if budget is None:
            self._status = "stopped" if state.stop is not None else "budget_exhausted"
            state.stop = state.stop or decision.stop or f"The {spent} is spent."
            return None
        state.budget = budget
        self._spec = spec = spec.model_copy(update={"budget": budget})
        if tool_choice is None:
            conversation.params.pop("tool_choice", None)
        else:
            conversation.params["tool_choice"] = tool_choice
        note = budget.advice(state.usage, state.started_at, workflow.now())
        conversation.join_user_content([{"type": "text", "text": went_on(decision.by, note)}])
        state.version += 1
        return spec

    async def _summary_turn(self, spec: RunSpec, conversation: Conversation, note: str | None = None) -> None:
        """One last request without tools, so Claude sums up instead of being cut off (``note``: what to ask)."""
        note = note or f"{self._state.stop} Do not call tools any more: answer now with what you have."
        conversation.join_user_content([{"type": "text", "text": note}])
        conversation.params["tool_choice"] = {"type": "none"}
        reply = await self._model_calls.create(spec, conversation)
        take_reply(self._state, conversation, reply)
        self._state.version += 2

    def _enqueue(self, edit: Edit) -> dict[str, Any]:
        state = self._state
        self._updates += 1
        state.next_seq += 1
        replies = None
        if expected_version(edit) is not None and workflow.patched(EDIT_SEES_REPLIES_PATCH):
            replies = state.iterations  # a reply after this one is one the sender had not seen (a compaction aside)
        state.queue.append(queued(state.next_seq, edit, state.edits_applied, replies))
        return {"seq": state.next_seq, "version": state.version}

    # --- Edits ---------------------------------------------------------------------------------------------------

    @workflow.update(name=INJECT_MESSAGE_UPDATE)
    @one_raw_input
    def inject_message(self, raw: RawValue = NO_INPUT, *more: RawValue) -> dict[str, Any]:
        """Queue user content; it joins the next user message, beside any tool results."""
        return self._enqueue(parse_update(InjectMessage, raw, more))

    @inject_message.validator
    @refusing
    @one_raw_input
    def _validate_inject_message(self, raw: RawValue = NO_INPUT, *more: RawValue) -> None:
        edit = parse_update(InjectMessage, raw, more)
        check_open(self._ended, self._status)
        check_version(edit.expected_version, self._state.version)
        check_first_in_line(edit.expected_version, self._state.queue, "message")
        check_inject(edit)

    @workflow.update(name=RETRY_TURN_UPDATE)
    @one_raw_input
    def retry_turn(self, raw: RawValue = NO_INPUT, *more: RawValue) -> dict[str, Any]:
        """Queue a retry: Claude's last reply (and what followed it) is discarded and the turn sent again."""
        return self._enqueue(parse_update(RetryTurn, raw, more))

    @retry_turn.validator
    @refusing
    @one_raw_input
    def _validate_retry_turn(self, raw: RawValue = NO_INPUT, *more: RawValue) -> None:
        edit = parse_update(RetryTurn, raw, more)
        check_open(self._ended, self._status)
        check_version(edit.expected_version, self._state.version)
        if not self._state.replies:
            raise ValueError("There is no reply to retry yet.")
        request = self._budget_requests.waiting
        if request is not None and request not in self._approvals.decisions:
            # A retry stops the request's wait (``abandoned``), which would end the run with its budget spent.
            raise ValueError(
                f"The run waits for more budget ({request}), and a retry would spend more: approve {request} with new "
                "limits, then retry; or deny it to end the run."
            )
        check_first_in_line(edit.expected_version, self._state.queue, "retry")

    @workflow.update(name=REPLACE_HISTORY_UPDATE)
    @one_raw_input
    def replace_history(self, raw: RawValue = NO_INPUT, *more: RawValue) -> dict[str, Any]:
        """Queue a new history; one that changes what the server holds starts a new thread."""
        return self._enqueue(parse_update(ReplaceHistory, raw, more))

    @replace_history.validator
    @refusing
    @one_raw_input
    def _validate_replace_history(self, raw: RawValue = NO_INPUT, *more: RawValue) -> None:
        edit = parse_update(ReplaceHistory, raw, more)
        check_open(self._ended, self._status)
        check_version(edit.expected_version, self._state.version)
        check_history(edit)
        for problem in inline_tools_problems(edit.messages, self._param_after("betas")):
            raise ValueError(problem)

    @workflow.update(name=UPDATE_PARAMS_UPDATE)
    @one_raw_input
    def update_params(self, raw: RawValue = NO_INPUT, *more: RawValue) -> dict[str, Any]:
        """Queue new request parameters for every later turn."""
        return self._enqueue(parse_update(UpdateParams, raw, more))

    @update_params.validator
    @refusing
    @one_raw_input
    def _validate_update_params(self, raw: RawValue = NO_INPUT, *more: RawValue) -> None:
        edit = parse_update(UpdateParams, raw, more)
        check_open(self._ended, self._status)
        check_params(edit, self._state.conversation, self._spec.refusal_fallbacks if self._spec else None, run=self)
        if "context_management" in edit.params and any(e.kind == "compact" for e in self._state.queue):
            check_no_compaction_edit(edit.params["context_management"])
        check_compaction_beta_kept(edit.params, self._spec is not None and self._spec.auto_compact is not None)

    @workflow.update(name=ADD_TOOLS_UPDATE)
    @one_raw_input
    def add_tools(self, raw: RawValue = NO_INPUT, *more: RawValue) -> dict[str, Any]:
        """Queue tools to make available from the next turn on, announced in a ``tool_addition`` system message."""
        return self._enqueue(parse_update(AddTools, raw, more))

    @add_tools.validator
    @refusing
    @one_raw_input
    def _validate_add_tools(self, raw: RawValue = NO_INPUT, *more: RawValue) -> None:
        edit = parse_update(AddTools, raw, more)
        check_open(self._ended, self._status)
        check_add_tools(edit, self._state.registered)
        check_toolsets_fixed(edit, self._state.tools)
        check_beta(self._param_after("betas"), INLINE_TOOLS_BETA, "`add_tools` (a `tool_addition` system message)")

    @workflow.update(name=REMOVE_TOOLS_UPDATE)
    @one_raw_input
    def remove_tools(self, raw: RawValue = NO_INPUT, *more: RawValue) -> dict[str, Any]:
        """Queue tools to take away from the next turn on; later calls to them are not executed."""
        return self._enqueue(parse_update(RemoveTools, raw, more))

    @remove_tools.validator
    @refusing
    @one_raw_input
    def _validate_remove_tools(self, raw: RawValue = NO_INPUT, *more: RawValue) -> None:
        edit = parse_update(RemoveTools, raw, more)
        check_open(self._ended, self._status)
        conversation = self._state.conversation
        definitions = conversation.tools if conversation else self._input.get("tools") or []
        check_remove_tools(edit, self._state.tools, definitions)
        check_toolsets_fixed(edit, self._state.tools)
        check_beta(self._param_after("betas"), INLINE_TOOLS_BETA, "`remove_tools` (a `tool_removal` system message)")

    @workflow.update(name=COMPACT_UPDATE)
    @one_raw_input
    def compact(self, raw: RawValue = NO_INPUT, *more: RawValue) -> dict[str, Any]:
        """Queue a compaction: the whole history is summarized before the next turn, which continues from it."""
        return self._enqueue(parse_update(Compact, raw, more))

    @compact.validator
    @refusing
    @one_raw_input
    def _validate_compact(self, raw: RawValue = NO_INPUT, *more: RawValue) -> None:
        parse_update(Compact, raw, more)
        check_open(self._ended, self._status)
        check_can_compact(self._param_after("context_management"))
        check_beta(self._param_after("betas"), COMPACT_BETA, "A compaction")

    def _param_after(self, name: str) -> Any:
        """The request parameter ``name`` the run will send once its queued ``update_params`` apply."""
        conversation = self._state.conversation
        return param_after(conversation.params if conversation else self._input, self._state.queue, name)

    @workflow.query(name=EDIT_OUTCOME_QUERY)
    def edit_outcome(self, seq: int) -> dict[str, Any] | None:
        """What became of the edit queued as ``seq``: its version, its error, or ``None`` while it waits."""
        outcome = self._state.outcomes.get(seq)
        return outcome.model_dump() if outcome is not None else None

    @workflow.update(name=STOP_UPDATE)
    @one_raw_input
    def stop(self, raw: RawValue = NO_INPUT, *more: RawValue) -> dict[str, Any]:
        """End the run at the next step: a reply that has not run its tools yet never runs them."""
        edit = parse_update(Stop, raw, more)
        self._updates += 1
        if self._state.stop is None:
            self._state.stop = edit.reason
        return {"version": self._state.version}

    @stop.validator
    @refusing
    @one_raw_input
    def _validate_stop(self, raw: RawValue = NO_INPUT, *more: RawValue) -> None:
        parse_update(Stop, raw, more)
        if self._ended:
            raise ValueError(f"The run has already ended ({self._status}).")

    # --- Approvals and step mode (approvals.py) ------------------------------------------------------------------

    @workflow.update(name=APPROVE_TOOL_UPDATE)
    @one_raw_input
    async def approve_tool(self, raw: RawValue = NO_INPUT, *more: RawValue) -> dict[str, Any]:
        """Let a waiting tool call run, with Claude's input or an edited one its tool's schema accepts."""
        decision = parse_update(ApproveTool, raw, more)
        self._updates += 1
        try:
            budget = self._budget_requests.budget(decision)
        except ValueError as e:
            raise refused(str(e)) from None
        if budget is None:
            await self._approvals.check_input(decision)
        else:
            self._budget_requests.approve(budget)
        self._approvals.decisions[decision.tool_use_id] = decision
        return {"version": self._state.version}

    @approve_tool.validator
    @refusing
    @one_raw_input
    def _validate_approve_tool(self, raw: RawValue = NO_INPUT, *more: RawValue) -> None:
        decision = parse_update(ApproveTool, raw, more)
        self._approvals.check_waiting(decision.tool_use_id)
        self._budget_requests.budget(decision)  # new limits a run could go on with

    @workflow.update(name=DENY_TOOL_UPDATE)
    @one_raw_input
    def deny_tool(self, raw: RawValue = NO_INPUT, *more: RawValue) -> dict[str, Any]:
        """Refuse a waiting tool call: it never runs, and Claude sees the reason."""
        decision = parse_update(DenyTool, raw, more)
        self._updates += 1
        self._approvals.decisions[decision.tool_use_id] = decision
        return {"version": self._state.version}

    @deny_tool.validator
    @refusing
    @one_raw_input
    def _validate_deny_tool(self, raw: RawValue = NO_INPUT, *more: RawValue) -> None:
        self._approvals.check_waiting(parse_update(DenyTool, raw, more).tool_use_id)

    @workflow.update(name=ADVANCE_UPDATE)
    @one_raw_input
    async def advance(self, raw: RawValue = NO_INPUT, *more: RawValue) -> dict[str, Any]:
        """In step mode, let the run go on past the reply it paused after."""
        edit = parse_update(Advance, raw, more)
        self._updates += 1
        await self._steps.accept(edit)
        return {"version": self._state.version}

    @advance.validator
    @refusing
    @one_raw_input
    def _validate_advance(self, raw: RawValue = NO_INPUT, *more: RawValue) -> None:
        self._steps.check(parse_update(Advance, raw, more))

    @workflow.update(name=WAKE_UPDATE)
    @one_raw_input
    def wake(self, raw: RawValue = NO_INPUT, *more: RawValue) -> dict[str, Any]:
        """Cut short the sleep Claude asked for (the built-in ``sleep`` tool, ``sleep.py``)."""
        edit = parse_update(Wake, raw, more)
        self._updates += 1
        self._tool_calls.sleeps.wake(edit)
        return {"version": self._state.version}

    @wake.validator
    @refusing
    @one_raw_input
    def _validate_wake(self, raw: RawValue = NO_INPUT, *more: RawValue) -> None:
        parse_update(Wake, raw, more)
        self._tool_calls.sleeps.check_wake()

    # --- What the rooms see of the run (run_view.RunView) -----------------------------------------------------------

    @property
    def state(self) -> RunState:
        """Everything the run keeps (continue-as-new carries it whole); rooms change it in place."""
        return self._state

    @property
    def spec(self) -> RunSpec | None:
        """The run's checked input, ``None`` until the run has parsed it."""
        return self._spec

    @property
    def current_status(self) -> RunStatusName:
        """The status the ``status`` query reports now."""
        return self._status

    @property
    def ended(self) -> bool:
        """Whether the run has ended (it takes no more edits)."""
        return self._ended

    @property
    def draining(self) -> bool:
        """Whether the run is waiting for its handlers before continuing as new (no pause comes any more)."""
        return self._draining

    @property
    def in_flight(self) -> int | None:
        """The reply number of the model call under way, if any."""
        return self._model_calls.in_flight

    @property
    def run_input(self) -> dict[str, Any]:
        """The run's input as the client sent it (without the state a continuation carries)."""
        return self._input

    @property
    def approvals(self) -> Approvals:
        """Tool calls waiting for a person (``approvals.py``)."""
        return self._approvals

    @property
    def steps(self) -> StepMode:
        """The pauses of a run started with ``step`` (``approvals.py``)."""
        return self._steps

    @property
    def tool_calls(self) -> ToolCalls:
        """The run's tool calls (``tool_calls.py``), with its sleeps, sub-agents and toolsets."""
        return self._tool_calls

    def abandoned(self) -> str | None:
        """Why a tool call of the current reply must not start now: the run is stopping or the turn is retried."""
        if self._state.stop is not None:
            return "The run was stopped before this call was executed."
        if self._state.retry_queued:
            return "The turn is being retried; this call was not executed."
        return None

    # --- Live events, eager tools, search attributes -------------------------------------------------------------

    def event(self, event_type: str, **fields: Any) -> None:
        """Publish a live event (``contract/events.py``) of the current reply unless it names its ``iteration``.

        Publishing from the workflow costs no history: the stream is workflow state, rebuilt on replay.
        """
        turn = self._model_calls.in_flight or self._state.reply_count + (event_type == events.ITERATION_STARTED)
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

    def set_status(self, status: RunStatusName) -> None:
        """Change the run's status, and the search attributes that show it."""
        self._status = status
        self._publish_search_attributes()

    def _publish_search_attributes(self) -> None:
        # Only from this run's own event loop: a coroutine of an evicted run that the garbage collector closes later
        # runs its `finally` (an approval's `set_status`) inside whatever run is active then, and its upsert would
        # land in that run's history, which no replay of it repeats (a non-determinism error).
        if workflow.in_workflow() and workflow.instance() is self:
            publish(self._state, self._status)

    def iteration_in_flight(self) -> int | None:
        """The iteration the model call under way will be, if its reply is not a compaction."""
        in_flight = self._model_calls.in_flight
        return None if in_flight is None else in_flight - self._state.compactions

    # --- Activities ----------------------------------------------------------------------------------------------

    async def describe_tools(self, names: list[str], hooks: list[str] | None = None) -> DescribeToolsOutput:
        """Look tools (and result hooks) up on the workers: the ``describe_tools`` activity."""
        return await tool_lookup.describe_tools(names, hooks or [])  # local in runs begun since the umbrella

    # --- Queries (queries.py) ------------------------------------------------------------------------------------

    @workflow.query(name=STATUS_QUERY)
    def status(self) -> RunStatus:
        """The run's state: status, iterations, usage, transcript version and pending approvals."""
        status = status_of(self)
        return status if self._failure is None else status.model_copy(update={"stop_reason_detail": self._failure})

    @workflow.query(name=PENDING_APPROVALS_QUERY)
    def pending_approvals(self) -> list[dict[str, Any]]:
        """Tool calls waiting for a person."""
        return self._approvals.waiting()

    @workflow.query(name=FORK_POINT_QUERY)
    def fork_point(self, iteration: int) -> dict[str, Any]:
        """What a new run whose first request is this run's request for ``iteration`` (1 is the first) starts from."""
        return fork_point_of(self, iteration)

    @workflow.query(name=SEND_POINT_QUERY)
    def send_point(self) -> dict[str, Any]:
        """What a new run that goes on with this ended run's conversation starts from (``Run.send``)."""
        return send_point_of(self)

    @workflow.query(name=REPLIES_QUERY)
    def replies(self, after: int = 0) -> list[dict[str, Any]]:
        """Claude's replies, whole (id, content, stop reason, usage), from reply number ``after + 1`` on."""
        return replies_after(self, after)

    @workflow.query(name=TRANSCRIPT_QUERY)
    def transcript(self) -> dict[str, Any]:
        """The whole conversation, by reference, and its version (``{"version", "head", "pending", "length"}``)."""
        return transcript_of(self)
