"""Scheduled runs: a Temporal Schedule fires AgentRun runs with the JSON it was created with."""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from temporalio.client import ScheduleActionStartWorkflow

from agent_runner import cli
from agent_runner.client import AgentRunner
from agent_runner.contract.errors import (
    ConfigurationError,
    InvalidRunInput,
    ScheduleAlreadyExists,
    ScheduleNotFound,
)
from agent_runner.schedules import create_schedule, delete_schedule, describe_schedule, list_schedules
from agent_runner.testing import FakeMessagesAPI, end_turn
from tests.conftest import WorkerFactory

# Content that looks like a stored-content placeholder: a schedule must send it to Claude as the user wrote it.
LOOKALIKE = {"type": "text", "text": "Summarize the day.", "agent_runner.stored": "not a reference"}
RUN_INPUT = {
    "model": "claude-fake-1",
    "max_tokens": 256,
    "messages": [{"role": "user", "content": [LOOKALIKE]}],
    "max_iterations": 1,
    "thread": False,
}


async def test_a_schedule_fires_runs_that_send_its_input_and_finish(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    schedule_id = f"digest-{uuid.uuid4().hex[:8]}"
    fake_api.script(end_turn("Quiet day."))
    async with worker():
        # Hourly, and once now: exactly one run fires during the test.
        created = await create_schedule(runner, schedule_id, RUN_INPUT, every=timedelta(hours=1), start_now=True)
        assert (created.id, created.cron, created.every, created.paused) == (
            schedule_id,
            None,
            (timedelta(hours=1),),
            False,
        )
        for _ in range(100):
            fired = await describe_schedule(runner, schedule_id)
            if fired.recent_runs:
                break
            await asyncio.sleep(0.2)
        else:
            pytest.fail("the schedule did not fire within 20 s")
        [first] = fired.recent_runs
        assert first.startswith(f"{schedule_id}-")
        final = await runner.attach(first).until_done()
        await delete_schedule(runner, schedule_id)
    assert [block.model_dump(exclude_none=True) for block in final.content] == [{"type": "text", "text": "Quiet day."}]
    assert fake_api.bodies() == [
        {
            "model": "claude-fake-1",
            "max_tokens": 256,
            "messages": [{"role": "user", "content": [LOOKALIKE]}],
            "tools": [],
            "stream": True,
        }
    ]
    with pytest.raises(ScheduleNotFound, match=f"No schedule '{schedule_id}'"):
        await describe_schedule(runner, schedule_id)


async def test_schedules_are_listed_and_deleted(runner: AgentRunner) -> None:
    schedule_id = f"weekly-{uuid.uuid4().hex[:8]}"
    await create_schedule(runner, schedule_id, RUN_INPUT, cron="0 7 * * 1", paused=True, overlap="buffer_one")
    for _ in range(100):
        listed = {s.id: s for s in await list_schedules(runner)}
        if schedule_id in listed:
            break
        await asyncio.sleep(0.2)
    else:
        pytest.fail("the schedule was not listed within 20 s")
    mine = listed[schedule_id]
    assert (mine.cron, mine.every, mine.paused, mine.recent_runs, mine.task_queue) == (
        "0 7 * * 1",
        (),
        True,
        (),
        runner.task_queue,
    )
    await delete_schedule(runner, schedule_id)
    with pytest.raises(ScheduleNotFound):
        await delete_schedule(runner, schedule_id)


async def test_a_duplicate_schedule_id_says_so(runner: AgentRunner) -> None:
    schedule_id = f"dup-{uuid.uuid4().hex[:8]}"
    await create_schedule(runner, schedule_id, RUN_INPUT, cron="0 7 * * *", paused=True)
    try:
        with pytest.raises(ScheduleAlreadyExists, match=f"A schedule with id '{schedule_id}' already exists"):
            await create_schedule(runner, schedule_id, RUN_INPUT, cron="0 8 * * *")
    finally:
        await delete_schedule(runner, schedule_id)


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({}, ConfigurationError, "exactly one of cron"),
        ({"cron": "0 7 * * *", "every": timedelta(hours=1)}, ConfigurationError, "exactly one of cron"),
        ({"every": timedelta(milliseconds=500)}, ConfigurationError, "at least one second"),
        ({"cron": "0 7 * * *", "overlap": "sometimes"}, ConfigurationError, "Unknown overlap policy 'sometimes'"),
    ],
)
async def test_bad_timing_is_refused_before_anything_is_created(
    runner: AgentRunner, options: dict[str, object], error: type[Exception], message: str
) -> None:
    schedule_id = f"bad-{uuid.uuid4().hex[:8]}"
    with pytest.raises(error, match=message):
        await create_schedule(runner, schedule_id, RUN_INPUT, **options)  # type: ignore[arg-type]
    with pytest.raises(ScheduleNotFound):
        await describe_schedule(runner, schedule_id)


async def test_an_input_the_run_would_refuse_is_refused_at_creation(runner: AgentRunner) -> None:
    schedule_id = f"bad-input-{uuid.uuid4().hex[:8]}"
    with pytest.raises(InvalidRunInput, match="max_tokens"):
        await create_schedule(runner, schedule_id, {**RUN_INPUT, "max_tokens": "lots"}, cron="0 7 * * *")
    with pytest.raises(ScheduleNotFound):
        await describe_schedule(runner, schedule_id)


@pytest.mark.usefixtures("temporal_address")
async def test_the_cli_creates_lists_and_deletes_a_schedule(
    task_queue: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    schedule_id = f"cli-{uuid.uuid4().hex[:8]}"
    run_file = tmp_path / "run.json"
    run_file.write_text(json.dumps(RUN_INPUT))
    # --task-queue after the subcommand, as every other command takes it (before it works too: see below).
    base = ["--task-queue", task_queue]
    assert (
        await cli.amain(
            ["schedule", "create", *base, schedule_id, "--file", str(run_file), "--cron", "0 7 * * *", "--paused"]
        )
        == 0
    )
    created = capsys.readouterr().out.splitlines()
    assert created[:3] == [
        f"created schedule {schedule_id}",
        "  timing: cron '0 7 * * *' (paused)",
        f"  task queue: {task_queue}",
    ]
    assert len(created) == 4 and created[3].startswith("  next: ") and created[3].count("T07:00:00+00:00") == 3
    for _ in range(100):
        assert await cli.amain(["schedule", "list", *base]) == 0
        listed = [line for line in capsys.readouterr().out.splitlines() if line.startswith(schedule_id)]
        if listed:
            break
        await asyncio.sleep(0.2)
    assert listed == [f"{schedule_id}  cron '0 7 * * *'  paused  queue {task_queue}  runs: 0 recent"]
    assert await cli.amain(["schedule", "delete", *base, schedule_id]) == 0
    assert capsys.readouterr().out == f"deleted schedule {schedule_id} (runs it started go on)\n"
    assert await cli.amain(["schedule", *base, "delete", schedule_id]) == 1
    assert capsys.readouterr().err == (
        f"error: No schedule '{schedule_id}': `agent-runner schedule list` shows the schedules.\n"
    )


@pytest.mark.usefixtures("temporal_address")
async def test_the_cli_fills_in_the_model_and_max_tokens_a_run_file_leaves_out_as_run_does(
    runner: AgentRunner, task_queue: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENT_RUNNER_MODEL", "claude-from-env")
    schedule_id = f"defaults-{uuid.uuid4().hex[:8]}"
    run_file = tmp_path / "run.json"
    run_file.write_text(json.dumps({"messages": RUN_INPUT["messages"]}))
    create = ["schedule", "--task-queue", task_queue, "create", schedule_id, "--file", str(run_file), "--every", "1h"]
    assert await cli.amain([*create, "--paused"]) == 0
    action = (await runner.client.get_schedule_handle(schedule_id).describe()).schedule.action
    assert isinstance(action, ScheduleActionStartWorkflow)
    (given,) = await runner.client.data_converter.decode(action.args)
    await delete_schedule(runner, schedule_id)
    assert given == {"messages": RUN_INPUT["messages"], "model": "claude-from-env", "max_tokens": 1024}


async def test_the_cli_refuses_a_schedule_without_timing_or_with_a_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_file = tmp_path / "run.json"
    run_file.write_text(json.dumps({**RUN_INPUT, "max_tokens": "lots"}))
    assert await cli.amain(["schedule", "create", "x", "--file", str(run_file)]) == 2
    assert "one of the arguments --cron --every is required" in capsys.readouterr().err


async def test_the_cli_console_command_refuses_a_public_address_without_a_token(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AGENT_RUNNER_CONSOLE_TOKEN", raising=False)
    assert await cli.amain(["console", "--host", "0.0.0.0"]) == 2
    assert capsys.readouterr().err.startswith("error: ")
