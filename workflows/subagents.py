"""Sub-agents: an agent is a tool.

A run declares agents in its input (``agents``), or names in its ``tools`` an agent a worker registered (which
``describe_tools`` describes like a tool, so its definition is in the run's history): each is a tool definition for
Claude (name, description, input schema) and the run a call of it starts (model, system, tools, limits, its own
agents). A ``tool_use`` of an agent starts a child ``AgentRun`` (a child workflow, so it survives crashes like any
run) whose one user message is the call's input; its final message's text becomes the ``tool_result``, and a child
that failed, was cancelled, stopped or ran out of iterations or budget becomes an ``is_error`` result saying so.

The tree is bounded (``agent_limits``): declared agents may nest ``max_depth`` levels below the root, and one reply
starts at most ``max_fan_out`` of them. Cancelling the parent cancels its children (the handle's cancellation and
the parent close policy, ``REQUEST_CANCEL``); stopping it stops them (``STOP_FROM_PARENT_SIGNAL``), and their
results say so. A child is bounded by what its parent has left of ``max_iterations`` and its budget, and what it
spent (its usage, its own children's included) is added to the parent's usage when it ends: from its result, or,
for a child that ended without one (failed, cancelled, terminated, timed out), from its status. The parent publishes
``agent_started`` (``tool_use_id``, ``name``, ``run_id``) once a child started, so a watcher of the parent can follow
the child's events too (``Run.events``).

The child's id is ``<parent id>/<tool_use_id>``: the start is in the parent's history, so a replay after a crash never
starts a second child, and a continue-as-new happens only at a boundary, with no child in flight.

The ``agents`` and ``agent_limits`` options are the contract's (``agent_runner/contract/agents.py``); ``SubAgents`` acts
for the workflow.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel
from temporalio import workflow
from temporalio.common import RetryPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    CancelledError,
    ChildWorkflowError,
    FailureError,
    TerminatedError,
    TimeoutError,
    WorkflowAlreadyStartedError,
)

from agent_runner.contract.agents import AgentSpec, agent_answer
from agent_runner.contract.events import AGENT_STARTED
from agent_runner.contract.types import CHILD_USAGE_ACTIVITY, WORKFLOW_TYPE, ToolResult, Usage

# Re-exported: agent_run.py imports the signal name from here.
from agent_runner.contract.types import STOP_FROM_PARENT_SIGNAL as STOP_FROM_PARENT_SIGNAL
from agent_runner.workflows.patches import implied

if TYPE_CHECKING:
    from agent_runner.contract.run_input import RunSpec
    from agent_runner.workflows.run_view import RunView

TREE_PATCH = "agent-tree"
"""Patch: a parent publishes ``agent_started`` when a child starts, and adds a finished child's usage to its own."""

CHARGE_PATCH = "charge-unfinished-children"
"""Patch: a parent adds what a child that ended without a result (failed, cancelled, ...) spent to its own usage, read
by an activity (``activities/subagents.py``)."""


class ChildRun(BaseModel):
    """A child run an agent call started, as the parent's status shows it."""

    id: str
    name: str
    """The agent's name."""
    tool_use_id: str
    status: str = "running"
    """``running``, then the child's final status (``completed``, ``stopped``, ...) or how it ended without one
    (``failed``, ``cancelled``, ``terminated``, ``timed_out``)."""


class SubAgents:
    """The run's calls of its agents."""

    def __init__(self, run: RunView) -> None:
        self._run = run

    def find(self, name: str) -> AgentSpec | None:
        """The agent called ``name`` that the run declared (``agents``), if it has one."""
        spec = self._run.spec
        return next((a for a in spec.agents if a.name == name), None) if spec is not None else None

    def is_agent(self, name: str) -> bool:
        """Whether a call of ``name`` is an agent's: one the run declared, or one a worker registered."""
        registered = self._run.state.tools.get(name)
        return self.find(name) is not None or (registered is not None and registered.agent is not None)

    async def call(self, agent: AgentSpec, block: dict[str, Any]) -> ToolResult:
        """Run the child for one ``tool_use`` of ``agent``; its result, or an error result saying why there is none."""
        run = self._run
        spec = run.spec
        assert spec is not None
        limits = spec.agent_limits
        tool_use_id = str(block.get("id"))
        if limits.depth >= limits.max_depth:
            return _error(
                f"Agent '{agent.name}' was not started: this run is at depth {limits.depth}, and "
                f"`agent_limits.max_depth` is {limits.max_depth}."
            )
        if self._place(tool_use_id) >= limits.max_fan_out:
            return _error(
                f"Agent '{agent.name}' was not started: one reply may start at most {limits.max_fan_out} agents "
                "(`agent_limits.max_fan_out`). Call it again in a later turn."
            )
        abandoned = run.abandoned()
        if abandoned is not None:
            return ToolResult(content=abandoned, is_error=True)
        child_id = f"{workflow.info().workflow_id}/{tool_use_id}"
        try:
            handle = await workflow.start_child_workflow(
                WORKFLOW_TYPE,
                self._child_input(agent, spec, block.get("input")),
                id=child_id,
                task_queue=workflow.info().task_queue,
                result_type=dict,
                parent_close_policy=workflow.ParentClosePolicy.REQUEST_CANCEL,
                # A closed child with this id answered this call already: never run it a second time.
                id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                static_summary=f"agent {agent.name} · {tool_use_id}",
            )
        except WorkflowAlreadyStartedError:
            return _error(
                f"Agent '{agent.name}' was not started: a run with id {child_id!r} already exists (this call was "
                "answered before). Read that run's result, or call the agent again."
            )
        except ChildWorkflowError as e:
            return _error(f"Agent '{agent.name}' could not be started: {_cause(e)}.")
        child = ChildRun(id=child_id, name=agent.name, tool_use_id=tool_use_id)
        run.state.children.append(child)
        # The stream's events (and their offsets) and the run's usage change with this: a run begun before replays
        # as it ran.
        tree = implied(TREE_PATCH)
        if tree:
            run.event(AGENT_STARTED, tool_use_id=tool_use_id, name=agent.name, run_id=child_id)
        try:
            await workflow.wait_condition(lambda: handle.done() or run.state.stop is not None)
            if not handle.done():
                # The parent was stopped: so is the child, at its next step; its result says what it got to.
                try:
                    await handle.signal(STOP_FROM_PARENT_SIGNAL, f"The parent run was stopped: {run.state.stop}")
                except FailureError:
                    pass  # the child ended before the signal reached it: its result says how
            outcome: dict[str, Any] = await handle
        except ChildWorkflowError as e:
            child.status = _ended(e)
            if implied(CHARGE_PATCH):
                run.state.usage = run.state.usage.add(await _spent(child_id))
            return _error(_failure(agent.name, e))
        except asyncio.CancelledError:
            child.status = "cancelled"
            handle.cancel()  # the parent is cancelled: the child is asked to cancel too
            raise
        child.status = str(outcome.get("status"))
        if tree:
            # What the child spent is the parent's: its budget and usage count it (and the child's own children's).
            run.state.usage = run.state.usage.add(outcome.get("usage"))
        return _result(agent.name, outcome)

    def _place(self, tool_use_id: str) -> int:
        """This call's place among the reply's agent calls, in block order (0 for the first)."""
        reply = self._run.state.last_reply or {}
        calls = [
            str(b.get("id"))
            for b in reply.get("content") or []
            if b.get("type") == "tool_use" and self.is_agent(str(b.get("name")))
        ]
        return calls.index(tool_use_id) if tool_use_id in calls else 0

    def _child_input(self, agent: AgentSpec, spec: RunSpec, tool_input: Any) -> dict[str, Any]:
        """The child run's input: the agent's settings, the parent's where it has none, bounded by the parent."""
        state = self._run.state
        child: dict[str, Any] = {
            "model": agent.model or spec.params["model"],
            "max_tokens": agent.max_tokens or spec.params["max_tokens"],
            "messages": [{"role": "user", "content": agent.task(tool_input)}],
            "thread": spec.thread,
            "model_activity": spec.model_activity.model_dump(mode="json", exclude_defaults=True),
            "agent_limits": spec.agent_limits.model_copy(update={"depth": spec.agent_limits.depth + 1}).model_dump(),
        }
        if agent.system is not None:
            child["system"] = agent.system
        if agent.tools:
            child["tools"] = list(agent.tools)
        if agent.mcp:
            child["mcp"] = list(agent.mcp)
        if agent.agents:
            child["agents"] = [a.model_dump(exclude_defaults=True) for a in agent.agents]
        limits = [n for n in (agent.max_iterations, _left(spec.max_iterations, state.iterations)) if n is not None]
        if limits:
            child["max_iterations"] = max(min(limits), 1)
        left = spec.budget.left(state.usage, state.started_at, workflow.now())
        if left:
            # A child that spends its share ends, and its parent, spent too, is the one that asks for more.
            bounded = spec.budget.model_copy(update={**left, "on_spent": "end"})
            child["budget"] = bounded.model_dump(mode="json", exclude_defaults=True)
        return child


USAGE_RETRY = RetryPolicy(maximum_interval=timedelta(seconds=5), maximum_attempts=5)
"""How long a parent asks what a child that ended without a result spent (a child that cannot tell: once)."""


async def _spent(child_id: str) -> dict[str, Any] | None:
    """What the child ``child_id`` spent before it ended without a result, if it can tell (else nothing is charged)."""
    try:
        usage: Usage = await workflow.execute_activity(
            CHILD_USAGE_ACTIVITY,
            child_id,
            result_type=Usage,
            start_to_close_timeout=timedelta(seconds=30),
            retry_policy=USAGE_RETRY,
            summary=f"usage of {child_id}",
        )
    except ActivityError:
        return None  # not known: the parent's usage counts what it knows of, and the call's result says why
    return usage.model_dump()


def _left(limit: int | None, used: int) -> int | None:
    return None if limit is None else limit - used


def _error(text: str) -> ToolResult:
    return ToolResult(content=f"Error: {text}", is_error=True)


def _result(name: str, outcome: dict[str, Any]) -> ToolResult:
    """A finished child's ``RunResult`` as the call's result: its final text, or why it did not finish."""
    content, is_error = agent_answer(name, outcome)
    return ToolResult(content=content, is_error=is_error)


def _cause(error: FailureError) -> str:
    cause = error.cause
    return (cause.message if isinstance(cause, FailureError) else str(error)).rstrip(".")


def _ended(error: ChildWorkflowError) -> str:
    """How a child ended without a result, as its status."""
    cause = error.cause
    if isinstance(cause, CancelledError):
        return "cancelled"
    if isinstance(cause, TerminatedError):
        return "terminated"
    if isinstance(cause, TimeoutError):
        return "timed_out"
    return "failed"


def _failure(name: str, error: ChildWorkflowError) -> str:
    """Why a child ended without a result, in words Claude can act on."""
    cause = error.cause
    if isinstance(cause, CancelledError):
        return f"Agent '{name}' was cancelled before it finished."
    if isinstance(cause, TerminatedError):
        return f"Agent '{name}' was terminated before it finished."
    if isinstance(cause, TimeoutError):
        return f"Agent '{name}' timed out before it finished."
    if isinstance(cause, ApplicationError):
        return f"Agent '{name}' failed: {cause.message.rstrip('.')}."
    return f"Agent '{name}' failed: {_cause(error)}."
