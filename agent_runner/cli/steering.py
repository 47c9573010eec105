"""Steering a live run: edits that apply at its next boundary, ``stop``, approvals, and step mode's ``advance``.

An edit that applies at the boundary waits for it and prints ``applied at version N``; with ``--no-wait``, or for a
run in step mode (whose boundary comes only once it is advanced; ``--wait`` waits anyway), it prints that it was
accepted. An edit to a run that waits for a person says what the run waits for, with the command that answers it.
"""

from __future__ import annotations

import argparse
import json
import shlex
from collections.abc import Awaitable, Callable
from typing import Any

from agent_runner.cli.common import (
    BLOCKS_EXAMPLE,
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    EXIT_OK,
    MESSAGES_EXAMPLE,
    SUCCESSFUL_STATUSES,
    TOOL_RESULTS_EXAMPLE,
    Interrupted,
    connected,
    err,
    load_json_list,
    out,
    until_interrupted,
    use_color,
)
from agent_runner.cli.render import (
    EDIT_ACCEPTED,
    render_approvals,
    render_edit_outcome,
    render_summary,
    render_wait_for_people,
)
from agent_runner.client import Run
from agent_runner.contract.budget import is_budget_request
from agent_runner.contract.errors import EditQueued

EditCall = Callable[[Run, bool], Awaitable[int | None]]
"""An edit of a run: ``(run, wait) -> version``, the version being ``None`` when not waited for."""


async def _edit(args: argparse.Namespace, edit: EditCall) -> int:
    """Send an edit that applies at the run's boundary; print the version it produced, or that it was accepted.

    ``args.wait`` is ``True`` (``--wait``), ``False`` (``--no-wait``) or ``None``: wait unless the run is in step
    mode, whose boundary only comes once somebody advances it.
    """
    async with connected(args.task_queue) as runner:
        run = runner.attach(args.run_id)
        step = args.wait is None and await run.started_in_step_mode()
        wait = not step if args.wait is None else bool(args.wait)
        run.wait_for_people = False  # a person must act before the edit can apply: say so rather than hang
        try:
            version = await until_interrupted(edit(run, wait))
        except EditQueued:
            print(EDIT_ACCEPTED, flush=True)
            err(f"note: {render_wait_for_people(run.id, await run.status())}")
            err(_refusal_note(run.id))
            return EXIT_OK
        except Interrupted:
            if run.interrupted_edits:
                err(
                    f"interrupted: stopped waiting. The edit is still queued in run {run.id} and applies before its "
                    f"next turn; `agent-runner status {shlex.quote(run.id)}` shows the transcript version."
                )
            else:
                err(
                    f"interrupted before run {run.id} confirmed the edit: it may still apply; check with "
                    f"`agent-runner transcript {shlex.quote(run.id)}`."
                )
            return EXIT_INTERRUPTED
    print(render_edit_outcome(version), flush=True)
    if step:
        err(
            f"note: run {run.id} is in step mode: the edit applies when it is advanced "
            f"(`agent-runner advance {shlex.quote(run.id)}`)."
        )
        err(_refusal_note(run.id))
    return EXIT_OK


def _refusal_note(run_id: str) -> str:
    """Where the sender of an edit that was not waited for learns that it could not apply, if it could not."""
    return f"note: if it cannot apply then, `agent-runner status {shlex.quote(run_id)}` says why."


async def cmd_inject(args: argparse.Namespace) -> int:
    """``inject``: user content for the next turn; it joins the tool results' message when there are any."""
    content: str | list[dict[str, Any]] = (
        args.text if args.file is None else load_json_list(args.file, "the content blocks", BLOCKS_EXAMPLE)
    )
    return await _edit(args, lambda run, wait: run.inject(content, expected_version=args.expected_version, wait=wait))


async def cmd_retry(args: argparse.Namespace) -> int:
    """``retry``: discard Claude's last reply (its tools do not run if they have not yet) and send the turn again."""
    return await _edit(args, lambda run, wait: run.retry(expected_version=args.expected_version, wait=wait))


async def cmd_replace_history(args: argparse.Namespace) -> int:
    """``replace-history``: the whole conversation replaced, if it is still at ``--expected-version``."""
    messages = load_json_list(args.file, "the messages", MESSAGES_EXAMPLE)
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
    async with connected(args.task_queue) as runner:
        run = runner.attach(args.run_id)
        await (run.stop(args.reason) if args.reason is not None else run.stop())
        if not args.wait:
            print("accepted; the run stops at its next step (a reply's tools that have not run never run)", flush=True)
            return EXIT_OK
        result = await run.result()
    out([render_summary(result, color=use_color())])
    return EXIT_OK if result.status in SUCCESSFUL_STATUSES else EXIT_ERROR


async def cmd_approvals(args: argparse.Namespace) -> int:
    """``approvals``: the run's tool calls waiting for a person."""
    async with connected(args.task_queue) as runner:
        run = runner.attach(args.run_id)
        pending = [p.model_dump(mode="json") for p in await run.pending_approvals()]
    if args.json:
        print(json.dumps(pending, indent=2, ensure_ascii=False), flush=True)
    elif not pending:
        err(f"no tool call of run {run.id} waits for approval")
    else:
        out(render_approvals(pending))
    return EXIT_OK


async def cmd_approve(args: argparse.Namespace) -> int:
    """``approve``: let a waiting tool call run, with Claude's input or ``--input``."""
    async with connected(args.task_queue) as runner:
        run = runner.attach(args.run_id)
        await run.approve(args.tool_use_id, input=args.input)
    if is_budget_request(args.tool_use_id):
        print(f"approved {args.tool_use_id}: the run goes on under the new limits", flush=True)
        return EXIT_OK
    edited = "" if args.input is None else " with the given input"
    print(f"approved {args.tool_use_id}{edited}: it runs now", flush=True)
    return EXIT_OK


async def cmd_deny(args: argparse.Namespace) -> int:
    """``deny``: refuse a waiting tool call: it never runs, and Claude sees the reason as an error result."""
    async with connected(args.task_queue) as runner:
        run = runner.attach(args.run_id)
        await (run.deny(args.tool_use_id, args.reason) if args.reason is not None else run.deny(args.tool_use_id))
    if is_budget_request(args.tool_use_id):
        print(f"denied {args.tool_use_id}: the run ends with Claude's summary", flush=True)
        return EXIT_OK
    print(f"denied {args.tool_use_id}: it does not run, and Claude is told why", flush=True)
    return EXIT_OK


async def cmd_wake(args: argparse.Namespace) -> int:
    """``wake``: cut short the sleep Claude asked for with the built-in ``sleep`` tool."""
    async with connected(args.task_queue) as runner:
        await runner.attach(args.run_id).wake(args.reason)
    print("woken: Claude is told that a person cut its sleep short", flush=True)
    return EXIT_OK


async def cmd_advance(args: argparse.Namespace) -> int:
    """``advance``: let a step-mode run go on past the reply it paused after."""
    tool_results = (
        None
        if args.tool_results is None
        else load_json_list(args.tool_results, "the tool results", TOOL_RESULTS_EXAMPLE)
    )
    async with connected(args.task_queue) as runner:
        run = runner.attach(args.run_id)
        await run.advance(tool_results=tool_results)
    if tool_results is None:
        print("advanced", flush=True)
    else:
        count = f"{len(tool_results)} tool result{'' if len(tool_results) == 1 else 's'}"
        print(f"advanced with your {count}: no tool runs", flush=True)
    return EXIT_OK
