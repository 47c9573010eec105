"""Safe upgrades: a run started on one version of `AgentRun` completes after the fleet moves to the next.

The next version changes what the workflow does (a short timer before each model call, standing for any new step)
behind `workflow.patched`. Temporal decides a patch once per run: a run that the old code started keeps the old path
for its whole life on the new fleet, and runs the new fleet starts take the new one.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from typing import Any

from temporalio import workflow
from temporalio.client import Client, WorkflowHistory
from temporalio.common import RawValue
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from agent_runner.activities.claude import ClaudeActivities
from agent_runner.activities.hooks import HookActivities
from agent_runner.activities.tools import ToolActivities, ToolRegistry
from agent_runner.client import AgentRunner, Run
from agent_runner.testing import FakeMessagesAPI, end_turn
from agent_runner.worker import build_worker
from agent_runner.workflows.agent_run import AgentRun
from agent_runner.workflows.start_input import NO_INPUT, one_raw_input
from tests.conftest import anthropic_client_factory

PATCH = "pause-before-model-call"


@workflow.defn(name="AgentRun")
class AgentRunV2(AgentRun):
    """The next version: a short pause before each model call, behind a patch."""

    @workflow.run
    @one_raw_input
    async def run(self, raw_input: RawValue = NO_INPUT, *more: object) -> dict[str, Any]:
        return await super().run(raw_input, *more)

    async def _boundary(self) -> None:
        if workflow.patched(PATCH):
            await workflow.sleep(0.01)
        await super()._boundary()


async def wait_status(run: Run, status: str, iterations: int) -> None:
    async with asyncio.timeout(20):
        while (s := await run.status()).status != status or s.iterations != iterations:
            await asyncio.sleep(0.05)


@contextlib.asynccontextmanager
async def replaying_worker(
    client: Client, queue: str, claude: ClaudeActivities, workflow: type = AgentRunV2
) -> AsyncIterator[Worker]:
    """A worker running ``workflow`` that replays every task from history, as a freshly deployed fleet does."""
    registry = ToolRegistry()
    tools = ToolActivities(registry)
    worker = Worker(
        client,
        task_queue=queue,
        workflows=[workflow],
        activities=[claude.create_message, tools.describe_tools, HookActivities(registry.hooks).process_results],
        max_cached_workflows=0,  # every task replays from history, as on a freshly deployed fleet
        # This module imports HTTP clients, which the sandbox refuses to re-import; the workflow code is the same.
        workflow_runner=UnsandboxedWorkflowRunner(),
    )
    # A bare Worker has no plugin to close the Anthropic client its model calls open: closed here, as a worker does.
    async with claude.running(), worker:
        yield worker


def count(history: WorkflowHistory, field: str) -> int:
    return sum(1 for e in history.events if e.HasField(field))


def markers(history: WorkflowHistory, patch: str = PATCH) -> int:
    """The markers of ``patch`` (the released versions record their own patches' markers too)."""
    return sum(
        1
        for e in history.events
        if e.HasField("marker_recorded_event_attributes")
        and patch.encode() in e.marker_recorded_event_attributes.SerializeToString()
    )


async def test_a_run_started_on_v1_completes_on_v2_and_new_runs_take_the_new_path(
    client: Client, fake_api: FakeMessagesAPI
) -> None:
    queue = f"upgrade-{uuid.uuid4()}"
    claude = ClaudeActivities(anthropic_client_factory(fake_api))
    fake_api.script(end_turn("v1 wrote this"), end_turn("v2 answered the old run"), end_turn("a new run on v2"))
    runner = AgentRunner(client, task_queue=queue)
    hi = [{"role": "user", "content": "Hi"}]
    async with build_worker(client, task_queue=queue, claude=claude):
        old = await runner.start(model="claude-fake-1", max_tokens=64, messages=hi, step=True)
        await wait_status(old, "waiting_for_step", 1)
        await old.inject("And now?")
    async with replaying_worker(client, queue, claude):  # the fleet moved to v2 while the run waited
        await old.advance()
        await wait_status(old, "waiting_for_step", 2)
        await old.advance()
        old_result = await old.result()
        old_history = await old.handle.fetch_history()
        new = await runner.start(model="claude-fake-1", max_tokens=64, messages=hi)
        await new.result()
        new_history = await new.handle.fetch_history()
    assert old_result.status == "completed" and old_result.iterations == 2
    assert fake_api.bodies()[1]["messages"][-1]["content"] == [{"type": "text", "text": "And now?"}]
    assert markers(old_history) == 0  # the old run kept the old path
    assert count(old_history, "timer_started_event_attributes") == 0
    assert markers(new_history) == 1  # a new run takes the new one
    assert count(new_history, "timer_started_event_attributes") == 1
