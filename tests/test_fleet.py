"""A fleet on one machine: worker processes sharing runs, one killed with `kill -9`, one stopped with SIGTERM; and
model calls routed to model-only workers on their own rate-limited queue."""

from __future__ import annotations

import asyncio
import signal
import uuid
from collections import Counter
from contextlib import ExitStack
from pathlib import Path

import pytest
from anthropic import beta_async_tool
from temporalio import activity
from temporalio.client import Client

from agent_runner.activities.claude import ClaudeActivities
from agent_runner.activities.tools import ToolRegistry
from agent_runner.client import AgentRunner
from agent_runner.testing import FakeMessagesAPI, Reply, end_turn, tool_use
from agent_runner.worker import build_worker
from tests.conftest import anthropic_client_factory
from tests.test_durability import RUN, connect, conversation_responder, server, uninterrupted_transcript, wait_for
from tests.test_durability import worker_process as worker_proc

pytestmark = pytest.mark.slow


async def test_three_workers_share_runs_through_a_kill_and_a_sigterm(tmp_path: Path, fake_api: FakeMessagesAPI) -> None:
    """Every run completes with the transcript of an uninterrupted run; the SIGTERM'd worker finishes the tool calls
    it had started before it exits, and the killed worker's calls are retried elsewhere."""
    (tmp_path / "reference").mkdir()
    expected = await uninterrupted_transcript(tmp_path, fake_api)
    fake_api.reset()
    fake_api.responder = conversation_responder(slow_turns=set())
    journal = tmp_path / "journal.txt"
    journal.touch()
    async with server(tmp_path) as temporal:
        runner = AgentRunner(await connect(temporal.address), task_queue=f"fleet-{uuid.uuid4()}")
        with ExitStack() as stack:
            workers = [
                stack.enter_context(
                    worker_proc(
                        temporal.address,
                        runner.task_queue,
                        fake_api,
                        tmp_path / f"marks{i}.txt",
                        tmp_path / f"worker{i}.log",
                        env={"AGENT_RUNNER_TEST_JOURNAL": str(journal)},
                    )
                )
                for i in range(3)
            ]
            logs = [tmp_path / f"worker{i}.log" for i in range(3)]
            await wait_for(lambda: all("Worker ready" in log.read_text() for log in logs), "three workers polling", 60)
            runs = [await runner.start(**RUN) for _ in range(6)]

            def starts_by(pid: int) -> int:
                return sum(
                    1
                    for line in journal.read_text().splitlines()
                    if line.startswith("start") and line.endswith(f" {pid}")
                )

            await wait_for(
                lambda: starts_by(workers[0].pid) > 0 and starts_by(workers[1].pid) > 0, "tools on two workers", 60
            )
            killed, stopped = workers[0], workers[1]
            killed.send_signal(signal.SIGKILL)
            stopped.send_signal(signal.SIGTERM)
            async with asyncio.timeout(60):
                stopped_code = await asyncio.to_thread(stopped.wait)
            results = [await run.result() for run in runs]
            transcripts = [await run.transcript() for run in runs]
    assert stopped_code == 0
    assert [r.status for r in results] == ["completed"] * 6
    assert all(t == expected for t in transcripts)
    lines = [line.split() for line in journal.read_text().splitlines()]
    started = Counter((run_id, step, pid) for kind, run_id, step, pid in lines if kind == "start")
    done = Counter((run_id, step, pid) for kind, run_id, step, pid in lines if kind == "done")
    on_stopped = {key for key in started if key[2] == str(stopped.pid)}
    assert on_stopped and all(done[key] == 1 for key in on_stopped)  # drained, not abandoned
    finished = {(run_id, step) for run_id, step, _ in done}
    assert finished == {(run.id, step) for run in runs for step in ("step1", "step2")}


async def test_model_calls_run_on_model_only_workers_of_their_own_rate_limited_queue(
    tmp_path: Path, fake_api: FakeMessagesAPI
) -> None:
    fake_api.responder = conversation_responder(slow_turns=set())
    model_queue = f"claude-{uuid.uuid4()}"
    async with server(tmp_path) as temporal:
        runner = AgentRunner(await connect(temporal.address), task_queue=f"loop-{uuid.uuid4()}")
        marks = tmp_path / "marks.txt"
        with (
            worker_proc(
                temporal.address,
                runner.task_queue,
                fake_api,
                marks,
                tmp_path / "loop.log",
                "--serve",
                "workflows,tools",
                "--model-task-queue",
                model_queue,
                env={"ANTHROPIC_API_KEY": "key-of-the-loop-workers", "AGENT_RUNNER_TEST_SLOW_SECONDS": "0"},
            ),
            worker_proc(
                temporal.address,
                model_queue,
                fake_api,
                marks,
                tmp_path / "model.log",
                "--serve",
                "model",
                "--max-activities-per-second",
                "20",
                env={"ANTHROPIC_API_KEY": "key-of-the-model-workers"},
            ),
        ):
            result = await (await runner.start(**RUN)).result()
    assert result.status == "completed" and result.iterations == 3
    assert {r.headers["authorization"] for r in fake_api.requests} == {"Bearer key-of-the-model-workers"}


async def test_a_tool_pinned_to_its_own_queue_runs_only_on_the_workers_that_hold_it(
    client: Client, fake_api: FakeMessagesAPI
) -> None:
    """`tool_options(task_queue=...)`: the loop's workers describe the tool; only the pinned queue's workers run it."""
    from agent_runner.activities.tools import tool_options

    ran_on: list[str] = []

    @tool_options(task_queue=f"gpu-{uuid.uuid4()}")
    @beta_async_tool
    async def render(scene: str) -> str:
        """Render a scene on the GPU machines.

        Args:
            scene: What to render.
        """
        ran_on.append(activity.info().task_queue)
        return f"rendered {scene}"

    pinned_queue = render.__agent_runner_options__.task_queue  # type: ignore[attr-defined]
    loop_queue = f"loop-{uuid.uuid4()}"
    claude = ClaudeActivities(anthropic_client_factory(fake_api))
    fake_api.script(Reply([tool_use("toolu_R", "render", {"scene": "sunset"})], "tool_use"), end_turn("done"))
    async with (
        build_worker(
            client, registry=ToolRegistry([render]), task_queue=loop_queue, claude=claude, serve=["workflows", "model"]
        ),
        build_worker(client, registry=ToolRegistry([render]), task_queue=pinned_queue, claude=claude, serve=["tools"]),
    ):
        run = await AgentRunner(client, task_queue=loop_queue).start(
            model="claude-fake-1", max_tokens=64, messages=[{"role": "user", "content": "Render."}], tools=["render"]
        )
        await run.until_done()
    assert ran_on == [pinned_queue]
    assert fake_api.bodies()[1]["messages"][-1]["content"][0]["content"] == "rendered sunset"
