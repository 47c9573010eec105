"""Runnable toolsets on the workflow's side: one activity per action, in the turn's order, as the SDK runs them.

A ``tool_use`` block with a ``toolset_name`` is an action of that toolset (``name`` is the action). The SDK runs the
actions of one toolset in a turn one after another, and once one failed (an ``is_error`` result: an error, a refusal,
a declined confirmation) it runs none of the later ones: each gets ``Not executed: an earlier action in this turn
failed.`` (``HALT_TEXT``, worded per family). Here the turn's other calls still run concurrently; only the actions
of one toolset wait for each other. A toolset that requires approval makes each action wait for the run's approval
(``approvals.py``), the durable form of the SDK's ``confirm`` hook; a denial is a failure like the hook's.

Every ``tool_result`` echoes the ``toolset_name``, which the API requires. Runs without toolsets do nothing new here.

This module is imported by workflow code, so it holds no I/O.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from temporalio import workflow
from temporalio.exceptions import ActivityError, CancelledError

with workflow.unsafe.imports_passed_through():
    from anthropic.lib.tools._beta_runner import malformed_call_detail
    from anthropic.lib.tools._toolsets._runnable import HALT_TEXT, NOT_EXECUTED
    from anthropic.lib.tools._toolsets._sanitize import quoted_name

    from agent_runner.contract import events
    from agent_runner.contract.toolsets import RUN_TOOLSET_ACTION_ACTIVITY, ToolsetActionInput, toolset_family
    from agent_runner.contract.types import TOOL_TIMEOUT_GRACE, RunToolInput, ToolResult, ToolSpec
    from agent_runner.workflows.failures import retry_policy
    from agent_runner.workflows.history_size import input_idempotency_key, input_run_id

if TYPE_CHECKING:
    from agent_runner.workflows.run_view import RunView


class Toolsets:
    """The run's toolset actions."""

    def __init__(self, run: RunView) -> None:
        self._run = run
        self._last: dict[tuple[int, str], asyncio.Future[bool]] = {}
        """Per turn and family, the last action asked for: it resolves to whether that action or one before failed."""

    def takes(self, block: dict[str, Any]) -> bool:
        """Whether ``block`` is for a toolset: an action, or a call named after one (the SDK calls it malformed)."""
        if block.get("toolset_name") is not None:
            return True
        spec = self._run.state.tools.get(str(block.get("name")))
        return spec is not None and toolset_family(spec.definition) == spec.name

    async def call(self, block: dict[str, Any], iteration: int) -> dict[str, Any]:
        """The ``tool_result`` block for the toolset action ``block`` (of reply number ``iteration``).

        Called in block order (the turn's calls start in order), so each action waits for the one before it. Every
        action, run or not, is a ``tool_started`` and a ``tool_finished`` live event, the latter with the block Claude
        gets, as a tool call is.
        """
        run = self._run
        malformed = block.get("toolset_name") is None
        family = str(block.get("name") if malformed else block.get("toolset_name"))
        name, tool_use_id = str(block.get("name")), str(block.get("id"))
        key = (iteration, family)
        for old in [k for k in self._last if k[0] < iteration]:
            del self._last[old]  # a turn's entries stay until the next turn: an action may end before the next starts
        previous = self._last.get(key)
        failed: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._last[key] = failed
        outcome = True
        try:
            halted = await previous if previous is not None else False
            outcome = halted
            run.event(
                events.TOOL_STARTED, iteration=iteration, tool_use_id=tool_use_id, name=name, input=block.get("input")
            )
            if malformed:
                # The SDK's answer to a call named after a toolset with no ``toolset_name``: its input holds actions
                # the runner cannot run; the later actions of the toolset in this turn are not run either.
                tool_result = _malformed_result(block)
            else:
                result, counts = await self._action(block, iteration, family, halted)
                outcome = halted or (counts and result.is_error)
                tool_result = {**result.block(tool_use_id), "toolset_name": family}
        finally:
            failed.set_result(True if malformed else outcome)
        run.event(events.TOOL_FINISHED, iteration=iteration, tool_use_id=tool_use_id, name=name, result=tool_result)
        return tool_result

    async def _action(
        self, block: dict[str, Any], iteration: int, family: str, halted: bool
    ) -> tuple[ToolResult, bool]:
        """The action's result, and whether a failure of it stops the later actions (not for a toolset not found)."""
        run = self._run
        name = str(block.get("name"))
        if halted:
            return ToolResult(content=HALT_TEXT.get(family, NOT_EXECUTED), is_error=True), True
        spec = run.state.tools.get(family)
        if spec is None or toolset_family(spec.definition) != family:
            workflow.logger.warning("Toolset %r (action %r) not found in the run", family, name)
            # The SDK's words when a run has no runnable toolset of that family.
            return ToolResult(content=f"Error: Toolset '{family}' member '{name}' not found", is_error=True), False
        refusal, tool_input = await run.approvals.gate(block, spec, iteration)
        result = refusal if refusal is not None else await self._execute(spec, family, block, tool_input, iteration)
        return result, True

    async def _execute(
        self, spec: ToolSpec, family: str, block: dict[str, Any], tool_input: Any, iteration: int
    ) -> ToolResult:
        # Imported here: tool_calls imports this module.
        from agent_runner.workflows.tool_calls import _tool_failure

        call = RunToolInput(
            name=str(block.get("name")),
            tool_use_id=str(block.get("id")),
            input=tool_input,
            run_id=input_run_id(),
            iteration=iteration,
            idempotency_key=input_idempotency_key(str(block.get("id"))),
        )
        if spec.effects == "at_most_once":  # run, and settled when lost, as an at-most-once tool is
            return await self._run.tool_calls.at_most_once(spec, block, call, iteration, toolset=family)
        options = spec.options
        try:
            result: ToolResult = await workflow.execute_activity(
                RUN_TOOLSET_ACTION_ACTIVITY,
                ToolsetActionInput(toolset=family, call=call),
                result_type=ToolResult,
                start_to_close_timeout=options.start_to_close_timeout + TOOL_TIMEOUT_GRACE,
                heartbeat_timeout=options.heartbeat_timeout,
                retry_policy=retry_policy(options),
                task_queue=options.task_queue,
                summary=f"turn {iteration} · {family} · {call.name}",
            )
        except ActivityError as e:
            if isinstance(e.cause, CancelledError):
                raise
            raise _tool_failure(spec, e) from None
        return result


def _malformed_result(block: dict[str, Any]) -> dict[str, Any]:
    """The SDK's ``malformed_toolset_call_result``, without ``toolset_name``: the call had none."""
    tool_input = block.get("input")
    detail = malformed_call_detail(tool_input if isinstance(tool_input, dict) else {})
    return {
        "type": "tool_result",
        "tool_use_id": str(block.get("id")),
        "content": f"Error: the '{quoted_name(str(block.get('name')))}' toolset could not run this call{detail}; "
        "nothing in the batch was executed",
        "is_error": True,
    }
