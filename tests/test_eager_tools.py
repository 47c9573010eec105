"""Eager tools: with `eager_tools`, a tool starts as soon as its `tool_use` block has streamed."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from temporalio.api.enums.v1 import EventType

from agent_runner.client import AgentRunner, Run
from agent_runner.contract.events import ApprovalWaiting, ReplyReceived, RunFinished
from agent_runner.contract.types import CREATE_MESSAGE_ACTIVITY, RUN_TOOL_ACTIVITY
from agent_runner.testing import ErrorMidStream, FakeMessagesAPI, Reply, SlowStream, end_turn, text, tool_use
from tests.conftest import WorkerFactory
from tests.tools_for_tests import get_weather

BASE: dict[str, Any] = {"model": "claude-fake-1", "max_tokens": 1024}
USER = {"role": "user", "content": "What's the weather in Paris?"}


def script() -> list[Any]:
    slow = Reply([tool_use("toolu_E", "get_weather", {"city": "Paris"}), text("x" * 200)], "tool_use")
    return [SlowStream(slow, event_delay=0.05, chunks=20), end_turn("Sunny.")]


async def activity_order(run: Run) -> list[tuple[str, str]]:
    """(event, activity type) of the run's scheduled and completed activities, in history order."""
    scheduled: dict[int, str] = {}
    order: list[tuple[str, str]] = []
    async for event in run.handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            scheduled[event.event_id] = event.activity_task_scheduled_event_attributes.activity_type.name
            order.append(("scheduled", scheduled[event.event_id]))
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            order.append(("completed", scheduled[event.activity_task_completed_event_attributes.scheduled_event_id]))
    return order


async def test_an_eager_tool_starts_before_the_reply_ends_and_the_run_sends_what_a_plain_run_sends(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    async with worker(get_weather):
        fake_api.script(*script())
        plain = await runner.start(**BASE, messages=[USER], tools=[get_weather])
        await asyncio.wait_for(plain.result(), 30)
        plain_bodies, plain_transcript = fake_api.bodies(), await plain.transcript()
        fake_api.reset()
        fake_api.script(*script())
        eager = await runner.start(**BASE, messages=[USER], tools=[get_weather], eager_tools=True)
        await asyncio.wait_for(eager.result(), 30)
        assert fake_api.bodies() == plain_bodies
        assert await eager.transcript() == plain_transcript
        eager_order = await activity_order(eager)
        plain_order = await activity_order(plain)
    model_call_done = eager_order.index(("completed", CREATE_MESSAGE_ACTIVITY))
    assert eager_order.index(("scheduled", RUN_TOOL_ACTIVITY)) < model_call_done  # with 20 x 0.05 s of text to go
    assert plain_order.index(("scheduled", RUN_TOOL_ACTIVITY)) > plain_order.index(
        ("completed", CREATE_MESSAGE_ACTIVITY)
    )
    assert [kind for kind, name in eager_order if name == RUN_TOOL_ACTIVITY] == ["scheduled", "completed"]


async def test_an_eager_tool_of_a_reply_that_does_not_run_tools_is_dropped(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    cut = Reply([tool_use("toolu_M", "get_weather", {"city": "Paris"}), text("x" * 40)], "max_tokens")
    fake_api.script(SlowStream(cut, event_delay=0.05, chunks=10))
    async with worker(get_weather):
        run = await runner.start(**BASE, messages=[USER], tools=[get_weather], eager_tools=True)
        result = await asyncio.wait_for(run.result(), 30)
        transcript = await run.transcript()
    assert (result.status, result.stop_reason) == ("completed", "max_tokens")
    assert len(transcript) == 2  # the tool ran early, but its result is never sent


async def test_a_call_that_needs_approval_waits_for_its_reply_before_a_person_is_asked(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """A person must not be asked about a call the reply may yet not run: with ``eager_tools`` an approval-gated
    call starts with the whole reply, as without."""
    fake_api.script(*script())
    async with worker(get_weather):
        run = await runner.start(
            **BASE, messages=[USER], tools=[get_weather], eager_tools=True, approval={"tools": ["get_weather"]}
        )
        kinds: list[str] = []
        async with asyncio.timeout(30):
            async for event in run.events():
                if isinstance(event, ReplyReceived | ApprovalWaiting):
                    kinds.append(type(event).__name__)
                if isinstance(event, ApprovalWaiting):
                    await run.approve("toolu_E")
                if isinstance(event, RunFinished):
                    break
        assert (await run.result()).status == "completed"
    assert kinds == ["ReplyReceived", "ApprovalWaiting", "ReplyReceived"]


async def test_a_tool_started_from_a_failed_attempt_ran_but_only_the_retried_reply_s_calls_are_answered(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """As the SDK's ``run_tools_eagerly``: the first attempt's stream fails after its ``tool_use`` block, so its tool
    has started; Temporal retries the call, whose reply asks for another call. Only that one's result is sent."""
    oslo = "sunny, 21C in Oslo"
    first = Reply([tool_use("toolu_A", "get_weather", {"city": "Paris"}), text("x" * 200)], "tool_use")
    fake_api.script(
        ErrorMidStream(first, after_events=9),  # the tool block's stop is event 7
        Reply([tool_use("toolu_B", "get_weather", {"city": "Oslo"})], "tool_use"),
        end_turn("Cold."),
    )
    async with worker(get_weather):
        run = await runner.start(**BASE, messages=[USER], tools=[get_weather], eager_tools=True, thread=False)
        assert (await asyncio.wait_for(run.result(), 30)).status == "completed"
        tool_inputs = [
            json.loads(event.activity_task_scheduled_event_attributes.input.payloads[0].data)["input"]
            async for event in run.handle.fetch_history_events()
            if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
            and event.activity_task_scheduled_event_attributes.activity_type.name == RUN_TOOL_ACTIVITY
        ]
    assert tool_inputs == [{"city": "Paris"}, {"city": "Oslo"}]  # the first attempt's tool ran, early
    assert fake_api.bodies()[2]["messages"][1:] == [
        {"role": "assistant", "content": [tool_use("toolu_B", "get_weather", {"city": "Oslo"})]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_B", "content": oslo}]},
    ]
