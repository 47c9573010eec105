"""The model call puts a streamed reply together as the SDK's ``MessageStream`` does, without its pydantic snapshot.

Differential: each event sequence goes through the SDK's own ``accumulate_event`` and through ``ReplyStream``, and
the two final messages must be the same JSON (the SDK's with the stop fields the wire never carried left out, as
the model call always sent them). The streams over HTTP, end to end, are in test_streaming and test_parity.
"""

from __future__ import annotations

import copy
from typing import Any

import httpx2
import pytest
from anthropic.lib.streaming._beta_messages import accumulate_event

from agent_runner.activities.reply_stream import FINE_GRAINED_TOOL_STREAMING_BETA, ReplyStream
from agent_runner.testing.server import sse_events

USAGE = {"input_tokens": 12, "output_tokens": 7, "cache_read_input_tokens": 0}


def message(content: list[dict[str, Any]], **fields: Any) -> dict[str, Any]:
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-test",
        "content": content,
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": USAGE,
        **fields,
    }


def events_of(reply: dict[str, Any], chunks: int = 3) -> list[dict[str, Any]]:
    return [data for name, data in sse_events(reply, chunks) if name != "ping"]


def sdk_message(events: list[dict[str, Any]], betas: str = "") -> dict[str, Any]:
    """What the model call's body was with the SDK's stream: its snapshot, the never-sent stop fields left out."""
    snapshot = None
    buffers: dict[int, bytes] = {}
    on_wire: set[str] = set()
    for event in copy.deepcopy(events):
        if event["type"] == "message_start":
            on_wire |= set(event["message"])
        if event["type"] == "message_delta":
            on_wire |= set(event["delta"])
        snapshot = accumulate_event(
            event=event,  # type: ignore[arg-type]  # the SDK builds its model from the JSON, as its stream does
            current_snapshot=snapshot,
            json_bufs=buffers,
            request_headers=httpx2.Headers({"anthropic-beta": betas}),
        )
    assert snapshot is not None
    body: dict[str, Any] = snapshot.model_dump(mode="json", exclude_unset=True, by_alias=True, warnings=False)
    for key in {"stop_reason", "stop_sequence", "stop_details"} - on_wire:
        body.pop(key, None)
    return body


def ours(events: list[dict[str, Any]], betas: str = "") -> dict[str, Any]:
    reply = ReplyStream(betas)
    for event in copy.deepcopy(events):
        reply.add(event)
    return reply.message()


REPLIES = {
    "text": message([{"type": "text", "text": "Hello there, how are you today?"}]),
    "empty text": message([{"type": "text", "text": ""}]),
    "tool use": message(
        [
            {"type": "text", "text": "Let me look."},
            {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Paris", "days": [1, 2]}},
            {"type": "tool_use", "id": "toolu_2", "name": "clock", "input": {}},
        ],
        stop_reason="tool_use",
    ),
    "thinking": message(
        [
            {"type": "thinking", "thinking": "The user wants a greeting.", "signature": "sig-abc"},
            {"type": "redacted_thinking", "data": "opaque"},
            {"type": "text", "text": "Hi."},
        ]
    ),
    "server and mcp tools": message(
        [
            {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "temporal"}},
            {
                "type": "web_search_tool_result",
                "tool_use_id": "srvtoolu_1",
                "content": [{"type": "web_search_result", "url": "https://temporal.io", "title": "T"}],
            },
            {"type": "mcp_tool_use", "id": "mcptoolu_1", "name": "echo", "server_name": "s", "input": {"x": "y"}},
            {"type": "text", "text": "Found it."},
        ]
    ),
    "stop details and container": message(
        [{"type": "text", "text": "No."}],
        stop_reason="refusal",
        stop_details={"type": "refusal", "category": "cyber"},
        container={"id": "container_1", "expires_at": "2026-12-02T01:00:00Z"},
    ),
    "max tokens mid tool input": message(
        [{"type": "tool_use", "id": "toolu_1", "name": "write", "input": {"path": "a.txt", "text": "abc"}}],
        stop_reason="max_tokens",
    ),
}


@pytest.mark.parametrize("name", list(REPLIES))
@pytest.mark.parametrize("chunks", [1, 3, 50])
def test_same_message_as_the_sdk_stream(name: str, chunks: int) -> None:
    events = events_of(REPLIES[name], chunks)
    assert ours(events) == sdk_message(events)


def input_delta(partial: str) -> dict[str, Any]:
    return {"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": partial}}


def test_a_tool_input_cut_short_is_parsed_as_far_as_it_goes() -> None:
    tool = {"type": "tool_use", "id": "t", "name": "w", "input": {}}
    cut = [
        *events_of(message([], stop_reason=None))[:1],
        {"type": "content_block_start", "index": 0, "content_block": tool},
        input_delta('{"path": "a.t'),
        input_delta('xt", "n": 1'),
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "max_tokens"}, "usage": {"output_tokens": 9}},
    ]
    assert ours(cut)["content"][0]["input"] == {"path": "a.txt", "n": 1}
    assert ours(cut) == sdk_message(cut)
    # With fine-grained tool streaming a string may be cut anywhere: its start is kept.
    cut_string = [*cut[:3], {"type": "content_block_stop", "index": 0}, cut[-1]]
    beta = f"other-beta,{FINE_GRAINED_TOOL_STREAMING_BETA}"
    assert ours(cut_string, beta)["content"][0]["input"] == {"path": "a.t"}
    assert ours(cut_string, beta) == sdk_message(cut_string, beta)
    assert ours(cut_string)["content"][0]["input"] == {}
    assert ours(cut_string) == sdk_message(cut_string)


def test_deltas_the_fake_does_not_send() -> None:
    """Citations, compaction, a fallback hop, and a ``message_delta`` that carries more than the stop reason."""
    start = {"type": "message_start", "message": {**message([]), "stop_reason": None, "content": []}}
    citation = {"type": "char_location", "cited_text": "x", "document_index": 0, "start_char_index": 0}
    events = [
        start,
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Per the doc"}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "citations_delta", "citation": citation}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "citations_delta", "citation": citation}},
        {"type": "content_block_stop", "index": 0},
        {"type": "content_block_start", "index": 1, "content_block": {"type": "compaction", "content": None}},
        {
            "type": "content_block_delta",
            "index": 1,
            "delta": {"type": "compaction_delta", "content": "summary", "encrypted_content": "enc"},
        },
        {"type": "content_block_stop", "index": 1},
        {
            "type": "content_block_start",
            "index": 2,
            "content_block": {"type": "fallback", "from": {"model": "claude-test"}, "to": {"model": "claude-other"}},
        },
        {"type": "content_block_stop", "index": 2},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "end_turn", "stop_sequence": None, "container": {"id": "c", "expires_at": None}},
            "usage": {"output_tokens": 30, "input_tokens": 40, "cache_creation_input_tokens": None},
            "context_management": {"applied_edits": []},
        },
        {"type": "message_stop"},
    ]
    body = ours(events)
    assert body["model"] == "claude-other"
    assert body["content"][0] == {"type": "text", "text": "Per the doc", "citations": [citation, citation]}
    assert body["usage"] == {"input_tokens": 40, "output_tokens": 30, "cache_read_input_tokens": 0}
    assert body == sdk_message(events)


def test_no_message_start_builds_nothing() -> None:
    """The SDK's stream passes events before ``message_start`` on; the model call then refuses the empty reply."""
    assert ours([{"type": "content_block_stop", "index": 0}, {"type": "message_stop"}]) == {}
