"""The worker: runs ``AgentRun`` workflows, Claude calls and the tools it registers.

Usage::

    agent-runner-worker --tools my_pkg.my_tools [--tools other.tools] [--task-queue agent-runner] [--processes N]

(``python worker.py`` at the top of the repository is the same command.)

``AGENT_RUNNER_TOOLS`` (comma-separated module names) registers tools too. The worker connects to the Temporal
server named by Temporal's standard environment configuration (``TEMPORAL_ADDRESS``, ``TEMPORAL_NAMESPACE``, TLS,
API key or a profile of its config file); with none configured it starts the embedded dev server. Claude's
credentials come from ``ANTHROPIC_API_KEY`` / ``ANTHROPIC_BASE_URL`` in this process's environment only.

It is one user of ``agent_runner.plugin.AgentRunnerPlugin``, which adds the runner to any worker. ``--processes N``
runs N such workers under one command (``agent_runner.processes``), so a worker can use N cores; ``WorkerTuning``
holds the slot and cache sizes (README, "Size a worker").
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import hashlib
import json
import logging
import os
import signal
import sys
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, NoReturn

import temporalio
from temporalio.client import Client
from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig
from temporalio.worker import Worker

from agent_runner.activities.claude import ClaudeActivities
from agent_runner.activities.tools import ToolRegistry
from agent_runner.backpressure import Backpressure, backpressure_options
from agent_runner.contract.errors import AgentRunnerError, ConfigurationError
from agent_runner.contract.types import TASK_QUEUE
from agent_runner.mcp_config import MCP_CONFIG_ENV, McpConfig, load_mcp_config
from agent_runner.plugin import ROLES, AgentRunnerPlugin, build_registry
from agent_runner.process_exit import exit_now
from agent_runner.processes import CONFIGURATION_EXIT_CODE, PROCESS_INDEX_ENV, child_command, supervise
from agent_runner.store import ContentStore, open_store
from agent_runner.temporal_server import EmbeddedKeeper, configured_address, keep_embedded_server

__all__ = [
    "ROLES",
    "TOOLS_ENV",
    "WorkerTuning",
    "build_registry",
    "build_worker",
    "main",
    "run_worker",
    "tool_modules",
]

TOOLS_ENV = "AGENT_RUNNER_TOOLS"
"""Comma-separated tool modules to register, in addition to ``--tools``."""

logger = logging.getLogger("agent_runner.worker")


def tool_modules(cli_modules: Iterable[str], environ: dict[str, str] | None = None) -> list[str]:
    """The tool modules to register: ``--tools`` values, then those in ``AGENT_RUNNER_TOOLS``, each once."""
    environ = dict(os.environ) if environ is None else environ
    from_env = [m.strip() for m in environ.get(TOOLS_ENV, "").split(",") if m.strip()]
    return list(dict.fromkeys([*cli_modules, *from_env]))


@dataclass(frozen=True)
class WorkerTuning:
    """How much one worker process takes on at once (README, "Size a worker").

    Attributes:
        max_concurrent_workflow_tasks: Workflow tasks processed at once; ``None`` is Temporal's default (100).
            Workflow code runs one task at a time under the interpreter lock, so more slots only queue work inside
            the process: raise ``--processes`` instead.
        max_concurrent_activities: Activities (model calls, tools) in flight at once, at most. A model call mostly
            waits on the network, so one process holds many: 1,000 by default (Temporal's is 100). Beyond what the
            process can take the results of, runs' next workflow tasks wait on its sticky queue, where they time
            out, instead of in the activity queue, where they do not: set this to about the iterations per second one
            process sustains × a model call's seconds, or turn ``backpressure`` on.
        max_cached_workflows: Runs kept in memory between their tasks (sticky cache). A run evicted from it is
            replayed from its history on its next task, which costs CPU: keep it at least the number of runs this
            process has in flight.
        sticky_queue_timeout: How long a run's next task waits for this process (which has the run cached) before
            any worker may take it. A process that is alive but busier than this replays instead of waiting; one
            that was killed delays its runs by at most this much.
        backpressure: Start new activities only while this process keeps up (``--backpressure``,
            ``agent_runner.backpressure``): calls then wait in the activity queue, not finished calls' runs on the
            sticky queue, and ``max_concurrent_activities`` is the ceiling. A run's own waits between two calls (an
            approval, a sleep, a child run, a retry's backoff) are not counted as slow steps (``after_wait.py``). Off
            (``None``, a fixed number of slots) by default: a process that keeps up needs none (deploy/README.md).
    """

    max_concurrent_workflow_tasks: int | None = None
    max_concurrent_activities: int = 1000
    max_cached_workflows: int = 1000
    sticky_queue_timeout: timedelta = timedelta(seconds=10)
    backpressure: Backpressure | None = None

    def __post_init__(self) -> None:
        if self.max_concurrent_workflow_tasks is not None and self.max_concurrent_workflow_tasks < 2:
            raise ConfigurationError(
                f"--max-concurrent-workflow-tasks must be at least 2, not {self.max_concurrent_workflow_tasks}."
            )
        if self.max_concurrent_activities < 1:
            raise ConfigurationError(
                f"--max-concurrent-activities must be at least 1, not {self.max_concurrent_activities}."
            )
        if self.max_cached_workflows < 0:
            raise ConfigurationError(f"--max-cached-workflows must be 0 or more, not {self.max_cached_workflows}.")
        if self.sticky_queue_timeout <= timedelta(0):
            raise ConfigurationError(
                f"--sticky-queue-timeout must be more than 0 seconds, not {self.sticky_queue_timeout.total_seconds()}."
            )

    def worker_options(self) -> dict[str, Any]:
        """These settings as ``temporalio.worker.Worker`` keyword arguments."""
        slots: dict[str, Any] = {
            "max_concurrent_workflow_tasks": self.max_concurrent_workflow_tasks,
            "max_concurrent_activities": self.max_concurrent_activities,
        }
        if self.backpressure is not None:  # a tuner replaces the slot counts (Temporal takes one or the other)
            slots = backpressure_options(
                max_activities=self.max_concurrent_activities,
                backpressure=self.backpressure,
                max_workflow_tasks=self.max_concurrent_workflow_tasks,
            )
        return {
            **slots,
            "max_cached_workflows": self.max_cached_workflows,
            "sticky_queue_schedule_to_start_timeout": self.sticky_queue_timeout,
        }


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
        **(tuning or WorkerTuning()).worker_options(),
    )


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


class _OneLineErrors(argparse.ArgumentParser):
    """Bad flags in one line (``error: ...``), like the worker's other configuration errors, not a usage dump."""

    def error(self, message: str) -> NoReturn:
        self.exit(CONFIGURATION_EXIT_CODE, f"error: {message} (see --help)\n")


def _seconds(text: str) -> timedelta:
    try:
        return timedelta(seconds=float(text))
    except (ValueError, OverflowError):
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None


def _add_tuning_flags(parser: argparse.ArgumentParser) -> None:
    default = WorkerTuning()
    parser.add_argument(
        "--processes",
        type=int,
        default=int(os.environ.get("AGENT_RUNNER_WORKER_PROCESSES", "1")),
        help="worker processes to run under this command, sharing the task queues: about one core each "
        "(default 1; also $AGENT_RUNNER_WORKER_PROCESSES)",
    )
    parser.add_argument(
        "--max-concurrent-workflow-tasks",
        type=int,
        default=default.max_concurrent_workflow_tasks,
        help="workflow tasks one process handles at once (default: Temporal's, 100)",
    )
    parser.add_argument(
        "--max-concurrent-activities",
        type=int,
        default=default.max_concurrent_activities,
        help=f"model and tool calls one process runs at once, at most (default {default.max_concurrent_activities})",
    )
    parser.add_argument(
        "--max-cached-workflows",
        type=int,
        default=default.max_cached_workflows,
        help=f"runs one process keeps in memory between tasks (default {default.max_cached_workflows})",
    )
    parser.add_argument(
        "--sticky-queue-timeout",
        type=_seconds,
        default=default.sticky_queue_timeout,
        metavar="SECONDS",
        help="how long a run's next task waits for the process that has it cached before any worker may take it "
        f"(default {default.sticky_queue_timeout.total_seconds():g})",
    )
    tuned = Backpressure()
    parser.add_argument(
        "--backpressure",
        action="store_true",
        help="start new model and tool calls only while this process keeps up (its event loop's lag, runs' steps "
        "between two calls; a run's approvals, sleeps and retries are not steps), so calls wait in Temporal's queue "
        "rather than runs on an overloaded process",
    )
    parser.add_argument(
        "--max-loop-lag",
        type=_seconds,
        default=tuned.max_lag,
        metavar="SECONDS",
        help=f"with --backpressure: the event loop's largest lag (default {tuned.max_lag.total_seconds():g})",
    )
    parser.add_argument(
        "--max-step-delay",
        type=_seconds,
        default=tuned.max_step_delay,
        metavar="SECONDS",
        help="with --backpressure: how long runs' steps between two calls (their workflow task's wait and work) may "
        f"take (default {tuned.max_step_delay.total_seconds():g})",
    )
    parser.add_argument(
        "--min-concurrent-activities",
        type=int,
        default=tuned.min_slots,
        help=f"with --backpressure: calls one process runs whatever it measures (default {tuned.min_slots})",
    )


def _tuning(args: argparse.Namespace) -> WorkerTuning:
    # Built whether or not it is asked for, so that a bad value of its flags is refused either way.
    backpressure = Backpressure(
        max_lag=args.max_loop_lag, max_step_delay=args.max_step_delay, min_slots=args.min_concurrent_activities
    )
    return WorkerTuning(
        max_concurrent_workflow_tasks=args.max_concurrent_workflow_tasks,
        max_concurrent_activities=args.max_concurrent_activities,
        max_cached_workflows=args.max_cached_workflows,
        sticky_queue_timeout=args.sticky_queue_timeout,
        backpressure=backpressure if args.backpressure else None,
    )


def _run_processes(argv: Sequence[str], processes: int) -> int:
    """``--processes N``: N copies of this command, each with ``--processes 1``, on one Temporal server.

    On the embedded server the children start it themselves: the first to take its database's lock starts it, the
    others reuse it (``connect_client``), and each keeps it up while it runs (``EmbeddedKeeper``). Started here, its
    lock would be held by this process too, and no child could start it again if it died.
    """
    return supervise(child_command([*argv, "--processes", "1"]), processes)


def main(argv: Sequence[str] | None = None) -> int:
    """The worker's command line."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = _OneLineErrors(description="Run an agent-runner worker.")
    parser.add_argument(
        "--tools",
        action="append",
        default=[],
        metavar="MODULE",
        help=f"a module whose @beta_tool functions, toolsets and AgentSpecs to register (repeatable; ${TOOLS_ENV})",
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
        "--mcp-config",
        default=None,
        metavar="FILE",
        help=f"MCP servers whose tools runs may use (JSON, or TOML; also ${MCP_CONFIG_ENV})",
    )
    parser.add_argument(
        "--log-format",
        choices=("text", "json"),
        default=os.environ.get("AGENT_RUNNER_LOG_FORMAT", "text"),
        help="log lines as text or JSON objects (default text; also $AGENT_RUNNER_LOG_FORMAT)",
    )
    _add_tuning_flags(parser)
    args = parser.parse_args(argv)
    configure_logging(args.log_format)
    sys.path.insert(0, os.getcwd())
    metrics_port = args.metrics_port
    index = os.environ.get(PROCESS_INDEX_ENV, "")
    if metrics_port is not None and "/" in index:  # process i of N serves its metrics on PORT + i - 1
        metrics_port += int(index.split("/")[0]) - 1
    try:
        tuning = _tuning(args)
        if args.processes != 1:
            if args.processes < 1:
                raise ConfigurationError(f"--processes must be at least 1, not {args.processes}.")
            return _run_processes(argv, args.processes)
        asyncio.run(
            run_worker(
                tool_modules(args.tools),
                args.task_queue,
                serve=[role.strip() for role in args.serve.split(",") if role.strip()],
                model_task_queue=args.model_task_queue,
                max_activities_per_second=args.max_activities_per_second,
                metrics_port=metrics_port,
                search_attributes=args.search_attributes,
                mcp_config=args.mcp_config,
                tuning=tuning,
            )
        )
    except AgentRunnerError as e:  # a configuration the worker cannot start with: say why, without a traceback
        # One line, even when the cause's own message has several (psycopg's, for one).
        logger.error("error: %s", " ".join(str(e).split()))
        return CONFIGURATION_EXIT_CODE
    return 0


def console_main() -> None:
    """``agent-runner-worker``: ``main``, then leave without finalizing the interpreter."""
    exit_now(main())
