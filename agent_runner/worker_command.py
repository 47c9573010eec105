"""The worker's command line: ``agent-runner-worker`` (``python worker.py`` at the top of the repository).

Usage::

    agent-runner-worker --tools my_pkg.my_tools [--tools other.tools] [--task-queue agent-runner] [--processes N]

``AGENT_RUNNER_TOOLS`` (comma-separated module names) registers tools too. The worker connects to the Temporal
server named by Temporal's standard environment configuration (``TEMPORAL_ADDRESS``, ``TEMPORAL_NAMESPACE``, TLS,
API key or a profile of its config file); with none configured it starts the embedded dev server. Claude's
credentials come from ``ANTHROPIC_API_KEY`` / ``ANTHROPIC_BASE_URL`` in this process's environment only.

This module loads little: its flags are read and checked, and ``--processes N`` supervises its N workers, before
``agent_runner.worker`` (the worker itself) is loaded.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import timedelta
from typing import Any, NoReturn, TypeVar

from agent_runner.contract.errors import AgentRunnerError, ConfigurationError
from agent_runner.contract.types import MCP_CONFIG_ENV, TASK_QUEUE, TOOLS_ENV, WORKER_ROLES
from agent_runner.process_exit import exit_now
from agent_runner.processes import CONFIGURATION_EXIT_CODE, PROCESS_INDEX_ENV, child_command, supervise
from agent_runner.tuning import Backpressure, WorkerTuning

__all__ = ["JsonFormatter", "configure_logging", "console_main", "main"]

logger = logging.getLogger("agent_runner.worker")

T = TypeVar("T")

LOG_FORMATS = ("text", "json")


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


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        port = 0
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"not a port number (1 to 65535): {text!r}")
    return port


def _rate(text: str) -> float:
    try:
        rate = float(text)
    except ValueError:
        rate = 0.0
    if not 0 < rate < float("inf"):
        raise argparse.ArgumentTypeError(f"not a number of activities per second above 0: {text!r}")
    return rate


def _log_format(text: str) -> str:
    if text not in LOG_FORMATS:
        raise argparse.ArgumentTypeError(f"invalid choice: {text!r} (choose from {', '.join(LOG_FORMATS)})")
    return text


def _from_env(parser: argparse.ArgumentParser, name: str, convert: Callable[[str], T], fallback: T, wanted: str) -> T:
    """``$name`` converted as its flag's value is, or ``fallback`` when unset or empty.

    argparse checks neither a flag's ``type`` nor its ``choices`` against a default that is not a string, so a bad
    value would otherwise surface as a traceback, or not at all.
    """
    raw = os.environ.get(name, "")
    if not raw:
        return fallback
    try:
        return convert(raw)
    except (ValueError, argparse.ArgumentTypeError):
        parser.error(f"${name} is {raw!r}, not {wanted}: set it to one, or unset it")


def _add_tuning_flags(parser: argparse.ArgumentParser) -> None:
    default = WorkerTuning()
    parser.add_argument(
        "--processes",
        type=int,
        default=_from_env(parser, "AGENT_RUNNER_WORKER_PROCESSES", int, 1, "a whole number of processes"),
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
        default=None,
        help=f"with --backpressure: calls one process runs whatever it measures (default {tuned.min_slots}, or "
        "--max-concurrent-activities if that is lower)",
    )


def _tuning(args: argparse.Namespace) -> WorkerTuning:
    # Built whether or not it is asked for, so that a bad value of its flags is refused either way.
    backpressure = Backpressure(max_lag=args.max_loop_lag, max_step_delay=args.max_step_delay)
    floor = args.min_concurrent_activities
    if floor is not None:
        backpressure = replace(backpressure, min_slots=floor)
        # Given both, they must agree: the slot supplier would lower the floor to the ceiling without a word. The
        # default floor is lowered so, as a small ceiling is all that was asked for.
        if args.backpressure and floor > args.max_concurrent_activities:
            raise ConfigurationError(
                f"--min-concurrent-activities ({floor}) must not be more than --max-concurrent-activities "
                f"({args.max_concurrent_activities}) with --backpressure: lower the one or raise the other."
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
        default=",".join(WORKER_ROLES),
        help=(
            "what to run, comma-separated: workflows, model, tools (default: all three); every worker of a queue "
            "should serve the same roles"
        ),
    )
    parser.add_argument(
        "--model-task-queue",
        default=None,
        help="route the model calls of runs this worker starts to this queue (poll it with --serve model)",
    )
    parser.add_argument(
        "--max-activities-per-second",
        type=_rate,
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
        type=_port,
        default=_from_env(parser, "AGENT_RUNNER_METRICS_PORT", _port, None, "a port number (1 to 65535)"),
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
        type=_log_format,
        choices=LOG_FORMATS,
        default=_from_env(parser, "AGENT_RUNNER_LOG_FORMAT", _log_format, "text", " or ".join(LOG_FORMATS)),
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
        if args.metrics_port is not None and args.metrics_port + max(args.processes, 1) - 1 > 65535:
            raise ConfigurationError(
                f"--metrics-port {args.metrics_port} leaves some of the {args.processes} processes no port (each "
                "serves on the next one, up to 65535): give a lower port."
            )
        if args.processes != 1:
            if args.processes < 1:
                raise ConfigurationError(f"--processes must be at least 1, not {args.processes}.")
            return _run_processes(argv, args.processes)
        # Only now: the worker's modules (Anthropic's types among them) take seconds to load, which neither a bad
        # flag nor the supervisor of --processes should wait for.
        from agent_runner.worker import run_worker, tool_modules

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
