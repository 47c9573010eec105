"""Local tools (``tool_options(local=True)``): a quick tool's calls run as local activities on the run's own worker.

Claude must not be able to tell: the request bodies and ``tool_result`` blocks are those of the same tool run as a
regular activity, its errors and timeouts read the same, and a worker running the run without the tool sends the call
through the queue. What changes is the history: one marker for the call instead of an activity and the workflow task
that reads its result. A worker killed mid-call is the last test (slow tier).
"""

from __future__ import annotations

import asyncio
import dataclasses
import signal
import threading
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from anthropic import beta_async_tool, beta_tool
from anthropic.lib.tools import ToolError
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHistory
from temporalio.testing import ActivityEnvironment

from agent_runner.activities.claude import ClaudeActivities
from agent_runner.activities.tools import ToolActivities, ToolRegistry, tool_options
from agent_runner.client import AgentRunner
from agent_runner.contract.errors import ToolRegistrationError
from agent_runner.contract.types import (
    DESCRIBE_TOOLS_ACTIVITY,
    RUN_TOOL_ACTIVITY,
    RunResult,
    RunToolInput,
    ToolResult,
)
from agent_runner.testing import FakeMessagesAPI, Reply, end_turn, text, tool_use
from agent_runner.worker import WorkerTuning, build_worker
from tests.conftest import WorkerFactory, anthropic_client_factory, scheduled_activities
from tests.steering_support import delete_file, wait_status
from tests.test_durability import wait_for, worker_process
from tests.test_ended_runs import printed_transcript, tool_finished
from tests.test_mixed_fleet import another_client, handed_back

BASE: dict[str, Any] = {"model": "claude-fake-1", "max_tokens": 256, "thread": False}
USER = {"role": "user", "content": "What is the weather in Paris?"}

CALLS: list[str] = []
"""Every call the tools below received, in order."""


@pytest.fixture(autouse=True)
def clean_calls() -> None:
    CALLS.clear()


def weather_tool(*, local: bool) -> Any:
    """The same ``weather`` tool, run as a local activity or not."""

    @tool_options(local=local)
    @beta_tool(name="weather")
    def weather(city: str) -> str:
        """Get the weather for a city.

        Args:
            city: The city.
        """
        CALLS.append(city)
        if city == "Atlantis":
            raise ToolError(f"No weather station in {city}: ask for a real city.")
        return f"sunny in {city}"

    return weather


@tool_options(local=True, start_to_close_timeout=timedelta(seconds=1), maximum_attempts=2)
@beta_async_tool
async def stuck_local(job: str) -> str:
    """A local tool slower than its timeout.

    Args:
        job: The job.
    """
    CALLS.append(f"start {job}")
    await asyncio.sleep(30)
    return "never"


@tool_options(local=True)
@beta_async_tool
async def slow_local(job: str) -> str:
    """A local tool that runs for longer than a few heartbeat intervals.

    Args:
        job: The job.
    """
    CALLS.append(job)
    await asyncio.sleep(0.5)
    return f"did {job}"


def asks(name: str, **tool_input: Any) -> Reply:
    return Reply(content=[text("Checking."), tool_use("toolu_1", name, tool_input)], stop_reason="tool_use")


def markers(history: WorkflowHistory) -> int:
    """Local activities' markers (not patches')."""
    return sum(
        1
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_MARKER_RECORDED
        and e.marker_recorded_event_attributes.marker_name == "core_local_activity"
    )


async def run_once(runner: AgentRunner, tool: Any) -> tuple[RunResult, WorkflowHistory]:
    run = await runner.start(**BASE, messages=[USER], tools=[tool])
    result = RunResult.model_validate(await run.handle.result())
    return result, await run.handle.fetch_history()


# ------------------------------------------------------------------------------------------------ Claude sees no change


@pytest.mark.parametrize(
    ("city", "expected"),
    [
        ("Paris", {"content": "sunny in Paris"}),
        ("Atlantis", {"is_error": True, "content": "No weather station in Atlantis: ask for a real city."}),
    ],
)
async def test_a_local_call_sends_claude_what_a_regular_one_does_and_leaves_a_marker_not_an_activity(
    city: str, expected: dict[str, Any], runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    histories, bodies = {}, {}
    for local in (False, True):
        fake_api.reset()
        fake_api.script(asks("weather", city=city), end_turn("Done."))
        async with worker(weather_tool(local=local)):
            result, histories[local] = await run_once(runner, weather_tool(local=local))
        assert (result.status, result.iterations) == ("completed", 2)
        bodies[local] = fake_api.bodies()
    assert CALLS == [city, city]  # once per run
    assert bodies[True] == bodies[False]  # every request, byte for byte as JSON
    assert bodies[True][1]["messages"][-1] == {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "toolu_1", **expected}],
    }
    assert len(scheduled_activities(histories[False], RUN_TOOL_ACTIVITY)) == 1
    assert scheduled_activities(histories[True], RUN_TOOL_ACTIVITY) == []
    # The lookup is a marker in both; the local call adds one, in place of the activity's 3 events and the
    # workflow task's 3 that read its result.
    assert (markers(histories[False]), markers(histories[True])) == (1, 2)
    assert len(histories[False].events) - len(histories[True].events) == 5


async def test_a_local_tool_past_its_timeout_is_cancelled_then_retried_within_its_attempts(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    fake_api.script(asks("stuck_local", job="j1"))
    async with worker(stuck_local):
        run = await runner.start(**BASE, messages=[USER], tools=[stuck_local])
        with pytest.raises(Exception) as failure:
            await run.handle.result()
    assert CALLS == ["start j1", "start j1"]  # maximum_attempts=2, one after the other
    cause = failure.value.cause  # type: ignore[attr-defined]
    assert (cause.type, cause.message) == (
        "ToolTimedOut",
        "Tool 'stuck_local' could not be run in 2 attempts: Tool 'stuck_local' did not finish within 1 s; it was "
        "cancelled. Check the workers that serve it (their logs say why), then fork the run from its last turn to "
        "go on.",
    )
    assert len(fake_api.requests) == 1


@pytest.mark.parametrize("is_local", [True, False])
async def test_a_local_call_sends_no_heartbeat_where_a_regular_one_does(is_local: bool) -> None:
    """A local activity has no heartbeats: the worker's core refuses each with a warning. The same call made as a
    regular activity heartbeats every 0.2 s here (``heartbeat_every``) while the tool runs its 0.5 s."""
    environment = ActivityEnvironment()
    environment.info = dataclasses.replace(
        environment.info, is_local=is_local, heartbeat_timeout=None, start_to_close_timeout=timedelta(seconds=30)
    )
    sent: list[tuple[Any, ...]] = []
    environment.on_heartbeat = lambda *details: sent.append(details)
    activities = ToolActivities(ToolRegistry([slow_local]), heartbeat_every=0.2)
    call = RunToolInput(name="slow_local", tool_use_id="toolu_1", input={"job": "j1"}, run_id="run-1", iteration=1)
    result = await environment.run(activities.run_local_tool if is_local else activities.run_tool, call)
    assert result == ToolResult(content="did j1")
    assert bool(sent) is not is_local  # how many a regular call sends depends on the clock: at least one


@pytest.mark.usefixtures("temporal_address")  # the CLI's server
async def test_an_ended_runs_transcript_holds_its_local_calls_results_read_from_history(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run ended while a call waited for approval, after its local call ran: the conversation it shows ends with
    that call's result, which only the call's marker holds (read with no worker: ``console/ended.py``)."""
    tool = weather_tool(local=True)
    reply = Reply(
        [tool_use("toolu_P", "weather", {"city": "Paris"}), tool_use("toolu_D", "delete_file", {"path": "/tmp"})],
        "tool_use",
    )
    fake_api.script(reply)
    async with worker(tool, delete_file):
        run = await runner.start(
            **BASE, messages=[USER], tools=[tool, delete_file], approval={"tools": ["delete_file"]}
        )
        await wait_status(run, "waiting_for_approval")
        await tool_finished(run, "toolu_P")
    await run.terminate("runaway")
    printed, note = await printed_transcript(runner, run, capsys)
    assert printed == [
        USER,
        {"role": "assistant", "content": reply.content},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_P", "content": "sunny in Paris"}]},
    ]
    assert note == (
        f"note: run {run.id} ended (terminated) before these tool calls completed: delete_file (toolu_D). The "
        "conversation ends with the results of those that did.\n"
    )


GATE = threading.Event()


@tool_options(local=True)
@beta_tool
def gated_local(job: str) -> str:
    """A local tool that runs until the test opens its gate.

    Args:
        job: The job.
    """
    CALLS.append(job)
    GATE.wait(30)
    return f"did {job}"


async def test_queries_and_updates_wait_for_a_running_local_call(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """The README's caveat: a local call holds the run's workflow task, so the run answers once the call is done (or
    the worker reports it still running, every 8 s), and an edit is accepted after the model call that follows."""
    GATE.clear()
    fake_api.script(asks("gated_local", job="j1"), end_turn("Never sent."))
    async with worker(gated_local):
        run = await runner.start(**BASE, messages=[USER], tools=[gated_local])
        async with asyncio.timeout(15):
            while CALLS != ["j1"]:
                await asyncio.sleep(0.05)
        status, stop = asyncio.create_task(run.status()), asyncio.create_task(run.stop("enough"))
        await asyncio.sleep(1)
        assert not status.done() and not stop.done()
        GATE.set()
        async with asyncio.timeout(15):
            assert (await status).status == "running"
            await stop
        result = await run.result()
    assert (result.status, CALLS) == ("stopped", ["j1"])
    # The stop was accepted only after the call, by when the workflow task that ran it had sent its result to Claude:
    # a regular call's run would have stopped before that request.
    assert len(fake_api.requests) == 2


# ------------------------------------------------------------------------------------------------ fleets


async def test_a_local_call_on_a_worker_that_serves_no_tools_goes_through_the_queue_to_one_that_does(
    client: Client, runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """The run's worker serves no tools: it refuses the local call, and hands back the regular one it is offered.

    Which worker of a queue gets a task is Temporal's choice, so the worker with the tool starts once the call was
    handed back, after the one without tools stopped (a fleet moving from one to the other).
    """
    tool = weather_tool(local=True)
    fake_api.script(asks("weather", city="Paris"), end_turn("Done."))
    claude = ClaudeActivities(anthropic_client_factory(fake_api))
    no_tools = build_worker(
        client, registry=ToolRegistry([tool]), task_queue=runner.task_queue, claude=claude, serve=("workflows", "model")
    )
    async with no_tools:
        run = await runner.start(**BASE, messages=[USER], tools=["weather"])
        await handed_back(run, RUN_TOOL_ACTIVITY)
        (pending,) = (await run.handle.describe()).raw_description.pending_activities
    assert pending.last_failure.message == (
        f"This worker does not have what {RUN_TOOL_ACTIVITY} (it serves workflows,model) needs: it handed it back to "
        f"task queue {runner.task_queue!r}, for a worker that has (attempt {pending.attempt - 1} of 10)."
    )
    assert CALLS == []
    async with worker(tool):
        result = await run.result()
    assert result.status == "completed"
    assert CALLS == ["Paris"]
    assert fake_api.bodies()[1]["messages"][-1]["content"] == [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny in Paris"}
    ]
    history = await run.handle.fetch_history()
    # The lookup's marker, the local attempt's (it failed at once), then one activity through the queue.
    assert markers(history) == 2
    assert len(scheduled_activities(history, RUN_TOOL_ACTIVITY)) == 1


async def test_a_local_call_on_a_worker_that_lacks_the_tool_goes_through_the_queue_to_one_that_has_it(
    client: Client, runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """A rolling upgrade: the run's worker lacks the tool, which another worker of its queue has."""
    tool = weather_tool(local=True)
    fake_api.script(asks("weather", city="Paris"), end_turn("Done."))
    # Alone when the run starts, so the run is its own: its sticky cache brings the run's tasks back to it (a cache
    # even under AGENT_RUNNER_TEST_UNCACHED, which would send them to either worker).
    async with worker(tuning=WorkerTuning()):
        run = await runner.start(**BASE, messages=[USER], tools=["weather"])
        await handed_back(run, DESCRIBE_TOOLS_ACTIVITY)  # it lacks the tool: the lookup went round the queue
        claude = ClaudeActivities(anthropic_client_factory(fake_api))
        other = await another_client(client)
        async with build_worker(other, registry=ToolRegistry([tool]), task_queue=runner.task_queue, claude=claude):
            result = await run.result()
    assert (result.status, CALLS) == ("completed", ["Paris"])
    assert fake_api.bodies()[1]["messages"][-1]["content"] == [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny in Paris"}
    ]
    history = await run.handle.fetch_history()
    # The lookup's marker (it found nothing), the local attempt's (it failed at once), one activity through the queue.
    assert markers(history) == 2
    assert len(scheduled_activities(history, RUN_TOOL_ACTIVITY)) == 1


# ------------------------------------------------------------------------------------------------ registration


def test_options_a_local_call_cannot_keep_are_refused_at_registration() -> None:
    with pytest.raises(ToolRegistrationError) as refused:
        tool_options(local=True, effects="at_most_once")
    assert str(refused.value) == (
        "tool_options(local=True) cannot take effects='at_most_once' (a local call lost with its worker runs again, "
        "so its outcome cannot be told unknown): drop local=True."
    )
    with pytest.raises(ToolRegistrationError) as refused:
        tool_options(local=True, task_queue="gpu", heartbeat_timeout=timedelta(seconds=5))
    assert str(refused.value) == (
        "tool_options(local=True) cannot take task_queue= (a local call runs on the worker running the run): drop "
        "one of them; nor heartbeat_timeout= (a local call sends no heartbeats; a lost worker's call runs again after "
        "the run's workflow task timeout): drop it."
    )


# ------------------------------------------------------------------------------------------------ kill -9 (slow tier)


@pytest.mark.slow
async def test_a_worker_killed_mid_local_call_runs_it_again_on_another_worker(
    client: Client, task_queue: str, fake_api: FakeMessagesAPI, tmp_path: Path
) -> None:
    """At least once: the call dies with its worker's workflow task, and the next worker runs it from the start."""
    effects, log = tmp_path / "effects.txt", tmp_path / "worker.log"
    address = client.service_client.config.target_host
    env = {"AGENT_RUNNER_TEST_EFFECTS": str(effects), "AGENT_RUNNER_TEST_SLOW_SECONDS": "30"}
    fake_api.script(asks("count_local", label="sheep"), end_turn("Done."))
    runner = AgentRunner(client, task_queue=task_queue)
    with worker_process(address, task_queue, fake_api, tmp_path / "marks", log, env=env) as first:
        run = await runner.start(**BASE, messages=[USER], tools=["count_local"])
        await wait_for(lambda: _lines(effects)[:1] == [f"start sheep {first.pid}"], "the call")
        first.send_signal(signal.SIGKILL)
        first.wait()
    env["AGENT_RUNNER_TEST_SLOW_SECONDS"] = "0"
    with worker_process(address, task_queue, fake_api, tmp_path / "marks", log, env=env) as second:
        result = RunResult.model_validate(await run.handle.result())
    assert result.status == "completed"
    assert _lines(effects) == [f"start sheep {first.pid}", f"start sheep {second.pid}"]
    assert fake_api.bodies()[1]["messages"][-1]["content"] == [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "counted sheep"}
    ]


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []
