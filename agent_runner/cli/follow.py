"""Following a run: its turns printed as they stream, what it waits for, and a summary line at the end."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Iterable
from typing import Any

from temporalio.client import WorkflowExecutionStatus
from temporalio.service import RPCError

from agent_runner.cli.common import (
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    EXIT_OK,
    SUCCESSFUL_STATUSES,
    Interrupted,
    err,
    out,
    until_interrupted,
    use_color,
)
from agent_runner.cli.errors import report
from agent_runner.cli.render import (
    YELLOW,
    paint,
    render_block,
    render_pending_approval,
    render_step_pause,
    render_summary,
    render_tool_result,
    render_turn,
)
from agent_runner.client import Run
from agent_runner.contract.errors import AgentRunnerError, NoWorker
from agent_runner.contract.events import (
    ApprovalWaiting,
    BlockStart,
    BlockStop,
    ModelCallStarted,
    ReplyReceived,
    Retracted,
    RunEvent,
    RunFinished,
    StepWaiting,
    TextDelta,
    ThinkingDelta,
    ToolFinished,
    ToolInputDelta,
    ToolStarted,
)
from agent_runner.contract.types import CREATE_MESSAGE_ACTIVITY


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
        iteration = event.iteration
        if iteration < self._from and not isinstance(event, RunFinished):
            return
        if isinstance(event, BlockStart | ReplyReceived) and iteration not in self._turns:
            # A turn opens with its first output, so a model call that fails before any has no empty turn.
            self._turns.add(iteration)
            self._print(render_turn(iteration, color=self._color))
        if isinstance(event, ModelCallStarted):
            self._blocks = {}
        elif isinstance(event, Retracted):
            self._end_line()
            self._print(
                paint(f"↺ attempt {event.attempt} of turn {iteration} was cut off; retrying", YELLOW, self._color)
            )
            self._blocks = {}
        elif isinstance(event, BlockStart):
            self._blocks[event.index] = dict(event.block)
        elif isinstance(event, TextDelta):
            self._delta(event.index, "text", event.text)
            if event.text:
                # Text goes out as it comes; everything else once its block is complete.
                print(event.text, end="", flush=True)
                self._mid_line = not event.text.endswith("\n")
        elif isinstance(event, ThinkingDelta):
            self._delta(event.index, "thinking", event.thinking)
        elif isinstance(event, ToolInputDelta):
            self._delta(event.index, "partial_json", event.partial_json)
        elif isinstance(event, BlockStop):
            self._block_stop(event.index)
        elif isinstance(event, ReplyReceived):
            self._end_line()
            self._replied.add(iteration)
            self._show_results(iteration)
        elif isinstance(event, ToolStarted):
            self._calls.setdefault(iteration, []).append(event.tool_use_id)
        elif isinstance(event, ToolFinished):
            self._results[event.tool_use_id] = (event.name, event.result)
            self._show_results(iteration)
        elif isinstance(event, ApprovalWaiting):
            self._print(render_pending_approval(self._run_id, event.approval.model_dump(), color=self._color))
        elif isinstance(event, StepWaiting) and event.status == "waiting_for_step":
            self._print(render_step_pause(self._run_id, iteration, color=self._color))

    def _delta(self, index: int, key: str, piece: str) -> None:
        """Add ``piece`` to field ``key`` of block ``index`` (started by its ``block_start``, else begun here)."""
        block = self._blocks.setdefault(index, {"type": "tool_use" if key == "partial_json" else key})
        block[key] = str(block.get(key) or "") + piece

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

    def retrying(self, activity: str, attempt: int, failure: str) -> None:
        """Say that a call failed and Temporal retries it: attempt ``attempt`` is next (or under way)."""
        what = "model call" if activity == CREATE_MESSAGE_ACTIVITY else activity
        # As ``status`` words its ``last error``; the failure's message says it is retried.
        self._print(paint(f"↻ {what} (attempt {attempt}): {failure}", YELLOW, self._color))

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


async def follow_run(run: Run, *, from_iteration: int = 1, color: bool = False) -> int:
    """Print the run's turns as they stream, its tools' results as they come, then a summary line.

    Claude's text is printed as it arrives; a model call that failed mid-stream and is retried is marked
    (``↺ attempt 1 of turn 2 was cut off; retrying``), and the new attempt's text follows; each new attempt of a call
    that failed and is retried is said once, with its failure (``↻ model call (attempt 2): Claude's API answered 529
    ...``), as ``status`` shows its ``last error``. While the run waits for a
    person, it says so once with the command to use, and leaves the decision to them:
    ``⏸ waiting for approval: delete_file {"path": "/etc"} (toolu_D) — agent-runner approve RUN toolu_D`` for each
    pending tool call, ``⏸ paused after turn 2 — agent-runner advance RUN`` for a step-mode pause. It never approves
    or advances anything itself. When no worker polls the run's task queue it says so on stderr, with the command
    that starts one, and goes on waiting; as when the run's workflow task keeps failing on the workers (fixed workers
    carry it on). A run that has already ended needs no worker: its turns are read from its
    histories, its live log and the content store (``console/ended.py``), and printed as following it live printed
    them.

    Args:
        run: The run to follow.
        from_iteration: The first turn to print (1 is the first).
        color: Whether to add ANSI styles.

    Returns:
        The exit code: 0 when the run completed, reached ``max_iterations`` or was stopped by a person, 1 when it
        failed or was cancelled (the error is printed to stderr as ``error: <message>``).
    """
    follower = _Follower(run.id, from_iteration=from_iteration, color=color)
    run.wait_notice = lambda e: err(f"note: {'waiting for a worker. ' if isinstance(e, NoWorker) else ''}{e}")
    retries = asyncio.create_task(_report_retries(run, follower))
    try:
        try:
            async for event in _events(run):
                follower.show(event)
        finally:
            retries.cancel()
            follower.finish()
        result = await run.result()
    except AgentRunnerError as e:
        return report(e) or EXIT_ERROR
    out([render_summary(result, color=color)])
    return EXIT_OK if result.status in SUCCESSFUL_STATUSES else EXIT_ERROR


RETRY_POLL_SECONDS = 2.0
"""How often ``follow`` asks Temporal whether a call of the run is being retried."""


async def _report_retries(run: Run, follower: _Follower) -> None:
    """Print a line for each new attempt of a model or tool call that Temporal retries after a failure, as it comes.

    The live events of a model call begin only once Claude's API answers, and a tool call's once it returns: a call
    that fails before (an overloaded API, a tool that raises a retryable error) and is retried with backoff would
    leave ``follow`` silent for minutes, then print that the run gave up. Temporal's description of the run holds
    each pending call's attempt and last failure (what ``status`` shows as ``last error``), without a worker and
    without workflow code: it is read every ``RETRY_POLL_SECONDS`` until the run closes, and each attempt said once.
    """
    said: set[tuple[str, int]] = set()
    while True:
        try:
            description = await run.handle.describe()
        except RPCError:
            return  # nothing to add: following goes on, and says what went wrong if it matters
        if description.status != WorkflowExecutionStatus.RUNNING:
            return
        for activity in description.raw_description.pending_activities:
            key = (activity.activity_id, activity.attempt)
            if activity.HasField("last_failure") and key not in said:
                said.add(key)
                follower.retrying(activity.activity_type.name, activity.attempt, activity.last_failure.message)
        await asyncio.sleep(RETRY_POLL_SECONDS)


async def _events(run: Run) -> AsyncIterator[RunEvent]:
    """The run's live events; for a run that has ended, its turns' events as its history and the store tell them.

    A query to an ended run waits for a worker to replay it (~20 s after its worker stopped, Temporal remembering the
    gone poller; for ever once the fleet is gone), though everything ``follow`` prints is stored: the console's
    ended-run reader reads it, and the same ``_Follower`` prints it. A run that ends while followed is followed live
    to its end.
    """
    runner = run.runner
    ended = await run.ended() if runner is not None else None
    if runner is None or ended is None or ended == "continued_as_new":  # open, or about to go on as new
        async for event in run.events(agents=False):
            yield event
        return
    from agent_runner.console.ended import ended_turns  # the console's reader, loaded only when needed

    for turn in (await ended_turns(runner, run.id, ended))[1]:
        for event in turn.events():
            yield event


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


def interrupted_note(run_id: str) -> str:
    """What ``follow`` says when Ctrl-C stops it: the run goes on, and how to follow or stop it."""
    return (
        f"interrupted: stopped following. Run {run_id} keeps going; follow it again with "
        f"`agent-runner follow {run_id}`, or stop it with `agent-runner cancel {run_id}`."
    )


async def follow_from_here(run: Run, *, from_iteration: int = 1) -> int:
    """``follow_until_interrupted`` for a command: styled for a terminal, saying what Ctrl-C left behind."""
    code = await follow_until_interrupted(run, from_iteration=from_iteration, color=use_color())
    if code == EXIT_INTERRUPTED:
        err(interrupted_note(run.id))
    return code


async def announce_and_follow(run: Run, *, follow: bool) -> int:
    """Print a new run's id, then follow it unless detached."""
    print(run.id, flush=True)
    return await follow_from_here(run) if follow else EXIT_OK
