"""Result hooks: worker-side functions that see a reply's tool results before Claude does.

The SDK's users intercept tool results by building them in the loop body (``generate_tool_call_response``), which
runs every tool twice when combined with ``append_messages``. Here a hook is registered like a tool, named by the
run (``"result_hooks": ["cache_last_tool_result"]``), and runs as one activity after the reply's tools, with the
results in block order. It may return changed results (add ``cache_control``, redact, transform) or raise
``StopRun`` to end the run once the results are in the transcript.

Example::

    @result_hook
    def redact_secrets(results: list[dict], context: HookContext) -> list[dict]:
        return [{**r, "content": scrub(r["content"])} for r in results]
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from agent_runner.activities.contained import contained
from agent_runner.content import Content
from agent_runner.contract.types import PROCESS_RESULTS_ACTIVITY, ProcessResultsInput, ProcessResultsOutput

logger = logging.getLogger(__name__)

HookFunction = Callable[[list[dict[str, Any]], "HookContext"], list[dict[str, Any]] | None]


class StopRun(Exception):  # noqa: N818 - it is a request, not an error condition
    """Raised by a hook to end the run after this reply's results are recorded.

    Args:
        reason: Why; it becomes the run's stop detail.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class HookContext:
    """What a hook knows besides the results."""

    run_id: str
    iteration: int
    tool_uses: list[dict[str, Any]]
    """The reply's ``tool_use`` blocks, in the order of the results."""


class ResultHook:
    """A registered result hook: a named function over one reply's tool results."""

    def __init__(self, func: HookFunction, name: str | None = None) -> None:
        self.func = func
        self.name = name or func.__name__

    def __call__(self, results: list[dict[str, Any]], context: HookContext) -> list[dict[str, Any]] | None:
        """Run the hook."""
        return self.func(results, context)


def result_hook(func: HookFunction | None = None, *, name: str | None = None) -> Any:
    """Make ``func(results, context)`` a result hook a worker registers with its module's tools.

    The function returns the results to send (or ``None`` to keep them), or raises ``StopRun``.
    """
    if func is None:
        return lambda f: ResultHook(f, name)
    return ResultHook(func, name)


@result_hook
def cache_last_tool_result(results: list[dict[str, Any]], context: HookContext) -> list[dict[str, Any]]:
    """Mark the last tool result as a prompt-cache breakpoint, so the next turn reads the history from the cache."""
    del context
    if not results:
        return results
    return [*results[:-1], {**results[-1], "cache_control": {"type": "ephemeral"}}]


BUILTIN_HOOKS: list[ResultHook] = [cache_last_tool_result]


class HookActivities:
    """The result-hook activity of one worker.

    Args:
        hooks: The hooks this worker can run, by name.
    """

    def __init__(self, hooks: dict[str, ResultHook], *, content: Content | None = None) -> None:
        self._hooks = hooks
        self._content = content or Content()

    @activity.defn(name=PROCESS_RESULTS_ACTIVITY)
    async def process_results(self, input: ProcessResultsInput) -> ProcessResultsOutput:
        """Run the named hooks over one reply's tool results, in order."""
        # Hooks see the results whole; what they return is stored again if it is big.
        results = copy.deepcopy(await self._content.resolve(input.results))
        context = HookContext(run_id=input.run_id, iteration=input.iteration, tool_uses=input.tool_uses)
        for name in input.hooks:
            hook = self._hooks.get(name)
            if hook is None:
                raise _hook_failed(
                    f"Result hook {name!r} is not registered on this worker; run every worker of the task queue "
                    "with the module that defines it."
                )
            try:
                changed = contained(hook, results, context)
            except StopRun as e:
                return ProcessResultsOutput(results=await self._content.offload_content(results), stop=e.reason)
            except Exception as e:
                logger.exception("Result hook %s raised (run=%s iteration=%d)", name, input.run_id, input.iteration)
                raise _hook_failed(f"Result hook {name!r} raised {e!r}; fix the hook and start the run again.") from e
            if changed is not None:
                if len(changed) != len(results) or any(r.get("type") != "tool_result" for r in changed):
                    raise _hook_failed(
                        f"Result hook {name!r} returned {len(changed)} blocks for {len(results)} tool results; a "
                        "hook must return one `tool_result` per result, in order."
                    )
                results = changed
        return ProcessResultsOutput(results=await self._content.offload_content(results))


def _hook_failed(message: str) -> ApplicationError:
    # Retrying cannot fix a missing or broken hook, and a run must not hang on one.
    return ApplicationError(message, type="ResultHookFailed", non_retryable=True)
