"""The request shape of anthropic 2.14.0's tool runner, decided once per run (``workflows/request_shape.py``).

``tests/test_parity.py`` compares the bodies and ``anthropic-beta`` headers with the SDK's; this module pins how a run
comes to send them: the patch is asked only at a turn whose request would differ (so a run whose requests do not
change records no marker), a run recorded before keeps what it sent when the fleet moves to this code, and the answer
is kept in the conversation, which continue-as-new and ``Run.send`` carry.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from temporalio.client import Client, WorkflowHistory

from agent_runner.activities.claude import ClaudeActivities
from agent_runner.client import AgentRunner
from agent_runner.contract.conversation import Conversation
from agent_runner.contract.types import FALLBACK_CREDIT_BETA, MESSAGE_THREADS_BETA
from agent_runner.testing import FakeMessagesAPI, Reply, end_turn, tool_use
from agent_runner.workflows import agent_run, history_size, model_calls, patches
from agent_runner.workflows.agent_run import AgentRun
from agent_runner.workflows.patches import COMPACT_RESULTS_PATCH, UMBRELLA_PATCH
from agent_runner.workflows.request_shape import SDK_REQUEST_SHAPE_PATCH
from tests.conftest import WorkerFactory, anthropic_client_factory
from tests.test_versioning import markers, replaying_worker, wait_status
from tests.tools_for_tests import get_weather

BASE: dict[str, Any] = {"model": "claude-fake-1", "max_tokens": 64}
HI = [{"role": "user", "content": "Hi"}]
WEATHER = {"name": "get_weather", "input_schema": {"type": "object"}}
OTHER_BETA = "some-beta-2026-01-01"


def conversation(
    tools: list[dict[str, Any]], betas: list[str] | None = None, *, threading: bool = True
) -> Conversation:
    params = {**BASE, **({"betas": betas} if betas is not None else {})}
    return Conversation.start(params, tools, HI, threading=threading)


@pytest.mark.parametrize(
    ("tools", "betas", "threading", "continues", "differs"),
    [
        ([], None, True, False, True),  # a create without tools
        ([], None, True, True, False),  # a continue sends no tools either way
        ([], None, False, True, True),  # without a thread every turn sends tools
        ([WEATHER], None, True, False, False),
        ([WEATHER], [OTHER_BETA], True, True, False),  # the threads beta was appended before too
        ([WEATHER], [FALLBACK_CREDIT_BETA], True, True, True),  # it went ahead of the caller's fallback-credit beta
        ([WEATHER], [FALLBACK_CREDIT_BETA, MESSAGE_THREADS_BETA], True, True, False),  # the caller placed it
        ([WEATHER], [FALLBACK_CREDIT_BETA], False, False, False),  # no threads beta without a thread
    ],
)
def test_a_turn_differs_from_before_only_where_the_sdk_sends_otherwise(
    tools: list[dict[str, Any]], betas: list[str] | None, threading: bool, continues: bool, differs: bool
) -> None:
    c = conversation(tools, betas, threading=threading)
    if continues:
        c.previous_message_id = "msg_1"
    assert c.sends_otherwise_than_before() is differs
    assert c.sends_otherwise_than_before(compaction=True) is (differs or (threading and not tools))


def test_the_turn_carries_the_sdks_fields_only_once_the_run_took_them() -> None:
    c = conversation([], [FALLBACK_CREDIT_BETA])
    for recorded_before in (None, False):  # undecided, or a run recorded before: its parameters as they are
        c.sdk_request_shape = recorded_before
        assert c.turn().settings == {"params": {**BASE, "betas": [FALLBACK_CREDIT_BETA]}, "tools": []}
    c.sdk_request_shape = True
    params = {**BASE, "betas": [FALLBACK_CREDIT_BETA, MESSAGE_THREADS_BETA], "tools": []}
    assert c.turn().settings == {"params": params, "tools": []}
    c.threading = False  # the threads beta only on a thread; `tools: []` on every turn
    assert c.turn().settings == {"params": {**BASE, "betas": [FALLBACK_CREDIT_BETA], "tools": []}, "tools": []}
    assert c.params == {**BASE, "betas": [FALLBACK_CREDIT_BETA]}  # the run's own parameters are left as given


def test_the_runs_answer_is_carried_with_its_conversation() -> None:
    c = conversation([])
    c.sdk_request_shape = False
    assert Conversation.model_validate(c.model_dump(mode="json")).sdk_request_shape is False
    # A conversation carried by code before this one has no answer: the run decides at its next differing turn.
    dumped = c.model_dump(mode="json")
    del dumped["sdk_request_shape"]
    assert Conversation.model_validate(dumped).sdk_request_shape is None


async def test_a_new_run_sends_the_sdks_shape_with_no_marker_of_its_own(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    fake_api.script(
        Reply([tool_use("toolu_1", "get_weather", {"city": "Paris"})], "tool_use"), end_turn("Sunny."), end_turn("Hi!")
    )
    async with worker(get_weather):
        with_tools = await runner.start(**BASE, messages=HI, tools=[get_weather])
        await with_tools.result()
        without = await runner.start(**BASE, messages=HI)
        await without.result()
    # The run's umbrella (`compact-tool-results`) implies the patch: it is never asked, so nothing is recorded for it.
    assert markers(await with_tools.handle.fetch_history(), SDK_REQUEST_SHAPE_PATCH) == 0
    assert marker_names(await without.handle.fetch_history()) == ["core_local_activity"]
    assert ["tools" in body for body in fake_api.bodies()] == [True, False, True]  # the with_tools run's continue


def marker_names(history: WorkflowHistory) -> list[str]:
    """The patch ids and other markers of ``history`` in order, less the umbrella patches new runs record."""
    names = []
    for event in history.events:
        if event.HasField("marker_recorded_event_attributes"):
            marker = event.marker_recorded_event_attributes
            if marker.marker_name == "core_patch":
                patch = json.loads(marker.details["patch-data"].payloads[0].data)["id"]
                if patch not in (UMBRELLA_PATCH, COMPACT_RESULTS_PATCH):
                    names.append(patch)
            else:
                names.append(marker.marker_name)
    return names


async def test_a_run_recorded_before_keeps_its_requests_when_the_fleet_moves_to_this_code(
    client: Client, fake_api: FakeMessagesAPI, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue = f"shape-{uuid.uuid4()}"
    claude = ClaudeActivities(anthropic_client_factory(fake_api))
    fake_api.script(end_turn("before"), end_turn("after, the old run"), end_turn("a new run"))
    runner = AgentRunner(client, task_queue=queue)
    with monkeypatch.context() as before:  # the code before this one never asks
        before.setattr(agent_run, "decide_before_the_first_turn", lambda _spec: None)
        before.setattr(model_calls, "take_sdk_request_shape", lambda *_args, **_kwargs: None)
        for module in (patches, history_size):  # nor knows the umbrella that implies the patch
            before.setattr(module, "compact_results", lambda: False)
        async with replaying_worker(client, queue, claude, AgentRun):
            old = await runner.start(**BASE, messages=HI, thread=False, step=True)
            await wait_status(old, "waiting_for_step", 1)
            await old.inject("And now?")
    async with replaying_worker(client, queue, claude, AgentRun):
        await old.advance()
        await wait_status(old, "waiting_for_step", 2)
        await old.advance()
        await old.result()
        new = await runner.start(**BASE, messages=HI, thread=False)
        await new.result()
    # The old run's second request, sent on this code, has no `tools` as its first had none; a new run's has `[]`.
    assert [body.get("tools") for body in fake_api.bodies()] == [None, None, []]
    assert markers(await old.handle.fetch_history(), SDK_REQUEST_SHAPE_PATCH) == 0
    assert markers(await new.handle.fetch_history(), SDK_REQUEST_SHAPE_PATCH) == 0  # implied by the new run's umbrella
