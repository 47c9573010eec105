"""`agent-runner` mistakes a person makes at a terminal end in one line, never a traceback.

A cron expression Temporal refuses, a terminate of a run that already ended, and output cut off by ``| head``.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from datetime import timedelta
from pathlib import Path

import pytest

from agent_runner import cli
from agent_runner.client import AgentRunner
from agent_runner.contract.errors import RunCancelled, ScheduleNotFound
from agent_runner.schedules import describe_schedule
from agent_runner.testing import FakeMessagesAPI, Reply, end_turn, text
from tests.conftest import WorkerFactory

REPO = Path(__file__).resolve().parents[1]

RUN_INPUT = {"model": "claude-fake-1", "max_tokens": 50, "messages": [{"role": "user", "content": "Hi"}]}

CRON_FORM = (
    "a cron expression is 5 to 7 fields separated by spaces: minute hour day-of-month month day-of-week, "
    "in UTC, such as '0 7 * * *' (a 6th field is a year; 7 fields are seconds, those 5, and a year)."
)


async def refused_create(
    task_queue: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], schedule_id: str, *when: str
) -> str:
    """What ``agent-runner schedule create`` of ``RUN_INPUT`` printed on stderr, having failed (exit 1, no stdout)."""
    run_file = tmp_path / "run.json"
    run_file.write_text(json.dumps(RUN_INPUT))
    argv = ["schedule", "--task-queue", task_queue, "create", schedule_id, "--file", str(run_file), *when]
    assert await cli.amain(argv) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    return captured.err


@pytest.mark.usefixtures("temporal_address")
@pytest.mark.parametrize(
    ("cron", "reason"),
    [
        ("bogus", "CronString does not have 5-7 fields"),
        ("61 * * * *", "Minute is not in range [0-59]"),
    ],
)
async def test_a_cron_expression_temporal_refuses_is_one_line(
    runner: AgentRunner, task_queue: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], cron: str, reason: str
) -> None:
    schedule_id = f"cron-{uuid.uuid4().hex[:8]}"
    assert await refused_create(task_queue, tmp_path, capsys, schedule_id, "--cron", cron) == (
        f"error: Temporal refused the cron expression {cron!r} (Invalid schedule spec: {reason}): {CRON_FORM}\n"
    )
    with pytest.raises(ScheduleNotFound):
        await describe_schedule(runner, schedule_id)


@pytest.mark.usefixtures("temporal_address")
async def test_any_schedule_temporal_refuses_is_one_line(
    task_queue: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Not only a cron expression: an id too long for Temporal is the user's to fix too."""
    schedule_id = "s" * 1000  # Temporal's limit, which the id of the schedule's own workflow then exceeds
    assert await refused_create(task_queue, tmp_path, capsys, schedule_id, "--every", "1h") == (
        f"error: Temporal refused schedule {schedule_id!r}: WorkflowId exceeds maximum allowed length (1023/1000). "
        "Check the schedule's id and options.\n"
    )


@pytest.mark.usefixtures("temporal_address")
async def test_terminate_of_an_ended_run_says_it_ended_as_cancel_does(
    runner: AgentRunner, capsys: pytest.CaptureFixture[str]
) -> None:
    run = await runner.start(**RUN_INPUT)
    await run.terminate("first")
    assert await cli.amain(["terminate", run.id]) == 0
    assert capsys.readouterr() == (f"Run {run.id} already ended (terminated); there is nothing to terminate.\n", "")
    assert await cli.amain(["cancel", run.id]) == 0
    assert capsys.readouterr() == (f"Run {run.id} already ended (terminated); there is nothing to cancel.\n", "")
    assert await cli.amain(["terminate", "no-such-run"]) == 1
    assert capsys.readouterr() == ("", "error: No run with id 'no-such-run'. List runs with `agent-runner list`.\n")


@pytest.mark.usefixtures("temporal_address")
async def test_cancel_and_terminate_of_a_cancelled_run_say_cancelled_as_status_does(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, capsys: pytest.CaptureFixture[str]
) -> None:
    """Temporal says ``canceled``; the run, and everything else a person reads, says ``cancelled``."""
    fake_api.script(Reply(content=[text("too late")], delay=30))
    async with worker(graceful_shutdown_timeout=timedelta(seconds=1)):
        run = await runner.start(**RUN_INPUT)
        await asyncio.to_thread(fake_api.wait_for_requests, 1)
        await run.cancel()
        with pytest.raises(RunCancelled):
            await run.result()
    assert await cli.amain(["cancel", run.id]) == 0
    assert capsys.readouterr() == (f"Run {run.id} already ended (cancelled); there is nothing to cancel.\n", "")
    assert await cli.amain(["terminate", run.id]) == 0
    assert capsys.readouterr() == (f"Run {run.id} already ended (cancelled); there is nothing to terminate.\n", "")


@pytest.mark.usefixtures("temporal_address")
async def test_fork_and_send_to_an_id_a_run_has_point_to_the_cli_not_the_python_api(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_api.script(end_turn("Hello."))
    async with worker():
        run = await runner.start(**RUN_INPUT)
        await run.until_done()
        for argv in (["fork", run.id, "--from-iteration", "1"], ["send", run.id, "And then?"]):
            assert await cli.amain([*argv, "--id", run.id, "--detach"]) == 1, argv
            assert capsys.readouterr() == (
                "",
                f"error: A run with id {run.id!r} already exists: pick another --id, or follow it with "
                f"`agent-runner follow {run.id}`.\n",
            ), argv


def _first_line_then_close(argv: list[str], address: str) -> tuple[str, str, int]:
    """Run ``agent-runner argv`` as ``| head -1`` would: read one line of its stdout, close the pipe, then wait.

    Returns:
        The line read, the command's stderr and its exit code.
    """
    env = {**os.environ, "TEMPORAL_ADDRESS": address}
    proc = subprocess.Popen(
        [sys.executable, "-m", "agent_runner.cli", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        cwd=REPO,
    )
    assert proc.stdout is not None and proc.stderr is not None
    line = proc.stdout.readline().decode()
    proc.stdout.close()
    try:
        stderr = proc.stderr.read().decode()
        code = proc.wait(timeout=30)
    finally:
        proc.kill()
    return line, stderr, code


async def test_output_cut_off_by_a_closed_pipe_ends_quietly(temporal_address: str, runner: AgentRunner) -> None:
    # More output than a pipe holds (64 KiB), so that the command is still writing when the reader goes away.
    long_message = "\n".join(f"line {i} of a long message" for i in range(10_000))
    run = await runner.start(model="claude-fake-1", max_tokens=50, messages=[{"role": "user", "content": long_message}])
    await run.terminate("test over")
    line, stderr, code = await asyncio.to_thread(_first_line_then_close, ["transcript", run.id], temporal_address)
    assert line.strip()
    assert "Traceback" not in stderr and "BrokenPipeError" not in stderr
    assert (stderr, code) == ("", 141)
