"""``agent-runner schedule create|list|delete``: scheduled runs over Temporal Schedules (``agent_runner.schedules``)."""

from __future__ import annotations

import argparse
from typing import Any

from agent_runner.cli.common import EXIT_OK, connected, load_json, out, priority_flags
from agent_runner.contract.errors import InvalidRunInput
from agent_runner.schedules import ScheduledRun, create_schedule, delete_schedule, list_schedules


async def cmd_schedule_create(args: argparse.Namespace) -> int:
    """``schedule create``: create the schedule, then print it."""
    run_input: Any = load_json(args.file, "the run's JSON input")
    if not isinstance(run_input, dict):
        raise InvalidRunInput(f"{args.file} must hold a JSON object (the run's input), not {type(run_input).__name__}.")
    async with connected(args.task_queue) as runner:
        created = await create_schedule(
            runner,
            args.schedule_id,
            run_input,
            cron=args.cron,
            every=args.every,
            overlap=args.overlap,
            paused=args.paused,
            start_now=args.now,
            priority=priority_flags(args),
        )
    out([f"created schedule {created.id}", *_describe(created)])
    return EXIT_OK


async def cmd_schedule_list(args: argparse.Namespace) -> int:
    """``schedule list``: one line per schedule of runs."""
    async with connected(args.task_queue) as runner:
        schedules = await list_schedules(runner)
    out([_line(s) for s in schedules] or ["no schedules"])
    return EXIT_OK


async def cmd_schedule_delete(args: argparse.Namespace) -> int:
    """``schedule delete``: delete it; the runs it started go on."""
    async with connected(args.task_queue) as runner:
        await delete_schedule(runner, args.schedule_id)
    out([f"deleted schedule {args.schedule_id} (runs it started go on)"])
    return EXIT_OK


def _timing(schedule: ScheduledRun) -> str:
    parts = [f"cron {schedule.cron!r}"] if schedule.cron else []
    parts += [f"every {every}" for every in schedule.every]
    return ", ".join(parts) or "no timing"


def _line(schedule: ScheduledRun) -> str:
    state = "paused" if schedule.paused else f"next {schedule.next_times[0]}" if schedule.next_times else "idle"
    return f"{schedule.id}  {_timing(schedule)}  {state}  runs: {len(schedule.recent_runs)} recent"


def _describe(schedule: ScheduledRun) -> list[str]:
    lines = [f"  timing: {_timing(schedule)}{' (paused)' if schedule.paused else ''}"]
    lines += [f"  next: {', '.join(schedule.next_times[:3])}"] if schedule.next_times else []
    lines += [f"  started: {run_id}" for run_id in schedule.recent_runs]
    return lines
