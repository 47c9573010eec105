"""The run's model calls: one request to Claude and its reply, with the SDK's thread and refusal fallbacks.

``ModelCalls.create`` runs the ``create_message`` activity for a turn (or a compaction) and hands back the reply,
unrecorded: ``AgentRun`` takes it into the run. On the way it follows the ``refusal_fallbacks`` chain
(``fallbacks.py``) and the thread fallbacks (``Conversation``, ``agent_runner/contract/conversation.py``), each behind
its ``workflow.patched`` id, so runs recorded before replay as they ran.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError

with workflow.unsafe.imports_passed_through():
    from agent_runner.contract import events
    from agent_runner.contract.conversation import (
        THREAD_UNSUPPORTED_CODE,
        THREAD_UNSUPPORTED_ERROR,
        Conversation,
        served_by_fallback,
    )
    from agent_runner.contract.errors import MalformedReply
    from agent_runner.contract.run_input import RunSpec
    from agent_runner.contract.transcript import canonical, is_short, message_ref, next_head, ref_for
    from agent_runner.contract.types import (
        CREATE_MESSAGE_ACTIVITY,
        THREAD_LOST_ERROR,
        CreateMessageInput,
        CreateMessageOutput,
        ModelTurn,
        Usage,
    )
    from agent_runner.workflows import live
    from agent_runner.workflows.eager import EagerTools
    from agent_runner.workflows.failures import activity_failure, fail, failing_the_run, retry_policy
    from agent_runner.workflows.fallbacks import (
        FALLBACK_SPLICE_PATCH,
        REFUSAL_FALLBACKS_PATCH,
        Splice,
        credit_token,
        hop_turn,
        inherits_fast_speed,
        without_fast_speed,
    )
    from agent_runner.workflows.history_size import input_run_id, lean_turn, turn_summary, whole_output
    from agent_runner.workflows.patches import implied
    from agent_runner.workflows.reply import reply_problems
    from agent_runner.workflows.request_shape import take_sdk_request_shape
    from agent_runner.workflows.state import RunState

if TYPE_CHECKING:
    from agent_runner.workflows.run_view import RunView

THREAD_FALLBACKS_PATCH = "thread-fallbacks-as-the-sdk"
"""``workflow.patched`` id of the SDK's thread fallbacks (issue 13): resend without a thread after
``thread_unsupported_request`` or a thread lost again right after a replay, and a new thread after a reply a fallback
model served. Asked where one of them first decides, so runs recorded before keep the rules they ran with
(``Conversation.thread_fallbacks``)."""

REFUSED_TURN_PATCH = "refused-turn-not-kept-on-a-thread"
"""``workflow.patched`` id of leaving a refused reply out of a threaded history, as the SDK does (issue 13); runs
recorded before keep it in their history."""


def drops_refused_turn(conversation: Conversation, reply: dict[str, Any]) -> bool:
    """Whether a refused reply stays out of a threaded history, unless this run was recorded keeping it."""
    return reply.get("stop_reason") == "refusal" and conversation.threading and implied(REFUSED_TURN_PATCH)


def take_thread_fallbacks(conversation: Conversation) -> None:
    """Follow the SDK's thread fallbacks from now on, unless this run was recorded without them.

    Asked only where one of them decides differently, so the marker is recorded there and nowhere else.
    """
    if not conversation.thread_fallbacks and implied(THREAD_FALLBACKS_PATCH):
        conversation.thread_fallbacks = True


def take_reply(state: RunState, conversation: Conversation, reply: dict[str, Any]) -> None:
    """Add a reply to the run: its replies, usage, fork points and history (stored when the call says so)."""
    transcript = conversation.transcript
    # A fork starts from the history Claude answered, named by its head (unknown for runs older than the store).
    state.fork_points.append(transcript.head if state.stored else None)
    state.replies.append(reply)
    state.usage = state.usage.add(reply.get("usage"))
    state.turn_input_tokens = Usage().add(reply.get("usage")).all_input_tokens
    if drops_refused_turn(conversation, reply):
        # The SDK does not record a refused turn on a thread (`_thread_state.py`, before `_store_turn`): the
        # conversation goes on without it, on a new thread.
        if conversation.previous_message_id is not None:
            conversation.start_new_thread("refusal")
    else:
        conversation.record_reply(reply)
    if state.stored:
        transcript.store_pending()


def own_settings_ref(
    own: ModelTurn, sent: ModelTurn, spec: RunSpec, fallback_index: int | None, short: bool
) -> str | None:
    """The ref of the run's own settings when the ``sent`` turn carries all their big values as they are, else ``None``.

    A call stores the settings it sends (``RunState.own_settings_stored``). The first hop of a refusal-fallback chain
    (``fallback_index`` ``None``) adds only the chain's beta (and a credit token) to the run's own; a later hop's entry
    may replace any of them.
    """
    if not spec.refusal_fallbacks:
        return sent.settings_ref
    if fallback_index is not None or own.settings is None:
        return None
    if is_short(own.settings_ref) == short:
        return own.settings_ref  # named as the run names what it stores now: every call but the run's first
    return ref_for(canonical(own.settings), short=short)


class ModelCalls:
    """The run's model calls, and which one is under way."""

    def __init__(self, run: RunView, eager: EagerTools) -> None:
        self._run = run
        self._eager = eager
        self.in_flight: int | None = None
        """The reply number of the model call under way."""
        self.reply_attempt = 0
        """The attempt that wrote the last reply."""

    async def create(
        self,
        spec: RunSpec,
        conversation: Conversation,
        compaction: dict[str, Any] | None = None,
        keep_from: int | None = None,
    ) -> dict[str, Any]:
        """One model call. The reply is returned, not recorded; ``RunState.stored`` says whether it stored the turn.

        A compaction that keeps recent turns sends only the messages before ``keep_from``.
        """
        state = self._run.state
        options = spec.model_activity
        reply_number = state.reply_count + 1
        eager = spec.eager_tools and spec.step is None and compaction is None
        self._run.event(events.ITERATION_STARTED)
        token: str | None = None
        refusal: dict[str, Any] | None = None  # the refusal being fallen back from, while hopping down the chain
        chain: Splice | None = None  # the middleware's streaming splice of the hops (fallbacks.py)
        with_partial = True  # False once the hop's server rejected the prefill: it is sent once more without it
        without_speed = False  # True once an entry that inherited `speed: fast` was over capacity
        lean = False  # whether the call answers lean (``history_size.py``): each call of a run since the patch does
        while True:
            take_sdk_request_shape(conversation, compaction is not None)
            turn = conversation.turn(compaction, keep_from)
            own = turn  # the run's own settings, which a refusal-fallback chain's hop sends changed
            if spec.refusal_fallbacks:
                index = state.fallback_index
                splice = None
                if chain is not None and index is not None:
                    splice = chain.hop(str(spec.refusal_fallbacks[index]["model"]), with_partial=with_partial)
                entries = without_fast_speed(spec.refusal_fallbacks, index) if without_speed else spec.refusal_fallbacks
                turn = hop_turn(turn, entries, index, token, splice)
            model = str((turn.settings or {}).get("params", {}).get("model"))
            turn, lean = lean_turn(turn, conversation.transcript)
            own_ref = own_settings_ref(own, turn, spec, state.fallback_index, conversation.transcript.short_refs)
            if turn.settings_ref == state.settings_stored:
                turn = turn.model_copy(update={"settings": None})
            try:
                self.in_flight = reply_number
                self._eager.token = str(workflow.uuid4()) if eager else ""
                output: CreateMessageOutput = await workflow.execute_activity(
                    CREATE_MESSAGE_ACTIVITY,
                    CreateMessageInput(
                        turn=turn,
                        replies_head=state.replies_head,
                        run_id=input_run_id(),
                        iteration=reply_number,
                        eager_tools=eager,
                        eager_token=self._eager.token,
                        continue_cut=spec.continue_cut_replies and compaction is None,
                    ),
                    result_type=CreateMessageOutput,
                    start_to_close_timeout=options.start_to_close_timeout,
                    heartbeat_timeout=live.model_heartbeat_timeout(options),
                    retry_policy=retry_policy(options),
                    task_queue=options.task_queue,
                    summary=turn_summary(reply_number, conversation.params["model"], spec.params.get("model"), lean),
                )
                output = whole_output(output, lean)
                problems = reply_problems(output.message)
                if problems:
                    raise fail(MalformedReply(f"Claude's reply cannot be used: {'; '.join(problems)}."))
                state.stored = output.stored
                hop = self._falls_back(spec, conversation, output.message)
                if output.stored:
                    state.settings_stored = turn.settings_ref
                    if own_ref is not None:
                        state.own_settings_stored = own_ref
                    if not hop:  # a refused hop is not one of the run's replies
                        state.replies_head = next_head(state.replies_head, message_ref(output.message, lean))
                    if keep_from is None:
                        # The call stored the turn's pending messages, which are the history's only when it sent
                        # the whole history.
                        conversation.transcript.store_pending()
                self.reply_attempt = output.attempt
                if hop:
                    token, refusal, with_partial = credit_token(output.message), output.message, True
                    without_speed = False
                    if chain is not None and turn.splice is not None:
                        chain.refused(output.message, turn.splice, output.attempt, output.opening_usage)
                    elif implied(FALLBACK_SPLICE_PATCH):
                        chain = Splice(output.message, model, output.attempt, output.opening_usage)
                    continue
                if live.records_calls():
                    self._run.event(events.RECORDED_CALL, attempt=output.attempt)
                self._run.event(events.REPLY, message=output.message)
                if conversation.threading and served_by_fallback(output.message):
                    take_thread_fallbacks(conversation)
                return output.message
            except ActivityError as e:
                cause = e.cause
                if isinstance(cause, ApplicationError) and cause.type in (THREAD_LOST_ERROR, THREAD_UNSUPPORTED_ERROR):
                    code = cause.message if cause.type == THREAD_LOST_ERROR else THREAD_UNSUPPORTED_CODE
                    previous = turn.previous_message_id
                    if conversation.takes_thread_fallback(code, continuing=previous is not None):
                        take_thread_fallbacks(conversation)
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
                    and implied(FALLBACK_SPLICE_PATCH)
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
                    state.replies_head = next_head(state.replies_head, message_ref(refusal, lean))
                    self._run.event(events.REPLY, message=refusal)
                    return refusal
                raise activity_failure(e) from None
            finally:
                self.in_flight = None
                self._eager.token = ""

    async def _record_replay(
        self, spec: RunSpec, conversation: Conversation, reply: dict[str, Any], reply_number: int
    ) -> dict[str, Any]:
        """Store ``reply`` as the model call stores a reply, without calling the API; the reply as stored."""
        state = self._run.state
        turn, lean = lean_turn(conversation.turn().model_copy(update={"replay": reply}), conversation.transcript)
        options = spec.model_activity
        with failing_the_run():  # as a model call that gives up
            output: CreateMessageOutput = await workflow.execute_activity(
                CREATE_MESSAGE_ACTIVITY,
                CreateMessageInput(
                    turn=turn, replies_head=state.replies_head, run_id=input_run_id(), iteration=reply_number
                ),
                result_type=CreateMessageOutput,
                start_to_close_timeout=options.start_to_close_timeout,
                retry_policy=retry_policy(options),
                task_queue=options.task_queue,
                summary=f"turn {reply_number} · the refusal stands",
            )
        output = whole_output(output, lean)
        state.settings_stored = turn.settings_ref
        conversation.transcript.store_pending()
        return output.message

    def _falls_back(self, spec: RunSpec, conversation: Conversation, reply: dict[str, Any]) -> bool:
        """Whether a refused reply goes down the ``refusal_fallbacks`` chain (``fallbacks.py``).

        If it does, the run is pinned to the next entry, and the refused hop's usage, which is billed, is counted. A
        refused ``continue`` is sent again on a new thread, since the server may hold the refused turn (the rule
        ``Conversation.record_reply`` follows for a refusal the run keeps).
        """
        state = self._run.state
        following = -1 if state.fallback_index is None else state.fallback_index
        if (
            reply.get("stop_reason") != "refusal"
            or following + 1 >= len(spec.refusal_fallbacks)
            or not implied(REFUSAL_FALLBACKS_PATCH)
        ):
            return False
        if credit_token(reply) is None and reply.get("content") and implied(FALLBACK_SPLICE_PATCH):
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
        state = self._run.state
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
