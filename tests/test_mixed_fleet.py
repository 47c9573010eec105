"""A fleet whose workers do not all register the same tools (a rolling upgrade that adds one): a run naming a tool
some workers of its queue lack starts and calls it on the ones that have it.

A worker that lacks a tool hands the lookup, or the call, back to the queue (``activities/tools.py``, ``hand_back``):
a retry goes through the queue, so a worker that has the tool gets it. Each test starts the worker without the tool
first, so it is the one the run (or the call) meets first, whatever the server's choice of poller.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import threading
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from temporalio import activity
from temporalio.client import Client
from temporalio.common import RetryPolicy
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from agent_runner.activities.claude import ClaudeActivities
from agent_runner.activities.tools import ToolRegistry
from agent_runner.client import AgentRunner, Run
from agent_runner.contract.types import (
    CREATE_MESSAGE_ACTIVITY,
    DESCRIBE_TOOLS_ACTIVITY,
    NOT_SERVED_ERROR,
    RUN_TOOL_ACTIVITY,
    TOOLS_NOT_HERE_ERROR,
)
from agent_runner.plugin import AgentRunnerPlugin
from agent_runner.testing import FakeMessagesAPI, Reply, end_turn, tool_use
from agent_runner.worker import build_worker
from tests.conftest import WorkerFactory, anthropic_client_factory
from tests.test_no_wedge import RAN, launch

BASE: dict[str, Any] = {"model": "claude-fake-1", "max_tokens": 256, "thread": False}
USER = {"role": "user", "content": "Launch it."}


async def until_pending(run: Run, activity_type: str, *, past_attempt: int = 0) -> None:
    """Wait until the run's ``activity_type`` activity is pending, at an attempt past ``past_attempt``."""

    async def pending() -> bool:
        activities = (await run.handle.describe()).raw_description.pending_activities
        return any(a.activity_type.name == activity_type and a.attempt > past_attempt for a in activities)

    async with asyncio.timeout(15):
        while not await pending():
            await asyncio.sleep(0.05)


async def handed_back(run: Run, activity_type: str) -> None:
    """Wait until the run's ``activity_type`` activity was handed back (its attempt is past the first)."""
    await until_pending(run, activity_type, past_attempt=1)


@contextlib.contextmanager
def when_a_worker_begins_shutting_down(event: threading.Event) -> Iterator[None]:
    """Set ``event`` as a worker begins its shutdown: once it logs so, it polls for no more tasks."""

    class Handler(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.getMessage().startswith("Beginning worker shutdown"):
                event.set()

    sdk_logger = logging.getLogger("temporalio.worker._worker")  # the SDK's Worker logs there as it shuts down
    handler, level = Handler(), sdk_logger.level
    sdk_logger.addHandler(handler)
    sdk_logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        sdk_logger.removeHandler(handler)
        sdk_logger.setLevel(level)
        event.set()


async def another_client(client: Client) -> Client:
    """A second client of ``client``'s server: the SDK refuses a second worker of one kind on one client's queue."""
    return await Client.connect(
        client.service_client.config.target_host, namespace=client.namespace, data_converter=client.data_converter
    )


async def with_launch(client: Client, runner: AgentRunner, fake_api: FakeMessagesAPI) -> Any:
    """A worker that registers ``launch``, on a client of its own."""
    claude = ClaudeActivities(anthropic_client_factory(fake_api))
    other = await another_client(client)
    return build_worker(other, registry=ToolRegistry([launch]), task_queue=runner.task_queue, claude=claude)


async def test_a_run_naming_a_tool_its_first_worker_lacks_looks_it_up_on_one_that_has_it(
    client: Client, runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    RAN.clear()
    fake_api.script(Reply([tool_use("toolu_1", "launch", {"target": "a"})], "tool_use"), end_turn("Done."))
    async with worker():  # no tools: the run's first workflow task, and its lookup, are this worker's
        run = await runner.start(**BASE, messages=[USER], tools=["launch"])
        await handed_back(run, DESCRIBE_TOOLS_ACTIVITY)
        async with await with_launch(client, runner, fake_api):
            result = await run.result()
    assert (result.status, result.iterations, RAN) == ("completed", 2, ["a"])
    assert fake_api.bodies()[0]["tools"] == [launch.to_dict()]
    assert fake_api.bodies()[1]["messages"][-1]["content"] == [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "launched a"}
    ]


async def test_a_call_that_meets_a_worker_without_its_tool_runs_once_on_one_that_has_it(
    client: Client, runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    RAN.clear()
    replied = threading.Event()
    fake_api.script(
        Reply([tool_use("toolu_1", "launch", {"target": "b"})], "tool_use", until=replied), end_turn("Done.")
    )
    with when_a_worker_begins_shutting_down(replied):  # Claude's reply is held until then
        async with await with_launch(client, runner, fake_api):
            run = await runner.start(**BASE, messages=[USER], tools=["launch"])
            async with asyncio.timeout(15):
                while not fake_api.requests:
                    await asyncio.sleep(0.05)
    # The worker that looked the tool up is gone before Claude's reply calls it; the one left lacks it.
    async with worker():
        await handed_back(run, RUN_TOOL_ACTIVITY)
        assert RAN == []
        async with await with_launch(client, runner, fake_api):
            result = await run.result()
    assert (result.status, RAN) == ("completed", ["b"])
    assert fake_api.bodies()[1]["messages"][-1]["content"] == [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "launched b"}
    ]


def dynamic_activity(serve: tuple[str, ...]) -> Any:
    """The dynamic activity a worker serving ``serve`` registers (the SDK's definition has no name)."""
    (dynamic,) = [fn for fn in AgentRunnerPlugin(serve=serve).activities if not _name(fn)]
    return dynamic


def _name(fn: Any) -> str | None:
    return activity._Definition.must_from_callable(fn).name


@pytest.mark.parametrize("activity_type", [CREATE_MESSAGE_ACTIVITY, RUN_TOOL_ACTIVITY, DESCRIBE_TOOLS_ACTIVITY])
async def test_a_task_of_a_role_a_worker_does_not_serve_is_handed_back_and_its_last_attempt_says_what_to_start(
    activity_type: str,
) -> None:
    """A queue's task may reach any worker polling it: one split by role hands back what it does not run."""
    not_served = dynamic_activity(("tools",))
    environment = ActivityEnvironment()
    info = dataclasses.replace(
        environment.info, activity_type=activity_type, task_queue="runs", retry_policy=RetryPolicy(maximum_attempts=3)
    )
    environment.info = dataclasses.replace(info, attempt=2)
    with pytest.raises(ApplicationError) as handed:
        await environment.run(not_served, [])
    assert (handed.value.message, handed.value.type, handed.value.non_retryable, handed.value.next_retry_delay) == (
        f"This worker does not have what {activity_type} (it serves tools) needs: it handed it back to task queue "
        "'runs', for a worker that has (attempt 2 of 3).",
        TOOLS_NOT_HERE_ERROR,
        False,
        timedelta(seconds=1),
    )
    environment.info = dataclasses.replace(info, attempt=3)
    with pytest.raises(ApplicationError) as last:
        await environment.run(not_served, [])
    assert (last.value.message, last.value.type, last.value.non_retryable) == (
        f"{activity_type} reached its last attempt on a worker of task queue 'runs' that does not run it (it serves "
        "tools): start a worker that serves all of its roles on that queue (python worker.py, or --serve "
        "workflows,model,tools), or give model calls and tools queues of their own (--model-task-queue, "
        "tool_options(task_queue=...)) so each queue's workers run the same activities.",
        NOT_SERVED_ERROR,
        True,
    )


def test_a_worker_that_serves_every_role_has_no_dynamic_activity_of_its_own() -> None:
    """The dynamic activity is the role-split worker's: one embedding the plugin with every role keeps its own."""
    assert all(_name(fn) for fn in AgentRunnerPlugin().activities)


async def test_a_task_of_unlimited_attempts_a_worker_does_not_serve_is_handed_back_every_time() -> None:
    """It waits for a worker that serves it, as in a queue no worker polls, rather than fail its run."""
    not_served = dynamic_activity(("workflows",))
    environment = ActivityEnvironment()
    environment.info = dataclasses.replace(
        environment.info,
        activity_type=CREATE_MESSAGE_ACTIVITY,
        task_queue="runs",
        retry_policy=RetryPolicy(maximum_attempts=0),
        attempt=25,
    )
    with pytest.raises(ApplicationError) as handed:
        await environment.run(not_served, [])
    assert (handed.value.message, handed.value.type, handed.value.non_retryable) == (
        f"This worker does not have what {CREATE_MESSAGE_ACTIVITY} (it serves workflows) needs: it handed it back to "
        "task queue 'runs', for a worker that has (attempt 25 of unlimited).",
        TOOLS_NOT_HERE_ERROR,
        False,
    )
