"""Long runs: history bounded per iteration, continue-as-new that clients do not notice, content of any size.

Each test runs a real worker against the real dev server and the fake Messages API; the differential assertions
compare what Claude received with what a run that never continued as new sends.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any, NoReturn

import pytest
from anthropic import beta_async_tool
from temporalio import workflow
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import UpdateWorkflowExecutionLifecycleStage
from temporalio.api.update.v1 import UpdateRef, WaitPolicy
from temporalio.api.workflowservice.v1 import PollWorkflowExecutionUpdateRequest
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle
from temporalio.service import RPCError, RPCStatusCode

from agent_runner.activities.claude import ClaudeActivities
from agent_runner.activities.tools import ToolRegistry, tool_options
from agent_runner.client import AgentRunner, Run
from agent_runner.connection import data_converter
from agent_runner.contract.errors import AgentRunError, EditRejected
from agent_runner.contract.events import ModelCallEvent, ReplyReceived, RunFinished, TextDelta, ToolFinished
from agent_runner.contract.steering import EDIT_OUTCOME_QUERY, INJECT_MESSAGE_UPDATE, STOP_UPDATE
from agent_runner.contract.types import CREATE_MESSAGE_ACTIVITY, TOOL_USE_READY_SIGNAL
from agent_runner.store import open_store
from agent_runner.temporal_server import EmbeddedTemporal
from agent_runner.testing import FakeMessagesAPI, Reply, end_turn, text, tool_use
from agent_runner.worker import build_worker
from agent_runner.workflows import carry
from tests.conftest import WorkerFactory, anthropic_client_factory, scheduled_activities
from tests.steering_support import wait_status
from tests.test_big_params import executions, started_inputs
from tests.test_newest_models import SUMMARY, by_kind, split
from tests.tools_for_tests import get_weather

USER = {"role": "user", "content": "Weather in many cities?"}
BASE: dict[str, Any] = {"model": "claude-fake-1", "max_tokens": 1024, "messages": [USER]}
CITIES = [f"City{i}" for i in range(8)]


def script(fake_api: FakeMessagesAPI) -> None:
    fake_api.script(
        *(
            Reply([text(f"Checking {c}."), tool_use(f"toolu_{i}", "get_weather", {"city": c})], "tool_use")
            for i, c in enumerate(CITIES)
        ),
        end_turn("All done."),
    )


async def follow(run: Run) -> list[str]:
    return [reply.id async for reply in run.messages()]


@pytest.mark.parametrize("thread", [True, False], ids=["thread", "full_history"])
async def test_continue_as_new_mid_run_is_invisible_to_claude_followers_and_steerers(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, thread: bool
) -> None:
    script(fake_api)
    async with worker(get_weather):
        plain = await runner.start(**BASE, tools=[get_weather], thread=thread)
        await plain.until_done()
        expected_transcript = await plain.transcript()
    expected = fake_api.bodies()

    fake_api.reset()
    script(fake_api)
    async with worker(get_weather):
        run = await runner.start(
            **BASE, tools=[get_weather], thread=thread, continue_as_new={"events": 40}, max_iterations=20
        )
        following = asyncio.create_task(follow(run))
        result = await run.result()
        followed = await following
        status = await run.status()
        transcript = await run.transcript()
        late = [reply.id async for reply in run.messages()]  # a late follower, through the store
    bodies = fake_api.bodies()

    assert bodies == expected  # Claude cannot tell
    assert status.continuations >= 2
    assert result.status == "completed" and result.iterations == 9
    assert transcript == expected_transcript
    assert len(followed) == len(set(followed)) == 9
    assert followed == late
    first = runner.client.get_workflow_handle(run.id, run_id=run.handle.first_execution_run_id)
    assert (await first.describe()).status == WorkflowExecutionStatus.CONTINUED_AS_NEW


async def test_max_iterations_and_edits_carry_across_continue_as_new(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """Edits sent before and after the run continued as new all apply, once each, in order; the iteration limit
    counts over the whole run."""

    gates = {city: asyncio.Event() for city in CITIES}
    held: list[str] = []

    @beta_async_tool
    async def get_weather(city: str) -> str:
        """Get the weather once the test lets it.

        Args:
            city: The city.
        """
        held.append(city)
        await gates[city].wait()
        return f"sunny in {city}"

    async def until_held(count: int) -> None:
        async with asyncio.timeout(30):
            while len(held) < count:
                await asyncio.sleep(0.02)

    script(fake_api)
    async with worker(get_weather):
        run = await runner.start(
            **BASE, tools=["get_weather"], thread=False, continue_as_new={"events": 40}, max_iterations=6
        )
        await until_held(1)
        await run.inject("note 0", wait=False)  # accepted while the first call runs: it joins its result
        gates[held[-1]].set()
        while (await run.status()).continuations < 1:  # let calls run, one by one, until the run went across
            await until_held(len(held) + 1)
            gates[held[-1]].set()
        await run.inject("note 1", wait=False)
        await run.inject("note 2", wait=False)
        for gate in gates.values():
            gate.set()
        result = await run.result()
        status = await run.status()
        transcript = await run.transcript()
        outcomes = [await run.handle.query(EDIT_OUTCOME_QUERY, seq) for seq in (1, 2, 3)]
    versions = [outcome["version"] for outcome in outcomes]
    assert result.status == "max_iterations" and result.iterations == 6
    assert status.continuations >= 1
    notes = [
        b["text"]
        for m in transcript
        if m["role"] == "user" and isinstance(m["content"], list)
        for b in m["content"]
        if b.get("type") == "text" and b["text"].startswith("note")
    ]
    assert notes == ["note 0", "note 1", "note 2"]
    assert [outcome["error"] for outcome in outcomes] == [None, None, None]
    assert versions == sorted(set(versions))
    assert fake_api.bodies()[-1]["messages"] == transcript[: len(fake_api.bodies()[-1]["messages"])]


async def test_an_edit_queued_when_the_run_continues_as_new_applies_in_the_continuation_with_its_own_number(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """Edits accepted while a tool runs go across with the run (it continues as new after each iteration here) and
    apply in the next execution; one naming a version is judged against the edits applied over the whole run, so a
    count started afresh would refuse it; each edit gets a number of its own over the run."""
    gates = {city: asyncio.Event() for city in ("Paris", "Rome")}
    held: list[str] = []

    @beta_async_tool
    async def hold(city: str) -> str:
        """Report on a city once the test lets it.

        Args:
            city: The city.
        """
        held.append(city)
        await gates[city].wait()
        return f"report for {city}"

    async def while_held(city: str, edit: dict[str, Any]) -> dict[str, Any]:
        async with asyncio.timeout(30):
            while city not in held:
                await asyncio.sleep(0.02)
        accepted: dict[str, Any] = await run.handle.execute_update(INJECT_MESSAGE_UPDATE, edit)
        gates[city].set()
        return accepted

    fake_api.script(
        Reply([tool_use("toolu_H1", "hold", {"city": "Paris"})], "tool_use"),
        Reply([tool_use("toolu_H2", "hold", {"city": "Rome"})], "tool_use"),
        end_turn("Done."),
    )
    async with worker(hold):
        run = await runner.start(**BASE, tools=["hold"], thread=False, continue_as_new={"events": 10})
        first = await while_held("Paris", {"content": "note 1"})
        async with asyncio.timeout(30):
            while "Rome" not in held:
                await asyncio.sleep(0.02)
        version = (await run.status()).version
        second = await while_held("Rome", {"content": "note 2", "expected_version": version})
        await run.until_done()
        status = await run.status()
        outcomes = [await run.handle.query(EDIT_OUTCOME_QUERY, seq) for seq in (1, 2)]

    def answered(tool_use_id: str, city: str, note: str) -> dict[str, Any]:
        result = {"type": "tool_result", "tool_use_id": tool_use_id, "content": f"report for {city}"}
        return {"role": "user", "content": [result, text(note)]}

    assert (first["seq"], second["seq"]) == (1, 2)
    assert status.continuations == 2
    assert [body["messages"][-1] for body in fake_api.bodies()[1:]] == [
        answered("toolu_H1", "Paris", "note 1"),
        answered("toolu_H2", "Rome", "note 2"),
    ]
    assert outcomes == [
        {"seq": 1, "version": 3, "error": None, "kind": "inject_message"},
        {"seq": 2, "version": 6, "error": None, "kind": "inject_message"},
    ]


async def compacting_before_it_continues_as_new(
    runner: AgentRunner, fake_api: FakeMessagesAPI, first: Callable[[Run], Awaitable[Any]], summarized: threading.Event
) -> Run:
    """A run whose first turn calls get_weather, then compacting (its summary held until ``summarized`` is set)
    before it continues as new; its second turn ends it. A worker with get_weather must be running.

    ``first`` acts on the run while its first reply is held: an edit it has accepted applies before the compaction.
    """
    replied = threading.Event()
    turns = by_kind(
        [Reply([tool_use("toolu_P", "get_weather", {"city": "Paris"})], "tool_use", until=replied), end_turn("Ok.")]
    )
    fake_api.responder = lambda body: (
        Reply([SUMMARY], "compaction", until=summarized) if "compaction" in body else turns(body)
    )
    run = await runner.start(
        **BASE,
        tools=[get_weather],
        thread=False,
        betas=["compact-2026-09-04"],
        auto_compact={"input_tokens": 10},
        continue_as_new={"events": 10},
    )
    async with asyncio.timeout(30):
        while not fake_api.bodies():
            await asyncio.sleep(0.02)
    await first(run)
    replied.set()
    async with asyncio.timeout(30):
        while not split(fake_api.bodies())[1]:
            await asyncio.sleep(0.02)
    return run


async def test_an_edit_accepted_while_the_run_waits_to_continue_as_new_goes_across_and_applies_there(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """The run compacts its conversation before it continues as new; an edit accepted meanwhile is queued,
    goes across and applies in the continuation, its version judged against the edits applied over the whole run (a
    count started afresh would take it for stale)."""
    summarized = threading.Event()
    async with worker(get_weather):
        run = await compacting_before_it_continues_as_new(
            runner, fake_api, lambda run: run.inject("first", wait=False), summarized
        )
        version = (await run.status()).version
        accepted = await run.handle.execute_update(
            INJECT_MESSAGE_UPDATE, {"content": "note", "expected_version": version}
        )
        summarized.set()
        await run.until_done()
        status = await run.status()
        outcome = await run.handle.query(EDIT_OUTCOME_QUERY, accepted["seq"])
    assert (status.iterations, status.replies, status.continuations) == (2, 3, 1)  # the compaction is no iteration
    assert split(fake_api.bodies())[1][0]["messages"][-1]["content"][-1] == text("first")  # summarized with the rest
    assert split(fake_api.bodies())[0][1]["messages"] == [
        {"role": "assistant", "content": [SUMMARY]},
        {"role": "user", "content": [text("note")]},
    ]
    assert outcome == {"seq": 2, "version": version + 1, "error": None, "kind": "inject_message"}


async def admitted(client: Client, run_id: str, update_id: str, within: float) -> bool:
    """Whether the server admits update ``update_id`` of the run's current execution within ``within`` seconds."""
    request = PollWorkflowExecutionUpdateRequest(
        namespace=client.namespace,
        update_ref=UpdateRef(workflow_execution=WorkflowExecution(workflow_id=run_id), update_id=update_id),
        wait_policy=WaitPolicy(
            lifecycle_stage=UpdateWorkflowExecutionLifecycleStage.UPDATE_WORKFLOW_EXECUTION_LIFECYCLE_STAGE_ADMITTED
        ),
    )
    deadline = asyncio.get_running_loop().time() + within
    while asyncio.get_running_loop().time() < deadline:
        try:
            await client.workflow_service.poll_workflow_execution_update(request, timeout=timedelta(seconds=within))
            return True
        except RPCError as e:
            if e.status != RPCStatusCode.NOT_FOUND:
                raise
            await asyncio.sleep(0.01)  # not there yet: the client is still sending it
    return False


async def test_an_edit_that_reaches_the_run_as_it_continues_as_new_applies_once_in_the_continuation(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An edit the server took while the execution's last workflow task (the one that continues as new) was under way:
    that execution never sees it, and the client's call neither fails nor is lost: a continuation applies it, once.

    The workflow task is held where the run continues as new until the server has admitted the update (polled, not
    waited for), so the race happens every time; the hold stays under the SDK's deadlock detector (a workflow task
    held 2 s fails; its debug mode, which turns the detector off, runs workflow tasks on the client's event loop). The
    continuation's reply waits until the edit is accepted: a run that ended first would rightly refuse it.
    """
    replied = threading.Event()
    fake_api.script(
        Reply([tool_use("toolu_0", "get_weather", {"city": "A"})], "tool_use"),
        Reply([tool_use("toolu_1", "get_weather", {"city": "B"})], "tool_use", until=replied),
        end_turn("All done."),
    )
    continuing, taken = threading.Event(), threading.Event()
    held: list[bool] = []
    continue_as_new = workflow.continue_as_new

    def held_until_taken(*args: Any, **kwargs: Any) -> NoReturn:
        if not continuing.is_set():  # the first execution's: later ones go on at once
            continuing.set()
            held.append(taken.wait(1.8))
        continue_as_new(*args, **kwargs)

    monkeypatch.setattr(workflow, "continue_as_new", held_until_taken)
    update_ids: list[str] = []
    execute_update = WorkflowHandle.execute_update

    async def named(self: WorkflowHandle[Any, Any], update: Any, arg: Any = None, **kwargs: Any) -> Any:
        kwargs.setdefault("id", str(uuid.uuid4()))
        update_ids.append(kwargs["id"])
        return await execute_update(self, update, arg, **kwargs)

    monkeypatch.setattr(WorkflowHandle, "execute_update", named)
    async with worker(get_weather):
        run = await runner.start(**BASE, tools=[get_weather], thread=False, continue_as_new={"events": 10})
        while not continuing.is_set():
            await asyncio.sleep(0.01)
        editing = asyncio.create_task(run.inject("late", wait=False))
        while not update_ids:
            await asyncio.sleep(0.01)
        if await admitted(runner.client, run.id, update_ids[0], within=1.6):
            taken.set()
        await editing  # accepted
        replied.set()
        result = await run.result()
        status = await run.status()
        transcript = await run.transcript()
        histories = await executions(runner.client, run.id, run.handle.first_execution_run_id)
    assert held == [True]  # the server admitted the update while the first execution was continuing as new
    assert (result.status, status.continuations, status.iterations) == ("completed", 2, 3)
    accepted = [
        (n, e.workflow_execution_update_accepted_event_attributes.accepted_request.meta.update_id)
        for n, history in enumerate(histories)
        for e in history.events
        if e.HasField("workflow_execution_update_accepted_event_attributes")
    ]
    assert len(accepted) == 1 and accepted[0][0] > 0 and accepted[0][1] in update_ids  # in a continuation, once
    assert [message["content"] for message in transcript[-3:-1]] == [
        [tool_use("toolu_1", "get_weather", {"city": "B"})],
        [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny, 21C in B"}, text("late")],
    ] or [message["content"] for message in transcript[-5:-3]] == [
        [tool_use("toolu_0", "get_weather", {"city": "A"})],
        [{"type": "tool_result", "tool_use_id": "toolu_0", "content": "sunny, 21C in A"}, text("late")],
    ]  # at the continuation's first boundary, or its second (the update came with its first workflow task or after)
    assert str(transcript).count("'late'") == 1
    bodies = fake_api.bodies()
    assert str(bodies[0]).count("'late'") == 0 and str(bodies[-1]).count("'late'") == 1


async def test_a_stop_while_the_run_waits_to_continue_as_new_goes_across_and_ends_it(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """A client's stop accepted while the run compacts before it continues as new ends the run there: no more turns."""
    summarized = threading.Event()
    async with worker(get_weather):
        run = await compacting_before_it_continues_as_new(runner, fake_api, lambda _: asyncio.sleep(0), summarized)
        await run.handle.execute_update(STOP_UPDATE, {"reason": "Enough."})  # accepted before the summary comes
        summarized.set()
        result = await run.result()
        status = await run.status()
    assert (result.status, result.detail, status.continuations) == ("stopped", "Enough.", 1)
    assert len(split(fake_api.bodies())[0]) == 1


async def test_a_run_that_continued_as_new_still_refuses_to_add_a_tool_no_worker_registered(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """The continuation knows which tools the workers registered: ``add_tools`` of another name is refused at once."""
    script(fake_api)
    async with worker(get_weather):
        run = await runner.start(**BASE, tools=[get_weather], thread=False, step=True, continue_as_new={"events": 10})
        await wait_status(run, "waiting_for_step", 1)
        await run.advance()
        await wait_status(run, "waiting_for_step", 2)
        status = await run.status()
        with pytest.raises(EditRejected) as refused:
            await run.add_tools("get_tide")
        await run.stop()
    assert status.continuations == 1
    assert str(refused.value) == (
        "add_tools was refused: No worker registered ['get_tide']; registered: ['get_weather']. Register the tool "
        "with `python worker.py --tools <module>`, or add its definition as a JSON object."
    )


def weather_calls(count: int) -> list[dict[str, Any]]:
    """``count`` calls of ``get_weather``, ``toolu_0`` for ``City0`` and on."""
    return [tool_use(f"toolu_{i}", "get_weather", {"city": f"City{i}"}) for i in range(count)]


@pytest.mark.slow
async def test_a_late_follower_reads_every_reply_of_a_run_that_continued_as_new_after_each_one(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """Replies a continuation no longer carries are read from the store's chain of every reply, which goes across."""
    calls = weather_calls(9)
    fake_api.script(*(Reply([call], "tool_use") for call in calls), end_turn("All done."))
    async with worker(get_weather):
        run = await runner.start(**BASE, tools=[get_weather], thread=False, continue_as_new={"events": 10})
        await run.until_done()
        status = await run.status()
        late = [reply.content[0].model_dump(exclude_none=True) async for reply in run.messages()]
    assert (status.reply_offset, status.continuations) == (1, 9)
    assert late == [*calls, text("All done.")]


async def test_a_continuation_carries_its_last_reply_however_big_and_leaves_older_ones_to_the_store(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past ``CARRIED_REPLY_BYTES`` (256 KB; a byte here) a continuation carries only the last reply, which the run
    goes on reading (its status says how the last reply stopped); a follower reads every reply all the same."""
    monkeypatch.setattr(carry, "CARRIED_REPLY_BYTES", 1)
    calls = weather_calls(3)
    replied = threading.Event()
    last = Reply([text("All done.")], "end_turn", until=replied)
    fake_api.script(*(Reply([call], "tool_use") for call in calls), last)
    async with worker(get_weather):
        run = await runner.start(**BASE, tools=[get_weather], thread=False, continue_as_new={"events": 10})
        # The last model call's reply is held: the run has continued as new for the last time and holds one reply.
        try:
            await asyncio.to_thread(fake_api.wait_for_requests, 4, 30)
            waiting = await run.status()
        finally:
            replied.set()
        await run.until_done()
        status = await run.status()
        replies = [reply.content[0].model_dump(exclude_none=True) async for reply in run.messages()]
        later = [reply.content[0].model_dump(exclude_none=True) async for reply in run.messages(from_iteration=3)]
    assert (waiting.continuations, waiting.replies, waiting.reply_offset) == (3, 3, 2)
    assert waiting.stop_reason == "tool_use"
    assert (status.continuations, status.replies, status.reply_offset) == (3, 4, 2)
    assert replies == [*calls, text("All done.")]
    assert later == [calls[2], text("All done.")]


async def test_a_continuation_carries_the_last_64_marks_of_its_transcript_and_the_run_still_reads_it_whole(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """A long run's continuation input does not grow with the run: its transcript names the last 64 messages (and the
    head of the chain before them), and the whole conversation is still read back from the store."""
    calls = weather_calls(40)
    fake_api.script(*(Reply([call], "tool_use") for call in calls), end_turn("All done."))
    async with worker(get_weather):
        run = await runner.start(**BASE, tools=[get_weather], thread=False, continue_as_new={"events": 40})
        await run.until_done()
        transcript = await run.transcript()
        assert run.handle.first_execution_run_id is not None
        histories = await executions(runner.client, run.id, run.handle.first_execution_run_id)
    carried = [started["continued"] for started in started_inputs(histories[1:])]
    marks = [len(c["conversation"]["transcript"]["marks"]) for c in carried]
    assert len(carried) >= 5 and max(marks) == marks[-1] == 64
    assert len(transcript) == 82
    assert [m["content"][0] for m in transcript[1::2]] == [*calls, text("All done.")]


async def test_a_continuation_keeps_its_last_fork_points_and_refuses_the_older_by_number(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A continuation carries the last ``CARRIED_FORK_POINTS`` fork points (2 here, 1,024 in a run): a fork from one
    it kept starts from that turn's own request; one from an older turn is refused, saying where forks can start."""
    monkeypatch.setattr(carry, "CARRIED_FORK_POINTS", 2)
    calls = weather_calls(4)
    fake_api.script(*(Reply([call], "tool_use") for call in calls), end_turn("All done."), end_turn("Forked."))
    async with worker(get_weather):
        run = await runner.start(**BASE, tools=[get_weather], thread=False, continue_as_new={"events": 10})
        await run.until_done()
        status = await run.status()
        with pytest.raises(AgentRunError) as refused:
            await run.fork(2)
        fork = await run.fork(4)
        await fork.until_done()
    assert status.continuations == 4
    assert str(refused.value) == (
        f"Cannot fork run {run.id} from iteration 2: Iteration 2 is too old to fork from this run (it continued as "
        "new since); fork from iteration 3 or later, or start a run from the transcript."
    )
    bodies = fake_api.bodies()
    assert len(bodies) == 6
    assert bodies[5] == bodies[3]


async def test_a_continuation_sends_its_model_calls_to_the_fleets_model_queue(
    runner: AgentRunner, client: Client, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """The queue the fleet routes model calls to goes across continue-as-new (nothing else serves model calls)."""
    model_queue = f"claude-{uuid.uuid4()}"
    fake_api.script(Reply([tool_use("toolu_P", "get_weather", {"city": "Paris"})], "tool_use"), end_turn("Sunny."))
    model_worker = build_worker(
        client, task_queue=model_queue, serve=("model",), claude=ClaudeActivities(anthropic_client_factory(fake_api))
    )
    async with worker(get_weather, serve=("workflows", "tools"), model_task_queue=model_queue), model_worker:
        run = await runner.start(**BASE, tools=[get_weather], thread=False, continue_as_new={"events": 10})
        async with asyncio.timeout(20):
            result = await run.result()
        status = await run.status()
        history = await run.handle.fetch_history()
    attributes = [e.activity_task_scheduled_event_attributes for e in history.events]
    scheduled = [(a.activity_type.name, a.task_queue.name) for a in attributes if a.activity_id]
    assert (result.status, status.continuations) == ("completed", 1)
    assert scheduled == [("agent_runner.create_message", model_queue)]  # the continuation's one model call


def task_sizes(history: Any) -> list[tuple[int, bool]]:
    """Each workflow task's history size as Temporal told the run (bytes), and whether it suggested continuing."""
    return [
        (
            e.workflow_task_started_event_attributes.history_size_bytes,
            e.workflow_task_started_event_attributes.suggest_continue_as_new,
        )
        for e in history.events
        if e.HasField("workflow_task_started_event_attributes")
    ]


async def test_a_run_continues_as_new_at_the_first_boundary_past_its_history_bytes_limit(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """``continue_as_new.history_bytes`` is Temporal's count of the history's bytes, checked at each boundary.

    A continuation begins with what the run carries (its recent live events, replies and fork points: more than
    10 KB here), past so low a limit: it makes a model call of its own before it continues, never none (which would
    continue again at once, without end).
    """
    limit = 10_000
    script(fake_api)
    async with worker(get_weather):
        run = await runner.start(**BASE, tools=[get_weather], thread=False, continue_as_new={"history_bytes": limit})
        async with asyncio.timeout(30):
            await run.until_done()
        status = await run.status()
    assert run.handle.first_execution_run_id is not None
    first, *continuations = await executions(runner.client, run.id, run.handle.first_execution_run_id)
    sizes = [size for size, _ in task_sizes(first)]
    # The task that continued saw the limit passed; the boundary before it (two tasks back: a reply's task, then its
    # tool's) had not.
    assert sizes[-1] >= limit > sizes[-3], sizes
    assert len(scheduled_activities(first, CREATE_MESSAGE_ACTIVITY)) == 5
    for history in continuations:
        assert task_sizes(history)[0][0] >= limit
        assert len(scheduled_activities(history, CREATE_MESSAGE_ACTIVITY)) == 1
    assert status.continuations == len(continuations) == 4
    assert [len(b["messages"]) for b in fake_api.bodies()] == [1 + 2 * i for i in range(9)]


@pytest.mark.parametrize("signals", [2, 3])
async def test_a_run_continues_as_new_after_the_signals_its_limit_allows(
    signals: int, runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """``continue_as_new.signals`` counts the signals an execution took, whatever they said."""
    fake_api.script(Reply([tool_use("toolu_P", "get_weather", {"city": "Paris"})], "tool_use"), end_turn("Sunny."))
    async with worker(get_weather):
        run = await runner.start(**BASE, tools=[get_weather], thread=False, step=True, continue_as_new={"signals": 3})
        await wait_status(run, "waiting_for_step", 1)
        for _ in range(signals):  # no model call is under way: the run takes each and ignores what it says
            await run.handle.signal(TOOL_USE_READY_SIGNAL, {"iteration": 1, "attempt": 1, "token": "none"})
        await run.advance()
        await wait_status(run, "waiting_for_step", 2)
        status = await run.status()
        await run.advance()
        await run.until_done()
    assert status.continuations == (1 if signals >= 3 else 0)


async def test_a_run_continues_as_new_after_the_updates_its_limit_allows(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """``continue_as_new.updates`` counts the updates an execution took (a step's advance is one), not only events."""
    fake_api.script(Reply([tool_use("toolu_P", "get_weather", {"city": "Paris"})], "tool_use"), end_turn("Sunny."))
    async with worker(get_weather):
        run = await runner.start(**BASE, tools=[get_weather], thread=False, step=True, continue_as_new={"updates": 1})
        await wait_status(run, "waiting_for_step", 1)
        await run.advance()
        await wait_status(run, "waiting_for_step", 2)
        status = await run.status()
        await run.advance()
        await run.until_done()
    assert status.continuations == 1


async def test_history_grows_by_a_bounded_amount_per_iteration_whatever_the_transcript(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """A 1 MB first message travels through history once (the run's input), never again per turn."""
    big = {"role": "user", "content": [{"type": "text", "text": "x" * 1_000_000}]}
    script(fake_api)
    async with worker(get_weather):
        run = await runner.start(**{**BASE, "messages": [big]}, tools=[get_weather], thread=False)
        await run.until_done()
    assert [len(b["messages"]) for b in fake_api.bodies()] == [1 + 2 * i for i in range(9)]
    assert fake_api.bodies()[8]["messages"][0] == big
    history = await run.handle.fetch_history()
    total = history.to_json().encode()
    activity_inputs = [len(s.input.SerializeToString()) for s in scheduled_activities(history)]
    assert max(activity_inputs) < 4096  # every model call's input, the first one included
    assert len(total) < 1_000_000 * 4 / 3 + 200_000  # the input once (base64 in JSON), not nine times


async def test_a_5_mb_tool_result_reaches_claude_whole_and_stays_out_of_history(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    data = "iVBORw0KGgo" + "A" * 5_000_000

    @beta_async_tool
    async def screenshot(page: str) -> list[dict[str, Any]]:  # type: ignore[type-var]
        """Take a screenshot of a page.

        Args:
            page: The page.
        """
        assert page
        return [{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}}]

    fake_api.script(Reply([tool_use("toolu_S", "screenshot", {"page": "home"})], "tool_use"), end_turn("Nice."))
    async with worker(screenshot):
        run = await runner.start(**BASE, tools=[screenshot], thread=False)
        await run.until_done()
        transcript = await run.transcript()
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}}
    assert fake_api.bodies()[1]["messages"][-1] == {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "toolu_S", "content": [image]}],
    }
    assert transcript[-2]["content"][0]["content"] == [image]
    history = await run.handle.fetch_history()
    assert len(history.to_json()) < 200_000


@pytest.mark.parametrize(
    ("character", "size", "megabytes"),
    [("x", 33_000_000, "33.0"), ("\x01", 5_400_000, "32.4")],
    ids=["long", "short_but_escaped_each_in_six_bytes"],
)
async def test_a_tool_result_over_the_api_request_limit_becomes_an_error_the_model_sees(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, character: str, size: int, megabytes: str
) -> None:
    @beta_async_tool
    async def dump(size: int) -> str:
        """Return `size` characters.

        Args:
            size: How many.
        """
        return character * size

    fake_api.script(Reply([tool_use("toolu_BIG", "dump", {"size": size})], "tool_use"), end_turn("ok"))
    async with worker(dump):
        run = await runner.start(**BASE, tools=[dump], thread=False)
        await run.until_done()
    assert fake_api.bodies()[1]["messages"][-1]["content"] == [
        {
            "type": "tool_result",
            "tool_use_id": "toolu_BIG",
            "content": f"Error: Tool 'dump' returned {megabytes} MB, more than one request to Claude may carry "
            "(32.0 MB). Ask for a smaller part of the data.",
            "is_error": True,
        }
    ]


async def test_the_store_keeps_each_piece_of_content_once(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """Two runs over the same 200 KB document store it once; each turn adds only its new messages."""
    doc = {"role": "user", "content": [{"type": "text", "text": "d" * 200_000}]}
    store = open_store()
    before = await store.stats()
    for _ in range(2):
        fake_api.reset()
        script(fake_api)
        async with worker(get_weather):
            await (await runner.start(**{**BASE, "messages": [doc]}, tools=[get_weather])).until_done()
    after = await store.stats()
    await store.close()
    grown = after.blob_bytes - before.blob_bytes
    assert 200_000 < grown < 260_000


@pytest.mark.parametrize("thread", [True, False], ids=["thread", "full_history"])
async def test_auto_compact_summarizes_once_a_turns_input_passes_the_threshold(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, thread: bool
) -> None:
    """The SDK's client-side `compaction_control`, done durably: the turn after a big input starts from a summary."""
    summary = {"type": "compaction", "content": "Summary: City0 is sunny."}
    small = {"input_tokens": 900, "output_tokens": 5}
    big = {"input_tokens": 600, "output_tokens": 5, "cache_read_input_tokens": 500}
    fake_api.script(
        Reply([tool_use("toolu_0", "get_weather", {"city": "City0"})], "tool_use", usage=small),
        Reply([tool_use("toolu_1", "get_weather", {"city": "City1"})], "tool_use", usage=big),
        Reply([summary], "compaction"),
        end_turn("Done."),
    )
    async with worker(get_weather):
        run = await runner.start(
            **BASE,
            tools=[get_weather],
            thread=thread,
            context_management={"edits": [{"type": "clear_tool_uses_20250919"}]},
            betas=["compact-2026-09-04"],
            auto_compact={"input_tokens": 1000, "compaction": {"instructions": "Keep the cities."}},
        )
        result = await run.result()
    first, second, compaction, after = fake_api.bodies()
    assert first["context_management"] == {"edits": [{"type": "clear_tool_uses_20250919"}]}  # passed through
    assert second.get("context_management") == first["context_management"]
    assert "context_management" not in compaction  # a compaction request cannot carry it
    assert compaction["compaction"] == {"type": "summarize", "instructions": "Keep the cities."}  # the API needs `type`
    assert compaction["messages"][-1] == {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny, 21C in City1"}],
    }
    assert after["messages"] == [{"role": "assistant", "content": [summary]}]
    assert after["context_management"] == first["context_management"]
    assert result.status == "completed" and result.iterations == 3


async def test_a_step_mode_loop_yields_the_compaction_and_goes_on_to_the_end(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """`async for` over a step-mode run is the SDK's loop: a compaction is yielded like a reply (it is not an
    iteration), and the loop advances past it to the end (it hung there when the client counted it as one)."""
    small = {"input_tokens": 900, "output_tokens": 5}
    big = {"input_tokens": 600, "output_tokens": 5, "cache_read_input_tokens": 500}
    fake_api.script(
        Reply([tool_use("toolu_0", "get_weather", {"city": "City0"})], "tool_use", usage=small),
        Reply([tool_use("toolu_1", "get_weather", {"city": "City1"})], "tool_use", usage=big),
        Reply([{"type": "compaction", "content": "Summary."}], "compaction"),
        end_turn("Done."),
    )
    async with worker(get_weather):
        run = await runner.start(
            **BASE,
            tools=[get_weather],
            step=True,
            betas=["compact-2026-09-04"],
            auto_compact={"input_tokens": 1000, "compaction": {}},
        )
        stops = [message.stop_reason async for message in run]
        result = await run.result()
        status = await run.status()
    assert stops == ["tool_use", "tool_use", "compaction", "end_turn"]
    assert (result.status, result.iterations, status.iterations, status.replies) == ("completed", 3, 3, 4)
    # `{}` (the default before) is sent with the `type` the API requires.
    assert fake_api.bodies()[2]["compaction"] == {"type": "summarize"}


async def test_a_fleet_on_postgresql_shares_transcripts_across_workers_and_continue_as_new(
    client: Client, task_queue: str, worker: WorkerFactory, fake_api: FakeMessagesAPI, postgres_url: str
) -> None:
    """Model calls and tools on different workers, each with its own connection to one PostgreSQL store, as on a
    fleet: a big tool result stored by the tool worker reaches Claude through the model worker; a client reads the
    transcript from the same store."""
    report = "r" * 10_000
    tools_queue = f"{task_queue}-tools"

    @tool_options(task_queue=tools_queue)
    @beta_async_tool
    async def fetch_report(city: str) -> str:
        """Fetch a long report.

        Args:
            city: The city.
        """
        return f"{city}: {report}"

    fake_api.script(
        *(Reply([tool_use(f"toolu_{i}", "fetch_report", {"city": c})], "tool_use") for i, c in enumerate(CITIES[:4])),
        end_turn("Read them all."),
    )
    reader = AgentRunner(client, task_queue=task_queue, store=open_store(postgres_url))
    tool_worker = build_worker(
        client,
        registry=ToolRegistry([fetch_report]),
        task_queue=tools_queue,
        serve=("tools",),
        store=open_store(postgres_url),
    )
    async with worker(fetch_report, serve=("workflows", "model"), store=open_store(postgres_url)), tool_worker:
        run = await reader.start(**BASE, tools=["fetch_report"], thread=False, continue_as_new={"events": 40})
        result = await run.result()
        transcript = await run.transcript()
        status = await run.status()
    assert result.status == "completed" and status.continuations >= 1
    assert fake_api.bodies()[4]["messages"][-1]["content"] == [
        {"type": "tool_result", "tool_use_id": "toolu_3", "content": f"{CITIES[3]}: {report}"}
    ]
    assert transcript == [*fake_api.bodies()[4]["messages"], {"role": "assistant", "content": [text("Read them all.")]}]


async def test_a_transcript_of_tens_of_megabytes_runs_with_a_small_history(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """30 MB of conversation: each request on the thread carries only what is new; history holds only references."""
    doc = {"role": "user", "content": [{"type": "text", "text": "D" * 6_000_000}]}

    @beta_async_tool
    async def read_volume(number: int) -> str:
        """Read one volume of the archive.

        Args:
            number: The volume.
        """
        return str(number) * 6_000_000

    fake_api.script(
        *(Reply([tool_use(f"toolu_{n}", "read_volume", {"number": n})], "tool_use") for n in range(1, 5)),
        end_turn("Read."),
    )
    async with worker(read_volume):
        run = await runner.start(**{**BASE, "messages": [doc]}, tools=[read_volume])
        await run.until_done()
        transcript = await run.transcript()
    assert sum(len(str(m)) for m in transcript) > 30_000_000
    assert [len(str(b["messages"])) // 1_000_000 for b in fake_api.bodies()] == [6, 6, 6, 6, 6]
    assert transcript[-2]["content"][0]["content"] == "4" * 6_000_000
    history = await run.handle.fetch_history()
    assert len(history.to_json()) < 300_000


async def test_a_live_event_subscriber_follows_the_run_across_continue_as_new(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    script(fake_api)
    async with worker(get_weather):
        run = await runner.start(**BASE, tools=[get_weather], continue_as_new={"events": 40})
        seen = [event async for event in run.events()]
        status = await run.status()
    assert status.continuations >= 2
    replies = [e for e in seen if isinstance(e, ReplyReceived)]
    assert [e.iteration for e in replies] == list(range(1, 10))
    assert [e.message["content"][0] for e in replies[:8]] == [text(f"Checking {c}.") for c in CITIES]
    finished = [e for e in seen if isinstance(e, ToolFinished)]
    assert [e.result["content"] for e in finished] == [f"sunny, 21C in {c}" for c in CITIES]
    assert "".join(e.text for e in seen if isinstance(e, TextDelta) and e.iteration == 9) == "All done."
    assert isinstance(seen[-1], RunFinished) and seen[-1].status == "completed"
    offsets = [e.offset for e in seen if not isinstance(e, ModelCallEvent)]
    assert offsets == sorted(set(offsets))  # streamed pieces share the offset of the stream event before them
    assert [e.offset for e in seen] == sorted(e.offset for e in seen)  # type: ignore[type-var]


@pytest.mark.slow
async def test_a_run_continues_as_new_at_the_first_boundary_temporal_suggests_it(
    fake_api: FakeMessagesAPI, tmp_path: Path
) -> None:
    """Temporal's own suggestion (its history-count threshold, lowered on a server of this test's) continues the run."""
    threshold = 20
    args = ["--dynamic-config-value", f"limit.historyCount.suggestContinueAsNew={threshold}"]
    script(fake_api)
    with EmbeddedTemporal(tmp_path / "temporal.db", extra_args=args) as server:
        client = await Client.connect(server.address, data_converter=data_converter())
        runner = AgentRunner(client, task_queue="suggested")
        worker = build_worker(
            client,
            registry=ToolRegistry([get_weather]),
            task_queue="suggested",
            claude=ClaudeActivities(anthropic_client_factory(fake_api)),
        )
        async with worker:
            run = await runner.start(**BASE, tools=[get_weather], thread=False)
            async with asyncio.timeout(60):
                await run.until_done()
            status = await run.status()
            assert run.handle.first_execution_run_id is not None
            histories = await executions(client, run.id, run.handle.first_execution_run_id)
    for history in histories[:-1]:
        suggested = [suggest for _, suggest in task_sizes(history)]
        # The task that continued was told to; the boundary before it (two tasks back) was not.
        assert suggested[-1] and not suggested[-3], suggested
    assert status.continuations == len(histories) - 1 >= 1
    assert [len(b["messages"]) for b in fake_api.bodies()] == [1 + 2 * i for i in range(9)]
