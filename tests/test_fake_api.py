"""Tests for agent_runner.testing, driven through the real anthropic client over HTTP."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx2
import pytest
from temporalio.testing import WorkflowEnvironment

from agent_runner.testing import (
    MESSAGE_THREADS_BETA,
    Disconnect,
    DropMidStream,
    ErrorMidStream,
    FakeMessagesAPI,
    Fault,
    Reply,
    SlowStream,
    ThreadNotFound,
    bad_request,
    end_turn,
    load_script,
    overloaded,
    parse_script,
    rate_limited,
    server_error,
    sse_events,
    text,
    thinking,
    tool_call,
    tool_use,
)

pytestmark = pytest.mark.timeout(60)

REPO_ROOT = Path(__file__).resolve().parent.parent
MODEL = "claude-test-model"
HI: list[Any] = [{"role": "user", "content": "hi"}]
THREADS: list[Any] = [MESSAGE_THREADS_BETA]
SEARCH_TOOL: Any = {
    "name": "search",
    "description": "Search the web.",
    "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}},
}


@pytest.fixture
def fake() -> Iterator[FakeMessagesAPI]:
    with FakeMessagesAPI() as server:
        yield server


@pytest.fixture
def client(fake: FakeMessagesAPI) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(base_url=fake.url, api_key="test-key", max_retries=0) as c:
        yield c


def post_raw(url: str, body: Any, path: str = "/v1/messages", method: str = "POST") -> tuple[int, dict[str, Any]]:
    """Send a request without the SDK, for bodies the SDK would refuse to build."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url + path, data=data, method=method, headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def invalid(message: str, **details: Any) -> dict[str, Any]:
    error: dict[str, Any] = {"type": "invalid_request_error", "message": message}
    if details:
        error["details"] = details
    return {"type": "error", "error": error}


# ---------------------------------------------------------------------------------------------
# Replies and recorded requests
# ---------------------------------------------------------------------------------------------


def test_reply_is_parsed_by_client_and_request_is_recorded(fake: FakeMessagesAPI, client: anthropic.Anthropic) -> None:
    fake.script(end_turn("Hello!"))

    message = client.messages.create(model=MODEL, max_tokens=64, system="Be brief.", messages=HI)

    assert message.to_dict() == {
        "id": "msg_fake_001",
        "type": "message",
        "role": "assistant",
        "model": MODEL,
        "content": [{"type": "text", "text": "Hello!"}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 5},
    }
    [request] = fake.requests
    assert (request.method, request.path) == ("POST", "/v1/messages")
    assert request.body == {"model": MODEL, "max_tokens": 64, "system": "Be brief.", "messages": HI}
    assert fake.bodies() == [request.body]
    # This SDK version sends the API key as a bearer token, not as x-api-key.
    assert request.headers["authorization"] == "Bearer test-key"
    assert request.headers["anthropic-version"] == client.default_headers["anthropic-version"]
    assert request.headers["content-type"] == "application/json"
    assert fake.pending == 0


def test_reply_fields_ids_and_reset(fake: FakeMessagesAPI, client: anthropic.Anthropic) -> None:
    container = {"id": "container_1", "expires_at": "2030-01-01T00:00:00Z"}
    fake.script(
        end_turn("one"),
        Reply(
            content=[text("two")],
            stop_reason="stop_sequence",
            stop_sequence="END",
            usage={"input_tokens": 7, "output_tokens": 3, "cache_read_input_tokens": 2},
            container=container,
            id="msg_custom",
            model="claude-other",
        ),
        end_turn("three"),
    )

    first = client.messages.create(model=MODEL, max_tokens=8, messages=HI)
    second = client.beta.messages.create(model=MODEL, max_tokens=8, messages=HI)
    third = client.messages.create(model=MODEL, max_tokens=8, messages=HI)

    assert [first.id, second.id, third.id] == ["msg_fake_001", "msg_custom", "msg_fake_003"]
    assert (second.model, second.stop_reason, second.stop_sequence) == ("claude-other", "stop_sequence", "END")
    assert second.usage.cache_read_input_tokens == 2
    assert second.container is not None and second.container.id == "container_1"

    fake.reset()
    assert fake.requests == [] and fake.pending == 0
    fake.script(end_turn("again"))
    assert client.messages.create(model=MODEL, max_tokens=8, messages=HI).id == "msg_fake_001"


def test_tool_use_ids_derive_from_reply_number(fake: FakeMessagesAPI, client: anthropic.Anthropic) -> None:
    fake.script(
        end_turn("thinking about it"),
        tool_call("search", {"q": "x"}, text="Let me look."),
        Reply(
            content=[tool_use(None, "a", {}), tool_use("toolu_explicit", "b", {"n": 1}), tool_use(None, "c", {})],
            stop_reason="tool_use",
        ),
    )

    client.messages.create(model=MODEL, max_tokens=8, messages=HI)
    second = client.messages.create(model=MODEL, max_tokens=8, messages=HI)
    third = client.messages.create(model=MODEL, max_tokens=8, messages=HI)

    assert second.stop_reason == "tool_use"
    assert [b.to_dict() for b in second.content] == [
        {"type": "text", "text": "Let me look."},
        {"type": "tool_use", "id": "toolu_fake_002_1", "name": "search", "input": {"q": "x"}},
    ]
    assert [b.id for b in third.content if b.type == "tool_use"] == [
        "toolu_fake_003_1",
        "toolu_explicit",
        "toolu_fake_003_3",
    ]


def test_responder_answers_when_queue_is_empty(fake: FakeMessagesAPI, client: anthropic.Anthropic) -> None:
    seen: list[dict[str, Any]] = []

    def respond(body: dict[str, Any]) -> Reply:
        seen.append(body)
        return end_turn(f"echo: {body['messages'][-1]['content']}")

    fake.script(end_turn("scripted first"))
    fake.responder = respond

    first = client.messages.create(model=MODEL, max_tokens=8, messages=HI)
    second = client.messages.create(model=MODEL, max_tokens=8, messages=[{"role": "user", "content": "ping"}])

    assert first.content[0].to_dict() == {"type": "text", "text": "scripted first"}
    assert second.content[0].to_dict() == {"type": "text", "text": "echo: ping"}
    assert seen == [{"model": MODEL, "max_tokens": 8, "messages": [{"role": "user", "content": "ping"}]}]


def test_empty_script_fails_loudly(client: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.InternalServerError) as info:
        client.messages.create(model=MODEL, max_tokens=8, messages=HI)

    assert info.value.status_code == 500
    assert info.value.api_message is not None
    assert info.value.api_message.startswith("fake Messages API: no scripted reply left for this request")
    assert "script more replies" in info.value.api_message


def test_script_rejects_non_items(fake: FakeMessagesAPI) -> None:
    with pytest.raises(TypeError, match="not a script item"):
        fake.script({"type": "text", "text": "oops"})  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------
# Faults and disconnects
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("item", "exc_class", "status", "error_type"),
    [
        (rate_limited(1.5), anthropic.RateLimitError, 429, "rate_limit_error"),
        (overloaded(), anthropic.OverloadedError, 529, "overloaded_error"),
        (server_error(), anthropic.InternalServerError, 500, "api_error"),
        (Fault(401), anthropic.AuthenticationError, 401, "authentication_error"),
        (Fault(403), anthropic.PermissionDeniedError, 403, "permission_error"),
        (Fault(413), anthropic.ContentTooLargeError, 413, "request_too_large"),
    ],
)
def test_fault_raises_matching_client_error(
    fake: FakeMessagesAPI,
    client: anthropic.Anthropic,
    item: Fault,
    exc_class: type[anthropic.APIStatusError],
    status: int,
    error_type: str,
) -> None:
    fake.script(item, end_turn("recovered"))

    with pytest.raises(exc_class) as info:
        client.messages.create(model=MODEL, max_tokens=8, messages=HI)

    assert type(info.value) is exc_class
    assert info.value.status_code == status
    assert info.value.type == error_type
    assert info.value.request_id == "req_fake_001"
    assert isinstance(info.value.body, dict) and info.value.body["type"] == "error"
    # The fault consumed only itself: the next request gets the next item.
    assert client.messages.create(model=MODEL, max_tokens=8, messages=HI).content[0].to_dict()["text"] == "recovered"


def test_rate_limited_sets_retry_after_and_overloaded_is_internal_server_error(
    fake: FakeMessagesAPI, client: anthropic.Anthropic
) -> None:
    fake.script(rate_limited(2), overloaded())

    with pytest.raises(anthropic.RateLimitError) as rate:
        client.messages.create(model=MODEL, max_tokens=8, messages=HI)
    with pytest.raises(anthropic.InternalServerError) as over:
        client.messages.create(model=MODEL, max_tokens=8, messages=HI)

    assert rate.value.response.headers["retry-after"] == "2"
    assert isinstance(over.value, anthropic.OverloadedError)
    assert over.value.body == {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}


def test_fault_with_custom_body_and_headers(fake: FakeMessagesAPI, client: anthropic.Anthropic) -> None:
    body = {"type": "error", "error": {"type": "api_error", "message": "custom"}}
    fake.script(Fault(503, body=body, headers={"x-should-retry": "false"}), bad_request("no good"))

    with pytest.raises(anthropic.ServiceUnavailableError) as unavailable:
        client.messages.create(model=MODEL, max_tokens=8, messages=HI)
    with pytest.raises(anthropic.BadRequestError) as bad:
        client.messages.create(model=MODEL, max_tokens=8, messages=HI)

    assert unavailable.value.body == body
    assert unavailable.value.response.headers["x-should-retry"] == "false"
    assert bad.value.body == invalid("no good")


def test_disconnect_is_a_connection_error_and_the_client_recovers(
    fake: FakeMessagesAPI, client: anthropic.Anthropic
) -> None:
    fake.script(Disconnect(), end_turn("after the disconnect"))

    with pytest.raises(anthropic.APIConnectionError):
        client.messages.create(model=MODEL, max_tokens=8, messages=HI)
    message = client.messages.create(model=MODEL, max_tokens=8, messages=HI)

    assert message.content[0].to_dict() == {"type": "text", "text": "after the disconnect"}
    assert len(fake.requests) == 2


def test_client_retries_through_faults(fake: FakeMessagesAPI) -> None:
    # Short retry-after values keep the SDK's backoff out of the test's run time.
    fast_overload = Fault(529, headers={"retry-after": "0.01"})
    fake.script(rate_limited(0.01), fast_overload, Disconnect(), end_turn("finally"))
    with anthropic.Anthropic(base_url=fake.url, api_key="test-key", max_retries=3) as retrying:
        message = retrying.with_options(timeout=5).messages.create(model=MODEL, max_tokens=8, messages=HI)

    assert message.content[0].to_dict() == {"type": "text", "text": "finally"}
    assert [r.headers["x-stainless-retry-count"] for r in fake.requests] == ["0", "1", "2", "3"]


def test_reply_delay_triggers_client_timeout(fake: FakeMessagesAPI, client: anthropic.Anthropic) -> None:
    fake.script(Reply([text("late")], delay=2.0))

    started = time.monotonic()
    with pytest.raises(anthropic.APITimeoutError):
        client.with_options(timeout=0.2).messages.create(model=MODEL, max_tokens=8, messages=HI)

    assert time.monotonic() - started < 1.5


# ---------------------------------------------------------------------------------------------
# Streaming
# ---------------------------------------------------------------------------------------------

RICH_REPLY = Reply(
    content=[
        thinking("First, consider the question carefully.", signature="sig_abc"),
        text("I will search for that now."),
        tool_use("toolu_stream", "search", {"q": "weather in Paris", "limit": 3}),
    ],
    stop_reason="tool_use",
    usage={"input_tokens": 42, "output_tokens": 17},
    id="msg_rich",
)


def test_stream_final_message_equals_non_streamed_reply(fake: FakeMessagesAPI, client: anthropic.Anthropic) -> None:
    fake.script(RICH_REPLY, RICH_REPLY)

    plain = client.beta.messages.create(model=MODEL, max_tokens=64, messages=HI)
    with client.beta.messages.stream(model=MODEL, max_tokens=64, messages=HI) as stream:
        streamed = stream.get_final_message()

    # The stream accumulator always sets `stop_details` (to None); the JSON reply leaves it out.
    assert streamed.stop_details is None
    assert {k: v for k, v in streamed.to_dict().items() if k != "stop_details"} == plain.to_dict()
    assert plain.to_dict()["content"] == RICH_REPLY.content
    assert fake.bodies()[1]["stream"] is True


def test_stream_events_follow_the_api_wire_format(fake: FakeMessagesAPI, client: anthropic.Anthropic) -> None:
    fake.script(end_turn("abcdefghi"))

    with client.messages.with_streaming_response.create(model=MODEL, max_tokens=8, messages=HI, stream=True) as raw:
        assert raw.headers["content-type"].startswith("text/event-stream")
        payload = b"".join(raw.iter_bytes()).decode()

    frames = [f for f in payload.split("\n\n") if f]
    assert all(f.startswith("event: ") and "\ndata: " in f for f in frames)
    events = [(f.split("\n")[0].removeprefix("event: "), json.loads(f.split("\ndata: ")[1])) for f in frames]
    assert [e for e, _ in events] == [
        "message_start",
        "ping",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert all(name == data["type"] for name, data in events)
    start = events[0][1]["message"]
    assert (start["content"], start["stop_reason"], start["usage"]["output_tokens"]) == ([], None, 1)
    assert events[2][1]["content_block"] == {"type": "text", "text": ""}
    assert "".join(d["delta"]["text"] for _, d in events[3:6]) == "abcdefghi"
    assert events[7][1] == {
        "type": "message_delta",
        "delta": {"stop_reason": "end_turn", "stop_sequence": None},
        "usage": {"input_tokens": 10, "output_tokens": 5},
    }


def test_tool_input_streams_as_json_deltas(fake: FakeMessagesAPI, client: anthropic.Anthropic) -> None:
    fake.script(tool_call("search", {"q": "x" * 20}, id="toolu_1"))

    stream = client.messages.create(model=MODEL, max_tokens=8, messages=HI, stream=True)
    events = list(stream)

    start = next(e for e in events if e.type == "content_block_start")
    assert start.content_block.to_dict() == {"type": "tool_use", "id": "toolu_1", "name": "search", "input": {}}
    partials = [
        e.delta.partial_json for e in events if e.type == "content_block_delta" and e.delta.type == "input_json_delta"
    ]
    assert len(partials) > 1
    assert "".join(partials) == json.dumps({"q": "x" * 20})


def test_closing_usage_is_the_message_deltas_and_the_message_start_keeps_the_rest(
    fake: FakeMessagesAPI, client: anthropic.Anthropic
) -> None:
    usage = {"input_tokens": 10, "output_tokens": 5, "cache_read_input_tokens": 7, "service_tier": "priority"}
    fake.script(Reply([text("hi")], usage=usage, closing_usage={"input_tokens": 12, "output_tokens": 6}))
    with client.beta.messages.stream(model=MODEL, max_tokens=8, messages=HI) as stream:
        events = list(stream)
        final = stream.get_final_message()
    start = next(e for e in events if e.type == "message_start")
    delta = next(e for e in events if e.type == "message_delta")
    assert start.message.usage.to_dict() == {**usage, "output_tokens": 1}
    assert delta.usage.to_dict() == {"input_tokens": 12, "output_tokens": 6}
    assert (final.usage.input_tokens, final.usage.output_tokens, final.usage.cache_read_input_tokens) == (12, 6, 7)


def test_slow_stream_spaces_events(fake: FakeMessagesAPI, client: anthropic.Anthropic) -> None:
    reply = end_turn("slow")
    gaps = len(sse_events(fake_message(reply))) - 1
    fake.script(SlowStream(reply, event_delay=0.03))

    started = time.monotonic()
    with client.messages.stream(model=MODEL, max_tokens=8, messages=HI) as stream:
        final = stream.get_final_message()

    assert time.monotonic() - started >= gaps * 0.03
    assert final.content[0].to_dict() == {"type": "text", "text": "slow"}


def fake_message(reply: Reply) -> dict[str, Any]:
    return {"content": reply.content, "usage": {"input_tokens": 1, "output_tokens": 1}}


def test_drop_mid_stream_raises_after_partial_events(fake: FakeMessagesAPI, client: anthropic.Anthropic) -> None:
    fake.script(DropMidStream(end_turn("abcdefghi"), after_events=4))

    received: list[str] = []
    # A connection closed mid-body escapes the SDK as the transport's own error, not APIConnectionError.
    with pytest.raises(httpx2.RemoteProtocolError):
        with client.messages.stream(model=MODEL, max_tokens=8, messages=HI) as stream:
            for event in stream:
                received.append(event.type)

    # Four SSE events (message_start, ping, content_block_start, one text delta); ping is not surfaced.
    assert received[:1] == ["message_start"]
    assert "message_stop" not in received
    assert "content_block_start" in received


def test_drop_mid_stream_with_a_delay_stalls_after_its_events_then_closes(
    fake: FakeMessagesAPI, client: anthropic.Anthropic
) -> None:
    fake.script(DropMidStream(end_turn("abcdefghi"), after_events=4, delay=1.0))

    received: list[tuple[str, float]] = []
    started = time.monotonic()
    with pytest.raises(httpx2.RemoteProtocolError):
        with client.messages.stream(model=MODEL, max_tokens=8, messages=HI) as stream:
            for event in stream:
                received.append((event.type, time.monotonic() - started))
    closed = time.monotonic() - started

    # The four events come at once (ping is not surfaced; the text delta also comes as the helper's `text`), and the
    # connection closes a second after the last.
    assert [kind for kind, _ in received] == ["message_start", "content_block_start", "content_block_delta", "text"]
    assert max(at for _, at in received) < 0.5
    assert closed >= 1.0


def test_drop_mid_stream_on_non_streaming_request_disconnects(
    fake: FakeMessagesAPI, client: anthropic.Anthropic
) -> None:
    fake.script(DropMidStream(end_turn("x"), after_events=2))

    with pytest.raises(anthropic.APIConnectionError):
        client.messages.create(model=MODEL, max_tokens=8, messages=HI)


def test_error_mid_stream_raises_api_status_error(fake: FakeMessagesAPI, client: anthropic.Anthropic) -> None:
    fake.script(ErrorMidStream(end_turn("abc"), after_events=3))

    with pytest.raises(anthropic.APIStatusError) as info:
        with client.messages.stream(model=MODEL, max_tokens=8, messages=HI) as stream:
            stream.get_final_message()

    # The HTTP status was already 200, so the SDK cannot pick OverloadedError.
    assert info.value.status_code == 200
    assert info.value.type == "overloaded_error"


# ---------------------------------------------------------------------------------------------
# Async client
# ---------------------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_async_client_create_stream_and_faults(fake: FakeMessagesAPI) -> None:
    fake.script(end_turn("async hello"), RICH_REPLY, overloaded(), Disconnect())
    async with anthropic.AsyncAnthropic(base_url=fake.url, api_key="test-key", max_retries=0) as client:
        message = await client.messages.create(model=MODEL, max_tokens=8, messages=HI)
        async with client.beta.messages.stream(model=MODEL, max_tokens=8, messages=HI) as stream:
            streamed = await stream.get_final_message()
        with pytest.raises(anthropic.OverloadedError):
            await client.messages.create(model=MODEL, max_tokens=8, messages=HI)
        with pytest.raises(anthropic.APIConnectionError):
            await client.messages.create(model=MODEL, max_tokens=8, messages=HI)

    assert message.content[0].to_dict() == {"type": "text", "text": "async hello"}
    assert streamed.to_dict()["content"] == RICH_REPLY.content
    assert fake.requests[0].headers["x-stainless-async"].startswith("async")


@pytest.mark.asyncio
async def test_async_concurrent_requests_each_get_a_reply(fake: FakeMessagesAPI) -> None:
    fake.responder = lambda body: Reply([text(body["messages"][0]["content"])], delay=0.2)
    async with anthropic.AsyncAnthropic(base_url=fake.url, api_key="test-key", max_retries=0) as client:
        started = time.monotonic()
        replies = await asyncio.gather(
            *(
                client.messages.create(model=MODEL, max_tokens=8, messages=[{"role": "user", "content": f"q{i}"}])
                for i in range(5)
            )
        )
        elapsed = time.monotonic() - started

    assert sorted(str(r.content[0].to_dict()["text"]) for r in replies) == [f"q{i}" for i in range(5)]
    assert sorted(r.id for r in replies) == [f"msg_fake_{i:03d}" for i in range(1, 6)]
    assert elapsed < 0.9  # served concurrently, not one after another


# ---------------------------------------------------------------------------------------------
# Validation
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"max_tokens": 8, "messages": HI}, "model: Field required"),
        ({"model": MODEL, "messages": HI}, "max_tokens: Field required"),
        ({"model": MODEL, "max_tokens": 8}, "messages: Field required"),
        ({"model": MODEL, "max_tokens": 8, "messages": []}, "messages: at least one message is required"),
        (
            {"model": MODEL, "max_tokens": 8, "messages": [{"role": "bot", "content": "x"}]},
            "messages.0.role: Input should be 'user', 'assistant' or 'system'",
        ),
    ],
)
def test_invalid_request_is_rejected_recorded_and_consumes_nothing(
    fake: FakeMessagesAPI, body: dict[str, Any], message: str
) -> None:
    fake.script(end_turn("kept"))

    status, response = post_raw(fake.url, body)

    assert (status, response) == (400, invalid(message))
    assert fake.bodies() == [body]
    assert fake.pending == 1


def test_unknown_path_and_bad_json(fake: FakeMessagesAPI) -> None:
    status, body = post_raw(fake.url, None, path="/v1/models", method="GET")
    assert status == 404
    assert body["error"]["type"] == "not_found_error"

    request = urllib.request.Request(fake.url + "/v1/messages", data=b"{nope", method="POST")
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(request, timeout=10)
    assert info.value.code == 400
    assert [(r.method, r.path, r.body) for r in fake.requests] == [
        ("GET", "/v1/models", {}),
        ("POST", "/v1/messages", {}),
    ]


def tool_turns(result_id: str) -> list[Any]:
    return [
        {"role": "user", "content": "find x"},
        {"role": "assistant", "content": [tool_use("toolu_a", "search", {"q": "x"})]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": result_id, "content": "found"}]},
    ]


def test_tool_result_must_match_preceding_tool_use(fake: FakeMessagesAPI, client: anthropic.Anthropic) -> None:
    fake.script(end_turn("ok"))

    with pytest.raises(anthropic.BadRequestError) as info:
        client.messages.create(model=MODEL, max_tokens=8, messages=tool_turns("toolu_wrong"))

    assert info.value.body == invalid(
        "messages.2: unexpected `tool_use_id` found in `tool_result` blocks: toolu_wrong. "
        "Each `tool_result` block must have a corresponding `tool_use` block in the previous message."
    )
    assert fake.pending == 1
    assert client.messages.create(model=MODEL, max_tokens=8, messages=tool_turns("toolu_a")).id == "msg_fake_001"


def test_tool_use_needs_tool_result_but_consecutive_user_messages_merge(
    fake: FakeMessagesAPI, client: anthropic.Anthropic
) -> None:
    fake.script(end_turn("ok"))
    unanswered: list[Any] = [*tool_turns("toolu_a")[:2], {"role": "user", "content": "never mind"}]
    split: list[Any] = [
        *tool_turns("toolu_a"),
        {"role": "user", "content": [{"type": "text", "text": "and also"}]},
    ]
    split[2], split[3] = split[3], split[2]  # text first, then the tool_result in a second user message

    with pytest.raises(anthropic.BadRequestError) as info:
        client.messages.create(model=MODEL, max_tokens=8, messages=unanswered)
    message = client.messages.create(model=MODEL, max_tokens=8, messages=split)

    assert info.value.api_message == (
        "messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: toolu_a. "
        "Each `tool_use` block must have a corresponding `tool_result` block in the next message."
    )
    assert message.id == "msg_fake_001"


# ---------------------------------------------------------------------------------------------
# Server-side threads
# ---------------------------------------------------------------------------------------------


def test_thread_create_and_continue_reconstruct_the_full_conversation(
    fake: FakeMessagesAPI, client: anthropic.Anthropic
) -> None:
    fake.script(tool_call("search", {"q": "x"}), end_turn("Found it."), end_turn("Bye."))

    first = client.beta.messages.create(
        model=MODEL,
        max_tokens=8,
        system="Be brief.",
        tools=[SEARCH_TOOL],
        messages=[{"role": "user", "content": "find x"}],
        thread={"type": "create"},
        betas=THREADS,
    )
    result: Any = {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "toolu_fake_001_1", "content": "x!"}],
    }
    second = client.beta.messages.create(
        model=MODEL,
        max_tokens=8,
        messages=[result],
        thread={"type": "continue", "previous_message_id": first.id},
        betas=THREADS,
    )
    third = client.beta.messages.create(
        model=MODEL,
        max_tokens=8,
        messages=[{"role": "user", "content": "thanks"}],
        thread={"type": "continue", "previous_message_id": second.id},
        betas=THREADS,
    )

    expected = [
        {"role": "user", "content": "find x"},
        {"role": "assistant", "content": [tool_use("toolu_fake_001_1", "search", {"q": "x"})]},
        result,
        {"role": "assistant", "content": [text("Found it.")]},
        {"role": "user", "content": "thanks"},
        {"role": "assistant", "content": [text("Bye.")]},
    ]
    assert fake.thread_messages(third.id) == expected
    assert fake.thread_messages(second.id) == expected[:4]
    assert fake.thread_messages(first.id) == expected[:2]
    assert [b["messages"] for b in fake.bodies()] == [[expected[0]], [result], [expected[4]]]
    assert all(MESSAGE_THREADS_BETA in r.headers["anthropic-beta"] for r in fake.requests)


def thread_create(client: anthropic.Anthropic) -> str:
    return client.beta.messages.create(
        model=MODEL, max_tokens=8, messages=HI, thread={"type": "create"}, betas=THREADS
    ).id


def thread_continue(client: anthropic.Anthropic, previous: str, **kw: Any) -> anthropic.types.beta.BetaMessage:
    kw.setdefault("messages", [{"role": "user", "content": "more"}])
    message: anthropic.types.beta.BetaMessage = client.beta.messages.create(
        model=MODEL,
        max_tokens=8,
        thread={"type": "continue", "previous_message_id": previous},
        betas=THREADS,
        **kw,
    )
    return message


def test_thread_errors(fake: FakeMessagesAPI, client: anthropic.Anthropic) -> None:
    fake.script(end_turn("a"), end_turn("b"), end_turn("c"))
    first = thread_create(client)
    second = thread_continue(client, first).id

    with pytest.raises(anthropic.NotFoundError) as unknown:
        thread_continue(client, "msg_unknown")
    with pytest.raises(anthropic.BadRequestError) as already:
        thread_continue(client, first)
    with pytest.raises(anthropic.BadRequestError) as with_system:
        thread_continue(client, second, system="new system")
    with pytest.raises(anthropic.BadRequestError) as with_tools:
        thread_continue(client, second, tools=[SEARCH_TOOL])

    assert isinstance(unknown.value, anthropic.types.ThreadNotFoundError)
    assert unknown.value.status_code == 404
    assert unknown.value.body == {
        "type": "error",
        "error": {
            "type": "not_found_error",
            "message": "thread not found",
            "details": {"error_code": "thread_not_found"},
        },
    }
    assert isinstance(already.value, anthropic.types.ThreadAlreadyContinuedError)
    assert already.value.error_code == "thread_already_continued"
    assert with_system.value.api_message is not None and with_system.value.api_message.startswith("system: not allowed")
    assert with_tools.value.api_message is not None and with_tools.value.api_message.startswith("tools: not allowed")
    # None of the rejected requests consumed the scripted reply.
    assert fake.pending == 1
    assert thread_continue(client, second).id == "msg_fake_003"


def test_forget_threads_and_scripted_thread_not_found(fake: FakeMessagesAPI, client: anthropic.Anthropic) -> None:
    fake.script(end_turn("a"), ThreadNotFound(), end_turn("b"))
    first = thread_create(client)

    with pytest.raises(anthropic.NotFoundError) as scripted:
        thread_continue(client, first)
    assert scripted.value.error_code == "thread_not_found"
    # The scripted 404 did not advance the thread, so continuing from `first` still works.
    assert thread_continue(client, first).id == "msg_fake_002"

    fake.forget_threads()
    with pytest.raises(anthropic.NotFoundError):
        thread_continue(client, "msg_fake_002")
    with pytest.raises(KeyError):
        fake.thread_messages("msg_fake_002")


def test_thread_requires_beta_header_and_allows_empty_continue(
    fake: FakeMessagesAPI, client: anthropic.Anthropic
) -> None:
    fake.script(Reply([text("working")], stop_reason="pause_turn"), end_turn("done"))

    with pytest.raises(anthropic.BadRequestError) as no_beta:
        client.beta.messages.create(model=MODEL, max_tokens=8, messages=HI, thread={"type": "create"})
    first = thread_create(client)
    resumed = thread_continue(client, first, messages=[])

    assert no_beta.value.api_message == f"thread: requires the `anthropic-beta: {MESSAGE_THREADS_BETA}` header"
    assert resumed.content[0].to_dict() == {"type": "text", "text": "done"}
    assert fake.thread_messages(resumed.id) == [
        *HI,
        {"role": "assistant", "content": [text("working")]},
        {"role": "assistant", "content": [text("done")]},
    ]


def test_continue_checks_tool_results_against_the_stored_thread(
    fake: FakeMessagesAPI, client: anthropic.Anthropic
) -> None:
    fake.script(tool_call("search", {"q": "x"}), end_turn("ok"))
    first = client.beta.messages.create(
        model=MODEL, max_tokens=8, messages=HI, tools=[SEARCH_TOOL], thread={"type": "create"}, betas=THREADS
    )

    def result(tool_use_id: str) -> list[Any]:
        return [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": tool_use_id, "content": "r"}]}]

    with pytest.raises(anthropic.BadRequestError) as info:
        thread_continue(client, first.id, messages=result("toolu_other"))
    assert info.value.api_message is not None
    assert info.value.api_message.startswith("messages.0: unexpected `tool_use_id`")
    assert thread_continue(client, first.id, messages=result("toolu_fake_001_1")).id == "msg_fake_002"


def test_dropped_stream_does_not_advance_the_thread(fake: FakeMessagesAPI, client: anthropic.Anthropic) -> None:
    fake.script(end_turn("a"), DropMidStream(end_turn("partial"), after_events=3), end_turn("b"))
    first = thread_create(client)

    with pytest.raises(httpx2.RemoteProtocolError):
        with client.beta.messages.stream(
            model=MODEL,
            max_tokens=8,
            messages=[{"role": "user", "content": "more"}],
            thread={"type": "continue", "previous_message_id": first},
            betas=THREADS,
        ) as stream:
            stream.get_final_message()

    assert thread_continue(client, first).id == "msg_fake_003"


def test_sdk_thread_helper_recovers_from_lost_threads(fake: FakeMessagesAPI, client: anthropic.Anthropic) -> None:
    fake.script(tool_call("search", {"q": "x"}), end_turn("Found."), ThreadNotFound(), end_turn("Replayed."))
    thread = client.beta.messages.thread(model=MODEL, max_tokens=8, system="Be brief.", tools=[SEARCH_TOOL])

    first = thread.send({"role": "user", "content": "find x"})
    tool_result: Any = {"type": "tool_result", "tool_use_id": "toolu_fake_001_1", "content": "x!"}
    thread.send({"role": "user", "content": [tool_result]})
    last = thread.send({"role": "user", "content": "again"})

    bodies = fake.bodies()
    assert [b["thread"] for b in bodies] == [
        {"type": "create"},
        {"type": "continue", "previous_message_id": first.id},
        {"type": "continue", "previous_message_id": "msg_fake_002"},
        {"type": "create"},  # the SDK replays the whole conversation after thread_not_found
    ]
    assert "system" not in bodies[1] and "tools" not in bodies[1]
    assert bodies[3]["system"] == "Be brief." and len(bodies[3]["messages"]) == 5
    assert [m["role"] for m in fake.thread_messages(last.id)] == ["user", "assistant"] * 3


# ---------------------------------------------------------------------------------------------
# Script files and CLI
# ---------------------------------------------------------------------------------------------

SCRIPT = [
    {"reply": {"content": [{"type": "text", "text": "from script"}], "usage": {"input_tokens": 1, "output_tokens": 2}}},
    {"end_turn": "short"},
    {"end_turn": {"text": "with id", "id": "msg_x"}},
    {"tool_call": {"name": "search", "input": {"q": "x"}, "text": "Looking."}},
    {"fault": {"status": 529}},
    {"rate_limited": {"retry_after": 3}},
    {"overloaded": {}},
    {"server_error": {}},
    {"bad_request": {"message": "nope"}},
    {"disconnect": {}},
    {"thread_not_found": {}},
    {"slow_stream": {"reply": {"content": [{"type": "text", "text": "s"}]}, "event_delay": 0.1}},
    {"drop_mid_stream": {"reply": {"content": []}, "after_events": 2}},
    {"error_mid_stream": {"reply": {"content": []}, "after_events": 1}},
]


def test_parse_script_builds_every_kind() -> None:
    items = parse_script(SCRIPT)

    assert items == [
        Reply([text("from script")], usage={"input_tokens": 1, "output_tokens": 2}),
        end_turn("short"),
        end_turn("with id", id="msg_x"),
        tool_call("search", {"q": "x"}, text="Looking."),
        Fault(529),
        rate_limited(3),
        overloaded(),
        server_error(),
        bad_request("nope"),
        Disconnect(),
        ThreadNotFound(),
        SlowStream(Reply([text("s")]), event_delay=0.1),
        DropMidStream(Reply([]), after_events=2),
        ErrorMidStream(Reply([]), after_events=1),
    ]
    with pytest.raises(ValueError, match="unknown script item kind"):
        parse_script([{"explode": {}}])
    with pytest.raises(ValueError, match="unknown field"):
        parse_script([{"reply": {"content": [], "colour": "red"}}])


def test_load_script_and_from_script_file(tmp_path: Path) -> None:
    path = tmp_path / "script.json"
    path.write_text(json.dumps(SCRIPT[:2]))

    assert load_script(path) == [
        Reply([text("from script")], usage={"input_tokens": 1, "output_tokens": 2}),
        end_turn("short"),
    ]
    with FakeMessagesAPI.from_script_file(path) as fake:
        assert fake.pending == 2
        with anthropic.Anthropic(base_url=fake.url, api_key="test-key", max_retries=0) as client:
            assert client.messages.create(model=MODEL, max_tokens=8, messages=HI).usage.output_tokens == 2


def test_cli_serves_a_script_until_terminated(tmp_path: Path) -> None:
    path = tmp_path / "script.json"
    path.write_text(json.dumps([{"end_turn": "from the CLI"}]))
    command = [sys.executable, "-m", "agent_runner.testing", "--port", "0", "--script", str(path)]
    with subprocess.Popen(command, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as process:
        try:
            assert process.stdout is not None and process.stderr is not None
            line = process.stdout.readline().strip()
            assert line.startswith("READY http://127.0.0.1:"), process.stderr.read()
            url = line.removeprefix("READY ")
            with anthropic.Anthropic(base_url=url, api_key="test-key", max_retries=0) as client:
                message = client.messages.create(model=MODEL, max_tokens=8, messages=HI)
            assert message.content[0].to_dict() == {"type": "text", "text": "from the CLI"}
        finally:
            process.terminate()
            returncode = process.wait(timeout=10)
    assert returncode == 0


def test_wait_for_requests_and_stop_is_idempotent() -> None:
    fake = FakeMessagesAPI().start()
    try:
        fake.script(end_turn("x"))
        with pytest.raises(TimeoutError):
            fake.wait_for_requests(1, timeout=0.05)
        with anthropic.Anthropic(base_url=fake.url, api_key="test-key", max_retries=0) as client:
            client.messages.create(model=MODEL, max_tokens=8, messages=HI)
        assert len(fake.wait_for_requests(1, timeout=1)) == 1
    finally:
        fake.stop()
    fake.stop()
    with pytest.raises(RuntimeError):
        _ = fake.url


# ------------------------------------------------------------------------------------------ the README's example

REPO = Path(__file__).resolve().parents[1]


def readme_testing_example() -> str:
    """The README's Python block that opens with ``# tests/test_my_agent.py``."""
    blocks = re.findall(r"^```python\n(.*?)^```$", (REPO / "README.md").read_text(), re.S | re.M)
    [example] = [block for block in blocks if block.startswith("# tests/test_my_agent.py\n")]
    return str(example)


@pytest.mark.slow
def test_the_readme_example_of_testing_your_own_agent_passes(
    temporal_env: WorkflowEnvironment, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Run as a user would: its own pytest session in its own folder, on the session's Temporal server.
    (tmp_path / "test_my_agent.py").write_text(readme_testing_example())
    monkeypatch.setenv("TEMPORAL_ADDRESS", temporal_env.client.service_client.config.target_host)
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "asyncio_mode=auto"]
    done = subprocess.run(
        [*command, "--rootdir", str(tmp_path), str(tmp_path / "test_my_agent.py")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout
