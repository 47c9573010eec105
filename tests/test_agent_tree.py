"""One tree, one control plane: a run's child runs as seen from its handle.

The parent's live events include its children's (tagged by their path of agent calls), its status nests theirs, its
usage counts what they spent, and a person steers or approves inside a child from the parent's handle.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any

import pytest
import temporalio.client as client_interceptors
from temporalio.client import Client, WorkflowQueryFailedError
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import Worker

from agent_runner import cli
from agent_runner.activities.claude import ClaudeActivities
from agent_runner.activities.tools import ToolRegistry
from agent_runner.cli.render import render_status
from agent_runner.client import AgentRunner, Run
from agent_runner.contract.events import AgentStarted, RunEvent, RunFinished, TextDelta, ToolFinished
from agent_runner.contract.types import CHILD_USAGE_ACTIVITY, RunStatus, Usage
from agent_runner.testing import FakeMessagesAPI, Reply, ScriptItem, bad_request, end_turn, tool_use
from agent_runner.worker import build_worker
from agent_runner.workflows import subagents
from tests import subagent_support
from tests.conftest import WorkerFactory, anthropic_client_factory, started_attempts
from tests.subagent_support import (
    SCOUT,
    ChildAskingApproval,
    parent_bodies,
    research,
    scouting_child,
    start_research,
)
from tests.tools_for_tests import get_weather


async def start_tree(runner: AgentRunner, fake_api: FakeMessagesAPI) -> Run:
    """A parent whose researcher has a scout: three levels of runs, five replies of 10 input and 5 output tokens.

    The parent asks the researcher to "Go." (``toolu_P1``) and ends "Done."; the researcher asks its scout once.
    """
    return await start_research(runner, fake_api, scouting_child, {"tools": [], "agents": [SCOUT]})


Shape = tuple[tuple[str, ...], str, int, int | None]
"""An event as ``shape`` sums it up: its run's path of agent calls, type, iteration and offset."""


def call_opening(path: tuple[str, ...]) -> list[Shape]:
    """The ``shape`` of the first events of the run at ``path`` (``()``: the parent), to its first call's start."""
    return [
        (path, "iteration_started", 1, 0),
        (path, "model_call_started", 1, 0),
        (path, "block_start", 1, 0),
        (path, "tool_input", 1, 0),
        (path, "block_stop", 1, 0),
        (path, "reply", 1, 2),
        (path, "tool_started", 1, 3),
    ]


PARENT_AFTER_THE_CALL = [
    ((), "tool_finished", 1, 5),
    ((), "iteration_started", 2, 6),
    ((), "model_call_started", 2, 6),
    ((), "block_start", 2, 6),
    ((), "text", 2, 6),
    ((), "block_stop", 2, 6),
    ((), "reply", 2, 8),
    ((), "run_finished", 2, 9),
]
"""The ``shape`` of the parent's events from its researcher call's result on."""


def tree_lines(child_id: str) -> list[str]:
    """The last lines ``agent-runner status`` prints for the ended tree of ``start_tree``."""
    return [
        "agents",
        f"  researcher (toolu_P1) · completed · 2 turns · 30 input / 15 output tokens · {child_id}",
        f"    scout (toolu_S1) · completed · 1 turns · 10 input / 5 output tokens · {child_id}/toolu_S1",
    ]


def shape(events: list[RunEvent]) -> list[Shape]:
    return [(e.path, e.type, e.iteration, e.offset) for e in events]


async def collect(run: Run, **kwargs: Any) -> list[RunEvent]:
    return [event async for event in run.events(**kwargs)]


async def test_the_parents_events_include_its_childrens_tagged_by_their_path(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    async with worker():
        run = await start_tree(runner, fake_api)
        live = asyncio.ensure_future(asyncio.wait_for(collect(run), 60))  # followed as it runs
        await run.until_done()
        events = await live
        again = await asyncio.wait_for(collect(run), 60)  # and read again once it finished
        own = await asyncio.wait_for(collect(run, agents=False), 60)
    p, s = ("toolu_P1",), ("toolu_P1", "toolu_S1")
    # A child's events come after the parent's `agent_started` for it and before the parent's `tool_finished` of the
    # call, each with its offset in its own run's stream; the grandchild's likewise inside the child's.
    assert shape(events) == [
        *call_opening(()),
        ((), "agent_started", 1, 4),
        *call_opening(p),
        (p, "agent_started", 1, 4),
        (s, "iteration_started", 1, 0),
        (s, "model_call_started", 1, 0),
        (s, "block_start", 1, 0),
        (s, "text", 1, 0),
        (s, "block_stop", 1, 0),
        (s, "reply", 1, 2),
        (s, "run_finished", 1, 3),
        (p, "tool_finished", 1, 5),
        (p, "iteration_started", 2, 6),
        (p, "model_call_started", 2, 6),
        (p, "block_start", 2, 6),
        (p, "text", 2, 6),
        (p, "block_stop", 2, 6),
        (p, "reply", 2, 8),
        (p, "run_finished", 2, 9),
        *PARENT_AFTER_THE_CALL,
    ]
    assert events == again  # followed live or read afterwards: the same events
    child_id = f"{run.id}/toolu_P1"
    assert [e for e in events if isinstance(e, (AgentStarted, ToolFinished, TextDelta, RunFinished))] == [
        AgentStarted(iteration=1, tool_use_id="toolu_P1", name="researcher", run_id=child_id, offset=4),
        AgentStarted(
            iteration=1, tool_use_id="toolu_S1", name="scout", run_id=f"{child_id}/toolu_S1", offset=4, path=p
        ),
        TextDelta(iteration=1, attempt=1, index=0, text="Seen.", offset=0, path=s),
        RunFinished(iteration=1, status="completed", detail=None, offset=3, path=s),
        ToolFinished(
            iteration=1,
            tool_use_id="toolu_S1",
            name="scout",
            result={"type": "tool_result", "tool_use_id": "toolu_S1", "content": "Seen."},
            offset=5,
            path=p,
        ),
        TextDelta(iteration=2, attempt=1, index=0, text="Scout saw it.", offset=6, path=p),
        RunFinished(iteration=2, status="completed", detail=None, offset=9, path=p),
        ToolFinished(
            iteration=1,
            tool_use_id="toolu_P1",
            name="researcher",
            result={"type": "tool_result", "tool_use_id": "toolu_P1", "content": "Scout saw it."},
            offset=5,
        ),
        TextDelta(iteration=2, attempt=1, index=0, text="Done.", offset=6),
        RunFinished(iteration=2, status="completed", detail=None, offset=9),
    ]
    # The path is the reader's, never published: on the wire an event is as its run published it.
    assert events[15].to_wire() == {
        "type": "agent_started",
        "iteration": 1,
        "tool_use_id": "toolu_S1",
        "name": "scout",
        "run_id": f"{child_id}/toolu_S1",
    }
    # Without `agents`, the run's own events only, as before.
    assert own == [e for e in events if e.path == ()]


async def test_the_parents_status_nests_its_childrens_and_its_usage_counts_theirs(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    async with worker():
        run = await start_tree(runner, fake_api)
        result = await run.result()
        flat = await run.status()
        status = await run.status(tree=True)
    child_id = f"{run.id}/toolu_P1"
    # Each reply used 10 input and 5 output tokens (the fake's default): the scout 1, the researcher 2 (and the
    # scout's), the parent 2 (and the researcher's).
    assert result.usage == flat.usage == status.usage == Usage(input_tokens=50, output_tokens=25)
    assert flat.agents == [{"id": child_id, "name": "researcher", "tool_use_id": "toolu_P1", "status": "completed"}]
    [child] = status.agents
    assert {k: v for k, v in child.items() if k != "run"} == flat.agents[0]
    child_status = RunStatus.model_validate(child["run"])
    assert (child_status.status, child_status.iterations, child_status.usage) == (
        "completed",
        2,
        Usage(input_tokens=30, output_tokens=15),
    )
    [grandchild] = child_status.agents
    assert {k: v for k, v in grandchild.items() if k != "run"} == {
        "id": f"{child_id}/toolu_S1",
        "name": "scout",
        "tool_use_id": "toolu_S1",
        "status": "completed",
    }
    grandchild_status = RunStatus.model_validate(grandchild["run"])
    assert (grandchild_status.status, grandchild_status.usage, grandchild_status.agents) == (
        "completed",
        Usage(input_tokens=10, output_tokens=5),
        [],
    )
    # `agent-runner status` prints the tree, a level of indent per level of runs.
    assert render_status(run.id, status)[-3:] == tree_lines(child_id)


async def test_what_a_child_spent_counts_against_the_parents_budget(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """The child gets what the parent has left (7 output tokens) and spends 10; the parent, at 15 of 12, stops."""

    def child(body: dict[str, Any]) -> ScriptItem:
        if len(body["messages"]) == 1:
            return Reply(content=[tool_use("toolu_C1", "get_weather", {"city": "Paris"})], stop_reason="tool_use")
        return end_turn("Sunny.")

    async with worker(get_weather):
        run = await start_research(
            runner, fake_api, child, {"tools": ["get_weather"]}, budget={"max_output_tokens": 12}
        )
        result = await run.result()
        child_result = await run.child("toolu_P1").result()
    assert (child_result.status, child_result.usage) == ("completed", Usage(input_tokens=20, output_tokens=10))
    assert (result.status, result.detail, result.usage) == (
        "budget_exhausted",
        "The output token budget (15 of 12) is spent.",
        Usage(input_tokens=30, output_tokens=15),
    )
    assert len(parent_bodies(fake_api)) == 1  # the parent asked Claude nothing after the child


async def test_a_person_approves_and_steers_inside_a_child_from_the_parents_handle(
    fake_api: FakeMessagesAPI, child_asking_approval: ChildAskingApproval
) -> None:
    async with child_asking_approval() as (run, child_run):
        assert child_run.id == f"{run.id}/toolu_P1"
        [waiting] = (await run.status(tree=True)).agents
        assert RunStatus.model_validate(waiting["run"]).status == "waiting_for_approval"
        assert [(p.tool_use_id, p.input) for p in await child_run.pending_approvals()] == [
            ("toolu_C1", {"target": "moon"})
        ]
        await child_run.inject("Say when it is done.", wait=False)  # queued: applies with the tool results
        await child_run.approve("toolu_C1")
        final = await run.until_done()
        child_transcript = await child_run.transcript()
    assert final.content[0].type == "text" and final.content[0].text == "Done."
    assert child_transcript[2] == {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "toolu_C1", "content": "launched at moon"},
            {"type": "text", "text": "Say when it is done."},
        ],
    }
    assert parent_bodies(fake_api)[1]["messages"][-1]["content"][0]["content"] == "Launched."


@pytest.mark.usefixtures("temporal_address")
async def test_the_status_command_prints_the_tree(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, capsys: pytest.CaptureFixture[str]
) -> None:
    async with worker():
        run = await start_tree(runner, fake_api)
        await run.result()
        capsys.readouterr()
        assert await cli.amain(["status", run.id, "--task-queue", runner.task_queue]) == 0
        printed = capsys.readouterr().out.splitlines()
        assert await cli.amain(["status", run.id, "--task-queue", runner.task_queue, "--json"]) == 0
        printed_json = json.loads(capsys.readouterr().out)
    child_id = f"{run.id}/toolu_P1"
    assert printed[4] == "tokens       50 input / 25 output tokens"
    assert printed[-3:] == tree_lines(child_id)
    assert printed_json["agents"][0]["run"]["agents"][0]["id"] == f"{child_id}/toolu_S1"


def test_status_prints_a_tree_of_agents_indented_by_level() -> None:
    def run(iterations: int, agents: list[dict[str, Any]]) -> dict[str, Any]:
        usage = {"input_tokens": 10 * iterations, "output_tokens": 5 * iterations}
        return {"status": "running", "iterations": iterations, "usage": usage, "agents": agents}

    scout = {"id": "r/a/b", "name": "scout", "tool_use_id": "b", "status": "running", "run": run(1, [])}
    status = RunStatus(
        status="running",
        iterations=1,
        agents=[
            {"id": "r/a", "name": "researcher", "tool_use_id": "a", "status": "running", "run": run(2, [scout])},
            {"id": "r/c", "name": "writer", "tool_use_id": "c", "status": "failed"},  # no status of its own
        ],
    )
    assert render_status("r", status)[-4:] == [
        "agents",
        "  researcher (a) · running · 2 turns · 20 input / 10 output tokens · r/a",
        "    scout (b) · running · 1 turns · 10 input / 5 output tokens · r/a/b",
        "  writer (c) · failed · r/c",
    ]


async def test_resuming_after_a_childs_agent_started_still_brings_that_childs_events(
    child_asking_approval: ChildAskingApproval,
) -> None:
    """A child whose call is open at the resume offset comes again from its first event, live or afterwards."""
    # The parent's `agent_started` (offset 4) is out; the child waits for a person.
    async with child_asking_approval() as (run, child_run):
        live = asyncio.ensure_future(asyncio.wait_for(collect(run, after=5), 60))
        await child_run.approve("toolu_C1")
        await run.until_done()
        resumed = await live
        everything = await asyncio.wait_for(collect(run), 60)
        past_the_call = await asyncio.wait_for(collect(run, after=6), 60)
        own_past_the_call = await asyncio.wait_for(collect(run, after=6, agents=False), 60)
    p = ("toolu_P1",)
    started = next(i for i, e in enumerate(everything) if isinstance(e, AgentStarted))
    assert everything[started].offset == 4
    # Resumed after the `agent_started`: the child's every event, then the parent's from offset 5.
    assert resumed == everything[started + 1 :]
    assert shape(resumed) == [
        *call_opening(p),
        (p, "approval_waiting", 1, 4),
        (p, "approval_decided", 1, 5),
        (p, "tool_finished", 1, 6),
        (p, "iteration_started", 2, 7),
        (p, "model_call_started", 2, 7),
        (p, "block_start", 2, 7),
        (p, "text", 2, 7),
        (p, "block_stop", 2, 7),
        (p, "reply", 2, 9),
        (p, "run_finished", 2, 10),
        *PARENT_AFTER_THE_CALL,
    ]
    # Resumed after the call's result: the call is closed there, and its child does not come.
    assert past_the_call == own_past_the_call
    assert {e.path for e in past_the_call} == {()}


FAILING = bad_request("messages: the launch went wrong")
"""Claude's answer to a child's request after its approved call: it rejects it, and the child fails."""


async def test_what_a_failed_child_spent_counts_in_the_parents_usage(
    fake_api: FakeMessagesAPI, child_asking_approval: ChildAskingApproval
) -> None:
    parent = [research("toolu_P1", "Launch."), end_turn("It failed.")]
    async with child_asking_approval(parent, then=FAILING) as (run, child_run):
        await child_run.approve("toolu_C1")
        result = await run.result()
        status = await run.status()
        child_status = await child_run.status()
    # The child's one reply (10 input, 5 output tokens) before its second request failed; the parent's two replies.
    assert (child_status.status, child_status.usage) == ("failed", Usage(input_tokens=10, output_tokens=5))
    assert status.agents == [
        {"id": f"{run.id}/toolu_P1", "name": "researcher", "tool_use_id": "toolu_P1", "status": "failed"}
    ]
    assert result.usage == status.usage == Usage(input_tokens=30, output_tokens=15)
    assert parent_bodies(fake_api)[1]["messages"][-1]["content"][0]["is_error"] is True


class _StatusQueriesFail(client_interceptors.Interceptor):
    """The worker's client, whose status queries (the `child_usage` activity's) fail with ``error``."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    def intercept_client(
        self, next: client_interceptors.OutboundInterceptor
    ) -> client_interceptors.OutboundInterceptor:  # noqa: A002
        return _FailingQueries(next, self.error)


class _FailingQueries(client_interceptors.OutboundInterceptor):
    def __init__(self, next: client_interceptors.OutboundInterceptor, error: Exception) -> None:  # noqa: A002
        super().__init__(next)
        self.error = error

    async def query_workflow(self, input: client_interceptors.QueryWorkflowInput) -> Any:  # noqa: A002, ARG002
        raise self.error


@pytest.mark.parametrize(
    ("error", "attempts"),
    [
        (RPCError("the frontend is overloaded", RPCStatusCode.UNAVAILABLE, b""), 5),  # Temporal refuses: asked again
        (WorkflowQueryFailedError("the child cannot tell"), 1),  # the child cannot tell: asking again cannot help
    ],
    ids=["temporal-refuses", "child-cannot-tell"],
)
async def test_what_a_failed_child_spent_is_not_charged_when_it_cannot_be_read(
    error: Exception,
    attempts: int,
    client: Client,
    runner: AgentRunner,
    task_queue: str,
    fake_api: FakeMessagesAPI,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The parent asks what its failed child spent a bounded number of times, then charges nothing for it and goes
    on: its usage is its own two replies, and Claude is told the child failed."""
    quick = {"initial_interval": timedelta(milliseconds=10), "maximum_interval": timedelta(milliseconds=20)}
    monkeypatch.setattr(subagents, "USAGE_RETRY", dataclasses.replace(subagents.USAGE_RETRY, **quick))
    failing = Client(**{**client.config(), "interceptors": [_StatusQueriesFail(error)]})

    @asynccontextmanager
    async def worker(*tools: Any) -> AsyncIterator[Worker]:
        claude = ClaudeActivities(anthropic_client_factory(fake_api))
        async with build_worker(failing, registry=ToolRegistry(tools), task_queue=task_queue, claude=claude) as w:
            yield w

    parent = [research("toolu_P1", "Launch."), end_turn("It failed.")]
    async with subagent_support.child_asking_approval(runner, worker, fake_api, parent, then=FAILING) as (
        run,
        child_run,
    ):
        await child_run.approve("toolu_C1")
        result = await run.result()
        child_status = await child_run.status()
        history = await run.handle.fetch_history()
    assert (child_status.status, child_status.usage) == ("failed", Usage(input_tokens=10, output_tokens=5))
    assert started_attempts(history)[CHILD_USAGE_ACTIVITY] == [attempts]
    assert (result.status, result.usage) == ("completed", Usage(input_tokens=20, output_tokens=10))
    assert parent_bodies(fake_api)[1]["messages"][-1]["content"][0]["is_error"] is True


async def test_what_a_cancelled_child_spent_counts_in_the_parents_usage_and_budget(
    fake_api: FakeMessagesAPI, child_asking_approval: ChildAskingApproval
) -> None:
    """The child spent 5 output tokens before a person cancelled it: the parent, at 15 of 12 after its next reply,
    is out of budget (without the child's 5 it would be at 10 and ask again)."""
    parent = [research("toolu_P1", "Launch."), research("toolu_P2", "Again."), end_turn("Done.")]
    async with child_asking_approval(parent, budget={"max_output_tokens": 12}) as (run, child_run):
        await child_run.cancel()
        result = await run.result()
        child_status = await child_run.status()
    assert (child_status.status, child_status.usage) == ("cancelled", Usage(input_tokens=10, output_tokens=5))
    assert (result.status, result.detail, result.usage) == (
        "budget_exhausted",
        "The output token budget (15 of 12) is spent.",
        Usage(input_tokens=30, output_tokens=15),
    )
    assert parent_bodies(fake_api)[1]["messages"][-1]["content"] == [
        {
            "type": "tool_result",
            "tool_use_id": "toolu_P1",
            "content": "Error: Agent 'researcher' was cancelled before it finished.",
            "is_error": True,
        }
    ]
