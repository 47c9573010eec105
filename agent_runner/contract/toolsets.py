"""What travels between a run and the toolset activity (``activities/toolsets.py``): part of the durable contract.

A worker registers a runnable toolset of the SDK (``BetaRunnableToolset``: ``browser_toolset_20260801``,
``computer_toolset_20260801``, or one of your own); a run names it in ``tools`` by its family (``"browser"``). Each
action Claude asks for is a ``tool_use`` whose ``toolset_name`` is the family and whose ``name`` is the action; it
runs as one activity.

This module is imported by workflow code, so it holds no I/O.
"""

from __future__ import annotations

import re

from pydantic import BaseModel

from agent_runner.contract.types import RunToolInput

RUN_TOOLSET_ACTION_ACTIVITY = "agent_runner.run_toolset_action"
"""Runs one action of a registered toolset."""

RECONCILE_TOOLSET_ACTION_ACTIVITY = "agent_runner.reconcile_toolset_action"
"""Asks an ``at_most_once`` toolset's ``reconcile`` function whether an action whose outcome is unknown happened
(``ReconcileOutput``, as for a tool)."""

_TOOLSET_TYPE = re.compile(r"^(?P<family>.+)_toolset_\d{8}$")


def toolset_family(definition: dict[str, object]) -> str | None:
    """The family of a toolset's ``tools[]`` entry (``browser_toolset_20260801``: ``browser``); else ``None``."""
    match = _TOOLSET_TYPE.match(str(definition.get("type") or ""))
    return match.group("family") if match is not None and "name" not in definition else None


class ToolsetActionInput(BaseModel):
    """Input of ``agent_runner.run_toolset_action``: one action of a toolset (``call.name`` is the action)."""

    toolset: str
    """The family, as the ``tool_use`` block's ``toolset_name`` says."""
    call: RunToolInput
