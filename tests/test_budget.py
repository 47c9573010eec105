"""Budgets end runs gracefully at an iteration boundary, naming the budget; optionally Claude sums up first."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from anthropic import beta_async_tool

from agent_runner.client import AgentRunner
from agent_runner.contract.errors import InvalidRunInput
from agent_runner.testing import FakeMessagesAPI, Reply, end_turn, text, tool_use
from tests.conftest import WorkerFactory
from tests.steering_support import wait_status
from tests.tools_for_tests import get_weather

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
    from agent_runner.contract.run_input import parse_run_input

    with pytest.raises(InvalidRunInput, match="`max_cost_usd` needs `prices`"):
        parse_run_input({**BASE, "budget": {"max_cost_usd": 1}})


async def test_status_shows_cost_and_the_last_error_of_a_call_being_retried(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    from agent_runner.testing import overloaded

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


# --- The newest models' rules (Opus 5.5, Sonnet 5.5): no forced tool on the runner's own requests ---------------------

GET_WEATHER = get_weather.to_dict()
USER = BASE["messages"][0]
SUMMARY = {"type": "compaction", "content": "Summary: Paris is sunny."}


def call(n: int) -> Reply:
    return Reply([tool_use(f"toolu_{n}", "get_weather", {"city": "Paris"})], "tool_use")


def asked(n: int) -> dict[str, Any]:
    return {"role": "assistant", "content": [tool_use(f"toolu_{n}", "get_weather", {"city": "Paris"})]}


def answered(n: int) -> dict[str, Any]:
    return {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": f"toolu_{n}", "content": "sunny, 21C in Paris"}],
    }


@pytest.mark.parametrize("thread", [True, False], ids=["thread", "full_history"])
async def test_the_summary_turn_sends_tool_choice_none_never_a_forced_tool(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, thread: bool
) -> None:
    """Exact body of a budget's summary turn: `tool_choice: none`, whatever the run's own `tool_choice` forced."""
    fake_api.script(call(1), end_turn("Paris is sunny."))
    async with worker(get_weather):
        run = await runner.start(
            **{**BASE, "thread": thread},
            tools=[get_weather],
            tool_choice={"type": "any"},
            budget={"max_output_tokens": 5, "summarize": True},
        )
        result = await run.result()
    assert result.status == "budget_exhausted"
    note = {
        "type": "text",
        "text": "The output token budget (5 of 5) is spent. Do not call tools any more: answer now with what you have.",
    }
    results = {"role": "user", "content": [*answered(1)["content"], note]}
    summary_turn = fake_api.bodies()[-1]
    if thread:
        assert summary_turn == {
            "model": "claude-fake-1",
            "max_tokens": 256,
            "messages": [results],
            "tool_choice": {"type": "none"},
            "thread": {"type": "continue", "previous_message_id": "msg_fake_001"},
            "stream": True,
        }
    else:
        assert summary_turn == {
            "model": "claude-fake-1",
            "max_tokens": 256,
            "messages": [USER, asked(1), results],
            "tools": [GET_WEATHER],
            "tool_choice": {"type": "none"},
            "stream": True,
        }


@pytest.mark.parametrize("thread", [True, False], ids=["thread", "full_history"])
async def test_compact_keeping_recent_turns_summarizes_only_the_older_history(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, thread: bool
) -> None:
    """Exact bodies: the compaction request carries the history before the last turn, without the run's forced
    `tool_choice`; the next turn sends the summary followed by that turn verbatim, on a new thread."""
    fake_api.script(call(1), call(2), call(3), Reply([SUMMARY], "compaction"), end_turn("Done."))
    params = {**BASE, "thread": thread, "betas": ["compact-2026-09-04"], "tool_choice": {"type": "any"}}
    async with worker(get_weather):
        run = await runner.start(**params, tools=[get_weather], step=True)
        for iteration in (1, 2):
            await wait_status(run, "waiting_for_step", iteration)
            await run.advance()
        await wait_status(run, "waiting_for_step", 3)
        await run.compact(keep_recent_turns=1)
        await run.advance()
        await wait_status(run, "waiting_for_step", 4)
        await run.advance()
        result = await run.result()
        transcript = await run.transcript()
    assert result.status == "completed"
    compaction, after = fake_api.bodies()[3:]
    create = {"thread": {"type": "create"}} if thread else {}
    assert compaction == {
        "model": "claude-fake-1",
        "max_tokens": 256,
        "messages": [USER, asked(1), answered(1), asked(2), answered(2)],
        "tools": [GET_WEATHER],
        "compaction": {"type": "summarize"},
        **create,
        "stream": True,
    }
    assert after == {
        "model": "claude-fake-1",
        "max_tokens": 256,
        "messages": [{"role": "assistant", "content": [SUMMARY]}, asked(3), answered(3)],
        "tools": [GET_WEATHER],
        "tool_choice": {"type": "any"},
        **create,
        "stream": True,
    }
    assert result.iterations == 4
    assert transcript == [
        {"role": "assistant", "content": [SUMMARY]},
        asked(3),
        answered(3),
        {"role": "assistant", "content": [text("Done.")]},
    ]


async def test_auto_compact_keeping_recent_turns_waits_for_an_older_turn_then_summarizes_it(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """Past the threshold after the first turn there is nothing older than the last turn: no request; after the
    second, the first is summarized and the second follows the summary verbatim."""
    big = {"input_tokens": 5000, "output_tokens": 5}
    fake_api.script(
        Reply(call(1).content, "tool_use", usage=big),
        Reply(call(2).content, "tool_use", usage=big),
        Reply([SUMMARY], "compaction"),
        end_turn("Done."),
    )
    async with worker(get_weather):
        run = await runner.start(
            **BASE,
            betas=["compact-2026-09-04"],
            tools=[get_weather],
            auto_compact={"input_tokens": 1000, "keep_recent_turns": 1, "compaction": {"type": "summarize"}},
        )
        result = await run.result()
    assert result.status == "completed" and result.iterations == 3
    bodies = fake_api.bodies()
    assert [b.get("compaction") for b in bodies] == [None, None, {"type": "summarize"}, None]
    assert bodies[2]["messages"] == [USER, asked(1), answered(1)]
    assert bodies[3]["messages"] == [{"role": "assistant", "content": [SUMMARY]}, asked(2), answered(2)]


async def test_keep_recent_turns_is_checked_at_the_door(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """A negative or non-integer count is refused before it reaches the run's history, and a compaction with no
    turn older than the kept ones changes nothing and says why."""
    from agent_runner.contract.errors import EditRejected
    from agent_runner.contract.run_input import parse_run_input

    with pytest.raises(InvalidRunInput) as bad_input:
        parse_run_input(
            {**BASE, "betas": ["compact-2026-09-04"], "auto_compact": {"input_tokens": 10, "keep_recent_turns": "2"}}
        )
    assert str(bad_input.value) == (
        "The run's input was rejected:\n- `auto_compact` is invalid: keep_recent_turns: Input should be a valid integer"
    )

    @beta_async_tool
    async def get_weather(city: str) -> str:
        """Get the weather, slowly.

        Args:
            city: The city.
        """
        await asyncio.sleep(1.5)
        return f"sunny in {city}"

    fake_api.script(call(1), end_turn("Done."))
    async with worker(get_weather):
        run = await runner.start(**BASE, tools=[get_weather], betas=["compact-2026-09-04"])
        await wait_status(run, "running", 1)  # the tool runs: edits wait for the boundary after it
        with pytest.raises(EditRejected) as negative:
            await run.compact(keep_recent_turns=-1)
        with pytest.raises(EditRejected) as too_short:
            await run.compact(keep_recent_turns=1, wait=True)
        result = await run.result()
    assert str(negative.value) == (
        "compact was refused: Invalid Compact update: keep_recent_turns: Input should be greater than or equal to 0."
    )
    assert str(too_short.value) == (
        "compact could not apply: Compaction skipped: the history has no turn older than the last 1 to summarize."
    )
    assert result.status == "completed" and [b.get("compaction") for b in fake_api.bodies()] == [None, None]
