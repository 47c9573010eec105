"""The worker: runs ``AgentRun`` workflows, Claude calls and the tools it registers.

Usage::

    agent-runner-worker --tools my_pkg.my_tools [--tools other.tools] [--task-queue agent-runner]

(``python worker.py`` at the top of the repository is the same command.)

``AGENT_RUNNER_TOOLS`` (comma-separated module names) registers tools too. The worker connects to the Temporal
server named by Temporal's standard environment configuration (``TEMPORAL_ADDRESS``, ``TEMPORAL_NAMESPACE``, TLS,
API key or a profile of its config file); with none configured it starts the embedded dev server. Claude's
credentials come from ``ANTHROPIC_API_KEY`` / ``ANTHROPIC_BASE_URL`` in this process's environment only.

It is one user of ``agent_runner.plugin.AgentRunnerPlugin``, which adds the runner to any worker.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import sys
from collections.abc import Collection, Iterable, Sequence
from datetime import timedelta
from typing import Any

from temporalio.client import Client
from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig
from temporalio.worker import Worker

from agent_runner.activities.claude import ClaudeActivities
from agent_runner.activities.tools import ToolRegistry
from agent_runner.contract.errors import AgentRunnerError
from agent_runner.contract.types import TASK_QUEUE
from agent_runner.plugin import ROLES, AgentRunnerPlugin, build_registry
from agent_runner.store import ContentStore, open_store

__all__ = ["ROLES", "TOOLS_ENV", "build_registry", "build_worker", "main", "run_worker", "tool_modules"]

TOOLS_ENV = "AGENT_RUNNER_TOOLS"
"""Comma-separated tool modules to register, in addition to ``--tools``."""

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
    serve: Collection[str] = ROLES,
    model_task_queue: str | None = None,
    max_activities_per_second: float | None = None,
    search_attributes: bool = False,
    store: ContentStore | None = None,
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
    """
    plugin = AgentRunnerPlugin(
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
        graceful_shutdown_timeout=graceful_shutdown_timeout,
        max_task_queue_activities_per_second=max_activities_per_second,
    )


async def run_worker(
    modules: Sequence[str], task_queue: str, *, metrics_port: int | None = None, **options: Any
) -> None:
    """Connect (or start the embedded server), then run a worker until SIGINT or SIGTERM.

    Args:
        modules: Tool modules to register.
        task_queue: The task queue to poll.
        metrics_port: Serve Prometheus metrics on this port.
        **options: ``build_worker``'s ``serve``, ``model_task_queue`` and ``max_activities_per_second``.
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
    client, server = await connect(**connect_options)
    worker = build_worker(client, registry=registry, task_queue=task_queue, store=store, **options)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    logger.info(
        "Worker ready: task_queue=%s tools=%s temporal=%s store=%s",
        task_queue,
        ",".join(registry.names) or "-",
        client.service_client.config.target_host,
        store.url,
    )
    try:
        async with worker:
            await stop.wait()
            # Leaving the block drains: in-flight activities get `graceful_shutdown_timeout` to finish.
            logger.info("Shutting down: finishing in-flight work")
    finally:
        if server is not None:
            await server.astop()


class JsonFormatter(logging.Formatter):
    """One JSON object per log line, for fleets whose log pipeline parses fields (``--log-format json``)."""

    def format(self, record: logging.LogRecord) -> str:
        """The record as JSON: time, level, logger, message, and the traceback if there is one."""
        entry: dict[str, Any] = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S%z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


def configure_logging(log_format: str) -> None:
    """Log to stderr at INFO, as text or JSON lines. The SDK's own ``ANTHROPIC_LOG`` setting is left in force."""
    handler = logging.StreamHandler()
    if log_format == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=logging.INFO, handlers=[handler], force=True)


def main(argv: Sequence[str] | None = None) -> int:
    """The worker's command line."""
    parser = argparse.ArgumentParser(description="Run an agent-runner worker.")
    parser.add_argument(
        "--tools",
        action="append",
        default=[],
        metavar="MODULE",
        help=f"a module whose @beta_tool functions to register (repeatable; also ${TOOLS_ENV})",
    )
    parser.add_argument("--task-queue", default=TASK_QUEUE, help=f"task queue to poll (default {TASK_QUEUE})")
    parser.add_argument(
        "--serve",
        default=",".join(ROLES),
        help="what to run, comma-separated: workflows, model, tools (default: all three)",
    )
    parser.add_argument(
        "--model-task-queue",
        default=None,
        help="route the model calls of runs this worker starts to this queue (poll it with --serve model)",
    )
    parser.add_argument(
        "--max-activities-per-second",
        type=float,
        default=None,
        help="fleet-wide rate limit for activities on --task-queue (for a model queue: Anthropic's requests/s)",
    )
    parser.add_argument(
        "--search-attributes",
        action="store_true",
        default=os.environ.get("AGENT_RUNNER_SEARCH_ATTRIBUTES", "") not in ("", "0", "false"),
        help="keep the AgentRun* search attributes of runs current (register them first; "
        "also $AGENT_RUNNER_SEARCH_ATTRIBUTES=1)",
    )
    parser.add_argument(
        "--metrics-port",
        type=int,
        default=int(os.environ["AGENT_RUNNER_METRICS_PORT"]) if os.environ.get("AGENT_RUNNER_METRICS_PORT") else None,
        help="serve Prometheus metrics on this port (also $AGENT_RUNNER_METRICS_PORT)",
    )
    parser.add_argument(
        "--log-format",
        choices=("text", "json"),
        default=os.environ.get("AGENT_RUNNER_LOG_FORMAT", "text"),
        help="log lines as text or JSON objects (default text; also $AGENT_RUNNER_LOG_FORMAT)",
    )
    args = parser.parse_args(argv)
    configure_logging(args.log_format)
    sys.path.insert(0, os.getcwd())
    try:
        asyncio.run(
            run_worker(
                tool_modules(args.tools),
                args.task_queue,
                serve=[role.strip() for role in args.serve.split(",") if role.strip()],
                model_task_queue=args.model_task_queue,
                max_activities_per_second=args.max_activities_per_second,
                metrics_port=args.metrics_port,
                search_attributes=args.search_attributes,
            )
        )
    except AgentRunnerError as e:  # a configuration the worker cannot start with: say why, without a traceback
        # One line, even when the cause's own message has several (psycopg's, for one).
        logger.error("error: %s", " ".join(str(e).split()))
        return 2
    return 0


def console_main() -> None:
    """``agent-runner-worker``: ``main``, then leave without finalizing the interpreter."""
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # temporalio's native threads can crash a finalizing interpreter (sdk-python#300): leave without finalizing.
    os._exit(code)
