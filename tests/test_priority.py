"""Priority and fairness keys: a run started with a ``Priority`` carries it everywhere it queues work.

Each test runs a real worker against a real dev server and the fake Messages API. What Temporal recorded is read from
the run's history: the priority on the run's start event, on each continuation's start (the server carries it over
continue-as-new) and on a sub-agent child's start (the server gives the child its parent's). A model or tool call's
scheduled event sets no priority of its own: an empty one, which the server fills with its run's when it queues the
call (the worker's ``activity.info().priority`` shows only the empty one). That the calls are queued under their
run's keys is shown by behaviour, on a server the fairness test starts with ``matching.enableFairness``: one tenant's
backlog of model calls does not starve another's, and a lower priority key goes first.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import uuid
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType, TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client
from temporalio.common import Priority
from temporalio.service import RPCError, RPCStatusCode
from temporalio.testing import WorkflowEnvironment

from agent_runner import cli
from agent_runner.activities.claude import ClaudeActivities
from agent_runner.client import AgentRunner
from agent_runner.connection import data_converter
from agent_runner.contract.errors import InvalidRunInput
from agent_runner.schedules import delete_schedule, describe_schedule
from agent_runner.testing import FakeMessagesAPI, end_turn
from agent_runner.worker import WorkerTuning, build_worker
from tests.conftest import FAST_SERVER_ARGS, TEMPORAL_BIN, WorkerFactory, anthropic_client_factory, fake_claude_worker
from tests.subagent_support import BASE, RESEARCHER, USER, weather_research
from tests.test_long_runs import BASE as LONG_BASE
from tests.test_long_runs import script
from tests.tools_for_tests import get_weather

TENANT = Priority(priority_key=2, fairness_key="tenant-42", fairness_weight=2.5)
TENANT_FLAGS = ["--priority-key", "2", "--fairness-key", "tenant-42", "--fairness-weight", "2.5"]
"""``TENANT`` as the command line gives it."""
NONE = Priority.default


async def recorded(client: Client, workflow_id: str, run_id: str | None = None) -> list[tuple[str, Priority]]:
    """The priority each start, activity scheduling and child start of one execution recorded, in history order."""
    out: list[tuple[str, Priority]] = []
    async for e in client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history_events():
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
            out.append(("start", Priority._from_proto(e.workflow_execution_started_event_attributes.priority)))
        elif e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            scheduled = e.activity_task_scheduled_event_attributes
            out.append((scheduled.activity_type.name, Priority._from_proto(scheduled.priority)))
        elif e.event_type == EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED:
            child = e.start_child_workflow_execution_initiated_event_attributes
            out.append(("child", Priority._from_proto(child.priority)))
    return out


async def test_a_runs_priority_is_on_its_start_and_its_sub_agents_and_its_calls_inherit_it(
    client: Client, task_queue: str, fake_api: FakeMessagesAPI
) -> None:
    fake_api.responder = weather_research()
    runner = AgentRunner(client, task_queue=task_queue)
    async with fake_claude_worker(client, fake_api, task_queue, get_weather):
        run = await runner.start(**BASE, messages=[USER], thread=False, agents=[RESEARCHER], priority=TENANT)
        await run.until_done()
    child_id = f"{run.id}/toolu_P1"

    # The run's start event has its priority; its calls and its child's start set none (they inherit it).
    assert await recorded(client, run.id) == [
        ("start", TENANT),
        ("agent_runner.create_message", NONE),
        ("child", NONE),
        ("agent_runner.create_message", NONE),
    ]
    # Temporal started the child with its parent's priority, and the child's calls inherit it in turn.
    assert await recorded(client, child_id) == [
        ("start", TENANT),
        ("agent_runner.create_message", NONE),
        ("agent_runner.run_tool", NONE),
        ("agent_runner.create_message", NONE),
    ]


async def test_a_runs_priority_goes_on_through_continue_as_new(
    client: Client, task_queue: str, fake_api: FakeMessagesAPI
) -> None:
    script(fake_api)  # eight tool turns, then the end: with a 40-event limit, several executions
    runner = AgentRunner(client, task_queue=task_queue)
    async with fake_claude_worker(client, fake_api, task_queue, get_weather):
        run = await runner.start(**LONG_BASE, tools=[get_weather], continue_as_new={"events": 40}, priority=TENANT)
        result = await run.result()
        status = await run.status()
    assert result.status == "completed" and result.iterations == 9
    assert status.continuations >= 2

    executions = [run.handle.first_execution_run_id]
    while True:
        description = await client.get_workflow_handle(run.id, run_id=executions[-1]).describe()
        assert run_priority_of(description) == TENANT
        history = await client.get_workflow_handle(run.id, run_id=executions[-1]).fetch_history()
        ended = history.events[-1]
        if ended.event_type != EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
            break
        executions.append(ended.workflow_execution_continued_as_new_event_attributes.new_execution_run_id)
    assert len(executions) == status.continuations + 1
    for execution in executions:
        events = await recorded(client, run.id, execution)
        assert events[0] == ("start", TENANT)  # each continuation's start: the server carried it over
        assert {priority for _, priority in events[1:]} == {NONE}


def run_priority_of(description: Any) -> Priority:
    return Priority._from_proto(description.raw_description.workflow_execution_info.priority)


BACKLOG = 10
"""Tenant A's runs queued ahead of tenant B's one."""


async def model_call_scheduled(client: Client, run_id: str) -> None:
    """Wait until the run's first model call is scheduled."""
    handle = client.get_workflow_handle(run_id)
    async with asyncio.timeout(30):
        while not (await handle.describe()).raw_description.pending_activities:
            await asyncio.sleep(0.1)


async def backlog_reaches(client: Client, task_queue: str, count: int) -> None:
    """Wait until ``count`` activity tasks wait in ``task_queue``'s backlog (the server's count, refreshed every few
    seconds)."""
    request = DescribeTaskQueueRequest(
        namespace=client.namespace,
        task_queue=TaskQueue(name=task_queue),
        task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY,
        report_stats=True,
    )
    async with asyncio.timeout(30):
        while (await client.workflow_service.describe_task_queue(request)).stats.approximate_backlog_count < count:
            await asyncio.sleep(0.1)


@pytest.mark.parametrize(
    ("fairness", "b", "place"),
    [
        (True, Priority(fairness_key="B"), 1),
        (False, Priority(fairness_key="B"), BACKLOG),
        (True, Priority(priority_key=1, fairness_key="B"), 0),
    ],
    ids=["fairness_on", "fairness_off", "fairness_on_and_first_priority"],
)
async def test_with_fairness_on_one_tenants_backlog_does_not_starve_anothers_run(
    task_queue: str, fake_api: FakeMessagesAPI, fairness: bool, b: Priority, place: int
) -> None:
    """On a server with ``matching.enableFairness``, a worker with one model-call slot serves tenant B's one run
    second, before tenant A's backlog of ten, queued first, drains (first, with a higher priority key); with fairness
    off, B waits for all ten."""
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=TEMPORAL_BIN,
        dev_server_extra_args=[
            *FAST_SERVER_ARGS,
            *("--dynamic-config-value", f"matching.enableFairness={str(fairness).lower()}"),
            # One partition per queue: a backlog is one ordered queue, not four served in turn.
            *("--dynamic-config-value", "matching.numTaskqueueReadPartitions=1"),
            *("--dynamic-config-value", "matching.numTaskqueueWritePartitions=1"),
        ],
        data_converter=data_converter({}),
    )
    fake_api.responder = lambda _body: end_turn("ok")
    model_queue = f"{task_queue}-model"
    try:
        client = env.client
        runner = AgentRunner(client, task_queue=task_queue)
        async with build_worker(client, task_queue=task_queue, serve=("workflows",), model_task_queue=model_queue):
            # Nothing serves model calls yet: A's ten, then B's one, wait in the model queue's backlog, in order.
            runs = []
            for i in range(BACKLOG):
                runs.append(
                    await runner.start(
                        **BASE, messages=[{"role": "user", "content": f"A{i}"}], priority=Priority(fairness_key="A")
                    )
                )
                await model_call_scheduled(client, runs[-1].id)  # each in turn: the backlog's order is ours
            runs.append(await runner.start(**BASE, messages=[{"role": "user", "content": "B"}], priority=b))
            await model_call_scheduled(client, runs[-1].id)
            await backlog_reaches(client, model_queue, BACKLOG + 1)  # all in the queue before a worker polls it
            one_slot = build_worker(
                client,
                task_queue=model_queue,
                serve=("model",),
                claude=ClaudeActivities(anthropic_client_factory(fake_api)),
                tuning=WorkerTuning(max_concurrent_activities=1),
            )
            async with one_slot:
                for run in runs:
                    await run.until_done()
    finally:
        await env.shutdown()
    served = [body["messages"][0]["content"] for body in fake_api.bodies()]
    backlog = [f"A{i}" for i in range(BACKLOG)]
    # By fairness B's key, which had no turn yet, goes next to A's, which had one; first in first out, B goes last;
    # a higher priority (a lower key) goes before any fairness.
    assert served == [*backlog[:place], "B", *backlog[place:]]


async def test_a_fork_and_a_send_keep_the_runs_priority_unless_given_their_own(
    runner: AgentRunner, client: Client, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    fake_api.responder = lambda _body: end_turn("ok")
    other = Priority(priority_key=4, fairness_key="tenant-7")
    async with worker():
        run = await runner.start(**BASE, messages=[USER], priority=TENANT)
        await run.until_done()
        sent = await run.send("And tomorrow?")
        forked = await run.fork(1, priority=other)
        plain = await runner.start(**BASE, messages=[USER])
        for new in (sent, forked, plain):
            await new.until_done()
    assert await run.priority() == await sent.priority() == TENANT
    assert await forked.priority() == other
    assert await plain.priority() is None
    assert (await recorded(client, sent.id))[0] == ("start", TENANT)
    assert (await recorded(client, forked.id))[0] == ("start", other)
    assert (await recorded(client, plain.id))[0] == ("start", NONE)


@pytest.mark.parametrize(
    ("priority", "message"),
    [
        (
            Priority(priority_key=6),
            "The run was not started: the priority key must be an integer from 1 (first) to 5 (last), got 6.",
        ),
        (
            Priority(fairness_key="é" * 33),
            "The run was not started: the fairness key must be at most 64 bytes (UTF-8), got 66: use a shorter "
            "tenant id, or a hash of it.",
        ),
        (
            Priority(fairness_key="tenant-1", fairness_weight=0.0005),
            "The run was not started: the fairness weight must be from 0.001 to 1000, got 0.0005.",
        ),
        (
            Priority(priority_key=9, fairness_weight=1001.0),
            "The run was not started: the priority key must be an integer from 1 (first) to 5 (last), got 9; the "
            "fairness weight must be from 0.001 to 1000, got 1001.0.",
        ),
    ],
    ids=["priority_key", "fairness_key", "fairness_weight", "two"],
)
async def test_a_priority_out_of_the_servers_range_is_refused_before_anything_starts(
    runner: AgentRunner, client: Client, priority: Priority, message: str
) -> None:
    run_id = f"never-{uuid.uuid4()}"
    with pytest.raises(InvalidRunInput) as refused:
        await runner.start(**BASE, messages=[USER], id=run_id, priority=priority)
    assert str(refused.value) == message
    with pytest.raises(RPCError) as missing:
        await client.get_workflow_handle(run_id).describe()
    assert missing.value.status == RPCStatusCode.NOT_FOUND


@pytest.mark.usefixtures("temporal_address")
async def test_the_command_line_starts_a_run_with_a_priority_and_forks_and_sends_it_on(
    runner: AgentRunner,
    worker: WorkerFactory,
    fake_api: FakeMessagesAPI,
    task_queue: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    fake_api.responder = lambda _body: end_turn("ok")
    queue = ["--task-queue", task_queue, "--detach"]
    async with worker():
        assert await cli.amain(["run", "Hi", *TENANT_FLAGS, *queue]) == 0
        run = runner.attach(capsys.readouterr().out.strip())
        await run.until_done()
        # A fork keeps the original's priority but for the flags given; a send keeps it whole.
        assert await cli.amain(["fork", run.id, "--from-iteration", "1", "--fairness-key", "tenant-7", *queue]) == 0
        forked = runner.attach(capsys.readouterr().out.strip())
        assert await cli.amain(["send", run.id, "And tomorrow?", *queue]) == 0
        sent = runner.attach(capsys.readouterr().out.strip())
        await forked.until_done()
        await sent.until_done()
    assert await run.priority() == await sent.priority() == TENANT
    assert await forked.priority() == Priority(priority_key=2, fairness_key="tenant-7", fairness_weight=2.5)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            ["--priority-key", "6"],
            "argument --priority-key: the priority key must be an integer from 1 (first) to 5 (last), got 6",
        ),
        (["--priority-key", "high"], "argument --priority-key: expected an integer from 1 to 5, got 'high'"),
        (
            ["--fairness-key", "t" * 65],
            "argument --fairness-key: the fairness key must be at most 64 bytes (UTF-8), got 65: use a shorter "
            "tenant id, or a hash of it",
        ),
        (
            ["--fairness-key", " "],
            "argument --fairness-key: the fairness key must not be empty: give the tenant's id, e.g. 'tenant-42'",
        ),
        (
            ["--fairness-weight", "0"],
            "argument --fairness-weight: the fairness weight must be from 0.001 to 1000, got 0.0",
        ),
        (["--fairness-weight", "x"], "argument --fairness-weight: expected a number from 0.001 to 1000, got 'x'"),
    ],
    ids=["key_range", "key_not_int", "fairness_key_long", "fairness_key_empty", "weight_range", "weight_not_number"],
)
async def test_the_command_line_refuses_a_bad_priority_with_what_to_do(
    flags: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert await cli.amain(["run", "Hi", *flags]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == f"agent-runner run: error: {message}"


@pytest.mark.usefixtures("temporal_address")
async def test_a_schedules_runs_start_with_its_priority(
    runner: AgentRunner,
    client: Client,
    worker: WorkerFactory,
    fake_api: FakeMessagesAPI,
    task_queue: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    fake_api.responder = lambda _body: end_turn("ok")
    path = tmp_path / "run.json"
    path.write_text(json.dumps({**BASE, "messages": [USER]}))
    schedule_id = f"tenant-{uuid.uuid4().hex[:8]}"
    async with worker():
        argv = ["schedule", "--task-queue", task_queue, "create", schedule_id, "--file", str(path), "--every", "1h"]
        assert await cli.amain([*argv, "--now", *TENANT_FLAGS]) == 0
        capsys.readouterr()
        async with asyncio.timeout(20):
            while not (fired := await describe_schedule(runner, schedule_id)).recent_runs:
                await asyncio.sleep(0.2)
        await delete_schedule(runner, schedule_id)
        [first] = fired.recent_runs
        await runner.attach(first).until_done()
    assert (await recorded(client, first))[0] == ("start", TENANT)
    assert await runner.attach(first).priority() == TENANT


def readme_stock_start() -> str:
    """The README's ``temporal workflow start --fairness-key ...`` command (in the block that shows the flags)."""
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    blocks = re.findall(r"^```sh\n(.*?)^```$", readme, re.S | re.M)
    [block] = [b for b in blocks if "temporal workflow start" in b and "--fairness-key tenant-42" in b]
    return block[block.index("temporal workflow start") :].strip()


async def test_the_readmes_stock_cli_start_with_a_fairness_key_runs_with_it(
    client: Client, worker: WorkerFactory, fake_api: FakeMessagesAPI, task_queue: str
) -> None:
    fake_api.responder = lambda _body: end_turn("ok")
    run_id = f"stock-{uuid.uuid4()}"
    command = readme_stock_start().replace("--task-queue agent-runner", f"--task-queue {task_queue}")
    address = client.service_client.config.target_host
    async with worker():
        done = await asyncio.create_subprocess_exec(
            "bash",
            "-c",
            f"{command} --workflow-id {run_id} --address {address}",
            env={**os.environ, "PATH": f"{Path(TEMPORAL_BIN).parent}:{os.environ['PATH']}"},
        )
        assert await done.wait() == 0
        await AgentRunner(client, task_queue=task_queue).attach(run_id).until_done()
    assert (await recorded(client, run_id))[0] == ("start", Priority(priority_key=2, fairness_key="tenant-42"))
