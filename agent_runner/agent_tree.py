"""A run's tree of agents as a client sees it: its children's live events among its own, its status nested.

A run's agent call starts a child run, id ``<parent id>/<tool_use_id>`` (``workflows/subagents.py``), which has its
own Workflow Stream and live log. The parent publishes ``agent_started`` once the child started; ``follow_tree``
then follows the child's events too (and, the same way, its children's), each tagged with its ``path`` of agent
calls, and holds the parent's ``tool_finished`` of the call until the child's last event came, so that a child's
events come between the two. ``status_tree`` nests each child's status (and its children's) in ``RunStatus.agents``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from agent_runner.contract.events import AgentStarted, RunEvent, ToolFinished
from agent_runner.contract.types import RunStatus

if TYPE_CHECKING:
    from agent_runner.client import Run


async def follow_tree(run: Run, after: int) -> AsyncIterator[RunEvent]:
    """``run``'s live events from stream offset ``after``, its children's (and theirs) among them, tagged by path."""
    out: asyncio.Queue[RunEvent | Exception | None] = asyncio.Queue()
    followers: dict[str, asyncio.Task[None]] = {}

    async def follow_child(tool_use_id: str) -> None:
        async for event in run.child(tool_use_id).events():
            await out.put(event.model_copy(update={"path": (tool_use_id, *event.path)}))

    async def follow_own() -> None:
        try:
            async for event in run._own_events(after):
                if isinstance(event, ToolFinished) and event.tool_use_id in followers:
                    await followers.pop(event.tool_use_id)  # the child's every event comes before its result
                await out.put(event)
                if isinstance(event, AgentStarted) and event.tool_use_id not in followers:
                    followers[event.tool_use_id] = asyncio.create_task(follow_child(event.tool_use_id))
            # A child whose call has no result yet (the parent ended first) still has its say, until it ends.
            while followers:
                await followers.pop(next(iter(followers)))
        except Exception as e:  # the watcher's to see: raised where it reads the events
            await out.put(e)
        await out.put(None)

    own = asyncio.create_task(follow_own())
    try:
        while (item := await out.get()) is not None:
            if isinstance(item, Exception):
                raise item
            yield item
    finally:
        tasks = [own, *followers.values()]
        for task in tasks:
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(*tasks, return_exceptions=True)


async def status_tree(run: Run) -> RunStatus:
    """``run``'s status with each child's status (``run``, with its own children's) in its entry of ``agents``."""
    status = await run.status()
    if not status.agents:
        return status

    async def nested(entry: dict[str, Any]) -> dict[str, Any]:
        child = await status_tree(run.child(str(entry["tool_use_id"])))
        return {**entry, "run": child.model_dump(mode="json")}

    agents = await asyncio.gather(*(nested(entry) for entry in status.agents))
    return status.model_copy(update={"agents": list(agents)})
