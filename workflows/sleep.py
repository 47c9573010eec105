"""The built-in ``sleep`` tool: Claude waits on a durable timer, which a person or a new message can cut short.

A run started with ``sleep`` (``true``, or ``{"max_seconds": N}``) offers Claude a tool named ``sleep``: wait a
number of ``seconds``, or ``until`` a time. The wait is a Temporal timer: it holds no worker, and a worker that dies
during it changes nothing (another one picks the run up when the timer fires). While it lasts the run's status is
``sleeping``, with ``sleeping_until``. It ends when the time runs out; or early, when a person sends ``wake`` (with
an optional reason), when a message is injected (Claude reads it beside the result), or when the run is stopped or
its turn retried. The ``tool_result`` says which.

A sleep is a tool call, so it happens between a reply and the next request, never at the iteration boundary, and a
continue-as-new never finds one under way. The ``sleep`` option and the tool's definition are the contract's
(``agent_runner/contract/sleep.py``); ``Sleeps`` acts for the workflow.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from temporalio import workflow

from agent_runner.contract.sleep import SLEEP_TOOL
from agent_runner.contract.steering import InjectMessage, ReplaceHistory, Wake
from agent_runner.contract.types import ToolResult

if TYPE_CHECKING:
    from agent_runner.workflows.run_view import RunView

APPROVAL_OUTRANKS_SLEEP_PATCH = "approval-outranks-sleep"
"""``workflow.patched`` id of keeping ``waiting_for_approval`` when a sleep starts while a call waits for a person.
Runs recorded before set ``sleeping`` there, which with search attributes is an upsert their replays must repeat.
Asked only there: other runs carry no marker."""

SLEEP_ENDS_WITH_THE_TIME_BUDGET_PATCH = "sleep-ends-with-the-time-budget"
"""``workflow.patched`` id, asked only of a sleep that would outlast the run's time budget (``budget.timeout``): it
ends when the budget does. Before, it slept on, past the time the run was to end."""

# What Claude reads when a sleep ends (``what`` is ``30 seconds`` or ``until 2026-12-24T09:00:00+00:00``).


def _ran_out(what: str) -> str:
    return f"Slept {what}: the time ran out."


def _seconds(n: float) -> str:
    shown = int(n) if float(n).is_integer() else n
    return f"{shown} second{'' if shown == 1 else 's'}"


def _capped(seconds: int, asked: str) -> str:
    return f"Slept {_seconds(seconds)}, the longest this run allows (you asked to sleep {asked}): the time ran out."


def _out_of_time(what: str) -> str:
    return f"Slept until the run's time budget ran out (you asked to sleep {what}): the run ends now."


def _woken(what: str, reason: str | None) -> str:
    said = f" They said: {reason}" if reason else ""
    return f"Woken before the sleep ({what}) was over: a person woke you.{said}"


def _message(what: str) -> str:
    return f"Woken before the sleep ({what}) was over: a new message came, and follows."


def _abandoned(what: str, why: str) -> str:
    return f"Woken before the sleep ({what}) was over: {why}"


def _bad_input(problem: str) -> str:
    return (
        f"Error: {problem} Call `{SLEEP_TOOL}` with `seconds` (a number of seconds) or `until` (an ISO 8601 date and "
        "time with its time zone), one of the two."
    )


class Sleeps:
    """The run's sleeps under way, and the ``wake`` updates that cut them short."""

    def __init__(self, run: RunView) -> None:
        self._run = run
        self.until: dict[str, datetime] = {}
        """When each sleep under way ends, by ``tool_use_id``."""
        self._wakes = 0
        self._reason: str | None = None

    @property
    def sleeping(self) -> bool:
        """Whether a sleep is under way."""
        return bool(self.until)

    def sleeping_until(self) -> str | None:
        """When the last sleep under way ends (ISO 8601), or ``None``."""
        return max(self.until.values()).isoformat() if self.until else None

    def check_wake(self) -> None:
        """The ``wake`` validator: refuse a wake when nothing sleeps."""
        if not self.until:
            raise ValueError(
                f"The run is not sleeping (it is {self._run.current_status}): `wake` cuts short a sleep Claude started "
                f"with the `{SLEEP_TOOL}` tool."
            )

    def wake(self, edit: Wake) -> None:
        """Cut every sleep under way short (the ``wake`` update)."""
        self._wakes += 1
        self._reason = edit.reason

    async def call(self, block: dict[str, Any]) -> ToolResult:
        """Sleep as the ``tool_use`` ``block`` asks; the result says how the sleep ended."""
        run = self._run
        assert run.spec is not None and run.spec.sleep is not None
        now = workflow.now()
        planned = _planned(block.get("input"), now)
        if isinstance(planned, str):
            return ToolResult(content=_bad_input(planned), is_error=True)
        seconds, what = planned
        limit = run.spec.sleep.max_seconds
        text = _ran_out(what)
        if seconds > limit:
            seconds, text = limit, _capped(limit, what)
            what = _seconds(limit)
        budget = run.spec.budget.timeout
        if budget is not None:
            left = (run.state.started_at + budget - now).total_seconds()
            # The run ends at the boundary after the budget's time is up: a sleep past it would hold it open.
            if seconds > left and workflow.patched(SLEEP_ENDS_WITH_THE_TIME_BUDGET_PATCH):
                seconds, text = max(left, 0.0), _out_of_time(what)
        if seconds <= 0:
            return ToolResult(content=text)
        tool_use_id = str(block.get("id"))
        wakes = self._wakes
        self.until[tool_use_id] = now + timedelta(seconds=seconds)
        # A call waiting for a person outranks a sleep: that is the status an operator looks for.
        outranked = bool(run.approvals.pending) and workflow.patched(APPROVAL_OUTRANKS_SLEEP_PATCH)
        run.set_status("waiting_for_approval" if outranked else "sleeping")
        try:
            await workflow.wait_condition(
                lambda: self._wakes != wakes or run.abandoned() is not None or self._message_queued(),
                timeout=timedelta(seconds=seconds),
            )
        except TimeoutError:
            return ToolResult(content=text)
        finally:
            del self.until[tool_use_id]
            if not self.until:
                run.set_status("waiting_for_approval" if run.approvals.pending else "running")
        if run.abandoned() is not None:
            why = "the run was stopped." if run.state.stop is not None else "the turn is being retried."
            return ToolResult(content=_abandoned(what, why))
        if self._wakes != wakes:
            return ToolResult(content=_woken(what, self._reason))
        return ToolResult(content=_message(what))

    def _message_queued(self) -> bool:
        return any(isinstance(edit.payload, InjectMessage | ReplaceHistory) for edit in self._run.state.queue)


def _planned(tool_input: Any, now: datetime) -> tuple[float, str] | str:
    """How long to sleep and how to say so, from the tool's input; or what is wrong with the input."""
    if not isinstance(tool_input, dict):
        return "The input must be an object."
    seconds, until = tool_input.get("seconds"), tool_input.get("until")
    if (seconds is None) == (until is None):
        return "Give `seconds` or `until`, not both and not neither."
    if seconds is not None:
        if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not math.isfinite(seconds):
            return f"`seconds` must be a number, not {seconds!r}."
        if seconds < 0:
            return f"`seconds` must not be negative ({seconds})."
        return float(seconds), _seconds(seconds)
    try:
        when = datetime.fromisoformat(str(until))
    except ValueError:
        return f"`until` must be an ISO 8601 date and time, not {until!r}."
    if when.tzinfo is None:
        return f"`until` must say its time zone (such as {until}Z or {until}+01:00)."
    return max(0.0, (when - now).total_seconds()), f"until {when.isoformat()}"
