"""Plain JSON that looks like a stored reference is data, whoever sends it (issue 10, point 8).

The Python client sends content in the held form and marks it ``"held": true``; anything unmarked (the stock
``temporal`` CLI's JSON, a schedule's input) is escaped by the run, so ``{"agent_runner.stored": ref}`` in it is never
looked up in the store: Claude and tools get it exactly as written.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import timedelta
from typing import Any

import pytest
from anthropic import beta_tool
from temporalio.client import Client

from agent_runner.client import AgentRunner
from agent_runner.contract.errors import InvalidRunInput
from agent_runner.schedules import create_schedule, delete_schedule, describe_schedule, held_input
from agent_runner.testing import FakeMessagesAPI, Reply, end_turn, tool_use
from tests.conftest import WorkerFactory, stock_start, stock_update
from tests.steering_support import wait_status

MISSING = {"agent_runner.stored": "sha256:" + "0" * 64}
"""Shaped like a reference to a blob no store holds: taken for one, it would fail the run."""

ESCAPE_LOOKALIKE = {"agent_runner.escaped": {"agent_runner.splice": "sha256:" + "1" * 64}}
"""Shaped like an escape: taken for one, it would lose its outer key."""

INPUT = {"city": "Paris", "note": MISSING, "raw": ESCAPE_LOOKALIKE}

HISTORY: list[dict[str, Any]] = [
    {"role": "user", "content": "Paris?"},
    {"role": "assistant", "content": [tool_use("toolu_1", "lookup", INPUT)]},
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"}]},
]

RUN_INPUT: dict[str, Any] = {"model": "claude-fake-1", "max_tokens": 256, "messages": HISTORY, "thread": False}

SEEN: list[Any] = []


@beta_tool
def echo(value: dict[str, Any]) -> str:
    """Say back what it was given.

    Args:
        value: Anything.
    """
    SEEN.append(value)
    return json.dumps(value, sort_keys=True)


async def test_lookalikes_in_a_run_started_with_the_stock_cli_reach_claude_as_written(
    client: Client, runner: AgentRunner, task_queue: str, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    fake_api.script(end_turn("Sunny."))
    workflow_id = f"plain-{uuid.uuid4()}"
    async with worker():
        await asyncio.to_thread(stock_start, client, task_queue, workflow_id, RUN_INPUT)
        result = await runner.attach(workflow_id).result()
        transcript = await runner.attach(workflow_id).transcript()
    assert result.status == "completed"
    assert fake_api.bodies()[0]["messages"] == HISTORY
    assert transcript[:3] == HISTORY


async def test_an_approval_from_the_stock_cli_gives_the_tool_its_lookalike_input_as_written(
    client: Client, runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    SEEN.clear()
    fake_api.script(Reply([tool_use("toolu_E", "echo", {"value": {"k": 1}})], "tool_use"), end_turn("Echoed."))
    async with worker(echo):
        run = await runner.start(
            model="claude-fake-1",
            max_tokens=256,
            messages=[{"role": "user", "content": "Echo."}],
            tools=[echo],
            approval={"tools": ["echo"]},
        )
        await wait_status(run, "waiting_for_approval", 1)
        decision = {"tool_use_id": "toolu_E", "input": {"value": INPUT}}
        await asyncio.to_thread(stock_update, client, run.id, "approve_tool", decision)
        assert (await run.result()).status == "completed"
    assert SEEN == [INPUT]
    assert fake_api.bodies()[1]["messages"][-1]["content"] == [
        {"type": "tool_result", "tool_use_id": "toolu_E", "content": json.dumps(INPUT, sort_keys=True)}
    ]


async def test_the_python_client_marks_what_it_holds_and_its_content_round_trips(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """The client stores a big message apart and sends its placeholder: marked held, the run takes it as ours."""
    fake_api.script(end_turn("Long indeed."))
    big = "x" * 5000
    history = [*HISTORY, {"role": "assistant", "content": "And?"}, {"role": "user", "content": big}]
    async with worker():
        run = await runner.start(model="claude-fake-1", max_tokens=256, messages=history, thread=False)
        assert (await run.result()).status == "completed"
        started = (await run.handle.fetch_history()).events[0].workflow_execution_started_event_attributes
    sent = json.loads(started.input.payloads[0].data)
    assert sent["held"] is True
    assert sent["messages"][-1]["content"] == {
        "agent_runner.stored": sent["messages"][-1]["content"]["agent_runner.stored"]
    }
    assert fake_api.bodies()[0]["messages"] == history


async def test_a_schedule_keeps_plain_json_and_its_runs_send_lookalikes_as_written(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    schedule_id = f"lookalike-{uuid.uuid4().hex[:8]}"
    fake_api.script(end_turn("Sunny."))
    async with worker():
        await create_schedule(runner, schedule_id, RUN_INPUT, every=timedelta(hours=1), start_now=True)
        for _ in range(100):
            fired = await describe_schedule(runner, schedule_id)
            if fired.recent_runs:
                break
            await asyncio.sleep(0.2)
        else:
            pytest.fail("the schedule did not fire within 20 s")
        action = (await runner.client.get_schedule_handle(schedule_id).describe()).schedule.action
        result = await runner.attach(fired.recent_runs[0]).result()
        await delete_schedule(runner, schedule_id)
    assert result.status == "completed"
    assert [json.loads(arg.data) for arg in getattr(action, "args", [])] == [RUN_INPUT]
    assert fake_api.bodies()[0]["messages"] == HISTORY


def test_a_schedule_refuses_held_input() -> None:
    with pytest.raises(InvalidRunInput, match="A schedule keeps its run input as plain JSON: leave out `held`"):
        held_input({**RUN_INPUT, "held": True})
    assert held_input(RUN_INPUT) == RUN_INPUT
