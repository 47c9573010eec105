"""Eager tools (``eager_tools``): a tool starts as soon as its ``tool_use`` block has streamed, before the reply ends.

The model-call activity signals each complete block (``tool_use_ready``) with the token of the call under way; the
run starts the tool at once and, when the reply arrives, uses the result for the reply's own block. As the SDK's
``run_tools_eagerly``, a started tool whose block the final reply does not hold (a retried attempt wrote another)
ran, but its result is never sent.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from agent_runner.contract.transcript import canonical, is_placeholder, ref_for, stored
    from agent_runner.workflows.reply import parse_tool_use_ready

if TYPE_CHECKING:
    from agent_runner.workflows.run_view import RunView


class EagerTools:
    """The tools started early for the model call under way."""

    def __init__(self, run: RunView) -> None:
        self._run = run
        self._started: dict[str, tuple[dict[str, Any], asyncio.Task[dict[str, Any]]]] = {}
        """The blocks and tasks of tools started before the reply ended, by ``tool_use_id``."""
        self._attempt = 0
        """The model-call attempt whose ``tool_use`` blocks ``_started`` holds."""
        self.token = ""
        """The token of the model call under way with ``eager_tools``: only its signals start tools."""

    def ready(self, raw: Any) -> None:
        """Start a tool whose ``tool_use`` block is complete while the reply still streams (``tool_use_ready``).

        Only a well-formed block of the model call under way counts, carrying that call's token, of a registered
        tool that needs no approval; a later attempt's blocks replace an earlier one's (whose tools already ran, as
        the SDK's eager mode also runs tools before the reply is final). Anything else is dropped with a warning:
        a signal must never be able to wedge the run or run a tool the run did not ask for.
        """
        run = self._run
        ready, problem = parse_tool_use_ready(raw)
        if ready is None or not self.token or ready.token != self.token:
            workflow.logger.warning("Ignored a tool_use_ready signal: %s", problem or "not from the call under way")
            return
        if ready.iteration != run.in_flight or ready.attempt < self._attempt:
            return
        block = ready.block
        # An unknown tool only gets an error, and a person must not be asked about a call that the reply may yet not
        # run: both start with the reply instead.
        spec = run.state.tools.get(str(block["name"]))
        if run.tool_calls.toolsets.takes(block):
            return  # a toolset's actions start with the reply, in order (``toolsets.py``), never early
        if spec is None or run.approvals.needed(spec) or run.tool_calls.withdrawn(spec.name):
            return
        if spec.agent is not None:
            return  # a registered agent's child run starts with the reply, as a declared agent's does
        if run.tool_calls.recorded.active:
            return  # a what-if run's call may take a recorded result, which a dropped reply must not use up
        if ready.attempt > self._attempt:
            self._started, self._attempt = {}, ready.attempt
        tool_use_id = str(block["id"])
        if tool_use_id not in self._started:
            task = asyncio.create_task(run.tool_calls.run(block, iteration=ready.iteration))
            self._started[tool_use_id] = (block, task)

    def take(self, reply: dict[str, Any], reply_attempt: int) -> dict[str, asyncio.Task[dict[str, Any]]]:
        """The tools started early for ``reply``'s own ``tool_use`` blocks (same attempt, same block).

        The others are dropped: they ran, but their results are never sent.
        """
        started, self._started, attempt, self._attempt = self._started, {}, self._attempt, 0
        if attempt != reply_attempt:
            return {}
        # Only a block the reply itself holds, whole: same id, name and input (the reply may carry a big input as a
        # placeholder instead). Any other started tool ran, but its result is never sent.
        replied = {str(b.get("id")): b for b in reply.get("content") or [] if b.get("type") == "tool_use"}
        return {i: task for i, (block, task) in started.items() if i in replied and _same_call(block, replied[i])}


def _same_call(started: dict[str, Any], replied: dict[str, Any]) -> bool:
    """Whether a block a tool started from is the reply's own block (whose big input may be stored apart)."""
    if started.get("name") != replied.get("name"):
        return False
    given, held = started.get("input"), replied.get("input")
    if is_placeholder(held) and not is_placeholder(given):
        return bool(held == stored(ref_for(canonical(given))))
    return canonical(given) == canonical(held)
