"""Durability, proven by killing processes: a worker `kill -9`ed mid model call and mid tool call, and the Temporal
server killed mid-run and restarted on its database file. Each run must end with the transcript of a run that was
never interrupted.

Workers here are real subprocesses (`python worker.py --tools tests.tools_for_tests`), taking Claude's address and
key from their environment as in production. Claude is the fake Messages API, answering each request from the
conversation it carries, so a retried request gets the same reply an uninterrupted run got.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowHandle
from temporalio.contrib.pydantic import pydantic_data_converter

from agent_runner.client import AgentRunner
from agent_runner.contract.transcript import canonical, ref_for
from agent_runner.contract.types import RunResult
from agent_runner.temporal_server import EmbeddedTemporal
from agent_runner.testing import DropMidStream, FakeMessagesAPI, Reply, end_turn, text, tool_use
from tests.conftest import history_text

pytestmark = pytest.mark.slow  # real processes killed and restarted: the slow tier, after the default one

ROOT = Path(__file__).resolve().parents[1]
FAST = {"heartbeat_timeout": "PT2S", "initial_interval": "PT0.2S", "maximum_interval": "PT1S"}
RUN = {
    "model": "claude-fake-1",
    "max_tokens": 512,
    "messages": [{"role": "user", "content": "Run the two steps."}],
    "tools": ["slow_step"],
    "model_activity": FAST,
}


def conversation_responder(slow_turns: set[int], slow_seconds: float = 6.0) -> Callable[[dict[str, Any]], Reply]:
    """Claude as a function of the conversation: step one, step two, then a summary.

    The reply id comes from the turn, so a retried request is answered exactly as the first attempt would have
    been. Turns in ``slow_turns`` are answered slowly the first time only, leaving time to kill the worker.
    """
    answered_slowly: set[int] = set()

    def respond(body: dict[str, Any]) -> Reply:
        results = sum(
            1
            for m in body["messages"]
            if isinstance(m.get("content"), list)
            for b in m["content"]
            if b.get("type") == "tool_result"
        )
        turn = results + 1 if body.get("thread", {}).get("type") != "continue" else _turn_of(body)
        delay = 0.0
        if turn in slow_turns and turn not in answered_slowly:
            answered_slowly.add(turn)
            delay = slow_seconds
        if turn <= 2:
            step = f"step{turn}"
            return Reply(
                id=f"msg_turn_{turn}",
                content=[text(f"Running {step}."), tool_use(f"toolu_{step}", "slow_step", {"step": step})],
                stop_reason="tool_use",
                delay=delay,
            )
        return Reply(id=f"msg_turn_{turn}", content=[text("Both steps are done.")], delay=delay)

    return respond


def _turn_of(body: dict[str, Any]) -> int:
    # On a `continue`, the previous reply's id names its turn.
    return int(body["thread"]["previous_message_id"].rsplit("_", 1)[1]) + 1


@contextmanager
def worker_process(
    address: str,
    task_queue: str,
    fake: FakeMessagesAPI,
    marks: Path,
    log: Path,
    *args: str,
    env: dict[str, str] | None = None,
) -> Iterator[subprocess.Popen[bytes]]:
    full_env = {
        **os.environ,
        "TEMPORAL_ADDRESS": address,
        "ANTHROPIC_BASE_URL": fake.url,
        "ANTHROPIC_API_KEY": "sk-ant-secret-from-env",
        "AGENT_RUNNER_TEST_MARKS": str(marks),
        "AGENT_RUNNER_TEST_SLOW_SECONDS": "3",
        "PYTHONPATH": str(ROOT),
        **(env or {}),
    }
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                str(ROOT / "worker.py"),
                "--tools",
                "tests.tools_for_tests",
                "--task-queue",
                task_queue,
                *args,
            ],
            cwd=ROOT,
            env=full_env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


async def wait_for(predicate: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.05)
    assert predicate(), what


@asynccontextmanager
async def server(tmp_path: Path) -> AsyncIterator[EmbeddedTemporal]:
    temporal = EmbeddedTemporal(tmp_path / "temporal.db")
    await temporal.astart()
    try:
        yield temporal
    finally:
        await temporal.astop()


async def connect(address: str) -> Client:
    return await Client.connect(address, data_converter=pydantic_data_converter)


async def uninterrupted_transcript(tmp_path: Path, fake: FakeMessagesAPI) -> list[dict[str, Any]]:
    fake.reset()
    fake.responder = conversation_responder(slow_turns=set())
    async with server(tmp_path / "reference") as temporal:
        runner = AgentRunner(await connect(temporal.address), task_queue=f"ref-{uuid.uuid4()}")
        marks = tmp_path / "reference-marks.txt"
        with worker_process(temporal.address, runner.task_queue, fake, marks, tmp_path / "reference.log"):
            run = await runner.start(**RUN)
            await run.until_done()
            return await run.transcript()


@pytest.fixture
def reference_dir(tmp_path: Path) -> Path:
    (tmp_path / "reference").mkdir()
    return tmp_path


async def test_worker_killed_during_a_model_call_resumes_on_a_new_worker(
    reference_dir: Path, fake_api: FakeMessagesAPI
) -> None:
    tmp_path = reference_dir
    expected = await uninterrupted_transcript(tmp_path, fake_api)
    fake_api.reset()
    fake_api.responder = conversation_responder(slow_turns={2})
    marks, log = tmp_path / "marks.txt", tmp_path / "worker.log"
    async with server(tmp_path) as temporal:
        runner = AgentRunner(await connect(temporal.address), task_queue=f"kill-model-{uuid.uuid4()}")
        with worker_process(temporal.address, runner.task_queue, fake_api, marks, log) as first:
            run = await runner.start(**RUN)
            # The second model request is answered slowly: kill the worker while it waits for the reply.
            await wait_for(lambda: len(fake_api.requests) >= 2, "the second model request")
            first.send_signal(signal.SIGKILL)
            first.wait()
        with worker_process(temporal.address, runner.task_queue, fake_api, marks, log):
            result = RunResult.model_validate(await run.handle.result())
            transcript = await run.transcript()
            history = history_text(await run.handle.fetch_history())
    assert result.status == "completed" and result.iterations == 3
    assert transcript == expected
    turns = [r.body.get("thread", {}).get("previous_message_id") for r in fake_api.requests]
    # The killed attempt's request reached the server, which continued the thread; its retry is refused with
    # `thread_already_continued`, and the turn is replayed with the full history on a new thread, as the SDK does.
    assert turns == [None, "msg_turn_1", "msg_turn_1", None, "msg_turn_2"]
    assert [r.body["thread"]["type"] for r in fake_api.requests] == [
        "create",
        "continue",
        "continue",
        "create",
        "continue",
    ]
    assert marks.read_text().splitlines() == ["start step1", "start step2"]
    assert "sk-ant-secret-from-env" not in history


async def test_worker_killed_during_a_tool_call_resumes_on_a_new_worker(
    reference_dir: Path, fake_api: FakeMessagesAPI
) -> None:
    tmp_path = reference_dir
    expected = await uninterrupted_transcript(tmp_path, fake_api)
    fake_api.reset()
    fake_api.responder = conversation_responder(slow_turns=set())
    marks, log = tmp_path / "marks.txt", tmp_path / "worker.log"
    async with server(tmp_path) as temporal:
        runner = AgentRunner(await connect(temporal.address), task_queue=f"kill-tool-{uuid.uuid4()}")
        with worker_process(temporal.address, runner.task_queue, fake_api, marks, log) as first:
            run = await runner.start(**RUN)
            await wait_for(lambda: marks.exists() and "start step2" in marks.read_text(), "step2 starting")
            first.send_signal(signal.SIGKILL)
            first.wait()
        with worker_process(temporal.address, runner.task_queue, fake_api, marks, log):
            result = RunResult.model_validate(await run.handle.result())
            transcript = await run.transcript()
    assert result.status == "completed" and result.iterations == 3
    assert transcript == expected
    assert marks.read_text().splitlines() == ["start step1", "start step2", "start step2"]
    assert len(fake_api.requests) == 3


async def test_temporal_server_killed_mid_run_and_restarted_on_its_database(
    reference_dir: Path, fake_api: FakeMessagesAPI
) -> None:
    tmp_path = reference_dir
    expected = await uninterrupted_transcript(tmp_path, fake_api)
    fake_api.reset()
    fake_api.responder = conversation_responder(slow_turns=set())
    marks, log = tmp_path / "marks.txt", tmp_path / "worker.log"
    temporal = EmbeddedTemporal(tmp_path / "temporal.db")
    await temporal.astart()
    try:
        runner = AgentRunner(await connect(temporal.address), task_queue=f"kill-server-{uuid.uuid4()}")
        with worker_process(temporal.address, runner.task_queue, fake_api, marks, log):
            run = await runner.start(**RUN)
            await wait_for(lambda: marks.exists() and "start step1" in marks.read_text(), "step1 starting")
            temporal.kill()
            await asyncio.sleep(1.0)
            restarted = EmbeddedTemporal(tmp_path / "temporal.db", port=int(temporal.address.rsplit(":", 1)[1]))
            await restarted.astart()
            temporal = restarted
            result = RunResult.model_validate(await run.handle.result())
            transcript = await run.transcript()
    finally:
        await temporal.astop()
    assert result.status == "completed" and result.iterations == 3
    assert transcript == expected
    assert [r.body.get("thread", {}).get("previous_message_id") for r in fake_api.requests] == [
        None,
        "msg_turn_1",
        "msg_turn_2",
    ]


async def test_injections_from_several_clients_survive_a_worker_kill_each_exactly_once_in_order(
    tmp_path: Path, fake_api: FakeMessagesAPI
) -> None:
    """Every accepted edit is in the workflow's state before the update returns: a worker killed with edits queued
    loses none of them, and none applies twice. An edit sent after the run ended is refused, with the reason."""
    from agent_runner.contract.errors import EditRejected

    fake_api.responder = conversation_responder(slow_turns=set())
    marks, log = tmp_path / "marks.txt", tmp_path / "worker.log"
    async with server(tmp_path) as temporal:
        runner = AgentRunner(await connect(temporal.address), task_queue=f"kill-edits-{uuid.uuid4()}")
        with worker_process(temporal.address, runner.task_queue, fake_api, marks, log) as first:
            run = await runner.start(**RUN)
            clients = [runner.attach(run.id) for _ in range(3)]
            await wait_for(lambda: marks.exists() and "start step1" in marks.read_text(), "step1 starting")
            for i in range(6):
                await clients[i % 3].inject(f"note {i}", wait=False)
            first.send_signal(signal.SIGKILL)
            first.wait()
        with worker_process(temporal.address, runner.task_queue, fake_api, marks, log):
            await wait_for(lambda: "start step2" in marks.read_text(), "step2 starting")
            for i in range(6, 12):
                await clients[i % 3].inject(f"note {i}", wait=False)
            await run.until_done()
            transcript = await run.transcript()
            with pytest.raises(EditRejected, match="has already ended"):
                await clients[0].inject("too late")
    notes = [
        block["text"]
        for message in transcript
        if message["role"] == "user" and isinstance(message["content"], list)
        for block in message["content"]
        if block.get("type") == "text"
    ]
    assert notes == [f"note {i}" for i in range(12)]


async def test_a_reply_streaming_when_its_worker_is_killed_goes_on_from_the_text_its_heartbeats_kept(
    tmp_path: Path, fake_api: FakeMessagesAPI
) -> None:
    """With ``continue_cut_replies``, each heartbeat of a streaming model call names the text kept so far: a worker
    killed mid-stream says nothing at the end, and the next attempt, on another worker, goes on from that text."""
    long = "Paris is sunny today. Tomorrow brings rain."
    kept = [{"type": "text", "text": long}]
    # The whole text comes within half a second, then the stream hangs: the worker is killed while it waits.
    fake_api.script(
        DropMidStream(Reply([text(long)], "end_turn", event_delay=0.1), 6, delay=30), end_turn(" Then sun again.")
    )
    marks, log = tmp_path / "marks.txt", tmp_path / "worker.log"
    async with server(tmp_path) as temporal:
        runner = AgentRunner(await connect(temporal.address), task_queue=f"kill-stream-{uuid.uuid4()}")
        with worker_process(temporal.address, runner.task_queue, fake_api, marks, log) as first:
            run = await runner.start(
                model="claude-fake-1",
                max_tokens=512,
                messages=[{"role": "user", "content": "The weather?"}],
                continue_cut_replies=True,
                model_activity=FAST,
            )
            # Killed once a heartbeat naming the whole text reached the server.
            named = {"cut_reply": ref_for(canonical(kept))}
            async with asyncio.timeout(30):
                while await heartbeat_details(run.handle) != named:
                    await asyncio.sleep(0.1)
            first.send_signal(signal.SIGKILL)
            first.wait()
        with worker_process(temporal.address, runner.task_queue, fake_api, marks, log):
            result = await run.result()
            transcript = await run.transcript()
    first_body, second_body = fake_api.bodies()
    assert second_body == {**first_body, "messages": [*first_body["messages"], {"role": "assistant", "content": kept}]}
    reply = [*kept, {"type": "text", "text": " Then sun again."}]
    assert (result.status, result.iterations) == ("completed", 1)
    assert transcript == [{"role": "user", "content": "The weather?"}, {"role": "assistant", "content": reply}]


async def heartbeat_details(handle: WorkflowHandle[Any, Any]) -> object:
    """The first heartbeat detail of the run's pending activity, as JSON; ``None`` while there is none."""
    pending = (await handle.describe()).raw_description.pending_activities
    payloads = pending[0].heartbeat_details.payloads if pending else []
    return json.loads(payloads[0].data) if payloads else None
