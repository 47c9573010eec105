"""The iteration boundary: the queued edits, applied one by one in the order accepted, before the next model call.

An edit waits out a paused turn (``pending_edits.py``); a compaction is not sent once the run stops here, as the SDK
checks its stop rules before a pending compaction, but the compactions queued as the final turn ended run after it
(``compaction_checks.py``). Edits still queued when the run ends are answered with an error, never dropped.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from agent_runner.contract.steering import (
        TO_GO_ON,
        AddTools,
        Compact,
        EditOutcome,
        InjectMessage,
        RemoveTools,
        ReplaceHistory,
        RetryTurn,
        UpdateParams,
    )
    from agent_runner.workflows.background import BackgroundCompaction
    from agent_runner.workflows.carry import held_definition
    from agent_runner.workflows.compaction import Compactions
    from agent_runner.workflows.compaction_checks import COMPACTION_AT_THE_END_PATCH
    from agent_runner.workflows.edits import (
        TOOLSETS_FIXED_PATCH,
        EditFailed,
        QueuedCompact,
        QueuedEdit,
        added_toolsets,
        expected_version,
    )
    from agent_runner.workflows.failures import not_registered
    from agent_runner.workflows.forking import note_tools
    from agent_runner.workflows.patches import implied
    from agent_runner.workflows.pending_edits import (
        PAUSE_HOLDS_PATCH,
        TOOL_ADDITIONS_PATCH,
        replaced_by_definitions,
        waits_out_the_pause,
    )
    from agent_runner.workflows.plain_json import as_held
    from agent_runner.workflows.state import RunState

RETRY_KEEPS_EDITS_PATCH = "retry-keeps-edits"
"""``workflow.patched`` id, asked only when a retry drops a reply after which edits added content (an injected
message, tool changes): that content is kept (``Conversation.drop_last_reply``); before, it was lost with the reply."""

if TYPE_CHECKING:
    from agent_runner.workflows.run_view import RunView


def paused(state: RunState, holds: Callable[[str | None], bool]) -> bool:
    """Whether ``holds`` keeps something back for the turn the last reply paused (``pending_edits.py``).

    Asked of the patch only where it holds something, so runs recorded before replay as they ran.
    """
    last = state.last_reply
    return holds(last.get("stop_reason") if last else None) and implied(PAUSE_HOLDS_PATCH)


class Boundary:
    """The run's queued edits at the iteration boundary."""

    def __init__(
        self,
        run: RunView,
        compactions: Compactions,
        background: BackgroundCompaction,
        stops: Callable[[], bool],
    ) -> None:
        self._run = run
        self._compactions = compactions
        self._background = background
        self._stops = stops
        """Whether the run stops at this boundary (the loop's stop rules), asked of a queued compaction."""

    async def apply(self) -> None:
        """Apply every queued edit, in the order accepted, before the next model call."""
        state = self._run.state
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
        state = self._run.state
        try:
            await self._apply_edit(edit)
            state.edits_applied += 1
            state.version += 1
            state.outcomes[edit.seq] = EditOutcome(seq=edit.seq, version=state.version, kind=edit.kind)
        except EditFailed as e:
            state.outcomes[edit.seq] = EditOutcome(seq=edit.seq, error=str(e), kind=edit.kind)

    def _held(self, edit: QueuedEdit) -> bool:
        """Whether ``edit`` stays queued at this boundary.

        It waits out a paused turn, or it is a compaction and the run stops here: the SDK checks its stop rules before
        a pending compaction, so none is sent then.
        """
        if paused(self._run.state, functools.partial(waits_out_the_pause, edit)):
            return True
        return isinstance(edit, QueuedCompact) and self._stops() and implied(COMPACTION_AT_THE_END_PATCH)

    async def after_final_turn(self) -> None:
        """Apply the compactions queued when the final turn ended, as the SDK compacts after its final turn.

        Skipped, as there, when the final reply has tool calls without results (``_apply_edit`` says so).
        """
        state = self._run.state
        compactions = [edit for edit in state.queue if isinstance(edit, QueuedCompact)]
        if compactions and implied(COMPACTION_AT_THE_END_PATCH):
            for edit in compactions:
                state.queue.remove(edit)
                await self._apply_queued(edit)

    async def _apply_edit(self, edit: QueuedEdit) -> None:
        state = self._run.state
        conversation = state.conversation
        assert conversation is not None
        expected = expected_version(edit.payload)
        # The version was checked when the edit was accepted. Since then the run's own tool results (for the reply
        # the client saw) may have moved it; only another edit applied in between makes this one stale.
        stale = expected != state.version if edit.edits_applied is None else edit.edits_applied != state.edits_applied
        # But a reply that came after the edit was accepted (it was sent mid-turn) is one the sender had not seen.
        stale = stale or (edit.replies is not None and edit.replies != state.iterations)
        if expected is not None and stale:
            raise EditFailed(_stale_text(expected, state))
        match edit.payload:
            case InjectMessage(content=content, held=held):
                content = as_held(content, held)
                conversation.join_user_content(
                    [{"type": "text", "text": content}] if isinstance(content, str) else content
                )
            case RetryTurn():
                try:
                    dropped = conversation.drop_last_reply(lambda: workflow.patched(RETRY_KEEPS_EDITS_PATCH))
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
            case AddTools(tools=tools, held=held):
                described = await self._run.describe_tools([t for t in tools if isinstance(t, str)])
                if described.missing:
                    raise EditFailed(str(not_registered(described.missing)))
                specs = {tool.name: tool for tool in described.tools}
                fixed = added_toolsets(specs)
                if fixed and implied(TOOLSETS_FIXED_PATCH):
                    raise EditFailed(fixed)
                replaced = replaced_by_definitions(tools, state.tools)
                if replaced and implied(TOOL_ADDITIONS_PATCH):
                    for name in replaced:
                        state.tools.pop(name)  # a raw definition is sent, never run, as in the SDK
                state.tools.update(specs)
                note_tools(state)
                definitions = [specs[t].definition if isinstance(t, str) else held_definition(t, held) for t in tools]
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
                await self._compactions.compact(
                    conversation, compaction, keep_recent_turns, edit=True, background=background
                )
            case RemoveTools(names=names):
                for name in names:
                    state.tools.pop(name, None)
                note_tools(state)
                conversation.append_system_content(
                    [{"type": "tool_removal", "tool": {"type": "tool_reference", "name": n}} for n in names]
                )

    def fail_stale(self) -> None:
        """Answer now the queued edits a reply that came after them made stale (``_Queued.replies``).

        The loop acts on what is queued as a turn ends: a queued retry keeps the reply's tools from running, a queued
        message keeps a finished turn going. A stale one would then fail at the boundary, leaving a reply's calls
        without results, or sending the same conversation again.
        """
        state = self._run.state
        for edit in [e for e in state.queue if e.replies is not None and e.replies != state.iterations]:
            state.queue.remove(edit)
            state.outcomes[edit.seq] = EditOutcome(
                seq=edit.seq, error=_stale_text(expected_version(edit.payload), state), kind=edit.kind
            )

    def fail_queued(self) -> None:
        """Edits still queued when the run ends are answered, never silently dropped."""
        state = self._run.state
        for edit in state.queue:
            state.outcomes[edit.seq] = EditOutcome(
                seq=edit.seq,
                error=f"The run ended ({self._run.current_status}) before this edit could apply; nothing was changed. "
                + TO_GO_ON,
                kind=edit.kind,
            )
        state.queue.clear()


def _stale_text(expected: int | None, state: RunState) -> str:
    return (
        f"The transcript changed since version {expected} (it is now at {state.version}); nothing was changed. Read "
        "the transcript again and resend the edit with its version."
    )
