"""Whatever a run carries goes by reference once it is large (issue 10, point 7; ``contract/big_params.py``).

Not only a long ``system``: megabytes of tool input schemas (raw definitions, a registered tool's own schema) and a
big ``output_config`` schema reach Claude exactly, through continue-as-new, and no event of the run's histories
carries them: each stays far below Temporal's 2 MB payload limit, started from the Python client or, by value, from
the stock ``temporal`` CLI, and changed by ``add_tools`` or ``update_params``.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from anthropic import beta_tool
from temporalio.api.history.v1 import History

from agent_runner.client import AgentRunner
from agent_runner.contract.errors import EditRejected, InvalidRunInput
from agent_runner.contract.run_input import parse_run_input
from agent_runner.contract.steering import AddTools, UpdateParams
from agent_runner.contract.transcript import canonical, ref_for
from agent_runner.contract.types import FALLBACK_CREDIT_BETA
from agent_runner.testing import FakeMessagesAPI, Reply, end_turn, text, tool_use
from agent_runner.workflows.edits import check_add_tools, check_params
from tests.conftest import WorkerFactory, stock_temporal
from tests.steering_support import wait_status
from tests.test_big_params import (
    BASE,
    USER,
    executions,
    largest_payloads,
    script_three_turns,
    start_plain,
    started_inputs,
)

LIMIT = 64_000
RAN: list[str] = []


def schema(tag: str, size: int) -> dict[str, Any]:
    """A JSON input schema of about ``size`` bytes, with a ``target`` string; ``tag`` makes it unique."""
    fields = {
        f"{tag}_{i:05}": {"type": "string", "description": f"{tag} field {i}: " + "d" * 200} for i in range(size // 240)
    }
    return {"type": "object", "properties": {"target": {"type": "string"}, **fields}, "required": ["target"]}


def _launch(target: str) -> str:
    RAN.append(target)
    return f"launched {target}"


launch = beta_tool(_launch, name="launch", description="Launch something.", input_schema=schema("launch", 900_000))
"""A registered tool whose own schema is big: ``describe_tools`` answers with it by reference."""


@pytest.fixture(autouse=True)
def forget_launches() -> None:
    RAN.clear()


def largest_event(histories: list[History], skip: int = 0) -> int:
    """The biggest event of these histories (payloads included), in bytes, past the first ``skip`` events."""
    return max(len(event.SerializeToString()) for history in histories for event in history.events[skip:])


def raw_tool(name: str, size: int) -> dict[str, Any]:
    return {"name": name, "description": f"The {name} tool.", "input_schema": schema(name, size)}


OUTPUT_CONFIG = {"format": {"type": "json_schema", "schema": schema("answer", 2_500_000)}}


async def test_megabytes_of_tool_schemas_and_output_config_from_the_python_client_go_by_reference(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    search, lookup = raw_tool("search", 850_000), raw_tool("lookup", 850_000)
    script_three_turns(fake_api)
    async with worker(launch):
        run = await runner.start(
            **BASE,
            messages=[USER],
            tools=[launch, search, lookup],
            output_config=OUTPUT_CONFIG,
            thread=False,
            continue_as_new={"events": 10},
        )
        async with asyncio.timeout(90):
            result = await run.result()
    assert (result.status, result.iterations, RAN) == ("completed", 3, ["a", "b"])
    expected_tools = [launch.to_dict(), search, lookup]
    assert len(canonical(expected_tools)) > 2_500_000
    bodies = fake_api.bodies()
    assert [body["tools"] == expected_tools for body in bodies] == [True] * 3  # every request, exactly
    assert [body["output_config"] == OUTPUT_CONFIG for body in bodies] == [True] * 3
    assert run.handle.first_execution_run_id is not None
    histories = await executions(runner.client, run.id, run.handle.first_execution_run_id)
    assert len(histories) >= 2  # it continued as new
    first_input = started_inputs(histories)[0]
    assert first_input["output_config"] == {"agent_runner.stored": ref_for(canonical(OUTPUT_CONFIG))}
    assert first_input["tools"][1] == {
        "name": "search",
        "description": "The search tool.",
        "input_schema": {"agent_runner.stored": ref_for(canonical(search["input_schema"]))},
    }
    assert largest_event(histories) < LIMIT


@pytest.mark.parametrize("plain", [False, True], ids=["python_client", "plain_json"])
async def test_many_modest_tool_schemas_that_add_up_to_megabytes_go_by_reference(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, tmp_path: Path, plain: bool
) -> None:
    """No field is big, but 60 tools of 25 KB each are: every field over 1 KB goes by reference then."""
    tools = [raw_tool(f"tool{i:02}", 25_000) for i in range(60 if not plain else 40)]
    assert len(canonical(tools)) > (1_400_000 if not plain else 900_000)
    script_three_turns(fake_api)
    run_input: dict[str, Any] = {
        **BASE,
        "messages": [USER],
        "tools": ["launch", *tools],
        "thread": False,
        "continue_as_new": {"events": 10},
    }
    async with worker(launch):
        if plain:
            start_plain(runner, tmp_path, run_input, "many-tools-plain")
            run = runner.attach("many-tools-plain")
        else:
            run = await runner.start(**{**run_input, "tools": [launch, *tools]})
        async with asyncio.timeout(90):
            result = await run.result()
        first = (await run.handle.describe()).raw_description.workflow_execution_info.first_run_id
    assert (result.status, result.iterations, RAN) == ("completed", 3, ["a", "b"])
    assert [body["tools"] == [launch.to_dict(), *tools] for body in fake_api.bodies()] == [True] * 3
    histories = await executions(runner.client, run.id, first)
    assert len(histories) >= 2
    # By value only where plain JSON gave it so: the run's input and the first model call's.
    assert largest_event(histories if not plain else histories[1:]) < LIMIT


async def test_big_tool_schemas_and_output_config_sent_as_plain_json_are_carried_by_reference(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, tmp_path: Path
) -> None:
    """The stock CLI sends by value (under 2 MB, or Temporal refuses it); once a model call stored them, the run
    carries them by reference: no continuation, and no model call after the first, carries them again."""
    search = raw_tool("search", 500_000)
    output_config = {"format": {"type": "json_schema", "schema": schema("answer", 500_000)}}
    script_three_turns(fake_api)
    run_input: dict[str, Any] = {
        **BASE,
        "output_config": output_config,
        "messages": [USER],
        "tools": ["launch", search],
        "thread": False,
        "continue_as_new": {"events": 10},
    }
    async with worker(launch):
        started = start_plain(runner, tmp_path, run_input, "big-values-plain")
        run = runner.attach("big-values-plain")
        async with asyncio.timeout(90):
            result = await run.result()
    assert (result.status, result.iterations, RAN) == ("completed", 3, ["a", "b"])
    bodies = fake_api.bodies()
    assert [body["tools"] == [launch.to_dict(), search] for body in bodies] == [True] * 3
    assert [body["output_config"] == output_config for body in bodies] == [True] * 3
    histories = await executions(runner.client, run.id, json.loads(started)["runId"])
    sizes = largest_payloads(histories)
    assert sizes["continuations"] >= 1
    assert sizes["continued"] < LIMIT
    assert largest_event(histories[1:]) < LIMIT  # the continuations carry none of it


async def test_add_tools_and_update_params_send_big_values_by_reference(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    search = raw_tool("search", 1_200_000)
    output_config = {"format": {"type": "json_schema", "schema": schema("answer", 1_500_000)}}
    # Reference-shaped data in both is data: the client sends them held (escaped), never to be looked up.
    search["input_schema"]["properties"]["target"]["examples"] = [{"agent_runner.stored": "sha256:" + "0" * 64}]
    output_config["format"]["schema"]["examples"] = [{"agent_runner.stored": "sha256:" + "1" * 64}]
    fake_api.script(
        Reply(content=[text("One."), tool_use("toolu_1", "launch", {"target": "a"})], stop_reason="tool_use"),
        end_turn("Done."),
    )
    async with worker(launch):
        run = await runner.start(
            **BASE, messages=[USER], tools=["launch"], thread=False, step=True, betas=["inline-tools-2026-09-15"]
        )
        await wait_status(run, "waiting_for_step", 1)
        await run.add_tools(search, wait=False)
        await run.update_params(output_config=output_config, wait=False)
        await run.advance()
        await wait_status(run, "waiting_for_step", 2)
        await run.advance()
        assert (await run.result()).status == "completed"
        history = await run.handle.fetch_history()
    first, second = fake_api.bodies()
    assert "output_config" not in first
    assert second["output_config"] == output_config
    assert second["messages"][-1] == {
        "role": "system",
        "content": [{"type": "tool_addition", "tool": {"type": "tool_definition", "definition": search}}],
    }
    assert largest_event([history]) < LIMIT


async def test_plain_json_add_tools_with_a_big_definition_reaches_claude_exactly(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, tmp_path: Path
) -> None:
    """The stock CLI's ``add_tools`` sends the definition by value; the run carries it once, to the model call."""
    search = raw_tool("search", 300_000)
    search["input_schema"]["properties"]["target"]["examples"] = [{"agent_runner.stored": "sha256:" + "0" * 64}]
    fake_api.script(
        Reply(content=[text("One."), tool_use("toolu_1", "launch", {"target": "a"})], stop_reason="tool_use"),
        end_turn("Done."),
    )
    async with worker(launch):
        run = await runner.start(
            **BASE, messages=[USER], tools=["launch"], thread=False, step=True, betas=["inline-tools-2026-09-15"]
        )
        await wait_status(run, "waiting_for_step", 1)
        path = tmp_path / "update.json"
        path.write_text(json.dumps({"tools": [search]}))
        await asyncio.to_thread(  # the worker runs on this event loop: it must take the update meanwhile
            stock_temporal,
            runner.client,
            *("workflow", "update", "execute", "--workflow-id", run.id, "--name", "add_tools"),
            *("--input-file", str(path)),
        )
        await run.advance()
        await wait_status(run, "waiting_for_step", 2)
        await run.advance()
        assert (await run.result()).status == "completed"
    # The reference-shaped example inside it is data: escaped by the run, given back as it was.
    assert fake_api.bodies()[1]["messages"][-1] == {
        "role": "system",
        "content": [{"type": "tool_addition", "tool": {"type": "tool_definition", "definition": search}}],
    }


async def test_a_run_with_big_values_forks_and_goes_on_with_them(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    search = raw_tool("search", 300_000)
    output_config = {"format": {"type": "json_schema", "schema": schema("answer", 300_000)}}
    fake_api.script(end_turn("Done."), end_turn("Forked."), end_turn("Sent."))
    async with worker():
        run = await runner.start(**BASE, messages=[USER], tools=[search], output_config=output_config, thread=False)
        await run.until_done()
        fork = await run.fork(1)
        await fork.until_done()
        sent = await run.send("And then?")
        await sent.until_done()
    bodies = fake_api.bodies()
    assert [(body["tools"], body["output_config"]) == ([search], output_config) for body in bodies] == [True] * 3


@pytest.mark.parametrize(
    "betas",
    [
        pytest.param({}, id="hops-add-the-beta"),
        # Its own turns then send what its hops' first does, so the settings its model calls stored are the run's
        # own, and the continuation holds what is stored by reference: all but what a hop patches.
        pytest.param({"betas": [FALLBACK_CREDIT_BETA]}, id="run-has-the-beta"),
    ],
)
async def test_a_big_output_config_a_refusal_fallback_patches_is_held_by_value_and_patched_exactly(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, betas: dict[str, Any]
) -> None:
    """A hop merges its entry's ``output_config`` into the run's key by key, which needs the value itself: held by
    value by the run, and by the continuation it carries the run into."""
    output_config = {"effort": "high", "format": {"type": "json_schema", "schema": schema("answer", 200_000)}}
    details = {"type": "refusal", "category": "cyber", "explanation": "Not this.", "fallback_credit_token": "tok_A"}
    fake_api.script(
        Reply([text("One."), tool_use("toolu_1", "launch", {"target": "a"})], "tool_use"),
        Reply([text("No.")], "refusal", stop_details=details),
        end_turn("Yes."),
    )
    async with worker(launch):
        run = await runner.start(
            **BASE,
            messages=[USER],
            tools=[launch],
            output_config=output_config,
            thread=False,
            refusal_fallbacks=[{"model": "claude-fallback-2", "output_config": {"effort": "low"}}],
            continue_as_new={"events": 10},
            **betas,
        )
        assert (await run.result()).status == "completed"
        assert (await run.status()).continuations == 1
    assert [body["output_config"] for body in fake_api.bodies()] == [
        output_config,
        output_config,
        {**output_config, "effort": "low"},
    ]


@pytest.mark.parametrize(
    "fallbacks",
    [
        pytest.param({}, id="own-model"),
        pytest.param({"refusal_fallbacks": [{"model": "claude-fallback-2"}]}, id="chain"),
    ],
)
async def test_a_run_given_big_values_as_plain_json_is_sent_a_message_once_it_ended(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, tmp_path: Path, fallbacks: dict[str, Any]
) -> None:
    """``Run.send`` reads the ended run's input and its conversation in one query answer. Both held the big values
    by value, so a run given a prompt of over half Temporal's 2 MB limit could not be sent a message; the
    conversation goes by reference once a model call stored them, and the new run sends them whole."""
    system = "Be exact. " + "x" * 1_100_000
    search = raw_tool("search", 250_000)
    output_config = {"format": {"type": "json_schema", "schema": schema("answer", 250_000)}}
    fake_api.script(end_turn("Done."), end_turn("Sent."))
    run_input: dict[str, Any] = {
        **BASE,
        "system": system,
        "output_config": output_config,
        "messages": [USER],
        "tools": [search],
        "thread": False,
        **fallbacks,
    }
    async with worker(launch):
        start_plain(runner, tmp_path, run_input, "big-values-sent")
        run = runner.attach("big-values-sent")
        async with asyncio.timeout(60):
            assert (await run.result()).status == "completed"
            sent = await run.send("And then?")
            assert (await sent.result()).status == "completed"
    first, second = fake_api.bodies()
    assert [(body["system"], body["tools"], body["output_config"]) for body in (first, second)] == [
        (system, [search], output_config)
    ] * 2
    assert second["messages"] == [
        USER,
        {"role": "assistant", "content": [{"type": "text", "text": "Done."}]},
        {"role": "user", "content": [{"type": "text", "text": "And then?"}]},
    ]


@pytest.mark.parametrize(
    "field",
    [
        pytest.param({"metadata": {"agent_runner.stored": "sha256:" + "0" * 64}}, id="param"),
        pytest.param(
            {"tools": [{"name": "t", "input_schema": {"agent_runner.stored": "sha256:" + "0" * 64}}]}, id="tool"
        ),
    ],
)
def test_plain_json_shaped_like_a_reference_where_one_would_count_is_refused(field: dict[str, Any]) -> None:
    """A value shaped like a stored reference in plain JSON is never looked up: no valid value has that shape."""
    with pytest.raises(InvalidRunInput, match="shaped like a stored reference"):
        parse_run_input({**BASE, "messages": [USER], **field})
    parse_run_input({**BASE, "messages": [USER], **field, "held": True})  # the Python client's: a reference


def test_plain_edits_shaped_like_a_reference_where_one_would_count_are_refused() -> None:
    """As the run's input: ``update_params`` and ``add_tools`` from plain JSON never name stored values."""
    lookalike = {"agent_runner.stored": "sha256:" + "0" * 64}
    with pytest.raises(ValueError, match="`metadata` is an object shaped like a stored reference"):
        check_params(UpdateParams(params={"metadata": lookalike}), None)
    with pytest.raises(ValueError, match=r"`tools\[0\].input_schema` is an object shaped like a stored reference"):
        check_add_tools(AddTools(tools=[{"name": "t", "input_schema": lookalike}]), None)
    check_add_tools(AddTools(tools=[{"name": "t", "input_schema": lookalike}], held=True), None)


async def test_a_big_output_config_is_refused_by_a_run_whose_refusal_fallbacks_patch_it(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """The client would send it by reference, which no hop can merge into: a clear refusal, and the run goes on."""
    output_config = {"format": {"type": "json_schema", "schema": schema("answer", 200_000)}}
    fake_api.script(
        Reply(content=[text("One."), tool_use("toolu_1", "launch", {"target": "a"})], stop_reason="tool_use"),
        end_turn("Done."),
    )
    async with worker(launch):
        run = await runner.start(
            **BASE,
            messages=[USER],
            tools=["launch"],
            thread=False,
            step=True,
            refusal_fallbacks=[{"model": "claude-fallback-2", "output_config": {"effort": "low"}}],
        )
        await wait_status(run, "waiting_for_step", 1)
        with pytest.raises(EditRejected) as refused:
            await run.update_params(output_config=output_config)
        await run.advance()
        await wait_status(run, "waiting_for_step", 2)
        await run.advance()
        assert (await run.result()).status == "completed"
    assert str(refused.value).endswith(
        "`output_config` is over 64 KB, and this run's refusal_fallbacks patch it, which needs it held by value: keep "
        "it under 64 KB, or start a new run without refusal_fallbacks entries that patch `output_config`."
    )
    assert ["output_config" in body for body in fake_api.bodies()] == [False, False]
    assert RAN == ["a"]
