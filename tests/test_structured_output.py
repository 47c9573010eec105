"""Structured output, as the SDK's runner does it: ``output_format`` in Python, ``output_config`` in plain JSON.

The SDK's ``tool_runner(output_format=Model)`` sends the model's JSON schema as ``output_config.format`` on every
request and returns replies as ``ParsedBetaMessage`` with ``parsed_output``. A durable run started with the same
``output_format`` must send identical request bodies and give back the same parsed output.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import anthropic
import pydantic
import pytest
from anthropic.types.beta.parsed_beta_message import ParsedBetaMessage

from agent_runner.client import AgentRunner
from agent_runner.contract.errors import InvalidRunInput
from agent_runner.testing import FakeMessagesAPI, Reply, end_turn, text, tool_use
from tests.conftest import WorkerFactory
from tests.tools_for_tests import get_weather


class Forecast(pydantic.BaseModel):
    city: str
    temperature_c: int
    summary: str


ANSWER = {"city": "Paris", "temperature_c": 21, "summary": "Sunny"}
PARAMS: dict[str, Any] = {
    "model": "claude-fake-1",
    "max_tokens": 1024,
    "messages": [{"role": "user", "content": "Forecast for Paris, as JSON."}],
}


def script() -> list[Reply]:
    return [
        Reply([tool_use("toolu_S1", "get_weather", {"city": "Paris"})], "tool_use"),
        end_turn(json.dumps(ANSWER)),
    ]


def sdk_run(fake: FakeMessagesAPI, thread: bool) -> tuple[list[dict[str, Any]], Any]:
    fake.reset()
    fake.script(*script())
    client = anthropic.Anthropic(base_url=fake.url, api_key="test-key", max_retries=0)
    runner = client.beta.messages.tool_runner(
        **PARAMS, tools=[get_weather], output_format=Forecast, stream=True, **({} if thread else {"thread": False})
    )
    final = runner.until_done()
    return fake.bodies(), final.parsed_output


@pytest.mark.parametrize("thread", [True, False], ids=["thread", "full_history"])
async def test_output_format_sends_and_parses_as_the_sdk_runner(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, thread: bool
) -> None:
    expected_bodies, expected_output = await asyncio.to_thread(sdk_run, fake_api, thread)
    fake_api.reset()
    fake_api.script(*script())
    async with worker(get_weather):
        run = await runner.start(**PARAMS, tools=[get_weather], output_format=Forecast, thread=thread)
        final = await run.until_done()
        replies = [reply async for reply in runner.attach(run.id, output_format=Forecast).messages()]
    assert fake_api.bodies() == expected_bodies
    schema_sent = expected_bodies[0]["output_config"]["format"]
    assert schema_sent["type"] == "json_schema" and schema_sent["schema"]["required"] == [
        "city",
        "temperature_c",
        "summary",
    ]
    assert all(body["output_config"] == {"format": schema_sent} for body in expected_bodies)
    assert isinstance(final, ParsedBetaMessage)
    assert final.parsed_output == expected_output == Forecast(**ANSWER)
    assert [isinstance(r, ParsedBetaMessage) for r in replies] == [True, True]
    assert replies[-1].parsed_output == Forecast(**ANSWER)  # type: ignore[attr-defined]


async def test_plain_json_output_config_reaches_claude_unchanged(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """From plain JSON (the stock CLI, another language) the schema goes in ``output_config``, as the API takes it."""
    output_config = {"effort": "low", "format": {"type": "json_schema", "schema": Forecast.model_json_schema()}}
    fake_api.script(end_turn(json.dumps(ANSWER)))
    async with worker():
        run = await runner.start(**PARAMS, output_config=output_config, thread=False)
        plain = await run.until_done()
    # A run without tools sends an empty list, as the SDK's runner given `tools=[]`.
    assert fake_api.bodies() == [{**PARAMS, "output_config": output_config, "tools": [], "stream": True}]
    # A handle without an output format gives the reply as the API sent it.
    assert not isinstance(plain, ParsedBetaMessage)
    assert plain.content[0].type == "text" and json.loads(plain.content[0].text) == ANSWER


async def test_output_format_merges_into_other_output_config_fields(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    fake_api.script(end_turn(json.dumps(ANSWER)))
    async with worker():
        run = await runner.start(**PARAMS, output_config={"effort": "low"}, output_format=Forecast)
        final = await run.until_done()
    [body] = fake_api.bodies()
    assert body["output_config"]["effort"] == "low"
    assert body["output_config"]["format"]["type"] == "json_schema"
    assert final.parsed_output == Forecast(**ANSWER)  # type: ignore[attr-defined]


async def test_output_format_and_output_config_format_together_are_refused(runner: AgentRunner) -> None:
    with pytest.raises(InvalidRunInput, match="Both output_format and output_config.format were provided"):
        await runner.start(
            **PARAMS, output_format=Forecast, output_config={"format": {"type": "json_schema", "schema": {}}}
        )


async def test_a_reply_that_does_not_parse_raises_as_in_the_sdk(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    fake_api.script(Reply([text('{"city": "Paris"}')], "end_turn"))
    async with worker():
        run = await runner.start(**PARAMS, output_format=Forecast)
        with pytest.raises(pydantic.ValidationError, match="temperature_c"):
            await run.until_done()
        # The run itself completed: only this handle's parsing failed, and a plain handle reads the reply.
        plain = await runner.attach(run.id).until_done()
    assert plain.content[0].type == "text" and plain.content[0].text == '{"city": "Paris"}'
