"""Budgets end runs gracefully at an iteration boundary, naming the budget; optionally Claude sums up first."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from anthropic import beta_async_tool

from agent_runner.client import AgentRunner
from agent_runner.fake_api import FakeMessagesAPI, Reply, end_turn, text, tool_use
from tests.conftest import WorkerFactory
from tests.tools_for_tests import get_weather
from workflows.errors import InvalidRunInput

BASE: dict[str, Any] = {
    "model": "claude-fake-1",
    "max_tokens": 256,
    "messages": [{"role": "user", "content": "Keep checking the weather."}],
    "thread": False,
}


def always_a_tool(usage: dict[str, int]) -> Any:
    counter = iter(range(1, 1000))
    return lambda _body: Reply(
        [tool_use(f"toolu_{next(counter)}", "get_weather", {"city": "Paris"})], "tool_use", usage=usage
    )


async def test_an_output_token_budget_ends_the_run_at_the_next_boundary(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    fake_api.responder = always_a_tool({"input_tokens": 100, "output_tokens": 10})
    async with worker(get_weather):
        run = await runner.start(**BASE, tools=[get_weather], budget={"max_output_tokens": 25})
        result = await run.result()
    assert (result.status, result.iterations, result.detail) == (
        "budget_exhausted",
        3,
        "The output token budget (30 of 25) is spent.",
    )
    assert len(fake_api.requests) == 3


async def test_a_cost_budget_with_a_summary_turn_without_tools(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    replies = always_a_tool({"input_tokens": 1000, "output_tokens": 100})
    fake_api.responder = lambda body: (
        end_turn("Paris stayed sunny.") if body.get("tool_choice") == {"type": "none"} else replies(body)
    )
    async with worker(get_weather):
        run = await runner.start(
            **BASE,
            tools=[get_weather],
            budget={"max_cost_usd": 0.008, "prices": {"input": 3.0, "output": 15.0}, "summarize": True},
        )
        result = await run.result()
    assert result.status == "budget_exhausted"
    assert result.detail == "The cost budget ($0.0090 of $0.0080) is spent."
    assert result.final_message is not None and result.final_message["content"] == [text("Paris stayed sunny.")]
    last = fake_api.bodies()[-1]
    assert last["tool_choice"] == {"type": "none"}
    assert last["messages"][-1]["content"][-1] == {
        "type": "text",
        "text": "The cost budget ($0.0090 of $0.0080) is spent. Do not call tools any more: answer now with what you "
        "have.",
    }
    assert len(fake_api.requests) == 3


async def test_a_time_budget_ends_the_run_after_the_turn_that_passed_it(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    @beta_async_tool
    async def slow_lookup(city: str) -> str:
        """Look slowly.

        Args:
            city: The city.
        """
        await asyncio.sleep(1.5)
        return f"looked up {city}"

    fake_api.script(Reply([tool_use("toolu_S", "slow_lookup", {"city": "Oslo"})], "tool_use"), end_turn("never sent"))
    async with worker(slow_lookup):
        run = await runner.start(**BASE, tools=[slow_lookup], budget={"timeout": "PT1S"})
        result = await run.result()
    assert (result.status, result.iterations, result.detail) == (
        "budget_exhausted",
        1,
        "The time budget (0:00:01) is spent.",
    )


def test_a_cost_budget_needs_prices() -> None:
    from workflows.run_input import parse_run_input

    with pytest.raises(InvalidRunInput, match="`max_cost_usd` needs `prices`"):
        parse_run_input({**BASE, "budget": {"max_cost_usd": 1}})


async def test_status_shows_cost_and_the_last_error_of_a_call_being_retried(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    from agent_runner.fake_api import overloaded

    fake_api.script(overloaded(), overloaded(), end_turn("ok", usage={"input_tokens": 1000, "output_tokens": 100}))
    async with worker():
        run = await runner.start(
            **BASE,
            budget={"prices": {"input": 3.0, "output": 15.0}},
            model_activity={"initial_interval": "PT1S", "maximum_interval": "PT1S"},
        )
        async with asyncio.timeout(20):
            while (status := await run.status()).last_error is None:
                await asyncio.sleep(0.05)
        await run.until_done()
        final = await run.status()
    assert status.last_error is not None
    assert status.last_error.startswith("agent_runner.create_message (attempt ")
    assert "Claude's API answered 529" in status.last_error
    assert final.cost_usd == pytest.approx(0.0045) and final.last_error is None
