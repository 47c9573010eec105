"""Sub-agents: an agent is a tool whose call starts a child ``AgentRun``.

The fake Messages API answers the parent and its children from one responder that tells their requests apart by
their system prompt (and a child's by its task), so each test pins the exact bodies every run sent
(``tests/subagent_support.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest
from anthropic import beta_async_tool
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from agent_runner.client import AgentRunner, Run
from agent_runner.contract.errors import InvalidRunInput
from agent_runner.contract.run_input import parse_run_input
from agent_runner.testing import FakeMessagesAPI, Reply, ScriptItem, bad_request, end_turn, text, tool_use
from agent_runner.workflows.agent_run import AgentRun
from tests.conftest import WorkerFactory
from tests.steering_support import CALLS, GATE, gated
from tests.subagent_support import (
    BASE,
    RESEARCH,
    RESEARCHER,
    RESEARCHER_DEF,
    SCOUT,
    USER,
    ChildAskingApproval,
    by_system,
    child_bodies,
    parent_bodies,
    research,
    scouting_child,
    start_research,
    two_step_tree,
    wait_for,
    weather_child_bodies,
    weather_parent_bodies,
    weather_research,
)
from tests.test_loop import GET_WEATHER_DEF
from tests.tools_for_tests import get_weather


async def test_an_agent_call_runs_a_child_whose_final_text_is_the_tool_result(
    runner: AgentRunner, client: Client, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    fake_api.responder = weather_research()
    async with worker(get_weather):
        run = await runner.start(
            **BASE, messages=[USER], thread=False, agents=[{**RESEARCHER, "max_iterations": 5}], max_iterations=10
        )
        final = await run.until_done()
        status = await run.status()
    assert final.content[0].type == "text" and final.content[0].text == "It is sunny."
    assert status.agents == [
        {"id": f"{run.id}/toolu_P1", "name": "researcher", "tool_use_id": "toolu_P1", "status": "completed"}
    ]
    assert child_bodies(fake_api) == weather_child_bodies([GET_WEATHER_DEF])
    assert parent_bodies(fake_api) == weather_parent_bodies([RESEARCHER_DEF])
    # The child is a run of its own, a child of the parent's workflow, with an id derived from the call.
    child_handle = client.get_workflow_handle(f"{run.id}/toolu_P1")
    described = await child_handle.describe()
    assert described.status == WorkflowExecutionStatus.COMPLETED
    assert described.parent_id == run.id
    assert (await child_handle.result())["final_message"]["content"] == [{"type": "text", "text": "Sunny, 21C."}]
    # The parent's history, child and all, replays on the current code.
    history = await client.get_workflow_handle(run.id).fetch_history()
    replayer = Replayer(workflows=[AgentRun], data_converter=pydantic_data_converter)
    assert (await replayer.replay_workflow(history, raise_on_replay_failure=False)).replay_failure is None


async def test_a_parent_that_continued_as_new_still_lists_the_child_it_started(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """The child runs an agent call started go across continue-as-new: the parent's status still names them."""
    fake_api.responder = weather_research()
    async with worker(get_weather):
        run = await runner.start(
            **BASE, messages=[USER], thread=False, agents=[RESEARCHER], continue_as_new={"events": 10}
        )
        await run.until_done()
        status = await run.status()
    assert status.continuations == 1
    assert status.agents == [
        {"id": f"{run.id}/toolu_P1", "name": "researcher", "tool_use_id": "toolu_P1", "status": "completed"}
    ]


async def test_a_failed_child_is_an_error_result_saying_why(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    fake_api.responder = by_system(
        [research("toolu_P1", "Find the weather in Paris."), end_turn("No luck.")],
        lambda _: bad_request("model: unknown model 'claude-nope'"),
    )
    async with worker(get_weather):
        run = await runner.start(**BASE, messages=[USER], thread=False, agents=[{**RESEARCHER, "model": "claude-nope"}])
        await run.until_done()
        assert [a["status"] for a in (await run.status()).agents] == ["failed"]
    assert [b["model"] for b in child_bodies(fake_api)] == ["claude-nope"]
    assert parent_bodies(fake_api)[1]["messages"][-1] == {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "toolu_P1",
                "content": "Error: Agent 'researcher' failed: Claude's API rejected the request with 400: "
                "invalid_request_error: model: unknown model 'claude-nope'. Fix the run's input (or the worker's "
                "ANTHROPIC_API_KEY for 401/403) and start the run again.",
                "is_error": True,
            }
        ],
    }


MET: dict[str, int] = {}


@beta_async_tool
async def rendezvous(who: str) -> str:
    """Wait, up to 10 s, for the other caller to arrive too.

    Args:
        who: Who arrives.
    """
    MET[who] = len(MET)
    async with asyncio.timeout(10):
        while len(MET) < 2:
            await asyncio.sleep(0.02)
    return f"{who} met the other"


async def test_agents_in_one_reply_run_concurrently_and_answer_in_block_order(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    MET.clear()
    b_done = threading.Event()

    def child(body: dict[str, Any]) -> ScriptItem:
        task = body["messages"][0]["content"]
        if len(body["messages"]) == 1:
            return Reply(content=[tool_use(f"toolu_{task}", "rendezvous", {"who": task})], stop_reason="tool_use")
        # The first agent's child finishes last (its last reply held until the second's child has ended): its result
        # still comes first.
        return Reply(content=[text(f"{task} done")], until=b_done if task == "a" else None)

    async def second_child_ended() -> bool:
        agents = (await run.status()).agents
        return any(a["tool_use_id"] == "toolu_P1" and a["status"] == "completed" for a in agents)

    fake_api.responder = by_system([research("toolu_P", "a", "b"), end_turn("Both done.")], child)
    async with worker(rendezvous):
        run = await runner.start(
            **BASE, messages=[USER], thread=False, agents=[{**RESEARCHER, "tools": ["rendezvous"]}]
        )
        try:
            await wait_for(second_child_ended)
        finally:
            b_done.set()
        await run.until_done()
    # Each child's tool waited for the other's: they ran at the same time.
    met = sorted(b["messages"][-1]["content"][0]["content"] for b in child_bodies(fake_api) if len(b["messages"]) == 3)
    assert met == ["a met the other", "b met the other"]
    assert parent_bodies(fake_api)[1]["messages"][-1] == {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "toolu_P0", "content": "a done"},
            {"type": "tool_result", "tool_use_id": "toolu_P1", "content": "b done"},
        ],
    }


def waiting_child(body: dict[str, Any]) -> ScriptItem:
    """A child that calls the gated tool, then sums up."""
    if len(body["messages"]) == 1:
        return Reply(
            content=[text("Checking."), tool_use("toolu_C1", "gated", {"city": "Paris"})], stop_reason="tool_use"
        )
    return end_turn("Paris is fine.")


async def start_with_child_in_gated_tool(runner: AgentRunner, fake_api: FakeMessagesAPI) -> Run:
    """A parent whose researcher's ``waiting_child`` is in the ``gated`` tool, which waits for the test's ``GATE``."""
    fake_api.responder = by_system([research("toolu_P1", "Check Paris.")], waiting_child)
    run = await runner.start(**BASE, messages=[USER], thread=False, agents=[{**RESEARCHER, "tools": ["gated"]}])

    async def tool_running() -> bool:
        return CALLS == ["Paris"]

    await wait_for(tool_running)
    return run


@pytest.mark.usefixtures("fresh_tools")
async def test_cancelling_the_parent_cancels_its_child(
    runner: AgentRunner, client: Client, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    async with worker(gated):
        run = await start_with_child_in_gated_tool(runner, fake_api)
        child = client.get_workflow_handle(f"{run.id}/toolu_P1")
        assert (await child.describe()).status == WorkflowExecutionStatus.RUNNING
        await run.cancel()

        async def cancelled() -> bool:
            return (await child.describe()).status == WorkflowExecutionStatus.CANCELED

        await wait_for(cancelled)
        assert (await client.get_workflow_handle(run.id).describe()).status == WorkflowExecutionStatus.CANCELED
        assert [a["status"] for a in (await run.status()).agents] == ["cancelled"]
        GATE.set()
    # Neither asked Claude anything after the cancel.
    assert len(fake_api.bodies()) == 2


@pytest.mark.usefixtures("fresh_tools")
async def test_stopping_the_parent_stops_its_child_and_the_tool_result_says_so(
    runner: AgentRunner, client: Client, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    async with worker(gated):
        run = await start_with_child_in_gated_tool(runner, fake_api)
        assert [a["status"] for a in (await run.status()).agents] == ["running"]
        await run.stop("enough")
        child_handle = client.get_workflow_handle(f"{run.id}/toolu_P1")

        async def child_told() -> bool:
            return any(
                e.HasField("workflow_execution_signaled_event_attributes")
                for e in (await child_handle.fetch_history()).events
            )

        await wait_for(child_told)  # the parent's stop reached the child (a stop is a signal, not an interrupt)
        GATE.set()  # the child's tool finishes; the child then stops instead of asking Claude again
        result = await run.result()
        child = await child_handle.result()
        transcript = await run.transcript()
        assert [a["status"] for a in (await run.status()).agents] == ["stopped"]
    assert result.status == "stopped"
    assert (child["status"], child["detail"]) == ("stopped", "The parent run was stopped: enough")
    assert len(fake_api.bodies()) == 2  # the parent's first request and the child's: no more
    assert transcript[-1] == {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "toolu_P1",
                "content": "Error: Agent 'researcher' was stopped before it finished (The parent run was stopped: "
                "enough). Its last reply said: Checking.",
                "is_error": True,
            }
        ],
    }


async def test_a_reply_starts_at_most_max_fan_out_agents(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    fake_api.responder = by_system(
        [research("toolu_P", "a", "b"), end_turn("One done.")],
        lambda body: end_turn(f"{body['messages'][0]['content']} done"),
    )
    async with worker():
        run = await runner.start(
            **BASE, messages=[USER], thread=False, agents=[{**RESEARCHER, "tools": []}], agent_limits={"max_fan_out": 1}
        )
        await run.until_done()
    assert [b["messages"] for b in child_bodies(fake_api)] == [[{"role": "user", "content": "a"}]]
    assert parent_bodies(fake_api)[1]["messages"][-1] == {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "toolu_P0", "content": "a done"},
            {
                "type": "tool_result",
                "tool_use_id": "toolu_P1",
                "content": "Error: Agent 'researcher' was not started: one reply may start at most 1 agents "
                "(`agent_limits.max_fan_out`). Call it again in a later turn.",
                "is_error": True,
            },
        ],
    }


async def test_a_child_is_bounded_by_what_its_parent_has_left_and_can_have_agents_of_its_own(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """A grandchild runs too; the child's ``max_iterations`` and budget are what the parent had left."""
    scout = {**SCOUT, "model": "claude-fake-2"}
    researcher = {"tools": [], "agents": [scout], "max_iterations": 20}
    async with worker() as w:
        run = await start_research(
            runner,
            fake_api,
            scouting_child,
            researcher,
            max_iterations=10,
            budget={"max_input_tokens": 1000, "max_output_tokens": 100},
        )
        await run.until_done()
        child_id, grandchild_id = f"{run.id}/toolu_P1", f"{run.id}/toolu_P1/toolu_S1"
        child_input = (await w.client.get_workflow_handle(child_id).fetch_history()).events[0]
        grandchild = await w.client.get_workflow_handle(grandchild_id).result()
    assert grandchild["final_message"]["content"] == [{"type": "text", "text": "Seen."}]
    start = child_input.workflow_execution_started_event_attributes
    assert json.loads(start.input.payloads[0].data) == {
        "model": "claude-fake-1",
        "max_tokens": 1024,
        "messages": [{"role": "user", "content": "Go."}],
        "thread": False,
        "model_activity": {},
        "agent_limits": {"max_depth": 3, "max_fan_out": 8, "depth": 1},
        "system": RESEARCH,
        "agents": [scout],
        "max_iterations": 9,
        # The parent's first reply used 10 input and 5 output tokens (the fake's default usage).
        "budget": {"max_input_tokens": 990, "max_output_tokens": 95},
    }
    assert [b["model"] for b in fake_api.bodies() if b.get("system") == "You scout."] == ["claude-fake-2"]
    assert parent_bodies(fake_api)[1]["messages"][-1]["content"][0]["content"] == "Scout saw it."


def test_agents_are_checked_when_the_run_starts() -> None:
    with pytest.raises(InvalidRunInput) as e:
        parse_run_input(
            {
                **BASE,
                "messages": [USER],
                "tools": ["get_weather"],
                "agents": [
                    {"name": "get_weather", "description": "Clashes."},
                    {"name": "deep", "description": "Nests.", "agents": [{"name": "deeper", "description": "x"}]},
                    {"name": "bad name", "description": ""},
                ],
                "agent_limits": {"max_depth": 1},
            }
        )
    assert str(e.value) == (
        "The run's input was rejected:\n"
        "- `agents[2]` is invalid: name: String should match pattern '^[a-zA-Z0-9_-]{1,128}$'; description: String "
        "should have at least 1 character\n"
        "- Agent `get_weather` has the name of a tool of the run; give one of them another name.\n"
        "- Agent `deep` nests 2 levels of runs below this one, and `agent_limits.max_depth` (1) leaves 1 below this "
        "run (at depth 0); declare fewer levels of agents or raise `max_depth`."
    )


async def test_a_person_approves_a_call_inside_a_child_by_the_id_the_parents_status_gives(
    runner: AgentRunner, fake_api: FakeMessagesAPI, child_asking_approval: ChildAskingApproval
) -> None:
    async with child_asking_approval() as (run, _):
        child = runner.attach((await run.status()).agents[0]["id"])
        assert [(p.tool_use_id, p.input) for p in await child.pending_approvals()] == [("toolu_C1", {"target": "moon"})]
        await child.approve("toolu_C1")
        final = await run.until_done()
        child_transcript = await child.transcript()
    assert final.content[0].type == "text" and final.content[0].text == "Done."
    assert child_transcript[2] == {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "toolu_C1", "content": "launched at moon"}],
    }
    assert parent_bodies(fake_api)[1]["messages"][-1]["content"][0]["content"] == "Launched."


@pytest.mark.slow
async def test_a_worker_killed_while_a_child_waits_for_claude_leaves_the_tree_as_an_uninterrupted_run(
    tmp_path: Path, fake_api: FakeMessagesAPI
) -> None:
    from tests.test_durability import FAST, connect, server, worker_process
    from tests.test_durability import wait_for as wait_until

    tree = {
        **BASE,
        "messages": [USER],
        "thread": False,
        "model_activity": FAST,
        "agents": [{**RESEARCHER, "tools": ["slow_step"]}],
    }

    async def run_tree(where: Path, kill: bool) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        fake_api.reset()
        fake_api.responder = two_step_tree(
            [tool_use("toolu_P1", "researcher", {"task": "Run the two steps."})],
            "The researcher ran both steps.",
            {2} if kill else set(),
        )
        where.mkdir()
        marks, log = where / "marks.txt", where / "worker.log"
        async with server(where) as temporal:
            runner = AgentRunner(await connect(temporal.address), task_queue=f"tree-{uuid.uuid4()}")
            with worker_process(temporal.address, runner.task_queue, fake_api, marks, log) as first:
                run = await runner.start(**tree)
                if kill:
                    # The child's second request is answered slowly: kill the worker while the child waits for it.
                    await wait_until(lambda: len(child_bodies(fake_api)) >= 2, "the child's second request")
                    first.send_signal(signal.SIGKILL)
                    first.wait()
                    started = worker_process(temporal.address, runner.task_queue, fake_api, marks, log)
                else:
                    started = contextlib.nullcontext(first)
                with started:
                    result = await run.result()
                    assert result.status == "completed", result
                    child = runner.attach(f"{run.id}/toolu_P1")
                    transcripts = await run.transcript(), await child.transcript()
            assert marks.read_text().splitlines() == ["start step1", "start step2"]
        return transcripts

    expected = await run_tree(tmp_path / "reference", kill=False)
    assert await run_tree(tmp_path / "killed", kill=True) == expected
    assert expected[0][-1] == {
        "role": "assistant",
        "content": [{"type": "text", "text": "The researcher ran both steps."}],
    }
    assert expected[0][-2]["content"][0]["content"] == "Both steps are done."


async def test_a_call_whose_child_id_is_taken_does_not_run_a_second_child(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """The child's id is the parent's and the call's: a run with that id already answered it, and is not redone."""
    parent_id = f"agent-{uuid.uuid4()}"
    fake_api.responder = by_system(
        [research("toolu_P1", "Again."), end_turn("Fine.")], lambda _: end_turn("First answer.")
    )
    async with worker():
        earlier = await runner.start(
            model="claude-fake-1", max_tokens=1024, messages=[USER], thread=False, id=f"{parent_id}/toolu_P1"
        )
        await earlier.until_done()
        run = await runner.start(
            **BASE, messages=[USER], thread=False, id=parent_id, agents=[{**RESEARCHER, "tools": []}]
        )
        await run.until_done()
        assert (await run.status()).agents == []
    assert len(fake_api.bodies()) == 3  # the earlier run's and the parent's two: no child asked Claude
    assert parent_bodies(fake_api)[1]["messages"][-1]["content"] == [
        {
            "type": "tool_result",
            "tool_use_id": "toolu_P1",
            "content": f"Error: Agent 'researcher' was not started: a run with id '{parent_id}/toolu_P1' already "
            "exists (this call was answered before). Read that run's result, or call the agent again.",
            "is_error": True,
        }
    ]
