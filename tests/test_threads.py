"""Every thread error and fallback the SDK's tool runner handles, differentially: the same scripted replies through
the SDK's in-process runner (streaming, as our model call is, and plain) and a durable run, asserting identical
request bodies, tool calls and final message.

The SDK's rules (anthropic 2.14.0, ``lib/threads/_thread_state.py``):

- ``recovers_from``: a ``thread_unsupported_request`` rejection of any threaded request resends the turn with the
  whole history and no ``thread``, and every later turn too (``stop_threading``: the "unthreaded" position, whose
  full-history turns drop the ``cache_control`` of the messages up to the last reply, as a replay does).
- ``recovers_from``: ``thread_not_found`` on the first ``continue`` of a thread that replaced a lost one
  (``Continue.replaces_lost_thread``) stops threading the same way; on any other ``continue`` it replays the whole
  history under a new thread (``_start_new_thread``).
- ``record_reply``: a reply with a ``fallback_message`` entry in ``usage.iterations`` is stored, and the next turn
  starts a new thread (``_start_new_thread("fallback_message")``), because the server stores no such turn.
"""

from __future__ import annotations

import asyncio
from typing import Any

import anthropic
import pytest
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from agent_runner.client import AgentRunner
from agent_runner.testing import FakeMessagesAPI, Reply, ThreadNotFound, ThreadUnsupported, end_turn, text, tool_use
from agent_runner.workflows.agent_run import AgentRun
from tests.conftest import WorkerFactory, patches_of_their_own
from tests.steering_support import wait_status
from tests.test_differential import PARAMS, TOOLS
from tests.tools_for_tests import get_weather

CACHED_PROMPT: dict[str, Any] = {
    "role": "user",
    "content": [
        {"type": "text", "text": "What's the weather in Paris?", "cache_control": {"type": "ephemeral"}},
    ],
}
"""A first message with a ``cache_control``: a full-history turn after the thread is given up drops it."""

FALLBACK_USAGE: dict[str, Any] = {
    "input_tokens": 10,
    "output_tokens": 5,
    "iterations": [
        {
            "type": "message",
            "model": "claude-fake-1",
            "input_tokens": 10,
            "output_tokens": 0,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        },
        {
            "type": "fallback_message",
            "model": "claude-fake-fallback",
            "input_tokens": 10,
            "output_tokens": 5,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        },
    ],
}
"""``usage`` of a reply a fallback model served (``BetaFallbackMessageIterationUsage`` is the signal)."""


def weather(tool_id: str, **reply: Any) -> Reply:
    return Reply([text("Checking."), tool_use(tool_id, "get_weather", {"city": "Paris"})], "tool_use", **reply)


def sdk_run(
    fake: FakeMessagesAPI,
    script: list[Any],
    options: dict[str, Any],
    *,
    thread: bool,
    stream: bool,
    compact_after_first: bool = False,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The request bodies and the final message of the SDK's own tool runner over ``script``.

    With ``compact_after_first``, the loop body calls ``compact_before_next_turn()`` after the first reply.
    """
    fake.reset()
    fake.script(*script)
    client = anthropic.Anthropic(base_url=fake.url, api_key="test-key", max_retries=0)
    kwargs: dict[str, Any] = {**PARAMS, "tools": TOOLS, **options}
    if not thread:
        kwargs["thread"] = False
    runner = client.beta.messages.tool_runner(**kwargs, stream=stream)
    for i, item in enumerate(runner):
        if stream:
            item.get_final_message()
        if compact_after_first and i == 0:
            runner.compact_before_next_turn()
    final = runner.until_done()
    bodies = fake.bodies()
    if not stream:
        # Our model call always streams: the plain runner's bodies are compared as the streaming one sends them.
        bodies = [{**b, "stream": True} for b in bodies]
    return bodies, final.model_dump(mode="json", exclude_unset=True)


async def durable_run(
    fake: FakeMessagesAPI, runner: AgentRunner, script: list[Any], options: dict[str, Any], *, thread: bool
) -> tuple[list[dict[str, Any]], dict[str, Any] | None, int]:
    """The request bodies, the final message and the continuations of a durable run over ``script``."""
    fake.reset()
    fake.script(*script)
    run = await runner.start(**{**PARAMS, **options}, tools=TOOLS, thread=thread)
    result = await run.result()
    assert result.status == "completed", result.detail
    return fake.bodies(), result.final_message, (await run.status()).continuations


def thread_types(bodies: list[dict[str, Any]]) -> list[str | None]:
    return [b["thread"]["type"] if "thread" in b else None for b in bodies]


async def assert_same_as_sdk(
    fake: FakeMessagesAPI,
    runner: AgentRunner,
    worker: WorkerFactory,
    script: list[Any],
    options: dict[str, Any],
    *,
    thread: bool,
    stream: bool,
) -> list[dict[str, Any]]:
    """Run ``script`` through both runners; assert the same bodies, tool calls and final message; the bodies."""
    expected, sdk_final = await asyncio.to_thread(sdk_run, fake, script, options, thread=thread, stream=stream)
    async with worker(*TOOLS):
        actual, final, _ = await durable_run(fake, runner, script, options, thread=thread)
    assert actual == expected
    assert final is not None and final["id"] == sdk_final["id"] and final["content"] == sdk_final["content"]
    assert tool_results(actual) == tool_results(expected)
    return expected


def tool_results(bodies: list[dict[str, Any]]) -> list[str]:
    """The ``tool_use_id`` of every tool result sent, in order: the tool calls that ran (a resent turn repeats)."""
    return [
        block["tool_use_id"]
        for body in bodies
        for message in body["messages"]
        if message["role"] == "user" and isinstance(message["content"], list)
        for block in message["content"]
        if block.get("type") == "tool_result"
    ]


STREAM = pytest.mark.parametrize("stream", [True, False], ids=["streaming_runner", "runner"])


@STREAM
@pytest.mark.parametrize(
    ("script", "threads"),
    [
        pytest.param(
            [ThreadUnsupported(("fallbacks",)), weather("toolu_U1"), end_turn("ok")],
            ["create", None, None],
            id="on_create",
        ),
        pytest.param(
            [weather("toolu_U1"), ThreadUnsupported(), weather("toolu_U2"), end_turn("ok")],
            ["create", "continue", None, None],
            id="on_continue",
        ),
        pytest.param(
            [Reply([text("Searching.")], "pause_turn"), ThreadUnsupported(), weather("toolu_U1"), end_turn("ok")],
            ["create", "continue", None, None],
            id="on_pause_turn_resume",
        ),
    ],
)
async def test_thread_unsupported_request_resends_without_a_thread_for_the_rest_of_the_run(
    runner: AgentRunner,
    worker: WorkerFactory,
    fake_api: FakeMessagesAPI,
    script: list[Any],
    threads: list[str | None],
    stream: bool,
) -> None:
    """The rejected turn is resent whole without `thread` (answered messages without `cache_control`), and so is
    every later turn, with no threads beta."""
    options = {"messages": [CACHED_PROMPT]}
    expected = await assert_same_as_sdk(fake_api, runner, worker, script, options, thread=True, stream=stream)
    assert thread_types(expected) == threads
    last = expected[-1]
    assert last["system"] == PARAMS["system"] and len(last["tools"]) == len(TOOLS)
    uncached = {"role": "user", "content": [{"type": "text", "text": "What's the weather in Paris?"}]}
    assert last["messages"][0] == uncached
    betas = [r.headers.get("anthropic-beta", "") for r in fake_api.requests]
    assert ["message-threads" in b for b in betas] == [t is not None for t in threads]


@STREAM
async def test_a_thread_lost_again_right_after_a_replay_stops_threading_for_the_rest_of_the_run(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, stream: bool
) -> None:
    """The first `continue` of the thread that replaced a lost one is lost too: the turn goes without a thread."""
    script = [
        weather("toolu_L1"),
        ThreadNotFound(),  # the first continue: replayed under a new thread
        weather("toolu_L2"),
        ThreadNotFound(),  # the new thread's first continue: the server cannot keep it
        weather("toolu_L3"),
        end_turn("ok"),
    ]
    expected = await assert_same_as_sdk(fake_api, runner, worker, script, {}, thread=True, stream=stream)
    assert thread_types(expected) == ["create", "continue", "create", "continue", None, None]


async def test_a_thread_lost_later_after_a_replay_is_replayed_again(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """Only the first `continue` after a replay counts: once one succeeded, a lost thread is replayed as usual."""
    script = [
        weather("toolu_L1"),
        ThreadNotFound(),
        weather("toolu_L2"),
        weather("toolu_L3"),
        ThreadNotFound(),
        end_turn("ok"),
    ]
    expected = await assert_same_as_sdk(fake_api, runner, worker, script, {}, thread=True, stream=True)
    assert thread_types(expected) == ["create", "continue", "create", "continue", "continue", "create"]


@STREAM
@pytest.mark.parametrize("thread", [True, False], ids=["thread", "full_history"])
async def test_a_reply_a_fallback_model_served_starts_a_new_thread(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, thread: bool, stream: bool
) -> None:
    """The server stores no turn a fallback model wrote: the next turn replays the history under a new thread
    (without a thread, nothing changes)."""
    script = [weather("toolu_F1", usage=FALLBACK_USAGE), weather("toolu_F2"), end_turn("ok")]
    expected = await assert_same_as_sdk(fake_api, runner, worker, script, {}, thread=thread, stream=stream)
    assert thread_types(expected) == (["create", "create", "continue"] if thread else [None, None, None])


async def test_threads_stay_off_across_continue_as_new(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """The decision to stop threading is the run's state: a continuation keeps sending the whole history."""
    turns = [weather(f"toolu_C{i}") for i in range(8)]
    script = [ThreadUnsupported(("fallbacks",)), *turns, end_turn("All done.")]
    expected, _ = await asyncio.to_thread(sdk_run, fake_api, script, {}, thread=True, stream=True)
    async with worker(get_weather, *TOOLS[1:]):
        actual, final, continuations = await durable_run(
            fake_api, runner, script, {"continue_as_new": {"events": 40}, "max_iterations": 20}, thread=True
        )
    assert continuations >= 1
    assert actual == expected
    assert thread_types(actual) == ["create", *([None] * 9)]
    assert final is not None and final["content"] == [text("All done.")]


async def durable_compacted_run(
    fake: FakeMessagesAPI, runner: AgentRunner, script: list[Any], options: dict[str, Any], *, thread: bool
) -> list[dict[str, Any]]:
    """A durable run over ``script`` asked to compact after its first reply (as the SDK's loop body above)."""
    fake.reset()
    fake.script(*script)
    run = await runner.start(**{**PARAMS, **options}, tools=TOOLS, thread=thread, step=True)
    await wait_status(run, "waiting_for_step", 1)
    await run.compact()
    await run.advance()
    for iteration in (2, 3):
        await wait_status(run, "waiting_for_step", iteration)
        await run.advance()
    result = await run.result()
    assert result.status == "completed", result.detail
    return fake.bodies()


SUMMARY = {"type": "compaction", "content": "Summary: Paris is sunny."}


async def test_a_compaction_the_server_cannot_thread_is_resent_without_and_the_run_stays_unthreaded(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """The SDK's compaction fork resends unthreaded, then stops threading the runner's own thread
    (``_register_compaction_response``)."""
    script = [weather("toolu_K1"), ThreadUnsupported(), Reply([SUMMARY], "compaction"), weather("toolu_K2")]
    script.append(end_turn("ok"))
    options = {"betas": ["compact-2026-09-04"]}
    expected, _ = await asyncio.to_thread(
        sdk_run, fake_api, script, options, thread=True, stream=True, compact_after_first=True
    )
    async with worker(*TOOLS):
        actual = await durable_compacted_run(fake_api, runner, script, options, thread=True)
    assert actual == expected
    assert thread_types(expected) == ["create", "create", None, None, None]
    assert [b.get("compaction") for b in expected] == [None, {"type": "summarize"}, {"type": "summarize"}, None, None]


@pytest.mark.parametrize("thread", [True, False], ids=["thread", "full_history"])
async def test_a_compaction_request_drops_what_only_shapes_a_reply_as_the_sdk(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, thread: bool
) -> None:
    """A forced `tool_choice`, `output_config.format` (an `output_config` left empty is sent empty) and the
    `format` of each `fallbacks` entry: what the newest models refuse on a request that returns no reply."""
    schema = {"type": "json_schema", "schema": {"type": "object", "properties": {}, "additionalProperties": False}}
    options = {
        "betas": ["compact-2026-09-04"],
        "output_config": {"format": schema},
        "fallbacks": [{"model": "claude-fake-2", "output_config": {"format": schema, "effort": "low"}}],
        "tool_choice": {"type": "any"},
    }
    script = [weather("toolu_P1"), Reply([SUMMARY], "compaction"), weather("toolu_P2"), end_turn("{}")]
    expected, _ = await asyncio.to_thread(
        sdk_run, fake_api, script, options, thread=thread, stream=True, compact_after_first=True
    )
    async with worker(*TOOLS):
        actual = await durable_compacted_run(fake_api, runner, script, options, thread=thread)
    assert actual == expected
    compaction = expected[1]
    assert {k: v for k, v in compaction.items() if k not in ("messages", "tools")} == {
        "model": "claude-fake-1",
        "max_tokens": 1024,
        "system": "You are terse.",
        "output_config": {},
        "fallbacks": [{"model": "claude-fake-2", "output_config": {"effort": "low"}}],
        "compaction": {"type": "summarize"},
        "stream": True,
        **({"thread": {"type": "create"}} if thread else {}),
    }
    assert expected[2]["tool_choice"] == {"type": "any"}  # later turns keep it


async def test_a_run_that_took_the_thread_fallbacks_replays_on_the_current_code(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """The fallbacks are behind a patch that the umbrella of a new run implies (`patches.implied`): the history records
    no marker of its own for it, and replays."""
    fake_api.script(weather("toolu_R1", usage=FALLBACK_USAGE), ThreadUnsupported(), weather("toolu_R2"))
    fake_api.script(end_turn("ok"))
    async with worker(*TOOLS):
        run = await runner.start(**PARAMS, tools=TOOLS)
        await run.result()
        history = await run.handle.fetch_history()
    assert thread_types(fake_api.bodies()) == ["create", "create", None, None]
    replayer = Replayer(workflows=[AgentRun], data_converter=pydantic_data_converter)
    result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is None
    assert patches_of_their_own(history) == []
