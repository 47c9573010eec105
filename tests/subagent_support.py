"""What the sub-agent tests share (``test_subagents.py``, ``test_registered_agents.py``, ``test_agent_tree.py``,
``test_tree_kill.py``): the parent's and its researcher's settings, responders that tell their requests apart, and
the set-up of a child run that waits for a person to approve its ``launch`` call (the ``child_asking_approval``
fixture in ``conftest.py``).

The fake Messages API answers the parent and its children from one responder that tells their requests apart by
their system prompt (and a child's by its task), so each test pins the exact bodies every run sent.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

from anthropic import beta_async_tool

from agent_runner.activities.tools import tool_options
from agent_runner.client import AgentRunner, Run
from agent_runner.testing import FakeMessagesAPI, Reply, ScriptItem, end_turn, tool_use

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
SCOUT = {"name": "scout", "description": "Looks once.", "system": "You scout."}
"""The researcher's own agent, in the tests of a tree three runs deep."""


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


def scouting_child(body: dict[str, Any]) -> ScriptItem:
    """Claude for a researcher that asks its scout once, and for the scout."""
    if body.get("system") == "You scout.":
        return end_turn("Seen.")
    if len(body["messages"]) == 1:
        return Reply(content=[tool_use("toolu_S1", "scout", {"task": "Look."})], stop_reason="tool_use")
    return end_turn("Scout saw it.")


async def start_research(
    runner: AgentRunner,
    fake: FakeMessagesAPI,
    child: Callable[[dict[str, Any]], ScriptItem],
    researcher: dict[str, Any],
    parent: list[ScriptItem] | None = None,
    **start: Any,
) -> Run:
    """Start a parent (with ``start``) whose one agent is ``RESEARCHER`` updated with ``researcher``.

    Claude answers the parent with ``parent`` (by default: the researcher's call ``toolu_P1`` to "Go.", then "Done."),
    and the researcher's requests (and its own children's) with ``child(body)``.
    """
    fake.responder = by_system(parent or [research("toolu_P1", "Go."), end_turn("Done.")], child)
    return await runner.start(**BASE, messages=[USER], thread=False, agents=[{**RESEARCHER, **researcher}], **start)


WEATHER_TASK = "Find the weather in Paris."


def weather_research() -> Callable[..., ScriptItem]:
    """A responder: the parent asks the researcher for ``WEATHER_TASK`` (``toolu_P1``), then says "It is sunny."; the
    child calls ``get_weather`` for Paris (``toolu_C1``), then says "Sunny, 21C."; the bodies are below."""
    child_script = [
        Reply(content=[tool_use("toolu_C1", "get_weather", {"city": "Paris"})], stop_reason="tool_use"),
        end_turn("Sunny, 21C."),
    ]
    return by_system([research("toolu_P1", WEATHER_TASK), end_turn("It is sunny.")], lambda _: child_script.pop(0))


_WEATHER_CHILD = {"model": "claude-fake-1", "max_tokens": 1024, "system": RESEARCH, "stream": True}
_WEATHER_CHILD_USER = {"role": "user", "content": WEATHER_TASK}


def weather_child_bodies(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The bodies the child of ``weather_research`` sends, with the tool definitions ``tools``."""
    return [
        {**_WEATHER_CHILD, "tools": tools, "messages": [_WEATHER_CHILD_USER]},
        {
            **_WEATHER_CHILD,
            "tools": tools,
            "messages": [
                _WEATHER_CHILD_USER,
                {
                    "role": "assistant",
                    "content": [
                        {"type": "tool_use", "id": "toolu_C1", "name": "get_weather", "input": {"city": "Paris"}}
                    ],
                },
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": "toolu_C1", "content": "sunny, 21C in Paris"}],
                },
            ],
        },
    ]


def weather_parent_bodies(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The bodies the parent of ``weather_research`` sends, with the tool definitions ``tools``."""
    call = {
        "role": "assistant",
        "content": [{"type": "tool_use", "id": "toolu_P1", "name": "researcher", "input": {"task": WEATHER_TASK}}],
    }
    result = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_P1", "content": "Sunny, 21C."}]}
    return [
        {**BASE, "messages": [USER], "tools": tools, "stream": True},
        {**BASE, "messages": [USER, call, result], "tools": tools, "stream": True},
    ]


def two_step_tree(first: list[Any], summary: str, slow_child_turns: set[int]) -> Callable[..., ScriptItem]:
    """A responder: the parent's first reply is ``first`` (its calls, ``msg_parent_1``), its second ``summary``
    (``msg_parent_2``); a child is the durability tests' two ``slow_step`` steps and summary, its turns in
    ``slow_child_turns`` answered slowly the first time (time to kill the worker)."""
    from tests.test_durability import conversation_responder  # only the tests that kill workers need it

    child = conversation_responder(slow_child_turns, slow_seconds=6.0)

    def respond(body: dict[str, Any]) -> ScriptItem:
        if body.get("system") != LEAD:
            return child(body)
        if len(body["messages"]) == 1:
            return Reply(id="msg_parent_1", content=first, stop_reason="tool_use")
        return end_turn(summary, id="msg_parent_2")

    return respond


def child_bodies(fake: FakeMessagesAPI) -> list[dict[str, Any]]:
    return [b for b in fake.bodies() if b.get("system") == RESEARCH]


def parent_bodies(fake: FakeMessagesAPI) -> list[dict[str, Any]]:
    return [b for b in fake.bodies() if b.get("system") == LEAD]


async def wait_for(condition: Callable[[], Any]) -> None:
    async with asyncio.timeout(20):
        while not await condition():
            await asyncio.sleep(0.05)


@tool_options(requires_approval=True)
@beta_async_tool
async def launch(target: str) -> str:
    """Launch at a target.

    Args:
        target: The target.
    """
    return f"launched at {target}"


ChildAskingApproval = Callable[..., AbstractAsyncContextManager[tuple[Run, Run]]]


@asynccontextmanager
async def child_asking_approval(
    runner: AgentRunner,
    worker: Callable[..., AbstractAsyncContextManager[Any]],
    fake: FakeMessagesAPI,
    parent: list[ScriptItem] | None = None,
    then: ScriptItem | None = None,
    **options: Any,
) -> AsyncIterator[tuple[Run, Run]]:
    """A parent (started with ``options``) whose researcher calls ``launch``, which waits for a person's approval.

    Yields the parent and its child run once the child waits, the worker still running. Claude answers the parent
    with ``parent`` (by default: the researcher's call ``toolu_P1``, then "Done."), the child's first request with
    the ``launch`` call ``toolu_C1``, and its second with ``then`` (by default "Launched.").
    """

    def child(body: dict[str, Any]) -> ScriptItem:
        if len(body["messages"]) == 1:
            return Reply(content=[tool_use("toolu_C1", "launch", {"target": "moon"})], stop_reason="tool_use")
        return then if then is not None else end_turn("Launched.")

    parent = parent or [research("toolu_P1", "Launch."), end_turn("Done.")]
    async with worker(launch):
        run = await start_research(runner, fake, child, {"tools": ["launch"]}, parent, **options)
        child_run = run.child("toolu_P1")

        async def child_waits() -> bool:
            return bool((await run.status()).agents) and bool(await child_run.pending_approvals())

        await wait_for(child_waits)
        yield run, child_run
