"""Failures stay small enough for Temporal to keep them, so `status` says why a call is being retried.

The server keeps an activity's last failure only under a few KB; a bigger one is replaced by "Failure exceeds size
limit". A stream cut off mid-reply fails with httpx's exception chain, each with its stack trace: over that limit.
"""

from __future__ import annotations

import asyncio

import temporalio.api.failure.v1
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.exceptions import ApplicationError

from agent_runner.client import AgentRunner
from agent_runner.connection import BoundedFailureConverter, BoundedFailureConverterWithEncodedAttributes
from agent_runner.testing import DropMidStream, FakeMessagesAPI, end_turn
from tests.conftest import WorkerFactory

BASE = {"model": "claude-fake-1", "max_tokens": 100, "messages": [{"role": "user", "content": "Hi"}]}


def deep(n: int, error: BaseException) -> None:
    if n:
        deep(n - 1, error)
    raise error


def chained_error() -> ApplicationError:
    """An ApplicationError whose cause chain is four exceptions deep, each with a long message and stack."""
    try:
        try:
            try:
                try:
                    deep(60, RuntimeError("innermost " + "x" * 5000))
                except RuntimeError as e:
                    try:
                        deep(60, OSError("transport " + "y" * 5000))
                    except OSError as transport:
                        raise transport from e
            except OSError as e:
                raise ConnectionError("connection " + "z" * 5000) from e
        except ConnectionError as e:
            raise ApplicationError("The stream was cut off; retrying. " + "w" * 3000, type="ReadError") from e
    except ApplicationError as e:
        return e


def test_a_long_failure_chain_is_bounded_and_says_where_it_was_cut() -> None:
    failure = temporalio.api.failure.v1.Failure()
    BoundedFailureConverter().to_failure(chained_error(), pydantic_data_converter.payload_converter, failure)
    assert failure.ByteSize() < 3500
    assert failure.message == "The stream was cut off; retrying. " + "w" * 966 + "... [2034 more characters]"
    assert failure.application_failure_info.type == "ReadError"
    assert "chained_error" in failure.stack_trace and len(failure.stack_trace) <= 800
    first, second = failure.cause, failure.cause.cause
    assert first.message == "connection " + "z" * 289 + "... [4711 more characters]"
    assert second.message == "transport " + "y" * 290 + "... [4710 more characters] (its causes are left out)"
    assert not second.HasField("cause")
    # The deep one keeps its innermost frames (where it was raised), and says how much of the rest is left out.
    assert second.stack_trace.startswith("[") and "characters of outer frames left out]\n" in second.stack_trace
    assert second.stack_trace.endswith("raise error\n") and len(second.stack_trace.split("]\n", 1)[1]) == 200


def test_encoded_attributes_hold_the_bounded_message_of_each_failure() -> None:
    failure = temporalio.api.failure.v1.Failure()
    converter = pydantic_data_converter.payload_converter
    BoundedFailureConverterWithEncodedAttributes().to_failure(chained_error(), converter, failure)
    assert (failure.message, failure.stack_trace) == ("Encoded failure", "")
    top = converter.from_payloads([failure.encoded_attributes])[0]
    cause = converter.from_payloads([failure.cause.encoded_attributes])[0]
    assert top["message"].startswith("The stream was cut off; retrying. www")
    assert cause["message"].startswith("connection zzz") and cause["message"].endswith("[4711 more characters]")
    assert failure.cause.message == "Encoded failure"


async def test_status_says_why_a_cut_off_stream_is_retried(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    reply = end_turn("Hello there, this reply is cut off.")
    fake_api.script(DropMidStream(reply, 5), DropMidStream(reply, 5), reply)
    async with worker():
        run = await runner.start(**BASE, model_activity={"initial_interval": "PT1S", "maximum_interval": "PT1S"})
        async with asyncio.timeout(20):
            while (status := await run.status()).last_error is None:
                await asyncio.sleep(0.05)
        final = await run.until_done()
    assert status.last_error is not None
    assert status.last_error.startswith("agent_runner.create_message (attempt ")
    assert "exceeds size limit" not in status.last_error
    assert "the reply's stream was cut off" in status.last_error
    assert final.content[0].type == "text" and final.content[0].text == "Hello there, this reply is cut off."
