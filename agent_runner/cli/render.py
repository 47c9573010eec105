"""How the command line shows runs to a person.

Pure functions of the Messages API's wire-format dicts and the run's typed status and events, so that they can be
tested line by line.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, tzinfo
from typing import Any

from agent_runner.contract.budget import is_budget_request, suggested_limits
from agent_runner.contract.types import RunResult, RunStatus, Usage

MAX_TOOL_TEXT = 400
"""The most characters of a tool's input or result printed for a person; ``transcript --json`` has them whole."""

MAX_TOOL_LINES = 8
"""The most lines of a tool's result printed for a person."""

MAX_CELL_TEXT = 60
"""The most characters of a tool's input in a table cell (``approvals``; ``--json`` has it whole)."""

EDIT_ACCEPTED = "accepted; it applies before the next turn"
"""What an edit command prints when it does not wait for the edit to apply."""

DIM, RED, YELLOW, BOLD, _RESET = "\x1b[2m", "\x1b[31m", "\x1b[33m", "\x1b[1m", "\x1b[0m"
GREEN, CYAN = "\x1b[32m", "\x1b[36m"


def paint(line: str, style: str, color: bool) -> str:
    """``line`` in an ANSI ``style`` when ``color`` is on."""
    return f"{style}{line}{_RESET}" if color else line


def clip(value: str, limit: int = MAX_TOOL_TEXT) -> str:
    """``value`` cut at ``limit`` characters, saying how much was left out."""
    if len(value) <= limit:
        return value
    return f"{value[:limit]}… (+{len(value) - limit} characters)"


def compact_json(value: Any) -> str:
    """``value`` as one line of JSON, non-ASCII text as is."""
    return json.dumps(value, ensure_ascii=False, default=str)


def render_header(iteration: int, message: Mapping[str, Any], *, color: bool = False) -> str:
    """The line that opens one of Claude's replies, e.g. ``── turn 2 · stop_reason tool_use ──``.

    Args:
        iteration: The reply's number in the run, 1 for the first.
        message: The reply, as the Messages API returns it.
        color: Whether to add ANSI styles.
    """
    return paint(f"── turn {iteration} · stop_reason {message.get('stop_reason') or 'none'} ──", BOLD, color)


def render_turn(iteration: int, *, color: bool = False) -> str:
    """The line ``follow`` opens a turn with, before its text streams: ``── turn 2 ──``."""
    return paint(f"── turn {iteration} ──", BOLD, color)


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
        return [paint(f"┆ {line}".rstrip(), DIM, color) for line in thought.splitlines()]
    if kind == "redacted_thinking":
        return [paint("┆ [redacted thinking]", DIM, color)]
    if kind in ("tool_use", "server_tool_use", "mcp_tool_use"):
        call = f"→ {block.get('name')} {clip(compact_json(block.get('input', {})))}"
        if kind == "server_tool_use":
            call += " (server tool)"
        elif kind == "mcp_tool_use":
            call += f" (MCP server {block.get('server_name')})"
        return [call]
    if isinstance(kind, str) and kind.endswith("_tool_result"):
        return [f"← [{kind}]"]
    if kind == "fallback":  # a refusal handed the reply to another model (refusal fallbacks' seam)
        return [paint(f"↪ {_seam_model(block, 'from')} refused; {_seam_model(block, 'to')} goes on", YELLOW, color)]
    return [f"[{kind}]"]


def _seam_model(block: Mapping[str, Any], side: str) -> str:
    end = block.get(side)
    return str(end.get("model")) if isinstance(end, Mapping) else "?"


def result_text(content: Any) -> str:
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
    lines = clip(result_text(result.get("content"))).splitlines() or ["(no content)"]
    more = len(lines) - MAX_TOOL_LINES
    if more > 0:
        lines = [*lines[:MAX_TOOL_LINES], f"… (+{more} lines)"]
    first = f"← {'✗ ' if is_error else ''}{name}: {lines[0]}".rstrip()
    rendered = [first, *(f"    {line}".rstrip() for line in lines[1:])]
    return [paint(line, RED, color) for line in rendered] if is_error else rendered


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
    return paint(line, BOLD, color)


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
            lines.append(paint(f"── {role} ──", BOLD, color))
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
        f"version      {'unknown' if status.version is None else status.version}",
    ]
    if status.pending_approvals:
        lines.append(
            f"approvals    {len(status.pending_approvals)} waiting (agent-runner approvals {shlex.quote(run_id)})"
        )
    if status.sleeping_until:
        lines.append(f"sleeping     until {status.sleeping_until} (agent-runner wake {shlex.quote(run_id)})")
    if status.cost_usd is not None:
        lines.append(f"cost         ${status.cost_usd:.4f}")
    if status.budget_left is not None:
        lines.append(f"budget left  {status.budget_left}")
    if status.stop_reason_detail:
        lines.append(f"stopped      {status.stop_reason_detail}")
    if status.last_error:
        lines.append(f"last error   {status.last_error}")
    for refused in status.refused_edits:
        lines.append(
            f"refused      edit {refused.get('seq')} ({refused.get('kind') or 'an edit'}): {refused.get('error')}"
        )
    if status.agents:
        lines.append("agents")
        lines.extend(render_agents(status.agents))
    return lines


def render_agents(agents: Sequence[dict[str, Any]], depth: int = 1) -> list[str]:
    """The tree of a run's child runs (``RunStatus.agents`` as ``Run.status(tree=True)`` nests it), two spaces a level.

    Each line: the agent's name, the call that started it, its status, its turns and tokens, its run id.
    """
    lines: list[str] = []
    for agent in agents:
        child = agent.get("run")
        usage = f" · {render_usage(Usage.model_validate(child['usage']))}" if child else ""
        turns = f" · {child['iterations']} turns" if child else ""
        lines.append(
            f"{'  ' * depth}{agent.get('name')} ({agent.get('tool_use_id')}) · {agent.get('status')}{turns}{usage}"
            f" · {agent.get('id')}"
        )
        if child:
            lines.extend(render_agents(child.get("agents") or [], depth + 1))
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


def local_time(iso: str, tz: tzinfo | None = None) -> str:
    """An ISO timestamp as ``YYYY-MM-DD HH:MM:SS`` in ``tz`` (the local zone by default); as is if it does not parse."""
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
                _clip_cell(compact_json(approval.get("input"))),
                str(approval.get("iteration")),
                local_time(str(approval.get("requested_at")), tz),
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
    if is_budget_request(tool_use_id, str(approval.get("name"))):
        return paint(_budget_request(run_id, tool_use_id, approval.get("input") or {}), YELLOW, color)
    call = f"{approval.get('name')} {clip(compact_json(approval.get('input', {})))}"
    command = f"agent-runner approve {shlex.quote(run_id)} {shlex.quote(tool_use_id)}"
    return paint(f"⏸ waiting for approval: {call} ({tool_use_id}) — {command}", YELLOW, color)


def _budget_request(run_id: str, request_id: str, budget: Mapping[str, Any]) -> str:
    """The line for a run that asks for more budget: the commands that go on (with new limits) or end it."""
    limits = compact_json(suggested_limits(budget))
    run, request = shlex.quote(run_id), shlex.quote(request_id)
    return (
        f"⏸ budget spent, waiting for more: {compact_json(budget)} ({request_id}) — agent-runner approve {run} "
        f"{request} --input {shlex.quote(limits)} to go on, agent-runner deny {run} {request} to end"
    )


def render_step_pause(run_id: str, turn: int, *, color: bool = False) -> str:
    """The line ``follow`` prints when a step-mode run pauses after a reply, with the command that advances it.

    Example: ``⏸ paused after turn 2 — agent-runner advance RUN``.
    """
    return paint(f"⏸ paused after turn {turn} — agent-runner advance {shlex.quote(run_id)}", YELLOW, color)


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
    if status.status == "sleeping":
        return (
            f"run {run_id} sleeps until {status.sleeping_until}: the edit applies once it wakes (`agent-runner wake "
            f"{run}`)."
        )
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
