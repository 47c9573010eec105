"""One tree, one control plane: a run's child runs as seen from its handle.

The parent's live events include its children's (tagged by their path of agent calls), its status nests theirs, its
usage counts what they spent, and a person steers or approves inside a child from the parent's handle.
"""

from __future__ import annotations

import asyncio
from typing import Any

from agent_runner.client import AgentRunner, Run
from agent_runner.cli.render import render_status
from agent_runner.contract.events import AgentStarted, RunEvent, ToolFinished
from agent_runner.contract.types import RunStatus, Usage
from agent_runner.testing import FakeMessagesAPI, Reply, ScriptItem, end_turn, tool_use
from tests.conftest import WorkerFactory
from tests.test_subagents import BASE, RESEARCH, RESEARCHER, USER, by_system, launch, parent_bodies, research, wait_for
from tests.tools_for_tests import get_weather

SCOUT = {"name": "scout", "description": "Looks once.", "system": "You scout."}


def tree_child(body: dict[str, Any]) -> ScriptItem:
    """Claude for the researcher, which asks a scout once, and for the scout."""
    if body.get("system") == "You scout.":
        return end_turn("Seen.")
    if len(body["messages"]) == 1:
        return Reply(content=[tool_use("toolu_S1", "scout", {"task": "Look."})], stop_reason="tool_use")
    return end_turn("Scout saw it.")


async def start_tree(runner: AgentRunner) -> Run:
    """A parent whose researcher has a scout: three levels of runs, five replies of 10 input and 5 output tokens."""
    return await runner.start(
        **BASE, messages=[USER], thread=False, agents=[{**RESEARCHER, "tools": [], "agents": [SCOUT]}]
    )


def shape(events: list[RunEvent]) -> list[tuple[tuple[str, ...], str, int, int | None]]:
    return [(e.path, e.type, e.iteration, e.offset) for e in events]


async def collect(run: Run, **kwargs: Any) -> list[RunEvent]:
    return [event async for event in run.events(**kwargs)]


async def test_the_parents_events_include_its_childrens_tagged_by_their_path(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    fake_api.responder = by_system([research("toolu_P1", "Go."), end_turn("Done.")], tree_child)
    async with worker():
        run = await start_tree(runner)
        live = asyncio.ensure_future(asyncio.wait_for(collect(run), 60))  # followed as it runs
        await run.until_done()
        events = await live
        again = await asyncio.wait_for(collect(run), 60)  # and read again once it finished
        own = await asyncio.wait_for(collect(run, agents=False), 60)
    print(shape(events))
    print(shape(again))
    print([e for e in events if isinstance(e, (AgentStarted, ToolFinished))])
    assert shape(events) == shape(again)
    assert own == [e for e in events if e.path == ()]
