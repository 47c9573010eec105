"""What every command shares: exit codes, output, the connection to Temporal, Ctrl-C, and reading JSON files."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Iterable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, TextIO, TypeVar

from temporalio.common import Priority

from agent_runner.client import AgentRunner
from agent_runner.connection import connect
from agent_runner.contract.errors import ConfigurationError
from agent_runner.contract.types import TASK_QUEUE

T = TypeVar("T")

MODEL_ENV = "AGENT_RUNNER_MODEL"
"""Environment variable naming the default model."""

DEFAULT_MODEL = "claude-sonnet-5-5"
DEFAULT_MAX_TOKENS = 1024

NO_KEY_NOTICE = (
    "ANTHROPIC_API_KEY is not set: using the scripted fake Messages API (the one the tests use). "
    "Set it to talk to Claude."
)
"""What ``demo`` says when it uses the fake Messages API."""

SUCCESSFUL_STATUSES = frozenset({"completed", "max_iterations", "stopped"})
"""How a run may end for ``follow`` to exit 0: on its own, at its iteration limit, or stopped by a person."""

LIST_STATUSES: Mapping[str, str] = {
    "running": "Running",
    "completed": "Completed",
    "failed": "Failed",
    "cancelled": "Canceled",
    "canceled": "Canceled",
    "terminated": "Terminated",
    "timed_out": "TimedOut",
}
"""``list --status`` values and the Temporal ``ExecutionStatus`` each one queries."""


def run_status_name(ended: str) -> str:
    """How Temporal says a run ended (``Run.ended``: ``canceled``, ...) in the run's own words (``cancelled``, ...).

    Everything else a person reads (``status``, ``list``, ``follow``) says ``cancelled``, as the run's status does.
    """
    return "cancelled" if ended == "canceled" else ended


# What the steering commands' JSON files hold, shown in their help and errors.
BLOCKS_EXAMPLE = '[{"type": "text", "text": "Answer in French."}]'
MESSAGES_EXAMPLE = '[{"role": "user", "content": "Just say hi."}]'
TOOL_RESULTS_EXAMPLE = '[{"type": "tool_result", "tool_use_id": "toolu_01", "content": "done"}]'

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141
"""What a shell reports for a command killed by SIGPIPE (128 + 13): its reader, such as ``head``, stopped reading."""


def default_model() -> str:
    """The model a run uses unless told otherwise: ``$AGENT_RUNNER_MODEL``, else ``claude-sonnet-5-5``."""
    return os.environ.get(MODEL_ENV) or DEFAULT_MODEL


def out(lines: Iterable[str]) -> None:
    """Print ``lines`` to stdout at once (a follower interleaves them with streamed text)."""
    for line in lines:
        print(line, flush=True)


def err(line: str) -> None:
    """Print one line to stderr."""
    print(line, file=sys.stderr, flush=True)


def use_color(stream: TextIO | None = None) -> bool:
    """Whether to style output for ``stream`` (stdout): a terminal, unless ``NO_COLOR`` is set or ``TERM`` is dumb."""
    stream = stream or sys.stdout  # looked up now: a test may have replaced it
    return stream.isatty() and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"


@contextlib.asynccontextmanager
async def connected(
    task_queue: str = TASK_QUEUE, *, keep_server: bool = False, embedded: bool = True
) -> AsyncIterator[AgentRunner]:
    """An ``AgentRunner`` from ``AgentRunner.connect()``; an embedded server it started is stopped on exit unless kept.

    Args:
        task_queue: The task queue runs start on.
        keep_server: Leave a server this started running (the ``run`` command: its run needs it), and say so.
        embedded: Use the embedded server when none is configured; ``False`` fails instead (``store gc``).

    Raises:
        ConfigurationError: Temporal cannot be reached or started, or is not configured and ``embedded`` is false.
    """
    if embedded:
        runner = await AgentRunner.connect(task_queue=task_queue)
    else:
        runner = AgentRunner((await connect(embedded=False))[0], task_queue=task_queue)
    try:
        yield runner
    finally:
        server = runner.embedded_server
        if server is not None and keep_server:
            err(
                f"note: no Temporal server was running, so one was started at {server.address} "
                f"(pid {server.pid}, data in {server.db_filename}). It keeps running so that a worker "
                "(`python worker.py --tools <module>`) can carry the run on."
            )
        elif server is not None:
            await runner.close()


class Interrupted(Exception):
    """Ctrl-C (SIGINT) stopped a command's wait."""


async def until_interrupted(call: Awaitable[T], interrupted: asyncio.Event | None = None) -> T:
    """``call``'s result, unless Ctrl-C (SIGINT) comes first: then ``call`` is cancelled and ``Interrupted`` raised.

    The command can then say what the interruption left behind: a run that goes on, an edit still queued.

    Args:
        call: What the command waits for.
        interrupted: An event that interrupts when set; by default one that SIGINT sets.
    """
    loop = asyncio.get_running_loop()
    stop = interrupted or asyncio.Event()
    handles_sigint = False
    if interrupted is None:
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(signal.SIGINT, stop.set)
            handles_sigint = True
    task = asyncio.ensure_future(call)
    waiting = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({task, waiting}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        if handles_sigint:
            loop.remove_signal_handler(signal.SIGINT)
        waiting.cancel()
        if not task.done():
            task.cancel()
            await asyncio.wait({task})
    if task.cancelled():
        raise Interrupted
    return task.result()


def load_json(path: str, what: str) -> Any:
    """The JSON in file ``path`` (``-`` reads stdin); ``what`` names it in errors, e.g. ``the run input``.

    Raises:
        ConfigurationError: The file cannot be read or is not JSON.
    """
    try:
        raw = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigurationError(f"Cannot read {what} {path}: {e.strerror or e}.") from e
    try:
        return json.loads(raw)
    except json.JSONDecodeError as e:
        raise ConfigurationError(f"{what[:1].upper()}{what[1:]} {path} is not valid JSON: {e}.") from e


def load_json_list(path: str, what: str, example: str) -> list[dict[str, Any]]:
    """A file's JSON list of objects (content blocks, messages, tool results); ``example`` shows one in errors.

    Raises:
        ConfigurationError: The file cannot be read, or is not a JSON list of objects.
    """
    data = load_json(path, what)
    if not isinstance(data, list) or not all(isinstance(item, dict) for item in data):
        raise ConfigurationError(
            f"{what[:1].upper()}{what[1:]} {path} must be a JSON list of objects, such as {example}."
        )
    return data


def priority_flags(args: argparse.Namespace, base: Priority | None = None) -> Priority | None:
    """``--priority-key``, ``--fairness-key`` and ``--fairness-weight`` over ``base``; ``base`` if none is given."""
    given = {
        field: getattr(args, field)
        for field in ("priority_key", "fairness_key", "fairness_weight")
        if getattr(args, field) is not None
    }
    return replace(base or Priority(), **given) if given else base
