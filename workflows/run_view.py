"""``RunView``: what the workflow's rooms may see of the run they work for, and do to it.

The rooms (approvals, tool calls, sleep, sub-agents, toolsets, eager tools, background compaction) each take the run
as a ``RunView`` and use nothing else of it: ``AgentRun`` satisfies this protocol, and its private attributes stay its
own (``tests/test_layers.py`` fails when a room reaches past this surface).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from agent_runner.contract.run_input import RunSpec
    from agent_runner.contract.types import DescribeToolsOutput, RunStatusName
    from agent_runner.workflows.approvals import Approvals, StepMode
    from agent_runner.workflows.state import RunState
    from agent_runner.workflows.tool_calls import ToolCalls


class RunView(Protocol):
    """The run as its rooms see it: its state and spec, its status, its live events and its other rooms."""

    @property
    def state(self) -> RunState:
        """Everything the run keeps (continue-as-new carries it whole); rooms change it in place."""
        ...

    @property
    def spec(self) -> RunSpec | None:
        """The run's checked input, ``None`` until the run has parsed it."""
        ...

    @property
    def current_status(self) -> RunStatusName:
        """The status the ``status`` query reports now."""
        ...

    @property
    def ended(self) -> bool:
        """Whether the run has ended (it takes no more edits)."""
        ...

    @property
    def draining(self) -> bool:
        """Whether the run is waiting for its handlers before continuing as new (no pause comes any more)."""
        ...

    @property
    def in_flight(self) -> int | None:
        """The reply number of the model call under way, if any."""
        ...

    @property
    def run_input(self) -> dict[str, Any]:
        """The run's input as the client sent it (without the state a continuation carries)."""
        ...

    @property
    def approvals(self) -> Approvals:
        """Tool calls waiting for a person (``approvals.py``)."""
        ...

    @property
    def steps(self) -> StepMode:
        """The pauses of a run started with ``step`` (``approvals.py``)."""
        ...

    @property
    def tool_calls(self) -> ToolCalls:
        """The run's tool calls (``tool_calls.py``), with its sleeps, sub-agents and toolsets."""
        ...

    def event(self, event_type: str, **fields: Any) -> None:
        """Publish a live event (``contract/events.py``) of the current reply unless it names its ``iteration``."""
        ...

    def set_status(self, status: RunStatusName) -> None:
        """Change the run's status, and the search attributes that show it."""
        ...

    def abandoned(self) -> str | None:
        """Why a tool call of the current reply must not start now (the run stops, the turn is retried), or ``None``."""
        ...

    def iteration_in_flight(self) -> int | None:
        """The iteration the model call under way will be, if its reply is not a compaction."""
        ...

    async def describe_tools(self, names: list[str], hooks: list[str] | None = None) -> DescribeToolsOutput:
        """Look tools (and result hooks) up on the workers: the ``describe_tools`` activity."""
        ...
