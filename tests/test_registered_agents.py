"""Agents registered on a worker: a run names one in its ``tools``, and a call of it starts a child run.

The worker describes a registered agent like a tool (``describe_tools``), so its definition is in the run's history
and the run replays without the worker. The fake Messages API tells the parent's requests from the children's by
their system prompt (``tests/subagent_support.py``), so each test pins the exact bodies every run sent.
"""

from __future__ import annotations

import signal
import uuid
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from agent_runner import AgentSpec
from agent_runner.activities.tools import ToolRegistry
from agent_runner.client import AgentRunner
from agent_runner.contract.errors import ToolNotRegistered, ToolRegistrationError
from agent_runner.contract.types import ToolSpec
from agent_runner.plugin import build_registry
from agent_runner.testing import FakeMessagesAPI, Reply, end_turn, tool_use
from agent_runner.workflows.agent_run import AgentRun
from tests.agents_for_tests import researcher, scout
from tests.conftest import WorkerFactory
from tests.steering_support import wait_status
from tests.subagent_support import (
    BASE,
    RESEARCH,
    RESEARCHER_DEF,
    TASK_SCHEMA,
    USER,
    by_system,
    child_bodies,
    parent_bodies,
    research,
    scouting_child,
    two_step_tree,
    weather_child_bodies,
    weather_parent_bodies,
    weather_research,
)
from tests.test_durability import FAST, connect, server, wait_for, worker_process
from tests.test_loop import GET_WEATHER_DEF
from tests.tools_for_tests import get_time, get_weather

SCOUT_DEF = {"name": "scout", "description": "Looks once.", "input_schema": TASK_SCHEMA}


async def test_a_run_naming_a_registered_agent_runs_a_child_whose_final_text_is_the_tool_result(
    runner: AgentRunner, client: Client, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    fake_api.responder = weather_research()
    async with worker(get_weather, get_time, researcher):
        run = await runner.start(
            **BASE, messages=[USER], thread=False, tools=["get_time", "researcher"], max_iterations=10
        )
        final = await run.until_done()
        status = await run.status()
    assert final.content[0].type == "text" and final.content[0].text == "It is sunny."
    assert status.agents == [
        {"id": f"{run.id}/toolu_P1", "name": "researcher", "tool_use_id": "toolu_P1", "status": "completed"}
    ]
    assert child_bodies(fake_api) == weather_child_bodies([GET_WEATHER_DEF])
    # The registered agent is a tool where the run names it, after get_time.
    assert parent_bodies(fake_api) == weather_parent_bodies([get_time.to_dict(), RESEARCHER_DEF])
    # The child is bounded by the agent's own max_iterations (5, below the parent's 10 - 1 left).
    child_input = (await client.get_workflow_handle(f"{run.id}/toolu_P1").fetch_history()).events[0]
    started = pydantic_data_converter.payload_converter.from_payload(
        child_input.workflow_execution_started_event_attributes.input.payloads[0], dict
    )
    assert started["max_iterations"] == 5 and started["tools"] == ["get_weather"]
    # The agent's definition came from describe_tools, in the history: the run replays with no worker at all.
    history = await client.get_workflow_handle(run.id).fetch_history()
    replayer = Replayer(workflows=[AgentRun], data_converter=pydantic_data_converter)
    assert (await replayer.replay_workflow(history, raise_on_replay_failure=False)).replay_failure is None


async def test_a_registered_agent_may_name_another_registered_agent_in_its_tools(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    fake_api.responder = by_system([research("toolu_P1", "Look around."), end_turn("Done.")], scouting_child)
    async with worker(researcher.model_copy(update={"tools": ["scout"]}), scout):
        run = await runner.start(**BASE, messages=[USER], thread=False, tools=["researcher"])
        await run.until_done()
        tree = await run.status(tree=True)
    child = tree.agents[0]
    assert child["status"] == "completed"
    assert [{k: v for k, v in c.items() if k != "run"} for c in child["run"]["agents"]] == [
        {"id": f"{run.id}/toolu_P1/toolu_S1", "name": "scout", "tool_use_id": "toolu_S1", "status": "completed"}
    ]
    researcher_bodies = child_bodies(fake_api)
    assert [body["tools"] for body in researcher_bodies] == [[SCOUT_DEF], [SCOUT_DEF]]
    assert researcher_bodies[1]["messages"][-1] == {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "toolu_S1", "content": "Seen."}],
    }


async def test_a_registered_agent_below_max_depth_is_an_error_result(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    fake_api.responder = by_system([research("toolu_P1", "Look around."), end_turn("Done.")], scouting_child)
    async with worker(researcher.model_copy(update={"tools": ["scout"]}), scout):
        run = await runner.start(
            **BASE, messages=[USER], thread=False, tools=["researcher"], agent_limits={"max_depth": 1}
        )
        await run.until_done()
    assert child_bodies(fake_api)[1]["messages"][-1] == {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "toolu_S1",
                "content": "Error: Agent 'scout' was not started: this run is at depth 1, and "
                "`agent_limits.max_depth` is 1.",
                "is_error": True,
            }
        ],
    }


async def test_add_tools_gives_a_run_a_registered_agent_from_the_next_turn_on(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    fake_api.responder = by_system(
        [
            Reply([tool_use("toolu_S1", "get_weather", {"city": "Paris"})], "tool_use"),
            research("toolu_P1", "Find the weather in Rome."),
            end_turn("Both sunny."),
        ],
        lambda _: end_turn("Rome: sunny."),
    )
    async with worker(get_weather, researcher):
        run = await runner.start(
            **BASE, messages=[USER], tools=[get_weather], thread=False, step=True, betas=["inline-tools-2026-09-15"]
        )
        await wait_status(run, "waiting_for_step", 1)
        await run.add_tools(researcher)  # the worker's agent, by its name
        for iteration in (1, 2, 3):
            await wait_status(run, "waiting_for_step", iteration)
            await run.advance()
        await run.until_done()
    added = {
        "role": "system",
        "content": [{"type": "tool_addition", "tool": {"type": "tool_definition", "definition": RESEARCHER_DEF}}],
    }
    weather = [
        {"role": "assistant", "content": [tool_use("toolu_S1", "get_weather", {"city": "Paris"})]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_S1", "content": "sunny, 21C in Paris"}],
        },
    ]
    agent_call = {
        "role": "assistant",
        "content": [tool_use("toolu_P1", "researcher", {"task": "Find the weather in Rome."})],
    }
    agent_result = {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "toolu_P1", "content": "Rome: sunny."}],
    }
    assert [body["messages"] for body in parent_bodies(fake_api)] == [
        [USER],
        [USER, *weather, added],
        [USER, *weather, added, agent_call, agent_result],
    ]
    assert [body["messages"] for body in child_bodies(fake_api)] == [
        [{"role": "user", "content": "Find the weather in Rome."}]
    ]


async def test_a_run_naming_an_agent_no_worker_registered_fails_at_start(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    async with worker(get_weather, researcher):
        run = await runner.start(**BASE, messages=[USER], tools=["researcher", "writer"])
        with pytest.raises(ToolNotRegistered, match="registered 'writer'. Start a worker with"):
            await run.until_done()
    assert fake_api.requests == []


def test_a_tool_module_registers_the_agents_it_defines() -> None:
    registry = build_registry(["tests.agents_for_tests"])
    assert registry.names == ["researcher", "scout", "stepper"]
    assert registry.spec("researcher") == ToolSpec(name="researcher", definition=RESEARCHER_DEF, agent=researcher)
    assert registry.get("researcher") is None  # not a tool the run_tool activity runs


def test_a_registered_agent_spec_is_json_that_only_an_agent_carries() -> None:
    registry = ToolRegistry([get_weather, researcher])
    plain = registry.spec("get_weather")
    agent = registry.spec("researcher")
    assert plain is not None and "agent" not in plain.model_dump(mode="json")  # what tools described before
    assert agent is not None
    assert agent.model_dump(mode="json")["agent"] == {
        "name": "researcher",
        "description": "Researches one question.",
        "input_schema": None,
        "model": None,
        "max_tokens": None,
        "system": RESEARCH,
        "tools": ["get_weather"],
        "mcp": [],
        "agents": [],
        "max_iterations": 5,
    }
    assert ToolSpec.model_validate_json(agent.model_dump_json()) == agent


@pytest.mark.parametrize(
    ("first", "second"),
    [
        (get_weather, AgentSpec(name="get_weather", description="x")),
        (AgentSpec(name="get_weather", description="x"), get_weather),
        (researcher, researcher.model_copy(update={"description": "Another."})),
    ],
)
def test_two_registrations_under_one_name_are_refused(first: Any, second: Any) -> None:
    with pytest.raises(ToolRegistrationError, match="named like a registered agent|has the name of another"):
        ToolRegistry([first, second])


def test_the_same_agent_registered_twice_is_one_agent() -> None:
    assert ToolRegistry([researcher, researcher.model_copy()]).names == ["researcher"]


async def run_stepper(where: Path, fake: FakeMessagesAPI, kill: bool) -> dict[str, Any]:
    """A run naming the ``stepper`` agent that worker processes register with ``--tools tests.agents_for_tests``; with
    ``kill``, the first worker is killed while the child waits for Claude's answer to its second request."""
    fake.reset()
    fake.responder = two_step_tree([tool_use("toolu_A", "stepper", {"task": "Go."})], "Done.", {2} if kill else set())
    where.mkdir()
    marks, log = where / "marks.txt", where / "worker.log"
    args = ("--tools", "tests.agents_for_tests")
    env = {"AGENT_RUNNER_TEST_SLOW_SECONDS": "1"}
    async with server(where) as temporal:
        runner = AgentRunner(await connect(temporal.address), task_queue=f"registered-kill-{uuid.uuid4()}")
        with worker_process(temporal.address, runner.task_queue, fake, marks, log, *args, env=env) as first:
            run = await runner.start(**BASE, messages=[USER], thread=False, model_activity=FAST, tools=["stepper"])
            if kill:
                await wait_for(lambda: len(child_bodies(fake)) >= 2, "the child's second request")
                first.send_signal(signal.SIGKILL)
                first.wait()
        with worker_process(temporal.address, runner.task_queue, fake, marks, log, *args, env=env):
            result = await run.result()
            stepper_run = run.child("toolu_A")
            return {
                "status": (result.status, (await stepper_run.result()).status),
                "transcripts": (await run.transcript(), await stepper_run.transcript()),
                "parent_bodies": parent_bodies(fake),
                "child_bodies": child_bodies(fake),
                "steps": marks.read_text().splitlines(),
            }


@pytest.mark.slow  # real worker processes, one killed
async def test_a_worker_killed_while_a_registered_agents_child_runs_leaves_an_uninterrupted_tree(
    tmp_path: Path, fake_api: FakeMessagesAPI
) -> None:
    expected = await run_stepper(tmp_path / "reference", fake_api, kill=False)
    killed = await run_stepper(tmp_path / "killed", fake_api, kill=True)
    assert killed["status"] == expected["status"] == ("completed", "completed")
    assert killed["transcripts"] == expected["transcripts"]
    assert killed["parent_bodies"] == expected["parent_bodies"]
    # The child's killed request was asked again on the new worker; each step ran once.
    assert killed["child_bodies"] == [*expected["child_bodies"][:2], *expected["child_bodies"][1:]]
    assert killed["steps"] == expected["steps"] == ["start step1", "start step2"]
    stepper_def = {"name": "stepper", "description": "Runs the two steps.", "input_schema": TASK_SCHEMA}
    assert [body["tools"] for body in expected["parent_bodies"]] == [[stepper_def], [stepper_def]]
    assert expected["transcripts"][0][2] == {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "toolu_A", "content": "Both steps are done."}],
    }
