"""Result hooks: worker-side functions that see a reply's tool results before Claude does."""

from __future__ import annotations

from typing import Any

import pytest

from agent_runner.activities.hooks import HookContext, StopRun, result_hook
from agent_runner.client import AgentRunner
from agent_runner.contract.errors import ToolNotRegistered
from agent_runner.testing import FakeMessagesAPI, Reply, end_turn, tool_use
from tests.conftest import WorkerFactory
from tests.tools_for_tests import fail_disk, get_weather

BASE: dict[str, Any] = {
    "model": "claude-fake-1",
    "max_tokens": 256,
    "messages": [{"role": "user", "content": "Weather in Paris and Oslo?"}],
}
TWO_CALLS = Reply(
    [tool_use("toolu_1", "get_weather", {"city": "Paris"}), tool_use("toolu_2", "get_weather", {"city": "Oslo"})],
    "tool_use",
)
SEEN: list[HookContext] = []


@result_hook
def redact_oslo(results: list[dict[str, Any]], context: HookContext) -> list[dict[str, Any]]:
    SEEN.append(context)
    return [{**r, "content": str(r["content"]).replace("Oslo", "[redacted]")} for r in results]


@result_hook(name="stop_on_tool_error")
def stop_on_error(results: list[dict[str, Any]], context: HookContext) -> None:
    del context
    if any(r.get("is_error") for r in results):
        raise StopRun("a tool failed; a person should look at this run")


async def test_hooks_transform_results_in_order_before_claude_sees_them(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    SEEN.clear()
    fake_api.script(TWO_CALLS, end_turn("ok"))
    async with worker(get_weather, hooks=(redact_oslo,)):
        run = await runner.start(
            **BASE, tools=[get_weather], thread=False, result_hooks=["redact_oslo", "cache_last_tool_result"]
        )
        await run.until_done()
    assert fake_api.bodies()[1]["messages"][-1] == {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny, 21C in Paris"},
            {
                "type": "tool_result",
                "tool_use_id": "toolu_2",
                "content": "sunny, 21C in [redacted]",
                "cache_control": {"type": "ephemeral"},
            },
        ],
    }
    assert [(c.iteration, [b["id"] for b in c.tool_uses]) for c in SEEN] == [(1, ["toolu_1", "toolu_2"])]


async def test_a_hook_can_end_the_run_after_the_results_are_recorded(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    fake_api.script(Reply([tool_use("toolu_E", "fail_disk", {"path": "/d"})], "tool_use"))
    async with worker(fail_disk, hooks=(stop_on_error,)):
        run = await runner.start(**BASE, tools=[fail_disk], result_hooks=["stop_on_tool_error"])
        result = await run.result()
        status = await run.status()
        transcript = await run.transcript()
    assert result.status == "stopped"
    assert status.stop_reason_detail == "a tool failed; a person should look at this run"
    assert len(fake_api.requests) == 1
    assert transcript[-1]["content"][0]["is_error"] is True


async def test_a_hook_no_worker_registered_fails_the_run_before_any_request(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    async with worker(get_weather):
        run = await runner.start(**BASE, tools=[get_weather], result_hooks=["no_such_hook"])
        with pytest.raises(ToolNotRegistered, match="'no_such_hook'"):
            await run.until_done()
    assert fake_api.requests == []
