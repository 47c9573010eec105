"""What a compaction between turns needs: no compaction edit beside it, and a summary to replace the history with.

The SDK's ``_check_can_compact`` (``_beta_runner.py:379-389``) refuses ``compact_before_next_turn()`` while the
request's ``context_management`` has a ``compact_`` edit, and ``set_messages_params`` refuses adding one while a
compaction waits: the compaction request is sent without ``context_management``, so the API would run and bill it,
then reject the next request, where the compaction block and the edit meet. A compaction reply without a summary
leaves the conversation as it was (``_beta_runner.py:433-435``).

This module is imported by workflow code, so it holds no I/O.
"""

from __future__ import annotations

from typing import Any

EMPTY_COMPACTION_PATCH = "empty-compaction-keeps-the-history"
"""``workflow.patched`` id: a compaction reply without a summary keeps the conversation and its thread (issue 13)."""

COMPACTION_AT_THE_END_PATCH = "compaction-at-the-end-as-the-sdk"
"""``workflow.patched`` id: a compaction queued when the run stops (``max_iterations``, a budget, a stop) is not sent,
and one queued when the final turn ended is, as the SDK compacts after its final turn (issue 13)."""


def compaction_edits(context_management: Any) -> list[str]:
    """The ``compact_`` edits of a ``context_management`` parameter, by type."""
    edits = context_management.get("edits") if isinstance(context_management, dict) else None
    return [
        str(edit["type"])
        for edit in edits or ()
        if isinstance(edit, dict) and isinstance(edit.get("type"), str) and edit["type"].startswith("compact_")
    ]


def check_can_compact(context_management: Any) -> None:
    """Refuse a compaction beside a compaction edit (``ValueError`` saying what to do)."""
    edits = compaction_edits(context_management)
    if edits:
        raise ValueError(
            f"A compaction can't be asked for while `context_management` has a compaction edit ({', '.join(edits)}): "
            "the API doesn't accept a compaction block together with one, so the compaction request would be billed "
            "and the next request rejected. Remove the edit first (`update_params(context_management=...)`)."
        )


def check_no_compaction_edit(context_management: Any) -> None:
    """Refuse a compaction edit while a compaction is queued (``ValueError`` saying what to do)."""
    edits = compaction_edits(context_management)
    if edits:
        raise ValueError(
            f"`context_management` can't get a compaction edit ({', '.join(edits)}) while a compaction is queued: "
            "the API doesn't accept a compaction block together with one. Send it once the compaction has applied."
        )


def final_reply(replies: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The reply a run ends on: its last, unless that is a compaction without a summary.

    Such a compaction left the conversation as it was, and the SDK's ``until_done()`` returns the turn before it.
    """
    if len(replies) > 1 and replies[-1].get("stop_reason") == "compaction" and not has_summary(replies[-1]):
        return replies[-2]
    return replies[-1] if replies else None


def has_summary(reply: dict[str, Any]) -> bool:
    """Whether a compaction reply holds a summary to replace the history with (a ``compaction`` block with content)."""
    return any(
        isinstance(block, dict) and block.get("type") == "compaction" and block.get("content")
        for block in reply.get("content") or []
    )
