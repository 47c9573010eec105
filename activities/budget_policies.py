"""Budget policies: worker-side functions that decide a run's request for more budget before a person is asked.

A run whose budget says ``on_spent: "ask"`` and names a ``policy`` asks the policy first, once Claude has summed up
(``workflows/budget_requests.py``). The policy is registered like a tool (``python worker.py --tools my_policies``)
and runs as one activity (a plain or an ``async`` function). It returns the new limits to go on with, ``None`` to
leave the decision to a person, or raises ``StopRun`` to end the run there with Claude's summary. Limits it gives are
checked as a person's are; limits the run cannot go on with, or a policy that fails, leave the decision to a person,
told why.

Example::

    @budget_policy
    def up_to_five_dollars(request: BudgetRequest) -> dict | None:
        if request.budget.get("max_cost_usd", 0) < 5:
            return {"max_cost_usd": request.budget.get("max_cost_usd", 0) + 1}
        return None  # a person decides
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from agent_runner.activities.contained import awaited_contained, contained
from agent_runner.activities.hooks import StopRun
from agent_runner.content import Content
from agent_runner.contract.budget import BudgetDecision, BudgetRequest
from agent_runner.contract.types import DECIDE_BUDGET_ACTIVITY

logger = logging.getLogger(__name__)

PolicyFunction = Callable[[BudgetRequest], dict[str, Any] | None | Awaitable[dict[str, Any] | None]]


class BudgetPolicy:
    """A registered budget policy: a named function over a run's request for more budget."""

    def __init__(self, func: PolicyFunction, name: str | None = None) -> None:
        self.func = func
        self.name = name or func.__name__

    def __call__(self, request: BudgetRequest) -> dict[str, Any] | None | Awaitable[dict[str, Any] | None]:
        """Decide: the new limits, or ``None`` to ask a person (``StopRun`` ends the run); awaitable if async."""
        return self.func(request)


def budget_policy(func: PolicyFunction | None = None, *, name: str | None = None) -> Any:
    """Make ``func(request)`` a budget policy a worker registers with its module's tools."""
    if func is None:
        return lambda f: BudgetPolicy(f, name)
    return BudgetPolicy(func, name)


class BudgetPolicyActivities:
    """The budget-policy activity of one worker.

    Args:
        policies: The policies this worker can run, by name.
    """

    def __init__(self, policies: dict[str, BudgetPolicy], *, content: Content | None = None) -> None:
        self._policies = policies
        self._content = content or Content()

    @activity.defn(name=DECIDE_BUDGET_ACTIVITY)
    async def decide_budget(self, request: BudgetRequest) -> BudgetDecision:
        """Run the run's budget policy over its request."""
        policy = self._policies.get(request.policy)
        if policy is None:
            raise _policy_failed(
                f"Budget policy {request.policy!r} is not registered on this worker; run every worker of the task "
                "queue with the module that defines it."
            )
        # The policy reads Claude's summary whole: a long one is held in the store.
        request = request.model_copy(update={"reply": await self._content.resolve(request.reply)})
        try:
            limits = contained(policy, request)
            if inspect.isawaitable(limits):
                limits = await awaited_contained(limits)
        except StopRun as e:
            return BudgetDecision(stop=e.reason)
        except Exception as e:
            logger.exception("Budget policy %s raised (run=%s)", request.policy, request.run_id)
            raise _policy_failed(f"Budget policy {request.policy!r} raised {e!r}; a person is asked instead.") from e
        if limits is not None and not isinstance(limits, dict):
            raise _policy_failed(
                f"Budget policy {request.policy!r} returned {type(limits).__name__}; a policy returns the new limits "
                "(a dict of budget fields) or None."
            )
        return BudgetDecision(limits=limits)


def _policy_failed(message: str) -> ApplicationError:
    # Retrying cannot fix a missing or broken policy; the run asks a person instead.
    return ApplicationError(message, type="BudgetPolicyFailed", non_retryable=True)
