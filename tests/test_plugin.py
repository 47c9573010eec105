"""AgentRunnerPlugin: a user's own client and worker run agent runs beside their own workflows, in one line."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.contrib.pydantic import PydanticPayloadConverter, pydantic_data_converter
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from agent_runner.activities.claude import ClaudeActivities
from agent_runner.client import AgentRunner
from agent_runner.codec import KEYS_ENV, new_key
from agent_runner.connection import EncryptedWithoutKeys, SharedPydanticPayloadConverter, data_converter
from agent_runner.contract.types import CreateMessageInput
from agent_runner.plugin import AgentRunnerPlugin
from agent_runner.testing import FakeMessagesAPI, Reply, end_turn, text, tool_use
from tests.conftest import anthropic_client_factory


@activity.defn
async def shout(word: str) -> str:
    return word.upper()


@workflow.defn(sandboxed=False)  # a test module imports far more than a workflow should
class UsersOwnWorkflow:
    @workflow.run
    async def run(self, word: str) -> str:
        return await workflow.execute_activity(shout, word, start_to_close_timeout=timedelta(seconds=10))


async def test_the_plugin_adds_the_runner_to_a_users_own_client_and_worker(
    temporal_env: WorkflowEnvironment, fake_api: FakeMessagesAPI
) -> None:
    plugin = AgentRunnerPlugin(
        tools=["tests.tools_for_tests"], claude=ClaudeActivities(anthropic_client_factory(fake_api))
    )
    # A plain client: the plugin brings the data converter the runner needs.
    client = await Client.connect(temporal_env.client.service_client.config.target_host, plugins=[plugin])
    queue = f"plugin-{uuid.uuid4()}"
    fake_api.script(
        Reply([text("Checking."), tool_use("toolu_1", "get_weather", {"city": "Lima"})], "tool_use"),
        end_turn("Sunny in Lima."),
    )
    async with Worker(client, task_queue=queue, workflows=[UsersOwnWorkflow], activities=[shout]):
        own = await client.execute_workflow(UsersOwnWorkflow.run, "hello", id=f"own-{queue}", task_queue=queue)
        run = await AgentRunner(client, task_queue=queue).start(
            model="claude-fake-1",
            max_tokens=64,
            messages=[{"role": "user", "content": "Weather in Lima?"}],
            tools=["get_weather"],
        )
        final = await run.until_done()
    assert own == "HELLO"
    assert final.content[0].type == "text" and final.content[0].text == "Sunny in Lima."
    assert fake_api.bodies()[1]["messages"][-1]["content"] == [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny, 21C in Lima"}
    ]
    assert "get_weather" in plugin.registry.names


async def test_the_plugin_leaves_the_workers_sandbox_to_the_users_own_workflows(client: Client) -> None:
    worker = Worker(client, task_queue="sandbox-default", plugins=[AgentRunnerPlugin()])
    config = worker.config(active_config=True)
    # AgentRun declares itself unsandboxed (tests/test_replay.py replays it in the strict sandbox instead); the
    # worker's runner, which the user's own workflows get, is Temporal's default sandbox, untouched.
    assert type(config.get("workflow_runner")) is SandboxedWorkflowRunner


def test_the_runners_payloads_are_temporals_pydantic_ones_from_a_converter_built_for_nothing() -> None:
    # Temporal builds a payload converter for every workflow activation and every activity; Temporal's pydantic one
    # builds a serializer and an empty type-adapter cache each time. The runner's writes the same bytes, reads them
    # back the same, and shares its pydantic converter (and so its cache) between all its copies.
    values = [
        CreateMessageInput(request={"model": "claude-fake-1", "max_tokens": 64}, run_id="r1", iteration=3),
        {"role": "user", "content": [{"type": "text", "text": "héllo"}]},
        b"\x00raw",
        None,
        datetime(2026, 12, 3, 14, 0, tzinfo=UTC),
    ]
    for keys in ({}, {KEYS_ENV: f"k1:{new_key()}"}):
        ours = data_converter(keys)
        assert ours.payload_converter_class is SharedPydanticPayloadConverter
        payloads = ours.payload_converter.to_payloads(values)
        assert payloads == pydantic_data_converter.payload_converter.to_payloads(values)
        hints = [CreateMessageInput, dict, bytes, type(None), datetime]
        assert ours.payload_converter.from_payloads(payloads, hints) == values
    first, second = SharedPydanticPayloadConverter(), SharedPydanticPayloadConverter()
    assert first.converters[b"json/plain"] is second.converters[b"json/plain"]
    # Temporal's, and last one that reads an encrypted payload no key opened as an error saying what to set.
    assert [type(c) for c in first.converters.values()] == [
        *(type(c) for c in PydanticPayloadConverter().converters.values()),
        EncryptedWithoutKeys,
    ]
