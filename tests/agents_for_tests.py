"""Agents the tests register on a worker, as a user's agents module would define them.

A module of its own so that a worker can register it as a tool module (``--tools tests.agents_for_tests``): the
worker registers every ``AgentSpec`` defined at its top level.
"""

from __future__ import annotations

from agent_runner import AgentSpec

researcher = AgentSpec(
    name="researcher",
    description="Researches one question.",
    system="You research.",
    tools=["get_weather"],
    max_iterations=5,
)

scout = AgentSpec(name="scout", description="Looks once.", system="You scout.")

stepper = AgentSpec(name="stepper", description="Runs the two steps.", system="You research.", tools=["slow_step"])
"""The agent of the durability test: its child run calls ``slow_step`` twice (``tests/test_durability.py``)."""
