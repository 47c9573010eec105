"""Approvals and step mode: where a run waits for a person.

An approval holds one tool call until ``approve_tool`` or ``deny_tool`` decides it (or its timeout does); step mode
pauses the run after each reply (and, with ``review_results``, after its tools ran) until ``advance``. Neither wait
holds a worker, and neither outlives an execution: a run continues as new only at an iteration boundary, where
nothing waits.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from agent_runner.contract import events
    from agent_runner.contract.steering import Advance, ApproveTool, DenyTool, PendingApproval
    from agent_runner.contract.types import (
        CHECK_TOOL_INPUT_ACTIVITY,
        CheckToolInput,
        RunStatusName,
        ToolResult,
        ToolSpec,
    )
    from agent_runner.workflows.failures import refused
    from agent_runner.workflows.metrics import count
    from agent_runner.workflows.plain_json import as_held

if TYPE_CHECKING:
    from agent_runner.workflows.run_view import RunView

INPUT_CHECK_PATCH = "approval-input-checked"
"""``workflow.patched`` id of checking an approval's edited input against its tool's ``input_schema`` (a local
activity in the ``approve_tool`` handler); asked only where edited input comes."""


class Approvals:
    """Tool calls waiting for a person, and the decisions taken for them."""

    def __init__(self, run: RunView) -> None:
        self._run = run
        self.pending: dict[str, PendingApproval] = {}
        self.decisions: dict[str, ApproveTool | DenyTool] = {}

    def needed(self, spec: ToolSpec) -> bool:
        """Whether a call of the tool waits for a person: its own rule, or the run's ``approval`` policy."""
        assert self._run.spec is not None
        tools = self._run.spec.approval.tools
        return spec.requires_approval or tools == "all" or spec.name in tools

    def waiting(self) -> list[dict[str, Any]]:
        """The calls still waiting for a decision (``pending_approvals``)."""
        return [p.model_dump() for p in self.pending.values() if p.tool_use_id not in self.decisions]

    def check_waiting(self, tool_use_id: str) -> None:
        """Refuse a decision for a call that does not wait (any more), naming the ones that do."""
        if tool_use_id not in self.pending or tool_use_id in self.decisions:
            waiting = sorted(t for t in self.pending if t not in self.decisions)
            raise ValueError(f"Tool call {tool_use_id!r} is not waiting for approval. Waiting: {waiting or 'none'}.")

    async def check_input(self, decision: ApproveTool) -> None:
        """Refuse edited input its tool's ``input_schema`` refuses (``contract/tool_input.py``), saying why.

        The run holds the schema by reference, so a local activity reads and checks it. A check that cannot run (a
        worker of older code, the store down) lets the input through: the tool's own validation still stands, and
        Claude reads its error. Runs that took approvals before this check replay without it. The call must still
        wait once the check is done: another decision, its timeout or its reply being dropped may have come meanwhile.
        """
        tool = self._run.state.tools.get(self.pending[decision.tool_use_id].name)
        if decision.input is None or tool is None or not workflow.patched(INPUT_CHECK_PATCH):
            return
        check = CheckToolInput(
            input_schema=tool.definition.get("input_schema"), input=as_held(decision.input, decision.held)
        )
        try:
            problems: list[str] = await workflow.execute_local_activity(
                CHECK_TOOL_INPUT_ACTIVITY,
                check,
                result_type=list[str],
                start_to_close_timeout=timedelta(seconds=10),
                retry_policy=RetryPolicy(maximum_attempts=2),
            )
        except (ActivityError, ApplicationError) as e:
            workflow.logger.warning("Could not check the edited input of %s: %s", decision.tool_use_id, e)
            problems = []
        if problems:
            raise refused(
                f"The edited input does not fit {tool.name}'s input_schema: {'; '.join(problems)}. Approve with input "
                "the schema accepts, or with none to run the call as Claude wrote it."
            )
        try:
            self.check_waiting(decision.tool_use_id)
        except ValueError as e:
            raise refused(str(e)) from None

    async def gate(self, block: dict[str, Any], spec: ToolSpec, iteration: int) -> tuple[ToolResult | None, Any]:
        """Let the call ``block`` through, asking a person first when ``needed``.

        Returns:
            ``(None, input)``: the call runs with ``input`` (an approval's edited one, else the block's own);
            ``(result, None)``: it does not run, and ``result`` says why (denied, or its reply dropped meanwhile).
        """
        decision = await self.ask(block, spec.name, iteration) if self.needed(spec) else None
        abandoned = self._run.abandoned()
        if isinstance(decision, DenyTool):
            return ToolResult(content=decision.reason, is_error=True), None
        if abandoned is not None:
            # The reply this call belongs to was stopped or is being retried while the call waited: it never runs
            # (its result is discarded with the reply, or ends the run's transcript).
            return ToolResult(content=abandoned, is_error=True), None
        if decision is not None and decision.input is not None:
            return None, as_held(decision.input, decision.held)
        return None, block.get("input")

    async def ask(
        self,
        block: dict[str, Any],
        name: str,
        iteration: int,
        note: str | None = None,
        *,
        timeout_approves: bool = True,
    ) -> ApproveTool | DenyTool:
        """Wait for a person's decision on the call ``block`` (or for its timeout, or for the reply to be dropped).

        The ``approval`` policy's timeout applies; its ``on_timeout="approve"`` only where ``timeout_approves``.
        """
        run = self._run
        assert run.spec is not None
        tool_use_id = str(block.get("id"))
        self.pending[tool_use_id] = PendingApproval(
            tool_use_id=tool_use_id,
            name=name,
            input=block.get("input"),
            iteration=iteration,
            requested_at=workflow.now().isoformat(),
            note=note,
        )
        run.event(events.APPROVAL_WAITING, iteration=iteration, approval=self.pending[tool_use_id].model_dump())
        count("agent_runner_approvals_requested", "Tool calls that waited for approval", tool=name)
        run.set_status("waiting_for_approval")
        policy = run.spec.approval
        try:
            await workflow.wait_condition(
                lambda: tool_use_id in self.decisions or run.abandoned() is not None, timeout=policy.timeout
            )
            decision = self.decisions.get(tool_use_id) or DenyTool(
                tool_use_id=tool_use_id, reason=run.abandoned() or "Not executed."
            )
        except TimeoutError:
            decision = (
                ApproveTool(tool_use_id=tool_use_id)
                if policy.on_timeout == "approve" and timeout_approves
                else DenyTool(tool_use_id=tool_use_id, reason=f"No approval within {policy.timeout}; not executed.")
            )
        finally:
            del self.pending[tool_use_id]
            self.decisions.pop(tool_use_id, None)
            if not self.pending:
                run.set_status("sleeping" if run.tool_calls.sleeps.sleeping else "running")
        count(
            "agent_runner_approvals_decided",
            "Approvals decided, by outcome (waiting = requested - decided)",
            tool=name,
            outcome="approved" if isinstance(decision, ApproveTool) else "denied",
        )
        run.event(
            events.APPROVAL_DECIDED,
            iteration=iteration,
            tool_use_id=tool_use_id,
            approved=isinstance(decision, ApproveTool),
            reason=decision.reason if isinstance(decision, DenyTool) else None,
        )
        return decision


class StepMode:
    """The pauses of a run started with ``step``: after each reply, and after its tools with ``review_results``."""

    def __init__(self, run: RunView) -> None:
        self._run = run
        self.waiting = False
        self._advance: Advance | None = None
        self.under_review: list[dict[str, Any]] | None = None
        """Tool results a step-mode client reviews before Claude sees them."""

    async def pause(self, status: RunStatusName) -> Advance | None:
        """Wait for ``advance`` (or the step timeout, or a stop); the advance that ended the pause, if one did."""
        run = self._run
        spec = run.spec
        assert spec is not None and spec.step is not None
        self._advance = None
        self.waiting = True
        run.set_status(status)
        run.event(events.STEP_WAITING, status=status)
        try:
            await workflow.wait_condition(
                lambda: not self.waiting or run.state.stop is not None, timeout=spec.step.timeout
            )
        except TimeoutError:
            if spec.step.on_timeout == "stop":
                run.state.stop = f"No client advanced the run within {spec.step.timeout}."
        finally:
            self.waiting = False
            run.set_status("running")
        return self._advance

    async def review(self, results: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Pause with the tool results before Claude sees them; ``advance`` may send changed ones instead."""
        self.under_review = results
        try:
            advance = await self.pause("waiting_for_review")
        finally:
            self.under_review = None
        if advance is not None and advance.tool_results is not None:
            return advance.tool_results
        return results

    async def accept(self, edit: Advance) -> None:
        """Let the run go on past its pause (the ``advance`` update), once the pause ``edit`` names has begun."""
        run = self._run
        if not self.waiting:
            # Accepted for an iteration whose pause had not begun yet (see `check`): wait for it, or refuse once the
            # run has gone past it.
            await workflow.wait_condition(
                lambda: self.waiting or run.ended or run.draining or run.state.iterations > (edit.iteration or 0)
            )
            if run.draining and not self.waiting:
                raise refused(
                    f"The run is continuing as new; it was not paused after iteration {edit.iteration}. Read its "
                    "status again and advance the pause it reports."
                )
            if not self.waiting:
                raise refused(self._not_paused())
            if run.state.iterations != edit.iteration:
                raise refused(self._stale(edit))
        problem = self._tool_results_problem(edit)
        if problem is not None:
            raise refused(problem)
        self._advance = edit
        self.waiting = False

    def check(self, edit: Advance) -> None:
        """The ``advance`` validator: refuse an advance that no pause of the run can take."""
        run = self._run
        if edit.tool_results is not None and any(b.get("type") != "tool_result" for b in edit.tool_results):
            raise ValueError("`tool_results` may hold only `tool_result` blocks.")
        if self.waiting:
            if edit.iteration is not None and edit.iteration != run.state.iterations:
                raise ValueError(self._stale(edit))
            problem = self._tool_results_problem(edit)
            if problem is not None:
                raise ValueError(problem)
            return
        # Temporal can hand an update to the run in the same task as the model or tool result the run is about to
        # pause on (a worker replaying the run does), before the run has reacted to it: an advance for that very
        # iteration is accepted and waits for the pause.
        spec = run.spec
        reply_coming = run.iteration_in_flight() == edit.iteration
        review_coming = (
            spec is not None
            and spec.step is not None
            and spec.step.review_results
            and run.current_status in ("running", "sleeping")
            and edit.iteration == run.state.iterations
        )
        if edit.iteration is not None and not run.ended and (reply_coming or review_coming):
            return
        raise ValueError(self._not_paused())

    def _stale(self, edit: Advance) -> str:
        return (
            f"The run is paused after iteration {self._run.state.iterations}, not {edit.iteration}: read its status "
            "again."
        )

    def _not_paused(self) -> str:
        return (
            f"The run is not paused for a step (it is {self._run.current_status}); `advance` applies to a run started "
            "with `step`, after each reply (and after its tool results with `review_results`)."
        )

    def _tool_results_problem(self, edit: Advance) -> str | None:
        """Why ``edit``'s client-built tool results do not answer the last reply, or ``None``."""
        if edit.tool_results is None:
            return None
        last = self._run.state.last_reply or {}
        wanted = [b.get("id") for b in last.get("content") or [] if b.get("type") == "tool_use"]
        given = [b.get("tool_use_id") for b in edit.tool_results]
        if sorted(map(str, given)) != sorted(map(str, wanted)):
            return (
                f"`tool_results` must answer each `tool_use` of the last reply exactly once: expected {wanted}, got "
                f"{given}."
            )
        return None
