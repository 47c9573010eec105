"""Budget negotiation: when a budget with ``on_spent="ask"`` is spent, a person decides whether the run goes on.

The run does not end at the boundary where the budget ran out. Claude first sums up, in one request without tools,
what it has done and what is left, and estimates what finishing would take. Then the run waits for a person through
the approval machinery: a ``PendingApproval`` named ``budget`` (ids ``budget_1``, ``budget_2``, ... in the order the
run asked), whose input is the budget as it stands. Approving it with new limits (``Run.approve("budget_1",
input={"max_output_tokens": 40000})``, ``agent-runner approve RUN budget_1 --input ...``, the console) goes on with
them; denying it, the approval policy's timeout or a ``stop`` ends the run with ``budget_exhausted`` (or
``stopped``) and the summary as its last reply. The wait costs no worker, survives restarts and is never approved by
a timeout: an approval without limits has nothing to go on with.

A budget that names a ``policy`` (``@budget_policy``, ``activities/budget_policies.py``) asks it first, as one
activity: its limits go on (Claude told which policy raised the budget), its ``StopRun`` ends the run, and its
``None``, limits the run cannot go on with, or its failure leave the decision to a person, the note saying why.

Approved limits are checked before the run takes them (budget fields, none spent already) and kept in
``RunState.budget``, which continue-as-new carries, so a continuation does not fall back to the input's budget.

This module is imported by workflow code, so it holds no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, CancelledError, FailureError

with workflow.unsafe.imports_passed_through():
    from agent_runner.contract.budget import BUDGET_APPROVAL, Budget, BudgetDecision, BudgetRequest
    from agent_runner.contract.steering import ApproveTool
    from agent_runner.contract.types import DECIDE_BUDGET_ACTIVITY

if TYPE_CHECKING:
    from agent_runner.workflows.run_view import RunView


def summary_request(spent: str) -> str:
    """What the run asks of Claude when the budget ``spent`` ran out and a person will decide how it goes on."""
    return (
        f"The {spent} is spent. Do not call tools now: sum up what you have done and what is left to do, and "
        "estimate how many more input and output tokens finishing would take. A person will decide whether you go on."
    )


def went_on(by: str, note: str | None) -> str:
    """The user note the run goes on with once ``by`` gave it more budget (``note``: the new budget's advice)."""
    return " ".join(part for part in (f"{by} raised the budget.", note, "Go on with the task.") if part)


POLICY_RETRY = RetryPolicy(maximum_interval=timedelta(seconds=10), maximum_attempts=5)
"""A budget policy's retries: bounded, so a policy that keeps failing leaves the decision to a person."""


@dataclass(frozen=True)
class Decision:
    """How a request for more budget was decided: a budget to go on with (and who gave it), or the run's end."""

    budget: Budget | None = None
    by: str = "A person"
    stop: str | None = None
    """Why the run ends, when the budget policy ended it (``StopRun``)."""


class BudgetRequests:
    """The run's request for more budget: its policy's answer, or a person's while one waits."""

    def __init__(self, run: RunView) -> None:
        self._run = run
        self.waiting: str | None = None
        """The id of the budget approval the run waits on, if it waits."""
        self._approved: Budget | None = None

    def budget(self, decision: ApproveTool) -> Budget | None:
        """The budget an approval of the waiting request gives; ``None`` when ``decision`` is for a tool call.

        Raises:
            ValueError: the approval's input is no budget the run could go on with; the message says what to give.
        """
        if decision.tool_use_id != self.waiting:
            return None
        run = self._run
        assert run.spec is not None
        # Taken as sent, held or plain: budget fields are numbers and durations, never content a reference could
        # stand for (and the validator may not ask `as_held`'s patch).
        return run.spec.budget.extended(decision.input or {}, run.state.usage, run.state.started_at, workflow.now())

    def approve(self, budget: Budget) -> None:
        """Take ``budget`` as the one a person approved (the ``approve_tool`` handler, after ``budget``)."""
        self._approved = budget

    async def decide(self, spent: str) -> Decision:
        """Decide the request for more budget once ``spent`` ran out: the run's policy first, then a person."""
        run = self._run
        assert run.spec is not None
        budget = run.spec.budget
        problem = None
        if budget.policy is not None:
            answer, problem = await self._ask_policy(budget.policy, spent)
            if answer.stop is not None:
                return Decision(stop=answer.stop)
            if answer.limits is not None:
                state = run.state
                try:
                    extended = budget.extended(answer.limits, state.usage, state.started_at, workflow.now())
                    return Decision(budget=extended, by=f"The budget policy {budget.policy!r}")
                except ValueError as e:
                    problem = f"gave limits the run cannot go on with ({e})"
        return Decision(budget=await self._ask_a_person(spent, problem))

    async def _ask_policy(self, policy: str, spent: str) -> tuple[BudgetDecision, str | None]:
        """The policy's answer (none when it failed), and what went wrong, if something did."""
        state = self._run.state
        assert self._run.spec is not None
        request = BudgetRequest(
            policy=policy,
            run_id=workflow.info().workflow_id,
            spent=spent,
            budget=self._run.spec.budget.model_dump(mode="json", exclude_defaults=True),
            usage=state.usage,
            iterations=state.iterations,
            reply=state.replies[-1] if state.replies else {},
        )
        try:
            answer: BudgetDecision = await workflow.execute_activity(
                DECIDE_BUDGET_ACTIVITY,
                request,
                result_type=BudgetDecision,
                start_to_close_timeout=timedelta(minutes=1),
                retry_policy=POLICY_RETRY,
                summary=f"budget policy {policy}",
            )
        except ActivityError as e:
            if isinstance(e.cause, CancelledError):
                raise
            why = e.cause.message if isinstance(e.cause, FailureError) else str(e)
            workflow.logger.warning("Budget policy %s failed: %s", policy, why)
            return BudgetDecision(), f"could not decide ({why})"
        return answer, None

    async def _ask_a_person(self, spent: str, problem: str | None) -> Budget | None:
        """Wait for a person's decision on more budget; the approved budget, or ``None`` to end the run."""
        run = self._run
        state = run.state
        assert run.spec is not None
        state.budget_requests += 1
        self.waiting = f"budget_{state.budget_requests}"
        self._approved = None
        shown: dict[str, Any] = run.spec.budget.model_dump(mode="json", exclude_defaults=True)
        policy = f"; the budget policy {run.spec.budget.policy!r} {problem}" if problem else ""
        try:
            decision = await run.approvals.ask(
                {"id": self.waiting, "input": shown},
                BUDGET_APPROVAL,
                state.iterations,
                note=f"The {spent} is spent and Claude has summed up{policy}. Approve with new limits as the input "
                'to go on (for instance {"max_output_tokens": 40000}); deny to end the run with its summary.',
                timeout_approves=False,
            )
        finally:
            self.waiting = None
        return self._approved if isinstance(decision, ApproveTool) else None
