"""A run's tree of agents as a client sees it: its children's live events among its own, its status nested.

A run's agent call starts a child run, id ``<parent id>/<tool_use_id>`` (``workflows/subagents.py``), which has its
own Workflow Stream and live log. The parent publishes ``agent_started`` once the child started; ``follow_tree``
then follows the child's events too (and, the same way, its children's), each tagged with its ``path`` of agent
calls, and holds the parent's ``tool_finished`` of the call until the child's last event came, so that a child's
events come between the two. ``status_tree`` nests each child's status (and its children's) in ``RunStatus.agents``.

Resuming ``after`` an offset, the calls open there (their ``agent_started`` before it, their ``tool_finished`` not)
are found by reading the parent's stream up to it (``open_agent_calls``): each such child is followed from its first
event, since its events come before the call's ``tool_finished``, which is still to come.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator
from datetime import timedelta
from typing import TYPE_CHECKING, Any, cast

from temporalio.contrib.workflow_streams import WorkflowStreamClient
from temporalio.service import RPCError

from agent_runner.contract.events import AGENT_STARTED, TOOL_FINISHED, AgentStarted, RunEvent, ToolFinished
from agent_runner.contract.types import EVENTS_TOPIC, RunStatus

if TYPE_CHECKING:
    from agent_runner.client import Run

_SCAN_POLL = timedelta(seconds=0.2)
"""How often ``open_agent_calls`` polls while the stream has not reached the offset it reads up to."""


async def follow_tree(run: Run, after: int) -> AsyncIterator[RunEvent]:
    """``run``'s live events from stream offset ``after``, its children's (and theirs) among them, tagged by path."""
    out: asyncio.Queue[RunEvent | Exception | None] = asyncio.Queue()
    followers: dict[str, asyncio.Task[None]] = {}

    async def follow_child(tool_use_id: str) -> None:
        async for event in run.child(tool_use_id).events():
            await out.put(event.model_copy(update={"path": (tool_use_id, *event.path)}))

    async def follow_own() -> None:
        try:
            for tool_use_id in await open_agent_calls(run, after):
                followers[tool_use_id] = asyncio.create_task(follow_child(tool_use_id))
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


async def open_agent_calls(run: Run, after: int) -> list[str]:
    """The ``tool_use_id`` of each agent call of ``run`` open at stream offset ``after``, in the order they started.

    A call is open there when its ``agent_started`` comes before ``after`` and its ``tool_finished`` does not. Reads
    the run's own events before ``after`` as published (no content or live text): a continue-as-new truncates them,
    but happens with no child in flight, so no open call is lost with them.
    """
    if after <= 0:
        return []
    stream = WorkflowStreamClient.create(run._client, run.id)
    items = cast(
        AsyncGenerator[Any, None],
        stream.subscribe([EVENTS_TOPIC], from_offset=0, poll_cooldown=_SCAN_POLL),
    )
    opened: dict[str, None] = {}  # an ordered set
    try:
        async with contextlib.aclosing(items):
            while True:
                try:
                    item = await run._answered(anext(items), durable=True)
                except StopAsyncIteration:
                    break
                if item.offset >= after:
                    break
                data = item.data if isinstance(item.data, dict) else {}
                if data.get("type") == AGENT_STARTED:
                    opened[str(data.get("tool_use_id"))] = None
                elif data.get("type") == TOOL_FINISHED:
                    opened.pop(str(data.get("tool_use_id")), None)
                if item.offset == after - 1:
                    break
    except RPCError as e:
        from agent_runner.client import _rpc_error  # here: client.py imports this module

        raise _rpc_error(run.id, e) from e
    return list(opened)


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
