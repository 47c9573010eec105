"""The streamed model call: failures mid-stream are retried or fail the run as the API's error says."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agent_runner.client import AgentRunner
from agent_runner.contract.errors import ModelRequestRejected
from agent_runner.testing import DropMidStream, ErrorMidStream, FakeMessagesAPI, end_turn
from tests.conftest import WorkerFactory

BASE: dict[str, Any] = {"model": "claude-fake-1", "max_tokens": 1024}
USER = {"role": "user", "content": "Hi"}
FAST_RETRY = {"initial_interval": "PT0.05S", "maximum_interval": "PT0.1S"}
REPLY = end_turn("Hello, how can I help?")
EXPECTED_BODY = {**BASE, "messages": [USER], "thread": {"type": "create"}, "tools": [], "stream": True}


async def test_a_stream_dropped_mid_way_is_retried_and_the_run_gets_the_whole_reply(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    fake_api.script(DropMidStream(REPLY, 5), REPLY)
    async with worker():
        run = await runner.start(**BASE, messages=[USER], model_activity=FAST_RETRY)
        result = await asyncio.wait_for(run.result(), 30)
    assert result.status == "completed"
    assert result.final_message == {
        "id": "msg_fake_002",
        "type": "message",
        "role": "assistant",
        "model": "claude-fake-1",
        "content": [{"type": "text", "text": "Hello, how can I help?"}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 5},
    }
    assert fake_api.bodies() == [EXPECTED_BODY, EXPECTED_BODY]


@pytest.mark.parametrize("error_type", ["overloaded_error", "api_error", "rate_limit_error"])
async def test_a_retryable_sse_error_event_is_retried(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, error_type: str
) -> None:
    fake_api.script(ErrorMidStream(REPLY, 4, error_type=error_type), REPLY)
    async with worker():
        run = await runner.start(**BASE, messages=[USER], model_activity=FAST_RETRY)
        final = await asyncio.wait_for(run.until_done(), 30)
    assert final.content[0].text == "Hello, how can I help?"  # type: ignore[union-attr]
    assert len(fake_api.bodies()) == 2


async def test_a_non_retryable_error_mid_stream_fails_the_run_with_the_apis_words(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    fake_api.script(ErrorMidStream(REPLY, 4, error_type="invalid_request_error", message="prompt is too long"))
    async with worker():
        run = await runner.start(**BASE, messages=[USER], model_activity=FAST_RETRY)
        with pytest.raises(ModelRequestRejected) as raised:
            await asyncio.wait_for(run.result(), 30)
    assert str(raised.value) == (
        "Claude's API failed mid-stream: invalid_request_error: prompt is too long. Fix the run's input and start "
        "the run again."
    )
    assert len(fake_api.bodies()) == 1
