"""Test your own agents and tools without Claude: a wire-compatible fake of Anthropic's Messages API.

:class:`FakeMessagesAPI` serves ``POST /v1/messages`` over real HTTP on ``127.0.0.1``, so the real ``anthropic``
client (and a worker built on it) talks to it through ``base_url=fake.url``: request serialisation, headers,
retries, error classes built from status codes, SSE parsing and stream accumulation all run as in production. Nothing
is mocked. It answers from a FIFO script that the test writes:

* replies: :func:`end_turn` (one text block), :func:`tool_call` (one ``tool_use`` block), or a whole :class:`Reply`
  built from :func:`text`, :func:`tool_use` and :func:`thinking` blocks; a request with ``"stream": true`` gets the
  reply as the SSE events the real API sends (:func:`sse_events`);
* HTTP faults with Anthropic's error body: :func:`rate_limited`, :func:`overloaded`, :func:`server_error`,
  :func:`bad_request`, or any :class:`Fault`; :class:`Disconnect` closes the connection without an answer;
* broken streams: :class:`SlowStream`, :class:`DropMidStream`, :class:`ErrorMidStream`;
* server-side message threads (the ``message-threads-2026-08-12`` beta): the fake keeps each thread's conversation
  (:meth:`FakeMessagesAPI.thread_messages`), and :class:`ThreadNotFound` / :class:`ThreadUnsupported` answer as the
  real API does when it lost a thread or cannot thread a request.

When the script runs out, :attr:`FakeMessagesAPI.responder` (``fn(request_body) -> item``) answers, if set; else the
request gets a 500 saying that the script ran out. Every request is recorded (:attr:`FakeMessagesAPI.requests`,
:meth:`FakeMessagesAPI.bodies`), so a test asserts on exactly what Claude would have been sent. Requests are
validated as the real API does (missing fields, ``tool_result`` blocks without their ``tool_use``).

Example, a pytest test of an agent (the README's "Test your own agents" runs the same; pytest-asyncio's
``asyncio_mode = "auto"``, and Temporal as ``AgentRunner.connect()`` finds it)::

    import uuid

    import anthropic
    import pytest

    from agent_runner.activities.claude import ClaudeActivities
    from agent_runner.client import AgentRunner
    from agent_runner.testing import FakeMessagesAPI, end_turn, tool_call
    from agent_runner.worker import build_registry, build_worker

    @pytest.fixture
    def fake():
        with FakeMessagesAPI() as fake:
            yield fake

    async def test_the_agent_looks_the_weather_up(fake):
        fake.script(tool_call("get_weather", {"city": "Paris"}), end_turn("Sunny in Paris."))
        runner = await AgentRunner.connect(task_queue=f"test-{uuid.uuid4()}")
        claude = ClaudeActivities(lambda: anthropic.AsyncAnthropic(base_url=fake.url, api_key="test", max_retries=0))
        registry = build_registry(["my_pkg.tools"])
        async with build_worker(runner.client, registry=registry, task_queue=runner.task_queue, claude=claude):
            run = await runner.start(model="claude-sonnet-5-5", max_tokens=1024, tools=["get_weather"],
                                     messages=[{"role": "user", "content": "Weather in Paris?"}])
            final = await run.until_done()
        assert final.content[0].text == "Sunny in Paris."
        assert fake.bodies()[1]["messages"][-1]["content"] == [
            {"type": "tool_result", "tool_use_id": "toolu_fake_001_1", "content": "sunny, 21C in Paris"}
        ]

Ids are deterministic, so scripts and assertions are reproducible: the n-th reply served since start or
:meth:`FakeMessagesAPI.reset` gets ``id`` ``msg_fake_{n:03d}`` and, when a ``tool_use`` block has no ``id``, the k-th
``tool_use`` block of that reply (1-based) gets ``toolu_fake_{n:03d}_{k}``. Every response carries a ``request-id``
header ``req_fake_{m:03d}`` where m counts requests received. A reply whose ``usage.iterations`` has a
``fallback_message`` entry (a fallback model served it) is not stored on its thread, as the real API stores no turn
a fallback model wrote.

The server runs in a background thread with its own event loop, so it serves sync clients, async clients in the
caller's loop, and other processes alike. For subprocesses there is a command::

    python -m agent_runner.testing --port 8765 --script script.json

which prints ``READY http://127.0.0.1:8765`` once listening (see :func:`parse_script` for the file's format).

This package imports nothing else of ``agent_runner``, and nothing of it imports this package except the commands
that serve a fake (``agent-runner demo`` and ``dev``): it costs nothing unless a test or one of those loads it.
"""

from agent_runner.testing.replies import (
    ERROR_TYPES,
    MESSAGE_THREADS_BETA,
    Disconnect,
    DropMidStream,
    ErrorMidStream,
    Fault,
    RecordedRequest,
    Reply,
    Responder,
    ScriptItem,
    SlowStream,
    ThreadNotFound,
    ThreadUnsupported,
    bad_request,
    end_turn,
    error_body,
    overloaded,
    rate_limited,
    server_error,
    text,
    thinking,
    tool_call,
    tool_use,
)
from agent_runner.testing.scripts import load_script, main, parse_script
from agent_runner.testing.server import FakeMessagesAPI, sse_events

__all__ = [
    "ERROR_TYPES",
    "MESSAGE_THREADS_BETA",
    "Disconnect",
    "DropMidStream",
    "ErrorMidStream",
    "FakeMessagesAPI",
    "Fault",
    "RecordedRequest",
    "Reply",
    "Responder",
    "ScriptItem",
    "SlowStream",
    "ThreadNotFound",
    "ThreadUnsupported",
    "bad_request",
    "end_turn",
    "error_body",
    "load_script",
    "main",
    "overloaded",
    "parse_script",
    "rate_limited",
    "server_error",
    "sse_events",
    "text",
    "thinking",
    "tool_call",
    "tool_use",
]
