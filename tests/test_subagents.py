"""Sub-agents: an agent is a tool whose call starts a child ``AgentRun``.

The fake Messages API answers the parent and its children from one responder that tells their requests apart by
their system prompt (and a child's by its task), so each test pins the exact bodies every run sent.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from anthropic import beta_async_tool
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from agent_runner.client import AgentRunner
from agent_runner.fake_api import FakeMessagesAPI, Reply, ScriptItem, bad_request, end_turn, text, tool_use
from agent_runner.workflows.agent_run import AgentRun
from tests.conftest import WorkerFactory
from tests.tools_for_tests import get_weather

LEAD = "You lead."
RESEARCH = "You research."
BASE = {"model": "claude-fake-1", "max_tokens": 1024, "system": LEAD}
USER = {"role": "user", "content": "What's the weather in Paris?"}
TASK_SCHEMA = {
    "type": "object",
    "properties": {
        "task": {"type": "string", "description": "What the agent should do, with everything it needs to know."}
    },
    "required": ["task"],
}
RESEARCHER = {
    "name": "researcher",
    "description": "Researches one question.",
    "system": RESEARCH,
    "tools": ["get_weather"],
}
RESEARCHER_DEF = {"name": "researcher", "description": "Researches one question.", "input_schema": TASK_SCHEMA}
GET_WEATHER_DEF = {
    "name": "get_weather",
    "description": "Get the current weather for a city.",
    "input_schema": {
        "additionalProperties": False,
        "properties": {
            "city": {"description": "The city name, e.g. Paris.", "title": "City", "type": "string"},
            "unit": {
                "default": "c",
                "description": 'Temperature unit, "c" or "f".',
                "title": "Unit",
                "type": "string",
            },
        },
        "required": ["city"],
        "type": "object",
    },
}


def research(tool_id: str, *tasks: str) -> Reply:
    """The parent's reply asking the researcher for each task, in order."""
    return Reply(
        content=[
            tool_use(f"{tool_id}{i}" if len(tasks) > 1 else tool_id, "researcher", {"task": t})
            for i, t in enumerate(tasks)
        ],
        stop_reason="tool_use",
    )


def by_system(parent: list[ScriptItem], child: Callable[[dict[str, Any]], ScriptItem]) -> Callable[..., ScriptItem]:
    """A responder: the parent's requests get ``parent`` in order, the children's ``child(body)``."""
    queue = list(parent)

    def respond(body: dict[str, Any]) -> ScriptItem:
        if body.get("system") == LEAD:
            return queue.pop(0)
        return child(body)

    return respond


def child_bodies(fake: FakeMessagesAPI) -> list[dict[str, Any]]:
    return [b for b in fake.bodies() if b.get("system") == RESEARCH]


def parent_bodies(fake: FakeMessagesAPI) -> list[dict[str, Any]]:
    return [b for b in fake.bodies() if b.get("system") == LEAD]


async def test_an_agent_call_runs_a_child_whose_final_text_is_the_tool_result(
    runner: AgentRunner, client: Client, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    child_script = [
        Reply(content=[tool_use("toolu_C1", "get_weather", {"city": "Paris"})], stop_reason="tool_use"),
        end_turn("Sunny, 21C."),
    ]
    fake_api.responder = by_system(
        [research("toolu_P1", "Find the weather in Paris."), end_turn("It is sunny.")],
        lambda _: child_script.pop(0),
    )
    async with worker(get_weather):
        run = await runner.start(
            **BASE, messages=[USER], thread=False, agents=[{**RESEARCHER, "max_iterations": 5}], max_iterations=10
        )
        final = await run.until_done()
    assert final.content[0].type == "text" and final.content[0].text == "It is sunny."
    child_user = {"role": "user", "content": "Find the weather in Paris."}
    child_call = {
        "role": "assistant",
        "content": [{"type": "tool_use", "id": "toolu_C1", "name": "get_weather", "input": {"city": "Paris"}}],
    }
    child = {
        "model": "claude-fake-1",
        "max_tokens": 1024,
        "system": RESEARCH,
        "tools": [GET_WEATHER_DEF],
        "stream": True,
    }
    assert child_bodies(fake_api) == [
        {**child, "messages": [child_user]},
        {
            **child,
            "messages": [
                child_user,
                child_call,
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": "toolu_C1", "content": "sunny, 21C in Paris"}],
                },
            ],
        },
    ]
    parent_call = {
        "role": "assistant",
        "content": [
            {
                "type": "tool_use",
                "id": "toolu_P1",
                "name": "researcher",
                "input": {"task": "Find the weather in Paris."},
            }
        ],
    }
    assert parent_bodies(fake_api) == [
        {**BASE, "messages": [USER], "tools": [RESEARCHER_DEF], "stream": True},
        {
            **BASE,
            "messages": [
                USER,
                parent_call,
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": "toolu_P1", "content": "Sunny, 21C."}],
                },
            ],
            "tools": [RESEARCHER_DEF],
            "stream": True,
        },
    ]
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

    def child(body: dict[str, Any]) -> ScriptItem:
        task = body["messages"][0]["content"]
        if len(body["messages"]) == 1:
            return Reply(content=[tool_use(f"toolu_{task}", "rendezvous", {"who": task})], stop_reason="tool_use")
        # The first agent's child finishes last: its result still comes first.
        return Reply(content=[text(f"{task} done")], delay=0.5 if task == "a" else 0.0)

    fake_api.responder = by_system([research("toolu_P", "a", "b"), end_turn("Both done.")], child)
    async with worker(rendezvous):
        run = await runner.start(
            **BASE, messages=[USER], thread=False, agents=[{**RESEARCHER, "tools": ["rendezvous"]}]
        )
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
