"""Newest-model rules (Sept 2026 API): nothing forces a tool, and compaction can keep recent turns and run in the
background (``compact(background=True)``, ``auto_compact.background``; ``workflows/background.py``).

A background compaction runs beside the run's next turn, so which of the two requests reaches the fake first is not
fixed: the fake answers by what each request is, and the tests compare the two kinds apart.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agent_runner.client import AgentRunner
from agent_runner.testing import FakeMessagesAPI, Reply, end_turn, text, tool_use
from agent_runner.testing.replies import ScriptItem
from tests.conftest import WorkerFactory
from tests.steering_support import wait_status
from tests.tools_for_tests import get_weather

BASE = {"model": "claude-fake-1", "max_tokens": 1024}
USER = {"role": "user", "content": "What's the weather in Paris and Oslo?"}
SUMMARY = {"type": "compaction", "content": "Summary: Paris is sunny."}


def call(tool_id: str, city: str) -> Reply:
    return Reply([tool_use(tool_id, "get_weather", {"city": city})], "tool_use")


def asked(tool_id: str, city: str) -> dict[str, Any]:
    return {"role": "assistant", "content": [tool_use(tool_id, "get_weather", {"city": city})]}


def answered(tool_id: str, city: str) -> dict[str, Any]:
    result = {"type": "tool_result", "tool_use_id": tool_id, "content": f"sunny, 21C in {city}"}
    return {"role": "user", "content": [result]}


def by_kind(turns: list[ScriptItem]) -> Callable[[dict[str, Any]], ScriptItem]:
    """Answer a compaction request with the summary, and the run's turns in order."""
    left = list(turns)

    def answer(body: dict[str, Any]) -> ScriptItem:
        return Reply([SUMMARY], "compaction") if "compaction" in body else left.pop(0)

    return answer


def split(bodies: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    return [b for b in bodies if "compaction" not in b], [b for b in bodies if "compaction" in b]


async def test_a_background_compaction_keeps_recent_turns_and_the_turns_taken_meanwhile(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """The history before the kept turn is summarized while the run takes its next turn; the summary then stands in
    for what it summarized, with the kept turn and the new one after it, and the next turn starts a new thread."""
    fake_api.responder = by_kind([call("toolu_P", "Paris"), call("toolu_O", "Oslo"), end_turn("Both sunny.")])
    async with worker(get_weather):
        run = await runner.start(
            **BASE, messages=[USER], tools=[get_weather], step=True, tool_choice={"type": "tool", "name": "x"}
        )
        await wait_status(run, "waiting_for_step", 1)
        await run.advance()
        await wait_status(run, "waiting_for_step", 2)
        await run.compact(background=True, keep_recent_turns=1, wait=False)
        await run.advance()
        await wait_status(run, "waiting_for_step", 3)
        await run.advance()
        result = await run.result()
        transcript = await run.transcript()
        status = await run.status()
    turns, compactions = split(fake_api.bodies())
    summarized = [USER, asked("toolu_P", "Paris"), answered("toolu_P", "Paris")]
    kept = [asked("toolu_O", "Oslo"), answered("toolu_O", "Oslo")]
    # The newest models refuse a forced tool: the compaction request leaves the run's `tool_choice: tool` out.
    assert [(c["messages"], c["compaction"], c["thread"], "tool_choice" in c) for c in compactions] == [
        (summarized, {"type": "summarize"}, {"type": "create"}, False)
    ]
    assert turns[2]["messages"] == kept[1:]  # the run went on, on its thread, while the summary was written
    assert transcript == [
        {"role": "assistant", "content": [SUMMARY]},
        *kept,
        {"role": "assistant", "content": [text("Both sunny.")]},
    ]
    assert (result.status, result.iterations) == ("completed", 3)
    assert (status.usage.input_tokens, status.usage.output_tokens) == (40, 20)  # the summary's usage counts


async def test_auto_compact_in_the_background_does_not_hold_up_the_turn(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """Past the threshold the next turn goes out at once; the summary applies once it is in, and a conversation the
    run hands on (``send``) goes on from it."""
    fake_api.responder = by_kind([call("toolu_P", "Paris"), end_turn("Sunny."), end_turn("Cold.")])
    async with worker(get_weather):
        run = await runner.start(
            **BASE,
            messages=[USER],
            tools=[get_weather],
            thread=False,
            auto_compact={"input_tokens": 10, "background": True},
        )
        await run.until_done()
        after = await run.send("And tomorrow?")
        await after.until_done()
    turns, compactions = split(fake_api.bodies())
    history = [USER, asked("toolu_P", "Paris"), answered("toolu_P", "Paris")]
    assert [c["messages"] for c in compactions] == [history]
    assert turns[1]["messages"] == history  # not held up by the compaction
    assert turns[2]["messages"] == [
        {"role": "assistant", "content": [SUMMARY]},
        {"role": "assistant", "content": [text("Sunny.")]},
        {"role": "user", "content": [text("And tomorrow?")]},
    ]


async def test_a_background_compaction_without_a_summary_leaves_the_history_as_it_was(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    turns: list[ScriptItem] = [call("toolu_P", "Paris"), end_turn("Sunny.")]
    fake_api.responder = lambda body: Reply([text("No.")], "refusal") if "compaction" in body else turns.pop(0)
    async with worker(get_weather):
        run = await runner.start(
            **BASE, messages=[USER], tools=[get_weather], auto_compact={"input_tokens": 10, "background": True}
        )
        result = await run.result()
        transcript = await run.transcript()
    assert len(split(fake_api.bodies())[1]) == 1
    assert result.status == "completed"
    sunny = {"role": "assistant", "content": [text("Sunny.")]}
    assert transcript == [USER, asked("toolu_P", "Paris"), answered("toolu_P", "Paris"), sunny]


async def test_a_background_summary_is_discarded_when_an_edit_changed_what_it_summarized(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """A message joins the last message summarized after the compaction started: the summary no longer stands for the
    run's messages, so it is discarded (its usage still counts) and the run goes on with the history as it is."""
    fake_api.responder = by_kind([call("toolu_P", "Paris"), call("toolu_O", "Oslo"), end_turn("Both sunny.")])
    async with worker(get_weather):
        run = await runner.start(**BASE, messages=[USER], tools=[get_weather], step=True, thread=False)
        await wait_status(run, "waiting_for_step", 1)
        await run.advance()
        await wait_status(run, "waiting_for_step", 2)
        # Both apply at the next boundary, in this order: the compaction starts, then the message joins the results.
        await run.compact(background=True, wait=False)
        await run.inject("Metric units, please.", wait=False)
        await run.advance()
        await wait_status(run, "waiting_for_step", 3)
        await run.advance()
        result = await run.result()
        transcript = await run.transcript()
        status = await run.status()
    turns, compactions = split(fake_api.bodies())
    oslo = answered("toolu_O", "Oslo")
    summarized = [USER, asked("toolu_P", "Paris"), answered("toolu_P", "Paris"), asked("toolu_O", "Oslo"), oslo]
    joined = {"role": "user", "content": [*oslo["content"], text("Metric units, please.")]}
    tools = [get_weather.to_dict()]
    assert compactions == [
        {**BASE, "messages": summarized, "compaction": {"type": "summarize"}, "tools": tools, "stream": True}
    ]
    assert turns[2] == {**BASE, "messages": [*summarized[:-1], joined], "tools": tools, "stream": True}
    sunny = {"role": "assistant", "content": [text("Both sunny.")]}
    assert transcript == [*summarized[:-1], joined, sunny]
    assert (result.status, result.iterations) == ("completed", 3)
    assert (status.usage.input_tokens, status.usage.output_tokens) == (40, 20)  # the discarded summary was billed
