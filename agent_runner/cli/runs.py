"""Commands over whole runs: ``run``, ``follow``, ``transcript``, ``list``, ``status``, ``cancel``, ``fork``, ..."""

from __future__ import annotations

import argparse
import asyncio
import difflib
import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from temporalio.common import Priority

from agent_runner.cli.common import (
    DEFAULT_MAX_TOKENS,
    EXIT_ERROR,
    EXIT_OK,
    LIST_STATUSES,
    connected,
    default_model,
    err,
    load_json,
    out,
    priority_flags,
    run_status_name,
    use_color,
)
from agent_runner.cli.follow import announce_and_follow, follow_from_here
from agent_runner.cli.render import (
    CYAN,
    GREEN,
    RED,
    local_time,
    paint,
    render_run_table,
    render_status,
    render_summary,
    render_transcript,
)
from agent_runner.client import AgentRunner, Run, check_run_input
from agent_runner.contract.errors import (
    AgentRunError,
    ConfigurationError,
    RunAlreadyExists,
    RunCancelled,
    RunNotFound,
)
from agent_runner.contract.types import RunStatus


def _load_run_file(path: str) -> dict[str, Any]:
    data = load_json(path, "the run input")
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
    if getattr(args, "mcp", None):
        data["mcp"] = list(args.mcp)
    if args.max_iterations is not None:
        data["max_iterations"] = args.max_iterations
    if args.no_thread:
        data["thread"] = False
    check_run_input(data)
    return data


async def start_run(
    runner: AgentRunner, run_input: Mapping[str, Any], run_id: str | None = None, priority: Priority | None = None
) -> Run:
    """Start a run from its JSON input (as ``temporal workflow start --input`` takes it), with ``priority``.

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
            priority=priority,
            **params,
        )
    except RunAlreadyExists as e:
        raise _exists(run_id) from e


def _exists(run_id: str | None) -> RunAlreadyExists:
    """``RunAlreadyExists`` told to a person at the command line: the client's message names its Python API."""
    return RunAlreadyExists(
        f"A run with id {run_id!r} already exists: pick another --id, or follow it with `agent-runner follow {run_id}`."
    )


async def cmd_run(args: argparse.Namespace) -> int:
    """``run``: start a run, print its id, then follow it unless ``--detach``."""
    run_input = build_run_input(args)
    async with connected(args.task_queue, keep_server=True) as runner:
        run = await start_run(runner, run_input, args.id, priority_flags(args))
        return await announce_and_follow(run, follow=args.follow)


async def cmd_follow(args: argparse.Namespace) -> int:
    """``follow``: print a run's turns as they stream."""
    async with connected(args.task_queue) as runner:
        return await follow_from_here(runner.attach(args.run_id), from_iteration=args.from_iteration)


T = TypeVar("T")


@dataclass(frozen=True)
class _Ended:
    """How a run ended, as Temporal records it (``Run.ended``)."""

    how: str


async def _unless_ended(run: Run, ask: Callable[[], Awaitable[T]]) -> T | _Ended:
    """What a running run answers ``ask`` (a query), or how the run ended.

    Temporal says first whether the run has ended: an ended run is read from its history and the store, as the console
    reads it, since a query to it would wait for a worker to replay it (for ~20 s after its worker stopped, Temporal
    remembering a gone poller for a while), and none can answer for a run that ended before its first workflow task.
    """
    ended = await run.ended()
    if ended is None:
        try:
            return await ask()
        except AgentRunError:
            ended = await run.ended()  # it ended meanwhile, and no worker answers for it
            if ended is None:
                raise
    return _Ended(ended)


async def cmd_transcript(args: argparse.Namespace) -> int:
    """``transcript``: the whole conversation, readable or as JSON."""
    async with connected(args.task_queue) as runner:
        _, transcript = await _conversation(runner, args.run_id, status=False)
    if args.json:
        print(json.dumps(transcript, indent=2, ensure_ascii=False), flush=True)
    else:
        out(render_transcript(transcript, color=use_color()))
    return EXIT_OK


async def _conversation(
    runner: AgentRunner, run_id: str, *, status: bool = True
) -> tuple[RunStatus | None, list[dict[str, Any]]]:
    """A run's whole conversation and, with ``status``, its status.

    An ended run's are read from its history and the store, without a worker.
    """
    run = runner.attach(run_id)

    async def ask() -> tuple[RunStatus | None, list[dict[str, Any]]]:
        return await run.status() if status else None, await run.transcript()

    answer = await _unless_ended(run, ask)
    if not isinstance(answer, _Ended):
        return answer
    from agent_runner.console.ended import ended_run  # the console's reader, loaded only when needed

    read = await ended_run(runner, run.id, answer.how)
    if read.unfinished:
        calls = ", ".join(f"{call['name']} ({call['tool_use_id']})" for call in read.unfinished)
        err(
            f"note: run {run.id} ended ({read.status.status}) before these tool calls completed: {calls}. "
            "The conversation ends with the results of those that did."
        )
    return read.status, read.messages


async def cmd_diff(args: argparse.Namespace) -> int:
    """``diff``: how two runs differ (a what-if fork and its run, say): how each ended, and their conversations."""
    async with connected(args.task_queue) as runner:
        (left, before), (right, after) = await asyncio.gather(
            _conversation(runner, args.run_a), _conversation(runner, args.run_b)
        )
    assert left is not None and right is not None  # asked for
    color = use_color()
    lines = [
        paint(f"--- {args.run_a} {render_summary(left)}", RED, color),
        paint(f"+++ {args.run_b} {render_summary(right)}", GREEN, color),
    ]
    hunks = list(difflib.unified_diff(render_transcript(before), render_transcript(after), n=args.context, lineterm=""))
    for line in hunks[2:]:  # the two file lines: said above, with how each run ended
        style = RED if line.startswith("-") else GREEN if line.startswith("+") else CYAN if line.startswith("@") else ""
        lines.append(paint(line, style, color) if style else line)
    if not hunks:
        lines.append("(the same conversation)")
    out(lines)
    same = not hunks and render_summary(left) == render_summary(right)
    return EXIT_OK if same or not args.exit_code else EXIT_ERROR  # as `git diff --exit-code`


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
    async with connected() as runner:
        runs = await runner.list(list_query(args.status, args.task_queue, args.query), limit=args.limit)
    if not runs:
        err("no runs found")
        return EXIT_OK
    out(render_run_table([(r.id, r.status, local_time(r.start_time)) for r in runs]))
    return EXIT_OK


async def cmd_status(args: argparse.Namespace) -> int:
    """``status``: the run's status, turns, stop reason and token usage."""
    async with connected(args.task_queue) as runner:
        run = runner.attach(args.run_id)
        answer = await _unless_ended(run, lambda: run.status(tree=True))  # with its agents' runs, and theirs
        if not isinstance(answer, _Ended):
            status = answer
        else:
            from agent_runner.console.ended import ended_status  # the console's reader, loaded only when needed

            status = await ended_status(runner, run.id, answer.how)
    if args.json:
        print(status.model_dump_json(indent=2), flush=True)
    else:
        out(render_status(run.id, status))
    return EXIT_OK


async def cmd_cancel(args: argparse.Namespace) -> int:
    """``cancel``: ask the run to stop, then report how it ended (waiting up to ``--wait`` seconds)."""
    async with connected(args.task_queue) as runner:
        run = runner.attach(args.run_id)
        ended = await run.ended()
        if ended is not None:
            print(f"Run {run.id} already ended ({run_status_name(ended)}); there is nothing to cancel.", flush=True)
            return EXIT_OK
        await run.cancel()
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
    async with connected(args.task_queue) as runner:
        original = runner.attach(args.run_id)
        priority = priority_flags(args, await original.priority())  # the flags given change the original's
        try:
            fork = await original.fork(
                args.from_iteration,
                id=args.id,
                priority=priority,
                changes={
                    **dict(args.set),
                    **{k: v for k, v in (("model", args.model), ("system", args.system)) if v is not None},
                },
                tool_results="recorded_only" if args.tool_results == "recorded-only" else args.tool_results,
            )
        except RunAlreadyExists as e:
            raise _exists(args.id) from e
        return await announce_and_follow(fork, follow=args.follow)


async def cmd_send(args: argparse.Namespace) -> int:
    """``send``: a new run that goes on with an ended run's conversation; prints its id, then follows it."""
    async with connected(args.task_queue) as runner:
        original = runner.attach(args.run_id)
        priority = priority_flags(args, await original.priority())  # the flags given change the original's
        try:
            run = await original.send(args.text, id=args.id, priority=priority)
        except RunAlreadyExists as e:
            raise _exists(args.id) from e
        return await announce_and_follow(run, follow=args.follow)


async def cmd_terminate(args: argparse.Namespace) -> int:
    """``terminate``: end a run at once, without letting it finish anything; an ended run is left as it ended."""
    async with connected(args.task_queue) as runner:
        run = runner.attach(args.run_id)
        ended = await run.ended()  # raises RunNotFound for an id no run has
        if ended is None:
            try:
                await run.terminate(args.reason)
            except RunNotFound:
                # Temporal says NOT_FOUND for a run that is closed, as for one that never was: this one ended since.
                ended = await run.ended()
                if ended is None:
                    raise
        if ended is not None:
            print(f"Run {run.id} already ended ({run_status_name(ended)}); there is nothing to terminate.", flush=True)
            return EXIT_OK
        print(f"Run {run.id} is terminated: {args.reason}", flush=True)
        return EXIT_OK
