"""The run's search attributes (``AgentRunStatus``, ``AgentRunIterations``, ...), kept current for ``list_runs``.

This module is imported by workflow code, so it holds no I/O.
"""

from __future__ import annotations

from typing import Any

from temporalio import workflow
from temporalio.common import SearchAttributeKey

from agent_runner.contract.types import SEARCH_ATTRIBUTE_TYPES, RunStatusName
from agent_runner.workflows.state import RunState

_KEYS: dict[str, Any] = {
    name: (SearchAttributeKey.for_int(name) if kind == "Int" else SearchAttributeKey.for_keyword(name))
    for name, kind in SEARCH_ATTRIBUTE_TYPES.items()
}

_WAITING = {
    "waiting_for_approval": "approval",
    "waiting_for_step": "step",
    "waiting_for_review": "review",
    "sleeping": "sleep",
}


def publish(state: RunState, status: RunStatusName) -> None:
    """Write the values that changed since the last call, when the fleet registered the attributes."""
    if not state.search_attributes:
        return
    if not workflow.in_workflow():
        # A worker evicting the run closes its coroutines, and a `finally` that sets the status (an approval's) runs
        # outside the workflow's event loop: nothing can be upserted then, and the run goes on elsewhere. (One the
        # garbage collector closes may run inside another run's loop: `AgentRun` publishes only from its own.)
        return
    values: dict[str, Any] = {
        "AgentRunStatus": status,
        "AgentRunIterations": state.iterations,
        "AgentRunTokens": state.usage.input_tokens + state.usage.output_tokens,
        "AgentRunWaiting": _WAITING.get(status, ""),
        "AgentRunModel": str(state.conversation.params.get("model", "")) if state.conversation else "",
    }
    changed = {k: v for k, v in values.items() if state.published.get(k) != v}
    if not changed:
        return
    # The command first: were it refused (a read-only context, a worker evicting the run), the values would count
    # as published and the run would never send them, while a replay of its history would.
    workflow.upsert_search_attributes([_KEYS[k].value_set(v) for k, v in changed.items()])
    state.published.update(changed)
