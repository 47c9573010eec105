"""Runnable toolsets of the SDK (``BetaRunnableToolset``, ``BetaAsyncRunnableToolset``): each action one activity.

A worker registers a toolset object (``browser_toolset_20260801``, ``computer_toolset_20260801``, or one of your own
built on the SDK's classes) like a tool: ``ToolRegistry([...], toolsets=[my_browser])``, ``AgentRunnerPlugin(
tools=[my_browser])``, or a ``--tools`` module that defines one at its top level. A run names it in ``tools`` by its
family (``"browser"``); its ``tools[]`` entry is the toolset's own ``to_dict()``.

An action runs as the SDK's ``tool_result`` runs it: a ``ToolError`` or any other exception (the toolset's own
``confirm`` hook refusing included) becomes an ``is_error`` result; a ``ToolsetUsageError`` (a mistake in your code)
fails the activity. The rule that the later actions of a turn are not run after one failed is the workflow's
(``workflows/toolsets.py``), which sees the whole turn.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any

from anthropic.lib.tools._toolsets._runnable import (
    TOOLSET_CLASSES,
    BetaAnyRunnableToolset,
    BetaAsyncRunnableToolset,
)
from anthropic.types.beta import BetaToolUseBlock
from temporalio import activity
from temporalio.exceptions import ApplicationError

from agent_runner.activities.contained import awaited_contained, contained
from agent_runner.activities.effects import IDEMPOTENT, Effects, effect_policy
from agent_runner.activities.heartbeats import EVERY, heartbeat_until
from agent_runner.content import Content
from agent_runner.contract.errors import ToolRegistrationError
from agent_runner.contract.toolsets import (
    RECONCILE_TOOLSET_ACTION_ACTIVITY,
    RUN_TOOLSET_ACTION_ACTIVITY,
    ToolsetActionInput,
)
from agent_runner.contract.types import (
    TOOL_NOT_STARTED_ERROR,
    ActivityOptions,
    OnUnknown,
    ReconcileOutput,
    ToolEffects,
    ToolResult,
    ToolSpec,
)

logger = logging.getLogger(__name__)

DEFAULT_TOOLSET_OPTIONS = ActivityOptions(
    start_to_close_timeout=timedelta(minutes=5), heartbeat_timeout=timedelta(seconds=30)
)
"""An action's activity options unless ``toolset_options`` says otherwise: a tool's defaults (the worker heartbeats
while an action runs)."""

STORE_ATTEMPTS = 5
"""Tries at storing a big result before it is given up as an ``is_error`` result (never by running it again)."""

_OPTIONS_ATTRIBUTE = "__agent_runner_toolset_options__"
_APPROVAL_ATTRIBUTE = "__agent_runner_toolset_requires_approval__"
_EFFECTS_ATTRIBUTE = "__agent_runner_toolset_effects__"


def is_toolset(value: object) -> bool:
    """Whether ``value`` is a runnable toolset of the SDK (sync or async)."""
    return isinstance(value, TOOLSET_CLASSES)


def toolset_options(
    toolset: BetaAnyRunnableToolset,
    *,
    requires_approval: bool = False,
    options: ActivityOptions | None = None,
    effects: ToolEffects = "idempotent",
    on_unknown: OnUnknown | None = None,
    reconcile: Callable[..., Any] | None = None,
) -> BetaAnyRunnableToolset:
    """Set how the actions of ``toolset`` run in a run, and return it.

    Args:
        toolset: The toolset to register.
        requires_approval: Each action waits for a person's approval (``Run.approve`` / ``Run.deny``) before it
            runs: the run's durable stand-in for the SDK's ``confirm`` hook, which would block a worker. A denied
            action is an ``is_error`` result, so the later actions of that turn are not run, as when ``confirm``
            declines in the SDK.
        options: The activity options of each action (timeouts, retries, task queue).
        effects: As ``tool_options``: ``"idempotent"`` (default) retries an action lost with its worker;
            ``"at_most_once"`` never runs an action again blindly: its outcome is unknown, and ``on_unknown``
            decides.
        on_unknown: As ``tool_options``: ``"reconcile"``, ``"ask"`` or ``"tell"``.
        reconcile: As ``tool_options``: ``reconcile(call: ToolCall)`` (``call.name`` is the action), ``None`` if
            the action did not take effect (it then runs again), else its result for Claude.

    Raises:
        ToolRegistrationError: ``toolset`` is not a runnable toolset, or the effect options contradict each other.
    """
    if not is_toolset(toolset):
        raise ToolRegistrationError(
            f"toolset_options() applies to a runnable toolset (BetaRunnableToolset or BetaAsyncRunnableToolset), got "
            f"{type(toolset).__name__}."
        )
    policy = effect_policy("toolset_options", effects, on_unknown, reconcile)
    setattr(toolset, _OPTIONS_ATTRIBUTE, options or DEFAULT_TOOLSET_OPTIONS)
    setattr(toolset, _APPROVAL_ATTRIBUTE, requires_approval)
    setattr(toolset, _EFFECTS_ATTRIBUTE, policy)
    return toolset


def _effects_of(toolset: BetaAnyRunnableToolset) -> Effects:
    effects: Effects = getattr(toolset, _EFFECTS_ATTRIBUTE, IDEMPOTENT)
    return effects


def toolset_spec(toolset: BetaAnyRunnableToolset) -> ToolSpec:
    """The toolset as a run needs it: named by its family, its ``tools[]`` entry its own ``to_dict()``."""
    effects = _effects_of(toolset)
    return ToolSpec(
        name=toolset.toolset_name,
        definition=dict(toolset.to_dict()),
        options=getattr(toolset, _OPTIONS_ATTRIBUTE, DEFAULT_TOOLSET_OPTIONS),
        requires_approval=getattr(toolset, _APPROVAL_ATTRIBUTE, False),
        effects=effects.effects,
        on_unknown=effects.on_unknown,
    )


class ToolsetActivities:
    """The toolset activity of one worker.

    Args:
        toolsets: The toolsets this worker runs, by family.
        content: The content store an action's input stored apart is read from.
        heartbeat_every: Seconds between heartbeats while an action runs.
    """

    def __init__(
        self,
        toolsets: dict[str, BetaAnyRunnableToolset],
        content: Content | None = None,
        heartbeat_every: float = EVERY,
    ) -> None:
        self._toolsets = toolsets
        self._content = content or Content()
        self._heartbeat_every = heartbeat_every

    @activity.defn(name=RUN_TOOLSET_ACTION_ACTIVITY)
    async def run_toolset_action(self, input: ToolsetActionInput) -> ToolResult:
        """Run one action of a toolset and return its result, errors included."""
        from agent_runner.activities.tools import own_run

        call = own_run(input.call)
        toolset = self._toolsets.get(input.toolset)
        if toolset is None:
            raise ApplicationError(
                f"No worker on task queue {activity.info().task_queue!r} registered the {input.toolset!r} toolset. "
                "Register it on the workers that serve this run's tools (ToolRegistry(toolsets=[...]) or a --tools "
                "module that defines it).",
                type="ToolRegistrationError",
                non_retryable=True,
            )
        logger.info(
            "Running toolset action: run=%s iteration=%d toolset=%s action=%s tool_use_id=%s",
            call.run_id,
            call.iteration,
            input.toolset,
            call.name,
            call.tool_use_id,
        )
        try:
            tool_input = await self._content.resolve(call.input)
        except ApplicationError:
            raise
        except Exception as e:
            raise ApplicationError(
                f"Could not read the stored input of action '{input.toolset}/{call.name}' ({type(e).__name__}: "
                f"{e}); the action did not start.",
                type=TOOL_NOT_STARTED_ERROR,
            ) from e
        block = BetaToolUseBlock(
            id=call.tool_use_id,
            name=call.name,
            input=tool_input if isinstance(tool_input, dict) else {},
            type="tool_use",
            toolset_name=input.toolset,
        )
        # Imported here: activities/tools.py imports this module for the registry.
        from agent_runner.activities.tools import _call_of, _current_call, own_deadline, past_own_timeout

        # The action reads `current_tool_call().idempotency_key`, as a tool does (a copied context: the thread too).
        token = _current_call.set(_call_of(call.model_copy(update={"input": tool_input})))
        try:
            running: asyncio.Future[Any] = asyncio.ensure_future(
                awaited_contained(toolset.tool_result(block))
                if isinstance(toolset, BetaAsyncRunnableToolset)
                else asyncio.to_thread(contained, toolset.tool_result, block)
            )
        finally:
            _current_call.reset(token)
        name = f"{input.toolset}/{call.name}"
        sync = not isinstance(toolset, BetaAsyncRunnableToolset)
        try:
            # Heartbeats while the action runs, so a worker that dies mid-action is noticed in seconds. Its own
            # timeout is this worker's to enforce, as a tool's: the run scheduled it with a grace, so Temporal's
            # timeout fires only for a silent worker, and an action past its own never runs beside its retry.
            if not await heartbeat_until(running, self._heartbeat_every, own_deadline()):

                async def finished() -> ToolResult:
                    return await self._held(name, running.result())

                return await past_own_timeout("Action", name, call.tool_use_id, running, sync=sync, finished=finished)
        finally:
            running.cancel()  # only if the activity itself was cancelled; a sync action's thread runs on
        return await self._held(name, running.result())

    @activity.defn(name=RECONCILE_TOOLSET_ACTION_ACTIVITY)
    async def reconcile_toolset_action(self, input: ToolsetActionInput) -> ReconcileOutput:
        """Ask an ``at_most_once`` toolset's ``reconcile`` whether an action whose outcome is unknown happened."""
        from agent_runner.activities.tools import _call_of, _current_call, _error_text, _safe_result, own_run

        call = own_run(input.call)
        name = f"{input.toolset}/{call.name}"
        toolset = self._toolsets.get(input.toolset)
        reconcile = _effects_of(toolset).reconcile if toolset is not None else None
        if reconcile is None:
            raise ApplicationError(
                f"No worker on task queue {activity.info().task_queue!r} registered a reconcile function for the "
                f"{input.toolset!r} toolset. Register it with toolset_options(..., effects='at_most_once', "
                "reconcile=...).",
                type="ToolRegistrationError",
                non_retryable=True,
            )
        call = call.model_copy(update={"input": await self._content.resolve(call.input)})
        token = _current_call.set(_call_of(call))
        try:
            answer = contained(reconcile, _current_call.get())
            if inspect.isawaitable(answer):
                answer = await awaited_contained(answer)
        except Exception as e:
            logger.exception("Reconciling action %s (tool_use_id=%s) failed", name, call.tool_use_id)
            return ReconcileOutput(
                happened=True,
                result=ToolResult(
                    content=f"Error: The outcome of this call of '{name}' is unknown, and checking it failed: "
                    f"{_error_text(e)}. It was not run again. Check before calling it again.",
                    is_error=True,
                ),
            )
        finally:
            _current_call.reset(token)
        if answer is None:
            return ReconcileOutput(happened=False)
        result = _safe_result(name, answer)
        return ReconcileOutput(happened=True, result=await self._held(name, result.model_dump()))

    async def _held(self, name: str, result: Mapping[str, Any]) -> ToolResult:
        """The action's result as a run holds it: escaped, a big one (a screenshot) stored apart, as a tool's is.

        Never raises: the action has run, and must not run again because its result could not be stored.
        """
        # Imported here: activities/tools.py imports this module for the registry.
        from agent_runner.activities.tools import _within_payload_limit, offloaded

        checked = _within_payload_limit(
            name, ToolResult(content=result.get("content"), is_error=bool(result.get("is_error")))
        )
        return await offloaded(self._content, name, checked, kind="Action")
