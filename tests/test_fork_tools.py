"""A fork runs the tools its run had at the fork point (issue 13), not only the ones its input names.

A tool ``add_tools`` gave the run before the fork point is announced in the history the fork starts from, so Claude
may call it: the fork runs it, as the run did. A fork from before the addition does not have it. The tools the
request names stay the input's, so the fork's first request is the run's request for that reply.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from agent_runner.client import AgentRunner
from agent_runner.contract.errors import InvalidRunInput
from agent_runner.contract.run_input import parse_run_input
from agent_runner.contract.steering import INLINE_TOOLS_BETA
from agent_runner.contract.types import ToolSpec
from agent_runner.testing import FakeMessagesAPI, Reply, end_turn, text, tool_use
from agent_runner.workflows.forking import carried_tools_from, started_with, tools_at
from agent_runner.workflows.patches import COMPACT_RESULTS_PATCH
from agent_runner.workflows.state import RunState
from tests.conftest import WorkerFactory
from tests.steering_support import wait_status
from tests.test_loop import GET_WEATHER_DEF
from tests.test_mcp import config, server_tools
from tests.test_send import (
    ADDED,
    BASE,
    CALL,
    RESULT,
    TIME_CALL,
    USER,
    advance_until_done,
    ended_run_that_added_get_time,
)
from tests.test_umbrella_patch import markers
from tests.tools_for_tests import get_time, get_weather


async def test_a_fork_runs_a_tool_added_before_its_fork_point_and_not_one_added_after(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    async with worker(get_weather, get_time):
        run = await ended_run_that_added_get_time(
            runner,
            fake_api,
            # The fork from the second request: get_time was added before it, so it runs.
            Reply([tool_use("toolu_T1", "get_time", {"city": "Oslo"})], "tool_use"),
            end_turn("14:05."),
            # The fork from the first request: get_time came later, so the call takes the unknown-tool path.
            Reply([tool_use("toolu_T1", "get_time", {"city": "Oslo"})], "tool_use"),
            end_turn("No clock."),
        )
        late = await run.fork(2)
        await advance_until_done(late, 2)
        early = await run.fork(1)
        await advance_until_done(early, 2)
        late_transcript = await late.transcript()
        early_transcript = await early.transcript()
        description = await late.handle.describe()
    ran = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_T1", "content": "14:05 in Oslo"}]}
    not_found = {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "toolu_T1",
                "content": "Error: Tool 'get_time' not found",
                "is_error": True,
            }
        ],
    }
    history = [USER, CALL, RESULT, ADDED]
    # The request names the tools the run started with; the addition is in the history, as in the run.
    assert fake_api.bodies()[1:] == [
        {**BASE, "messages": history, "tools": [GET_WEATHER_DEF], "stream": True},
        {**BASE, "messages": history, "tools": [GET_WEATHER_DEF], "stream": True},
        {**BASE, "messages": [*history, TIME_CALL, ran], "tools": [GET_WEATHER_DEF], "stream": True},
        {**BASE, "messages": [USER], "tools": [GET_WEATHER_DEF], "stream": True},
        {**BASE, "messages": [USER, TIME_CALL, not_found], "tools": [GET_WEATHER_DEF], "stream": True},
    ]
    assert late_transcript == [*history, TIME_CALL, ran, {"role": "assistant", "content": [text("14:05.")]}]
    assert early_transcript == [USER, TIME_CALL, not_found, {"role": "assistant", "content": [text("No clock.")]}]
    assert description.id != run.id


async def test_a_fork_does_not_run_a_tool_a_raw_definition_replaced_before_its_fork_point(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """As in the run: a raw definition is sent, never run, so the same-named function tool stops running."""
    raw = {"name": "get_weather", "description": "Weather, from elsewhere.", "input_schema": {"type": "object"}}
    fake_api.script(
        Reply([tool_use("toolu_S1", "get_weather", {"city": "Paris"})], "tool_use"),
        Reply([tool_use("toolu_S2", "get_weather", {"city": "Rome"})], "tool_use"),
        end_turn("Sunny in Paris."),
        Reply([tool_use("toolu_S3", "get_weather", {"city": "Oslo"})], "tool_use"),
        end_turn("No weather."),
    )
    async with worker(get_weather):
        run = await runner.start(
            **BASE, messages=[USER], tools=[get_weather], thread=False, step=True, betas=[INLINE_TOOLS_BETA]
        )
        await wait_status(run, "waiting_for_step", 1)
        await run.advance()
        await wait_status(run, "waiting_for_step", 2)
        await run.add_tools(raw)  # counts for the reply being handled too: Rome's call is not run
        await run.advance()
        await wait_status(run, "waiting_for_step", 3)
        await run.advance()
        await run.until_done()
        fork = await run.fork(3)
        await advance_until_done(fork, 2)
        transcript = await fork.transcript()
    bodies = fake_api.bodies()

    def not_found(tool_use_id: str) -> dict[str, Any]:
        error = "Error: Tool 'get_weather' not found"
        return {"type": "tool_result", "tool_use_id": tool_use_id, "content": error, "is_error": True}

    assert bodies[3] == bodies[2]  # the fork's first request is the run's third
    assert bodies[2]["messages"][-2:] == [
        {"role": "user", "content": [not_found("toolu_S2")]},
        {
            "role": "system",
            "content": [{"type": "tool_addition", "tool": {"type": "tool_definition", "definition": raw}}],
        },
    ]
    assert transcript[len(bodies[2]["messages"]) :] == [
        {"role": "assistant", "content": [tool_use("toolu_S3", "get_weather", {"city": "Oslo"})]},
        {"role": "user", "content": [not_found("toolu_S3")]},
        {"role": "assistant", "content": [text("No weather.")]},
    ]
    # The run's one patch marker: the addition's patch, asked after its tools' lookup (a local activity) it would
    # record in a workflow task a replay may not know of yet, is implied (`workflows/patches.py`, `implied`).
    assert markers(await run.handle.fetch_history()) == [COMPACT_RESULTS_PATCH]


async def test_a_fork_of_a_sent_run_runs_the_tools_the_send_carried(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """A run ``send`` started runs the tools the ended run had; a fork of it, from before any edit, runs them too."""
    async with worker(get_weather, get_time):
        run = await ended_run_that_added_get_time(
            runner,
            fake_api,
            end_turn("Cold."),
            Reply([tool_use("toolu_T1", "get_time", {"city": "Oslo"})], "tool_use"),
            end_turn("14:05."),
        )
        after = await run.send("And in Oslo?")
        await advance_until_done(after, 1)
        fork = await after.fork(1)
        await advance_until_done(fork, 2)
        transcript = await fork.transcript()
    assert transcript[-3:] == [
        TIME_CALL,
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_T1", "content": "14:05 in Oslo"}]},
        {"role": "assistant", "content": [text("14:05.")]},
    ]


async def test_a_fork_of_a_run_with_an_mcp_server_runs_the_servers_tools_and_the_ones_added(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, tmp_path: Path
) -> None:
    """The fork point names the registered tools only: the fork lists its servers afresh and runs their tools too."""
    lookup = {
        "role": "assistant",
        "content": [tool_use("toolu_L1", "lookup", {"city": "Oslo"}), TIME_CALL["content"][0]],
    }
    fake_api.script(
        Reply([tool_use("toolu_S1", "get_weather", {"city": "Paris"})], "tool_use"),
        end_turn("Sunny."),
        Reply(lookup["content"], "tool_use"),
        end_turn("Done."),
    )
    async with worker(get_weather, get_time, mcp=config(tmp_path)):
        run = await runner.start(
            **BASE,
            messages=[USER],
            tools=[get_weather],
            mcp=["files"],
            thread=False,
            step=True,
            betas=[INLINE_TOOLS_BETA],
        )
        await wait_status(run, "waiting_for_step", 1)
        await run.add_tools(get_time)  # an edit: the run notes its registered tools for the fork points after it
        await advance_until_done(run, 2)
        fork = await run.fork(2)
        await advance_until_done(fork, 2)
        transcript = await fork.transcript()
    assert fake_api.bodies()[2]["tools"] == [GET_WEATHER_DEF, *server_tools()]
    assert transcript[-3:] == [
        lookup,
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_L1", "content": [text("Oslo: 21C")]},
                {"type": "tool_result", "tool_use_id": "toolu_T1", "content": "14:05 in Oslo"},
            ],
        },
        {"role": "assistant", "content": [text("Done.")]},
    ]


async def test_a_fork_of_a_run_that_continued_as_new_runs_a_tool_added_before_its_fork_point(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """The run's notes of its tools go across continue-as-new, for the fork points it keeps."""
    fake_api.script(
        Reply([tool_use("toolu_S1", "get_weather", {"city": "Paris"})], "tool_use"),
        end_turn("Sunny."),
        Reply([tool_use("toolu_T1", "get_time", {"city": "Oslo"})], "tool_use"),
        end_turn("14:05."),
    )
    async with worker(get_weather, get_time):
        run = await runner.start(
            **BASE,
            messages=[USER],
            tools=[get_weather],
            thread=False,
            step=True,
            continue_as_new={"events": 10},
            betas=[INLINE_TOOLS_BETA],
        )
        await wait_status(run, "waiting_for_step", 1)
        await run.add_tools(get_time)
        await advance_until_done(run, 2)
        status = await run.status()
        fork = await run.fork(2)
        await advance_until_done(fork, 2)
        transcript = await fork.transcript()
    ran = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_T1", "content": "14:05 in Oslo"}]}
    assert status.continuations == 1
    assert transcript[-3:] == [TIME_CALL, ran, {"role": "assistant", "content": [text("14:05.")]}]


def _state(tools: list[str], tools_from: dict[int, list[str]], replies: int = 0) -> RunState:
    specs = {name: ToolSpec(name=name, definition={"name": name}) for name in tools}
    return RunState(
        tools=specs, tools_from=tools_from, replies=[{}] * replies, started_at=datetime(2026, 12, 1, tzinfo=UTC)
    )


def test_the_tools_at_a_fork_point_are_the_last_noted_at_or_before_it() -> None:
    state = _state(["a", "b"], {3: ["a", "b"], 6: ["b"]})
    assert [tools_at(state, n, None) for n in (1, 2, 3, 5, 6, 9)] == [None, None, ["a", "b"], ["a", "b"], ["b"], ["b"]]
    # A run a send or a fork started ran the tools that one said, until an edit changed them.
    assert tools_at(state, 2, ["c"]) == ["c"]
    assert started_with({"forked_from": {"run_id": "r", "iteration": 2, "tools": ["c"]}}) == ["c"]
    assert started_with({"forked_from": {"run_id": "r", "iteration": 2, "tools": None}}) is None


def test_continue_as_new_carries_what_the_fork_points_it_keeps_need() -> None:
    state = _state(["a"], {3: ["a", "b"], 6: ["b"], 9: ["a"]})
    assert carried_tools_from(state, 7) == {6: ["b"], 9: ["a"]}  # fork points from 8 on: 6's set holds for 8
    assert carried_tools_from(state, 1) == {3: ["a", "b"], 6: ["b"], 9: ["a"]}
    assert carried_tools_from(state, 8) == {9: ["a"]}


@pytest.mark.parametrize(
    ("forked_from", "message"),
    [
        ({"run_id": "r"}, "`forked_from` is not what a run's fork point named"),
        ({"run_id": "r", "iteration": 1, "tools": "a"}, "`forked_from` is not what a run's fork point named"),
    ],
)
def test_a_bad_forked_from_is_refused_at_start(forked_from: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidRunInput, match=message):
        parse_run_input({**BASE, "messages": [USER], "forked_from": forked_from})
