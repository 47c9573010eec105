"""Which tools a ``tool_use`` may run follows the conversation, as in the SDK (issue 13, point 1).

The SDK folds the ``tool_addition`` / ``tool_removal`` blocks of the whole history (system messages, and the
``tool_changes`` of compaction blocks) over its tools (``_tool_dispatch.available_tool_names``), and a call to a
name that is not left available gets ``Error: Tool 'X' not found`` and never runs. Each differential case drives the
SDK's in-process runner and a durable run through the same scripted replies and asserts identical request bodies,
the exact ``tool_result``, and that the withdrawn tool's side effect never happened on either side.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import anthropic
import pytest
from anthropic import beta_tool
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from agent_runner.client import AgentRunner
from agent_runner.contract.conversation import Conversation, ToolChange, tool_changes_in
from agent_runner.testing import FakeMessagesAPI, Reply, end_turn, text, tool_use
from agent_runner.workflows.agent_run import AgentRun
from tests.conftest import WorkerFactory, patches_of_their_own
from tests.steering_support import wait_status
from tests.tools_for_tests import get_weather

pytestmark = pytest.mark.filterwarnings("ignore:Tool 'launch' not found in tool runner:UserWarning")
"""The SDK warns on each call it does not find: expected here."""

LAUNCHED: list[str] = []
"""Every launch, from either side: a withdrawn tool must leave it empty."""


@beta_tool
def launch(target: str) -> str:
    """Launch at a target.

    Args:
        target: What to launch at.
    """
    LAUNCHED.append(target)
    return f"launched at {target}"


TOOLS = [get_weather, launch]
USER = {"role": "user", "content": "Launch at the moon."}
PARAMS: dict[str, Any] = {
    "model": "claude-fake-1",
    "max_tokens": 1024,
    "system": "You are terse.",
    "betas": ["inline-tools-2026-09-15"],  # the tool changes' system messages need it
}
REMOVAL = {"type": "tool_removal", "tool": {"type": "tool_reference", "name": "launch"}}
ADDITION = {"type": "tool_addition", "tool": {"type": "tool_definition", "definition": launch.to_dict()}}
NOT_FOUND = {
    "type": "tool_result",
    "tool_use_id": "toolu_L",
    "content": "Error: Tool 'launch' not found",
    "is_error": True,
}
LAUNCHED_RESULT = {"type": "tool_result", "tool_use_id": "toolu_L", "content": "launched at moon"}


def launch_call() -> Reply:
    return Reply([text("Launching."), tool_use("toolu_L", "launch", {"target": "moon"})], "tool_use")


def weather_call(tool_id: str = "toolu_W") -> Reply:
    return Reply([tool_use(tool_id, "get_weather", {"city": "Paris"})], "tool_use")


@pytest.fixture(autouse=True)
def _forget_launches() -> None:
    LAUNCHED.clear()


SdkBody = Callable[[Any, int], None]
"""What the SDK's loop body does with the runner after reply ``i`` (from 0)."""


def sdk_run(
    fake: FakeMessagesAPI,
    script: list[Any],
    messages: list[dict[str, Any]],
    *,
    thread: bool,
    body: SdkBody | None = None,
    **options: Any,
) -> tuple[list[dict[str, Any]], list[str]]:
    """The SDK's streaming tool runner over ``script``: the bodies Claude received, and the launches."""
    fake.reset()
    fake.script(*script)
    LAUNCHED.clear()
    client = anthropic.Anthropic(base_url=fake.url, api_key="test-key", max_retries=0)
    kwargs: dict[str, Any] = {**PARAMS, **options, "messages": messages, "tools": TOOLS}
    if not thread:
        kwargs["thread"] = False
    runner = client.beta.messages.tool_runner(**kwargs, stream=True)
    for i, stream in enumerate(runner):
        stream.get_final_message()
        if body is not None:
            body(runner, i)
    return fake.bodies(), list(LAUNCHED)


async def durable_run(
    fake: FakeMessagesAPI, runner: AgentRunner, script: list[Any], messages: list[dict[str, Any]], **options: Any
) -> tuple[list[dict[str, Any]], list[str]]:
    fake.reset()
    fake.script(*script)
    LAUNCHED.clear()
    run = await runner.start(**PARAMS, messages=messages, tools=TOOLS, **options)
    await run.result()
    return fake.bodies(), list(LAUNCHED)


def last_results(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The tool results a request carries (the last user message's)."""
    user = [m for m in body["messages"] if m["role"] == "user"]
    return [b for b in user[-1]["content"] if isinstance(b, dict) and b.get("type") == "tool_result"]


WIRE_MODES = [
    pytest.param({"thread": True}, id="thread"),
    pytest.param({"thread": False}, id="full_history"),
    pytest.param({"thread": True, "eager": True}, id="thread_eager"),
]


def sdk_options(mode: dict[str, Any]) -> dict[str, Any]:
    return {"run_tools_eagerly": True} if mode.get("eager") else {}


def durable_options(mode: dict[str, Any]) -> dict[str, Any]:
    return {"thread": mode["thread"], "eager_tools": bool(mode.get("eager"))}


@pytest.mark.parametrize("mode", WIRE_MODES)
async def test_a_tool_removed_in_the_initial_messages_is_not_found_and_never_runs(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, mode: dict[str, Any]
) -> None:
    """A `tool_removal` system message in the run's input withdraws the tool before the first turn."""
    messages = [USER, {"role": "system", "content": [REMOVAL]}]
    script = [launch_call(), end_turn("Cannot launch.")]
    expected, sdk_launched = await asyncio.to_thread(
        sdk_run, fake_api, script, messages, thread=mode["thread"], **sdk_options(mode)
    )
    async with worker(*TOOLS):
        actual, launched = await durable_run(fake_api, runner, script, messages, **durable_options(mode))
    assert actual == expected
    assert last_results(actual[1]) == [NOT_FOUND]
    assert (sdk_launched, launched) == ([], [])


async def test_a_run_that_refused_a_withdrawn_tool_replays_on_the_current_code(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """The check is behind a patch that a new run's umbrella implies (`patches.implied`): no marker of its own."""
    messages = [USER, {"role": "system", "content": [REMOVAL]}]
    async with worker(*TOOLS):
        fake_api.script(launch_call(), end_turn("Cannot launch."))
        run = await runner.start(**PARAMS, messages=messages, tools=TOOLS, eager_tools=True)
        await run.result()
        history = await run.handle.fetch_history()
    replayer = Replayer(workflows=[AgentRun], data_converter=pydantic_data_converter)
    result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is None
    assert patches_of_their_own(history) == []
    assert LAUNCHED == []


@pytest.mark.parametrize("mode", WIRE_MODES)
async def test_a_tool_removed_and_added_back_in_the_initial_messages_runs(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, mode: dict[str, Any]
) -> None:
    """The last change wins: a `tool_addition` after the removal makes the tool available again."""
    messages = [USER, {"role": "system", "content": [REMOVAL]}, {"role": "system", "content": [ADDITION]}]
    script = [launch_call(), end_turn("Launched.")]
    expected, sdk_launched = await asyncio.to_thread(
        sdk_run, fake_api, script, messages, thread=mode["thread"], **sdk_options(mode)
    )
    async with worker(*TOOLS):
        actual, launched = await durable_run(fake_api, runner, script, messages, **durable_options(mode))
    assert actual == expected
    assert last_results(actual[1]) == [LAUNCHED_RESULT]
    assert (sdk_launched, launched) == (["moon"], ["moon"])


@pytest.mark.parametrize("thread", [True, False], ids=["thread", "full_history"])
async def test_remove_tools_while_a_reply_waits_withdraws_its_own_calls_as_in_the_sdk(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, thread: bool
) -> None:
    """The SDK's `remove_tools` in the loop body changes dispatch at once, for the reply being handled too: a
    `remove_tools` sent while a step-mode run waits after that reply does the same."""
    script = [launch_call(), launch_call(), end_turn("Cannot launch.")]

    def remove(sdk_runner: Any, i: int) -> None:
        if i == 0:
            sdk_runner.remove_tools("launch")

    expected, sdk_launched = await asyncio.to_thread(sdk_run, fake_api, script, [USER], thread=thread, body=remove)
    fake_api.reset()
    fake_api.script(*script)
    LAUNCHED.clear()
    async with worker(*TOOLS):
        run = await runner.start(**PARAMS, messages=[USER], tools=TOOLS, thread=thread, step=True)
        await wait_status(run, "waiting_for_step", 1)
        await run.remove_tools("launch")
        await run.advance()
        for iteration in (2, 3):
            await wait_status(run, "waiting_for_step", iteration)
            await run.advance()
        await run.result()
    actual = fake_api.bodies()
    assert actual == expected
    assert last_results(actual[1]) == last_results(actual[2]) == [NOT_FOUND]
    assert actual[1]["messages"][-1] == {"role": "system", "content": [REMOVAL]}
    assert (sdk_launched, LAUNCHED) == ([], [])


@pytest.mark.parametrize("size", [1, 2000], ids=["short_summary", "summary_stored_apart"])
@pytest.mark.parametrize("thread", [True, False], ids=["thread", "full_history"])
async def test_a_tool_removed_by_a_compactions_tool_changes_is_not_found_and_never_runs(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, thread: bool, size: int
) -> None:
    """The `tool_changes` of a compaction stand in for the system messages it summarized; a summary too big to
    carry through the run's history is stored apart without them."""
    summary_text = "Summary: the weather in Paris. " * size
    summary = {"type": "compaction", "content": summary_text, "tool_changes": [REMOVAL]}
    script = [weather_call(), Reply([summary], "compaction"), launch_call(), end_turn("Cannot launch.")]
    options = {"betas": ["inline-tools-2026-09-15", "compact-2026-09-04"]}

    def compact(sdk_runner: Any, i: int) -> None:
        if i == 0:
            sdk_runner.compact_before_next_turn()

    expected, sdk_launched = await asyncio.to_thread(
        sdk_run, fake_api, script, [USER], thread=thread, body=compact, **options
    )
    fake_api.reset()
    fake_api.script(*script)
    LAUNCHED.clear()
    async with worker(*TOOLS):
        run = await runner.start(**{**PARAMS, **options}, messages=[USER], tools=TOOLS, thread=thread, step=True)
        await wait_status(run, "waiting_for_step", 1)
        await run.compact()
        await run.advance()
        for iteration in (2, 3):
            await wait_status(run, "waiting_for_step", iteration)
            await run.advance()
        await run.result()
    actual = fake_api.bodies()
    assert actual == expected
    assert actual[2]["messages"][0] == {"role": "assistant", "content": [summary]}
    assert last_results(actual[3]) == [NOT_FOUND]
    assert (sdk_launched, LAUNCHED) == ([], [])


@pytest.mark.parametrize("thread", [True, False], ids=["thread", "full_history"])
async def test_a_withdrawn_tool_stays_withdrawn_across_continue_as_new(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, thread: bool
) -> None:
    """The run's record of the tool changes travels with its conversation into each continuation."""
    messages = [USER, {"role": "system", "content": [REMOVAL]}]
    script = [*(weather_call(f"toolu_W{i}") for i in range(6)), launch_call(), end_turn("Cannot launch.")]
    expected, sdk_launched = await asyncio.to_thread(sdk_run, fake_api, script, messages, thread=thread)
    async with worker(*TOOLS):
        fake_api.reset()
        fake_api.script(*script)
        LAUNCHED.clear()
        run = await runner.start(
            **PARAMS, messages=messages, tools=TOOLS, thread=thread, continue_as_new={"events": 40}
        )
        await run.result()
        status = await run.status()
    actual = fake_api.bodies()
    assert status.continuations >= 1
    assert actual == expected
    assert last_results(actual[-1]) == [NOT_FOUND]
    assert (sdk_launched, LAUNCHED) == ([], [])


class TestConversationFold:
    """The record of tool changes follows the history as the run adds, cuts and replaces messages."""

    def test_changes_come_from_system_messages_and_compaction_blocks_only(self) -> None:
        messages = [
            {"role": "user", "content": [REMOVAL]},
            {"role": "system", "content": [REMOVAL, {"type": "text", "text": "launch is gone"}]},
            {"role": "assistant", "content": [{"type": "compaction", "content": "s", "tool_changes": [ADDITION]}]},
            {"role": "system", "content": [{"type": "tool_removal", "tool": {"type": "mcp_tool_reference"}}]},
        ]
        assert tool_changes_in(messages) == [
            ToolChange(index=1, name="launch", available=False),
            ToolChange(index=2, name="launch", available=True),
        ]

    def test_a_retried_turn_drops_the_removals_after_the_reply(self) -> None:
        conversation = Conversation.start(PARAMS, [], [USER], threading=False)
        conversation.record_reply({"id": "m1", "content": [text("hi")], "stop_reason": "end_turn"})
        conversation.append_system_content([REMOVAL])
        assert conversation.withdrawn_tools() == {"launch"}
        assert conversation.drop_last_reply()
        assert conversation.withdrawn_tools() == set()

    def test_a_replaced_history_is_read_again(self) -> None:
        conversation = Conversation.start(PARAMS, [], [USER, {"role": "system", "content": [REMOVAL]}], threading=True)
        assert conversation.withdrawn_tools() == {"launch"}
        conversation.replace_messages([USER])
        assert conversation.withdrawn_tools() == set()

    def test_a_compaction_keeps_withdrawn_tools_withdrawn_until_add_tools(self) -> None:
        conversation = Conversation.start(PARAMS, [], [USER, {"role": "system", "content": [REMOVAL]}], threading=True)
        conversation.record_compaction({"content": [{"type": "compaction", "content": "s"}]})
        assert conversation.withdrawn_tools() == {"launch"}
        assert conversation.withdrawn_tools([("launch", True)]) == set()
        conversation.append_system_content([ADDITION])
        assert conversation.withdrawn_tools() == set()

    def test_queued_changes_count_in_order(self) -> None:
        conversation = Conversation.start(PARAMS, [], [USER], threading=True)
        assert conversation.withdrawn_tools([("launch", False)]) == {"launch"}
        assert conversation.withdrawn_tools([("launch", False), ("launch", True)]) == set()

    def test_changes_older_than_the_last_continue_as_new_keep_only_each_tools_last(self) -> None:
        conversation = Conversation.start(PARAMS, [], [USER], threading=False)
        for i in range(3):
            conversation.append_system_content([REMOVAL])
            conversation.append_user_content([{"type": "text", "text": str(i)}])
            conversation.append_system_content([ADDITION])
            conversation.append_user_content([{"type": "text", "text": str(i)}])
        conversation.transcript.store_pending()
        carried = conversation.model_copy(update={"transcript": conversation.transcript.carry(keep=1)})
        carried.record_reply({"id": "m1", "content": [text("hi")], "stop_reason": "end_turn"})
        assert carried.tool_changes == [ToolChange(index=11, name="launch", available=True)]
        assert carried.withdrawn_tools() == set()
