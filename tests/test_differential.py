"""Differential test: the same scripted conversations through the SDK's in-process tool runner and through a
durable run, asserting that Claude's API received identical request bodies (both stream: `"stream": true`).

Documented differences (each has its own assertion below, so a change on either side is noticed):

1. Invalid tool input: our `is_error` result carries pydantic's per-field details after the SDK's text, so the
   model can correct its call; the SDK sends only `ValueError('Invalid arguments for function X')`.
2. A tool that returns something other than a string or a list of content blocks: the SDK sends a dict's keys as
   the content (no error); we send an `is_error` result saying what the tool returned.
3. Parallel `tool_use` blocks run concurrently here and sequentially in the SDK; the bodies are identical either way.
"""

from __future__ import annotations

import asyncio
from typing import Any

import anthropic
import pytest

from agent_runner.client import AgentRunner
from agent_runner.contract.errors import EditRejected
from agent_runner.testing import FakeMessagesAPI, Reply, ThreadNotFound, end_turn, text, tool_use
from tests.conftest import WorkerFactory
from tests.steering_support import wait_status
from tests.tools_for_tests import fail_disk, get_weather, refuse, returns_dict

# Some branches send Claude a call to a tool the SDK's runner does not hold, on purpose: it warns each time.
pytestmark = pytest.mark.filterwarnings("ignore:Tool '.*' not found in tool runner:UserWarning")

TOOLS = [get_weather, fail_disk, refuse, returns_dict]
PARAMS: dict[str, Any] = {
    "model": "claude-fake-1",
    "max_tokens": 1024,
    "system": "You are terse.",
    "messages": [{"role": "user", "content": "What's the weather and time in Paris?"}],
}


def weather(tool_id: str, city: str = "Paris") -> dict[str, Any]:
    return tool_use(tool_id, "get_weather", {"city": city})


SCENARIOS: dict[str, tuple[list[Any], dict[str, Any]]] = {
    "one_tool_then_end_turn": ([Reply([text("Let me check."), weather("toolu_A1")], "tool_use"), end_turn("ok")], {}),
    "two_parallel_tools": (
        [Reply([weather("toolu_B1"), weather("toolu_B2", "Oslo")], "tool_use"), end_turn("ok")],
        {},
    ),
    "exceptions_and_tool_error": (
        [
            Reply(
                [
                    tool_use("toolu_E1", "fail_disk", {"path": "/d"}),
                    tool_use("toolu_E2", "refuse", {"reason": "policy"}),
                    weather("toolu_E3"),
                ],
                "tool_use",
            ),
            end_turn("ok"),
        ],
        {},
    ),
    "unknown_tool": ([Reply([tool_use("toolu_U1", "no_such_tool", {})], "tool_use"), end_turn("ok")], {}),
    "max_iterations_cuts_the_loop": (
        [Reply([weather("toolu_1")], "tool_use"), Reply([weather("toolu_2")], "tool_use")],
        {"max_iterations": 2},
    ),
    "pause_turn_resumes": ([Reply([text("searching")], "pause_turn"), end_turn("found")], {}),
    "max_tokens_with_tool_use_stops": ([Reply([weather("toolu_M")], "max_tokens")], {}),
    "multi_turn": (
        [
            Reply([weather("toolu_T1")], "tool_use"),
            Reply([text("And Oslo:"), weather("toolu_T2", "Oslo")], "tool_use"),
            end_turn("done"),
        ],
        {},
    ),
    "container_is_carried": (
        [
            Reply(
                [weather("toolu_C1")], "tool_use", container={"id": "container_9", "expires_at": "2027-01-01T00:00:00Z"}
            ),
            end_turn("ok"),
        ],
        {},
    ),
}


def sdk_bodies(fake: FakeMessagesAPI, script: list[Any], options: dict[str, Any], thread: bool) -> list[dict[str, Any]]:
    fake.reset()
    fake.script(*script)
    client = anthropic.Anthropic(base_url=fake.url, api_key="test-key", max_retries=0)
    kwargs: dict[str, Any] = {**PARAMS, "tools": TOOLS, **options}
    if not thread:
        kwargs["thread"] = False
    # stream=True: the SDK's runner then streams each request, as our model call does.
    runner = client.beta.messages.tool_runner(**kwargs, stream=True)
    runner.until_done()
    return fake.bodies()


async def durable_bodies(
    fake: FakeMessagesAPI, runner: AgentRunner, script: list[Any], options: dict[str, Any], thread: bool
) -> list[dict[str, Any]]:
    fake.reset()
    fake.script(*script)
    run = await runner.start(**{**PARAMS, **options}, tools=TOOLS, thread=thread)
    await run.result()
    return fake.bodies()


@pytest.mark.parametrize("thread", [True, False], ids=["thread", "full_history"])
@pytest.mark.parametrize("scenario", list(SCENARIOS))
async def test_durable_run_sends_what_the_sdk_tool_runner_sends(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, scenario: str, thread: bool
) -> None:
    script, options = SCENARIOS[scenario]
    expected = await asyncio.to_thread(sdk_bodies, fake_api, script, options, thread)
    async with worker(*TOOLS):
        actual = await durable_bodies(fake_api, runner, script, options, thread)
    assert actual == expected


async def test_thread_recovery_replays_as_the_sdk_does(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    script = [Reply([weather("toolu_R1")], "tool_use"), ThreadNotFound(), end_turn("ok")]
    expected = await asyncio.to_thread(sdk_bodies, fake_api, script, {}, True)
    async with worker(*TOOLS):
        actual = await durable_bodies(fake_api, runner, script, {}, True)
    assert [b["thread"]["type"] for b in expected] == ["create", "continue", "create"]
    assert actual == expected


async def test_documented_differences_invalid_input_and_wrong_return_type(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    script = [
        Reply(
            [tool_use("toolu_V1", "get_weather", {"city": 123}), tool_use("toolu_V2", "returns_dict", {"key": "a"})],
            "tool_use",
        ),
        end_turn("ok"),
    ]
    expected = await asyncio.to_thread(sdk_bodies, fake_api, script, {}, False)
    async with worker(*TOOLS):
        actual = await durable_bodies(fake_api, runner, script, {}, False)
    sdk_results = expected[1]["messages"][-1]["content"]
    our_results = actual[1]["messages"][-1]["content"]
    assert sdk_results == [
        {
            "type": "tool_result",
            "tool_use_id": "toolu_V1",
            "content": "ValueError('Invalid arguments for function get_weather')",
            "is_error": True,
        },
        {"type": "tool_result", "tool_use_id": "toolu_V2", "content": ["a"]},
    ]
    assert our_results == [
        {
            "type": "tool_result",
            "tool_use_id": "toolu_V1",
            "content": "ValueError('Invalid arguments for function get_weather')\n"
            "- city: Input should be a valid string (got 123)",
            "is_error": True,
        },
        {
            "type": "tool_result",
            "tool_use_id": "toolu_V2",
            "content": "Error: Tool 'returns_dict' returned dict; a tool must return a string or a list of content "
            "blocks (text, image, document). Nothing else was sent.",
            "is_error": True,
        },
    ]
    # Everything else about the two requests is the same.
    assert expected[0] == actual[0]
    assert expected[1]["messages"][:-1] == actual[1]["messages"][:-1]


OUTPUT_CONFIG_ONLY = {"role": "system", "output_config": {"effort": "low"}}
"""A system message that sets the next turn's effort and says nothing (2.14.0's types take it without content)."""

CLEAR_AT = {"role": "system", "clear_at": "next_user_message", "content": "Answer in French."}
"""A system message shown only until the next user message."""


@pytest.mark.parametrize("thread", [True, False], ids=["thread", "full_history"])
@pytest.mark.parametrize("system", [OUTPUT_CONFIG_ONLY, CLEAR_AT], ids=["output_config_only", "clear_at"])
async def test_system_message_shapes_of_the_sdk_types_start_a_run_and_are_sent_as_given(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, system: dict[str, Any], thread: bool
) -> None:
    """Every message shape the SDK's types take is taken, and sent as the SDK's runner sends it."""
    messages = [*PARAMS["messages"], system]
    options = {"messages": messages}
    script = [Reply([weather("toolu_S1")], "tool_use"), end_turn("ok")]
    expected = await asyncio.to_thread(sdk_bodies, fake_api, script, options, thread)
    async with worker(*TOOLS):
        actual = await durable_bodies(fake_api, runner, script, options, thread)
    assert actual == expected
    assert actual[0]["messages"] == messages


@pytest.mark.parametrize("thread", [True, False], ids=["thread", "full_history"])
async def test_replace_history_takes_system_message_shapes_of_the_sdk_types_and_sends_them_as_given(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, thread: bool
) -> None:
    """The new history keeps what the server holds, so on a thread only the messages after it are sent."""
    new = [
        *PARAMS["messages"],
        {"role": "assistant", "content": [text("Sunny.")]},
        OUTPUT_CONFIG_ONLY,
        CLEAR_AT,
        {"role": "user", "content": "And tomorrow?"},
    ]
    fake_api.script(end_turn("Sunny."), end_turn("Ensoleillé."))
    async with worker(*TOOLS):
        run = await runner.start(**PARAMS, tools=TOOLS, step=True, thread=thread)
        await wait_status(run, "waiting_for_step", 1)
        snapshot = await run.versioned_transcript()
        await run.replace_history(new, expected_version=snapshot.version)
        await run.advance()
        await wait_status(run, "waiting_for_step", 2)
        await run.advance()
        await run.result()
    second = fake_api.bodies()[1]
    assert second["messages"] == (new[2:] if thread else new)
    assert second.get("thread", {}).get("type") == ("continue" if thread else None)


async def test_replace_history_refuses_a_malformed_message_naming_its_index_and_field(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    fake_api.script(end_turn("Sunny."))
    bad = [*PARAMS["messages"], {"role": "system", "clear_at": "sometimes", "content": "Answer in French."}]
    async with worker(*TOOLS):
        run = await runner.start(**PARAMS, tools=TOOLS, step=True)
        await wait_status(run, "waiting_for_step", 1)
        snapshot = await run.versioned_transcript()
        with pytest.raises(EditRejected) as e:
            await run.replace_history(bad, expected_version=snapshot.version)
        await run.stop()
        await run.result()
    assert str(e.value) == (
        "replace_history was refused: The new history was rejected:\n"
        "- `messages[1]`.clear_at: Input should be 'next_user_message' or 'never'."
    )
