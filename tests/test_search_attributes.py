"""Operators find runs: a fleet that registered the AgentRun* search attributes can list runs waiting on approval,
by status, iterations, tokens and model."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from anthropic import beta_async_tool

from agent_runner.client import AgentRunner
from agent_runner.testing import FakeMessagesAPI, Reply, bad_request, end_turn, tool_use
from tests.conftest import WorkerFactory


@beta_async_tool
async def deploy(service: str) -> str:
    """Deploy a service.

    Args:
        service: Which one.
    """
    return f"deployed {service}"


SHIP: dict[str, Any] = {
    "model": "claude-fake-1",
    "max_tokens": 64,
    "messages": [{"role": "user", "content": "Ship it."}],
    "tools": [deploy],
}
"""What each run here is started with, besides its options."""


async def ids(runner: AgentRunner, query: str, expected: int) -> list[str]:
    async with asyncio.timeout(20):  # visibility is eventually consistent
        while True:
            found = [s.id async for s in runner.client.list_workflows(query)]
            if len(found) >= expected:
                return found
            await asyncio.sleep(0.1)


async def test_runs_waiting_for_approval_and_finished_runs_can_be_listed(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    fake_api.script(
        Reply(
            [tool_use("toolu_1", "deploy", {"service": "api"})],
            "tool_use",
            usage={"input_tokens": 40, "output_tokens": 2},
        ),
        end_turn("done", usage={"input_tokens": 50, "output_tokens": 8}),
    )
    async with worker(deploy, search_attributes=True):
        run = await runner.start(
            **SHIP,
            approval={"tools": ["deploy"]},
        )
        waiting = await ids(runner, f'AgentRunWaiting = "approval" AND WorkflowId = "{run.id}"', 1)
        await run.approve("toolu_1")
        await run.until_done()
        done = await ids(
            runner,
            f'AgentRunStatus = "completed" AND AgentRunIterations = 2 AND AgentRunTokens = 100 '
            f'AND AgentRunModel = "claude-fake-1" AND AgentRunWaiting = "" AND WorkflowId = "{run.id}"',
            1,
        )
    assert waiting == [run.id] and done == [run.id]


async def test_a_run_that_continued_as_new_goes_on_publishing_its_search_attributes(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """The continuation knows the fleet registered the attributes: the run is listed by its final status."""
    fake_api.script(Reply([tool_use("toolu_1", "deploy", {"service": "api"})], "tool_use"), end_turn("done"))
    async with worker(deploy, search_attributes=True):
        run = await runner.start(
            **SHIP,
            continue_as_new={"events": 10},
        )
        await run.until_done()
        status = await run.status()
        done = await ids(
            runner, f'AgentRunStatus = "completed" AND AgentRunIterations = 2 AND WorkflowId = "{run.id}"', 1
        )
    assert (status.continuations, done) == (1, [run.id])


@pytest.mark.parametrize("end", ["failed", "cancelled"])
async def test_a_run_that_failed_or_was_cancelled_while_waiting_no_longer_lists_as_waiting(
    end: str, runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """Its search attributes say how it ended, as a completed run's do: `AgentRunWaiting = "approval"` finds only
    runs that still wait."""
    fake_api.script(Reply([tool_use("toolu_1", "deploy", {"service": "api"})], "tool_use"), bad_request("No."))
    async with worker(deploy, search_attributes=True):
        run = await runner.start(
            **SHIP,
            approval={"tools": ["deploy"]},
        )
        await ids(runner, f'AgentRunWaiting = "approval" AND WorkflowId = "{run.id}"', 1)
        if end == "failed":
            await run.approve("toolu_1")  # the next model call is refused with a 400: the run fails
        else:
            await run.cancel()
        ended = await ids(runner, f'AgentRunStatus = "{end}" AND AgentRunWaiting = "" AND WorkflowId = "{run.id}"', 1)
        closed = await run.ended()
    assert (ended, closed) == ([run.id], {"failed": "failed", "cancelled": "canceled"}[end])


async def test_list_shows_each_run_once_with_its_own_status(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, task_queue: str
) -> None:
    """A run that continued as new was a line per execution (`continued_as_new` ones, and in the console stale
    `running` ones), and a stopped run or one waiting for approval showed Temporal's `completed`/`running`."""
    from agent_runner.console.listing import list_rows

    fake_api.script(
        Reply([tool_use("toolu_1", "deploy", {"service": "api"})], "tool_use"),
        end_turn("done"),
        Reply([tool_use("toolu_2", "deploy", {"service": "web"})], "tool_use"),
        Reply([tool_use("toolu_3", "deploy", {"service": "db"})], "tool_use"),
    )
    async with worker(deploy, search_attributes=True):
        long = await runner.start(**SHIP, continue_as_new={"events": 10})
        await long.until_done()
        stopped = await runner.start(**SHIP, step=True)
        await stopped.stop("enough")
        await stopped.result()
        waiting = await runner.start(**SHIP, approval={"tools": ["deploy"]})
        await ids(runner, f'AgentRunWaiting = "approval" AND WorkflowId = "{waiting.id}"', 1)
        await ids(runner, f'AgentRunStatus = "stopped" AND WorkflowId = "{stopped.id}"', 1)
        listed = {(s.id, s.status) for s in await runner.list(f"TaskQueue = '{task_queue}'")}
        rows = await list_rows(runner.client, task_queue=task_queue, waiting=None, limit=50)
        await waiting.terminate("test over")
    expected = {(long.id, "completed"), (stopped.id, "stopped"), (waiting.id, "waiting_for_approval")}
    assert listed == expected
    assert {(r["id"], r["status"]) for r in rows} == expected
    assert len(rows) == 3
