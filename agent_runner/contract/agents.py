"""Sub-agents in a run's input: the ``agents`` Claude can call as tools, and the ``agent_limits`` of their tree.

A call of an agent runs as a child run (``workflows/subagents.py``).
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agent_runner.contract.errors import validation_summary

DEFAULT_INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "task": {"type": "string", "description": "What the agent should do, with everything it needs to know."}
    },
    "required": ["task"],
}
"""An agent's input schema when it declares none: one task, which becomes the child's user message as it is."""


class AgentLimits(BaseModel):
    """How big the tree of agents may grow (``agent_limits``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_depth: int = Field(default=3, ge=0)
    """How many levels of agents may run below the root run (0: none)."""
    max_fan_out: int = Field(default=8, ge=1)
    """How many agents one reply may start; later calls in the reply get an error result."""
    depth: int = Field(default=0, ge=0)
    """This run's level in the tree: 0 for a run a client started; a parent sets it for its children."""


class AgentSpec(BaseModel):
    """An agent a run gives Claude as a tool (one entry of ``agents``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=r"^[a-zA-Z0-9_-]{1,128}$")
    """The tool name Claude calls it by."""
    description: str = Field(min_length=1)
    """What Claude reads to decide when to call it."""
    input_schema: dict[str, Any] | None = None
    """The call's JSON schema; ``None`` for ``DEFAULT_INPUT_SCHEMA`` (one ``task`` string)."""
    model: str | None = None
    """The child's model; the parent's by default."""
    max_tokens: int | None = Field(default=None, ge=1)
    """The child's ``max_tokens``; the parent's by default."""
    system: str | list[dict[str, Any]] | None = None
    """The child's system prompt; none by default (the parent's is not inherited)."""
    tools: list[str | dict[str, Any]] = []
    """The child's tools: registered names and raw definitions, as a run's ``tools``."""
    mcp: list[str] = []
    """MCP servers whose tools the child uses, as a run's ``mcp``."""
    agents: list[AgentSpec] = []
    """The child's own agents."""
    max_iterations: int | None = Field(default=None, ge=1)
    """The child's ``max_iterations`` (bounded by what the parent has left)."""

    def definition(self) -> dict[str, Any]:
        """The tool definition Claude sees."""
        return {
            "name": self.name,
            "description": self.description,
            "input_schema": self.input_schema if self.input_schema is not None else DEFAULT_INPUT_SCHEMA,
        }

    def levels(self) -> int:
        """How many levels of runs a call of this agent can make: 1, plus its deepest agent's."""
        return 1 + max((a.levels() for a in self.agents), default=0)

    def task(self, tool_input: Any) -> str:
        """The child's user message for a call's input: the task itself, or the input as JSON for a custom schema."""
        if self.input_schema is None and isinstance(tool_input, dict) and isinstance(tool_input.get("task"), str):
            return str(tool_input["task"])
        return json.dumps(tool_input, ensure_ascii=False)


def parse_agents(
    raw: dict[str, Any], tool_names: list[str], problems: list[str]
) -> tuple[list[AgentSpec], AgentLimits]:
    """A run's ``agents`` and ``agent_limits``, with what is wrong with them added to ``problems``."""
    limits = AgentLimits()
    if raw.get("agent_limits") is not None:
        try:
            limits = AgentLimits.model_validate(raw["agent_limits"])
        except ValidationError as e:
            problems.append(f"`agent_limits` is invalid: {validation_summary(e)}")
    declared = raw.get("agents", [])
    if not isinstance(declared, list):
        problems.append("`agents` must be a list of agent objects (name, description, model, system, tools, ...).")
        return [], limits
    agents: list[AgentSpec] = []
    for i, entry in enumerate(declared):
        try:
            agents.append(AgentSpec.model_validate(entry))
        except ValidationError as e:
            problems.append(f"`agents[{i}]` is invalid: {validation_summary(e)}")
    seen: set[str] = set()
    for agent in agents:
        if agent.name in tool_names:
            problems.append(f"Agent `{agent.name}` has the name of a tool of the run; give one of them another name.")
        if agent.name in seen:
            problems.append(f"Two agents are named `{agent.name}`; agents need distinct names.")
        seen.add(agent.name)
        allowed = limits.max_depth - limits.depth
        if agent.levels() > allowed:
            problems.append(
                f"Agent `{agent.name}` nests {agent.levels()} levels of runs below this one, and "
                f"`agent_limits.max_depth` ({limits.max_depth}) leaves {max(allowed, 0)} below this run (at depth "
                f"{limits.depth}); declare fewer levels of agents or raise `max_depth`."
            )
    return agents, limits


def agent_answer(name: str, outcome: dict[str, Any]) -> tuple[str, bool]:
    """A finished child run's result (``RunResult`` as plain JSON) as the agent call's result.

    Its final text, or why it did not finish: what ``workflows/subagents.py`` answers the call with, and what the
    console reads an ended run's agent calls as.

    Returns:
        The ``tool_result``'s content, and whether it is an error.
    """
    blocks = (outcome.get("final_message") or {}).get("content") or []
    text = "\n\n".join(str(b.get("text")) for b in blocks if isinstance(b, dict) and b.get("type") == "text")
    status = outcome.get("status")
    if status == "completed":
        return text, False
    why = {
        "stopped": f"was stopped before it finished ({outcome.get('detail')})",
        "max_iterations": f"reached its limit of {outcome.get('iterations')} iterations before it finished",
        "budget_exhausted": f"ran out of budget before it finished ({outcome.get('detail')})",
    }.get(str(status), f"ended {status}")
    return f"Error: Agent '{name}' {why}." + (f" Its last reply said: {text}" if text else ""), True
