"""Traces: one trace from the client through the workflow to each model call and tool call, with GenAI attributes
and the SDK's span names; a replayed workflow emits no span again."""

from __future__ import annotations

import subprocess
import sys
import uuid

import opentelemetry.trace
import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from temporalio.client import Client
from temporalio.contrib.opentelemetry import OpenTelemetryPlugin, create_tracer_provider
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer

from agent_runner.client import AgentRunner
from agent_runner.testing import FakeMessagesAPI, Reply, end_turn, tool_use
from agent_runner.workflows.agent_run import AgentRun
from tests.conftest import fake_claude_worker
from tests.tools_for_tests import fail_disk, get_weather

EXPORTER = InMemorySpanExporter()


@pytest.fixture(scope="module", autouse=True)
def tracer_provider() -> None:
    provider = create_tracer_provider()
    provider.add_span_processor(SimpleSpanProcessor(EXPORTER))
    opentelemetry.trace.set_tracer_provider(provider)


async def test_model_and_tool_calls_are_spans_of_one_trace_and_replay_adds_none(
    temporal_env: WorkflowEnvironment, fake_api: FakeMessagesAPI
) -> None:
    EXPORTER.clear()
    client = await Client.connect(
        temporal_env.client.service_client.config.target_host,
        data_converter=pydantic_data_converter,
        plugins=[OpenTelemetryPlugin(add_temporal_spans=True)],
    )
    queue = f"trace-{uuid.uuid4()}"
    fake_api.script(
        Reply(
            [tool_use("toolu_1", "get_weather", {"city": "Paris"}), tool_use("toolu_2", "fail_disk", {"path": "/"})],
            "tool_use",
            usage={"input_tokens": 100, "output_tokens": 20},
        ),
        end_turn("ok"),
    )
    worker = fake_claude_worker(client, fake_api, queue, get_weather, fail_disk)
    async with worker:
        run = await AgentRunner(client, task_queue=queue).start(
            model="claude-fake-1",
            max_tokens=64,
            messages=[{"role": "user", "content": "Hi"}],
            tools=[get_weather, fail_disk],
        )
        await run.until_done()
        history = await run.handle.fetch_history()
    spans = EXPORTER.get_finished_spans()
    names = [s.name for s in spans]
    assert names.count("anthropic.messages.create") == 2
    assert "anthropic.custom_tool_use get_weather" in names and "anthropic.custom_tool_use fail_disk" in names
    assert len({s.context.trace_id for s in spans}) == 1  # joined from the client's start through the activities
    # The SDK's own span for each request (its GenAI conventions), parented inside the run's trace.
    first_call = next(s for s in spans if s.name == "anthropic.messages.create")
    attributes = dict(first_call.attributes or {})
    assert {
        k: attributes[k] for k in ("gen_ai.operation.name", "gen_ai.request.model", "gen_ai.usage.input_tokens")
    } == {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": "claude-fake-1",
        "gen_ai.usage.input_tokens": 100,
    }
    assert (attributes["anthropic.message.stop_reason"], attributes["gen_ai.usage.output_tokens"]) == ("tool_use", 20)
    assert first_call.parent is not None
    trace_id = f"{first_call.context.trace_id:032x}"
    assert fake_api.requests[0].headers["traceparent"].split("-")[1] == trace_id  # propagated to Claude's API
    tool_span = next(s for s in spans if s.name == "anthropic.custom_tool_use get_weather")
    assert dict(tool_span.attributes or {}) == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "get_weather",
        "gen_ai.tool.call.id": "toolu_1",
        "agent_runner.run_id": run.id,
        "agent_runner.iteration": 1,
    }
    failed = next(s for s in spans if s.name == "anthropic.custom_tool_use fail_disk")
    assert failed.status.status_code == opentelemetry.trace.StatusCode.ERROR
    assert (failed.attributes or {})["error.type"] == "tool_error"

    before = len(EXPORTER.get_finished_spans())
    replayer = Replayer(
        workflows=[AgentRun],
        data_converter=pydantic_data_converter,
        plugins=[OpenTelemetryPlugin(add_temporal_spans=True)],
    )
    await replayer.replay_workflow(history)
    assert len(EXPORTER.get_finished_spans()) == before


def test_the_workers_client_makes_the_sdks_spans_only_once_a_tracer_provider_is_set_up() -> None:
    """Without a provider the SDK's spans are no-ops that still cost each request their attributes: the worker's
    client is then built without them (in a fresh process, since a provider, once set, stays for the process)."""
    script = (
        "import opentelemetry.trace\n"
        "from opentelemetry.sdk.trace import TracerProvider\n"
        "from agent_runner.activities.claude import default_client\n"
        "print(default_client(api_key='k').open_telemetry['traces']['enabled'])\n"
        "print(default_client(api_key='k', open_telemetry={}).open_telemetry['traces']['enabled'])\n"
        "opentelemetry.trace.set_tracer_provider(TracerProvider())\n"
        "print(default_client(api_key='k').open_telemetry['traces']['enabled'])\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.split() == ["False", "True", "True"]
