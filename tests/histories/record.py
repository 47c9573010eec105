"""Record the workflow histories that tests/test_replay.py replays against the current code.

Run it only when a deliberate, versioned change to `AgentRun` makes new histories necessary, or before a refactor
that must keep determinism; keep the old files, since runs started on the old code must still replay:

    python tests/histories/record.py NAME              # writes tests/histories/NAME.json (the steered run)
    python tests/histories/record.py NAME everything   # writes NAME.json, NAME_continued.json and NAME_step.json
    python tests/histories/record.py NAME subagents    # writes NAME.json (a parent) and NAME_child.json
    python tests/histories/record.py NAME registered_agents  # writes NAME.json and NAME_child.json (an agent the
                                                             # worker registered, named in the run's tools)
    python tests/histories/record.py NAME charge       # writes NAME.json (a parent charged for a failed child)
    python tests/histories/record.py NAME parity       # writes NAME.json (the SDK's runner methods, issue 13)
    python tests/histories/record.py NAME compaction_end  # writes NAME.json and NAME_held.json
    python tests/histories/record.py NAME lookalikes   # writes NAME.json (content the client holds, escaped)
    python tests/histories/record.py NAME sleep        # writes NAME.json (a sleep runs out, another is woken)
    python tests/histories/record.py NAME approval_sleep  # writes NAME.json (a reply's approval-gated call, then
                                                          # its sleep; search attributes on)
    python tests/histories/record.py NAME plain        # writes NAME.json (plain JSON's lookalikes escaped)
    python tests/histories/record.py NAME big_params   # writes NAME.json and NAME_continued.json (a big system
                                                       # prompt by value, carried by reference)
    python tests/histories/record.py NAME big_values   # writes NAME.json and NAME_continued.json (a big tool schema
                                                       # and output_config by value, carried by reference; a plain
                                                       # add_tools definition's lookalike escaped)
    python tests/histories/record.py NAME toolset_effects  # writes NAME.json (an at-most-once toolset action lost
                                                           # past its timeout, reconciled)
    python tests/histories/record.py NAME features     # writes NAME.json and NAME_send.json
    python tests/histories/record.py NAME toolsets     # writes NAME.json (runnable toolsets: approval, halt rule)
    python tests/histories/record.py NAME mcp          # writes NAME.json (tools of an MCP server, tests/mcp_server.py)
    python tests/histories/record.py NAME splice       # writes NAME.json (refusal fallbacks spliced, as the middleware)
    python tests/histories/record.py NAME result_transcript  # writes NAME.json (a max_iterations cut-off whose result
                                                             # carries the tool result no model call saw)
    python tests/histories/record.py NAME fork         # writes NAME.json and NAME_fork.json (a fork runs a tool the
                                                       # run was given before the fork point)
    python tests/histories/record.py NAME gave_up      # writes NAME.json (a model call out of attempts fails the run)
    python tests/histories/record.py NAME last_status  # writes NAME.json (a result carrying the run's last status)
    python tests/histories/record.py NAME request_shape  # writes NAME.json (a run without tools, the fallback-credit
                                                         # beta its own: decided before its tool lookup) and
                                                         # NAME_late.json (a run given that beta mid-way)
    python tests/histories/record.py NAME compact_results  # writes NAME.json and NAME_continued.json (tool results
                                                           # sent compact, issue 14)
    python tests/histories/record.py NAME budget_request  # writes NAME.json and NAME_continued.json (a spent budget
                                                          # asks; the limits approved hold after continue-as-new)
    python tests/histories/record.py NAME budget_policy   # writes NAME.json (a budget policy raises a spent budget
                                                          # once, then leaves the next request to a person)
    python tests/histories/record.py NAME what_if      # writes NAME.json (a fork answering a call from the run's
                                                       # record, running a new one)
    python tests/histories/record.py NAME local_tool   # writes NAME.json (a local tool's call beside a regular one,
                                                       # then one whose tool raises)

``umbrella_2026_12*.json`` are ``everything`` under the one patch marker of ``workflows/patches.py``;
``before_umbrella_2026_12.json`` is ``last_status`` recorded just before it (``since`` asking the old id alone, as the
code before did): a run with all four of the patches the umbrella implies.

The ``everything`` scenario exercises as much of the workflow as two runs can (eager tools and step mode exclude each
other): eager tools, an approval with edited input, an injected message, auto-compaction, continue-as-new (both
executions are kept: the second starts from the state the first carried), an at-most-once tool whose outcome is
unknown and reconciled; then step mode with an advance, an approval and a review that changes the tool results.

The ``features`` scenario: on a thread, a refusal retried on a fallback model, a tool call, a compaction in the
background beside a turn refused again with the chain exhausted (so left out of the history); then ``Run.send``
going on with the ended run in a new run.

The ``splice`` scenario: a refusal after output spliced onto its fallback's reply (the output resent as a prefill),
a tool call, then a refusal on the pinned fallback whose hop rejects the prefill, is sent once more without it, fails
again, and leaves the refusal standing, replayed with ``recommended_model``.

The ``parity`` scenario (step mode) holds tool changes through a ``pause_turn``, runs a tool that a queued
``add_tools`` names for the reply being handled, stops running it once a raw definition replaces it, and keeps the
history when a compaction brings no summary. The ``compaction_end`` scenario compacts after a final turn, and holds
a compaction asked for when ``max_iterations`` stops the run.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import tempfile
import uuid
from collections.abc import Awaitable, Callable, Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

import anthropic
from anthropic import beta_async_tool
from anthropic.lib.tools._toolsets._runnable import (
    BetaAsyncRunnableToolset,
    BetaToolsetCallContext,
    BetaToolsetContent,
)
from temporalio.client import WorkflowHandle, WorkflowHistory
from temporalio.common import SearchAttributeKey
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from agent_runner.activities.budget_policies import budget_policy  # noqa: E402
from agent_runner.activities.claude import ClaudeActivities  # noqa: E402
from agent_runner.activities.tools import ToolCall, ToolRegistry, current_tool_call, tool_options  # noqa: E402
from agent_runner.activities.toolsets import toolset_options  # noqa: E402
from agent_runner.client import AgentRunner, Run  # noqa: E402
from agent_runner.contract.agents import AgentSpec  # noqa: E402
from agent_runner.contract.budget import BudgetRequest  # noqa: E402
from agent_runner.contract.errors import AgentRunnerError, EditRejected  # noqa: E402
from agent_runner.contract.types import FALLBACK_CREDIT_BETA, SEARCH_ATTRIBUTE_TYPES, ActivityOptions  # noqa: E402
from agent_runner.mcp_config import parse_mcp_config  # noqa: E402
from agent_runner.testing import (  # noqa: E402
    FakeMessagesAPI,
    Fault,
    Reply,
    SlowStream,
    bad_request,
    end_turn,
    overloaded,
    text,
    tool_use,
)
from agent_runner.worker import build_worker  # noqa: E402
from tests.conftest import FAST_SERVER_ARGS, TEMPORAL_BIN  # noqa: E402
from tests.test_toolsets import RecordingBrowser, RecordingComputer, action  # noqa: E402
from tests.tools_for_tests import get_time, get_weather  # noqa: E402

HERE = Path(__file__).resolve().parent

SENT: list[str] = []


def _sent(call: ToolCall) -> str | None:
    return f"already sent to {call.input['to']}" if f"sent {call.idempotency_key}" in SENT else None


@tool_options(effects="at_most_once", start_to_close_timeout=timedelta(seconds=1), reconcile=_sent)
@beta_async_tool
async def send_once(to: str) -> str:
    """Send a message once; the first attempt takes effect, then hangs past its timeout.

    Args:
        to: The recipient.
    """
    key = current_tool_call().idempotency_key
    if f"sent {key}" not in SENT:
        SENT.append(f"sent {key}")
        await asyncio.sleep(30)
    return f"sent to {to}"


class SendingTill(BetaAsyncRunnableToolset):
    """A toolset whose ``send`` to ``ana`` takes effect, then hangs past its timeout the first time."""

    toolset_name = "till"

    def to_dict(self) -> Any:
        return {"type": "till_toolset_20260801"}

    async def call(
        self, context: BetaToolsetCallContext, name: str, input: Mapping[str, object]
    ) -> str | BetaToolsetContent:
        assert context.tool_use is None or context.tool_use.name == name == "send"
        key = current_tool_call().idempotency_key
        if f"sent {key}" not in SENT:
            SENT.append(f"sent {key}")
            if input.get("to") == "ana":
                await asyncio.sleep(30)
        return f"sent to {input.get('to')}"


@beta_async_tool
async def report(city: str) -> str:
    """A long report on a city: over ``RESULT_INLINE_LIMIT``, so its result is stored apart.

    Args:
        city: The city name, e.g. Paris.
    """
    return f"Report on {city}: " + "a line of the report. " * 20


@tool_options(local=True)
@beta_async_tool
async def local_weather(city: str) -> str:
    """The weather in a city, as a local activity.

    Args:
        city: The city name, e.g. Paris.
    """
    if city == "Atlantis":
        raise ValueError("no such city")
    return f"sunny in {city}"


def _till() -> SendingTill:
    options = ActivityOptions(start_to_close_timeout=timedelta(seconds=1))
    till = toolset_options(SendingTill(), options=options, effects="at_most_once", reconcile=_sent)
    assert isinstance(till, SendingTill)
    return till


async def record(name: str, scenario: str = "steered") -> None:
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=TEMPORAL_BIN,
        dev_server_extra_args=FAST_SERVER_ARGS,
        data_converter=pydantic_data_converter,
        search_attributes=[
            SearchAttributeKey.for_int(name) if kind == "Int" else SearchAttributeKey.for_keyword(name)
            for name, kind in SEARCH_ATTRIBUTE_TYPES.items()
        ],
    )
    with FakeMessagesAPI() as fake:
        queue = f"record-{uuid.uuid4()}"
        worker = build_worker(
            env.client,
            registry=ToolRegistry(
                [get_weather, get_time, send_once, report, local_weather, ANALYST],
                hooks=[thirty_more],
                toolsets=[toolset_options(RecordingBrowser(), requires_approval=True), RecordingComputer(), _till()],
            ),
            task_queue=queue,
            claude=ClaudeActivities(lambda: anthropic.AsyncAnthropic(base_url=fake.url, api_key="k", max_retries=0)),
            mcp=parse_mcp_config(
                {
                    "mcpServers": {
                        "files": {
                            "command": sys.executable,
                            "args": [str(ROOT / "tests" / "mcp_server.py")],
                            "env": {"MCP_TEST_DIR": tempfile.mkdtemp()},
                        }
                    }
                }
            ),
            search_attributes=scenario in WITH_SEARCH_ATTRIBUTES,
        )
        runner = AgentRunner(env.client, task_queue=queue)
        async with worker:
            await SCENARIOS[scenario](name, fake, runner)
            await env.shutdown()


async def steered(name: str, fake: FakeMessagesAPI, runner: AgentRunner) -> None:
    """Record the default scenario: two parallel tools, an approval, an injected message in step mode, a retry and a
    pause_turn."""
    fake.script(
        Reply(
            [
                text("Checking."),
                tool_use("toolu_1", "get_weather", {"city": "Paris"}),
                tool_use("toolu_2", "get_time", {"city": "Paris"}),
            ],
            "tool_use",
        ),
        Reply([text("searching")], "pause_turn"),
        end_turn("Sunny, 14:05."),
        end_turn("Ensoleillé, 14h05."),
    )
    run = await start(
        runner,
        "Paris?",
        tools=[get_weather, get_time],
        step=True,
        approval={"tools": ["get_time"]},
        result_hooks=["cache_last_tool_result"],
    )
    await wait(run, "waiting_for_step", 1)
    await run.advance()
    await wait(run, "waiting_for_approval", 1)
    await run.approve("toolu_2")
    for iteration in (2, 3):
        await wait(run, "waiting_for_step", iteration)
        if iteration == 3:
            await run.inject("En français ?")
        await run.advance()
    await wait(run, "waiting_for_step", 4)
    await run.stop("recorded")
    await run.result()
    save(name, await run.handle.fetch_history())


async def everything(name: str, fake: FakeMessagesAPI, runner: AgentRunner) -> None:
    """Record the ``everything`` scenario (see the module's docstring)."""
    summary = {"type": "compaction", "content": "Summary: Paris and Lyon asked."}
    fake.script(
        SlowStream(
            Reply(
                [
                    tool_use("toolu_1", "get_weather", {"city": "Paris"}),
                    tool_use("toolu_2", "get_time", {"city": "Paris"}),
                    text("x" * 100),
                ],
                "tool_use",
                usage={"input_tokens": 1200, "output_tokens": 5},
            ),
            event_delay=0.02,
            chunks=10,
        ),
        Reply([summary], "compaction"),
        Reply([tool_use("toolu_3", "send_once", {"to": "ana"})], "tool_use"),
        end_turn("Done."),
    )
    run = await start(
        runner,
        "Paris?",
        tools=[get_weather, get_time, send_once],
        eager_tools=True,
        approval={"tools": ["get_time"]},
        auto_compact={"input_tokens": 1000, "compaction": {"type": "summarize"}},
        continue_as_new={"updates": 2},
    )
    await wait(run, "waiting_for_approval", 1)
    await run.inject("And Lyon?", wait=False)
    await run.approve("toolu_2", input={"city": "Lyon"})
    result = await run.result()
    assert result.status == "completed", result
    assert (await run.status()).continuations >= 1, await run.status()
    first_run = run.handle.first_execution_run_id or run.handle.run_id
    first = await runner.client.get_workflow_handle(run.id, run_id=first_run).fetch_history()
    continued = await runner.client.get_workflow_handle(run.id).fetch_history()
    save(name, first)
    save(f"{name}_continued", continued)

    fake.script(
        Reply(
            [tool_use("toolu_4", "get_weather", {"city": "Rome"}), tool_use("toolu_5", "get_time", {"city": "Rome"})],
            "tool_use",
        ),
        end_turn("Rome: sunny, late."),
    )
    run = await start(
        runner,
        "Rome?",
        tools=[get_weather, get_time],
        step={"review_results": True},
        approval={"tools": ["get_time"]},
    )
    await wait(run, "waiting_for_step", 1)
    await run.advance(iteration=1)
    await wait(run, "waiting_for_approval", 1)
    await run.approve("toolu_5", input={"city": "Milan"})
    await wait(run, "waiting_for_review", 1)
    await run.advance(
        tool_results=[
            {"type": "tool_result", "tool_use_id": "toolu_4", "content": "sunny"},
            {"type": "tool_result", "tool_use_id": "toolu_5", "content": "late"},
        ]
    )
    await wait(run, "waiting_for_step", 2)
    await run.advance(iteration=2)
    result = await run.result()
    assert result.status == "completed", result
    save(f"{name}_step", await run.handle.fetch_history())


def lead_and_cities(first: list[dict[str, Any]]) -> Callable[[dict[str, Any]], Reply]:
    """Claude for a lead (``You lead.``) whose first reply calls ``first``, then says "Both sunny.", and for its
    children, each asked for a city: Paris's calls ``get_weather`` once, then each says the city is sunny."""

    def respond(body: dict[str, Any]) -> Reply:
        if body.get("system") == "You lead.":
            return Reply(first, "tool_use") if len(body["messages"]) == 1 else end_turn("Both sunny.")
        if body["messages"][0]["content"] == "Paris" and len(body["messages"]) == 1:
            return Reply([tool_use("toolu_C1", "get_weather", {"city": "Paris"})], "tool_use")
        return end_turn(f"{body['messages'][0]['content']}: sunny.")

    return respond


def city_calls(agent: str) -> list[dict[str, Any]]:
    """Calls of ``agent`` for Paris (``toolu_P0``) and Rome (``toolu_P1``)."""
    return [tool_use(f"toolu_P{i}", agent, {"task": city}) for i, city in enumerate(["Paris", "Rome"])]


async def subagents(name: str, fake: FakeMessagesAPI, runner: AgentRunner) -> None:
    """Record the ``subagents`` scenario: a reply calls two agents at once, one of which calls a tool."""
    fake.responder = lead_and_cities(city_calls("researcher"))
    run = await start(
        runner,
        "Paris and Rome?",
        system="You lead.",
        thread=False,
        id=name,  # tests/test_replay.py replays a history under its file's name, and the children's ids derive from it
        agents=[
            {
                "name": "researcher",
                "description": "Researches a city.",
                "system": "You research.",
                "tools": ["get_weather"],
            }
        ],
    )
    await finish(name, run, child="toolu_P0")


ANALYST = AgentSpec(name="analyst", description="Analyses a city.", system="You analyse.", tools=["get_weather"])
"""The agent the recording worker registers (the ``registered_agents`` scenario)."""


async def registered_agents(name: str, fake: FakeMessagesAPI, runner: AgentRunner) -> None:
    """Record the ``registered_agents`` scenario: with eager tools, a reply calls a tool and the registered agent twice.

    The agent's definition is the worker's (``describe_tools``, in the history); ``get_time`` starts while the reply
    streams, the agents' child runs with the reply; the Paris child calls a tool.
    """
    fake.responder = lead_and_cities([tool_use("toolu_T", "get_time", {"city": "Paris"}), *city_calls("analyst")])
    run = await start(
        runner,
        "Paris and Rome?",
        system="You lead.",
        thread=False,
        eager_tools=True,
        id=name,  # tests/test_replay.py replays a history under its file's name, and the children's ids derive from it
        tools=["get_time", "analyst"],
    )
    await finish(name, run, child="toolu_P0")


async def charge(name: str, fake: FakeMessagesAPI, runner: AgentRunner) -> None:
    """Record the ``charge`` scenario: a child spends one reply, then fails; the parent is charged what it spent."""

    def respond(body: dict[str, Any]) -> Reply | Fault:
        if body.get("system") == "You lead.":
            if len(body["messages"]) == 1:
                return Reply([tool_use("toolu_P0", "researcher", {"task": "Paris"})], "tool_use")
            return end_turn("The researcher failed.")
        if len(body["messages"]) == 1:
            return Reply([tool_use("toolu_C1", "get_weather", {"city": "Paris"})], "tool_use")
        return bad_request("messages: the research went wrong")

    fake.responder = respond
    run = await runner.start(
        model="claude-fake-1",
        max_tokens=512,
        system="You lead.",
        messages=[{"role": "user", "content": "Paris?"}],
        thread=False,
        id=name,  # tests/test_replay.py replays a history under its file's name
        agents=[
            {
                "name": "researcher",
                "description": "Researches a city.",
                "system": "You research.",
                "tools": ["get_weather"],
            }
        ],
    )
    result = await run.result()
    assert result.status == "completed" and result.usage.output_tokens == 15, result
    save(name, await run.handle.fetch_history())


async def parity(name: str, fake: FakeMessagesAPI, runner: AgentRunner) -> None:
    """Record the ``parity`` scenario (see the module's docstring)."""
    fake.script(
        Reply([text("searching")], "pause_turn"),
        Reply(
            [tool_use("toolu_1", "get_time", {"city": "Paris"}), tool_use("toolu_2", "get_weather", {"city": "Paris"})],
            "tool_use",
        ),
        Reply([{"type": "compaction", "content": None}], "compaction"),
        Reply([tool_use("toolu_3", "get_time", {"city": "Rome"})], "tool_use"),
        Reply([tool_use("toolu_4", "get_time", {"city": "Oslo"})], "tool_use"),
        end_turn("14:05 in Paris."),
    )
    run = await start(
        runner,
        "Time in Paris?",
        tools=[get_weather],
        betas=["inline-tools-2026-09-15", "compact-2026-09-04"],
        step=True,
    )
    await wait(run, "waiting_for_step", 1)
    await run.remove_tools("get_weather")  # held through the pause: the resuming request sends no tool_removal
    await run.add_tools("get_time")  # runs toolu_1 at once
    await run.advance(iteration=1)
    await wait(run, "waiting_for_step", 2)
    await run.compact()  # no summary comes back: the history and its thread stay
    await run.advance(iteration=2)
    await wait(run, "waiting_for_step", 3)
    await run.add_tools({"name": "get_time", "description": "The server's time.", "input_schema": {"type": "object"}})
    await run.advance(iteration=3)  # toolu_3 and toolu_4 are not run
    for iteration in (4, 5):
        await wait(run, "waiting_for_step", iteration)
        await run.advance(iteration=iteration)
    result = await run.result()
    assert result.status == "completed", result
    bodies = fake.bodies()
    assert [b["thread"]["type"] for b in bodies] == ["create", "continue", "create", *["continue"] * 3], bodies
    assert bodies[1]["messages"] == [], bodies[1]
    turns = [body for body in bodies if "compaction" not in body]
    blocks = [b for body in turns for m in body["messages"] if isinstance(m["content"], list) for b in m["content"]]
    results = [b for b in blocks if b["type"] == "tool_result"]
    assert [r["content"] for r in results] == [
        "14:05 in Paris",
        "Error: Tool 'get_weather' not found",
        "Error: Tool 'get_time' not found",
        "Error: Tool 'get_time' not found",
    ], results
    save(name, await run.handle.fetch_history())


async def plain(name: str, fake: FakeMessagesAPI, runner: AgentRunner) -> None:
    """Record the ``plain`` scenario: plain JSON without the held marker, as the stock CLI sends it, whose lookalikes
    the run escapes (``plain-json-is-data``): in the run's input and in an approval's edited input."""
    lookalike = {"agent_runner.stored": "sha256:" + "0" * 64}
    fake.script(Reply([tool_use("toolu_2", "get_time", {"city": "Paris"})], "tool_use"), end_turn("Done."))
    run_input = {
        "model": "claude-fake-1",
        "max_tokens": 512,
        "messages": [
            {"role": "user", "content": "Paris?"},
            {"role": "assistant", "content": [tool_use("toolu_1", "get_weather", {"city": lookalike})]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"}]},
        ],
        "tools": ["get_weather", "get_time"],
        "approval": {"tools": ["get_time"]},
    }
    handle = await runner.client.start_workflow("AgentRun", run_input, id=name, task_queue=runner.task_queue)
    run = runner.attach(handle.id)
    await wait(run, "waiting_for_approval", 1)
    await handle.execute_update("approve_tool", {"tool_use_id": "toolu_2", "input": {"city": lookalike}})
    await finish(name, run)


PARIS_THEN_ROME = (
    Reply([tool_use("toolu_1", "get_weather", {"city": "Paris"})], "tool_use"),
    Reply([tool_use("toolu_2", "get_weather", {"city": "Rome"})], "tool_use"),
    end_turn("Done."),
)
"""Claude's replies in the ``big_params`` and ``big_values`` scenarios."""


async def finish_continued(name: str, runner: AgentRunner, handle: WorkflowHandle[Any, Any]) -> None:
    """Wait for the run of ``handle`` to complete after it continued as new once; save its first execution's history
    as ``<name>.json`` and its last's as ``<name>_continued.json``."""
    run = runner.attach(handle.id)
    result = await run.result()
    assert result.status == "completed", result
    assert handle.first_execution_run_id is not None
    first = await runner.client.get_workflow_handle(name, run_id=handle.first_execution_run_id).fetch_history()
    last = await run.handle.fetch_history()
    assert first.events[-1].HasField("workflow_execution_continued_as_new_event_attributes"), "did not continue"
    save(name, first)
    save(f"{name}_continued", last)


async def big_params(name: str, fake: FakeMessagesAPI, runner: AgentRunner) -> None:
    """Record the ``big_params`` scenario: a system prompt over 64 KB in plain JSON, as the stock CLI sends it; the
    run continues as new once, carrying the prompt by reference (``params-by-reference``), then ends."""
    fake.script(*PARIS_THEN_ROME)
    run_input = {
        "model": "claude-fake-1",
        "max_tokens": 512,
        "system": "Be exact. " + "x" * 65_000,
        "messages": [{"role": "user", "content": "Paris, then Rome?"}],
        "tools": ["get_weather"],
        "thread": False,
        "continue_as_new": {"events": 10},
    }
    handle = await runner.client.start_workflow("AgentRun", run_input, id=name, task_queue=runner.task_queue)
    await finish_continued(name, runner, handle)


async def big_values(name: str, fake: FakeMessagesAPI, runner: AgentRunner) -> None:
    """Record the ``big_values`` scenario: a raw tool definition and an ``output_config`` over 64 KB in plain JSON, as
    the stock CLI sends them, and a plain ``add_tools`` definition holding a reference-shaped object (escaped); the
    run continues as new once, carrying the big values by reference (``big-values-by-reference``), then ends."""
    fake.script(*PARIS_THEN_ROME)
    properties = {f"p{i:04}": {"type": "string", "description": "d" * 100} for i in range(700)}
    run_input = {
        "model": "claude-fake-1",
        "max_tokens": 512,
        "output_config": {"format": {"type": "json_schema", "schema": {"type": "object", "properties": properties}}},
        "messages": [{"role": "user", "content": "Paris, then Rome?"}],
        "tools": ["get_weather", {"name": "search", "input_schema": {"type": "object", "properties": properties}}],
        "thread": False,
        "continue_as_new": {"events": 22},
    }
    handle = await runner.client.start_workflow("AgentRun", run_input, id=name, task_queue=runner.task_queue)
    lookalike = {"agent_runner.stored": "sha256:" + "0" * 64}
    added = {"name": "find", "input_schema": {"type": "object", "examples": [lookalike]}}
    await handle.execute_update("add_tools", {"tools": [added]})
    await finish_continued(name, runner, handle)


async def toolset_effects(name: str, fake: FakeMessagesAPI, runner: AgentRunner) -> None:
    """Record the ``toolset_effects`` scenario: an ``at_most_once`` toolset action lost past its timeout is not run
    again but reconciled (it had taken effect), so the next action of the turn runs."""
    fake.script(
        Reply(
            [action("toolu_1", "till", "send", {"to": "ana"}), action("toolu_2", "till", "send", {"to": "bo"})],
            "tool_use",
        ),
        end_turn("Sent."),
    )
    run = await start(runner, "Send both.", tools=["till"])
    result = await run.result()
    assert result.status == "completed", result
    sent = fake.bodies()[1]["messages"][-1]["content"]
    assert [block["content"] for block in sent] == ["already sent to ana", "sent to bo"], sent
    save(name, await run.handle.fetch_history())


async def compaction_end(name: str, fake: FakeMessagesAPI, runner: AgentRunner) -> None:
    """Record the ``compaction_end`` scenario (see the module's docstring)."""
    summary = {"type": "compaction", "content": "Summary: sunny in Paris."}
    for suffix, script, max_iterations in (
        ("", [Reply([tool_use("toolu_1", "get_weather", {"city": "Paris"})], "tool_use"), end_turn("Sunny.")], None),
        ("_held", [Reply([tool_use("toolu_2", "get_weather", {"city": "Paris"})], "tool_use")], 1),
    ):
        fake.reset()
        fake.script(*script, Reply([summary], "compaction"))
        run = await start(
            runner,
            "Paris?",
            tools=[get_weather],
            betas=["compact-2026-09-04"],
            step=True,
            max_iterations=max_iterations,
        )
        last = len(script)
        for iteration in range(1, last + 1):
            await wait(run, "waiting_for_step", iteration)
            if iteration == last:
                await run.compact()
            await run.advance(iteration=iteration)
        result = await run.result()
        compacted = [b for b in fake.bodies() if "compaction" in b]
        assert len(compacted) == (0 if max_iterations else 1), fake.bodies()
        assert result.stop_reason == ("tool_use" if max_iterations else "compaction"), result
        save(f"{name}{suffix}", await run.handle.fetch_history())


async def sleep(name: str, fake: FakeMessagesAPI, runner: AgentRunner) -> None:
    """Record the ``sleep`` scenario: a short sleep runs out, then a long one is woken by a person."""
    fake.script(
        Reply([tool_use("toolu_1", "sleep", {"seconds": 1})], "tool_use"),
        Reply([tool_use("toolu_2", "sleep", {"seconds": 3600})], "tool_use"),
        end_turn("Awake."),
    )
    run = await start(
        runner,
        "Wait for the report.",
        sleep={"max_seconds": 7200},
    )
    await wait(run, "sleeping", 2)
    await run.wake("The report is ready.")
    await finish(name, run)


async def approval_sleep(name: str, fake: FakeMessagesAPI, runner: AgentRunner) -> None:
    """Record the ``approval_sleep`` scenario: a reply whose approval-gated call comes before its sleep, with the
    search attributes on (patch ``approval-outranks-sleep``: recorded before it, the sleep's start upserts
    ``sleeping``); the call is approved during the sleep, then the sleep is woken."""
    fake.script(
        Reply(
            [tool_use("toolu_1", "get_time", {"city": "Paris"}), tool_use("toolu_2", "sleep", {"seconds": 3600})],
            "tool_use",
        ),
        end_turn("Noon, and awake."),
    )
    run = await start(runner, "The time, then wait.", tools=[get_time], sleep=True, approval={"tools": ["get_time"]})
    for _ in range(400):
        if (await run.status()).sleeping_until is not None:
            break
        await asyncio.sleep(0.05)
    await run.approve("toolu_1")
    await wait(run, "sleeping", 1)
    await run.wake("Go on.")
    await finish(name, run)


async def gave_up(name: str, fake: FakeMessagesAPI, runner: AgentRunner) -> None:
    """Record the ``gave_up`` scenario: a tool call, then a model call overloaded on both its attempts fails the run
    saying it gave up (patch ``activity-gave-up-says-so``)."""
    fake.script(
        Reply([tool_use("toolu_1", "get_weather", {"city": "Paris"})], "tool_use"),
        overloaded(),
        overloaded(),
    )
    run = await start(
        runner,
        "Paris?",
        tools=[get_weather],
        model_activity={"maximum_attempts": 2, "initial_interval": "PT0.1S", "maximum_interval": "PT0.1S"},
    )
    try:
        await run.result()
    except AgentRunnerError as e:
        assert "gave up" in str(e), e
    else:
        raise AssertionError("the run should have failed")
    save(name, await run.handle.fetch_history())


async def result_transcript(name: str, fake: FakeMessagesAPI, runner: AgentRunner) -> None:
    """Record the ``result_transcript`` scenario: ``max_iterations`` cuts the run off after a tool call, and its
    result carries the conversation with the tool's result (patch ``run-result-carries-unsent-messages``)."""
    fake.script(Reply([tool_use("toolu_1", "get_weather", {"city": "Paris"})], "tool_use"))
    run = await start(
        runner,
        "Paris?",
        tools=[get_weather],
        max_iterations=1,
    )
    result = await run.result()
    assert result.status == "max_iterations" and result.transcript is not None, result
    assert [m["role"] for m in result.transcript.pending] == ["user"], result.transcript
    save(name, await run.handle.fetch_history())


async def last_status(name: str, fake: FakeMessagesAPI, runner: AgentRunner) -> None:
    """Record the ``last_status`` scenario: a run with a tool call and prices completes, and its result carries its
    last status, transcript version and cost included (patch ``run-result-carries-its-last-status``)."""
    fake.script(Reply([tool_use("toolu_1", "get_weather", {"city": "Paris"})], "tool_use"), end_turn("Sunny."))
    run = await start(
        runner,
        "Paris?",
        tools=[get_weather],
        budget={"prices": {"input": 3, "output": 15}},
    )
    result = await run.result()
    assert result.last_status is not None and result.last_status.version == 3, result
    assert result.last_status.cost_usd is not None, result
    save(name, await run.handle.fetch_history())


async def compact_results(name: str, fake: FakeMessagesAPI, runner: AgentRunner) -> None:
    """Record the ``compact_results`` scenario: turns send their tool results compact (patch
    ``compact-tool-results``): stored ones as ``[tool_use_id, ref]``, an inline one among them as
    ``[tool_use_id, 0, content]``, and a continuation goes on so."""
    fake.script(
        Reply([tool_use("toolu_1", "report", {"city": "Paris"})], "tool_use"),
        Reply(
            [tool_use("toolu_2", "report", {"city": "Lyon"}), tool_use("toolu_3", "report", {"city": "Nice"})],
            "tool_use",
        ),
        Reply(
            [tool_use("toolu_4", "report", {"city": "Rome"}), tool_use("toolu_5", "get_weather", {"city": "Rome"})],
            "tool_use",
        ),
        Reply([tool_use("toolu_6", "report", {"city": "Oslo"})], "tool_use"),
        end_turn("Done."),
    )
    run = await start(runner, "Reports?", tools=[report, get_weather], continue_as_new={"events": 40})
    result = await run.result()
    assert result.status == "completed" and result.iterations == 5, result
    assert (await run.status()).continuations == 1, (await run.status()).continuations
    first_run = run.handle.first_execution_run_id or run.handle.run_id
    save(name, await runner.client.get_workflow_handle(run.id, run_id=first_run).fetch_history())
    save(f"{name}_continued", await run.handle.fetch_history())


async def lookalikes(name: str, fake: FakeMessagesAPI, runner: AgentRunner) -> None:
    """Record the ``lookalikes`` scenario: content the client holds (a big message stored apart, data shaped like a
    placeholder escaped) in the run's input, an injected message and an approval's edited input."""
    lookalike = {"agent_runner.stored": "sha256:" + "0" * 64}
    fake.script(
        Reply([tool_use("toolu_2", "get_time", {"city": "Paris"})], "tool_use"),
        end_turn("Done."),
    )
    run = await runner.start(
        model="claude-fake-1",
        max_tokens=512,
        messages=[
            {"role": "user", "content": "x" * 5000},
            {"role": "assistant", "content": [tool_use("toolu_1", "get_weather", {"city": lookalike})]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"}]},
        ],
        tools=[get_weather, get_time],
        approval={"tools": ["get_time"]},
    )
    await wait(run, "waiting_for_approval", 1)
    await run.inject([{"type": "text", "text": "y" * 5000}], wait=False)
    await run.approve("toolu_2", input={"city": lookalike})
    await finish(name, run)


async def mcp(name: str, fake: FakeMessagesAPI, runner: AgentRunner) -> None:
    """Record the ``mcp`` scenario: the server's tools, listed once; two calls at once, one of which changes the
    server's list; then a call of the withdrawn tool (an ``is_error`` result) beside one that fails (``isError``)."""
    fake.script(
        Reply([tool_use("toolu_1", "change_tools", {}), tool_use("toolu_2", "lookup", {"city": "Paris"})], "tool_use"),
        Reply(
            [tool_use("toolu_3", "lookup", {"city": "Rome"}), tool_use("toolu_4", "fail", {"reason": "no"})], "tool_use"
        ),
        end_turn("Paris: 21C."),
    )
    run = await start(
        runner,
        "Paris and Rome?",
        tools=[get_weather],
        mcp=["files"],
    )
    await finish(name, run)


async def features(name: str, fake: FakeMessagesAPI, runner: AgentRunner) -> None:
    """Record the ``features`` scenario (see the module's docstring)."""
    refused = {"type": "refusal", "category": "cyber", "fallback_credit_token": "tok_1"}
    turns = [
        Reply([text("No.")], "refusal", stop_details=refused),
        Reply([tool_use("toolu_W", "get_weather", {"city": "Paris"})], "tool_use"),
        Reply([text("No.")], "refusal", stop_details={"type": "refusal", "category": None}),
        end_turn("Sunny."),
    ]

    def respond(body: dict[str, Any]) -> Reply:
        return (
            Reply([{"type": "compaction", "content": "Summary."}], "compaction")
            if "compaction" in body
            else turns.pop(0)
        )

    fake.responder = respond
    run = await start(
        runner,
        "Paris?",
        tools=[get_weather],
        refusal_fallbacks=["claude-fake-2"],
        auto_compact={"input_tokens": 10, "background": True},
    )
    result = await run.result()
    assert (result.status, result.stop_reason) == ("completed", "refusal"), result
    after = await run.send("And now?", id=f"{name}-send")
    assert (await after.result()).status == "completed"
    save(name, await run.handle.fetch_history())
    save(f"{name}_send", await after.handle.fetch_history())


async def splice(name: str, fake: FakeMessagesAPI, runner: AgentRunner) -> None:
    """Record the ``splice`` scenario (see the module's docstring)."""

    def refused(token: str) -> dict[str, Any]:
        return {
            "type": "refusal",
            "category": "cyber",
            "fallback_credit_token": token,
            "fallback_has_prefill_claim": True,
        }

    fake.script(
        Reply([text("Let me")], "refusal", stop_details=refused("tok_1")),
        Reply([tool_use("toolu_W", "get_weather", {"city": "Paris"})], "tool_use"),
        Reply([text("No")], "refusal", stop_details=refused("tok_2")),
        bad_request("prefill rejected"),
        bad_request("no such model"),
    )
    run = await start(
        runner,
        "Paris?",
        tools=[get_weather],
        thread=False,
        refusal_fallbacks=["claude-fake-2", "claude-fake-3"],
    )
    result = await run.result()
    assert (result.status, result.stop_reason) == ("completed", "refusal"), result
    assert result.final_message is not None and result.final_message["stop_details"]["recommended_model"] is None
    save(name, await run.handle.fetch_history())


async def fork(name: str, fake: FakeMessagesAPI, runner: AgentRunner) -> None:
    """Record the ``fork`` scenario: ``add_tools`` gives a run ``get_time`` at its first step, then ``remove_tools``
    takes ``get_weather`` at its second; a fork from the second request runs ``get_time`` (the run had it then)."""
    fake.script(
        Reply([tool_use("toolu_W", "get_weather", {"city": "Paris"})], "tool_use"),
        Reply([tool_use("toolu_T", "get_time", {"city": "Paris"})], "tool_use"),
        end_turn("Sunny, 14:05."),
        Reply([tool_use("toolu_T2", "get_time", {"city": "Oslo"})], "tool_use"),
        end_turn("14:05 in Oslo."),
    )
    run = await start(
        runner,
        "Paris?",
        tools=[get_weather],
        thread=False,
        step=True,
    )
    await wait(run, "waiting_for_step", 1)
    await run.add_tools(get_time)
    await run.advance()
    await wait(run, "waiting_for_step", 2)
    await run.remove_tools("get_weather")
    await run.advance()
    await wait(run, "waiting_for_step", 3)
    await run.advance()
    assert (await run.result()).status == "completed"
    forked = await run.fork(2, id=f"{name}-fork")
    for iteration in (1, 2):
        await wait(forked, "waiting_for_step", iteration)
        await forked.advance()
    assert (await forked.result()).status == "completed"
    assert '"14:05 in Oslo"' in json.dumps(await forked.transcript())  # get_time's result: it ran
    save(name, await run.handle.fetch_history())
    save(f"{name}_fork", await forked.handle.fetch_history())


async def what_if(name: str, fake: FakeMessagesAPI, runner: AgentRunner) -> None:
    """Record the ``what_if`` scenario: a fork on another model whose call made as the run made it gets the run's
    recorded result, and whose new call runs."""
    fake.script(
        Reply([tool_use("toolu_W", "get_weather", {"city": "Paris"})], "tool_use"),
        end_turn("Sunny."),
        Reply(
            [
                tool_use("toolu_A", "get_weather", {"city": "Paris"}),
                tool_use("toolu_B", "get_weather", {"city": "Oslo"}),
            ],
            "tool_use",
        ),
        end_turn("Sunny in both."),
    )
    run = await start(runner, "Paris?", tools=[get_weather])
    assert (await run.result()).status == "completed"
    forked = await run.fork(1, id=f"{name}-fork", changes={"model": "claude-fake-2"}, tool_results="recorded")
    assert (await forked.result()).status == "completed"
    save(name, await forked.handle.fetch_history())


async def budget_request(name: str, fake: FakeMessagesAPI, runner: AgentRunner) -> None:
    """Record the ``budget_request`` scenario: with ``advise``, an output token budget spent after two turns asks for
    more (Claude's summary turn, then the ``budget_1`` approval), a refused approval, then one with new limits; the run
    continues as new and ends under them."""
    usage = {"input_tokens": 100, "output_tokens": 10}
    fake.script(
        Reply([tool_use("toolu_1", "get_weather", {"city": "Paris"})], "tool_use", usage=usage),
        Reply([tool_use("toolu_2", "get_weather", {"city": "Oslo"})], "tool_use", usage=usage),
        end_turn("Paris and Oslo done; Rome left, one turn.", usage=usage),
        Reply([tool_use("toolu_3", "get_weather", {"city": "Rome"})], "tool_use", usage=usage),
        end_turn("Sunny in all three.", usage=usage),
    )
    run = await start(
        runner,
        "Paris, Oslo, Rome?",
        tools=[get_weather],
        budget={"max_output_tokens": 15, "on_spent": "ask", "advise": True},
        continue_as_new={"events": 40},
    )
    await wait(run, "waiting_for_approval", 3)
    with contextlib.suppress(EditRejected):
        await run.approve("budget_1", input={"max_output_tokens": 20})
    await run.approve("budget_1", input={"max_output_tokens": 100})
    result = await run.result()
    assert (result.status, result.iterations) == ("completed", 5), result
    assert (await run.status()).continuations >= 1, await run.status()
    first_run = run.handle.first_execution_run_id or run.handle.run_id
    save(name, await runner.client.get_workflow_handle(run.id, run_id=first_run).fetch_history())
    save(f"{name}_continued", await run.handle.fetch_history())


@budget_policy
def thirty_more(request: BudgetRequest) -> dict[str, Any] | None:
    """Raise a spent output token budget by 30, once: the next request is a person's."""
    return (
        {"max_output_tokens": request.budget["max_output_tokens"] + 30}
        if request.budget["max_output_tokens"] < 20
        else None
    )


async def budget_policy_scenario(name: str, fake: FakeMessagesAPI, runner: AgentRunner) -> None:
    """Record the ``budget_policy`` scenario: a budget policy raises a spent budget (its activity), the run spends it
    again, the policy leaves the next request to a person, who denies it."""
    usage = {"input_tokens": 100, "output_tokens": 10}
    fake.script(
        Reply([tool_use("toolu_1", "get_weather", {"city": "Paris"})], "tool_use", usage=usage),
        end_turn("Paris done; Oslo left.", usage=usage),
        Reply([tool_use("toolu_2", "get_weather", {"city": "Oslo"})], "tool_use", usage=usage),
        Reply([tool_use("toolu_3", "get_weather", {"city": "Rome"})], "tool_use", usage=usage),
        end_turn("All done.", usage=usage),
    )
    run = await start(
        runner,
        "Paris, Oslo, Rome?",
        tools=[get_weather],
        budget={"max_output_tokens": 10, "on_spent": "ask", "policy": "thirty_more"},
    )
    await wait(run, "waiting_for_approval", 5)
    await run.deny("budget_1")
    result = await run.result()
    assert (result.status, result.iterations) == ("budget_exhausted", 5), result
    save(name, await run.handle.fetch_history())


async def toolsets(name: str, fake: FakeMessagesAPI, runner: AgentRunner) -> None:
    """Record the ``toolsets`` scenario: a browser whose actions wait for approval (one approved with edited input,
    one denied, so the next is not executed) beside a computer whose failing action halts its later one."""
    fake.script(
        Reply(
            [
                text("On it."),
                action("toolu_1", "browser", "navigate", {"url": "https://a.example"}),
                action("toolu_2", "computer", "fail"),
                action("toolu_3", "browser", "click"),
                action("toolu_4", "computer", "screenshot"),
                action("toolu_5", "browser", "type"),
            ],
            "tool_use",
        ),
        end_turn("Done."),
    )
    run = await start(
        runner,
        "Open the docs.",
        tools=["browser", "computer", get_time],
    )
    await wait(run, "waiting_for_approval", 1)
    await run.approve("toolu_1", input={"url": "https://b.example"})
    async with asyncio.timeout(20):
        while [a["tool_use_id"] for a in (await run.status()).pending_approvals] != ["toolu_3"]:
            await asyncio.sleep(0.05)
    await run.deny("toolu_3", "Not that button.")
    await finish(name, run)


async def local_tool(name: str, fake: FakeMessagesAPI, runner: AgentRunner) -> None:
    """Record the ``local_tool`` scenario: a reply calls a local tool beside a regular one, the next calls the local
    tool again, which raises (an ``is_error`` result)."""
    fake.script(
        Reply(
            [
                tool_use("toolu_1", "local_weather", {"city": "Paris"}),
                tool_use("toolu_2", "get_weather", {"city": "Oslo"}),
            ],
            "tool_use",
        ),
        Reply([tool_use("toolu_3", "local_weather", {"city": "Atlantis"})], "tool_use"),
        end_turn("Sunny in Paris."),
    )
    await finish(name, await start(runner, "Paris and Oslo?", tools=[local_weather, get_weather]))
    results = [b for b in fake.bodies()[2]["messages"][-1]["content"] if b["type"] == "tool_result"]
    assert results == [
        {"type": "tool_result", "tool_use_id": "toolu_3", "content": "ValueError('no such city')", "is_error": True}
    ], results


async def request_shape(name: str, fake: FakeMessagesAPI, runner: AgentRunner) -> None:
    """Record the ``request_shape`` scenario (patch ``request-shape-as-the-sdk``): a stepped run without tools and
    with the fallback-credit beta of its own decides before its tool lookup, and takes an injected message; a run
    with tools decides at its first turn after an ``update_params`` gives it the fallback-credit beta."""
    fake.script(end_turn("Sunny."), end_turn("Cold."))
    run = await start(runner, "Paris?", betas=[FALLBACK_CREDIT_BETA], step=True)
    await wait(run, "waiting_for_step", 1)
    await run.inject("And Oslo?")
    await run.advance()
    await wait(run, "waiting_for_step", 2)
    await run.advance()
    await finish(name, run)
    fake.script(Reply([tool_use("toolu_1", "get_weather", {"city": "Paris"})], "tool_use"), end_turn("Sunny."))
    run = await start(runner, "Paris?", tools=[get_weather], step=True)
    await wait(run, "waiting_for_step", 1)
    await run.update_params(betas=[FALLBACK_CREDIT_BETA])
    await run.advance()
    await wait(run, "waiting_for_step", 2)
    await run.advance()
    await finish(f"{name}_late", run)
    threads = "message-threads-2026-08-12"
    betas = [r.headers.get("anthropic-beta") for r in fake.requests]
    assert betas == [f"{FALLBACK_CREDIT_BETA},{threads}"] * 2 + [threads, f"{FALLBACK_CREDIT_BETA},{threads}"], betas


async def start(runner: AgentRunner, ask: str, **options: Any) -> Run:
    """Start a run of ``claude-fake-1`` (512 tokens a reply) on the user's message ``ask``, with ``options``."""
    return await runner.start(
        model="claude-fake-1", max_tokens=512, messages=[{"role": "user", "content": ask}], **options
    )


def save(file: str, history: WorkflowHistory) -> None:
    """Write ``history`` as ``tests/histories/<file>.json``, the form ``tests/test_replay.py`` replays."""
    (HERE / f"{file}.json").write_text(json.dumps(history.to_json_dict(), indent=1) + "\n")


async def finish(name: str, run: Run, child: str | None = None) -> None:
    """Wait for the run to complete and save its history as ``<name>.json``, and with ``child`` (a tool use id) the
    history of the child run that call started as ``<name>_child.json``."""
    result = await run.result()
    assert result.status == "completed", result
    save(name, await run.handle.fetch_history())
    if child is not None:
        save(f"{name}_child", await run.child(child).handle.fetch_history())


async def wait(run: Run, status: str, iterations: int) -> None:
    for _ in range(400):
        current = await run.status()
        if current.status == status and current.iterations == iterations:
            return
        await asyncio.sleep(0.05)
    raise TimeoutError(f"run never reached {status} at {iterations}: {await run.status()}")


SCENARIOS: dict[str, Callable[[str, FakeMessagesAPI, AgentRunner], Awaitable[None]]] = {
    "steered": steered,
    "everything": everything,
    "subagents": subagents,
    "registered_agents": registered_agents,
    "charge": charge,
    "parity": parity,
    "compaction_end": compaction_end,
    "lookalikes": lookalikes,
    "sleep": sleep,
    "approval_sleep": approval_sleep,
    "plain": plain,
    "big_params": big_params,
    "big_values": big_values,
    "toolset_effects": toolset_effects,
    "mcp": mcp,
    "features": features,
    "toolsets": toolsets,
    "splice": splice,
    "fork": fork,
    "gave_up": gave_up,
    "result_transcript": result_transcript,
    "last_status": last_status,
    "request_shape": request_shape,
    "compact_results": compact_results,
    "what_if": what_if,
    "budget_request": budget_request,
    "budget_policy": budget_policy_scenario,
    "local_tool": local_tool,
}
"""Each scenario by the name ``record.py`` takes; ``steered`` is the default."""

WITH_SEARCH_ATTRIBUTES = {"approval_sleep"}
"""The scenarios whose worker keeps the ``AgentRun*`` search attributes current (each an upsert command)."""


if __name__ == "__main__":
    scenarios = [s for s in SCENARIOS if s != "steered"]
    if len(sys.argv) not in (2, 3) or sys.argv[2:] not in ([], *([s] for s in scenarios)):
        sys.exit(
            f"usage: python tests/histories/record.py NAME [{'|'.join(scenarios)}] (a new name: keep the recorded "
            "histories)"
        )
    asyncio.run(record(*sys.argv[1:]))
    sys.stdout.flush()
    os._exit(0)
