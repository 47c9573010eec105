"""Scheduled runs: a Temporal Schedule that starts an ``AgentRun`` with the same JSON on a cron or an interval.

The schedule lives on the Temporal server, so it fires whether or not any client is up; each firing is an ordinary
run (id ``<schedule id>-<fire time>``) that workers pick up, follow and steer like any other. The run input is
checked when the schedule is created, with the workflow's own parser, so a schedule never fires a run that would fail
its input check; the tools it names must still be registered on a worker when it fires.

Usage::

    runner = await AgentRunner.connect()
    await create_schedule(runner, "daily-digest", {"model": ..., "max_tokens": 1024, "messages": [...]},
                          cron="0 7 * * *")
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from temporalio.client import (
    Schedule,
    ScheduleActionExecutionStartWorkflow,
    ScheduleActionResult,
    ScheduleActionStartWorkflow,
    ScheduleAlreadyRunningError,
    ScheduleIntervalSpec,
    ScheduleListActionStartWorkflow,
    ScheduleOverlapPolicy,
    SchedulePolicy,
    ScheduleSpec,
    ScheduleState,
)
from temporalio.common import Priority
from temporalio.service import RPCError, RPCStatusCode

from agent_runner import priority as run_priority
from agent_runner.client import AgentRunner, check_run_input
from agent_runner.contract.errors import ConfigurationError, InvalidRunInput, ScheduleAlreadyExists, ScheduleNotFound
from agent_runner.contract.types import WORKFLOW_TYPE

__all__ = ["OVERLAP_POLICIES", "ScheduledRun", "create_schedule", "delete_schedule", "list_schedules"]

OVERLAP_POLICIES: dict[str, ScheduleOverlapPolicy] = {
    "skip": ScheduleOverlapPolicy.SKIP,
    "buffer_one": ScheduleOverlapPolicy.BUFFER_ONE,
    "buffer_all": ScheduleOverlapPolicy.BUFFER_ALL,
    "cancel_other": ScheduleOverlapPolicy.CANCEL_OTHER,
    "terminate_other": ScheduleOverlapPolicy.TERMINATE_OTHER,
    "allow_all": ScheduleOverlapPolicy.ALLOW_ALL,
}
"""What a firing does while the previous run of the schedule is still going (Temporal's overlap policies).

``skip`` (the default) starts nothing; ``buffer_one`` starts one run when the current one ends; ``allow_all`` starts
runs side by side."""


_CRON_MEMO = "agent_runner_cron"


@dataclass(frozen=True)
class ScheduledRun:
    """A schedule of runs, as the server describes it.

    Attributes:
        id: The schedule's id; its runs are named ``<id>-<fire time>``.
        cron: Its cron expression, if it has one.
        every: Its intervals.
        paused: Whether it is paused.
        next_times: When it fires next (ISO 8601, UTC), as far as the server lists them.
        recent_runs: The ids of the runs it started lately, oldest first.
        task_queue: The task queue its runs start on (workers must poll it).
    """

    id: str
    cron: str | None
    every: tuple[timedelta, ...]
    paused: bool
    next_times: tuple[str, ...]
    recent_runs: tuple[str, ...]
    task_queue: str


async def create_schedule(
    runner: AgentRunner,
    schedule_id: str,
    run_input: Mapping[str, Any],
    *,
    cron: str | None = None,
    every: timedelta | None = None,
    overlap: str = "skip",
    paused: bool = False,
    note: str | None = None,
    start_now: bool = False,
    priority: Priority | None = None,
) -> ScheduledRun:
    """Create a schedule that starts a run with ``run_input`` on a cron expression or at an interval.

    Args:
        runner: The client; runs start on its task queue.
        schedule_id: The schedule's id.
        run_input: The run's JSON, as ``agent-runner run --json`` or the stock ``temporal`` CLI takes it.
        cron: A cron expression (``"0 7 * * *"``), in UTC.
        every: An interval (at least one second).
        overlap: A key of ``OVERLAP_POLICIES``.
        paused: Create it paused.
        note: A note shown with the schedule's state.
        start_now: Also start one run now.
        priority: The runs' priority and tenant fairness key, as ``AgentRunner.start`` takes it.

    Returns:
        The schedule as created.

    Raises:
        ConfigurationError: Neither or both of ``cron`` and ``every``, an interval under a second, or an unknown
            ``overlap``.
        InvalidRunInput: ``run_input`` would fail the run's input check, or ``priority`` is out of range.
        ScheduleAlreadyExists: A schedule with this id exists.
    """
    if (cron is None) == (every is None):
        raise ConfigurationError("Give a schedule exactly one of cron (e.g. '0 7 * * *') and every (e.g. 1 hour).")
    if every is not None and every < timedelta(seconds=1):
        raise ConfigurationError(f"A schedule's interval must be at least one second, not {every}.")
    if overlap not in OVERLAP_POLICIES:
        raise ConfigurationError(f"Unknown overlap policy {overlap!r}: use one of {', '.join(OVERLAP_POLICIES)}.")
    check_run_input(run_input)  # raises InvalidRunInput naming every problem
    priority = Priority.default if priority is None else run_priority.checked(priority)
    held = held_input(run_input)
    schedule = Schedule(
        action=ScheduleActionStartWorkflow(
            WORKFLOW_TYPE, held, id=schedule_id, task_queue=runner.task_queue, priority=priority
        ),
        spec=ScheduleSpec(
            cron_expressions=[cron] if cron is not None else [],
            intervals=[ScheduleIntervalSpec(every=every)] if every is not None else [],
        ),
        policy=SchedulePolicy(overlap=OVERLAP_POLICIES[overlap]),
        state=ScheduleState(paused=paused, note=note),
    )
    try:
        # The server turns a cron expression into calendars and does not give it back: the memo keeps it.
        await runner.client.create_schedule(
            schedule_id, schedule, trigger_immediately=start_now, memo={_CRON_MEMO: cron} if cron else None
        )
    except ScheduleAlreadyRunningError as e:
        raise ScheduleAlreadyExists(
            f"A schedule with id {schedule_id!r} already exists: pick another id, or delete it first "
            f"(`agent-runner schedule delete {schedule_id}`)."
        ) from e
    return await describe_schedule(runner, schedule_id)


def held_input(run_input: Mapping[str, Any]) -> dict[str, Any]:
    """What a schedule keeps to start each run with: ``run_input`` itself, plain JSON.

    The schedule holds the content (no store reference a store GC could miss), and without the ``held`` marker each
    run escapes it (``workflows/plain_json.py``): a lookalike in it stays data.

    Raises:
        InvalidRunInput: ``run_input`` says ``"held": true``, whose references a schedule cannot keep alive.
    """
    if run_input.get("held"):
        raise InvalidRunInput(
            "A schedule keeps its run input as plain JSON: leave out `held` (it marks content whose big parts are in "
            "the store, which a schedule does not keep alive) and give the messages themselves."
        )
    return dict(run_input)


async def describe_schedule(runner: AgentRunner, schedule_id: str) -> ScheduledRun:
    """The schedule ``schedule_id``.

    Raises:
        ScheduleNotFound: There is no such schedule.
    """
    try:
        description = await runner.client.get_schedule_handle(schedule_id).describe()
    except RPCError as e:
        raise _not_found(schedule_id, e) from e
    schedule, info = description.schedule, description.info
    cron = await description.memo_value(_CRON_MEMO, default=None)
    return _scheduled(schedule_id, cron, schedule, info.next_action_times, info.recent_actions)


async def list_schedules(runner: AgentRunner) -> list[ScheduledRun]:
    """Every schedule that starts ``AgentRun`` runs, by id.

    The server's list is eventually consistent: a schedule created a moment ago may be missing for a second.
    """
    found: list[ScheduledRun] = []
    async for listed in await runner.client.list_schedules():
        schedule = listed.schedule
        if schedule is None:  # a schedule the server could not decode: not one we can describe
            continue
        action = schedule.action
        if isinstance(action, ScheduleListActionStartWorkflow) and action.workflow == WORKFLOW_TYPE:
            # The list names a schedule's workflow type but not its task queue, which only a describe gives.
            with contextlib.suppress(ScheduleNotFound):  # deleted since it was listed
                found.append(await describe_schedule(runner, listed.id))
    return sorted(found, key=lambda s: s.id)


async def delete_schedule(runner: AgentRunner, schedule_id: str) -> None:
    """Delete the schedule ``schedule_id``; runs it started go on.

    Raises:
        ScheduleNotFound: There is no such schedule.
    """
    try:
        await runner.client.get_schedule_handle(schedule_id).delete()
    except RPCError as e:
        raise _not_found(schedule_id, e) from e


def _scheduled(
    schedule_id: str,
    cron: str | None,
    schedule: Schedule,
    next_times: Sequence[datetime],
    recent: Sequence[ScheduleActionResult],
) -> ScheduledRun:
    action = schedule.action
    if not isinstance(action, ScheduleActionStartWorkflow):  # the one action Temporal has; a newer one is not ours
        raise ScheduleNotFound(
            f"Schedule {schedule_id!r} does not start runs: `agent-runner schedule list` shows the schedules that do."
        )
    return ScheduledRun(
        id=schedule_id,
        cron=cron,
        every=tuple(i.every for i in schedule.spec.intervals),
        paused=schedule.state.paused,
        next_times=tuple(t.isoformat() for t in next_times),
        recent_runs=tuple(
            a.action.workflow_id for a in recent if isinstance(a.action, ScheduleActionExecutionStartWorkflow)
        ),
        task_queue=action.task_queue,
    )


def _not_found(schedule_id: str, error: RPCError) -> Exception:
    if error.status == RPCStatusCode.NOT_FOUND:
        return ScheduleNotFound(f"No schedule {schedule_id!r}: `agent-runner schedule list` shows the schedules.")
    return error
