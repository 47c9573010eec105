"""``agent-runner follow`` of a run that has ended: read from its history and the content store, never a query.

Each test follows a real run (dev server, fake Messages API over HTTP, an in-process worker) live while it runs, to
its end; then stops the worker and follows it again. The second follow needs no worker (a query would wait ~20 s for
the gone one, Temporal remembering its poll for a while, then for ever), and prints exactly what the first printed:
the same turns, tool results, summary or ``error:`` line, and exit code.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from anthropic import beta_async_tool

from agent_runner import cli
from agent_runner.client import AgentRunner, Run
from agent_runner.testing import (
    DropMidStream,
    ErrorMidStream,
    FakeMessagesAPI,
    Reply,
    bad_request,
    end_turn,
    text,
    thinking,
    tool_use,
)
from tests.conftest import WorkerFactory
from tests.steering_support import CALLS, GATE, delete_file, gated, wait_status
from tests.tools_for_tests import fail_disk, get_weather

USER = {"role": "user", "content": "Weather in Paris?"}
BASE: dict[str, Any] = {"model": "claude-fake-1", "max_tokens": 1024, "messages": [USER]}
FAST_RETRY = {"initial_interval": "PT0.05S", "maximum_interval": "PT0.1S"}
"""A model call cut off mid-stream is retried at once."""
BIG = "line of a long report\n" * 300  # 6,600 characters: over the inline limit, so the store holds it
pytestmark = [pytest.mark.usefixtures("temporal_address", "fresh_tools")]


@beta_async_tool
async def long_report(topic: str) -> str:
    """A report too long to travel inline.

    Args:
        topic: The topic.
    """
    return f"{topic}:\n{BIG}"


FIRST_TURN = Reply(
    [
        thinking("The gate first,\nthen the rest."),
        text("Let me check."),
        tool_use("toolu_G", "gated", {"city": "Paris"}),
        tool_use("toolu_W", "get_weather", {"city": "Paris"}),
        tool_use("toolu_F", "fail_disk", {"path": "/data"}),
        tool_use("toolu_R", "long_report", {"topic": "disk"}),
        tool_use("toolu_N", "no_such_tool", {}),  # answered by the run itself: no activity, no result in history
    ],
    "tool_use",
)
TOOLS = [gated, get_weather, fail_disk, long_report]
FIRST_TURN_LINES = [
    "── turn 1 ──",
    "┆ The gate first,",
    "┆ then the rest.",
    "Let me check.",
    '→ gated {"city": "Paris"}',
    '→ get_weather {"city": "Paris"}',
    '→ fail_disk {"path": "/data"}',
    '→ long_report {"topic": "disk"}',
    "→ no_such_tool {}",
]


async def follow_live(
    run_id: str, capsys: pytest.CaptureFixture[str], then: Callable[[], Awaitable[None]]
) -> tuple[int, str, str]:
    """Follow the run while it runs: ``then`` (which lets it end) once the first turn is printed."""
    capsys.readouterr()
    following = asyncio.create_task(cli.amain(["follow", run_id]))
    out = err = ""
    async with asyncio.timeout(20):
        while "── turn 1 ──" not in out:  # the run is open until `then`: this follow reads it live
            await asyncio.sleep(0.05)
            captured = capsys.readouterr()
            out, err = out + captured.out, err + captured.err
        await then()
        code = await following
    captured = capsys.readouterr()
    return code, out + captured.out, err + captured.err


async def follow_ended(run_id: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """Follow the run, which has ended, with no worker running."""
    capsys.readouterr()
    # A guard against waiting for ever, not a benchmark: a query of the ended run would never be answered.
    async with asyncio.timeout(60):
        code = await cli.amain(["follow", run_id])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


async def follow_twice(
    runner: AgentRunner,
    worker: WorkerFactory,
    capsys: pytest.CaptureFixture[str],
    tools: list[Any],
    then: Callable[[Run], Awaitable[None]],
    **start: Any,
) -> tuple[Run, tuple[int, str, str]]:
    """Start a run, follow it live to its end (``then(run)`` lets it end), stop the worker, and follow it again.

    Returns:
        The run, and what the second follow printed: exactly what the first did.
    """
    async with worker(*tools):
        run = await runner.start(**BASE, tools=tools, **start)
        live = await follow_live(run.id, capsys, lambda: then(run))
        GATE.set()  # a `gated` call a cancelled run left waiting ends, so the worker stops at once
    ended = await follow_ended(run.id, capsys)
    assert ended == live
    return run, ended


async def open_gate(_: Run) -> None:
    GATE.set()


async def test_follow_of_a_completed_run_prints_what_following_it_live_did_without_a_worker(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_api.script(FIRST_TURN, end_turn("Sunny, 21C."))
    run, ended = await follow_twice(runner, worker, capsys, TOOLS, open_gate)
    code, out, err = ended
    assert (code, err) == (0, "")  # no "note: waiting for a worker"
    assert out.splitlines() == [
        *FIRST_TURN_LINES,
        "← gated: report for Paris",
        "← get_weather: sunny, 21C in Paris",
        "← ✗ fail_disk: ValueError('boom: disk full at /data')",
        "← long_report: disk:",  # read back from the store, and clipped as live
        *["    line of a long report"] * 7,
        "    … (+11 lines)",
        "← ✗ no_such_tool: Error: Tool 'no_such_tool' not found",
        "── turn 2 ──",
        "Sunny, 21C.",
        "── completed · 2 turns · stop_reason end_turn · 20 input / 10 output tokens ──",
    ]
    assert CALLS == ["Paris"]

    # Once the store's sweep has removed the run's live log (after its retention), each reply is made into its
    # blocks: the same lines.
    store = os.environ["AGENT_RUNNER_STORE"].removeprefix("sqlite:///")
    with contextlib.closing(sqlite3.connect(store)) as db, db:
        assert db.execute("DELETE FROM live WHERE run_id = ?", (run.id,)).rowcount > 0
    assert await follow_ended(run.id, capsys) == ended

    # From a later turn, as a live follow from it prints.
    assert await cli.amain(["follow", run.id, "--from-iteration", "2"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "── turn 2 ──",
        "Sunny, 21C.",
        "── completed · 2 turns · stop_reason end_turn · 20 input / 10 output tokens ──",
    ]


async def test_follow_of_an_ended_run_marks_a_cut_off_attempt_as_following_it_live_did(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, capsys: pytest.CaptureFixture[str]
) -> None:
    calls = [text("Checking the weather in Paris now."), tool_use("toolu_G", "gated", {"city": "Paris"})]
    reply = Reply(calls, "tool_use")
    fake_api.script(DropMidStream(reply, 5), reply, end_turn("Sunny."))  # the first attempt's stream is cut off
    _, ended = await follow_twice(runner, worker, capsys, [gated], open_gate, model_activity=FAST_RETRY)
    assert ended == (
        0,
        "── turn 1 ──\n"
        "Checking the weather in \n"  # the cut-off attempt's text, as its live log holds it
        "↺ attempt 1 of turn 1 was cut off; retrying\n"
        "Checking the weather in Paris now.\n"
        '→ gated {"city": "Paris"}\n'
        "← gated: report for Paris\n"
        "── turn 2 ──\n"
        "Sunny.\n"
        "── completed · 2 turns · stop_reason end_turn · 20 input / 10 output tokens ──\n",
        "",
    )


async def test_follow_of_an_ended_run_shows_the_calls_that_waited_for_approval_as_following_it_live_did(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, capsys: pytest.CaptureFixture[str]
) -> None:
    calls = [
        text("Deleting."),
        tool_use("toolu_D", "delete_file", {"path": "/tmp"}),
        tool_use("toolu_W", "get_weather", {"city": "Paris"}),
    ]
    fake_api.script(Reply(calls, "tool_use"), end_turn("Done."))

    async def approve(run: Run) -> None:
        await wait_status(run, "waiting_for_approval")
        await run.approve("toolu_D")

    run, ended = await follow_twice(
        runner, worker, capsys, [delete_file, get_weather], approve, approval={"tools": ["delete_file"]}
    )
    assert ended == (
        0,
        "── turn 1 ──\n"
        "Deleting.\n"
        '→ delete_file {"path": "/tmp"}\n'
        '→ get_weather {"city": "Paris"}\n'
        f'⏸ waiting for approval: delete_file {{"path": "/tmp"}} (toolu_D) — agent-runner approve {run.id} toolu_D\n'
        "← delete_file: deleted /tmp\n"
        "← get_weather: sunny, 21C in Paris\n"
        "── turn 2 ──\n"
        "Done.\n"
        "── completed · 2 turns · stop_reason end_turn · 20 input / 10 output tokens ──\n",
        "",
    )
    assert CALLS == ["delete /tmp"]


async def test_follow_of_an_ended_step_mode_run_shows_its_pauses_as_following_it_live_did(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_api.script(
        Reply([text("Checking."), tool_use("toolu_W", "get_weather", {"city": "Paris"})], "tool_use"),
        end_turn("Sunny."),
    )

    async def advance_to_the_end(run: Run) -> None:
        for turn in (1, 2):
            await wait_status(run, "waiting_for_step", turn)
            await run.advance(iteration=turn)

    run, ended = await follow_twice(runner, worker, capsys, [get_weather], advance_to_the_end, step=True)
    assert ended == (
        0,
        "── turn 1 ──\n"
        "Checking.\n"
        '→ get_weather {"city": "Paris"}\n'
        f"⏸ paused after turn 1 — agent-runner advance {run.id}\n"
        "← get_weather: sunny, 21C in Paris\n"
        "── turn 2 ──\n"
        "Sunny.\n"
        f"⏸ paused after turn 2 — agent-runner advance {run.id}\n"
        "── completed · 2 turns · stop_reason end_turn · 20 input / 10 output tokens ──\n",
        "",
    )


async def test_follow_of_a_failed_run_prints_its_error_without_a_worker(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_api.script(FIRST_TURN, bad_request("messages: too long"))
    _, ended = await follow_twice(runner, worker, capsys, TOOLS, open_gate)
    code, out, err = ended
    assert code == 1
    assert out.splitlines()[: len(FIRST_TURN_LINES)] == FIRST_TURN_LINES
    assert out.splitlines()[-1] == "← ✗ no_such_tool: Error: Tool 'no_such_tool' not found"
    assert err.startswith("error: ") and "messages: too long" in err, err
    assert err.count("\n") == 1, err


async def test_follow_of_a_run_whose_model_call_failed_mid_stream_prints_what_it_streamed(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, capsys: pytest.CaptureFixture[str]
) -> None:
    reply = Reply([text("Checking the weather in Paris now."), tool_use("toolu_G", "gated", {"city": "Paris"})])
    fake_api.script(
        Reply([text("The gate first."), tool_use("toolu_G", "gated", {"city": "Paris"})], "tool_use"),
        ErrorMidStream(reply, 5, error_type="invalid_request_error", message="prompt is too long"),
    )
    _, ended = await follow_twice(runner, worker, capsys, [gated], open_gate)
    assert ended == (
        1,
        "── turn 1 ──\n"
        "The gate first.\n"
        '→ gated {"city": "Paris"}\n'
        "← gated: report for Paris\n"
        "── turn 2 ──\n"
        "Checking the weather in \n",  # what the failed call streamed: its live log
        "error: Claude's API failed mid-stream: invalid_request_error: prompt is too long. Fix the run's input and "
        "start the run again.\n",
    )


async def test_follow_of_a_cancelled_run_prints_the_turn_it_had_without_a_worker(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_api.script(FIRST_TURN)
    run, ended = await follow_twice(runner, worker, capsys, TOOLS, Run.cancel)  # while the gated tool runs
    # The gated call never finished: the turn's results, printed once all are in, are not.
    assert ended == (1, "\n".join(FIRST_TURN_LINES) + "\n", f"error: Run {run.id} was cancelled.\n")


async def test_follow_of_an_ended_run_prints_an_agent_calls_answer_as_following_it_live_did(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, capsys: pytest.CaptureFixture[str]
) -> None:
    researcher = {"name": "researcher", "description": "Researches one question.", "system": "You research."}
    calls = [
        tool_use("toolu_A", "researcher", {"task": "Weather in Paris?"}),
        tool_use("toolu_G", "gated", {"city": "Paris"}),
    ]

    def respond(body: dict[str, Any]) -> Any:
        if body.get("system") == "You research.":
            return end_turn("It is sunny.")
        answered = body["messages"][-1]["content"] != USER["content"]  # the tools' results came
        return end_turn("Sunny, then.") if answered else Reply(calls, "tool_use")

    fake_api.responder = respond
    _, ended = await follow_twice(runner, worker, capsys, [gated], open_gate, agents=[researcher])
    assert ended == (
        0,
        "── turn 1 ──\n"
        '→ researcher {"task": "Weather in Paris?"}\n'
        '→ gated {"city": "Paris"}\n'
        "← researcher: It is sunny.\n"  # the child run's answer, from its completion in the parent's history
        "← gated: report for Paris\n"
        "── turn 2 ──\n"
        "Sunny, then.\n"
        "── completed · 2 turns · stop_reason end_turn · 30 input / 15 output tokens ──\n",  # the child's included
        "",
    )


async def test_follow_of_a_run_that_continued_as_new_prints_every_turn_of_its_chain(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, capsys: pytest.CaptureFixture[str]
) -> None:
    cities = [f"City{i}" for i in range(6)]
    fake_api.script(
        Reply([text("The gate first."), tool_use("toolu_G", "gated", {"city": "Paris"})], "tool_use"),
        *(
            Reply([text(f"Checking {c}."), tool_use(f"toolu_{c}", "get_weather", {"city": c})], "tool_use")
            for c in cities
        ),
        end_turn("All done."),
    )
    run, ended = await follow_twice(
        runner, worker, capsys, [gated, get_weather], open_gate, continue_as_new={"events": 40}
    )
    first_event = await anext(run.history_events())
    assert first_event.workflow_execution_started_event_attributes.continued_execution_run_id  # a chain
    code, out, err = ended
    assert (code, err) == (0, "")
    assert out.splitlines() == [
        "── turn 1 ──",
        "The gate first.",
        '→ gated {"city": "Paris"}',
        "← gated: report for Paris",
        *(
            line
            for turn, city in enumerate(cities, start=2)
            for line in (
                f"── turn {turn} ──",
                f"Checking {city}.",
                f'→ get_weather {{"city": "{city}"}}',
                f"← get_weather: sunny, 21C in {city}",
            )
        ),
        "── turn 8 ──",
        "All done.",
        "── completed · 8 turns · stop_reason end_turn · 80 input / 40 output tokens ──",
    ]
