"""AgentRunnerPlugin: a user's own client and worker run agent runs beside their own workflows, in one line."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import timedelta

from temporalio import activity, workflow
from temporalio.api.enums.v1 import CommandType
from temporalio.bridge.proto.workflow_activation import WorkflowActivation
from temporalio.bridge.proto.workflow_completion import WorkflowActivationCompletion
from temporalio.client import Client
from temporalio.converter import SerializationContext, StorageDriverStoreContext, WorkflowSerializationContext
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker, WorkflowInstance
from temporalio.worker._command_aware_visitor import CommandInfo
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner
from temporalio.workflow import Info

from agent_runner.activities.claude import ClaudeActivities
from agent_runner.client import AgentRunner
from agent_runner.plugin import PASSTHROUGH_MODULES, AgentRunnerPlugin, ContextCachingSandbox, _ContextCachingInstance
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


async def test_the_plugins_sandbox_passes_the_runner_through_and_keeps_a_users_own_sandbox_class(
    client: Client,
) -> None:
    plugin = AgentRunnerPlugin()
    default = Worker(client, task_queue="sandbox-default", plugins=[plugin]).config(active_config=True)
    runner = default["workflow_runner"]
    assert type(runner) is ContextCachingSandbox
    assert set(PASSTHROUGH_MODULES) <= set(runner.restrictions.passthrough_modules)

    @dataclasses.dataclass(frozen=True)
    class UsersSandbox(SandboxedWorkflowRunner):
        pass

    own = Worker(client, task_queue="sandbox-own", plugins=[plugin], workflow_runner=UsersSandbox())
    runner = own.config(active_config=True)["workflow_runner"]
    assert type(runner) is UsersSandbox
    assert set(PASSTHROUGH_MODULES) <= set(runner.restrictions.passthrough_modules)


class CountingInstance(WorkflowInstance):
    """A run's instance that answers as the sandbox would and counts how often it is asked."""

    def __init__(self) -> None:
        self.asked: list[CommandInfo | None] = []

    def activate(self, act: WorkflowActivation) -> WorkflowActivationCompletion:
        raise NotImplementedError

    def get_serialization_context(self, command_info: CommandInfo | None) -> SerializationContext | None:
        self.asked.append(command_info)
        if command_info is None:
            return WorkflowSerializationContext(namespace="default", workflow_id="run-1")
        return WorkflowSerializationContext(namespace="default", workflow_id=f"child-{command_info.command_seq}")

    def get_external_store_context(self, command_info: CommandInfo | None) -> StorageDriverStoreContext:
        self.asked.append(command_info)
        return StorageDriverStoreContext(target=None)

    def get_info(self) -> Info:
        raise NotImplementedError


def test_a_runs_instance_works_out_each_commands_serialization_context_once() -> None:
    inner = CountingInstance()
    instance = _ContextCachingInstance(inner)
    child_1 = CommandInfo(CommandType.COMMAND_TYPE_START_CHILD_WORKFLOW_EXECUTION, 1)
    child_2 = CommandInfo(CommandType.COMMAND_TYPE_START_CHILD_WORKFLOW_EXECUTION, 2)

    contexts = [instance.get_serialization_context(info) for info in (None, child_1, None, child_2, child_1, None)]

    assert contexts == [
        WorkflowSerializationContext(namespace="default", workflow_id=workflow_id)
        for workflow_id in ("run-1", "child-1", "run-1", "child-2", "child-1", "run-1")
    ]
    assert inner.asked == [None, child_1, child_2]
    inner.asked.clear()
    for info in (None, child_1, None):
        assert instance.get_external_store_context(info) == StorageDriverStoreContext(target=None)
    assert inner.asked == [None, child_1]
