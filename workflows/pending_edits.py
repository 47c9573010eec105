"""Queued edits that count before the boundary applies them, and edits that wait out a paused turn.

The SDK's runner methods act at once: ``add_tools`` of a function tool runs it for the reply being handled, and a raw
definition added under a function tool's name stops that tool running (``_beta_runner.py:496-503``, its
``_tool_overrides``). A run queues its edits for the iteration boundary, so the tool calls of the reply being handled
read the queue (``last_addition``). The SDK also holds tool changes while a turn is paused, since the turn sent back to
be resumed has to stay last, and starts no compaction until the turn is resumed (``_beta_runner.py:545-551, 718-721``):
``waits_out_the_pause`` says which queued edits stay queued at such a boundary.

This module is imported by workflow code, so it holds no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal

from agent_runner.workflows.edits import QueuedAddTools, QueuedCompact, QueuedEdit, QueuedRemoveTools

TOOL_ADDITIONS_PATCH = "tool-additions-apply-at-once"
"""``workflow.patched`` id: a queued ``add_tools`` counts for the reply being handled (a registered tool added by name
runs its calls, a raw definition stops a tool of its name), and an applied raw definition keeps that tool from running
(issue 13)."""

PAUSE_HOLDS_PATCH = "pause-turn-holds-tool-changes-and-compaction"
"""``workflow.patched`` id: tool changes wait while the turn is paused (``pause_turn``), and a compaction while it is
resumed (``pause_turn``, ``compaction``), as in the SDK (issue 13)."""

Addition = Literal["function", "definition"]


def last_addition(queue: Iterable[QueuedEdit], name: str) -> Addition | None:
    """How the last queued tool change naming ``name`` adds it, if it adds it.

    Returns:
        ``"function"`` for a registered tool added by name (the SDK runs it at once), ``"definition"`` for a raw
        definition (the SDK stops running a tool of that name), ``None`` when no queued change names it or the last
        one removes it (``ToolCalls.withdrawn`` counts removals already).
    """
    last: Addition | None = None
    for edit in queue:
        if isinstance(edit, QueuedRemoveTools) and name in edit.payload.names:
            last = None
        elif isinstance(edit, QueuedAddTools):
            for tool in edit.payload.tools:
                if tool == name:
                    last = "function"
                elif isinstance(tool, dict) and tool.get("name") == name:
                    last = "definition"
    return last


def replaced_by_definitions(tools: Iterable[str | dict[str, Any]], runnable: Iterable[str]) -> list[str]:
    """The runnable tools that raw definitions among ``tools`` replace, so that they no longer run.

    In ``add_tools``'s order: a later addition by name of the same tool runs it again.
    """
    replaced: dict[str, bool] = {}
    names = set(runnable)
    for tool in tools:
        if isinstance(tool, dict) and tool.get("name") in names:
            replaced[str(tool["name"])] = True
        elif isinstance(tool, str):
            replaced.pop(tool, None)
    return list(replaced)


def waits_out_the_pause(edit: QueuedEdit, stop_reason: str | None) -> bool:
    """Whether ``edit`` stays queued at a boundary that follows a reply with ``stop_reason``.

    Tool changes wait while the turn is paused (``pause_turn``): the resuming request must send the paused reply last.
    A compaction waits while the turn is being resumed (``pause_turn``, or a ``compaction`` stop inside a turn): the
    API cannot compact a conversation that ends mid-turn.
    """
    if isinstance(edit, QueuedAddTools | QueuedRemoveTools):
        return stop_reason == "pause_turn"
    if isinstance(edit, QueuedCompact):
        return turn_is_paused(stop_reason)
    return False


def turn_is_paused(stop_reason: str | None) -> bool:
    """Whether a reply with ``stop_reason`` is sent back for the server to resume its turn."""
    return stop_reason in ("pause_turn", "compaction")
