"""What an iteration puts in the run's history (issue 14): no tool result over 256 bytes, no run id, no defaults.

A tool result is carried twice (the tool call's output and the next model call's input), so one over
``RESULT_INLINE_LIMIT`` goes to the content store and both carry its placeholder; a smaller one stays inline. The
activities read the run's id from their own ``activity.info()``, so their inputs leave it out. Claude receives the
same request either way, and the run's transcript holds the result itself.
"""

from __future__ import annotations

import json
import re
from typing import Any

from anthropic import beta_async_tool
from temporalio.client import WorkflowHistory

from agent_runner.client import AgentRunner
from agent_runner.contract.tool_result_refs import whole_pending
from agent_runner.contract.transcript import RESULT_INLINE_LIMIT, STORED, canonical, ref_for, stored
from agent_runner.contract.types import CREATE_MESSAGE_ACTIVITY, RUN_TOOL_ACTIVITY
from agent_runner.testing import FakeMessagesAPI, Reply, end_turn, tool_use
from agent_runner.worker import build_id
from tests.conftest import WorkerFactory

BASE: dict[str, Any] = {"model": "claude-fake-1", "max_tokens": 1024}
BIG = "b" * 1000
SMALL = "s" * 100


@beta_async_tool
async def fetch(size: str) -> str:
    """Fetch a big or a small answer.

    Args:
        size: "big" or "small".
    """
    return BIG if size == "big" else SMALL


def payloads(history: WorkflowHistory, activity: str) -> tuple[list[Any], list[Any]]:
    """The decoded inputs and results of every call of ``activity`` in ``history``."""
    names: dict[int, str] = {}
    inputs: list[Any] = []
    results: list[Any] = []
    for event in history.events:
        if event.HasField("activity_task_scheduled_event_attributes"):
            attributes = event.activity_task_scheduled_event_attributes
            names[event.event_id] = attributes.activity_type.name
            if attributes.activity_type.name == activity:
                inputs.append(json.loads(attributes.input.payloads[0].data))
        elif event.HasField("activity_task_completed_event_attributes"):
            attributes = event.activity_task_completed_event_attributes
            if names[attributes.scheduled_event_id] == activity:
                results.append(json.loads(attributes.result.payloads[0].data))
    return inputs, results


async def test_a_tool_result_over_the_limit_crosses_history_as_a_placeholder_and_reaches_claude_whole(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    assert len(json.dumps(SMALL)) <= RESULT_INLINE_LIMIT < len(json.dumps(BIG))
    fake_api.script(
        Reply([tool_use("toolu_B", "fetch", {"size": "big"})], "tool_use"),
        Reply([tool_use("toolu_S", "fetch", {"size": "small"})], "tool_use"),
        end_turn("Done."),
    )
    async with worker(fetch):
        run = await runner.start(**BASE, messages=[{"role": "user", "content": "Go."}], tools=[fetch], thread=False)
        await run.result()
        history = await run.handle.fetch_history()
        transcript = await run.transcript()

    big_result = {"type": "tool_result", "tool_use_id": "toolu_B", "content": BIG}
    small_result = {"type": "tool_result", "tool_use_id": "toolu_S", "content": SMALL}
    bodies = fake_api.bodies()
    assert bodies[1]["messages"][2] == {"role": "user", "content": [big_result]}
    assert bodies[2]["messages"][4] == {"role": "user", "content": [small_result]}
    assert transcript[2] == {"role": "user", "content": [big_result]}

    placeholder = stored(ref_for(canonical(BIG), short=True))  # a short reference (issue 14)
    tool_inputs, tool_results = payloads(history, RUN_TOOL_ACTIVITY)
    assert tool_results == [{"content": placeholder}, {"content": SMALL}]  # `is_error` left out when false
    # The idempotency key is left out too: in a run's first execution the activity derives it from its own run id.
    assert [sorted(i) for i in tool_inputs] == [["input", "iteration", "name", "tool_use_id"]] * 2

    model_inputs, _ = payloads(history, CREATE_MESSAGE_ACTIVITY)
    # The first call has no replies before it: its `replies_head`, null, is left out.
    assert [sorted(i) for i in model_inputs] == [["iteration", "turn"]] + [["iteration", "replies_head", "turn"]] * 2
    # Each turn's tool results go compact (``contract/tool_result_refs.py``): the stored one as its reference.
    assert model_inputs[1]["turn"]["results"] == [["toolu_B", placeholder[STORED]]]
    assert model_inputs[2]["turn"]["results"] == [["toolu_S", 0, SMALL]]
    assert [whole_pending(i["turn"]) for i in model_inputs[1:]] == [
        [{"role": "user", "content": [{**big_result, "content": placeholder}]}],
        [{"role": "user", "content": [small_result]}],
    ]
    assert "settings" in model_inputs[0]["turn"] and "settings" not in model_inputs[1]["turn"]
    assert BIG not in "".join(str(event) for event in history.events)


async def test_the_worker_names_its_build_in_eight_hex_digits(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """Temporal writes the build id into six of an iteration's twelve events: the SDK's 32 digits would cost an
    iteration ~140 bytes of history. The id still changes with the runner's code."""
    fake_api.script(end_turn("Done."))
    async with worker():
        run = await runner.start(**BASE, messages=[{"role": "user", "content": "Go."}])
        await run.result()
        history = await run.handle.fetch_history()
    named = [
        attributes.worker_version.build_id
        for event in history.events
        for field in ("workflow_task_started_event_attributes", "workflow_task_completed_event_attributes")
        if event.HasField(field)
        for attributes in [getattr(event, field)]
    ]
    assert len(named) >= 2
    assert set(named) == {build_id()}
    assert re.fullmatch("[0-9a-f]{8}", build_id())
