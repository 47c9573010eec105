"""``AgentRunnerPlugin``: agent-runner in your own Temporal client and worker, in one line.

Temporal's convention for integrations (``temporalio.plugin.SimplePlugin``): the plugin brings the ``AgentRun``
workflow, its activities (the model call, the tools of the modules you name, result hooks) and the data converter
they need (pydantic, encrypted when ``AGENT_RUNNER_ENCRYPTION_KEYS`` is set, failures included), next to your own
workflows and activities::

    from agent_runner.plugin import AgentRunnerPlugin

    client = await Client.connect("localhost:7233", plugins=[AgentRunnerPlugin(tools=["my_pkg.tools"])])
    worker = Worker(client, task_queue="agent-runner", workflows=[MyWorkflow], activities=[my_activity])

Given to ``Client.connect``, it applies to the client and to every worker built from it; given to a ``Worker`` only,
it adds the workflow and activities (the client must then use ``agent_runner.connection.data_converter()``).
``worker.py`` is one user of it.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Iterable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from temporalio.client import Client
from temporalio.converter import DataConverter
from temporalio.plugin import SimplePlugin
from temporalio.worker import Worker, WorkerConfig

from agent_runner.activities.budget_policies import BudgetPolicyActivities
from agent_runner.activities.claude import ClaudeActivities
from agent_runner.activities.hooks import HookActivities
from agent_runner.activities.no_mcp import list_mcp_tools_elsewhere
from agent_runner.activities.not_served import not_served
from agent_runner.activities.subagents import child_usage
from agent_runner.activities.tools import Registrable, ToolActivities, ToolRegistry
from agent_runner.activities.toolsets import ToolsetActivities
from agent_runner.after_wait import AfterWaitInterceptor
from agent_runner.connection import data_converter
from agent_runner.content import Content
from agent_runner.contract.errors import AgentRunnerError, ConfigurationError, ToolRegistrationError
from agent_runner.contract.mcp import mcp_task_queue
from agent_runner.contract.types import WORKER_ROLES
from agent_runner.mcp_config import McpConfig
from agent_runner.store import ContentStore
from agent_runner.workflows.agent_run import AgentRun

if TYPE_CHECKING:
    from agent_runner.activities.mcp import McpActivities


def build_registry(modules: Iterable[str] = (), tools: Iterable[Registrable] = ()) -> ToolRegistry:
    """A registry of the tools the modules define, plus ``tools``.

    Raises:
        ToolRegistrationError: A module cannot be imported (its own code raised, whatever the exception), or
            defines no tool, or a tool that cannot be registered.
    """
    registry = ToolRegistry(tools)
    for module in modules:
        try:
            registry.add_module(module)
        except AgentRunnerError:
            raise
        except Exception as e:  # the module's own code failed while it was imported
            raise ToolRegistrationError(
                f"Tool module {module!r} failed while it was imported: {type(e).__name__}: {e}. Fix the module, or "
                "leave it out of --tools and AGENT_RUNNER_TOOLS."
            ) from e
    return registry


HEARTBEAT_THROTTLE = timedelta(seconds=1)
"""The longest a worker holds back an activity's heartbeat (Temporal's default: 80% of the heartbeat timeout, up to
60 s). The model call's heartbeat timeout is seconds (``workflows/live.py``): a live worker's call must never look
lost, so the plugin lowers its workers' ``max_heartbeat_throttle_interval`` to this."""


class AgentRunnerPlugin(SimplePlugin):
    """Adds the ``AgentRun`` workflow, its activities and data converter to a Temporal client or worker.

    Args:
        tools: Tool modules to register (``"my_pkg.tools"``), and/or tools (``@beta_tool`` functions), runnable
            toolsets (``activities/toolsets.py``) and agents (``AgentSpec``: a run naming one calls it as a child run).
        registry: A registry built already, instead of ``tools``.
        serve: What the worker runs: ``workflows`` (the loop, plus ``describe_tools`` and result hooks), ``model``
            (Claude calls), ``tools`` (tool calls). All three by default. Every worker of a queue should serve the
            same roles; one serving fewer registers a dynamic activity that hands back the others' tasks
            (``activities/not_served.py``), so the worker can take no dynamic activity of its own.
        claude: The model-call activities; by default one Anthropic client from this process's environment.
        store: Where transcripts and big content live; by default the store ``AGENT_RUNNER_STORE`` names.
        model_task_queue: Tell runs to send their model calls to this queue, which model-only workers poll.
        search_attributes: Runs keep the ``AgentRun*`` search attributes current.
        mcp: MCP servers whose tools runs may use (``agent_runner.mcp_config``); served with the tools. A worker
            that serves no MCP server (none given, or no ``tools`` role) hands a run's listing of their tools back
            to its task queue, for a worker that does (``activities/no_mcp.py``).

    Raises:
        ConfigurationError: An unknown role.
        ToolRegistrationError: A tool module that cannot be registered.
    """

    def __init__(
        self,
        *,
        tools: Iterable[str | Registrable] = (),
        registry: ToolRegistry | None = None,
        serve: Collection[str] = WORKER_ROLES,
        claude: ClaudeActivities | None = None,
        store: ContentStore | None = None,
        model_task_queue: str | None = None,
        search_attributes: bool = False,
        mcp: McpConfig | None = None,
    ) -> None:
        unknown = set(serve) - set(WORKER_ROLES)
        if unknown or not serve:
            raise ConfigurationError(f"Unknown worker roles {sorted(unknown)}; choose among {', '.join(WORKER_ROLES)}.")
        given = list(tools)
        registry = registry or build_registry(
            [t for t in given if isinstance(t, str)], [t for t in given if not isinstance(t, str)]
        )
        if store is not None:
            content = Content(store)
            if claude is not None:
                claude.content = content
        else:
            content = claude.content if claude is not None else Content()
        claude = claude or ClaudeActivities(content=content)
        tool_activities = ToolActivities(
            registry,
            model_task_queue=model_task_queue,
            search_attributes=search_attributes,
            content=content,
            runs_tools="tools" in serve,
        )
        hooks = HookActivities(registry.hooks, content=content)
        policies = BudgetPolicyActivities(registry.budget_policies, content=content)
        activities: list[Callable[..., Any]] = []
        if "workflows" in serve:
            activities += [tool_activities.describe_tools, tool_activities.check_tool_input, hooks.process_results]
            activities.append(tool_activities.run_local_tool)  # a local activity: no task of the queue reaches it
            activities.append(policies.decide_budget)
            activities.append(child_usage)
        if "model" in serve:
            activities.append(claude.create_message)
        if "tools" in serve:
            activities += [tool_activities.run_tool, tool_activities.reconcile_tool]
            toolsets = ToolsetActivities(registry.toolsets, content)
            activities += [toolsets.run_toolset_action, toolsets.reconcile_toolset_action]
        mcp_activities = _mcp_activities(mcp, content) if mcp is not None and "tools" in serve else None
        if mcp_activities is not None:
            # call_mcp_tool on the run's queue too: for runs whose listing predates the calls' own queue.
            activities += [mcp_activities.list_mcp_tools, mcp_activities.call_mcp_tool]
        else:
            activities.append(list_mcp_tools_elsewhere)
        if set(serve) != set(WORKER_ROLES):
            activities.append(not_served(serve))  # the tasks of roles it does not serve, handed back
        self._mcp = mcp_activities
        self.registry = registry
        """The tools this plugin's workers run."""
        super().__init__(
            "agent-runner",
            data_converter=_converter,
            activities=activities,
            workflows=[AgentRun] if "workflows" in serve else [],
            run_context=functools.partial(_running, claude if "model" in serve else None, mcp_activities),
            # Every workflow's activities that follow a wait of its own are marked, for backpressure to leave out.
            interceptors=[AfterWaitInterceptor()] if "workflows" in serve else [],
        )

    async def run_worker(self, worker: Worker, next: Callable[[Worker], Awaitable[None]]) -> None:
        """The base plugin's; a worker serving MCP servers also polls the queue of their tools' calls.

        The calls of the tools a worker lists go to ``mcp_task_queue`` of the run's queue (``activities/mcp.py``),
        which only such workers poll: a worker of the run's queue without the configuration never gets one.
        """
        if self._mcp is None:
            await super().run_worker(worker, next)
            return
        mcp = self._mcp

        async def with_calls(worker: Worker) -> None:
            # The worker's own configuration (its interceptors, slots, shutdown grace), for the calls only, on a
            # client without plugins: given this plugin, the calls' worker would become a runner worker again.
            client_config = worker.client.config()
            client_config["plugins"] = []
            config = worker.config()
            config["client"] = Client(**client_config)
            config["task_queue"] = mcp_task_queue(worker.task_queue)
            config["activities"] = [mcp.call_mcp_tool]
            config["workflows"], config["nexus_service_handlers"], config["plugins"] = [], [], []
            async with Worker(**config):  # inside the run context: the servers' connections are open meanwhile
                await next(worker)

        await super().run_worker(worker, with_calls)

    def configure_worker(self, config: WorkerConfig) -> WorkerConfig:
        """The base plugin's, and heartbeats sent at least every ``HEARTBEAT_THROTTLE`` (a shorter interval stays)."""
        config = super().configure_worker(config)
        given = config.get("max_heartbeat_throttle_interval")
        config["max_heartbeat_throttle_interval"] = min(given, HEARTBEAT_THROTTLE) if given else HEARTBEAT_THROTTLE
        return config


@contextlib.asynccontextmanager
async def _running(claude: ClaudeActivities | None, mcp: McpActivities | None) -> AsyncIterator[None]:
    """While a worker runs; when it stops, the connections its activities opened close."""
    async with contextlib.AsyncExitStack() as stack:
        if claude is not None:
            await stack.enter_async_context(claude.running())
        if mcp is not None:
            await stack.enter_async_context(mcp.running())
        yield


def _mcp_activities(config: McpConfig, content: Content) -> McpActivities:
    """The MCP activities over ``config``'s servers; the ``mcp`` package is needed only then."""
    try:
        from agent_runner.activities.mcp import McpActivities
    except ImportError as e:
        raise ConfigurationError(
            f"MCP servers need the `mcp` package ({e}): pip install 'agent-runner[mcp]'."
        ) from None
    return McpActivities(config, content=content)


def _converter(existing: DataConverter | None) -> DataConverter:
    """The converter runs need: pydantic for their typed inputs, and the payload codec when keys are set."""
    del existing  # a run's payloads are pydantic models: another payload converter could not read them
    return data_converter()
