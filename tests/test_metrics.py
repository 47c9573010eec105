"""Metrics: Temporal's worker metrics and ours on a Prometheus endpoint; replays count nothing twice."""

from __future__ import annotations

import uuid

import aiohttp
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig
from temporalio.testing import WorkflowEnvironment

from agent_runner.client import AgentRunner
from agent_runner.temporal_server import free_port
from agent_runner.testing import FakeMessagesAPI, Reply, end_turn, tool_use
from tests.conftest import fake_claude_worker
from tests.tools_for_tests import fail_disk, get_weather


async def test_iterations_tokens_and_tool_calls_appear_on_the_prometheus_endpoint(
    temporal_env: WorkflowEnvironment, fake_api: FakeMessagesAPI
) -> None:
    port = free_port()
    runtime = Runtime(telemetry=TelemetryConfig(metrics=PrometheusConfig(bind_address=f"127.0.0.1:{port}")))
    client = await Client.connect(
        temporal_env.client.service_client.config.target_host, runtime=runtime, data_converter=pydantic_data_converter
    )
    queue = f"metrics-{uuid.uuid4()}"
    fake_api.script(
        Reply(
            [tool_use("toolu_1", "get_weather", {"city": "Paris"}), tool_use("toolu_2", "fail_disk", {"path": "/"})],
            "tool_use",
            usage={"input_tokens": 100, "output_tokens": 20},
        ),
        end_turn("ok", usage={"input_tokens": 130, "output_tokens": 7}),
        # A second run, whose call is denied when its approval times out.
        Reply(
            [tool_use("toolu_3", "get_weather", {"city": "Oslo"})],
            "tool_use",
            usage={"input_tokens": 1, "output_tokens": 1},
        ),
        end_turn("no", usage={"input_tokens": 2, "output_tokens": 1}),
    )
    worker = fake_claude_worker(client, fake_api, queue, get_weather, fail_disk)
    async with worker:
        run = await AgentRunner(client, task_queue=queue).start(
            model="claude-fake-1",
            max_tokens=64,
            messages=[{"role": "user", "content": "Hi"}],
            tools=[get_weather, fail_disk],
            approval={"tools": ["get_weather"], "timeout": 0.2, "on_timeout": "approve"},
        )
        await run.until_done()
        denied = await AgentRunner(client, task_queue=queue).start(
            model="claude-fake-1",
            max_tokens=64,
            messages=[{"role": "user", "content": "Hi"}],
            tools=[get_weather],
            approval={"tools": ["get_weather"], "timeout": 0.2, "on_timeout": "deny"},
        )
        await denied.until_done()
        async with aiohttp.ClientSession() as session, session.get(f"http://127.0.0.1:{port}/metrics") as response:
            text = await response.text()
    lines = [line for line in text.splitlines() if line.startswith("agent_runner_")]

    def value(name: str, **labels: str) -> float:
        matching = [
            float(line.rsplit(" ", 1)[1])
            for line in lines
            if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items())
        ]
        assert len(matching) == 1, (name, labels, lines)
        return matching[0]

    assert value("agent_runner_iterations", model="claude-fake-1", task_queue=queue) == 4
    assert value("agent_runner_tokens", kind="input", task_queue=queue) == 233
    assert value("agent_runner_tokens", kind="output", task_queue=queue) == 29
    assert (
        value("agent_runner_tool_calls", tool="get_weather", outcome="ok", task_queue=queue) == 1
    )  # not the denied one
    assert value("agent_runner_tool_calls", tool="fail_disk", outcome="error", task_queue=queue) == 1
    assert value("agent_runner_approvals_requested", tool="get_weather", task_queue=queue) == 2
    assert value("agent_runner_approvals_decided", tool="get_weather", outcome="approved", task_queue=queue) == 1
    assert value("agent_runner_approvals_decided", tool="get_weather", outcome="denied", task_queue=queue) == 1
    assert value("agent_runner_runs_started", task_queue=queue) == 2
    assert value("agent_runner_runs_finished", status="completed", task_queue=queue) == 2
    assert "temporal_workflow_completed" in text
