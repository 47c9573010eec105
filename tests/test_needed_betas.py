"""Edits and options whose requests need a beta are refused without it, and a client's failed compaction fails only
its edit (``workflows/needed_betas.py``, ``workflows/compaction.py``).

The SDK's loop sends such a request, gets the API's 400 and is done; a run was done too, hours in, for one edit a
client sent. Now the run refuses the edit (or the run's input) saying which beta to add, counting an
``update_params`` queued before it, and a compaction that fails anyway (refused, or out of attempts) fails the edit
and the run goes on. The fake Messages API refuses the beta fields without their beta, as the real API does.
"""

from __future__ import annotations

import asyncio
from typing import Any

import anthropic
import pytest
from anthropic import beta_async_tool
from temporalio.client import Client, WorkflowFailureError
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from agent_runner.client import AgentRunner, check_run_input
from agent_runner.contract.errors import EditRejected, InvalidRunInput
from agent_runner.contract.steering import COMPACT_BETA, INLINE_TOOLS_BETA
from agent_runner.testing import FakeMessagesAPI, Reply, bad_request, end_turn, tool_use
from agent_runner.workflows.agent_run import AgentRun
from agent_runner.workflows.compaction import FAILED_COMPACTION_FAILS_THE_EDIT_PATCH
from tests.conftest import WorkerFactory, stock_start
from tests.steering_support import wait_status
from tests.test_umbrella_patch import markers

BASE: dict[str, Any] = {"model": "claude-fake-1", "max_tokens": 256, "thread": False}
USER = {"role": "user", "content": "Check Paris."}
PROBE = {"name": "probe", "description": "Probes.", "input_schema": {"type": "object", "properties": {}}}
SUMMARY = {"type": "compaction", "content": "Summary: Paris was checked."}
CALL = {"type": "tool_use", "id": "toolu_1", "name": "check", "input": {"city": "Paris"}}
RESULT = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "checked Paris"}


@beta_async_tool
async def check(city: str) -> str:
    """Check a city, taking a second, so that edits sent meanwhile wait for the boundary after it.

    Args:
        city: The city.
    """
    await asyncio.sleep(1)
    return f"checked {city}"


def needs(what: str, beta: str, given: str = "none") -> str:
    return (
        f"{what} needs the `{beta}` beta, and the run's `betas` ({given}) will not have it: Claude's API would refuse "
        f'the request. Add it first (`update_params` with `{{"betas": [..., "{beta}"]}}`), then send this again.'
    )


async def test_an_edit_whose_request_needs_a_beta_is_refused_until_an_update_gives_it(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """Refused, the run goes on unharmed; with the beta queued before it, the compaction is accepted and sent with
    the beta."""
    fake_api.script(
        Reply([tool_use("toolu_1", "check", {"city": "Paris"})], "tool_use"), Reply([SUMMARY], "compaction")
    )
    fake_api.script(end_turn("Done."))
    async with worker(check):
        run = await runner.start(**BASE, messages=[USER], tools=[check], step=True)
        await wait_status(run, "waiting_for_step", 1)
        refused: list[str] = []
        for edit in (run.compact(), run.add_tools(PROBE), run.remove_tools("check")):
            with pytest.raises(EditRejected) as error:
                await edit
            refused.append(str(error.value))
        await run.update_params(betas=[COMPACT_BETA])
        await run.compact()  # the queued update gives it the beta
        with pytest.raises(EditRejected) as still:
            await run.add_tools(PROBE)
        await run.advance()
        await wait_status(run, "waiting_for_step", 2)  # a stepped run waits after its final reply too
        await run.advance()
        result = await run.result()
    assert refused == [
        "compact was refused: " + needs("A compaction", COMPACT_BETA),
        "add_tools was refused: " + needs("`add_tools` (a `tool_addition` system message)", INLINE_TOOLS_BETA),
        "remove_tools was refused: " + needs("`remove_tools` (a `tool_removal` system message)", INLINE_TOOLS_BETA),
    ]
    assert str(still.value) == "add_tools was refused: " + needs(
        "`add_tools` (a `tool_addition` system message)", INLINE_TOOLS_BETA, f"`{COMPACT_BETA}`"
    )
    assert result.status == "completed"
    answered = [USER, {"role": "assistant", "content": [CALL]}, {"role": "user", "content": [RESULT]}]
    assert [r.headers.get("anthropic-beta") for r in fake_api.requests] == [None, COMPACT_BETA, COMPACT_BETA]
    assert [b["messages"] for b in fake_api.bodies()] == [
        [USER],
        answered,
        [{"role": "assistant", "content": [SUMMARY]}],
    ]
    assert fake_api.bodies()[1]["compaction"] == {"type": "summarize"}


async def test_a_history_or_a_run_input_with_a_tool_change_needs_the_inline_tools_beta(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    removal = {"role": "system", "content": [{"type": "tool_removal", "tool": {"type": "tool_reference", "name": "x"}}]}
    message = (
        f"Message 2 is a `system` message with a `tool_removal` block, which needs the `{INLINE_TOOLS_BETA}` beta: add "
        f'it to `betas` (`"betas": ["{INLINE_TOOLS_BETA}"]`).'
    )
    fake_api.script(Reply([tool_use("toolu_1", "check", {"city": "Paris"})], "tool_use"), end_turn("Done."))
    async with worker(check):
        refused = await runner.start(**BASE, messages=[USER, removal], tools=[check])
        with pytest.raises(InvalidRunInput) as at_start:
            await refused.result()
        run = await runner.start(**BASE, messages=[USER], tools=[check], step=True)
        await wait_status(run, "waiting_for_step", 1)
        version = (await run.status()).version
        with pytest.raises(EditRejected) as replaced:
            await run.replace_history([USER, removal], expected_version=version)
        await run.advance()
        await wait_status(run, "waiting_for_step", 2)  # a stepped run waits after its final reply too
        await run.advance()
        assert (await run.result()).status == "completed"
    assert str(at_start.value) == f"The run's input was rejected:\n- {message}"
    assert str(replaced.value) == f"replace_history was refused: {message}"
    assert len(fake_api.bodies()) == 2


async def test_auto_compact_needs_the_compaction_beta_at_start_and_keeps_it(
    client: Client, runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, task_queue: str
) -> None:
    """Refused by the CLI's check and by the run itself (started with plain JSON); an ``update_params`` may not take the
    beta from a run that compacts by itself."""
    auto = {"input_tokens": 100_000}
    message = f'`auto_compact` needs the `{COMPACT_BETA}` beta: add it to `betas` (`"betas": ["{COMPACT_BETA}"]`).'
    with pytest.raises(InvalidRunInput) as by_the_cli_check:
        check_run_input({**BASE, "messages": [USER], "auto_compact": auto})
    assert str(by_the_cli_check.value) == f"The run's input was rejected:\n- {message}"
    fake_api.script(Reply([tool_use("toolu_1", "check", {"city": "Paris"})], "tool_use"), end_turn("Done."))
    async with worker(check):
        await asyncio.to_thread(
            stock_start, client, task_queue, "plain-auto-compact", {**BASE, "messages": [USER], "auto_compact": auto}
        )
        with pytest.raises(WorkflowFailureError) as by_the_run:
            await client.get_workflow_handle("plain-auto-compact").result()
        run = await runner.start(
            **BASE, messages=[USER], tools=[check], step=True, auto_compact=auto, betas=[COMPACT_BETA]
        )
        await wait_status(run, "waiting_for_step", 1)
        with pytest.raises(EditRejected) as dropped:
            await run.update_params(betas=[INLINE_TOOLS_BETA])
        await run.update_params(betas=[INLINE_TOOLS_BETA, COMPACT_BETA])
        await run.advance()
        await wait_status(run, "waiting_for_step", 2)  # a stepped run waits after its final reply too
        await run.advance()
        assert (await run.result()).status == "completed"
    assert str(by_the_run.value.cause) == f"InvalidRunInput: The run's input was rejected:\n- {message}"
    assert str(dropped.value) == (
        f"update_params was refused: The run compacts its history by itself (`auto_compact`), which needs the "
        f"`{COMPACT_BETA}` beta: keep it in the `betas` you set."
    )
    assert [r.headers.get("anthropic-beta") for r in fake_api.requests] == [
        COMPACT_BETA,
        f"{INLINE_TOOLS_BETA},{COMPACT_BETA}",
    ]


async def test_a_compaction_the_api_refuses_fails_its_edit_and_the_run_goes_on(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """Before, the run failed with the API's 400. Recorded behind a patch asked only then, and replayed."""
    fake_api.script(
        Reply([tool_use("toolu_1", "check", {"city": "Paris"})], "tool_use"),
        bad_request("compaction.instructions: String should have at least 1 character"),
        end_turn("Done."),
    )
    async with worker(check):
        run = await runner.start(**BASE, messages=[USER], tools=[check], betas=[COMPACT_BETA])
        await wait_status(run, "running", 1)  # the tool runs: the edit waits for the boundary after it
        with pytest.raises(EditRejected) as failed:
            await run.compact({"type": "summarize", "instructions": ""}, wait=True)
        result = await run.result()
        history = await run.handle.fetch_history()
    assert str(failed.value) == (
        "compact could not apply: The compaction failed; nothing was changed, and the run goes on. Claude's API "
        "rejected the request with 400: invalid_request_error: compaction.instructions: String should have at least 1 "
        "character. Fix its request (the "
        "`compaction`, or the run's parameters through `update_params`) and ask again."
    )
    assert result.status == "completed" and result.final_message is not None
    assert result.final_message["content"] == [{"type": "text", "text": "Done."}]
    answered = [USER, {"role": "assistant", "content": [CALL]}, {"role": "user", "content": [RESULT]}]
    bodies = fake_api.bodies()
    assert [b.get("compaction") for b in bodies] == [None, {"type": "summarize", "instructions": ""}, None]
    assert bodies[1]["messages"] == bodies[2]["messages"] == answered
    assert FAILED_COMPACTION_FAILS_THE_EDIT_PATCH in markers(history)
    replayer = Replayer(workflows=[AgentRun], data_converter=pydantic_data_converter)
    assert (await replayer.replay_workflow(history, raise_on_replay_failure=False)).replay_failure is None


def test_the_fake_refuses_beta_fields_without_their_beta(fake_api: FakeMessagesAPI) -> None:
    client = anthropic.Anthropic(base_url=fake_api.url, api_key="test-key", max_retries=0)
    fake_api.script(end_turn("ok"), end_turn("ok"))
    addition = {"type": "tool_addition", "tool": {"type": "tool_definition", "definition": PROBE}}
    requests: list[dict[str, Any]] = [
        {"messages": [USER], "extra_body": {"compaction": {"type": "summarize"}}},
        {"messages": [USER, {"role": "system", "content": [addition]}]},
    ]
    errors = []
    for request in requests:
        with pytest.raises(anthropic.BadRequestError) as refused:
            client.messages.create(model="claude-fake-1", max_tokens=16, **request)
        errors.append(refused.value.body["error"]["message"])  # type: ignore[index]
    assert errors == [
        f"compaction: requires the `anthropic-beta: {COMPACT_BETA}` header",
        f"messages.1.content: `tool_addition` requires the `anthropic-beta: {INLINE_TOOLS_BETA}` header",
    ]
    for request, beta in zip(requests, [COMPACT_BETA, INLINE_TOOLS_BETA], strict=True):
        reply = client.messages.create(
            model="claude-fake-1", max_tokens=16, extra_headers={"anthropic-beta": beta}, **request
        )
        assert reply.content[0].type == "text"
