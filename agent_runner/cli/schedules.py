"""``agent-runner schedule create|list|delete``: scheduled runs over Temporal Schedules (``agent_runner.schedules``)."""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator
from typing import Any

from temporalio.service import RPCError, RPCStatusCode

from agent_runner.cli.common import (
    DEFAULT_MAX_TOKENS,
    EXIT_OK,
    connected,
    default_model,
    load_json,
    out,
    priority_flags,
)
from agent_runner.contract.errors import ConfigurationError, InvalidRunInput
from agent_runner.schedules import ScheduledRun, create_schedule, delete_schedule, list_schedules


async def cmd_schedule_create(args: argparse.Namespace) -> int:
    """``schedule create``: create the schedule, then print it."""
    run_input: Any = load_json(args.file, "the run's JSON input")
    if not isinstance(run_input, dict):
        raise InvalidRunInput(f"{args.file} must hold a JSON object (the run's input), not {type(run_input).__name__}.")
    # As `run --file` does: the model and max_tokens a run takes unless told otherwise.
    run_input.setdefault("model", default_model())
    run_input.setdefault("max_tokens", DEFAULT_MAX_TOKENS)
    async with connected(args.task_queue) as runner:
        with _refused(args.schedule_id, args.cron):
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
        with _refused(args.schedule_id):
            await delete_schedule(runner, args.schedule_id)
    out([f"deleted schedule {args.schedule_id} (runs it started go on)"])
    return EXIT_OK


_CRON_FORM = (
    "a cron expression is 5 to 7 fields separated by spaces: minute hour day-of-month month day-of-week, "
    "in UTC, such as '0 7 * * *' (a 6th field is a year; 7 fields are seconds, those 5, and a year)."
)
"""What ``schedule create`` says a cron expression looks like when Temporal refuses one."""


@contextlib.contextmanager
def _refused(schedule_id: str, cron: str | None = None) -> Iterator[None]:
    """Turn Temporal's refusal of a schedule request (``INVALID_ARGUMENT``) into an error the user can act on.

    Only the server parses cron expressions, so a mistyped one is first seen here, as an RPC error: it is the user's
    to fix, not a bug whose traceback would help. Any other status is left to propagate as it is.

    Args:
        schedule_id: The schedule the request is about, named in the message.
        cron: The cron expression the request gave, if any: a spec Temporal refuses is then that expression.

    Raises:
        ConfigurationError: Temporal refused the request as invalid; the message quotes its reason.
    """
    try:
        yield
    except RPCError as e:
        if e.status != RPCStatusCode.INVALID_ARGUMENT:
            raise
        if cron is not None and e.message.startswith("Invalid schedule spec"):
            raise ConfigurationError(
                f"Temporal refused the cron expression {cron!r} ({e.message}): {_CRON_FORM}"
            ) from e
        raise ConfigurationError(
            f"Temporal refused schedule {schedule_id!r}: {e.message}. Check the schedule's id and options."
        ) from e


def _timing(schedule: ScheduledRun) -> str:
    parts = [f"cron {schedule.cron!r}"] if schedule.cron else []
    parts += [f"every {every}" for every in schedule.every]
    return ", ".join(parts) or "no timing"


def _line(schedule: ScheduledRun) -> str:
    state = "paused" if schedule.paused else f"next {schedule.next_times[0]}" if schedule.next_times else "idle"
    return (
        f"{schedule.id}  {_timing(schedule)}  {state}  queue {schedule.task_queue}  "
        f"runs: {len(schedule.recent_runs)} recent"
    )


def _describe(schedule: ScheduledRun) -> list[str]:
    lines = [f"  timing: {_timing(schedule)}{' (paused)' if schedule.paused else ''}"]
    lines += [f"  task queue: {schedule.task_queue}"]
    lines += [f"  next: {', '.join(schedule.next_times[:3])}"] if schedule.next_times else []
    lines += [f"  started: {run_id}" for run_id in schedule.recent_runs]
    return lines
