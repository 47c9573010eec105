"""Big request parameters go by reference (``agent_runner/contract/big_params.py``): a `system` prompt of any size
reaches Claude whole, and never pushes a run's input, a model call's input or a continuation's input past Temporal's
2 MB payload limit."""

from __future__ import annotations

import asyncio
import json
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.history.v1 import History
from temporalio.client import Client

from agent_runner.client import AgentRunner
from agent_runner.contract.steering import UPDATE_PARAMS_UPDATE
from agent_runner.contract.transcript import canonical, ref_for
from agent_runner.contract.types import WORKFLOW_TYPE
from agent_runner.testing import FakeMessagesAPI, Reply, end_turn, text, tool_use
from agent_runner.workflows import carry
from tests.conftest import WorkerFactory, stock_temporal
from tests.steering_support import wait_status
from tests.test_no_wedge import RAN, forget_launches, launch  # noqa: F401  (the autouse fixture, imported to apply here)

BASE = {"model": "claude-fake-1", "max_tokens": 256}
USER = {"role": "user", "content": "Hi."}


def script_three_turns(fake_api: FakeMessagesAPI) -> None:
    fake_api.script(
        Reply(content=[text("One."), tool_use("toolu_1", "launch", {"target": "a"})], stop_reason="tool_use"),
        Reply(content=[text("Two."), tool_use("toolu_2", "launch", {"target": "b"})], stop_reason="tool_use"),
        end_turn("Done."),
    )


def start_plain(runner: AgentRunner, tmp_path: Path, run_input: dict[str, Any], workflow_id: str) -> str:
    """Start ``run_input`` as plain JSON from a file with the stock ``temporal`` CLI; what it printed (``runId``...)."""
    path = tmp_path / "input.json"
    path.write_text(json.dumps(run_input))
    return stock_temporal(
        runner.client,
        *("workflow", "start", "--type", WORKFLOW_TYPE, "--task-queue", runner.task_queue),
        *("--workflow-id", workflow_id, "--input-file", str(path)),
    )


async def executions(client: Client, run_id: str, first: str) -> list[History]:
    """The histories of every execution of the run ``run_id`` from its first, ``first``, following continue-as-new."""
    histories = []
    execution: str | None = first
    while execution:
        history = await client.get_workflow_handle(run_id, run_id=execution).fetch_history()
        histories.append(history)
        last = history.events[-1]
        execution = (
            last.workflow_execution_continued_as_new_event_attributes.new_execution_run_id
            if last.HasField("workflow_execution_continued_as_new_event_attributes")
            else None
        )
    return histories


def started_inputs(histories: list[History]) -> list[dict[str, Any]]:
    """The input each of these executions started with, as JSON."""
    return [
        json.loads(history.events[0].workflow_execution_started_event_attributes.input.payloads[0].data)
        for history in histories
    ]


def largest_payloads(histories: list[History]) -> dict[str, int]:
    """The biggest continue-as-new input and model call input of these histories, in bytes."""
    continued, scheduled = [0], [0]
    for history in histories:
        for event in history.events:
            if event.HasField("workflow_execution_continued_as_new_event_attributes"):
                attrs = event.workflow_execution_continued_as_new_event_attributes
                continued.append(sum(len(p.data) for p in attrs.input.payloads))
            if event.HasField("activity_task_scheduled_event_attributes"):
                attrs = event.activity_task_scheduled_event_attributes
                scheduled.append(sum(len(p.data) for p in attrs.input.payloads))
    return {"continued": max(continued), "activity": max(scheduled), "continuations": len(continued) - 1}


async def test_a_2_mb_system_prompt_from_the_python_client_goes_by_reference_through_continue_as_new(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    system = "Be exact. " + "x" * 2_000_000  # over Temporal's 2 MB payload limit by itself
    script_three_turns(fake_api)
    async with worker(launch):
        run = await runner.start(
            **BASE, system=system, messages=[USER], tools=[launch], thread=False, continue_as_new={"events": 10}
        )
        async with asyncio.timeout(60):
            result = await run.result()
    assert (result.status, result.iterations, RAN) == ("completed", 3, ["a", "b"])
    bodies = fake_api.bodies()
    assert [body["system"] == system for body in bodies] == [True] * 3  # every request, whole
    assert run.handle.first_execution_run_id is not None
    histories = await executions(runner.client, run.id, run.handle.first_execution_run_id)
    first_input = started_inputs(histories)[0]
    assert first_input["system"] == {"agent_runner.stored": ref_for(canonical(system))}
    sizes = largest_payloads(histories)
    assert sizes["continuations"] >= 1
    assert sizes["continued"] < 64_000
    assert sizes["activity"] < 64_000


@pytest.mark.parametrize(
    "fallbacks",
    [
        pytest.param({}, id="own-model"),
        # Each of its turns is sent as a fallback chain's first hop (with the chain's beta), not as its settings say.
        pytest.param({"refusal_fallbacks": [{"model": "claude-fallback-2"}]}, id="refusal-fallbacks"),
    ],
)
async def test_a_big_system_prompt_sent_as_plain_json_is_carried_by_reference_into_continuations(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, tmp_path: Path, fallbacks: dict[str, Any]
) -> None:
    """The stock CLI sends by value; once a model call stored the prompt, continuations carry its reference, and a
    fork or a send of the continued run still sends the prompt whole."""
    system = "Be exact. " + "x" * 1_100_000
    script_three_turns(fake_api)
    fake_api.script(end_turn("Forked."), end_turn("Sent."))
    run_input: dict[str, Any] = {
        **BASE,
        "system": system,
        "messages": [USER],
        "tools": ["launch"],
        "thread": False,
        "continue_as_new": {"events": 10},
        **fallbacks,
    }
    async with worker(launch):
        started = start_plain(runner, tmp_path, run_input, "big-plain")
        run = runner.attach("big-plain")
        async with asyncio.timeout(60):
            result = await run.result()
            fork = await run.fork(3)
            await fork.until_done()
            sent = await run.send("And then?")
            await sent.until_done()
    assert (result.status, result.iterations, RAN) == ("completed", 3, ["a", "b"])
    assert [body["system"] == system for body in fake_api.bodies()] == [True] * 5
    sizes = largest_payloads(await executions(runner.client, run.id, json.loads(started)["runId"]))
    assert sizes["continuations"] >= 1
    assert sizes["continued"] < 64_000


async def test_a_continuation_leaves_big_first_messages_and_too_many_event_bytes_out_of_its_input(
    runner: AgentRunner,
    worker: WorkerFactory,
    fake_api: FakeMessagesAPI,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A continuation's input stays far below Temporal's payload limit: first messages over 64 KB (here sent by
    value) give way to a stand-in, the carried conversation holding them, and live events over ``CARRIED_BYTES``
    (1 MB; a byte here) are left out of the stream it carries."""
    monkeypatch.setattr(carry, "CARRIED_BYTES", 1)
    big = {"role": "user", "content": "Launch a. " + "z" * 70_000}
    fake_api.script(
        Reply(content=[tool_use("toolu_1", "launch", {"target": "a"})], stop_reason="tool_use"), end_turn("Done.")
    )
    run_input = {**BASE, "messages": [big], "tools": ["launch"], "thread": False, "continue_as_new": {"events": 10}}
    async with worker(launch):
        started = start_plain(runner, tmp_path, run_input, "big-first-message")
        run = runner.attach("big-first-message")
        async with asyncio.timeout(60):
            result = await run.result()
        transcript = await run.transcript()
    histories = await executions(runner.client, run.id, json.loads(started)["runId"])
    inputs = started_inputs(histories)
    assert (result.status, result.iterations, len(inputs)) == ("completed", 2, 2)
    continued = inputs[1]
    assert continued["messages"] == [{"role": "user", "content": "(the conversation continues from `continued`)"}]
    assert continued["continued"]["stream"]["log"] == []
    assert [body["messages"][0] for body in fake_api.bodies()] == [big, big]
    assert transcript[0] == big


async def test_a_run_started_with_a_stored_system_prompt_forks_and_goes_on_with_it(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    system = "Be exact. " + "y" * 100_000
    fake_api.script(end_turn("Done."), end_turn("Forked."), end_turn("Sent."))
    async with worker():
        run = await runner.start(**BASE, system=system, messages=[USER], thread=False)
        await run.until_done()
        fork = await run.fork(1)
        await fork.until_done()
        sent = await run.send("And then?")
        await sent.until_done()
    assert [body["system"] == system for body in fake_api.bodies()] == [True] * 3


async def test_the_stock_cli_refuses_a_run_input_over_the_payload_limit_with_temporals_message(
    runner: AgentRunner, tmp_path: Path
) -> None:
    """Plain JSON goes by value, so Temporal itself refuses it: `agent-runner run --file` stores it instead."""
    with pytest.raises(subprocess.CalledProcessError) as refused:
        start_plain(runner, tmp_path, {**BASE, "system": "x" * 2_100_000, "messages": [USER]}, "too-big")
    assert refused.value.stderr.strip() == "Error: failed starting workflow: Blob data size exceeds limit."


async def test_a_big_parameter_a_plain_update_sent_goes_whole_into_a_continuation_no_call_stored_it_for(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """A plain-JSON ``update_params`` (the stock CLI's) holds a big ``system`` by value until a model call stores it:
    a continuation that comes first carries the value, never a reference to nothing."""
    system = "Be brief. " + "q" * 100_000
    replied = threading.Event()
    fake_api.script(
        Reply([text("One."), tool_use("toolu_1", "launch", {"target": "a"})], "tool_use", until=replied),
        end_turn("Done."),
    )
    async with worker(launch):
        run = await runner.start(
            **BASE, system="terse", messages=[USER], tools=[launch], thread=False, continue_as_new={"events": 10}
        )
        try:
            await asyncio.to_thread(fake_api.wait_for_requests, 1, 30)
            # Accepted while the first reply is held: the run continues as new before another model call.
            await run.handle.execute_update(UPDATE_PARAMS_UPDATE, {"params": {"system": system}})
        finally:
            replied.set()
        result = await run.result()
        status = await run.status()
    assert (result.status, status.continuations) == ("completed", 1)
    assert [body["system"] for body in fake_api.bodies()] == ["terse", system]


async def test_update_params_stores_a_big_system_prompt_and_the_next_request_has_it_whole(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    system = "Be brief. " + "z" * 1_500_000
    fake_api.script(
        Reply(content=[text("One."), tool_use("toolu_1", "launch", {"target": "a"})], stop_reason="tool_use"),
        end_turn("Done."),
    )
    async with worker(launch):
        run = await runner.start(**BASE, system="terse", messages=[USER], tools=[launch], thread=False, step=True)
        await wait_status(run, "waiting_for_step", 1)
        await run.update_params(system=system, wait=False)
        await run.advance()
        await wait_status(run, "waiting_for_step", 2)
        await run.advance()
        assert (await run.result()).status == "completed"
        update = next(
            e.workflow_execution_update_accepted_event_attributes.accepted_request.input.args.payloads[0].data
            for e in (await run.handle.fetch_history()).events
            if e.HasField("workflow_execution_update_accepted_event_attributes")
            and e.workflow_execution_update_accepted_event_attributes.accepted_request.input.name == "update_params"
        )
    assert [body["system"] for body in fake_api.bodies()] == ["terse", system]
    placeholder = {"agent_runner.stored": ref_for(canonical(system))}
    assert json.loads(update) == {"params": {"system": placeholder}, "held": True}
