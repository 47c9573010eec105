"""Newest-model rules (Sept 2026 API): nothing forces a tool, and compaction can keep recent turns and run in the
background (``compact(background=True)``, ``auto_compact.background``; ``workflows/background.py``).

A background compaction runs beside the run's next turn, so which of the two requests reaches the fake first is not
fixed: the fake answers by what each request is, and the tests compare the two kinds apart.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType

from agent_runner.client import AgentRunner, Run
from agent_runner.testing import FakeMessagesAPI, Reply, end_turn, text, tool_use
from agent_runner.testing.replies import ScriptItem, bad_request
from tests.conftest import WorkerFactory
from tests.steering_support import wait_status
from tests.tools_for_tests import get_weather

BODY = {"model": "claude-fake-1", "max_tokens": 1024}
"""What every request's body starts with."""

BASE = {**BODY, "betas": ["compact-2026-09-04"]}
"""What every run starts with: its compactions need the beta."""
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
            **BASE, messages=[USER], tools=[get_weather], step=True, tool_choice={"type": "tool", "name": "get_weather"}
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


@pytest.mark.parametrize(
    "answer",
    [Reply([text("No.")], "refusal"), bad_request("No.")],
    ids=["refused", "failed"],  # a reply without a summary; a 400, not retried
)
async def test_a_background_compaction_without_a_summary_leaves_the_history_as_it_was(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, answer: ScriptItem
) -> None:
    turns: list[ScriptItem] = [call("toolu_P", "Paris"), end_turn("Sunny.")]
    fake_api.responder = lambda body: answer if "compaction" in body else turns.pop(0)
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
        {**BODY, "messages": summarized, "compaction": {"type": "summarize"}, "tools": tools, "stream": True}
    ]
    assert turns[2] == {**BODY, "messages": [*summarized[:-1], joined], "tools": tools, "stream": True}
    sunny = {"role": "assistant", "content": [text("Both sunny.")]}
    assert transcript == [*summarized[:-1], joined, sunny]
    assert (result.status, result.iterations) == ("completed", 3)
    assert (status.usage.input_tokens, status.usage.output_tokens) == (40, 20)  # the discarded summary was billed


async def test_a_continuation_waits_for_the_background_compaction_and_carries_its_summary(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """A background compaction's task cannot cross a continue-as-new: the run applies the summary first, so the
    continuation's first turn goes on from it."""
    fake_api.responder = by_kind([call("toolu_P", "Paris"), end_turn("Sunny.")])
    async with worker(get_weather):
        run = await runner.start(
            **BASE,
            messages=[USER],
            tools=[get_weather],
            thread=False,
            auto_compact={"input_tokens": 10, "background": True},
            continue_as_new={"events": 10},
        )
        result = await run.result()
        transcript = await run.transcript()
        status = await run.status()
    turns, compactions = split(fake_api.bodies())
    assert [c["messages"] for c in compactions] == [[USER, asked("toolu_P", "Paris"), answered("toolu_P", "Paris")]]
    assert turns[1]["messages"] == [{"role": "assistant", "content": [SUMMARY]}]
    assert transcript == [
        {"role": "assistant", "content": [SUMMARY]},
        {"role": "assistant", "content": [text("Sunny.")]},
    ]
    assert (result.status, status.continuations) == ("completed", 1)


async def test_a_summary_in_before_a_boundary_takes_effect_there_and_bumps_the_version(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """The summary arrived while the run was paused: the next boundary puts it in place (a change: the transcript's
    version goes up) and the turn after it starts a new thread from it."""
    fake_api.responder = by_kind(
        [call("toolu_P", "Paris"), call("toolu_O", "Oslo"), call("toolu_R", "Rome"), end_turn("All sunny.")]
    )
    async with worker(get_weather):
        run = await runner.start(**BASE, messages=[USER], tools=[get_weather], step=True)
        await wait_status(run, "waiting_for_step", 1)
        await run.advance()
        await wait_status(run, "waiting_for_step", 2)
        await run.compact(background=True, keep_recent_turns=1, wait=False)
        await run.advance()
        await wait_status(run, "waiting_for_step", 3)
        await summary_taken_in(run)
        before = await run.status()
        await run.advance()
        await wait_status(run, "waiting_for_step", 4)
        after = await run.status()
        await run.advance()
        assert (await run.result()).status == "completed"
    turns, _ = split(fake_api.bodies())
    kept = [asked("toolu_O", "Oslo"), answered("toolu_O", "Oslo")]
    assert turns[3]["messages"] == [
        {"role": "assistant", "content": [SUMMARY]},
        *kept,
        asked("toolu_R", "Rome"),
        answered("toolu_R", "Rome"),
    ]
    assert turns[3]["thread"] == {"type": "create"}
    # Rome's results, the summary, the fourth reply.
    assert after.version == before.version + 3


async def test_a_summary_put_in_place_is_not_compacted_again_at_once(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """``auto_compact`` measures the last turn's input, which a summary put in place makes stale: the boundary that
    applies it starts no second compaction of the summary itself."""
    fake_api.responder = by_kind([call("toolu_P", "Paris"), call("toolu_O", "Oslo"), end_turn("Both sunny.")])
    async with worker(get_weather):
        run = await runner.start(
            **BASE,
            messages=[USER],
            tools=[get_weather],
            step=True,
            thread=False,
            auto_compact={"input_tokens": 10, "background": True},
        )
        await wait_status(run, "waiting_for_step", 1)
        await run.advance()
        await wait_status(run, "waiting_for_step", 2)
        await summary_taken_in(run)
        await run.advance()
        await wait_status(run, "waiting_for_step", 3)
        await run.advance()
        assert (await run.result()).status == "completed"
    turns, compactions = split(fake_api.bodies())
    assert [c["messages"] for c in compactions] == [[USER, asked("toolu_P", "Paris"), answered("toolu_P", "Paris")]]
    assert turns[2]["messages"] == [
        {"role": "assistant", "content": [SUMMARY]},
        asked("toolu_O", "Oslo"),
        answered("toolu_O", "Oslo"),
    ]


async def test_a_compaction_asked_for_is_not_followed_by_an_automatic_one_at_the_same_boundary(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """``compact()`` applies at the boundary before ``auto_compact`` looks at the last turn's input, which the summary
    has made stale: one compaction, not a second of the summary just written."""
    oslo = Reply(call("toolu_O", "Oslo").content, "tool_use", usage={"input_tokens": 500, "output_tokens": 5})
    fake_api.responder = by_kind([call("toolu_P", "Paris"), oslo, end_turn("Both sunny.")])
    async with worker(get_weather):
        run = await runner.start(
            **BASE, messages=[USER], tools=[get_weather], step=True, thread=False, auto_compact={"input_tokens": 100}
        )
        await wait_status(run, "waiting_for_step", 1)
        await run.advance()
        await wait_status(run, "waiting_for_step", 2)
        await run.compact(keep_recent_turns=1, wait=False)
        await run.advance()
        await wait_status(run, "waiting_for_step", 3)
        await run.advance()
        assert (await run.result()).status == "completed"
    turns, compactions = split(fake_api.bodies())
    kept = [asked("toolu_O", "Oslo"), answered("toolu_O", "Oslo")]
    assert [c["messages"] for c in compactions] == [[USER, asked("toolu_P", "Paris"), answered("toolu_P", "Paris")]]
    assert turns[2]["messages"] == [{"role": "assistant", "content": [SUMMARY]}, *kept]


async def summary_taken_in(run: Run) -> None:
    """Wait until the run has taken in the background compaction's result: a workflow task after it completed."""
    async with asyncio.timeout(20):
        while True:
            events = (await run.handle.fetch_history()).events
            scheduled = {
                e.event_id
                for e in events
                if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
                and b"background compaction" in e.user_metadata.summary.data
            }
            done = [
                e.event_id
                for e in events
                if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED
                and e.activity_task_completed_event_attributes.scheduled_event_id in scheduled
            ]
            if done and any(
                e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED and e.event_id > done[0] for e in events
            ):
                return
            await asyncio.sleep(0.05)
