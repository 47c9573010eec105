"""The worker: runs ``AgentRun`` workflows, Claude calls and the tools it registers.

``agent-runner-worker`` (``agent_runner.worker_command``) is its command line. ``build_worker`` is one user of
``agent_runner.plugin.AgentRunnerPlugin``, which adds the runner to any worker; ``run_worker`` connects (or starts
the embedded server) and runs one until it is told to stop; ``WorkerTuning`` holds the slot and cache sizes (README,
"Size a worker").
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import logging
import os
import signal
from collections.abc import Collection, Iterable, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import temporalio
from temporalio.client import Client
from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig
from temporalio.worker import Worker

from agent_runner.activities.claude import ClaudeActivities
from agent_runner.activities.tools import ToolRegistry
from agent_runner.backpressure import backpressure_options
from agent_runner.contract.types import MCP_CONFIG_ENV, TASK_QUEUE, TOOLS_ENV, WORKER_ROLES
from agent_runner.mcp_config import McpConfig, load_mcp_config
from agent_runner.plugin import AgentRunnerPlugin, build_registry
from agent_runner.processes import PROCESS_INDEX_ENV
from agent_runner.store import ContentStore, open_store
from agent_runner.temporal_server import EmbeddedKeeper, configured_address, keep_embedded_server
from agent_runner.tuning import WorkerTuning

__all__ = [
    "TOOLS_ENV",
    "WorkerTuning",
    "build_registry",
    "build_worker",
    "run_worker",
    "tool_modules",
]

logger = logging.getLogger("agent_runner.worker")


def tool_modules(cli_modules: Iterable[str], environ: dict[str, str] | None = None) -> list[str]:
    """The tool modules to register: ``--tools`` values, then those in ``AGENT_RUNNER_TOOLS``, each once."""
    environ = dict(os.environ) if environ is None else environ
    from_env = [m.strip() for m in environ.get(TOOLS_ENV, "").split(",") if m.strip()]
    return list(dict.fromkeys([*cli_modules, *from_env]))


def build_worker(
    client: Client,
    *,
    registry: ToolRegistry | None = None,
    task_queue: str = TASK_QUEUE,
    claude: ClaudeActivities | None = None,
    graceful_shutdown_timeout: timedelta = timedelta(seconds=30),
    serve: Collection[str] = WORKER_ROLES,
    model_task_queue: str | None = None,
    max_activities_per_second: float | None = None,
    search_attributes: bool = False,
    store: ContentStore | None = None,
    mcp: McpConfig | None = None,
    tuning: WorkerTuning | None = None,
) -> Worker:
    """A worker that runs ``AgentRun``, the model call and the registry's tools on ``task_queue``.

    Args:
        client: A client made with ``agent_runner.connect`` (its data converter must be the pydantic one).
        registry: The tools to run; none by default.
        task_queue: The task queue to poll.
        claude: The model-call activities; by default one Anthropic client from this process's environment.
        graceful_shutdown_timeout: How long in-flight activities may finish after a shutdown starts.
        serve: What this worker runs: ``workflows`` (the loop, plus the lookups it needs: ``describe_tools`` and
            result hooks), ``model`` (Claude calls), ``tools`` (tool calls). All three by default.
        model_task_queue: Tell runs to send their model calls to this queue, which model-only workers poll.
        max_activities_per_second: Temporal's fleet-wide rate limit for activities on ``task_queue`` (for a
            model-call queue: Anthropic's requests per second).
        search_attributes: Runs keep the ``AgentRun*`` search attributes current (register them on the server first;
            see ``agent_runner.contract.types.SEARCH_ATTRIBUTE_TYPES``).
        store: Where transcripts and big content live; by default the store ``AGENT_RUNNER_STORE`` names, else a
            SQLite file of this machine's (``agent_runner/store.py``). Every worker of a fleet and every client that
            reads transcripts must use the same store.
        mcp: MCP servers whose tools runs may use (``agent_runner.mcp_config``).
        tuning: Slot and cache sizes; ``WorkerTuning()``'s by default.
    """
    plugin = AgentRunnerPlugin(
        mcp=mcp,
        registry=registry,
        serve=serve,
        claude=claude,
        store=store,
        model_task_queue=model_task_queue,
        search_attributes=search_attributes,
    )
    return Worker(
        client,
        task_queue=task_queue,
        plugins=[plugin],
        build_id=build_id(),
        graceful_shutdown_timeout=graceful_shutdown_timeout,
        max_task_queue_activities_per_second=max_activities_per_second,
        **_worker_options(tuning or WorkerTuning()),
    )


def _worker_options(tuning: WorkerTuning) -> dict[str, Any]:
    """``tuning`` as ``temporalio.worker.Worker`` keyword arguments."""
    slots: dict[str, Any] = {
        "max_concurrent_workflow_tasks": tuning.max_concurrent_workflow_tasks,
        "max_concurrent_activities": tuning.max_concurrent_activities,
    }
    if tuning.backpressure is not None:  # a tuner replaces the slot counts (Temporal takes one or the other)
        slots = backpressure_options(
            max_activities=tuning.max_concurrent_activities,
            backpressure=tuning.backpressure,
            max_workflow_tasks=tuning.max_concurrent_workflow_tasks,
        )
    return {
        **slots,
        "max_cached_workflows": tuning.max_cached_workflows,
        "sticky_queue_schedule_to_start_timeout": tuning.sticky_queue_timeout,
    }


@functools.cache
def build_id() -> str:
    """The worker's build id: 8 hex digits of a hash of agent-runner's code and the Temporal SDK's version.

    Temporal writes the build id into six of an iteration's twelve history events (each activity's and workflow
    task's start, each workflow task's completion), and the SDK's default is 32 hex digits (a hash of every loaded
    module). Eight still tell one build of the runner from another (in the UI, and for ``temporal workflow reset``
    by build id) and keep an iteration's history about 140 bytes smaller.
    """
    digest = hashlib.md5(temporalio.__version__.encode(), usedforsecurity=False)
    package = Path(__file__).parent
    sources = (Path(folder, name) for folder, _, names in os.walk(package, followlinks=True) for name in names)
    for path in sorted(path for path in sources if path.suffix == ".py"):
        digest.update(str(path.relative_to(package)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:8]


async def run_worker(
    modules: Sequence[str], task_queue: str, *, metrics_port: int | None = None, **options: Any
) -> None:
    """Connect (or start the embedded server), then run a worker until SIGINT or SIGTERM.

    Args:
        modules: Tool modules to register.
        task_queue: The task queue to poll.
        metrics_port: Serve Prometheus metrics on this port.
        **options: ``build_worker``'s ``serve``, ``model_task_queue``, ``max_activities_per_second`` and ``tuning``,
            and ``mcp_config``: the path of the MCP servers' configuration (else ``AGENT_RUNNER_MCP_CONFIG``).
    """
    from agent_runner.connection import connect

    registry = build_registry(modules)
    connect_options: dict[str, Any] = {}
    if metrics_port is not None:
        # Temporal's worker metrics and ours (iterations, tokens, tool calls) on http://0.0.0.0:PORT/metrics.
        connect_options["runtime"] = Runtime(
            telemetry=TelemetryConfig(metrics=PrometheusConfig(bind_address=f"0.0.0.0:{metrics_port}"))
        )
    store = open_store()  # at start, so a wrong AGENT_RUNNER_STORE stops the worker with its reason
    mcp_path = options.pop("mcp_config", None) or os.environ.get(MCP_CONFIG_ENV)
    if mcp_path:
        options["mcp"] = load_mcp_config(mcp_path)  # at start too: a wrong file stops the worker with its reason
    client, server = await connect(**connect_options)
    # On the embedded server, this worker starts it again if the process that started it stops (EmbeddedKeeper).
    keeper = EmbeddedKeeper(server, namespace=client.namespace) if configured_address() is None else None
    worker = build_worker(client, registry=registry, task_queue=task_queue, store=store, **options)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    logger.info(
        "Worker ready%s: task_queue=%s tools=%s temporal=%s store=%s",
        f" (process {os.environ[PROCESS_INDEX_ENV]})" if os.environ.get(PROCESS_INDEX_ENV) else "",
        task_queue,
        ",".join(registry.names) or "-",
        client.service_client.config.target_host,
        store.url,
    )
    async with keep_embedded_server(keeper), worker:
        await stop.wait()
        # Leaving the block drains: in-flight activities get `graceful_shutdown_timeout` to finish; then the
        # embedded server stops if this process started it (the other workers' keepers take over).
        logger.info("Shutting down: finishing in-flight work")
