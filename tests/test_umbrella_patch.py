"""A new run records one patch marker for the patches every new run used to record one by one (issue 14).

``UMBRELLA_PATCH`` (``workflows/patches.py``) implies four older patches: a new run records its marker and one
``TemporalChangeVersion`` upsert, where it recorded four of each, and still does all that the four do; it looks its
tools up in a local activity (``workflows/tool_lookup.py``). Runs recorded before keep replaying on their own markers
(``tests/histories/``, ``tests/test_replay.py``), and a run begun on the code before the umbrella keeps its own
patches and its regular ``describe_tools`` activity when the fleet is upgraded under it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from anthropic import beta_async_tool
from temporalio import workflow
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, WorkflowHistory
from temporalio.worker import Replayer

from agent_runner.activities.claude import ClaudeActivities
from agent_runner.activities.tools import ToolRegistry
from agent_runner.client import AgentRunner
from agent_runner.contract.types import CREATE_MESSAGE_ACTIVITY, DESCRIBE_TOOLS_ACTIVITY, RUN_TOOL_ACTIVITY, Usage
from agent_runner.testing import FakeMessagesAPI, Reply, end_turn, tool_use
from agent_runner.worker import WorkerTuning, build_worker
from agent_runner.workflows import history_size, live, patches, result_transcript, tool_lookup
from agent_runner.workflows.agent_run import AgentRun
from tests.conftest import WorkerFactory, anthropic_client_factory, scheduled_activities
from tests.test_history_size import payloads
from tests.test_lean_history import iteration_sizes, queue_as_long_as_the_default
from tests.test_replay import load, strict_replayer
from tests.test_versioning import wait_status

BASE: dict[str, Any] = {"model": "claude-fake-1", "max_tokens": 1024}
CALLS = 10
PER_RUN_BYTES = 2000
"""Bytes a run's history holds beyond its model calls' slope (protobuf ``ByteSize``: all events less ``CALLS`` times
a middle iteration, 1.9 KB here): 1,820 to 1,832, in 122 events. Before the umbrella: 3,146 in 133 events; one patch
marker and one ``TemporalChangeVersion`` upsert instead of four of each made it 2,104 in 127, and ``describe_tools`` a
local activity (one marker instead of an activity's three events and a workflow task's three) the rest."""

HISTORIES = Path(__file__).parent / "histories"


@pytest.fixture
def task_queue() -> str:
    return queue_as_long_as_the_default("umb-")


@beta_async_tool
async def lookup(n: int) -> str:
    """Look a number up.

    Args:
        n: The number.
    """
    return f"entry {n}"


def markers(history: WorkflowHistory) -> list[str]:
    """The patch ids of the run's patch markers, in order."""
    ids = []
    for event in history.events:
        if event.marker_recorded_event_attributes.marker_name == "core_patch":
            details = event.marker_recorded_event_attributes.details
            ids.append(json.loads(details["patch-data"].payloads[0].data)["id"])
    return ids


def kinds(history: WorkflowHistory) -> dict[str, int]:
    """How many markers of each kind (patches, local activities) and ``describe_tools`` activities the run holds."""
    names = [e.marker_recorded_event_attributes.marker_name for e in history.events]
    described = [
        e
        for e in history.events
        if e.activity_task_scheduled_event_attributes.activity_type.name == DESCRIBE_TOOLS_ACTIVITY
    ]
    return {
        "patch markers": names.count("core_patch"),
        "local activity markers": names.count("core_local_activity"),
        "describe_tools activities": len(described),
    }


def change_versions(history: WorkflowHistory) -> list[list[str]]:
    """The ``TemporalChangeVersion`` values the run's search attribute upserts set, in order."""
    return [
        json.loads(e.upsert_workflow_search_attributes_event_attributes.search_attributes.indexed_fields[key].data)
        for e in history.events
        if e.HasField("upsert_workflow_search_attributes_event_attributes")
        for key in e.upsert_workflow_search_attributes_event_attributes.search_attributes.indexed_fields
        if key == "TemporalChangeVersion"
    ]


def per_run_bytes(events: list[HistoryEvent]) -> int:
    """The bytes of history beyond one middle iteration per model call: what a run costs whatever its length."""
    sizes = iteration_sizes(events)
    slope = sorted(sizes[1:-1])[len(sizes[1:-1]) // 2]
    calls = len(sizes) + 1
    return sum(e.ByteSize() for e in events) - calls * slope


def test_the_umbrella_implies_the_patches_every_new_run_recorded() -> None:
    assert patches.IMPLIED == (
        history_size.INPUTS_WITHOUT_RUN_ID_PATCH,
        history_size.LEAN_HISTORY_PATCH,
        live.LIVE_LOG_PATCH,
        result_transcript.RESULT_STATUS_PATCH,
    )


async def test_a_new_run_records_one_patch_marker_and_does_what_the_four_patches_do(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    fake_api.script(
        *[Reply([tool_use(f"toolu_{n}", "lookup", {"n": n})], "tool_use") for n in range(CALLS - 1)],
        end_turn("Found."),
    )
    async with worker(lookup):
        run = await runner.start(**BASE, messages=[{"role": "user", "content": "Look."}], tools=[lookup])
        result = await run.result()
        history = await run.handle.fetch_history()

    # The newest umbrella (which implies this one) since its model calls send tool results compact.
    assert markers(history) == [patches.COMPACT_RESULTS_PATCH]
    assert change_versions(history) == [[patches.COMPACT_RESULTS_PATCH]]
    # The tools are looked up in the run's first workflow task, a local activity: one marker, no round trip.
    assert kinds(history) == {"patch markers": 1, "local activity markers": 1, "describe_tools activities": 0}
    assert per_run_bytes(list(history.events)) <= PER_RUN_BYTES

    # What the four patches do, all under the one marker: activity inputs without the run's id, lean model calls
    # (no ``length``, lean results), the model call's short heartbeat timeout, a result carrying its last status.
    model_inputs, model_results = payloads(history, CREATE_MESSAGE_ACTIVITY)
    tool_inputs, _ = payloads(history, RUN_TOOL_ACTIVITY)
    assert [i.get("run_id") for i in model_inputs + tool_inputs] == [None] * (2 * CALLS - 1)
    assert [i["turn"].get("length") for i in model_inputs] == [None] * CALLS
    assert model_results[0] == {
        "message": {
            "id": model_results[0]["message"]["id"],
            "content": [tool_use("toolu_0", "lookup", {"n": 0})],
            "model": "claude-fake-1",
            "usage": {"input_tokens": 10, "output_tokens": 5},
        }
    }
    heartbeats = [s.heartbeat_timeout.ToTimedelta() for s in scheduled_activities(history, CREATE_MESSAGE_ACTIVITY)]
    assert heartbeats == [live.MODEL_HEARTBEAT_TIMEOUT] * CALLS
    assert result.last_status is not None
    assert (result.last_status.status, result.last_status.iterations, result.last_status.version) == (
        "completed",
        CALLS,
        2 * CALLS - 1,
    )
    assert result.last_status.usage == Usage(input_tokens=10 * CALLS, output_tokens=5 * CALLS)

    # It replays, in the strict sandbox, as the recorded run under the umbrella does.
    replay = await strict_replayer(AgentRun).replay_workflow(history, raise_on_replay_failure=False)
    assert replay.replay_failure is None


@pytest.mark.parametrize(
    ("name", "recorded"),
    [
        # Recorded on the code before the umbrella: the four patches' own markers, replayed as recorded.
        ("before_umbrella_2026_12", list(patches.IMPLIED)),
        # Recorded under it: one marker.
        ("umbrella_2026_12", [patches.UMBRELLA_PATCH]),
    ],
)
async def test_recorded_runs_replay_on_their_own_markers(name: str, recorded: list[str]) -> None:
    history = load(HISTORIES / f"{name}.json")
    assert sorted(markers(history)) == sorted(recorded)
    result = await strict_replayer(AgentRun).replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is None


def _before_the_umbrella(old_id: str) -> bool:
    """``since`` as the code before the umbrella asked: the old patch alone."""
    return workflow.patched(old_id)


async def test_a_run_begun_before_the_umbrella_keeps_its_own_patches_after_the_upgrade(
    client: Client, fake_api: FakeMessagesAPI, task_queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    claude = ClaudeActivities(anthropic_client_factory(fake_api))
    registry = ToolRegistry([lookup])
    runner = AgentRunner(client, task_queue=task_queue)
    fake_api.script(Reply([tool_use("toolu_0", "lookup", {"n": 0})], "tool_use"), end_turn("Found."))
    with monkeypatch.context() as before:
        for module in (history_size, live, result_transcript):
            before.setattr(module, "since", _before_the_umbrella)
        before.setattr(tool_lookup, "begun_since", lambda: False)
        before.setattr(history_size, "compact_results", lambda: False)
        async with build_worker(client, registry=registry, task_queue=task_queue, claude=claude):
            run = await runner.start(**BASE, messages=[{"role": "user", "content": "Look."}], tools=[lookup], step=True)
            await wait_status(run, "waiting_for_step", 1)
    # The fleet moved to the umbrella while the run waited; every task replays from history, as on a new fleet.
    upgraded = build_worker(
        client, registry=registry, task_queue=task_queue, claude=claude, tuning=WorkerTuning(max_cached_workflows=0)
    )
    async with upgraded:
        await run.advance()
        await wait_status(run, "waiting_for_step", 2)
        await run.advance()
        result = await run.result()
        history = await run.handle.fetch_history()

    # The old patches decided its whole life, the last one asked (the result's status) after the upgrade.
    assert kinds(history) == {"patch markers": 4, "local activity markers": 0, "describe_tools activities": 1}
    assert markers(history) == [
        history_size.LEAN_HISTORY_PATCH,
        history_size.INPUTS_WITHOUT_RUN_ID_PATCH,
        live.LIVE_LOG_PATCH,
        result_transcript.RESULT_STATUS_PATCH,
    ]
    assert result.status == "completed" and result.last_status is not None
    assert result.last_status.iterations == 2
    model_inputs, _ = payloads(history, CREATE_MESSAGE_ACTIVITY)
    assert [i.get("run_id") for i in model_inputs] == [None, None]
    assert not any(e.HasField("workflow_task_failed_event_attributes") for e in history.events)
    replay = await Replayer(workflows=[AgentRun], data_converter=client.data_converter).replay_workflow(
        history, raise_on_replay_failure=False
    )
    assert replay.replay_failure is None
