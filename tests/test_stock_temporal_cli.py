"""A run started and read with the stock `temporal` CLI and plain JSON, as the README documents it."""

from __future__ import annotations

import asyncio
import json

from temporalio.client import Client

from agent_runner.testing import FakeMessagesAPI, Reply, end_turn, text, tool_use
from tests.conftest import WorkerFactory, stock_start, stock_temporal
from tests.tools_for_tests import get_weather


async def test_the_stock_temporal_cli_starts_a_run_with_plain_json(
    client: Client, task_queue: str, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    fake_api.script(
        Reply(
            content=[text("Checking."), tool_use("toolu_1", "get_weather", {"city": "Paris"})], stop_reason="tool_use"
        ),
        end_turn("Sunny in Paris."),
    )
    run_input = {
        "model": "claude-fake-1",
        "max_tokens": 256,
        "messages": [{"role": "user", "content": "Weather in Paris?"}],
        "tools": ["get_weather"],
        "max_iterations": 5,
    }
    async with worker(get_weather):
        await asyncio.to_thread(stock_start, client, task_queue, f"cli-{task_queue}", run_input)
        out = await asyncio.to_thread(
            stock_temporal, client, "workflow", "result", "--workflow-id", f"cli-{task_queue}"
        )
    result = json.loads(out)["result"]
    assert result["status"] == "completed"
    assert result["iterations"] == 2
    assert result["stop_reason"] == "end_turn"
    assert result["final_message"]["content"] == [{"type": "text", "text": "Sunny in Paris."}]
    assert fake_api.bodies()[1]["messages"] == [
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny, 21C in Paris"}],
        }
    ]
