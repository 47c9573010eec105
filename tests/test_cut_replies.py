"""``continue_cut_replies``: a reply whose stream was cut off goes on from the text that had come.

The fake streams a text in three deltas (``_chunks``): "Paris is sunny today. Tomorrow brings rain." comes as
"Paris is sunny ", "today. Tomorrow", " brings rain.". ``DropMidStream(reply, 4)`` sends ``message_start``, ``ping``,
the block's start and the first delta, then drops the connection.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from anthropic import beta_tool

from agent_runner.activities.cut_replies import continuable, with_prefill
from agent_runner.client import AgentRunner
from agent_runner.testing import (
    DropMidStream,
    ErrorMidStream,
    FakeMessagesAPI,
    Reply,
    bad_request,
    end_turn,
    text,
    thinking,
    tool_use,
)
from tests.conftest import WorkerFactory
from tests.test_events import BASE, FAST_RETRY, USER, collect, streamed_text

LONG = "Paris is sunny today. Tomorrow brings rain."
KEPT = [{"type": "text", "text": "Paris is sunny"}]
"""What the cut-off attempt of ``LONG`` had streamed ("Paris is sunny "), its trailing space left out."""


RAN: list[str] = []


@beta_tool
def forecast(city: str) -> str:
    """The forecast for a city.

    Args:
        city: The city.
    """
    RAN.append(city)
    return f"sunny in {city}"


def prefilled(body: dict[str, Any], blocks: list[dict[str, Any]]) -> dict[str, Any]:
    """``body`` with ``blocks`` as the start of Claude's turn."""
    return {**body, "messages": [*body["messages"], {"role": "assistant", "content": blocks}]}


@pytest.mark.parametrize("thread", [True, False], ids=["thread", "full_history"])
@pytest.mark.parametrize(
    "cut", [DropMidStream(end_turn(LONG), 4), ErrorMidStream(end_turn(LONG), 4)], ids=["dropped", "overloaded"]
)
async def test_the_retry_goes_on_from_the_text_that_had_come(
    runner: AgentRunner,
    worker: WorkerFactory,
    fake_api: FakeMessagesAPI,
    thread: bool,
    cut: DropMidStream | ErrorMidStream,
) -> None:
    fake_api.script(cut, end_turn(" today. Tomorrow brings rain."))
    async with worker():
        run = await runner.start(
            **BASE, messages=[USER], thread=thread, continue_cut_replies=True, model_activity=FAST_RETRY
        )
        events = await asyncio.wait_for(collect(run), 30)
        result = await run.result()
        transcript = await run.transcript()
    first, second = fake_api.bodies()
    assert second == prefilled(first, KEPT)
    reply = [*KEPT, {"type": "text", "text": " today. Tomorrow brings rain."}]
    assert result.final_message is not None and result.final_message["content"] == reply
    assert (result.status, result.iterations) == ("completed", 1)
    assert transcript == [USER, {"role": "assistant", "content": reply}]
    # A watcher drops what the cut-off attempt streamed, then reads the kept text again and what followed it.
    assert streamed_text(events) == "Paris is sunny today. Tomorrow brings rain."


async def test_without_the_option_the_retry_sends_the_same_request_and_the_reply_starts_over(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    fake_api.script(DropMidStream(end_turn(LONG), 4), end_turn(LONG))
    async with worker():
        run = await runner.start(**BASE, messages=[USER], model_activity=FAST_RETRY)
        result = await run.result()
    first, second = fake_api.bodies()
    assert second == first
    assert result.final_message is not None and result.final_message["content"] == [text(LONG)]


async def test_a_reply_cut_twice_goes_on_from_all_the_text_kept(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    # The second attempt streams " today. Tomorrow " of its continuation before it is cut off too.
    fake_api.script(
        DropMidStream(end_turn(LONG), 4),
        DropMidStream(end_turn(" today. Tomorrow brings rain, or so they all say."), 4),
        end_turn(" brings rain."),
    )
    async with worker():
        run = await runner.start(**BASE, messages=[USER], continue_cut_replies=True, model_activity=FAST_RETRY)
        result = await run.result()
    first, second, third = fake_api.bodies()
    assert second == prefilled(first, KEPT)
    both = [*KEPT, {"type": "text", "text": " today. Tomorrow"}]
    assert third == prefilled(first, both)
    assert result.final_message is not None
    assert result.final_message["content"] == [*both, {"type": "text", "text": " brings rain."}]


STALLS = {"start_to_close_timeout": "PT5S", "heartbeat_timeout": "PT2S", **FAST_RETRY}
"""An attempt whose stream stalls times out 5 s after it began: it heartbeats every second until then."""


async def test_an_attempt_that_times_out_mid_stream_leaves_the_text_its_heartbeats_kept(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """An attempt that ends without a word (here its start-to-close timeout; a worker killed is in
    test_durability.py) leaves the text it had kept by its last heartbeat."""
    # The whole text comes within half a second, then the stream hangs until the attempt times out.
    stalled = DropMidStream(Reply([text(LONG)], "end_turn", event_delay=0.1), 6, delay=10)
    fake_api.script(stalled, end_turn(" Then sun again."))
    async with worker():
        run = await runner.start(**BASE, messages=[USER], continue_cut_replies=True, model_activity=STALLS)
        result = await run.result()
    first, second = fake_api.bodies()
    assert second == prefilled(first, [text(LONG)])
    assert result.final_message is not None
    assert result.final_message["content"] == [text(LONG), text(" Then sun again.")]


async def test_an_attempt_that_streams_nothing_new_keeps_naming_the_text_it_was_sent(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """The second attempt heartbeats while its stream hangs before any text: its heartbeats still name the text the
    first kept, so the third goes on from it too."""
    fake_api.script(
        DropMidStream(end_turn(LONG), 4),
        DropMidStream(end_turn(" today."), 2, delay=10),
        end_turn(" today. Tomorrow brings rain."),
    )
    async with worker():
        run = await runner.start(**BASE, messages=[USER], continue_cut_replies=True, model_activity=STALLS)
        result = await run.result()
    first, second, third = fake_api.bodies()
    assert second == third == prefilled(first, KEPT)
    assert result.final_message is not None
    assert result.final_message["content"] == [*KEPT, text(" today. Tomorrow brings rain.")]


async def test_a_tool_call_cut_off_is_written_again_after_the_text_before_it(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """A tool call cannot be resent without its whole input: the text before it is kept, the call is written again,
    and the tool runs once, for the call the reply holds."""
    call = tool_use("toolu_1", "forecast", {"city": "Paris"})
    # Cut after the call's start and its first input delta: the text block is whole, the input is not.
    cut = DropMidStream(Reply([text("Let me check."), call], "tool_use"), 8)
    RAN.clear()
    fake_api.script(cut, Reply([call], "tool_use"), end_turn("Sunny."))
    async with worker(forecast):
        run = await runner.start(
            **BASE,
            messages=[USER],
            tools=[forecast],
            thread=False,
            continue_cut_replies=True,
            model_activity=FAST_RETRY,
        )
        result = await run.result()
    first, second, third = fake_api.bodies()
    kept = [{"type": "text", "text": "Let me check."}]
    assert second == prefilled(first, kept)
    assert third["messages"][1:] == [
        {"role": "assistant", "content": [*kept, call]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny in Paris"}],
        },
    ]
    assert RAN == ["Paris"]
    assert (result.status, result.iterations) == ("completed", 2)


async def test_a_reply_that_starts_with_thinking_starts_over(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """A thinking block cannot be resent without its signature, which comes at its end."""
    streamed = Reply([thinking("Rain or sun?"), text(LONG)], "end_turn")
    fake_api.script(DropMidStream(streamed, 12), streamed)
    async with worker():
        run = await runner.start(**BASE, messages=[USER], continue_cut_replies=True, model_activity=FAST_RETRY)
        result = await run.result()
    first, second = fake_api.bodies()
    assert second == first
    assert result.final_message is not None
    assert [b["type"] for b in result.final_message["content"]] == ["thinking", "text"]


async def test_a_model_that_refuses_the_prefill_gets_the_turn_again_from_the_start(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """The attempt sends the turn again without the kept text, and the call's later attempts keep none."""
    fake_api.script(
        DropMidStream(end_turn(LONG), 4),
        bad_request("This model does not support assistant prefill."),
        DropMidStream(end_turn(LONG), 4),
        end_turn(LONG),
    )
    async with worker():
        run = await runner.start(**BASE, messages=[USER], continue_cut_replies=True, model_activity=FAST_RETRY)
        result = await run.result()
    first, second, third, fourth = fake_api.bodies()
    assert second == prefilled(first, KEPT)
    assert third == first
    assert fourth == first
    assert result.final_message is not None and result.final_message["content"] == [text(LONG)]


async def test_a_prefill_of_the_callers_own_is_continued_in_the_same_assistant_message(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    opening = {"role": "assistant", "content": "Weather report:"}
    fake_api.script(DropMidStream(end_turn(LONG), 4), end_turn(" today. Tomorrow brings rain."))
    async with worker():
        run = await runner.start(**BASE, messages=[USER, opening], continue_cut_replies=True, model_activity=FAST_RETRY)
        await run.result()
    first, second = fake_api.bodies()
    assert first["messages"][-1] == opening
    assert second["messages"] == [
        *first["messages"][:-1],
        {"role": "assistant", "content": [{"type": "text", "text": "Weather report:"}, *KEPT]},
    ]


@pytest.mark.parametrize(
    ("blocks", "kept"),
    [
        ([text("a "), text(" \n"), text("b\n\n")], [text("a "), text("b")]),
        ([text("a"), text("  ")], [text("a")]),
        ([text("a"), {**text("b"), "citations": [{"type": "char_location"}]}, text("c")], [text("a")]),
        ([text("a"), tool_use("toolu_1", "f", {}), text("b")], [text("a")]),
        ([thinking("hmm"), text("a")], []),
        ([], []),
    ],
    ids=["whitespace", "blank_last", "citations", "tool_call", "thinking_first", "nothing"],
)
def test_only_leading_plain_text_is_kept(blocks: list[dict[str, Any]], kept: list[dict[str, Any]]) -> None:
    assert continuable(blocks) == kept


def test_the_prefill_joins_a_trailing_assistant_message() -> None:
    user = {"role": "user", "content": "hi"}
    assert with_prefill([user], [text("a")]) == [user, {"role": "assistant", "content": [text("a")]}]
    assert with_prefill([user, {"role": "assistant", "content": [text("x")]}], [text("a")]) == [
        user,
        {"role": "assistant", "content": [text("x"), text("a")]},
    ]
    assert with_prefill([user], []) == [user]
