"""Compacting the run's conversation: Claude's summary of the history replaces it.

A compaction is one model call (``model_calls.py``) on a new thread, or, with ``background``, a task that runs while
the run goes on (``background.py``). Asked by ``auto_compact`` before a request, or by a client's ``compact`` edit.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from agent_runner.contract.conversation import Conversation
    from agent_runner.workflows.background import BackgroundCompaction
    from agent_runner.workflows.compaction_checks import EMPTY_COMPACTION_PATCH, has_summary
    from agent_runner.workflows.edits import EditFailed
    from agent_runner.workflows.model_calls import ModelCalls
    from agent_runner.workflows.patches import implied

FAILED_COMPACTION_FAILS_THE_EDIT_PATCH = "failed-compaction-fails-the-edit"
"""``workflow.patched`` id, asked only when a client's compaction failed: the edit fails and the run goes on (before,
the run failed with it)."""

if TYPE_CHECKING:
    from agent_runner.workflows.run_view import RunView


class Compactions:
    """The run's compactions, now or in the background."""

    def __init__(self, run: RunView, model_calls: ModelCalls, background: BackgroundCompaction) -> None:
        self._run = run
        self._model_calls = model_calls
        self._background = background

    async def compact(
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
        spec = self._run.spec
        assert spec is not None
        state = self._run.state
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
        try:
            reply = await self._model_calls.create(spec, conversation, compaction, keep_from)
        except ApplicationError as e:  # the model call gave up, or Claude's API refused the request
            if not edit or not workflow.patched(FAILED_COMPACTION_FAILS_THE_EDIT_PATCH):
                raise
            # A client's compaction is an edit like any other: when it cannot be made, it fails, and the run goes on.
            reason = re.sub(r"\s*Fix the run's input.*$", "", e.message, flags=re.DOTALL)
            raise EditFailed(
                f"The compaction failed; nothing was changed, and the run goes on. {reason} Fix its request (the "
                "`compaction`, or the run's parameters through `update_params`) and ask again."
            ) from None
        state.replies.append(reply)
        state.fork_points.append(None)
        state.compactions += 1
        state.usage = state.usage.add(reply.get("usage"))
        state.turn_input_tokens = 0
        if not has_summary(reply) and implied(EMPTY_COMPACTION_PATCH):
            workflow.logger.warning("Compaction produced no summary; keeping the conversation as it is.")
            if edit:
                raise EditFailed("Compaction produced no summary; the conversation was kept as it is. Ask again.")
            return
        conversation.record_compaction(reply, keep_from)
