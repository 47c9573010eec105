"""Compaction in the background (``compact(background=True)``, ``auto_compact.background``; issue 13).

A background compaction summarizes the history as it is when it starts (all of it, or all but the last
``keep_recent_turns`` turns) while the run goes on with its turns. When the summary has arrived, the next iteration
boundary puts it in place of the messages it summarized; every message after them (the turns kept, and the turns the
run took meanwhile) follows it verbatim, and the next turn starts a new thread from it.

- The summary applies only if the messages it summarized are still the run's: an edit that changed them meanwhile
  (``replace_history``, ``retry_turn`` back into them, another compaction, content joined to one of them) discards
  it, with a warning in the worker's log.
- One runs at a time; a continuation (continue-as-new) and the end of the run first wait for it and apply it.
- Its request is the model call's activity, as a compaction's, but it is not one of the run's replies: it has no
  reply number or fork point, and its live events say ``iteration`` 0. Its usage is counted when it applies.
- A failed background compaction, or a reply without a ``compaction`` block (a refusal), does not fail the run: the
  run goes on with its history as it was.

This module is workflow code: deterministic, no I/O.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from agent_runner.contract.conversation import Conversation
    from agent_runner.contract.transcript import Transcript, message_ref
    from agent_runner.contract.types import CREATE_MESSAGE_ACTIVITY, CreateMessageInput, CreateMessageOutput
    from agent_runner.workflows.failures import retry_policy
    from agent_runner.workflows.fallbacks import hop_turn
    from agent_runner.workflows.history_size import input_run_id
    from agent_runner.workflows.reply import reply_problems
    from agent_runner.workflows.request_shape import take_sdk_request_shape

if TYPE_CHECKING:
    from agent_runner.workflows.run_view import RunView


def summarized_refs(transcript: Transcript, length: int) -> list[str] | None:
    """The names of the first ``length`` messages, or ``None`` when the run no longer holds some of them whole."""
    if length < transcript.offset or length > len(transcript):
        return None
    refs = [mark.ref for mark in transcript.marks]
    refs.extend(message_ref(m, transcript.short_refs) for m in transcript.pending)  # named as a model call will
    return [f"base:{transcript.base}", *refs[: length - transcript.offset]]


class BackgroundCompaction:
    """The run's background compaction, while one is under way (this execution's own: never carried)."""

    def __init__(self, run: RunView) -> None:
        self._run = run
        self._task: asyncio.Task[dict[str, Any] | None] | None = None
        self._keep_from = 0
        self._summarized: list[str] | None = None

    @property
    def running(self) -> bool:
        """Whether one was started and has not been applied (or discarded) yet."""
        return self._task is not None

    def start(self, conversation: Conversation, compaction: dict[str, Any], keep_from: int) -> None:
        """Summarize the messages before ``keep_from`` while the run goes on."""
        run = self._run
        spec = run.spec
        assert spec is not None and self._task is None
        take_sdk_request_shape(conversation, compaction=True)
        turn = conversation.turn(compaction, keep_from)
        if spec.refusal_fallbacks:
            turn = hop_turn(turn, spec.refusal_fallbacks, run.state.fallback_index)
        self._keep_from = keep_from
        self._summarized = summarized_refs(conversation.transcript, keep_from)
        options = spec.model_activity
        workflow.logger.info("Compacting in the background: the first %d messages", keep_from)

        async def call() -> dict[str, Any] | None:
            try:
                output: CreateMessageOutput = await workflow.execute_activity(
                    CREATE_MESSAGE_ACTIVITY,
                    CreateMessageInput(turn=turn, run_id=input_run_id(), iteration=0),
                    result_type=CreateMessageOutput,
                    start_to_close_timeout=options.start_to_close_timeout,
                    heartbeat_timeout=options.heartbeat_timeout,
                    retry_policy=retry_policy(options),
                    task_queue=options.task_queue,
                    summary=f"background compaction · {conversation.params['model']}",
                )
            except ActivityError as e:
                workflow.logger.warning("The background compaction failed; the history stays as it is: %s", e)
                return None
            problems = reply_problems(output.message)
            if problems:
                workflow.logger.warning("The background compaction's reply cannot be used: %s", "; ".join(problems))
                return None
            return output.message

        self._task = asyncio.create_task(call())

    async def settle(self, conversation: Conversation, *, wait: bool) -> None:
        """Put the summary in place if it arrived (``wait``: once it arrives); nothing while none runs."""
        task = self._task
        if task is None or (not wait and not task.done()):
            return
        reply = await task
        self._task = None
        if reply is None:
            return
        state = self._run.state
        state.usage = state.usage.add(reply.get("usage"))
        if not any(isinstance(b, dict) and b.get("type") == "compaction" for b in reply.get("content") or []):
            workflow.logger.warning(
                "Discarded the background compaction: its reply (%s) holds no summary.", reply.get("stop_reason")
            )
            return
        if summarized_refs(conversation.transcript, self._keep_from) != self._summarized:
            workflow.logger.warning(
                "Discarded the background compaction: the messages it summarized changed while it ran."
            )
            return
        conversation.record_compaction(reply, self._keep_from)
        state.turn_input_tokens = 0
        state.version += 1
