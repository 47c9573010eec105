"""Live text reaches watchers through the content store's live log, not through the run's history (issue 14).

The model call writes what it streams to the run's live log (``ContentStore.append_live``); the run publishes only
turn boundaries, ``recorded_call`` and what it records; ``Run.events`` merges the two. A watcher sees exactly what it
saw when deltas were signals, a failed attempt's text and then its retraction included, on every store kind that
runs without containers, and the run's history holds no signal for any of it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.worker import Worker

from agent_runner.activities.claude import ClaudeActivities
from agent_runner.activities.live_events import EventPublisher
from agent_runner.activities.tools import ToolRegistry
from agent_runner.client import AgentRunner
from agent_runner.codec import KEYS_ENV, new_key
from agent_runner.contract.events import (
    BlockStart,
    BlockStop,
    IterationStarted,
    ModelCallStarted,
    RecordedCall,
    ReplyReceived,
    Retracted,
    RunEvent,
    RunFinished,
    TextDelta,
    parse_event,
)
from agent_runner.live import LiveMerge
from agent_runner.plugin import AgentRunnerPlugin
from agent_runner.store import ContentStore, open_store
from agent_runner.testing import DropMidStream, FakeMessagesAPI, end_turn
from agent_runner.worker import build_worker
from tests.conftest import anthropic_client_factory

BASE: dict[str, Any] = {"model": "claude-fake-1", "max_tokens": 1024}
USER = {"role": "user", "content": "What's the weather in Paris?"}
FAST_RETRY = {"initial_interval": "PT0.05S", "maximum_interval": "PT0.1S"}
ANSWER = "Sunny and mild in Paris today."


@pytest.fixture(params=["memory", "sqlite", "sqlite-encrypted", "postgresql"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[ContentStore]:
    """Each store kind a worker and its watchers can share without a container."""
    kind = request.param
    if kind == "memory":
        url = "memory:"
    elif kind == "postgresql":
        url = request.getfixturevalue("postgres_url")
    else:
        url = f"sqlite:///{tmp_path}/store.db"
    environ = {KEYS_ENV: f"k1:{new_key()}"} if kind.endswith("encrypted") else {}
    async with open_store(url, environ=environ) as opened:
        yield opened


def merged(events: list[RunEvent]) -> list[RunEvent]:
    """``events`` with consecutive text deltas of one block joined (how many writes a reply took is not specified)."""
    out: list[RunEvent] = []
    for event in events:
        last = out[-1] if out else None
        if (
            isinstance(event, TextDelta)
            and isinstance(last, TextDelta)
            and (last.iteration, last.attempt, last.index) == (event.iteration, event.attempt, event.index)
        ):
            out[-1] = last.model_copy(update={"text": last.text + event.text})
        else:
            out.append(event)
    return out


async def test_a_watcher_sees_the_text_of_a_failed_attempt_then_its_retraction_then_the_retry(
    client: Client, task_queue: str, fake_api: FakeMessagesAPI, store: ContentStore
) -> None:
    # Five SSE events: message_start, ping, content_block_start and the first two of the text's three deltas.
    fake_api.script(DropMidStream(end_turn(ANSWER), 5), end_turn(ANSWER))
    claude = ClaudeActivities(anthropic_client_factory(fake_api))
    runner = AgentRunner(client, task_queue=task_queue, store=store)
    async with build_worker(client, registry=ToolRegistry(), task_queue=task_queue, claude=claude, store=store):
        run = await runner.start(**BASE, messages=[USER], model_activity=FAST_RETRY)
        events = await asyncio.wait_for(_collect(run.events()), 30)
        final = await run.until_done()
        history = await run.handle.fetch_history()

    reply = final.model_dump(mode="json", exclude_unset=True, by_alias=True)
    # Stream offsets: 0 iteration_started, 1 recorded_call (not yielded), 2 reply, 3 run_finished; the live log's
    # events take the offset of the stream event before them.
    assert merged(events) == [
        IterationStarted(iteration=1, offset=0),
        ModelCallStarted(iteration=1, attempt=1, offset=0),
        BlockStart(iteration=1, attempt=1, index=0, block={"type": "text", "text": ""}, offset=0),
        TextDelta(iteration=1, attempt=1, index=0, text="Sunny and mild in Pa", offset=0),
        Retracted(iteration=1, attempt=1, offset=0),
        ModelCallStarted(iteration=1, attempt=2, offset=0),
        BlockStart(iteration=1, attempt=2, index=0, block={"type": "text", "text": ""}, offset=0),
        TextDelta(iteration=1, attempt=2, index=0, text=ANSWER, offset=0),
        BlockStop(iteration=1, attempt=2, index=0, offset=0),
        ReplyReceived(iteration=1, message=reply, offset=2),
        RunFinished(iteration=1, status="completed", detail=None, offset=3),
    ]
    # Not one signal: the deltas went to the store, not to the run.
    assert [e for e in history.events if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED] == []
    logged = [json.loads(data) for _, data in await store.read_live(run.id)]
    assert [(e["type"], e["attempt"]) for e in logged if e["type"] != "text"] == [
        ("model_call_started", 1),
        ("block_start", 1),
        ("model_call_started", 2),
        ("block_start", 2),
        ("block_stop", 2),
    ]
    assert "".join(e["text"] for e in logged if e["type"] == "text" and e["attempt"] == 2) == ANSWER


async def _collect(events: AsyncIterator[RunEvent]) -> list[RunEvent]:
    return [event async for event in events]


async def test_the_publisher_merges_deltas_and_writes_them_in_order(store: ContentStore) -> None:
    now = [0.0]
    async with EventPublisher(store, "run-p", iteration=3, attempt=2, interval=1.0, clock=lambda: now[0]) as events:
        events.publish("block_start", index=0, block={"type": "text", "text": ""})
        for piece in ("Sun", "ny ", "and"):
            events.delta("text", 0, piece)
        events.tick()  # less than `interval` since the publisher began: nothing is written
        await asyncio.sleep(0.01)
        assert await store.read_live("run-p") == []
        now[0] = 1.0
        events.tick()
        await events.flush()
        assert len(await store.read_live("run-p")) == 3  # the attempt's start, the block's start, the text so far
        events.delta("text", 0, " mild")  # after a write: a new event
        events.publish("block_stop", index=0)
    logged = [json.loads(data) for _, data in await store.read_live("run-p")]
    head = {"iteration": 3, "attempt": 2}
    assert logged == [
        {"type": "model_call_started", **head},
        {"type": "block_start", **head, "index": 0, "block": {"type": "text", "text": ""}},
        {"type": "text", **head, "index": 0, "text": "Sunny and"},
        {"type": "text", **head, "index": 0, "text": " mild"},
        {"type": "block_stop", **head, "index": 0},
    ]
    positions = [seq for seq, _ in await store.read_live("run-p")]
    assert positions == sorted(positions)
    assert [json.loads(d)["type"] for _, d in await store.read_live("run-p", positions[2])] == ["text", "block_stop"]
    assert await store.read_live("another-run") == []


async def test_a_first_attempts_start_waits_for_the_reply_and_a_retrys_is_written_at_once(
    store: ContentStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run's ``iteration_started`` already says a turn began, so a first attempt's ``model_call_started`` costs no
    store write of its own however long the model takes to begin: it goes with the reply's first events. A retry's is
    written within the interval, for watchers to drop the failed attempt's text then."""
    writes: list[list[str]] = []
    append_live = store.append_live

    async def counted(run_id: str, entries: list[bytes]) -> None:
        writes.append([json.loads(entry)["type"] for entry in entries])
        await append_live(run_id, entries)

    monkeypatch.setattr(store, "append_live", counted)
    now = [0.0]
    async with EventPublisher(store, "run-f", iteration=1, attempt=1, interval=0.3, clock=lambda: now[0]) as events:
        for _ in range(3):  # the model takes 3 s to begin its reply
            now[0] += 1.0
            events.tick()
        await asyncio.sleep(0.01)
        assert writes == []
        events.publish("block_start", index=0, block={"type": "text", "text": ""})
        events.tick()
        await events.flush()
        assert writes == [["model_call_started", "block_start"]]
    async with EventPublisher(store, "run-f", iteration=1, attempt=2, interval=0.3, clock=lambda: now[0]) as events:
        now[0] += 0.3
        events.tick()
        await events.flush()
        assert writes[1:] == [["model_call_started"]]
    assert [json.loads(data)["attempt"] for _, data in await store.read_live("run-f")] == [1, 1, 2]


def _wire(event_type: str, iteration: int, **fields: Any) -> bytes:
    return json.dumps({"type": event_type, "iteration": iteration, **fields}).encode()


async def test_the_merge_holds_a_later_turn_until_it_starts_and_drops_a_recorded_turns_late_events() -> None:
    async with open_store("memory:") as store:
        merge = LiveMerge(store, "run-m")
        assert not merge.streaming  # nothing to read before a turn starts: a waiting watcher leaves the store be
        started = parse_event({"type": "iteration_started", "iteration": 1}, offset=0)
        assert await merge.before(started) == []
        assert merge.after(started) == []
        assert merge.streaming
        await store.append_live("run-m", [_wire("model_call_started", 1, attempt=1)])
        assert await merge.poll() == [ModelCallStarted(iteration=1, attempt=1, offset=0)]
        recorded = RecordedCall(iteration=1, attempt=1, offset=1)
        await store.append_live("run-m", [_wire("text", 1, attempt=1, index=0, text="Hi")])
        assert await merge.before(recorded) == [TextDelta(iteration=1, attempt=1, index=0, text="Hi", offset=0)]
        assert merge.after(recorded) == []
        assert not merge.streaming
        # A zombie attempt of turn 1 still streaming, and turn 2's call already streaming before the watcher saw
        # turn 2 start (the stream is polled, the log too).
        await store.append_live(
            "run-m",
            [_wire("text", 1, attempt=1, index=0, text="late"), _wire("model_call_started", 2, attempt=1)],
        )
        assert await merge.poll() == []
        turn_two = IterationStarted(iteration=2, offset=2)
        assert await merge.before(turn_two) == []
        assert merge.after(turn_two) == [ModelCallStarted(iteration=2, attempt=1, offset=2)]


async def test_a_worker_with_the_plugin_sends_heartbeats_at_least_every_second(client: Client) -> None:
    # The model call's heartbeat timeout is 3 s: Temporal's default throttle (80% of it) would leave 0.6 s of slack.
    default = build_worker(client, registry=ToolRegistry(), task_queue="throttle-default")
    own = Worker(
        client,
        task_queue="throttle-own",
        plugins=[AgentRunnerPlugin()],
        max_heartbeat_throttle_interval=timedelta(milliseconds=200),
    )
    assert default.config(active_config=True)["max_heartbeat_throttle_interval"] == timedelta(seconds=1)
    assert own.config(active_config=True)["max_heartbeat_throttle_interval"] == timedelta(milliseconds=200)


async def test_a_sweep_removes_live_events_written_before_its_cutoff_and_keeps_later_ones(store: ContentStore) -> None:
    await store.append_live("run-s", [_wire("model_call_started", 1, attempt=1)])
    cutoff = await store.clock() + 0.001
    await asyncio.sleep(0.01)
    await store.append_live("run-s", [_wire("model_call_started", 1, attempt=2)])
    await store.sweep(set(), set(), written_before=cutoff, dry_run=True)
    assert len(await store.read_live("run-s")) == 2  # a dry run changes nothing
    await store.sweep(set(), set(), written_before=cutoff)
    assert [json.loads(data)["attempt"] for _, data in await store.read_live("run-s")] == [2]
