"""Refusal fallbacks spliced as the SDK 2.14.0 ``BetaRefusalFallbackMiddleware`` streams them (``fallbacks.py``).

Differential: each script goes through the SDK's streaming tool runner with the middleware (and a shared
``BetaFallbackState``, so later turns stay on the model that accepted) and through a durable run with the same chain as
``refusal_fallbacks``. Both must send identical request bodies (the refused partial output resent as a prefill when
the refusal grants it, seam blocks left out of the history) and end with the identical reply (the refused output, a
``fallback`` seam block per model boundary, then the fallback's content, under the first refused reply's id, with the
chain in ``usage.iterations``).
"""

from __future__ import annotations

import asyncio
from typing import Any

import anthropic
import pytest
from anthropic.lib.middleware import BetaFallbackState, BetaRefusalFallbackMiddleware

from agent_runner.cli.render import render_block
from agent_runner.client import AgentRunner
from agent_runner.contract.events import BlockStart
from agent_runner.contract.types import FALLBACK_CREDIT_BETA
from agent_runner.testing import DropMidStream, FakeMessagesAPI, Fault, Reply, bad_request, end_turn, text, thinking
from agent_runner.testing.replies import ScriptItem
from tests.conftest import WorkerFactory
from tests.test_events import collect, streamed_text, without_deltas
from tests.test_parity import (
    PARAMS,
    SYNC_TOOLS,
    Outcome,
    _observed,
    _reset,
    assert_same,
    durable_outcome,
    parity_runner,  # noqa: F401 (the module's shared worker, a fixture)
    weather,
)

CHAIN = ["claude-fallback-2", "claude-fallback-3"]
SERVER_SEAMS = [
    {
        "type": "fallback",
        "from": {"model": "claude-fake-1"},
        "to": {"model": f"claude-fake-{to}"},
        "trigger": {"type": "refusal", "category": "cyber"},
    }
    for to in ("0", "00")
]
"""Seams the API itself streams (its own fallbacks inside one reply) before the output goes on."""


def refused(
    *content: dict[str, Any],
    token: str | None = "tok_A",
    prefill: bool = True,
    usage: dict[str, Any] | None = None,
    category: str = "cyber",
) -> Reply:
    details: dict[str, Any] = {"type": "refusal", "category": category, "explanation": "Not this."}
    if token is not None:
        details["fallback_credit_token"] = token
    if prefill:
        details["fallback_has_prefill_claim"] = True
    return Reply(list(content), "refusal", stop_details=details, usage=usage)


def sdk_outcome(
    fake: FakeMessagesAPI,
    script: list[ScriptItem],
    thread: bool = False,
    chain: list[dict[str, Any]] | None = None,
    **params: Any,
) -> Outcome:
    """The SDK's streaming tool runner over a client with the middleware (call it in a thread: it blocks)."""
    _reset(fake, script)
    middleware = BetaRefusalFallbackMiddleware(chain or [{"model": m} for m in CHAIN])
    client = anthropic.Anthropic(base_url=fake.url, api_key="test-key", max_retries=0, middleware=[middleware])
    with BetaFallbackState():
        wire = {} if thread else {"thread": False}
        runner = client.beta.messages.tool_runner(**{**PARAMS, "tools": SYNC_TOOLS, **params, **wire, "stream": True})
        for stream in runner:
            stream.get_final_message()
        return _observed(fake, runner.until_done())


# The primary's usage, whose `message_start` opens the spliced stream, and the fallback's: fields only a
# `message_start` carries (`service_tier`, `cache_creation`) and counts the fallback's `message_delta` leaves out
# (`cache_read_input_tokens`) stay the primary's; the counts the fallback's `message_delta` carries are its own.
PRIMARY_USAGE = {
    "input_tokens": 10,
    "output_tokens": 3,
    "cache_read_input_tokens": 7,
    "cache_creation_input_tokens": 2,
    "cache_creation": {"ephemeral_5m_input_tokens": 2, "ephemeral_1h_input_tokens": 0},
    "service_tier": "priority",
}
FALLBACK_USAGE = {"input_tokens": 12, "output_tokens": 4, "cache_creation_input_tokens": 0, "service_tier": "standard"}
# A `message_delta` with every count the SDK's accumulator takes from it (a null one it skips).
CLOSING_USAGE = {
    "input_tokens": 12,
    "output_tokens": 4,
    "cache_read_input_tokens": None,
    "server_tool_use": {"web_search_requests": 1, "web_fetch_requests": 0},
    "output_tokens_details": {"thinking_tokens": 2},
    "fallback_credit": {"status": {"type": "redeemed"}},
}

SCRIPTS: dict[str, list[ScriptItem]] = {
    "the_usage_the_stream_opened_with_stays_under_the_fallbacks_counts": [
        refused(text("Here is how to"), usage=PRIMARY_USAGE),
        end_turn(" check it: sunny.", usage=FALLBACK_USAGE),
    ],
    "after_a_refusal_before_any_output_the_fallbacks_usage_opens_the_stream": [
        refused(token=None, prefill=False, usage=PRIMARY_USAGE),
        end_turn("Sunny.", usage=FALLBACK_USAGE),
    ],
    "counts_the_fallbacks_message_delta_leaves_out_stay_the_primarys": [
        refused(text("Here is how to"), usage=PRIMARY_USAGE),
        Reply(
            [text(" check it.")],
            usage={**FALLBACK_USAGE, "cache_read_input_tokens": 5},
            closing_usage={"input_tokens": 12, "output_tokens": 4},
        ),
    ],
    "the_primarys_usage_is_its_message_starts_not_its_closing_counts": [
        Reply(
            [text("Here is how to")],
            "refusal",
            stop_details=refused(token="tok_A").stop_details,
            usage=PRIMARY_USAGE,
            closing_usage={"input_tokens": 10, "output_tokens": 3, "cache_read_input_tokens": 9},
        ),
        Reply([text(" check it.")], usage=FALLBACK_USAGE, closing_usage={"input_tokens": 12, "output_tokens": 4}),
    ],
    "two_hops_keep_the_usage_of_the_first_that_streamed": [
        refused(usage=PRIMARY_USAGE, token=None, prefill=False),
        refused(text("Here"), token="tok_B", usage={**FALLBACK_USAGE, "service_tier": "batch"}),
        end_turn(" it is.", usage=FALLBACK_USAGE),
    ],
    "refused_mid_stream_with_a_prefill_claim": [refused(text("Here is how to")), end_turn(" check it: sunny.")],
    "refused_without_a_prefill_claim": [refused(text("Here is how to"), prefill=False), end_turn("Sunny.")],
    "refused_before_any_output": [refused(token=None, prefill=False), end_turn("Sunny.")],
    "refused_after_output_without_a_token_stands": [refused(text("Here is"), token=None)],
    "a_rejected_prefill_is_sent_once_more_without_it": [
        refused(text("Here")),
        bad_request("bad prefill"),
        end_turn("."),
    ],
    "when_every_hop_fails_the_refusal_stands_recommending_nothing": [
        refused(text("Here"), prefill=False),
        bad_request("no such model"),
        bad_request("no such model"),
    ],
    "when_the_last_hop_is_over_capacity_the_refusal_recommends_it": [
        refused(text("Here")),
        refused(text(" is"), token="tok_B", prefill=False),
        Fault(529),
    ],
    "the_last_entry_refuses_too": [refused(text("Here")), refused(text(" is"), token="tok_B"), refused(token="tok_C")],
    "trailing_thinking_is_not_resent": [refused(text("Let me"), thinking("hmm")), end_turn(" see: sunny.")],
    "two_hops_each_resending_the_output_so_far": [
        refused(text("Here")),
        refused(text(" is"), token="tok_B"),
        end_turn(" the weather."),
    ],
    "seams_are_left_out_of_the_next_request": [
        refused(text("Checking")),
        Reply([weather("toolu_W1")], "tool_use"),
        end_turn("Sunny."),
    ],
    "seams_in_the_refused_output_are_not_resent_and_the_last_model_hands_off": [
        refused(text("Here"), SERVER_SEAMS[0], text(" is"), SERVER_SEAMS[1], text(" how")),
        end_turn(" to check it: sunny."),
    ],
    "trailing_redacted_thinking_is_not_resent": [
        refused(text("Let me"), {"type": "redacted_thinking", "data": "EmwKAhgB"}),
        end_turn(" see: sunny."),
    ],
    "an_empty_credit_token_is_no_token": [refused(text("Here is"), token="")],
    "when_the_last_hop_is_rate_limited_the_refusal_recommends_it": [
        refused(text("Here")),
        refused(text(" is"), token="tok_B", prefill=False),
        Fault(429),
    ],
    "every_count_the_fallbacks_message_delta_carries_replaces_the_primarys": [
        refused(text("Here is how to"), usage=PRIMARY_USAGE),
        Reply([text(" check it.")], usage=FALLBACK_USAGE, closing_usage=CLOSING_USAGE),
    ],
    "self_reported_iterations_are_retyped_and_named": [
        refused(text("Here"), usage={**PRIMARY_USAGE, "iterations": [{"type": "message", "input_tokens": 10}]}),
        Reply(
            [text(" it is.")],
            usage=FALLBACK_USAGE,
            closing_usage={**CLOSING_USAGE, "iterations": [{"type": "message", "model": "claude-fallback-2-0701"}]},
        ),
    ],
    "an_empty_self_report_of_iterations_is_made_from_the_usage": [
        refused(text("Here"), usage={**PRIMARY_USAGE, "iterations": []}),
        end_turn(" it is."),
    ],
    "each_seam_names_the_category_of_the_refusal_before_it": [
        refused(text("Here")),
        refused(text(" is"), token="tok_B", category="bio"),
        end_turn(" the weather."),
    ],
    "two_hops_that_streamed_keep_the_usage_of_the_first": [
        refused(text("Here"), usage=PRIMARY_USAGE),
        refused(text(" is"), token="tok_B", usage={**FALLBACK_USAGE, "service_tier": "batch"}),
        end_turn(" the weather.", usage=FALLBACK_USAGE),
    ],
    "an_assistant_turn_of_only_a_seam_is_left_out_of_the_next_request": [
        refused(token=None, prefill=False),
        Reply([], "pause_turn"),
        end_turn("Sunny."),
    ],
}


@pytest.mark.parametrize("thread", [True, False], ids=["thread", "full_history"])
@pytest.mark.parametrize("name", list(SCRIPTS))
async def test_a_refusal_splices_as_the_middleware_streams_it(
    name: str,
    thread: bool,
    parity_runner: AgentRunner,  # noqa: F811 (the fixture imported above)
    fake_server: FakeMessagesAPI,
) -> None:
    script = SCRIPTS[name]
    expected = await asyncio.to_thread(sdk_outcome, fake_server, script, thread)
    # One attempt per model call, as the SDK client's `max_retries=0`: a hop's 529 fails it at once.
    options = {"refusal_fallbacks": CHAIN, "model_activity": {"maximum_attempts": 1}}
    actual = await durable_outcome(fake_server, parity_runner, script, options, thread=thread)
    assert_same(actual, expected)


BETAS: dict[str, list[str]] = {
    "none": [],
    "the_callers": ["some-beta-2026-01-01"],
    "the_fallback_credit_one": [FALLBACK_CREDIT_BETA],
    "the_fallback_credit_one_among_others": ["some-beta-2026-01-01", FALLBACK_CREDIT_BETA, "other-beta-2026-02-02"],
}


@pytest.mark.parametrize("thread", [True, False], ids=["thread", "full_history"])
@pytest.mark.parametrize("betas", list(BETAS))
async def test_the_beta_header_is_the_middlewares_whatever_betas_the_caller_gave(
    betas: str,
    thread: bool,
    parity_runner: AgentRunner,  # noqa: F811 (the fixture imported above)
    fake_server: FakeMessagesAPI,
) -> None:
    """The threads beta after the caller's betas, the fallback-credit one after it unless the caller gave it."""
    script = SCRIPTS["seams_are_left_out_of_the_next_request"]
    expected = await asyncio.to_thread(sdk_outcome, fake_server, script, thread, betas=BETAS[betas])
    options = {"refusal_fallbacks": CHAIN, "model_activity": {"maximum_attempts": 1}, "betas": BETAS[betas]}
    actual = await durable_outcome(fake_server, parity_runner, script, options, thread=thread)
    assert_same(actual, expected)


@pytest.mark.parametrize("thread", [True, False], ids=["thread", "full_history"])
async def test_a_run_without_tools_sends_an_empty_tool_list_down_the_chain(
    thread: bool,
    parity_runner: AgentRunner,  # noqa: F811 (the fixture imported above)
    fake_server: FakeMessagesAPI,
) -> None:
    script: list[ScriptItem] = [refused(text("Here is how to")), end_turn(" check it: sunny.")]
    expected = await asyncio.to_thread(sdk_outcome, fake_server, script, thread, tools=[])
    options = {"refusal_fallbacks": CHAIN, "model_activity": {"maximum_attempts": 1}}
    actual = await durable_outcome(fake_server, parity_runner, script, options, thread=thread, function_tools=False)
    assert_same(actual, expected)
    assert [b.get("tools") for b in actual.bodies] == [[], []]


ENTRIES = [{"model": m} for m in CHAIN]

SPEED_CASES: dict[str, tuple[list[dict[str, Any]], list[ScriptItem], list[tuple[str, bool]]]] = {
    "inherited_and_over_capacity": (
        ENTRIES,
        [refused(text("Here")), Fault(529)],
        [(CHAIN[0], True), (CHAIN[0], False)],
    ),
    "set_by_the_entry_and_over_capacity": (
        [{**ENTRIES[0], "speed": "fast"}, ENTRIES[1]],
        [refused(text("Here")), Fault(529)],
        [(CHAIN[0], True), (CHAIN[1], True)],
    ),
    "inherited_and_rejected": (
        ENTRIES,
        [refused(text("Here"), prefill=False), bad_request("no such model")],
        [(CHAIN[0], True), (CHAIN[1], True)],
    ),
}


@pytest.mark.parametrize("case", list(SPEED_CASES))
async def test_only_an_entry_over_capacity_that_inherited_fast_speed_is_sent_once_more_without_it(
    case: str,
    parity_runner: AgentRunner,  # noqa: F811 (the fixture imported above)
    fake_server: FakeMessagesAPI,
) -> None:
    """As the middleware: an entry that set ``speed`` itself, or a failure other than over capacity, goes on to the
    next entry, which inherits ``speed: "fast"``."""
    chain, failing, hops = SPEED_CASES[case]
    script: list[ScriptItem] = [*failing, end_turn(" it is.")]
    expected = await asyncio.to_thread(sdk_outcome, fake_server, script, chain=chain, speed="fast")
    options = {"refusal_fallbacks": chain, "model_activity": {"maximum_attempts": 1}, "speed": "fast"}
    actual = await durable_outcome(fake_server, parity_runner, script, options, thread=False)
    assert_same(actual, expected)
    assert [(b["model"], "speed" in b) for b in actual.bodies] == [("claude-fake-1", True), *hops]


async def test_a_watcher_drops_the_refused_stream_and_reads_the_spliced_reply(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """The hop's live events count their attempt on from the refused one's: ``Run.events`` retracts what the refused
    hop streamed, then the hop streams the whole spliced reply, the kept output, the seam and the fallback's text,
    under the indices the reply has (as the middleware's stream shifts them)."""
    fake_api.script(refused(text("Here is how to")), end_turn(" check it."))
    async with worker(*SYNC_TOOLS):
        run = await runner.start(
            **PARAMS, tools=SYNC_TOOLS, thread=False, refusal_fallbacks=CHAIN, model_activity={"maximum_attempts": 1}
        )
        events = await asyncio.wait_for(collect(run), 30)
        final = await run.result()
    assert final.final_message is not None
    assert [b["type"] for b in final.final_message["content"]] == ["text", "fallback", "text"]
    assert streamed_text(events) == "Here is how to check it."
    starts = [(e.index, e.block["type"]) for e in events if isinstance(e, BlockStart) and e.attempt == 2]
    assert starts == [(0, "text"), (1, "fallback"), (2, "text")]
    hop = [("block_start", 1, 2), ("text", 1, 2), ("block_stop", 1, 2)]
    assert without_deltas(events) == [
        ("iteration_started", 1, None),
        ("model_call_started", 1, 1),
        ("block_start", 1, 1),
        ("text", 1, 1),
        ("block_stop", 1, 1),
        ("retracted", 1, 1),
        ("model_call_started", 1, 2),
        *hop,
        ("block_start", 1, 2),
        ("block_stop", 1, 2),
        *hop,
        ("reply", 1, None),
        ("run_finished", 1, None),
    ]


async def test_a_hop_that_failed_counts_all_its_attempts_before_the_next_hop_streams(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """A hop whose every attempt was cut off mid-stream is skipped; the next hop's live events count their attempt on
    past all of the failed hop's, so retracting what the failed hop streamed never drops what the serving hop
    streams."""
    cut = DropMidStream(end_turn(" is how"), after_events=5)  # its text has streamed when the connection drops
    fake_api.script(refused(text("Here")), cut, cut, end_turn(" to check it."))
    async with worker(*SYNC_TOOLS):
        run = await runner.start(
            **PARAMS, tools=SYNC_TOOLS, thread=False, refusal_fallbacks=CHAIN, model_activity={"maximum_attempts": 2}
        )
        events = await asyncio.wait_for(collect(run), 60)
        final = await run.result()
    assert final.final_message is not None
    assert [m["model"] for m in fake_api.bodies()] == ["claude-fake-1", *CHAIN[:1] * 2, CHAIN[1]]
    assert [a for kind, _, a in without_deltas(events) if kind == "model_call_started"] == [1, 2, 3, 4]
    kept = "".join(b["text"] for b in final.final_message["content"] if b["type"] == "text")
    assert kept == "Here to check it."
    assert streamed_text(events) == kept


def test_follow_shows_the_seam_between_the_refused_output_and_the_fallbacks() -> None:
    seam = {"type": "fallback", "from": {"model": "claude-fake-1"}, "to": {"model": "claude-fallback-2"}}
    assert render_block({**seam, "trigger": {"type": "refusal", "category": "cyber"}}) == [
        "↪ claude-fake-1 refused; claude-fallback-2 goes on"
    ]
