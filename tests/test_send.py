"""A conversation outlives its run: ``Run.send`` / ``agent-runner send`` go on with an ended run in a new run.

The new run carries the old one's transcript, its place on the thread, its usage and its refusal-fallback pin, and
names it in ``continue_from``; the old run is left as it was, its fork points included.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from agent_runner import cli
from agent_runner.client import AgentRunner, Run
from agent_runner.contract.errors import AgentRunError, InvalidRunInput
from agent_runner.contract.run_input import parse_run_input
from agent_runner.contract.steering import INLINE_TOOLS_BETA
from agent_runner.testing import FakeMessagesAPI, Reply, ScriptItem, end_turn, text, tool_use
from tests.conftest import WorkerFactory, stock_start, stock_temporal
from tests.steering_support import wait_status
from tests.test_loop import GET_WEATHER_DEF
from tests.test_mcp import config, server_tools
from tests.tools_for_tests import get_time, get_weather

BASE = {"model": "claude-fake-1", "max_tokens": 1024, "system": "You are terse."}
USER = {"role": "user", "content": "What's the weather in Paris?"}
CALL = {"role": "assistant", "content": [tool_use("toolu_S1", "get_weather", {"city": "Paris"})]}
RESULT = {
    "role": "user",
    "content": [{"type": "tool_result", "tool_use_id": "toolu_S1", "content": "sunny, 21C in Paris"}],
}
SUNNY = {"role": "assistant", "content": [text("Sunny.")]}
AGAIN = {"role": "user", "content": [text("And in Oslo?")]}
ADDED = {
    "role": "system",
    "content": [{"type": "tool_addition", "tool": {"type": "tool_definition", "definition": get_time.to_dict()}}],
}
TIME_CALL = {"role": "assistant", "content": [tool_use("toolu_T1", "get_time", {"city": "Oslo"})]}


def script(fake_api: FakeMessagesAPI) -> None:
    fake_api.script(
        Reply([tool_use("toolu_S1", "get_weather", {"city": "Paris"})], "tool_use"),
        end_turn("Sunny."),
        end_turn("Cold."),
    )


async def ended_run_that_added_get_time(runner: AgentRunner, fake_api: FakeMessagesAPI, *then: ScriptItem) -> Run:
    """An ended stepped run (no thread) that ``add_tools`` gave ``get_time`` before its first step.

    Claude calls ``get_weather`` for Paris (``toolu_S1``), then says "Sunny."; ``then`` answers the requests after
    those. A worker with ``get_weather`` and ``get_time`` must be running.
    """
    fake_api.script(
        Reply([tool_use("toolu_S1", "get_weather", {"city": "Paris"})], "tool_use"), end_turn("Sunny."), *then
    )
    run = await runner.start(
        **BASE, messages=[USER], tools=[get_weather], thread=False, step=True, betas=[INLINE_TOOLS_BETA]
    )
    await wait_status(run, "waiting_for_step", 1)
    await run.add_tools(get_time)
    await run.advance()
    await wait_status(run, "waiting_for_step", 2)
    await run.advance()
    await run.until_done()
    return run


async def advance_until_done(run: Run, steps: int) -> None:
    """Let a stepped run take ``steps`` steps, one at a time, and wait for it to end."""
    for iteration in range(1, steps + 1):
        await wait_status(run, "waiting_for_step", iteration)
        await run.advance()
    await run.until_done()


async def test_send_continues_the_thread_of_an_ended_run_in_a_new_run(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """On a thread the new run's first turn is a ``continue`` from the old run's last reply with only the message."""
    script(fake_api)
    fake_api.script(end_turn("Sunny again."))
    async with worker(get_weather):
        run = await runner.start(**BASE, messages=[USER], tools=[get_weather])
        await run.until_done()
        before = await run.transcript()
        after = await run.send("And in Oslo?")
        final = await after.until_done()
        transcript = await after.transcript()
        status = await after.status()
        old_status = await run.status()
        description = await after.handle.describe()
        fork = await run.fork(2)  # the old run's fork points stay available
        await fork.until_done()
    bodies = fake_api.bodies()
    assert bodies[2] == {
        "model": "claude-fake-1",
        "max_tokens": 1024,
        "messages": [AGAIN],
        "thread": {"type": "continue", "previous_message_id": "msg_fake_002"},
        "stream": True,
    }
    # The fork starts from the old run's second request, on a thread of its own.
    assert (bodies[3]["thread"], bodies[3]["messages"]) == ({"type": "create"}, [USER, CALL, RESULT])
    assert final.content[0].text == "Cold."  # type: ignore[union-attr]
    assert before == [USER, CALL, RESULT, SUNNY]
    assert transcript == [*before, AGAIN, {"role": "assistant", "content": [text("Cold.")]}]
    assert (old_status.status, old_status.iterations) == ("completed", 2)
    assert (status.status, status.iterations) == ("completed", 1)
    assert (status.usage.input_tokens, status.usage.output_tokens) == (30, 15)  # the old run's usage carried on
    assert description.id != run.id and description.status is not None


async def test_send_resends_the_whole_history_without_a_thread(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    script(fake_api)
    fake_api.script(end_turn("Cold again."))
    async with worker(get_weather):
        run = await runner.start(**BASE, messages=[USER], tools=[get_weather], thread=False)
        await run.until_done()
        after = await run.send([text("And in Oslo?")], id=f"{run.id}-next")
        await after.until_done()
        fork = await after.fork(1)  # a run that a send started forks as any other
        await fork.until_done()
    assert after.id == f"{run.id}-next"
    continued = {**BASE, "messages": [USER, CALL, RESULT, SUNNY, AGAIN], "tools": [GET_WEATHER_DEF], "stream": True}
    assert fake_api.bodies()[2:] == [continued, continued]


@pytest.mark.parametrize("thread", [True, False], ids=["thread", "full_history"])
async def test_a_run_without_tools_its_send_and_its_fork_send_an_empty_tool_list_as_the_sdk(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, thread: bool
) -> None:
    """``tools: []`` on every request that sends tools, as the SDK's runner given ``tools=[]``; none on a continue."""
    fake_api.script(end_turn("Sunny."), end_turn("Cold."), end_turn("Sunny."))
    async with worker():
        run = await runner.start(**BASE, messages=[USER], thread=thread)
        await run.until_done()
        after = await run.send("And in Oslo?")
        await after.until_done()
        fork = await run.fork(1)
        await fork.until_done()
    first = {**BASE, "messages": [USER], "tools": [], "stream": True}
    if thread:
        first["thread"] = {"type": "create"}
        sent = {
            "model": "claude-fake-1",
            "max_tokens": 1024,
            "messages": [AGAIN],
            "thread": {"type": "continue", "previous_message_id": "msg_fake_001"},
            "stream": True,
        }
    else:
        sent = {**BASE, "messages": [USER, SUNNY, AGAIN], "tools": [], "stream": True}
    assert fake_api.bodies() == [first, sent, first]  # the fork sends the run's first request again
    beta = "message-threads-2026-08-12" if thread else None
    assert [r.headers.get("anthropic-beta") for r in fake_api.requests] == [beta, beta, beta]


async def test_send_keeps_the_model_a_refusal_fell_back_to(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    details = {"type": "refusal", "category": None, "fallback_credit_token": "tok_N"}
    refused = Reply([text("No.")], "refusal", stop_details=details)
    fake_api.script(refused, end_turn("Sunny."), end_turn("Cold."))
    async with worker(get_weather):
        run = await runner.start(
            **BASE, messages=[USER], thread=False, refusal_fallbacks=["claude-fallback-2"], max_iterations=3
        )
        await run.until_done()
        after = await run.send("And in Oslo?")
        await after.until_done()
    assert [b["model"] for b in fake_api.bodies()] == ["claude-fake-1", "claude-fallback-2", "claude-fallback-2"]
    spliced = {"role": "assistant", "content": [text("No."), text("Sunny.")]}  # the seam between them is not sent
    assert fake_api.bodies()[2]["messages"] == [USER, spliced, AGAIN]


async def test_send_goes_on_with_the_tools_the_run_ended_with(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """A tool ``add_tools`` gave the ended run runs in the new one: the conversation told Claude it has it."""
    async with worker(get_weather, get_time):
        run = await ended_run_that_added_get_time(
            runner,
            fake_api,
            Reply([tool_use("toolu_T1", "get_time", {"city": "Oslo"})], "tool_use"),
            end_turn("14:05."),
        )
        after = await run.send("And the time in Oslo?")
        await advance_until_done(after, 2)
    ask = {"role": "user", "content": [text("And the time in Oslo?")]}
    result = {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "toolu_T1", "content": "14:05 in Oslo"}],
    }
    history = [USER, CALL, RESULT, ADDED, SUNNY, ask]
    # The tools the request names stay as the run started (the prompt cache); the addition is in the history.
    assert fake_api.bodies()[2:] == [
        {**BASE, "messages": history, "tools": [GET_WEATHER_DEF], "stream": True},
        {**BASE, "messages": [*history, TIME_CALL, result], "tools": [GET_WEATHER_DEF], "stream": True},
    ]


async def test_send_of_a_run_with_an_mcp_server_lists_the_server_again_and_runs_its_tools(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, tmp_path: Path
) -> None:
    """The send point names the run's registered tools only: the new run lists its servers afresh and runs theirs."""
    lookup = {"role": "assistant", "content": [tool_use("toolu_L1", "lookup", {"city": "Oslo"})]}
    fake_api.script(end_turn("Sunny."), Reply(lookup["content"], "tool_use"), end_turn("Cold."))
    async with worker(get_weather, mcp=config(tmp_path)):
        run = await runner.start(**BASE, messages=[USER], tools=[get_weather], mcp=["files"], thread=False)
        await run.until_done()
        after = await run.send("And in Oslo?")
        await after.until_done()
        transcript = await after.transcript()
    assert [body["tools"] for body in fake_api.bodies()] == [[GET_WEATHER_DEF, *server_tools()]] * 3
    assert transcript == [
        USER,
        SUNNY,
        AGAIN,
        lookup,
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_L1", "content": [text("Oslo: 21C")]}],
        },
        {"role": "assistant", "content": [text("Cold.")]},
    ]


async def test_send_to_a_run_still_going_says_to_inject(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    fake_api.script(Reply([text("slow")], delay=30))
    async with worker(get_weather):
        run = await runner.start(**BASE, messages=[USER])
        await asyncio.to_thread(fake_api.wait_for_requests, 1)
        with pytest.raises(AgentRunError) as refused:
            await run.send("And in Oslo?")
        await run.terminate("test over")
    assert str(refused.value) == (
        f"Cannot send a message after run {run.id}: The run is still running: send it a message with `inject` "
        "instead, or wait for it to end."
    )


@pytest.mark.usefixtures("temporal_address")
async def test_send_from_the_command_line(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, capsys: pytest.CaptureFixture[str]
) -> None:
    script(fake_api)
    async with worker(get_weather):
        run = await runner.start(**BASE, messages=[USER], tools=[get_weather])
        await run.until_done()
        capsys.readouterr()
        assert await cli.amain(["send", run.id, "And in Oslo?", "--id", f"{run.id}-cli", "--detach"]) == 0
        assert capsys.readouterr().out == f"{run.id}-cli\n"
        assert (await runner.attach(f"{run.id}-cli").until_done()).content[0].text == "Cold."  # type: ignore[union-attr]
    assert fake_api.bodies()[2]["messages"] == [AGAIN]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            {"continue_from": {"run_id": "x"}},
            "`continue_from` is not what a run's `send_point` query answered (ValidationError); continue a run with "
            "`Run.send` or `agent-runner send`.",
        ),
        (
            {
                "continue_from": {"run_id": "x", "conversation": {"params": BASE, "tools": []}},
                "messages": [USER, SUNNY],
            },
            "With `continue_from`, `messages` are the new user messages only.",
        ),
    ],
)
def test_a_bad_continue_from_is_refused_at_start(extra: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidRunInput) as e:
        parse_run_input({**BASE, "messages": [USER], **extra})
    assert str(e.value) == f"The run's input was rejected:\n- {message}"


@pytest.mark.usefixtures("temporal_address")
async def test_a_send_point_and_a_fork_point_copied_from_the_stock_cli_start_the_runs_send_and_fork_start(
    client: Client, task_queue: str, runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """The stock `temporal` CLI prints an empty JSON array as ``null``: a run without tools, or with nothing pending,
    has several in its send point, and the run started from it goes on as ``Run.send``'s would."""
    fake_api.script(end_turn("Sunny."), end_turn("Cold."), end_turn("Sunny."))
    async with worker():
        run = await runner.start(**BASE, messages=[USER], thread=False)
        await run.until_done()
        query = ["workflow", "query", "--workflow-id", run.id, "--name"]
        printed = await asyncio.to_thread(stock_temporal, client, *query, "send_point")
        point = json.loads(printed)["queryResult"][0]
        assert point["continue_from"]["conversation"]["tools"] is None  # what the CLI makes of `[]`
        sent = {**point["input"], "messages": [AGAIN], "continue_from": point["continue_from"]}
        await asyncio.to_thread(stock_start, client, task_queue, f"{run.id}-sent", sent)
        printed = await asyncio.to_thread(stock_temporal, client, *query, "fork_point", "--input", "1")
        fork = json.loads(printed)["queryResult"][0]["input"]
        await asyncio.to_thread(stock_start, client, task_queue, f"{run.id}-fork", fork)
        results = [await runner.attach(f"{run.id}-{end}").result() for end in ("sent", "fork")]
    assert [(r.status, r.iterations) for r in results] == [("completed", 1), ("completed", 1)]
    first = {**BASE, "messages": [USER], "tools": [], "stream": True}
    assert fake_api.bodies() == [first, {**BASE, "messages": [USER, SUNNY, AGAIN], "tools": [], "stream": True}, first]


@pytest.mark.usefixtures("temporal_address")
async def test_a_message_the_api_refuses_is_refused_before_a_new_run_starts(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, capsys: pytest.CaptureFixture[str]
) -> None:
    """`send RUN ""` started a run that failed at once, where `run ""` is refused before anything starts."""
    fake_api.script(end_turn("Sunny."))
    async with worker():
        run = await runner.start(**BASE, messages=[USER])
        await run.until_done()
        with pytest.raises(InvalidRunInput) as refused:
            await run.send(" ")
        capsys.readouterr()
        code = await cli.amain(["send", run.id, "", "--task-queue", runner.task_queue, "--detach"])
        listed = await runner.list(f"TaskQueue = '{runner.task_queue}'")
    assert str(refused.value) == (
        "The message was rejected:\n- `messages[0]`.content[0] is a text block with no text but whitespace; the API "
        "rejects it. Leave the block out."
    )
    assert (code, capsys.readouterr().err) == (
        1,
        "error: The message was rejected:\n- `messages[0]`.content[0] is a text block with no text but whitespace; "
        "the API rejects it. Leave the block out.\n",
    )
    assert [summary.id for summary in listed] == [run.id]  # no other run started
    assert len(fake_api.bodies()) == 1
