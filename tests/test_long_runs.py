"""Long runs: history bounded per iteration, continue-as-new that clients do not notice, content of any size.

Each test runs a real worker against the real dev server and the fake Messages API; the differential assertions
compare what Claude received with what a run that never continued as new sends.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from anthropic import beta_async_tool
from temporalio.client import WorkflowExecutionStatus

from activities.store import open_store
from agent_runner.client import AgentRunner, Run
from agent_runner.fake_api import FakeMessagesAPI, Reply, end_turn, text, tool_use
from tests.conftest import WorkerFactory
from tests.tools_for_tests import get_weather

USER = {"role": "user", "content": "Weather in many cities?"}
BASE: dict[str, Any] = {"model": "claude-fake-1", "max_tokens": 1024, "messages": [USER]}
CITIES = [f"City{i}" for i in range(8)]


def script(fake_api: FakeMessagesAPI) -> None:
    fake_api.script(
        *(
            Reply([text(f"Checking {c}."), tool_use(f"toolu_{i}", "get_weather", {"city": c})], "tool_use")
            for i, c in enumerate(CITIES)
        ),
        end_turn("All done."),
    )


async def follow(run: Run) -> list[str]:
    return [reply.id async for reply in run.messages()]


@pytest.mark.parametrize("thread", [True, False], ids=["thread", "full_history"])
async def test_continue_as_new_mid_run_is_invisible_to_claude_followers_and_steerers(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, thread: bool
) -> None:
    script(fake_api)
    async with worker(get_weather):
        plain = await runner.start(**BASE, tools=[get_weather], thread=thread)
        await plain.until_done()
        expected_transcript = await plain.transcript()
    expected = fake_api.bodies()

    fake_api.reset()
    script(fake_api)
    async with worker(get_weather):
        run = await runner.start(
            **BASE, tools=[get_weather], thread=thread, continue_as_new={"events": 40}, max_iterations=20
        )
        following = asyncio.create_task(follow(run))
        result = await run.result()
        followed = await following
        status = await run.status()
        transcript = await run.transcript()
        late = [reply.id async for reply in run.messages()]  # a late follower, through the store
    bodies = fake_api.bodies()

    assert bodies == expected  # Claude cannot tell
    assert status.continuations >= 2
    assert result.status == "completed" and result.iterations == 9
    assert transcript == expected_transcript
    assert len(followed) == len(set(followed)) == 9
    assert followed == late
    first = runner.client.get_workflow_handle(run.id, run_id=run.handle.first_execution_run_id)
    assert (await first.describe()).status == WorkflowExecutionStatus.CONTINUED_AS_NEW


async def test_max_iterations_and_queued_edits_carry_across_continue_as_new(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    script(fake_api)
    async with worker(get_weather):
        run = await runner.start(
            **BASE, tools=[get_weather], thread=False, continue_as_new={"events": 40}, max_iterations=6
        )
        injected: list[int] = []
        for i in range(3):
            injected.append(await run.inject(f"note {i}") or 0)
        result = await run.result()
        status = await run.status()
        transcript = await run.transcript()
    assert result.status == "max_iterations" and result.iterations == 6
    assert status.continuations >= 1
    texts = [
        b["text"]
        for m in transcript
        if m["role"] == "user" and isinstance(m["content"], list)
        for b in m["content"]
        if b.get("type") == "text"
    ]
    assert [t for t in texts if t.startswith("note")] == ["note 0", "note 1", "note 2"]
    assert injected == sorted(injected) and len(set(injected)) == 3


async def test_history_grows_by_a_bounded_amount_per_iteration_whatever_the_transcript(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """A 1 MB first message travels through history once (the run's input), never again per turn."""
    big = {"role": "user", "content": [{"type": "text", "text": "x" * 1_000_000}]}
    script(fake_api)
    async with worker(get_weather):
        run = await runner.start(**{**BASE, "messages": [big]}, tools=[get_weather], thread=False)
        await run.until_done()
    assert [len(b["messages"]) for b in fake_api.bodies()] == [1 + 2 * i for i in range(9)]
    assert fake_api.bodies()[8]["messages"][0] == big
    history = await run.handle.fetch_history()
    events = history.events
    total = history.to_json().encode()
    activity_inputs = [
        len(e.activity_task_scheduled_event_attributes.input.SerializeToString())
        for e in events
        if e.HasField("activity_task_scheduled_event_attributes")
    ]
    assert max(activity_inputs) < 4096  # every model call's input, the first one included
    assert len(total) < 1_000_000 * 4 / 3 + 200_000  # the input once (base64 in JSON), not nine times


async def test_a_5_mb_tool_result_reaches_claude_whole_and_stays_out_of_history(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    data = "iVBORw0KGgo" + "A" * 5_000_000

    @beta_async_tool
    async def screenshot(page: str) -> list[dict[str, Any]]:  # type: ignore[type-var]
        """Take a screenshot of a page.

        Args:
            page: The page.
        """
        assert page
        return [{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}}]

    fake_api.script(Reply([tool_use("toolu_S", "screenshot", {"page": "home"})], "tool_use"), end_turn("Nice."))
    async with worker(screenshot):
        run = await runner.start(**BASE, tools=[screenshot], thread=False)
        await run.until_done()
        transcript = await run.transcript()
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}}
    assert fake_api.bodies()[1]["messages"][-1] == {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "toolu_S", "content": [image]}],
    }
    assert transcript[-2]["content"][0]["content"] == [image]
    history = await run.handle.fetch_history()
    assert len(history.to_json()) < 200_000


async def test_a_tool_result_over_the_api_request_limit_becomes_an_error_the_model_sees(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    @beta_async_tool
    async def dump(size: int) -> str:
        """Return `size` bytes.

        Args:
            size: How many.
        """
        return "x" * size

    fake_api.script(Reply([tool_use("toolu_BIG", "dump", {"size": 33_000_000})], "tool_use"), end_turn("ok"))
    async with worker(dump):
        run = await runner.start(**BASE, tools=[dump], thread=False)
        await run.until_done()
    assert fake_api.bodies()[1]["messages"][-1]["content"] == [
        {
            "type": "tool_result",
            "tool_use_id": "toolu_BIG",
            "content": "Error: Tool 'dump' returned 33.0 MB, more than one request to Claude may carry (32.0 MB). "
            "Ask for a smaller part of the data.",
            "is_error": True,
        }
    ]


async def test_the_store_keeps_each_piece_of_content_once(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """Two runs over the same 200 KB document store it once; each turn adds only its new messages."""
    doc = {"role": "user", "content": [{"type": "text", "text": "d" * 200_000}]}
    store = open_store()
    before = await store.stats()
    for _ in range(2):
        fake_api.reset()
        script(fake_api)
        async with worker(get_weather):
            await (await runner.start(**{**BASE, "messages": [doc]}, tools=[get_weather])).until_done()
    after = await store.stats()
    await store.close()
    grown = after.blob_bytes - before.blob_bytes
    assert 200_000 < grown < 260_000
