"""Live events: what a subscriber of `Run.events()` sees while a run streams, retries and ends."""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import time
from collections.abc import AsyncGenerator
from datetime import timedelta
from typing import Any, cast

import pytest
from pydantic import ValidationError
from temporalio.client import Client
from temporalio.contrib.workflow_streams import WorkflowStreamClient

from agent_runner import cli
from agent_runner.client import AgentRunner, Run
from agent_runner.contract.events import (
    EVENT_TYPES,
    FLUSH_INTERVAL,
    ApprovalWaiting,
    AttemptFilter,
    BlockStart,
    BlockStop,
    ModelCallStarted,
    ReplyReceived,
    Retracted,
    RunEvent,
    RunFinished,
    TextDelta,
    ToolFinished,
    ToolStarted,
    parse_event,
)
from agent_runner.contract.types import EVENTS_TOPIC
from agent_runner.store import open_store
from agent_runner.testing import (
    DropMidStream,
    ErrorMidStream,
    FakeMessagesAPI,
    Reply,
    SlowStream,
    end_turn,
    text,
    thinking,
    tool_use,
)
from tests.conftest import WorkerFactory
from tests.steering_support import delete_file
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
        if isinstance(event, TextDelta):
            kept.setdefault((event.iteration, event.attempt), []).append(event.text)
        elif isinstance(event, Retracted):
            kept.pop((event.iteration, event.attempt), None)
    return "".join("".join(parts) for parts in kept.values())


def without_deltas(events: list[RunEvent]) -> list[tuple[Any, ...]]:
    """Event types with their turn and attempt, consecutive text deltas of one attempt counted once."""
    out: list[tuple[Any, ...]] = []
    for event in events:
        key = (event.type, event.iteration, getattr(event, "attempt", None))
        if event.type == "text" and out and out[-1] == key:
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
    by_type = {e.type: e for e in events}
    assert by_type["tool_finished"] == ToolFinished(
        iteration=1,
        tool_use_id="toolu_W",
        name="get_weather",
        result={"type": "tool_result", "tool_use_id": "toolu_W", "content": "sunny, 21C in Paris"},
        offset=by_type["tool_finished"].offset,
    )
    assert isinstance(by_type["block_start"], BlockStart) and by_type["block_start"].block == {
        "type": "text",
        "text": "",
    }
    assert isinstance(by_type["tool_started"], ToolStarted) and by_type["tool_started"].input == {"city": "Paris"}
    assert isinstance(by_type["run_finished"], RunFinished) and by_type["run_finished"].status == "completed"
    offsets = [e.offset for e in events if not isinstance(e, Retracted)]
    assert None not in offsets and offsets == sorted(offsets)  # type: ignore[type-var]


async def test_a_late_subscriber_gets_the_whole_run_from_offset_zero(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    fake_api.script(end_turn("Hello there."))
    async with worker():
        run = await runner.start(**BASE, messages=[USER])
        await run.result()
        events = await asyncio.wait_for(collect(run), 30)
        resumed = await asyncio.wait_for(collect(run, after=2), 30)  # reading a closed run needs a worker
    assert [e.type for e in events] == [
        "iteration_started",
        "model_call_started",
        "block_start",
        "text",
        "block_stop",
        "reply",
        "run_finished",
    ]
    # Streamed text comes from the run's live log, not its stream: each piece takes the offset of the stream event
    # before it (offset 1 is the run's `recorded_call`, which places them and is not yielded).
    assert [e.offset for e in events] == [0, 0, 0, 0, 0, 2, 3]
    assert events[3] == TextDelta(iteration=1, attempt=1, index=0, text="Hello there.", offset=0)  # deltas merged
    assert isinstance(events[5], ReplyReceived)
    assert events[5].message["content"] == [{"type": "text", "text": "Hello there."}]
    assert events[6] == RunFinished(iteration=1, status="completed", detail=None, offset=3)
    assert events[6].to_wire() == {"type": "run_finished", "iteration": 1, "status": "completed", "detail": None}
    assert [e.type for e in resumed] == ["reply", "run_finished"]


async def until(run: Run, after: int, last: str, *, agents: bool = True) -> list[RunEvent]:
    """``run.events(after=after)`` up to and with the first event of type ``last`` (or the run's end)."""
    events: list[RunEvent] = []
    # An async generator, though typed as an iterator: closed here, since this one stops reading before its end.
    async with contextlib.aclosing(
        cast(AsyncGenerator[RunEvent, None], run.events(after=after, agents=agents))
    ) as stream:
        async for event in stream:
            events.append(event)
            if event.type == last:
                break
    return events


async def test_a_watcher_resuming_at_any_offset_sees_exactly_what_a_watcher_from_zero_saw_from_there(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """A browser's ``Last-Event-ID``: resuming at offset k gives the events from k on of a watcher from 0, no earlier
    turn's streamed text (a live event has the offset of its turn's ``iteration_started``), whether k is a turn's
    start, a point inside it or after an attempt that was cut off and retracted, while the run waits and once it
    ended."""
    second = Reply([text("Now Oslo."), tool_use("toolu_O", "get_weather", {"city": "Oslo"})], "tool_use")
    third = Reply([text("Cleaning up."), tool_use("toolu_D", "delete_file", {"path": "/tmp/x"})], "tool_use")
    fake_api.script(
        Reply([text("Let me check."), tool_use("toolu_W", "get_weather", {"city": "Paris"})], "tool_use"),
        DropMidStream(second, 5),  # message_start, ping, the text's block_start and two of its deltas
        second,
        ErrorMidStream(third, 5),
        third,
        end_turn("Sunny in both; done."),
    )
    async with worker(get_weather, delete_file):
        run = await runner.start(
            **BASE,
            messages=[USER],
            tools=[get_weather, delete_file],
            approval={"tools": ["delete_file"]},
            model_activity=FAST_RETRY,
        )
        # While the run waits for the approval of turn 3's tool: a watcher's stream is still open.
        waiting = await asyncio.wait_for(until(run, 0, "approval_waiting"), 30)
        assert [(e.iteration, e.attempt) for e in waiting if isinstance(e, Retracted)] == [(2, 1), (3, 1)]
        for k in range(waiting[-1].offset + 1):  # type: ignore[operator]
            resumed = await asyncio.wait_for(until(run, k, "approval_waiting"), 30)
            assert resumed == [e for e in waiting if e.offset >= k], f"resumed at {k}"  # type: ignore[operator]
        await run.approve("toolu_D")
        await asyncio.wait_for(run.result(), 30)
        # Once it ended.
        full = await asyncio.wait_for(collect(run), 30)
        assert full[: len(waiting)] == waiting and full[-1].type == "run_finished"
        offsets = [e.offset for e in full]
        assert None not in offsets and offsets == sorted(offsets)  # type: ignore[type-var]
        for k in range(full[-1].offset + 1):  # type: ignore[operator]
            suffix = [e for e in full if e.offset >= k]  # type: ignore[operator]
            assert await asyncio.wait_for(collect(run, after=k), 30) == suffix, f"resumed at {k}"
            own = await asyncio.wait_for(until(run, k, "run_finished", agents=False), 30)
            assert own == suffix, f"resumed at {k}, agents=False"


async def test_a_watcher_resuming_while_a_turn_streams_gets_that_turn_from_its_start_and_no_earlier_turn(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """Watchers that resume at each offset up to just after turn 2's start while turn 2 streams: the live log already
    holds turn 1's text and part of turn 2's, and each gets what the watcher from 0 got from its offset on."""
    words = " ".join(f"word{i}" for i in range(30))
    fake_api.script(
        Reply([text("Let me check."), tool_use("toolu_W", "get_weather", {"city": "Paris"})], "tool_use"),
        SlowStream(end_turn(words), event_delay=0.1, chunks=30),
    )
    async with worker(get_weather):
        run = await runner.start(**BASE, messages=[USER], tools=[get_weather])
        seen: list[RunEvent] = []

        async def watch() -> None:
            async for event in run.events():
                seen.append(event)

        first = asyncio.ensure_future(asyncio.wait_for(watch(), 30))
        async with asyncio.timeout(30):
            while not any(isinstance(e, TextDelta) and e.iteration == 2 for e in seen):
                await asyncio.sleep(0.01)
        assert not any(isinstance(e, ReplyReceived) and e.iteration == 2 for e in seen)  # turn 2 still streams
        turn_two = next(e for e in seen if e.type == "iteration_started" and e.iteration == 2).offset
        assert turn_two is not None
        resumed = {k: asyncio.ensure_future(asyncio.wait_for(collect(run, after=k), 30)) for k in range(turn_two + 2)}
        await first
        for k, watcher in resumed.items():
            assert await watcher == [e for e in seen if e.offset >= k], f"resumed at {k}"  # type: ignore[operator]
    assert streamed_text(seen) == "Let me check." + words


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
    texts = [e for e in events if isinstance(e, TextDelta)]
    assert "".join(e.text for e in texts) == words
    # At most one send per flush interval over the stream's duration, plus the one at the block's end.
    assert took >= deltas * delay
    assert len(texts) <= math.ceil(took / FLUSH_INTERVAL) + 1
    assert len(texts) < deltas / 3


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
        ModelCallStarted(iteration=2, attempt=1, offset=0),
        TextDelta(iteration=2, attempt=1, index=0, text="Hel", offset=1),
        ModelCallStarted(iteration=2, attempt=2, offset=2),
        TextDelta(iteration=2, attempt=1, index=0, text="lo", offset=3),  # a zombie attempt still streaming
        TextDelta(iteration=2, attempt=2, index=0, text="Hello", offset=4),
        ModelCallStarted(iteration=3, attempt=1, offset=5),
        ModelCallStarted(iteration=3, attempt=2, offset=6),  # attempt 1 streamed nothing: no retraction
        ReplyReceived(iteration=3, message={"role": "assistant", "content": []}, offset=7),
    ]
    out = [event for item in fed for event in attempts.feed(item)]
    assert out == [
        fed[0],
        fed[1],
        Retracted(iteration=2, attempt=1, offset=2),
        fed[2],
        fed[4],
        fed[5],
        fed[6],
        fed[7],
    ]


# ------------------------------------------------------------------------------------------ typed events


async def published_events(client: Client, run_id: str) -> list[dict[str, Any]]:
    """Every event the run published, as the JSON objects in its live log and on its stream (not through the client's
    parsing): the model call's first, then the run's."""
    async with open_store() as store:
        published: list[dict[str, Any]] = [json.loads(data) for _, data in await store.read_live(run_id)]
    stream = WorkflowStreamClient.create(client, run_id)
    async for item in stream.subscribe([EVENTS_TOPIC], from_offset=0, poll_cooldown=timedelta(seconds=0.05)):
        published.append(item.data)
        if item.data["type"] == "run_finished":
            return published
    return published


async def test_every_event_a_run_publishes_parses_into_its_model_with_nothing_left_over(
    client: Client, runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    # One run that streams thinking, text and tool input, waits for an approval and for step mode's two pauses,
    # runs tools, and stops at its iteration limit: most of what the workflow and the model call publish.
    fake_api.script(
        Reply(
            [
                thinking("The user wants the weather."),
                text("Let me check."),
                tool_use("toolu_W", "get_weather", {"city": "Paris"}),
                tool_use("toolu_D", "delete_file", {"path": "/tmp/x"}),
            ],
            "tool_use",
        ),
        Reply([tool_use("toolu_W2", "get_weather", {"city": "Oslo"})], "tool_use"),
    )
    async with worker(get_weather, delete_file):
        run = await runner.start(
            **BASE,
            messages=[USER],
            tools=[get_weather, delete_file],
            approval={"tools": ["delete_file"]},
            step={"review_results": True},
            max_iterations=2,
        )
        async with asyncio.timeout(30):
            while await run.ended() is None:
                status = await run.status()
                if status.status in ("waiting_for_step", "waiting_for_review"):
                    await run.advance()
                for approval in status.pending_approvals:
                    await run.approve(approval["tool_use_id"])
                await asyncio.sleep(0.05)
        published = await asyncio.wait_for(published_events(client, run.id), 30)

    parsed = [parse_event(event) for event in published]
    assert [event.to_wire() for event in parsed] == published  # nothing dropped, nothing added
    # `agent_started` needs a run with agents: tests/test_agent_tree.py pins it.
    assert {event.type for event in parsed} == EVENT_TYPES - {"tool_outcome_unknown", "agent_started"}
    assert parsed[-1] == RunFinished(iteration=2, status="max_iterations", detail=None)
    waiting = next(e for e in parsed if isinstance(e, ApprovalWaiting))
    assert (waiting.approval.tool_use_id, waiting.approval.input) == ("toolu_D", {"path": "/tmp/x"})


def test_an_event_with_a_field_its_type_does_not_have_or_an_unknown_type_does_not_parse() -> None:
    assert parse_event({"type": "block_stop", "iteration": 1, "attempt": 2, "index": 0}, offset=9) == BlockStop(
        iteration=1, attempt=2, index=0, offset=9
    )
    with pytest.raises(ValidationError, match="extra_forbidden"):
        parse_event({"type": "block_stop", "iteration": 1, "attempt": 2, "index": 0, "text": "stray"})
    with pytest.raises(ValidationError, match="union_tag_invalid"):
        parse_event({"type": "text_delta", "iteration": 1})
    with pytest.raises(ValidationError, match="missing"):
        parse_event({"type": "tool_finished", "iteration": 1, "tool_use_id": "toolu_1", "name": "get_weather"})
