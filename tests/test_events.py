"""Live events: what a subscriber of `Run.events()` sees while a run streams, retries and ends."""

from __future__ import annotations

import asyncio
import math
import time
from typing import Any

import pytest
from temporalio.testing import WorkflowEnvironment

from agent_runner import cli
from agent_runner.client import AgentRunner, Run
from agent_runner.contract.events import FLUSH_INTERVAL, AttemptFilter, RunEvent
from agent_runner.testing import DropMidStream, FakeMessagesAPI, Reply, SlowStream, end_turn, text, tool_use
from tests.conftest import WorkerFactory
from tests.tools_for_tests import get_weather

BASE: dict[str, Any] = {"model": "claude-fake-1", "max_tokens": 1024}
USER = {"role": "user", "content": "What's the weather in Paris?"}
FAST_RETRY = {"initial_interval": "PT0.05S", "maximum_interval": "PT0.1S"}


async def collect(run: Run, after: int = 0) -> list[RunEvent]:
    return [event async for event in run.events(after=after)]


def streamed_text(events: list[RunEvent]) -> str:
    """The text a consumer keeps: every attempt's deltas, minus those of retracted attempts."""
    kept: dict[tuple[int, int], list[str]] = {}
    for event in events:
        if event["type"] == "text":
            kept.setdefault((event["iteration"], event["attempt"]), []).append(event["text"])
        elif event["type"] == "retracted":
            kept.pop((event["iteration"], event["attempt"]), None)
    return "".join("".join(parts) for parts in kept.values())


def without_deltas(events: list[RunEvent]) -> list[tuple[Any, ...]]:
    """Event types with their turn and attempt, consecutive text deltas of one attempt counted once."""
    out: list[tuple[Any, ...]] = []
    for event in events:
        key = (event["type"], event["iteration"], event.get("attempt"))
        if event["type"] == "text" and out and out[-1] == key:
            continue
        out.append(key)
    return out


async def test_a_subscriber_sees_the_reply_text_once_although_the_stream_dropped_and_was_retried(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    reply = end_turn("Sunny and mild in Paris today.")
    # Five events: message_start, ping, content_block_start and two of the text's three deltas.
    first = Reply([tool_use("toolu_W", "get_weather", {"city": "Paris"})], "tool_use")
    fake_api.script(first, DropMidStream(reply, 5), reply)
    async with worker(get_weather):
        run = await runner.start(**BASE, messages=[USER], tools=[get_weather], model_activity=FAST_RETRY)
        events = await asyncio.wait_for(collect(run), 30)
        final = await run.until_done()
    assert final.content[0].text == "Sunny and mild in Paris today."  # type: ignore[union-attr]
    assert streamed_text(events) == "Sunny and mild in Paris today."
    assert without_deltas(events) == [
        ("iteration_started", 1, None),
        ("model_call_started", 1, 1),
        ("block_start", 1, 1),
        ("tool_input", 1, 1),
        ("block_stop", 1, 1),
        ("reply", 1, None),
        ("tool_started", 1, None),
        ("tool_finished", 1, None),
        ("iteration_started", 2, None),
        ("model_call_started", 2, 1),
        ("block_start", 2, 1),
        ("text", 2, 1),
        ("retracted", 2, 1),
        ("model_call_started", 2, 2),
        ("block_start", 2, 2),
        ("text", 2, 2),
        ("block_stop", 2, 2),
        ("reply", 2, None),
        ("run_finished", 2, None),
    ]
    by_type = {e["type"]: e for e in events}
    assert by_type["tool_finished"]["result"] == {
        "type": "tool_result",
        "tool_use_id": "toolu_W",
        "content": "sunny, 21C in Paris",
    }
    assert by_type["block_start"]["block"] == {"type": "text", "text": ""}
    assert by_type["tool_started"]["input"] == {"city": "Paris"}
    assert by_type["run_finished"]["status"] == "completed"
    assert [e["offset"] for e in events if e["type"] != "retracted"] == sorted(
        e["offset"] for e in events if e["type"] != "retracted"
    )


async def test_a_late_subscriber_gets_the_whole_run_from_offset_zero(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    fake_api.script(end_turn("Hello there."))
    async with worker():
        run = await runner.start(**BASE, messages=[USER])
        await run.result()
        events = await asyncio.wait_for(collect(run), 30)
        resumed = await asyncio.wait_for(collect(run, after=5), 30)  # reading a closed run needs a worker
    assert [e["type"] for e in events] == [
        "iteration_started",
        "model_call_started",
        "block_start",
        "text",
        "block_stop",
        "reply",
        "run_finished",
    ]
    assert [e["offset"] for e in events] == list(range(7))
    assert events[3]["text"] == "Hello there."  # three deltas, sent together, merged into one event
    assert events[5]["message"]["content"] == [{"type": "text", "text": "Hello there."}]
    assert events[6] == {"type": "run_finished", "iteration": 1, "status": "completed", "detail": None, "offset": 6}
    assert [e["type"] for e in resumed] == ["reply", "run_finished"]


async def test_many_small_deltas_are_coalesced_into_few_text_events(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    words = " ".join(f"word{i}" for i in range(60))
    deltas, delay = 60, 0.02
    fake_api.script(SlowStream(Reply([text(words)]), event_delay=delay, chunks=deltas))
    async with worker():
        run = await runner.start(**BASE, messages=[USER])
        started = time.monotonic()
        events = await asyncio.wait_for(collect(run), 30)
        took = time.monotonic() - started
    texts = [e for e in events if e["type"] == "text"]
    assert "".join(e["text"] for e in texts) == words
    # At most one send per flush interval over the stream's duration, plus the one at the block's end.
    assert took >= deltas * delay
    assert len(texts) <= math.ceil(took / FLUSH_INTERVAL) + 1
    assert len(texts) < deltas / 3


@pytest.fixture
def temporal_address(temporal_env: WorkflowEnvironment, monkeypatch: pytest.MonkeyPatch) -> str:
    """Point the CLI at the session's test server."""
    address = temporal_env.client.service_client.config.target_host
    monkeypatch.setenv("TEMPORAL_ADDRESS", address)
    return address


@pytest.mark.usefixtures("temporal_address")
async def test_follow_prints_the_streamed_text_once_and_marks_the_cut_off_attempt(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, capsys: pytest.CaptureFixture[str]
) -> None:
    reply = end_turn("Sunny and mild in Paris today.")
    # The cut-off attempt streamed two of the text's three deltas ("Sunny and mild in Pa") before the drop.
    fake_api.script(DropMidStream(reply, 5), reply)
    async with worker():
        run = await runner.start(**BASE, messages=[USER], model_activity=FAST_RETRY)
        live = asyncio.ensure_future(cli.amain(["follow", run.id]))
        assert await asyncio.wait_for(live, 30) == 0
        live_out = capsys.readouterr().out
        assert await cli.amain(["follow", run.id]) == 0  # a late follower sees the same
        late_out = capsys.readouterr().out
    expected = (
        "── turn 1 ──\n"
        "Sunny and mild in Pa\n"
        "↺ attempt 1 of turn 1 was cut off; retrying\n"
        "Sunny and mild in Paris today.\n"
        "── completed · 1 turn · stop_reason end_turn · 10 input / 5 output tokens ──\n"
    )
    assert live_out == expected
    assert late_out == expected


def test_the_attempt_filter_retracts_a_replaced_attempt_once_and_drops_its_late_deltas() -> None:
    attempts = AttemptFilter()
    fed: list[RunEvent] = [
        {"type": "model_call_started", "iteration": 2, "attempt": 1},
        {"type": "text", "iteration": 2, "attempt": 1, "index": 0, "text": "Hel"},
        {"type": "model_call_started", "iteration": 2, "attempt": 2},
        {"type": "text", "iteration": 2, "attempt": 1, "index": 0, "text": "lo"},  # a zombie attempt still streaming
        {"type": "text", "iteration": 2, "attempt": 2, "index": 0, "text": "Hello"},
        {"type": "model_call_started", "iteration": 3, "attempt": 1},
        {"type": "model_call_started", "iteration": 3, "attempt": 2},  # attempt 1 streamed nothing: no retraction
        {"type": "reply", "iteration": 3},
    ]
    out = [event for item in fed for event in attempts.feed(item)]
    assert out == [
        fed[0],
        fed[1],
        {"type": "retracted", "iteration": 2, "attempt": 1},
        fed[2],
        fed[4],
        fed[5],
        fed[6],
        fed[7],
    ]
