"""A run's status is right in every end state, and nothing waits silently for a worker that is not there.

Each test runs against the real Temporal dev server and the fake Messages API, through the Python client.
"""

from __future__ import annotations

import asyncio
import re
import threading
from datetime import timedelta
from typing import Any

import pytest
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from agent_runner.client import AgentRunner, Run
from agent_runner.contract.errors import (
    InvalidRunInput,
    NoWorker,
    RunAlreadyExists,
    RunCancelled,
    RunStuck,
    ToolNotRegistered,
)
from agent_runner.contract.events import RunEvent
from agent_runner.contract.types import WORKFLOW_TYPE
from agent_runner.testing import FakeMessagesAPI, Reply, end_turn, text, tool_use
from tests.conftest import WorkerFactory
from tests.steering_support import BrokenWorkers, delete_file, wait_status
from tests.test_events import streamed_text, without_deltas

USER = {"role": "user", "content": "Weather in Paris?"}
BASE: dict[str, Any] = {"model": "claude-fake-1", "max_tokens": 1024, "messages": [USER]}


def no_worker_line(task_queue: str) -> str:
    return (
        f"No worker is polling task queue {task_queue!r}. Start one: python worker.py --tools "
        f"agent_runner.example_tools --task-queue {task_queue} (or, to try things out, the whole development stack: "
        f"agent-runner dev --detach --task-queue {task_queue})"
    )


async def ended(run: Run) -> None:
    """Wait for the run to end, however it ends."""
    async with asyncio.timeout(20):
        while not await run._is_closed():
            await asyncio.sleep(0.05)


# ------------------------------------------------------------------------------------------ end states


async def test_a_run_whose_input_was_rejected_is_failed(runner: AgentRunner, worker: WorkerFactory) -> None:
    """The run fails before its loop begins, so its own state still says `running`: Temporal's word wins."""
    async with worker():
        run = await runner.start(**{**BASE, "messages": []})
        with pytest.raises(InvalidRunInput):
            await run.result()
        status = await run.status()
    assert (status.status, status.iterations, status.pending_approvals) == ("failed", 0, [])


async def test_a_run_naming_an_unknown_tool_is_failed(runner: AgentRunner, worker: WorkerFactory) -> None:
    async with worker():
        run = await runner.start(**BASE, tools=["no_such_tool"])
        with pytest.raises(ToolNotRegistered):
            await run.result()
        assert (await run.status()).status == "failed"


async def test_a_run_cancelled_before_its_first_turn_is_cancelled(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    run = await runner.start(**BASE)
    await run.cancel()  # before any worker picked it up
    async with worker():
        with pytest.raises(RunCancelled):
            await run.result()
        status = await run.status()
    assert (status.status, status.iterations) == ("cancelled", 0)
    assert fake_api.requests == []


async def test_a_run_terminated_while_waiting_for_approval_is_terminated_and_waits_no_more(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    fake_api.script(Reply([tool_use("toolu_D", "delete_file", {"path": "/etc"})], "tool_use"))
    async with worker(delete_file):
        run = await runner.start(**BASE, tools=[delete_file], approval={"tools": ["delete_file"]})
        await wait_status(run, "waiting_for_approval")
        await run.terminate("runaway")
        await ended(run)
        status = await run.status()
    assert (status.status, status.iterations, status.pending_approvals) == ("terminated", 1, [])


async def test_a_run_past_its_execution_timeout_is_timed_out(
    client: Client, runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, task_queue: str
) -> None:
    fake_api.script(Reply([text("too late")], delay=30))
    async with worker(graceful_shutdown_timeout=timedelta(seconds=1)):
        handle = await client.start_workflow(
            WORKFLOW_TYPE,
            BASE,
            id=f"timeout-{task_queue}",
            task_queue=task_queue,
            execution_timeout=timedelta(seconds=1),
        )
        run = runner.attach(handle.id)
        await ended(run)
        assert (await run.status()).status == "timed_out"


async def test_a_completed_run_keeps_how_it_ended(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    fake_api.script(end_turn("Sunny."))
    async with worker():
        run = await runner.start(**BASE)
        await run.until_done()
        status = await run.status()
    assert (status.status, status.iterations, status.stop_reason) == ("completed", 1, "end_turn")


# ------------------------------------------------------------------------------------------ no silent waits


async def test_without_a_worker_queries_and_edits_say_how_to_start_one(runner: AgentRunner, task_queue: str) -> None:
    """Rather than time out after half a minute without saying why."""
    run = await runner.start(**BASE)
    try:
        for call in (run.status, run.transcript):
            with pytest.raises(NoWorker) as e:
                async with asyncio.timeout(10):
                    await call()
            assert str(e.value) == no_worker_line(task_queue)
    finally:
        await run.terminate("test over")


async def test_an_edit_without_a_worker_is_not_sent_so_none_applies_when_one_starts(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, task_queue: str
) -> None:
    """The edit was sent, and its sender told it failed: Temporal kept it for the run, which took it once a worker
    started (an inject sent twice joined the conversation twice; a stop stopped the run)."""
    fake_api.script(end_turn("Sunny."))
    run = await runner.start(**BASE)
    refused = []
    for edit in (run.inject("hi"), run.inject("hi"), run.stop("no")):
        with pytest.raises(NoWorker) as e:
            async with asyncio.timeout(10):
                await edit
        refused.append(str(e.value))
    async with worker():
        result = await run.result()
        transcript = await run.transcript()
    line = no_worker_line(task_queue)
    assert refused == 3 * [line.replace(".", ". The edit was not sent; nothing was changed.", 1)]
    assert result.status == "completed"
    assert transcript == [USER, {"role": "assistant", "content": [{"type": "text", "text": "Sunny."}]}]


async def test_queries_and_edits_to_a_run_whose_workflow_task_keeps_failing_say_so_and_where_to_look(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bug in the workers' code fails the run's workflow task on every attempt. Temporal refuses queries and edits to
    it (once the task has failed twice) or holds an edit for a task that never takes it: each raises ``RunStuck``,
    with the failure and where to look, instead of a bare RPC error or a wait without end. Fixed workers carry the run
    on, with an edit Temporal held for it."""
    workers = BrokenWorkers(fake_api, monkeypatch)
    async with worker():
        run = await runner.start(**BASE)
        workers.break_()
        await workers.failed(run)
        refused: list[str] = []
        for call in (run.status, lambda: run.inject("hi"), run.transcript):
            with pytest.raises(RunStuck) as e:
                await call()
            refused.append(str(e.value))
        workers.fix()
        result = await run.result()  # the task's next attempt, on the fixed code
        conversation = await run.transcript()
    stuck = (
        f"Run {run.id} cannot answer now: its workflow task keeps failing on the workers (attempt N; "
        "WORKFLOW_WORKER_UNHANDLED_FAILURE: a bug in the worker's code).{} The workers' log says why (`temporal "
        f"workflow show --workflow-id {run.id}` shows the first failure); once workers run code that can go on with "
        "the run, it goes on by itself."
    )
    status, edit, transcript = (re.sub(r"\(attempt \d+;", "(attempt N;", line) for line in refused)
    assert status == transcript == stuck.format("")
    assert edit in (  # refused at once, or held for a workflow task that never took it
        stuck.format(" The edit was not sent; nothing was changed."),
        stuck.format(
            " The edit was sent: it may still apply once the run goes on, so check the transcript before sending it "
            "again."
        ),
    )
    assert result.status == "completed"
    if "The edit was sent" in edit:  # Temporal held it, and the run took it once its workflow task went through
        assert conversation == [
            USER,
            {"role": "assistant", "content": [text("Looking.")]},
            {"role": "user", "content": [text("hi")]},
            {"role": "assistant", "content": [text("Sunny.")]},
        ]
    else:
        assert "'hi'" not in str(conversation)


@pytest.mark.slow  # about 25 s: Temporal retries a failing workflow task after 10 s, then after longer
async def test_waiting_for_a_run_whose_workflow_task_keeps_failing_says_so_once_and_goes_on_once_fixed(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Waiting for a run's result or its events is durable: fixed workers carry a stuck run on, so the waits go on,
    each handle telling ``wait_notice`` once why the run is not going on. The wait for the result is held; from the
    task's third attempt on, Temporal refuses the event stream's poll outright, so the stream polls again now and
    then. The events then come exactly as a reader of the ended run gets them."""
    workers = BrokenWorkers(fake_api, monkeypatch)
    async with worker():
        run = await runner.start(**BASE)
        watcher = runner.attach(run.id)
        notices: dict[str, list[str]] = {"result": [], "events": []}
        run.wait_notice = lambda e: notices["result"].append(str(e))
        watcher.wait_notice = lambda e: notices["events"].append(str(e))
        workers.break_()
        result = asyncio.create_task(run.result())
        await workers.failed(run, attempts=3)
        events = asyncio.create_task(collect(watcher))  # its polls refused
        async with asyncio.timeout(40):
            while not (notices["result"] and notices["events"]):
                await asyncio.sleep(0.05)
        assert not result.done() and not events.done()
        workers.fix()
        async with asyncio.timeout(40):
            outcome, seen = await result, await events
        again = await collect(runner.attach(run.id))
    stuck = (
        f"Run {run.id} is not going on: its workflow task keeps failing on the workers (attempt N; "
        "WORKFLOW_WORKER_UNHANDLED_FAILURE: a bug in the worker's code). The workers' log says why (`temporal "
        f"workflow show --workflow-id {run.id}` shows the first failure); once workers run code that can go on with "
        "the run, it goes on by itself, and this wait with it."
    )
    said = {k: [re.sub(r"\(attempt \d+;", "(attempt N;", line) for line in v] for k, v in notices.items()}
    assert said == {"result": [stuck], "events": [stuck]}
    assert outcome.status == "completed"
    assert streamed_text(seen) == "Looking.Sunny."
    assert (
        without_deltas(seen)
        == without_deltas(again)
        == [
            ("iteration_started", 1, None),
            ("model_call_started", 1, 1),
            ("block_start", 1, 1),
            ("text", 1, 1),
            ("block_stop", 1, 1),
            ("reply", 1, None),
            ("iteration_started", 2, None),
            ("model_call_started", 2, 1),
            ("block_start", 2, 1),
            ("text", 2, 1),
            ("block_stop", 2, 1),
            ("reply", 2, None),
            ("run_finished", 2, None),
        ]
    )


async def collect(run: Run) -> list[RunEvent]:
    return [event async for event in run.events()]


async def test_waiting_for_a_run_without_a_worker_says_so_once_and_goes_on_when_one_starts(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, task_queue: str
) -> None:
    """The queue is durable: a worker that starts later carries the run on, and the wait ends with its result."""
    fake_api.script(end_turn("Sunny."))
    run = await runner.start(**BASE)
    notices: list[str] = []
    run.wait_notice = lambda e: notices.append(str(e))
    result = asyncio.create_task(run.result())
    async with asyncio.timeout(10):
        while not notices:
            await asyncio.sleep(0.05)
    async with worker():
        assert (await result).status == "completed"
    assert notices == [no_worker_line(task_queue)]


async def test_a_worker_check_temporal_fails_to_answer_does_not_fail_the_wait(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check is advisory: an RPC Temporal cancels under load says nothing of the run, whose result still comes."""
    service = runner.client.workflow_service
    failed: list[str] = []

    async def cancelled(request: Any, **_: Any) -> Any:
        failed.append(request.task_queue.name)
        raise RPCError("operation was canceled", RPCStatusCode.CANCELLED, b"")

    monkeypatch.setattr(service, "describe_task_queue", cancelled)
    replied = threading.Event()
    fake_api.script(Reply([text("Sunny.")], "end_turn", until=replied))  # answered after the first check
    async with worker():
        run = await runner.start(**BASE)
        notices: list[str] = []
        run.wait_notice = lambda e: notices.append(str(e))
        waiting = asyncio.create_task(run.result())
        try:
            async with asyncio.timeout(20):
                while not failed:
                    await asyncio.sleep(0.05)
        finally:
            replied.set()
        result = await waiting
    assert result.status == "completed"
    assert result.final_message is not None and result.final_message["content"] == [{"type": "text", "text": "Sunny."}]
    assert failed and set(failed) == {runner.task_queue} and notices == []


async def test_a_run_id_is_never_reused(runner: AgentRunner, task_queue: str) -> None:
    """Neither while the run is running nor after it ended: its id names its history and transcript."""
    run = await runner.start(**BASE, id=f"once-{task_queue}")
    message = (
        f"A run with id {run.id!r} already exists: pick another id, or attach to it with `runner.attach({run.id!r})`."
    )
    with pytest.raises(RunAlreadyExists) as e:
        await runner.start(**BASE, id=run.id)
    assert str(e.value) == message
    await run.terminate("test over")
    with pytest.raises(RunAlreadyExists):
        await runner.start(**BASE, id=run.id)
