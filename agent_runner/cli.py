"""``agent-runner``: start, follow, inspect, steer and cancel agent runs from a terminal, and a self-contained demo.

Commands (each takes ``--task-queue``, default ``agent-runner``; ``list`` filters by it only when given)::

    agent-runner run "What's the weather in Paris?" --tools get_weather    # start a run and follow it
    agent-runner run --file run.json --detach                              # start a run, print its id
    agent-runner follow RUN_ID [--from-iteration N]                        # print turns as they stream
    agent-runner transcript RUN_ID [--json]                                # the whole conversation
    agent-runner list [--status running] [--limit N]                       # a table of runs
    agent-runner status RUN_ID [--json]                                    # status, turns, token usage
    agent-runner cancel RUN_ID                                             # stop a run
    agent-runner terminate RUN_ID [--reason TEXT]                          # end it at once (last resort)
    agent-runner fork RUN_ID --from-iteration N [--detach]                 # a new run from turn N's request
    agent-runner demo                                                      # the example agent, end to end
    agent-runner store gc --retention 30d [--grace 1h] [--dry-run]         # remove content no run references
    agent-runner dev [--detach | --stop] [--tools MODULE]                  # Temporal, a worker, Claude or a fake

Steering a live run (each edit is accepted at once and applies before the run's next model call)::

    agent-runner inject RUN_ID TEXT | --file BLOCKS.json [--expected-version N]
    agent-runner retry RUN_ID [--expected-version N]                       # discard the last reply, resend
    agent-runner replace-history RUN_ID --file MESSAGES.json --expected-version N
    agent-runner params RUN_ID KEY=JSON_VALUE...                           # e.g. max_tokens=2048; KEY=null removes
    agent-runner add-tools RUN_ID NAME... / remove-tools RUN_ID NAME...
    agent-runner stop RUN_ID [--reason TEXT] [--no-wait]                   # the SDK's close()
    agent-runner approvals RUN_ID [--json]                                 # tool calls waiting for a person
    agent-runner approve RUN_ID TOOL_USE_ID [--input JSON]
    agent-runner deny RUN_ID TOOL_USE_ID [--reason TEXT]
    agent-runner advance RUN_ID [--tool-results RESULTS.json]              # step mode: let the run go on

An edit that applies at the boundary waits for it and prints ``applied at version N`` (the transcript version it
produced); with ``--no-wait``, or for a run in step mode (whose boundary comes only once it is advanced; ``--wait``
waits anyway), it prints ``accepted; it applies before the next turn``. A refused edit prints ``error: <why>`` and
exits 1. An edit to a run that waits for a person (an approval, a step-mode pause) prints that it was accepted and a
note saying what the run waits for, with the command that answers it; Ctrl-C while an edit waits says that the edit
is still queued. ``follow`` shows what a run waits for (``⏸ waiting for approval: ...``, ``⏸ paused after turn N``)
with the command that answers it, and never answers it itself.

Temporal is reached through ``agent_runner.connection.connect()``: Temporal's standard environment configuration
(``TEMPORAL_ADDRESS``, ``TEMPORAL_NAMESPACE``, a ``temporal.toml`` profile, ...), else the local embedded server on
127.0.0.1:7233, started if need be. A command stops an embedded server it started before it exits, except ``run``,
whose run needs the server to go on.

Exit codes: 0 success (a followed run that completed, reached ``max_iterations`` or was stopped), 1 an error or a
failed or cancelled run (printed as ``error: <message>``, one line, such as ``No worker is polling task queue ...``
with the command that starts one), 2 a usage error, 130 interrupted (Ctrl-C stops following or waiting, not the run).

The renderers (``render_reply``, ``render_tool_results``, ``render_transcript``, ``render_summary``,
``render_approvals``, ``waiting_notices``, ...) are pure functions of the Messages API's wire-format dicts and the
run's status, so they can be tested line by line.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shlex
import signal
import sys
import traceback
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta, tzinfo
from pathlib import Path
from typing import Any, NoReturn, TextIO, TypeVar

from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowQueryFailedError,
    WorkflowQueryRejectedError,
)
from temporalio.service import RPCError, RPCStatusCode

from agent_runner.client import AgentRunner, Run
from agent_runner.contract.errors import (
    AgentRunError,
    AgentRunnerError,
    ConfigurationError,
    EditQueued,
    RunAlreadyExists,
    RunCancelled,
    RunNotFound,
    StoreError,
)
from agent_runner.contract.events import (
    APPROVAL_WAITING,
    BLOCK_START,
    BLOCK_STOP,
    DELTA_FIELDS,
    MODEL_CALL_STARTED,
    REPLY,
    RETRACTED,
    RUN_FINISHED,
    STEP_WAITING,
    TEXT,
    TOOL_FINISHED,
    TOOL_INPUT,
    TOOL_STARTED,
    RunEvent,
)
from agent_runner.contract.types import TASK_QUEUE, RunResult, RunStatus, Usage
from agent_runner.fake_api import FakeMessagesAPI, Reply, ScriptItem, text, tool_use
from agent_runner.gc import DEFAULT_GRACE
from agent_runner.workflows.run_input import parse_run_input

T = TypeVar("T")

MODEL_ENV = "AGENT_RUNNER_MODEL"
"""Environment variable naming the default model."""

DEFAULT_MODEL = "claude-sonnet-5-5"
DEFAULT_MAX_TOKENS = 1024

MAX_TOOL_TEXT = 400
"""The most characters of a tool's input or result printed for a person; ``transcript --json`` has them whole."""

MAX_TOOL_LINES = 8
"""The most lines of a tool's result printed for a person."""

MAX_CELL_TEXT = 60
"""The most characters of a tool's input in a table cell (``approvals``; ``--json`` has it whole)."""

EDIT_ACCEPTED = "accepted; it applies before the next turn"
"""What an edit command prints when it does not wait for the edit to apply."""

SUCCESSFUL_STATUSES = frozenset({"completed", "max_iterations", "stopped"})
"""How a run may end for ``follow`` to exit 0: on its own, at its iteration limit, or stopped by a person."""

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


_DIM, _RED, _YELLOW, _BOLD, _RESET = "\x1b[2m", "\x1b[31m", "\x1b[33m", "\x1b[1m", "\x1b[0m"

LIST_STATUSES: Mapping[str, str] = {
    "running": "Running",
    "completed": "Completed",
    "failed": "Failed",
    "cancelled": "Canceled",
    "canceled": "Canceled",
    "terminated": "Terminated",
    "timed_out": "TimedOut",
    "continued_as_new": "ContinuedAsNew",
}
"""``list --status`` values and the Temporal ``ExecutionStatus`` each one queries."""

NO_KEY_NOTICE = (
    "ANTHROPIC_API_KEY is not set: using the scripted fake Messages API (the one the tests use). "
    "Set it to talk to Claude."
)

DEMO_PROMPT = "What's the weather and the local time in Paris and Tokyo right now?"
DEMO_TOOLS = ("get_weather", "get_time")


def default_model() -> str:
    """The model a run uses unless told otherwise: ``$AGENT_RUNNER_MODEL``, else ``claude-sonnet-5-5``."""
    return os.environ.get(MODEL_ENV) or DEFAULT_MODEL


# --------------------------------------------------------------------------------------------
# Rendering: pure functions of wire-format dicts
# --------------------------------------------------------------------------------------------


def _paint(line: str, style: str, color: bool) -> str:
    return f"{style}{line}{_RESET}" if color else line


def _clip(value: str, limit: int = MAX_TOOL_TEXT) -> str:
    """``value`` cut at ``limit`` characters, saying how much was left out."""
    if len(value) <= limit:
        return value
    return f"{value[:limit]}… (+{len(value) - limit} characters)"


def _compact_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def render_header(iteration: int, message: Mapping[str, Any], *, color: bool = False) -> str:
    """The line that opens one of Claude's replies, e.g. ``── turn 2 · stop_reason tool_use ──``.

    Args:
        iteration: The reply's number in the run, 1 for the first.
        message: The reply, as the Messages API returns it.
        color: Whether to add ANSI styles.
    """
    return _paint(f"── turn {iteration} · stop_reason {message.get('stop_reason') or 'none'} ──", _BOLD, color)


def render_turn(iteration: int, *, color: bool = False) -> str:
    """The line ``follow`` opens a turn with, before its text streams: ``── turn 2 ──``."""
    return _paint(f"── turn {iteration} ──", _BOLD, color)


def render_block(block: Mapping[str, Any], *, color: bool = False) -> list[str]:
    """The lines of one content block of a message.

    Text is printed as is, thinking dimmed and prefixed with ``┆``, a tool call as ``→ name {input}``; other blocks
    are named in brackets, e.g. ``[image]``.

    Args:
        block: The content block, in the Messages API's wire shape.
        color: Whether to add ANSI styles.
    """
    kind = block.get("type")
    if kind == "text":
        value = str(block.get("text") or "")
        return value.splitlines() if value else []
    if kind == "thinking":
        thought = str(block.get("thinking") or "")
        return [_paint(f"┆ {line}".rstrip(), _DIM, color) for line in thought.splitlines()]
    if kind == "redacted_thinking":
        return [_paint("┆ [redacted thinking]", _DIM, color)]
    if kind in ("tool_use", "server_tool_use", "mcp_tool_use"):
        call = f"→ {block.get('name')} {_clip(_compact_json(block.get('input', {})))}"
        if kind == "server_tool_use":
            call += " (server tool)"
        elif kind == "mcp_tool_use":
            call += f" (MCP server {block.get('server_name')})"
        return [call]
    if isinstance(kind, str) and kind.endswith("_tool_result"):
        return [f"← [{kind}]"]
    return [f"[{kind}]"]


def _result_text(content: Any) -> str:
    """A tool result's ``content`` as text: strings as is, other blocks named in brackets."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for block in content:
        if isinstance(block, Mapping) and block.get("type") == "text":
            parts.append(str(block.get("text") or ""))
        elif isinstance(block, Mapping):
            parts.append(f"[{block.get('type')}]")
        else:
            parts.append(str(block))
    return "\n".join(parts)


def render_tool_result(name: str, result: Mapping[str, Any], *, color: bool = False) -> list[str]:
    """The lines of one ``tool_result`` block: ``← name: content``, or ``← ✗ name: content`` for an error.

    Args:
        name: The tool's name (from the ``tool_use`` block the result answers).
        result: The ``tool_result`` block.
        color: Whether to add ANSI styles.
    """
    is_error = bool(result.get("is_error"))
    lines = _clip(_result_text(result.get("content"))).splitlines() or ["(no content)"]
    more = len(lines) - MAX_TOOL_LINES
    if more > 0:
        lines = [*lines[:MAX_TOOL_LINES], f"… (+{more} lines)"]
    first = f"← {'✗ ' if is_error else ''}{name}: {lines[0]}".rstrip()
    rendered = [first, *(f"    {line}".rstrip() for line in lines[1:])]
    return [_paint(line, _RED, color) for line in rendered] if is_error else rendered


def tool_results_by_id(transcript: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Every ``tool_result`` block of a transcript's user messages, by the ``tool_use_id`` it answers."""
    results: dict[str, dict[str, Any]] = {}
    for message in transcript:
        content = message.get("content")
        if message.get("role") != "user" or not isinstance(content, list):
            continue
        for block in content:
            if isinstance(block, Mapping) and block.get("type") == "tool_result":
                results[str(block.get("tool_use_id"))] = dict(block)
    return results


def client_tool_use_ids(message: Mapping[str, Any]) -> list[str]:
    """The ids of the reply's ``tool_use`` blocks that the run executes (those of a ``tool_use`` stop only)."""
    if message.get("stop_reason") != "tool_use":
        return []
    return [str(b.get("id")) for b in message.get("content") or [] if b.get("type") == "tool_use"]


def render_tool_results(
    message: Mapping[str, Any], tool_results: Mapping[str, Mapping[str, Any]], *, color: bool = False
) -> list[str]:
    """The results of a reply's tool calls, in the order of its ``tool_use`` blocks.

    Args:
        message: Claude's reply.
        tool_results: ``tool_result`` blocks by ``tool_use_id`` (see ``tool_results_by_id``); calls without a
            result (not run, or still running) are left out.
        color: Whether to add ANSI styles.
    """
    lines: list[str] = []
    for block in message.get("content") or []:
        if block.get("type") != "tool_use":
            continue
        result = tool_results.get(str(block.get("id")))
        if result is not None:
            lines.extend(render_tool_result(str(block.get("name")), result, color=color))
    return lines


def render_reply(
    message: Mapping[str, Any],
    tool_results: Mapping[str, Mapping[str, Any]] | None = None,
    *,
    iteration: int | None = None,
    color: bool = False,
) -> list[str]:
    """One of Claude's replies as lines for a person: header, content blocks, then its tools' results.

    Example, for ``iteration=1``::

        ── turn 1 · stop_reason tool_use ──
        Let me check.
        → get_weather {"city": "Paris"}
        ← get_weather: sunny, 21C in Paris

    Args:
        message: The reply, as the Messages API returns it.
        tool_results: ``tool_result`` blocks by ``tool_use_id``, or ``None`` to leave results out.
        iteration: The reply's number in the run; ``None`` for no header.
        color: Whether to add ANSI styles.
    """
    lines = [] if iteration is None else [render_header(iteration, message, color=color)]
    for block in message.get("content") or []:
        lines.extend(render_block(block, color=color))
    if tool_results is not None:
        lines.extend(render_tool_results(message, tool_results, color=color))
    return lines


def render_usage(usage: Usage) -> str:
    """Token totals, e.g. ``30 input / 15 output tokens`` (plus cache tokens when there are some)."""
    line = f"{usage.input_tokens} input / {usage.output_tokens} output tokens"
    if usage.cache_creation_input_tokens or usage.cache_read_input_tokens:
        line += f" (cache: {usage.cache_creation_input_tokens} written, {usage.cache_read_input_tokens} read)"
    return line


def render_summary(result: RunResult | RunStatus, *, color: bool = False) -> str:
    """The line that closes a run: status, turns, last stop reason and token usage.

    Example: ``── completed · 2 turns · stop_reason end_turn · 20 input / 10 output tokens ──``.
    """
    turns = f"{result.iterations} turn{'' if result.iterations == 1 else 's'}"
    line = (
        f"── {result.status} · {turns} · stop_reason {result.stop_reason or 'none'} · {render_usage(result.usage)} ──"
    )
    return _paint(line, _BOLD, color)


def render_transcript(messages: Iterable[Mapping[str, Any]], *, color: bool = False) -> list[str]:
    """A whole conversation as lines for a person.

    Each message opens with ``── user ──`` or ``── assistant ──``; a user message that only carries tool results
    is printed as the ``←`` lines of the turn before it.

    Args:
        messages: The transcript, in the Messages API's wire shape.
        color: Whether to add ANSI styles.
    """
    lines: list[str] = []
    names: dict[str, str] = {}
    for message in messages:
        role = str(message.get("role"))
        content = message.get("content")
        blocks: list[Mapping[str, Any]] = (
            [{"type": "text", "text": content}] if isinstance(content, str) else list(content or [])
        )
        only_results = bool(blocks) and all(b.get("type") == "tool_result" for b in blocks)
        if not (role == "user" and only_results):
            lines.append(_paint(f"── {role} ──", _BOLD, color))
        for block in blocks:
            if block.get("type") == "tool_use":
                names[str(block.get("id"))] = str(block.get("name"))
            if block.get("type") == "tool_result":
                tool_use_id = str(block.get("tool_use_id"))
                lines.extend(render_tool_result(names.get(tool_use_id, tool_use_id), block, color=color))
            else:
                lines.extend(render_block(block, color=color))
    return lines


def render_status(run_id: str, status: RunStatus) -> list[str]:
    """The ``status`` command's lines.

    ``version`` is the transcript's version, which ``--expected-version`` names; a stopped run also says why.
    """
    lines = [
        f"run          {run_id}",
        f"status       {status.status}",
        f"turns        {status.iterations}",
        f"stop_reason  {status.stop_reason or 'none'}",
        f"tokens       {render_usage(status.usage)}",
        f"messages     {status.transcript_length}",
        f"version      {status.version}",
    ]
    if status.pending_approvals:
        lines.append(
            f"approvals    {len(status.pending_approvals)} waiting (agent-runner approvals {shlex.quote(run_id)})"
        )
    if status.cost_usd is not None:
        lines.append(f"cost         ${status.cost_usd:.4f}")
    if status.stop_reason_detail:
        lines.append(f"stopped      {status.stop_reason_detail}")
    if status.last_error:
        lines.append(f"last error   {status.last_error}")
    return lines


def _render_table(rows: Sequence[Sequence[str]]) -> list[str]:
    """Rows as left-aligned columns two spaces apart (the first row is the header); the last column is not padded."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    return [
        "  ".join([*(f"{cell:<{width}}" for cell, width in zip(row[:-1], widths, strict=True)), row[-1]]).rstrip()
        for row in rows
    ]


def render_run_table(rows: Sequence[tuple[str, str, str]]) -> list[str]:
    """A left-aligned table of ``(id, status, started)`` rows under an ``ID STATUS STARTED`` header."""
    return _render_table([("ID", "STATUS", "STARTED"), *rows])


def _local_time(iso: str, tz: tzinfo | None = None) -> str:
    try:
        return datetime.fromisoformat(iso).astimezone(tz).strftime("%Y-%m-%d %H:%M:%S")
    except ValueError:
        return iso


def _clip_cell(value: str, limit: int = MAX_CELL_TEXT) -> str:
    """``value`` cut to ``limit`` characters for a table cell, ending in ``…`` when cut."""
    return value if len(value) <= limit else f"{value[: limit - 1]}…"


def render_approvals(approvals: Iterable[Mapping[str, Any]], *, tz: tzinfo | None = None) -> list[str]:
    """The ``approvals`` table: one row per tool call waiting for a person, oldest first.

    Example::

        TOOL_USE_ID  TOOL         INPUT             TURN  WAITING SINCE
        toolu_D      delete_file  {"path": "/etc"}  1     2026-05-04 10:15:00

    Args:
        approvals: Pending approvals as the run's ``pending_approvals`` query returns them (``tool_use_id``,
            ``name``, ``input``, ``iteration``, ``requested_at``).
        tz: The time zone of ``WAITING SINCE``; the local one by default.
    """
    rows = [("TOOL_USE_ID", "TOOL", "INPUT", "TURN", "WAITING SINCE")]
    for approval in approvals:
        rows.append(
            (
                str(approval.get("tool_use_id")),
                str(approval.get("name")),
                _clip_cell(_compact_json(approval.get("input"))),
                str(approval.get("iteration")),
                _local_time(str(approval.get("requested_at")), tz),
            )
        )
    return _render_table(rows)


def render_pending_approval(run_id: str, approval: Mapping[str, Any], *, color: bool = False) -> str:
    """The line ``follow`` prints for a tool call waiting for approval, with the command that approves it.

    Example: ``⏸ waiting for approval: delete_file {"path": "/etc"} (toolu_D) — agent-runner approve RUN toolu_D``.

    Args:
        run_id: The run's id.
        approval: One pending approval (``tool_use_id``, ``name``, ``input``, ...).
        color: Whether to add ANSI styles.
    """
    tool_use_id = str(approval.get("tool_use_id"))
    call = f"{approval.get('name')} {_clip(_compact_json(approval.get('input', {})))}"
    command = f"agent-runner approve {shlex.quote(run_id)} {shlex.quote(tool_use_id)}"
    return _paint(f"⏸ waiting for approval: {call} ({tool_use_id}) — {command}", _YELLOW, color)


def render_step_pause(run_id: str, turn: int, *, color: bool = False) -> str:
    """The line ``follow`` prints when a step-mode run pauses after a reply, with the command that advances it.

    Example: ``⏸ paused after turn 2 — agent-runner advance RUN``.
    """
    return _paint(f"⏸ paused after turn {turn} — agent-runner advance {shlex.quote(run_id)}", _YELLOW, color)


def waiting_notices(run_id: str, status: RunStatus, *, turns_shown: int, color: bool = False) -> list[tuple[str, str]]:
    """What the run waits for a person about, as ``(key, line)`` pairs: each pending approval, then a step pause.

    Only what follows a reply already printed is included, so that a notice never comes before its turn; the key
    names the notice, so that a follower prints each one once.

    Args:
        run_id: The run's id, for the commands the lines suggest.
        status: The run's status (its ``pending_approvals``, and ``waiting_for_step``).
        turns_shown: The last turn printed so far.
        color: Whether to add ANSI styles.
    """
    notices: list[tuple[str, str]] = []
    for approval in status.pending_approvals:
        if int(approval.get("iteration") or 0) <= turns_shown:
            key = f"approval {approval.get('tool_use_id')}"
            notices.append((key, render_pending_approval(run_id, approval, color=color)))
    if status.status == "waiting_for_step" and status.iterations <= turns_shown:
        notices.append((f"step {status.iterations}", render_step_pause(run_id, status.iterations, color=color)))
    return notices


def render_edit_outcome(version: int | None) -> str:
    """What an edit prints: ``applied at version N`` once it applied, or that it was accepted (``None``)."""
    return EDIT_ACCEPTED if version is None else f"applied at version {version}"


def render_wait_for_people(run_id: str, status: RunStatus) -> str:
    """What a run waits for a person about, with the command that answers it, for an edit that waits for it too.

    Example: ``run R waits for approval of delete_file (toolu_D): the edit applies once it is decided (`agent-runner
    approve R toolu_D`, or `deny`).``
    """
    run = shlex.quote(run_id)
    advance = f"the edit applies when it is advanced (`agent-runner advance {run}`)."
    pending = status.pending_approvals
    if status.status == "waiting_for_step":
        return f"run {run_id} is paused after turn {status.iterations}: {advance}"
    if status.status == "waiting_for_review":
        return f"run {run_id} waits for review of turn {status.iterations}'s tool results: {advance}"
    if status.status == "waiting_for_approval" and len(pending) == 1:
        tool_use_id = str(pending[0].get("tool_use_id"))
        return (
            f"run {run_id} waits for approval of {pending[0].get('name')} ({tool_use_id}): the edit applies once it "
            f"is decided (`agent-runner approve {run} {shlex.quote(tool_use_id)}`, or `deny`)."
        )
    if status.status == "waiting_for_approval":
        return (
            f"run {run_id} waits for approval of {len(pending)} tool calls: the edit applies once they are decided "
            f"(`agent-runner approvals {run}` lists them)."
        )
    return f"run {run_id} goes on ({status.status}): the edit applies before its next turn."


# --------------------------------------------------------------------------------------------
# Output and connection helpers
# --------------------------------------------------------------------------------------------


def _out(lines: Iterable[str]) -> None:
    for line in lines:
        print(line, flush=True)


def _err(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _use_color(stream: TextIO) -> bool:
    return stream.isatty() and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"


@contextlib.asynccontextmanager
async def connected(*, keep_server: bool = False) -> AsyncIterator[Client]:
    """A Temporal client from ``connect()``; an embedded server it started is stopped on exit unless kept.

    Args:
        keep_server: Leave a server this started running (the ``run`` command: its run needs it).

    Raises:
        ConfigurationError: Temporal cannot be reached or started.
    """
    from agent_runner.connection import connect

    client, server = await connect()
    try:
        yield client
    finally:
        if server is not None:
            if keep_server:
                _err(
                    f"note: no Temporal server was running, so one was started at {server.address} "
                    f"(pid {server.pid}, data in {server.db_filename}). It keeps running so that a worker "
                    "(`python worker.py --tools <module>`) can carry the run on."
                )
            else:
                await server.astop()


def _rpc_error(run: Run, error: RPCError) -> AgentRunError:
    if error.status == RPCStatusCode.NOT_FOUND:
        return RunNotFound(f"No run with id {run.id!r}. List runs with `agent-runner list`.")
    return AgentRunError(f"Temporal refused the request for run {run.id}: {error.message}")


async def _run_is_closed(run: Run) -> bool:
    try:
        description = await run.handle.describe()
    except RPCError as e:
        raise _rpc_error(run, e) from e
    return description.status not in (None, WorkflowExecutionStatus.RUNNING)


async def request_cancel(run: Run) -> None:
    """Ask Temporal to cancel the run: its in-flight model call and tools are cancelled, and it ends as cancelled.

    Raises:
        RunNotFound: No run has this id.
        AgentRunError: Temporal refused the request.
    """
    try:
        await run.handle.cancel()
    except RPCError as e:
        raise _rpc_error(run, e) from e


class _Follower:
    """Prints a run's live events for a person.

    Text goes out as it streams, each other block once complete, a turn's tool results once they are all in, and
    what the run waits for as soon as it waits.
    """

    def __init__(self, run_id: str, *, from_iteration: int, color: bool) -> None:
        self._run_id = run_id
        self._from = from_iteration
        self._color = color
        self._blocks: dict[int, dict[str, Any]] = {}
        """The blocks of the attempt streaming now, by index, as far as they streamed."""
        self._mid_line = False
        """Whether streamed text left the cursor in the middle of a line."""
        self._calls: dict[int, list[str]] = {}
        """Each turn's started tool calls, in order."""
        self._results: dict[str, tuple[str, dict[str, Any]]] = {}
        self._replied: set[int] = set()
        self._turns: set[int] = set()
        """The turns whose header is printed."""

    def show(self, event: RunEvent) -> None:
        """Print what ``event`` adds."""
        kind, iteration = event["type"], event["iteration"]
        if iteration < self._from and kind != RUN_FINISHED:
            return
        if kind in (BLOCK_START, REPLY) and iteration not in self._turns:
            # A turn opens with its first output, so a model call that fails before any has no empty turn.
            self._turns.add(iteration)
            self._print(render_turn(iteration, color=self._color))
        if kind == MODEL_CALL_STARTED:
            self._blocks = {}
        elif kind == RETRACTED:
            self._end_line()
            self._print(
                _paint(f"↺ attempt {event['attempt']} of turn {iteration} was cut off; retrying", _YELLOW, self._color)
            )
            self._blocks = {}
        elif kind == BLOCK_START:
            self._blocks[event["index"]] = dict(event["block"])
        elif kind in DELTA_FIELDS:
            self._delta(event)
        elif kind == BLOCK_STOP:
            self._block_stop(event["index"])
        elif kind == REPLY:
            self._end_line()
            self._replied.add(iteration)
            self._show_results(iteration)
        elif kind == TOOL_STARTED:
            self._calls.setdefault(iteration, []).append(event["tool_use_id"])
        elif kind == TOOL_FINISHED:
            self._results[event["tool_use_id"]] = (event["name"], event["result"])
            self._show_results(iteration)
        elif kind == APPROVAL_WAITING:
            self._print(render_pending_approval(self._run_id, event["approval"], color=self._color))
        elif kind == STEP_WAITING and event.get("status") == "waiting_for_step":
            self._print(render_step_pause(self._run_id, iteration, color=self._color))

    def _delta(self, event: RunEvent) -> None:
        kind = event["type"]
        piece = str(event.get(DELTA_FIELDS[kind]) or "")
        block = self._blocks.setdefault(event["index"], {"type": kind})
        key = "partial_json" if kind == TOOL_INPUT else kind
        block[key] = str(block.get(key) or "") + piece
        if kind == TEXT and piece:
            # Text goes out as it comes; everything else once its block is complete.
            print(piece, end="", flush=True)
            self._mid_line = not piece.endswith("\n")

    def _block_stop(self, index: int) -> None:
        block = self._blocks.pop(index, {})
        if block.get("type") == "text":
            self._end_line()
            return
        if "partial_json" in block:
            with contextlib.suppress(ValueError):
                block["input"] = json.loads(block.pop("partial_json") or "{}")
        self._out(render_block(block, color=self._color))

    def _show_results(self, iteration: int) -> None:
        """Print the turn's tool results in its calls' order, once its reply is printed and all of them are in.

        Together, so that their order does not depend on which tool finished first.
        """
        calls = self._calls.get(iteration, [])
        if iteration in self._replied and calls and all(c in self._results for c in calls):
            for call in calls:
                name, result = self._results.pop(call)
                self._out(render_tool_result(name, result, color=self._color))
            del self._calls[iteration]

    def finish(self) -> None:
        """End a line of text that a stopped stream left open."""
        self._end_line()

    def _end_line(self) -> None:
        if self._mid_line:
            print(flush=True)
            self._mid_line = False

    def _print(self, line: str) -> None:
        self._end_line()
        print(line, flush=True)

    def _out(self, lines: Iterable[str]) -> None:
        for line in lines:
            self._print(line)


# --------------------------------------------------------------------------------------------
# Following a run
# --------------------------------------------------------------------------------------------


async def follow_run(run: Run, *, from_iteration: int = 1, color: bool = False) -> int:
    """Print the run's turns as they stream, its tools' results as they come, then a summary line.

    Claude's text is printed as it arrives; a model call that failed mid-stream and is retried is marked
    (``↺ attempt 1 of turn 2 was cut off; retrying``), and the new attempt's text follows. While the run waits for a
    person, it says so once with the command to use, and leaves the decision to them:
    ``⏸ waiting for approval: delete_file {"path": "/etc"} (toolu_D) — agent-runner approve RUN toolu_D`` for each
    pending tool call, ``⏸ paused after turn 2 — agent-runner advance RUN`` for a step-mode pause. It never approves
    or advances anything itself. When no worker polls the run's task queue it says so on stderr, with the command
    that starts one, and goes on waiting.

    Args:
        run: The run to follow.
        from_iteration: The first turn to print (1 is the first).
        color: Whether to add ANSI styles.

    Returns:
        The exit code: 0 when the run completed, reached ``max_iterations`` or was stopped by a person, 1 when it
        failed or was cancelled (the error is printed to stderr as ``error: <message>``).
    """
    follower = _Follower(run.id, from_iteration=from_iteration, color=color)
    run.no_worker_notice = lambda e: _err(f"note: waiting for a worker. {e}")
    try:
        try:
            async for event in run.events():
                follower.show(event)
        finally:
            follower.finish()
        result = await run.result()
    except AgentRunnerError as e:
        _err(f"error: {e}")
        return EXIT_ERROR
    _out([render_summary(result, color=color)])
    return EXIT_OK if result.status in SUCCESSFUL_STATUSES else EXIT_ERROR


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


async def follow_until_interrupted(
    run: Run,
    *,
    from_iteration: int = 1,
    color: bool = False,
    interrupted: asyncio.Event | None = None,
) -> int:
    """``follow_run``, stopped by Ctrl-C (SIGINT) or by ``interrupted`` being set; the run itself goes on.

    Args:
        run: The run to follow.
        from_iteration: The first reply to print.
        color: Whether to add ANSI styles.
        interrupted: An event that stops following when set; by default one that SIGINT sets.

    Returns:
        ``follow_run``'s exit code, or 130 when interrupted.
    """
    try:
        return await until_interrupted(follow_run(run, from_iteration=from_iteration, color=color), interrupted)
    except Interrupted:
        return EXIT_INTERRUPTED


def _interrupted_note(run_id: str) -> str:
    return (
        f"interrupted: stopped following. Run {run_id} keeps going; follow it again with "
        f"`agent-runner follow {run_id}`, or stop it with `agent-runner cancel {run_id}`."
    )


# --------------------------------------------------------------------------------------------
# Commands
# --------------------------------------------------------------------------------------------


def _load_json(path: str, what: str) -> Any:
    """The JSON in file ``path`` (``-`` reads stdin); ``what`` names it in errors, e.g. ``the run input``."""
    try:
        raw = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigurationError(f"Cannot read {what} {path}: {e.strerror or e}.") from e
    try:
        return json.loads(raw)
    except json.JSONDecodeError as e:
        raise ConfigurationError(f"{what[:1].upper()}{what[1:]} {path} is not valid JSON: {e}.") from e


def _load_json_list(path: str, what: str, example: str) -> list[dict[str, Any]]:
    """A file's JSON list of objects (content blocks, messages, tool results); ``example`` shows one in errors."""
    data = _load_json(path, what)
    if not isinstance(data, list) or not all(isinstance(item, dict) for item in data):
        raise ConfigurationError(
            f"{what[:1].upper()}{what[1:]} {path} must be a JSON list of objects, such as {example}."
        )
    return data


def _load_run_file(path: str) -> dict[str, Any]:
    data = _load_json(path, "the run input")
    if not isinstance(data, dict):
        raise ConfigurationError(
            f"The run input {path} must be a JSON object such as "
            '{"model": "claude-sonnet-5-5", "max_tokens": 1024, "messages": [{"role": "user", "content": "Hi"}]}.'
        )
    return data


def build_run_input(args: argparse.Namespace) -> dict[str, Any]:
    """The run's JSON input from ``run``'s arguments: the ``--file`` input or the prompt, then the flags on top.

    Raises:
        ConfigurationError: The file cannot be read or is not a JSON object.
        InvalidRunInput: The result is not a run's valid input (checked before anything starts).
    """
    data = _load_run_file(args.file) if args.file is not None else {}
    if args.prompt is not None:
        data["messages"] = [{"role": "user", "content": args.prompt}]
    if args.model is not None or "model" not in data:
        data["model"] = args.model or default_model()
    if args.max_tokens is not None or "max_tokens" not in data:
        data["max_tokens"] = args.max_tokens or DEFAULT_MAX_TOKENS
    if args.system is not None:
        data["system"] = args.system
    if args.tools:
        data["tools"] = list(args.tools)
    if args.max_iterations is not None:
        data["max_iterations"] = args.max_iterations
    if args.no_thread:
        data["thread"] = False
    parse_run_input(data)
    return data


async def start_run(runner: AgentRunner, run_input: Mapping[str, Any], run_id: str | None = None) -> Run:
    """Start a run from its JSON input (as ``temporal workflow start --input`` takes it).

    Raises:
        RunAlreadyExists: A run with this id exists, running or ended.
        AgentRunError: Temporal refused the start.
    """
    params = dict(run_input)
    try:
        return await runner.start(
            model=params.pop("model"),
            max_tokens=params.pop("max_tokens"),
            messages=params.pop("messages"),
            tools=params.pop("tools", []),
            max_iterations=params.pop("max_iterations", None),
            thread=params.pop("thread", True),
            id=run_id,
            **params,
        )
    except RunAlreadyExists as e:
        raise RunAlreadyExists(
            f"A run with id {run_id!r} already exists: pick another --id, or follow it with "
            f"`agent-runner follow {run_id}`."
        ) from e
    except RPCError as e:
        raise AgentRunError(f"Temporal refused to start the run: {e.message}") from e


async def cmd_run(args: argparse.Namespace) -> int:
    """``run``: start a run, print its id, then follow it unless ``--detach``."""
    run_input = build_run_input(args)
    async with connected(keep_server=True) as client:
        run = await start_run(AgentRunner(client, task_queue=args.task_queue), run_input, args.id)
        return await _announce_and_follow(run, follow=args.follow)


async def _announce_and_follow(run: Run, *, follow: bool) -> int:
    """Print a new run's id, then follow it unless detached."""
    print(run.id, flush=True)
    if not follow:
        return EXIT_OK
    code = await follow_until_interrupted(run, color=_use_color(sys.stdout))
    if code == EXIT_INTERRUPTED:
        _err(_interrupted_note(run.id))
    return code


async def cmd_follow(args: argparse.Namespace) -> int:
    """``follow``: print a run's turns as they stream."""
    async with connected() as client:
        run = AgentRunner(client, task_queue=args.task_queue).attach(args.run_id)
        code = await follow_until_interrupted(run, from_iteration=args.from_iteration, color=_use_color(sys.stdout))
        if code == EXIT_INTERRUPTED:
            _err(_interrupted_note(run.id))
        return code


async def cmd_transcript(args: argparse.Namespace) -> int:
    """``transcript``: the whole conversation, readable or as JSON."""
    async with connected() as client:
        run = AgentRunner(client, task_queue=args.task_queue).attach(args.run_id)
        transcript = await run.transcript()
    if args.json:
        print(json.dumps(transcript, indent=2, ensure_ascii=False), flush=True)
    else:
        _out(render_transcript(transcript, color=_use_color(sys.stdout)))
    return EXIT_OK


async def cmd_store_gc(args: argparse.Namespace) -> int:
    """``store gc``: remove content no open or recently closed run references (``agent_runner/gc.py``)."""
    from agent_runner.gc import collect_garbage
    from agent_runner.store import open_store

    # The store first: a wrong AGENT_RUNNER_STORE or missing keys is reported before Temporal is reached.
    async with open_store() as store, connected() as client:
        collected = await collect_garbage(
            client, store, retention=args.retention, grace=args.grace, dry_run=args.dry_run
        )
    _out([collected.summary()])
    return EXIT_OK


def list_query(status: str | None, task_queue: str | None, query: str | None) -> str | None:
    """The visibility query of ``list``: its filters joined with ``AND``, or ``None`` for every run."""
    clauses: list[str] = []
    if status is not None:
        clauses.append(f"ExecutionStatus = '{LIST_STATUSES[status]}'")
    if task_queue is not None:
        escaped = task_queue.replace("'", "\\'")
        clauses.append(f"TaskQueue = '{escaped}'")
    if query:
        clauses.append(f"({query})")
    return " AND ".join(clauses) or None


async def cmd_list(args: argparse.Namespace) -> int:
    """``list``: a table of runs, newest first."""
    async with connected() as client:
        try:
            runs = await AgentRunner(client).list(
                list_query(args.status, args.task_queue, args.query), limit=args.limit
            )
        except RPCError as e:
            raise AgentRunError(f"Temporal refused to list runs: {e.message}") from e
    if not runs:
        _err("no runs found")
        return EXIT_OK
    _out(render_run_table([(r.id, r.status, _local_time(r.start_time)) for r in runs]))
    return EXIT_OK


async def cmd_status(args: argparse.Namespace) -> int:
    """``status``: the run's status, turns, stop reason and token usage."""
    async with connected() as client:
        run = AgentRunner(client, task_queue=args.task_queue).attach(args.run_id)
        status = await run.status()
    if args.json:
        print(status.model_dump_json(indent=2), flush=True)
    else:
        _out(render_status(run.id, status))
    return EXIT_OK


async def cmd_cancel(args: argparse.Namespace) -> int:
    """``cancel``: ask the run to stop, then report how it ended (waiting up to ``--wait`` seconds)."""
    async with connected() as client:
        run = AgentRunner(client, task_queue=args.task_queue).attach(args.run_id)
        if await _run_is_closed(run):
            description = await run.handle.describe()
            state = description.status.name.lower() if description.status else "closed"
            print(f"Run {run.id} already ended ({state}); there is nothing to cancel.", flush=True)
            return EXIT_OK
        await request_cancel(run)
        print(f"Cancellation of run {run.id} requested.", flush=True)
        try:
            result = await asyncio.wait_for(run.result(), timeout=args.wait)
        except TimeoutError:
            print(
                f"Run {run.id} has not stopped after {args.wait:g} s: it stops as soon as a worker on its task queue "
                "handles the request. Check it with `agent-runner status`.",
                flush=True,
            )
            return EXIT_OK
        except RunCancelled:
            print(f"Run {run.id} is cancelled: in-flight model calls and tools were stopped.", flush=True)
            return EXIT_OK
        print(f"Run {run.id} ended before the cancellation took effect: {result.status}.", flush=True)
        return EXIT_OK


async def cmd_fork(args: argparse.Namespace) -> int:
    """``fork``: a new run from a chosen iteration of an existing one; prints its id, then follows it."""
    async with connected() as client:
        runner = AgentRunner(client, task_queue=args.task_queue)
        fork = await runner.attach(args.run_id).fork(args.from_iteration, id=args.id)
        return await _announce_and_follow(fork, follow=args.follow)


async def cmd_terminate(args: argparse.Namespace) -> int:
    """``terminate``: end a run at once, without letting it finish anything."""
    async with connected() as client:
        await AgentRunner(client, task_queue=args.task_queue).attach(args.run_id).terminate(args.reason)
        print(f"Run {args.run_id} is terminated: {args.reason}", flush=True)
        return EXIT_OK


# --------------------------------------------------------------------------------------------
# Steering
# --------------------------------------------------------------------------------------------

BLOCKS_EXAMPLE = '[{"type": "text", "text": "Answer in French."}]'
MESSAGES_EXAMPLE = '[{"role": "user", "content": "Just say hi."}]'
TOOL_RESULTS_EXAMPLE = '[{"type": "tool_result", "tool_use_id": "toolu_01", "content": "done"}]'


async def started_in_step_mode(client: Client, run: Run) -> bool:
    """Whether the run was started with ``step``: then its edits apply only once a client advances it.

    Read from the run's start input (the first event of its history), since a step-mode run that is busy with a
    model call does not look paused yet.

    Raises:
        RunNotFound: No run has this id.
    """
    try:
        async for event in run.handle.fetch_history_events(page_size=1):
            if not event.HasField("workflow_execution_started_event_attributes"):
                return False
            payloads = event.workflow_execution_started_event_attributes.input.payloads
            values = await client.data_converter.decode(payloads) if payloads else []
            raw = values[0] if values else None
            return isinstance(raw, Mapping) and raw.get("step") not in (None, False)
    except RPCError as e:
        raise _rpc_error(run, e) from e
    return False


EditCall = Callable[[Run, bool], Awaitable[int | None]]
"""An edit of a run: ``(run, wait) -> version``, the version being ``None`` when not waited for."""


async def _edit(args: argparse.Namespace, edit: EditCall) -> int:
    """Send an edit that applies at the run's boundary; print the version it produced, or that it was accepted.

    ``args.wait`` is ``True`` (``--wait``), ``False`` (``--no-wait``) or ``None``: wait unless the run is in step
    mode, whose boundary only comes once somebody advances it.
    """
    async with connected() as client:
        run = AgentRunner(client, task_queue=args.task_queue).attach(args.run_id)
        step = args.wait is None and await started_in_step_mode(client, run)
        wait = not step if args.wait is None else bool(args.wait)
        run.wait_for_people = False  # a person must act before the edit can apply: say so rather than hang
        try:
            version = await until_interrupted(edit(run, wait))
        except EditQueued:
            print(EDIT_ACCEPTED, flush=True)
            _err(f"note: {render_wait_for_people(run.id, await run.status())}")
            return EXIT_OK
        except Interrupted:
            if run.interrupted_edits:
                _err(
                    f"interrupted: stopped waiting. The edit is still queued in run {run.id} and applies before its "
                    f"next turn; `agent-runner status {shlex.quote(run.id)}` shows the transcript version."
                )
            else:
                _err(
                    f"interrupted before run {run.id} confirmed the edit: it may still apply; check with "
                    f"`agent-runner transcript {shlex.quote(run.id)}`."
                )
            return EXIT_INTERRUPTED
    print(render_edit_outcome(version), flush=True)
    if step:
        _err(
            f"note: run {run.id} is in step mode: the edit applies when it is advanced "
            f"(`agent-runner advance {shlex.quote(run.id)}`)."
        )
    return EXIT_OK


async def cmd_inject(args: argparse.Namespace) -> int:
    """``inject``: user content for the next turn; it joins the tool results' message when there are any."""
    content: str | list[dict[str, Any]] = (
        args.text if args.file is None else _load_json_list(args.file, "the content blocks", BLOCKS_EXAMPLE)
    )
    return await _edit(args, lambda run, wait: run.inject(content, expected_version=args.expected_version, wait=wait))


async def cmd_retry(args: argparse.Namespace) -> int:
    """``retry``: discard Claude's last reply (its tools do not run if they have not yet) and send the turn again."""
    return await _edit(args, lambda run, wait: run.retry(expected_version=args.expected_version, wait=wait))


async def cmd_replace_history(args: argparse.Namespace) -> int:
    """``replace-history``: the whole conversation replaced, if it is still at ``--expected-version``."""
    messages = _load_json_list(args.file, "the messages", MESSAGES_EXAMPLE)
    return await _edit(
        args, lambda run, wait: run.replace_history(messages, expected_version=args.expected_version, wait=wait)
    )


async def cmd_params(args: argparse.Namespace) -> int:
    """``params``: request parameters changed for every later turn; ``KEY=null`` removes one."""
    params = dict(args.params)
    return await _edit(args, lambda run, wait: run.update_params(wait=wait, **params))


async def cmd_add_tools(args: argparse.Namespace) -> int:
    """``add-tools``: registered tools (or raw JSON definitions) available from the next turn on."""
    return await _edit(args, lambda run, wait: run.add_tools(*args.tools, wait=wait))


async def cmd_remove_tools(args: argparse.Namespace) -> int:
    """``remove-tools``: tools taken away from the next turn on."""
    return await _edit(args, lambda run, wait: run.remove_tools(*args.names, wait=wait))


async def cmd_stop(args: argparse.Namespace) -> int:
    """``stop``: end the run at its next step (the SDK's ``close()``); then wait for it to end, unless told not to."""
    async with connected() as client:
        run = AgentRunner(client, task_queue=args.task_queue).attach(args.run_id)
        await (run.stop(args.reason) if args.reason is not None else run.stop())
        if not args.wait:
            print("accepted; the run stops at its next step (a reply's tools that have not run never run)", flush=True)
            return EXIT_OK
        result = await run.result()
    _out([render_summary(result, color=_use_color(sys.stdout))])
    return EXIT_OK if result.status in SUCCESSFUL_STATUSES else EXIT_ERROR


async def cmd_approvals(args: argparse.Namespace) -> int:
    """``approvals``: the run's tool calls waiting for a person."""
    async with connected() as client:
        run = AgentRunner(client, task_queue=args.task_queue).attach(args.run_id)
        pending = [p.model_dump(mode="json") for p in await run.pending_approvals()]
    if args.json:
        print(json.dumps(pending, indent=2, ensure_ascii=False), flush=True)
    elif not pending:
        _err(f"no tool call of run {run.id} waits for approval")
    else:
        _out(render_approvals(pending))
    return EXIT_OK


async def cmd_approve(args: argparse.Namespace) -> int:
    """``approve``: let a waiting tool call run, with Claude's input or ``--input``."""
    async with connected() as client:
        run = AgentRunner(client, task_queue=args.task_queue).attach(args.run_id)
        await run.approve(args.tool_use_id, input=args.input)
    edited = "" if args.input is None else " with the given input"
    print(f"approved {args.tool_use_id}{edited}: it runs now", flush=True)
    return EXIT_OK


async def cmd_deny(args: argparse.Namespace) -> int:
    """``deny``: refuse a waiting tool call: it never runs, and Claude sees the reason as an error result."""
    async with connected() as client:
        run = AgentRunner(client, task_queue=args.task_queue).attach(args.run_id)
        await (run.deny(args.tool_use_id, args.reason) if args.reason is not None else run.deny(args.tool_use_id))
    print(f"denied {args.tool_use_id}: it does not run, and Claude is told why", flush=True)
    return EXIT_OK


async def cmd_advance(args: argparse.Namespace) -> int:
    """``advance``: let a step-mode run go on past the reply it paused after."""
    tool_results = (
        None
        if args.tool_results is None
        else _load_json_list(args.tool_results, "the tool results", TOOL_RESULTS_EXAMPLE)
    )
    async with connected() as client:
        run = AgentRunner(client, task_queue=args.task_queue).attach(args.run_id)
        await run.advance(tool_results=tool_results)
    if tool_results is None:
        print("advanced", flush=True)
    else:
        count = f"{len(tool_results)} tool result{'' if len(tool_results) == 1 else 's'}"
        print(f"advanced with your {count}: no tool runs", flush=True)
    return EXIT_OK


# --------------------------------------------------------------------------------------------
# The demo
# --------------------------------------------------------------------------------------------


class DemoClaude:
    """The scripted Claude of ``demo`` when no API key is set: a ``FakeMessagesAPI`` responder.

    It answers by what the conversation already holds, whatever the request shape (full history or a thread's new
    messages): first it calls ``get_weather`` for Paris and Tokyo in parallel, then ``get_time`` for both, then it
    answers with a summary that quotes the tool results it received.
    """

    WEATHER = {"toolu_demo_weather_paris": "Paris", "toolu_demo_weather_tokyo": "Tokyo"}
    TIME = {"toolu_demo_time_paris": "Paris", "toolu_demo_time_tokyo": "Tokyo"}

    def __init__(self) -> None:
        self.results: dict[str, tuple[str, bool]] = {}

    def __call__(self, body: dict[str, Any]) -> ScriptItem:
        """The reply to one request body."""
        for block in tool_results_by_id(body.get("messages") or []).values():
            self.results[str(block.get("tool_use_id"))] = (
                _result_text(block.get("content")),
                bool(block.get("is_error")),
            )
        usage = {"input_tokens": 380 + 60 * len(self.results), "output_tokens": 70}
        if not set(self.WEATHER) <= set(self.results):
            return Reply(
                content=[
                    text("I'll check the weather in both cities first."),
                    *(tool_use(i, "get_weather", {"city": city}) for i, city in self.WEATHER.items()),
                ],
                stop_reason="tool_use",
                usage=usage,
            )
        if not set(self.TIME) <= set(self.results):
            return Reply(
                content=[
                    text("Now the local time in each city."),
                    *(tool_use(i, "get_time", {"city": city}) for i, city in self.TIME.items()),
                ],
                stop_reason="tool_use",
                usage=usage,
            )
        lines = ["Here's the picture right now:"]
        for (weather_id, city), time_id in zip(self.WEATHER.items(), self.TIME, strict=True):
            weather = self._quote(weather_id, city, "weather")
            local_time = self._quote(time_id, city, "local time")
            lines.append(f"- {city}: {weather}, local time {local_time}.")
        return Reply(content=[text("\n".join(lines))], stop_reason="end_turn", usage={**usage, "output_tokens": 90})

    def _quote(self, tool_use_id: str, city: str, what: str) -> str:
        result, is_error = self.results[tool_use_id]
        if is_error:
            return f"{what} unavailable ({result})"
        return result.removesuffix(f" in {city}")


async def cmd_demo(args: argparse.Namespace) -> int:
    """``demo``: the example agent end to end, on an in-process worker and Claude or the scripted fake."""
    import anthropic

    from agent_runner.activities.claude import ClaudeActivities
    from agent_runner.worker import build_registry, build_worker

    fake: FakeMessagesAPI | None = None
    previous_base_url = os.environ.get("ANTHROPIC_BASE_URL")
    claude_factory: Callable[[], anthropic.AsyncAnthropic] | None = None  # None: the key from the environment
    if not os.environ.get("ANTHROPIC_API_KEY"):
        _out([NO_KEY_NOTICE])
        fake = FakeMessagesAPI().start()
        fake.responder = DemoClaude()
        os.environ["ANTHROPIC_BASE_URL"] = fake.url

        def fake_claude() -> anthropic.AsyncAnthropic:
            # The fake accepts any key. It lives only in this worker's client, never in a run's input.
            return anthropic.AsyncAnthropic(api_key="demo-key-for-the-fake-api", max_retries=0)

        claude_factory = fake_claude

    model = args.model or default_model()
    code = EXIT_ERROR
    task_queue = f"demo-{uuid.uuid4()}"  # a stale worker of an earlier demo cannot steal this run's tasks
    try:
        async with connected() as client:
            worker = build_worker(
                client,
                registry=build_registry(["agent_runner.example_tools"]),
                task_queue=task_queue,
                claude=ClaudeActivities(claude_factory),
                graceful_shutdown_timeout=timedelta(seconds=5),
            )
            async with worker:
                runner = AgentRunner(client, task_queue=task_queue)
                run = await runner.start(
                    model=model,
                    max_tokens=DEFAULT_MAX_TOKENS,
                    messages=[{"role": "user", "content": DEMO_PROMPT}],
                    tools=list(DEMO_TOOLS),
                    max_iterations=10,
                )
                color = _use_color(sys.stdout)
                _out(
                    [
                        f"Run {run.id} · model {model}{' (scripted fake)' if fake else ''} · "
                        f"Temporal {client.service_client.config.target_host}",
                        _paint("── user ──", _BOLD, color),
                        DEMO_PROMPT,
                    ]
                )
                code = await follow_until_interrupted(run, color=color)
                if code == EXIT_INTERRUPTED:
                    _err(f"interrupted: cancelling demo run {run.id}")
                    with contextlib.suppress(AgentRunnerError, TimeoutError):
                        await request_cancel(run)
                        await asyncio.wait_for(run.result(), timeout=5)
    finally:
        if fake is not None:
            fake.stop()
            if previous_base_url is None:
                os.environ.pop("ANTHROPIC_BASE_URL", None)
            else:
                os.environ["ANTHROPIC_BASE_URL"] = previous_base_url
    return code


# --------------------------------------------------------------------------------------------
# The development stack
# --------------------------------------------------------------------------------------------


def _line(line: str) -> None:
    print(line, flush=True)


async def cmd_dev(args: argparse.Namespace) -> int:
    """``dev``: Temporal, a worker with the example tools and Claude or the scripted fake (``agent_runner.dev``)."""
    from agent_runner import dev
    from agent_runner.temporal_server import DEFAULT_PORT

    if args.stop:
        await dev.stop_stack(out=_line)
        return EXIT_OK
    modules = dev.tool_modules(args.tools)
    if args.detach:
        argv = ["--task-queue", args.task_queue, *(arg for module in args.tools for arg in ("--tools", module))]
        if args.port is not None:
            argv += ["--port", str(args.port)]
        await dev.start_detached(argv, modules, args.task_queue, out=_line, note=_err)
        return EXIT_OK
    await dev.serve(
        modules, args.task_queue, default_model=default_model(), embedded_port=args.port or DEFAULT_PORT, out=_line
    )
    return EXIT_OK


# --------------------------------------------------------------------------------------------
# Argument parsing and entry points
# --------------------------------------------------------------------------------------------


def _int_at_least(minimum: int, what: str) -> Callable[[str], int]:
    def parse(value: str) -> int:
        try:
            number = int(value)
        except ValueError:
            number = minimum - 1
        if number < minimum:
            raise argparse.ArgumentTypeError(f"expected {what}, got {value!r}")
        return number

    return parse


_positive_int = _int_at_least(1, "a positive integer")
_version = _int_at_least(0, "a transcript version (0 or more)")


def _duration(value: str) -> timedelta:
    """``30d``, ``12h``, ``1h30m``, ``0s``: a ``timedelta`` (units s, m, h, d, w)."""
    import re

    parts = re.findall(r"(\d+)([smhdw])", value)
    if not parts or "".join(number + unit for number, unit in parts) != value:
        raise argparse.ArgumentTypeError(f"{value!r} is not a duration: write e.g. 30d, 12h, 1h30m or 0s")
    units = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}
    return sum((timedelta(**{units[unit]: int(number)}) for number, unit in parts), timedelta())


def _json_object(value: str) -> dict[str, Any]:
    try:
        data = json.loads(value)
    except json.JSONDecodeError as e:
        raise argparse.ArgumentTypeError(f"expected a JSON object, got {value!r} ({e})") from None
    if not isinstance(data, dict):
        raise argparse.ArgumentTypeError(f'expected a JSON object such as \'{{"path": "/tmp/x"}}\', got {value!r}')
    return data


def _tool_arg(value: str) -> str | dict[str, Any]:
    """A registered tool's name, or a raw tool definition given as a JSON object."""
    return _json_object(value) if value.lstrip().startswith("{") else value


def parse_param(assignment: str) -> tuple[str, Any]:
    """``KEY=JSON_VALUE`` as ``(key, value)``; a value that is not valid JSON is taken as a string.

    ``max_tokens=2048`` gives ``2048``, ``tool_choice={"type": "auto"}`` a dict, ``system=Be brief.`` the string,
    ``system="42"`` the string ``"42"``, and ``KEY=null`` ``None``, which removes the parameter.

    Raises:
        argparse.ArgumentTypeError: ``assignment`` has no ``=`` or no key.
    """
    key, sep, raw = assignment.partition("=")
    key = key.strip()
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=JSON_VALUE, e.g. max_tokens=2048, got {assignment!r}")
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        value = raw
    return key, value


def _check_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """The usage rules argparse cannot express; a broken one exits 2 with the usage."""
    if args.command == "run" and (args.prompt is None) == (args.file is None):
        parser.error("run: give either a PROMPT or --file RUN.json")
    if args.command == "inject" and (args.text is None) == (args.file is None):
        parser.error("inject: give either TEXT or --file BLOCKS.json")
    if args.command == "params":
        keys = [key for key, _ in args.params]
        repeated = sorted({key for key in keys if keys.count(key) > 1})
        if repeated:
            parser.error(f"params: {', '.join(repeated)} given more than once")
        if "wait" in keys:
            parser.error("params: `wait` is not a request parameter")


def build_parser() -> argparse.ArgumentParser:
    """The ``agent-runner`` argument parser."""
    parser = argparse.ArgumentParser(
        prog="agent-runner",
        description="Durable Claude agent runs on Temporal: start, follow, inspect, steer and cancel them.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, help: str) -> argparse.ArgumentParser:  # noqa: A002 - argparse's own word
        sub = commands.add_parser(name, help=help, description=help)
        sub.add_argument(
            "--task-queue",
            default=TASK_QUEUE,
            help=f"the task queue runs start on and workers poll (default {TASK_QUEUE})",
        )
        return sub

    def steering(name: str, help: str) -> argparse.ArgumentParser:  # noqa: A002 - argparse's own word
        sub = command(name, help)
        sub.add_argument("run_id", metavar="RUN_ID")
        return sub

    def edit(name: str, help: str) -> argparse.ArgumentParser:  # noqa: A002 - argparse's own word
        sub = steering(name, help)
        waiting = sub.add_mutually_exclusive_group()
        waiting.add_argument(
            "--wait",
            dest="wait",
            action="store_true",
            default=None,
            help="wait for the edit to apply and print the transcript version it produced (the default, except for "
            "a run in step mode, whose edits apply only once it is advanced)",
        )
        waiting.add_argument(
            "--no-wait",
            dest="wait",
            action="store_false",
            help="return once the run accepted the edit; it applies before the next turn",
        )
        return sub

    def expected_version(sub: argparse.ArgumentParser, *, required: bool = False) -> None:
        sub.add_argument(
            "--expected-version",
            type=_version,
            required=required,
            metavar="N",
            help="the transcript version this edit was made from (`agent-runner status` shows it; read it before "
            "the transcript): if the run has moved on, the edit is refused",
        )

    run = command("run", "Start a run, print its id, and follow it.")
    run.add_argument("prompt", nargs="?", metavar="PROMPT", help="the user's message")
    run.add_argument(
        "--file",
        metavar="RUN.json",
        help="the run's JSON input, as `temporal workflow start --input` takes it ('-' reads stdin); "
        "the other flags override its fields",
    )
    run.add_argument("--model", help=f"the model (default ${MODEL_ENV}, else {DEFAULT_MODEL})")
    run.add_argument(
        "--max-tokens", type=_positive_int, help=f"the most tokens per reply (default {DEFAULT_MAX_TOKENS})"
    )
    run.add_argument("--system", help="the system prompt")
    run.add_argument(
        "--tools",
        nargs="+",
        action="extend",
        metavar="NAME",
        help="registered tools Claude may call (replaces the file's tools)",
    )
    run.add_argument("--max-iterations", type=_positive_int, help="the most replies to ask for (default: no limit)")
    run.add_argument(
        "--no-thread", action="store_true", help="resend the full history every turn instead of using a thread"
    )
    run.add_argument("--id", help="the run's id (default agent-<uuid>)")
    run.add_argument("--follow", dest="follow", action="store_true", default=True, help="follow the run (default)")
    run.add_argument("--detach", dest="follow", action="store_false", help="print the run's id and exit")
    run.set_defaults(handler=cmd_run)

    follow = command("follow", "Print a run's replies and tool results as they come.")
    follow.add_argument("run_id", metavar="RUN_ID")
    follow.add_argument(
        "--from-iteration", type=_positive_int, default=1, metavar="N", help="the first reply to print (default 1)"
    )
    follow.set_defaults(handler=cmd_follow)

    transcript = command("transcript", "Print a run's whole conversation.")
    transcript.add_argument("run_id", metavar="RUN_ID")
    transcript.add_argument("--json", action="store_true", help="the raw transcript, in the Messages API's shape")
    transcript.set_defaults(handler=cmd_transcript)

    listing = commands.add_parser("list", help="List runs, newest first.", description="List runs, newest first.")
    listing.add_argument(
        "--task-queue", default=None, help="only runs on this task queue (default: runs on every task queue)"
    )
    listing.add_argument("--status", choices=sorted(LIST_STATUSES), help="only runs in this state")
    listing.add_argument("--query", help="a further Temporal visibility query, e.g. \"StartTime > '2026-01-01'\"")
    listing.add_argument("--limit", type=_positive_int, default=50, help="the most runs to list (default 50)")
    listing.set_defaults(handler=cmd_list)

    status = command("status", "Print a run's status, turns, stop reason and token usage.")
    status.add_argument("run_id", metavar="RUN_ID")
    status.add_argument("--json", action="store_true", help="as JSON")
    status.set_defaults(handler=cmd_status)

    cancel = command("cancel", "Cancel a run: its in-flight model call and tools are stopped.")
    cancel.add_argument("run_id", metavar="RUN_ID")
    cancel.add_argument(
        "--wait", type=float, default=10.0, metavar="SECONDS", help="how long to wait for the run to stop (default 10)"
    )
    cancel.set_defaults(handler=cmd_cancel)

    fork = command("fork", "Start a new run from a chosen iteration of a run (its request for that turn).")
    fork.add_argument("run_id", metavar="RUN_ID")
    fork.add_argument("--from-iteration", type=_positive_int, required=True, metavar="N")
    fork.add_argument("--id", default=None, help="the new run's id (default: a new agent-<uuid>)")
    fork.add_argument("--detach", dest="follow", action="store_false", help="print the new run's id and return")
    fork.set_defaults(handler=cmd_fork, follow=True)

    terminate = command("terminate", "End a run at once (a last resort: prefer stop or cancel).")
    terminate.add_argument("run_id", metavar="RUN_ID")
    terminate.add_argument("--reason", default="terminated from the command line")
    terminate.set_defaults(handler=cmd_terminate)

    inject = edit("inject", "Add user content before the next turn (it joins the tool results' message).")
    inject.add_argument("text", nargs="?", metavar="TEXT", help="the text to add")
    inject.add_argument(
        "--file", metavar="BLOCKS.json", help=f"a JSON list of content blocks instead of TEXT, e.g. {BLOCKS_EXAMPLE}"
    )
    expected_version(inject)
    inject.set_defaults(handler=cmd_inject)

    retry = edit("retry", "Discard Claude's last reply (its tools never run) and send the turn again.")
    expected_version(retry)
    retry.set_defaults(handler=cmd_retry)

    replace = edit("replace-history", "Replace the whole conversation.")
    replace.add_argument(
        "--file",
        required=True,
        metavar="MESSAGES.json",
        help="the new messages, a JSON list as `agent-runner transcript --json` prints it ('-' reads stdin)",
    )
    expected_version(replace, required=True)
    replace.set_defaults(handler=cmd_replace_history)

    params = edit("params", "Change request parameters for every later turn.")
    params.add_argument(
        "params",
        nargs="+",
        type=parse_param,
        metavar="KEY=JSON_VALUE",
        help='e.g. max_tokens=2048 \'tool_choice={"type": "auto"}\'; a value that is not valid JSON is a '
        "string; KEY=null removes the parameter",
    )
    params.set_defaults(handler=cmd_params)

    add_tools = edit("add-tools", "Make tools available from the next turn on.")
    add_tools.add_argument(
        "tools", nargs="+", type=_tool_arg, metavar="NAME", help="registered tools, or raw definitions as JSON objects"
    )
    add_tools.set_defaults(handler=cmd_add_tools)

    remove_tools = edit("remove-tools", "Take tools away from the next turn on.")
    remove_tools.add_argument("names", nargs="+", metavar="NAME", help="the tools' names")
    remove_tools.set_defaults(handler=cmd_remove_tools)

    stop = steering("stop", "End a run at its next step; a reply's tools that have not run never run.")
    stop.add_argument("--reason", help="why, kept in the run's status")
    stop.add_argument(
        "--no-wait", dest="wait", action="store_false", help="return at once instead of waiting for the run to end"
    )
    stop.set_defaults(handler=cmd_stop)

    approvals = steering("approvals", "List a run's tool calls that wait for approval.")
    approvals.add_argument("--json", action="store_true", help="as JSON, inputs whole")
    approvals.set_defaults(handler=cmd_approvals)

    approve = steering("approve", "Let a tool call that waits for approval run.")
    approve.add_argument("tool_use_id", metavar="TOOL_USE_ID")
    approve.add_argument(
        "--input", type=_json_object, metavar="JSON", help="run it with this input instead of Claude's"
    )
    approve.set_defaults(handler=cmd_approve)

    deny = steering("deny", "Refuse a tool call that waits for approval: it never runs and Claude sees the reason.")
    deny.add_argument("tool_use_id", metavar="TOOL_USE_ID")
    deny.add_argument("--reason", help="what Claude is told (default: The user denied this tool call.)")
    deny.set_defaults(handler=cmd_deny)

    advance = steering("advance", "Let a step-mode run go on past the reply it paused after.")
    advance.add_argument(
        "--tool-results",
        metavar="RESULTS.json",
        help="answer the reply's tool calls yourself (then no tool runs): a JSON list of tool_result blocks, e.g. "
        f"{TOOL_RESULTS_EXAMPLE}",
    )
    advance.set_defaults(handler=cmd_advance)

    demo = command("demo", "Run the example weather-and-time agent end to end (no API key needed).")
    demo.add_argument(
        "--model", help=f"the model when ANTHROPIC_API_KEY is set (default ${MODEL_ENV}, else {DEFAULT_MODEL})"
    )
    demo.set_defaults(handler=cmd_demo)

    store = commands.add_parser("store", help="Maintain the content store.", description="Maintain the content store.")
    store_commands = store.add_subparsers(dest="store_command", required=True, metavar="COMMAND")
    gc_help = (
        "Remove stored content that no run open or closed within the retention references, and that was not "
        "written within the retention; safe while runs are live."
    )
    gc = store_commands.add_parser("gc", help=gc_help, description=gc_help)
    gc.add_argument(
        "--retention", type=_duration, required=True, metavar="DURATION", help="e.g. 30d: how long content is kept"
    )
    gc.add_argument(
        "--grace",
        type=_duration,
        default=DEFAULT_GRACE,
        metavar="DURATION",
        help="content written this recently is kept whatever the retention (default 1h)",
    )
    gc.add_argument("--dry-run", action="store_true", help="print what would be removed, remove nothing")
    gc.set_defaults(handler=cmd_store_gc)
    dev = command(
        "dev",
        "Run a development stack: Temporal, a worker with the example tools, and Claude (without ANTHROPIC_API_KEY, "
        "a scripted fake of it).",
    )
    dev.add_argument(
        "--tools",
        action="append",
        default=[],
        metavar="MODULE",
        help="also register this module's tools (repeatable; agent_runner.example_tools always is)",
    )
    dev.add_argument(
        "--port",
        type=_positive_int,
        metavar="N",
        help="the embedded Temporal server's port when Temporal's configuration names no server (default 7233; "
        "other commands then need TEMPORAL_ADDRESS=127.0.0.1:N)",
    )
    mode = dev.add_mutually_exclusive_group()
    mode.add_argument("--detach", action="store_true", help="run it in the background; return once it is ready")
    mode.add_argument("--stop", action="store_true", help="stop the running dev stack (it drains its worker first)")
    dev.set_defaults(handler=cmd_dev)
    return parser


async def amain(argv: Sequence[str] | None = None) -> int:
    """Run one ``agent-runner`` command and return its exit code (what ``main`` exits with).

    Args:
        argv: The arguments after the program name; ``sys.argv[1:]`` by default.
    """
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        _check_args(parser, args)
    except SystemExit as e:  # argparse has printed the usage or the help
        return e.code if isinstance(e.code, int) else EXIT_USAGE
    handler: Callable[[argparse.Namespace], Any] = args.handler
    try:
        code: int = await handler(args)
    except StoreError as e:  # one line, even when the database driver's message has several
        _err(f"error: {' '.join(str(e).split())}")
        return EXIT_ERROR
    except AgentRunnerError as e:
        _err(f"error: {e}")
        return EXIT_ERROR
    except (WorkflowQueryFailedError, WorkflowQueryRejectedError) as e:
        # The client passes these through: the worker could not answer (a broken deployment, or a workflow that
        # can no longer replay). Still the user's problem to see, not a bug of this command.
        _err(f"error: the run's worker could not answer a query: {e}")
        return EXIT_ERROR
    return code


def _exit(code: int) -> NoReturn:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    # temporalio's native threads can crash a finalizing interpreter (sdk-python#300): leave without finalizing.
    os._exit(code)


def main(argv: Sequence[str] | None = None) -> NoReturn:
    """The ``agent-runner`` console script: ``amain`` in a fresh event loop, then exit without finalizing."""
    try:
        code = asyncio.run(amain(argv))
    except KeyboardInterrupt:
        _err("interrupted")
        code = EXIT_INTERRUPTED
    except Exception:  # not one of the runner's errors: a bug, whose traceback helps
        traceback.print_exc()
        code = EXIT_ERROR
    _exit(code)


if __name__ == "__main__":
    main()
