"""The built-in ``sleep`` tool: a durable timer Claude asks for, which a person (``wake``) or a message cuts short.

Sleeps here are either short (they run out) or an hour long (something must cut them short, or the test would hang):
no test waits on the clock.
"""

from __future__ import annotations

import asyncio
import signal
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from agent_runner import cli
from agent_runner.client import WAITING_STATUSES, AgentRunner, Run
from agent_runner.contract.errors import EditRejected, InvalidRunInput, NoWorker
from agent_runner.contract.events import ToolFinished
from agent_runner.contract.run_input import parse_run_input
from agent_runner.contract.types import RunResult
from agent_runner.testing import FakeMessagesAPI, Reply, end_turn, text, tool_use
from tests.conftest import WorkerFactory, stock_update
from tests.steering_support import wait_status
from tests.tools_for_tests import get_time

SLEEP_DEFINITION = {
    "name": "sleep",
    "description": (
        "Wait before going on: for a number of `seconds`, or `until` a time. Nothing runs while you sleep; a person "
        "or a new message may wake you early, and the result says whether the time ran out or what woke you. One "
        "sleep lasts at most 3600 seconds."
    ),
    "input_schema": {
        "type": "object",
        "properties": {
            "seconds": {"type": "number", "minimum": 0, "description": "How long to wait, in seconds."},
            "until": {
                "type": "string",
                "description": "When to wake: an ISO 8601 date and time with its time zone, such as "
                "2026-12-24T09:00:00Z.",
            },
        },
    },
}

BASE: dict[str, Any] = {
    "model": "claude-fake-1",
    "max_tokens": 256,
    "messages": [{"role": "user", "content": "Check again in a while."}],
}


def sleeps(tool_input: dict[str, Any], *more: dict[str, Any]) -> Reply:
    return Reply([text("Waiting."), tool_use("toolu_S", "sleep", tool_input), *more], "tool_use")


def results_sent(fake: FakeMessagesAPI) -> list[dict[str, Any]]:
    """The user content of the second request: the sleep's result (and what joined it)."""
    content: list[dict[str, Any]] = fake.bodies()[1]["messages"][-1]["content"]
    return content


def result_block(content: str, tool_use_id: str = "toolu_S") -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": tool_use_id, "content": content}


async def test_a_short_sleep_runs_out_and_claude_is_told(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    fake_api.script(sleeps({"seconds": 1}), end_turn("Awake."))
    async with worker():
        run = await runner.start(**BASE, sleep={"max_seconds": 3600})
        result = await run.result()
        status = await run.status()
    assert result.status == "completed"
    assert (status.status, status.sleeping_until) == ("completed", None)
    assert fake_api.bodies()[0]["tools"] == [SLEEP_DEFINITION]
    assert results_sent(fake_api) == [result_block("Slept 1 second: the time ran out.")]


async def test_a_person_wakes_a_long_sleep_with_a_reason(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    fake_api.script(sleeps({"seconds": 7200}), end_turn("Reading the report."))
    async with worker():
        run = await runner.start(**BASE, sleep={"max_seconds": 3600})
        await wait_status(run, "sleeping")
        status = await run.status()
        assert status.sleeping_until is not None
        until = datetime.fromisoformat(status.sleeping_until)
        # An hour's sleep, not a short one; and not the two hours asked, over the run's limit.
        assert timedelta(minutes=50) < until - datetime.now(UTC) <= timedelta(hours=1)
        await run.wake("The report is ready.")
        result = await run.result()
    assert result.status == "completed"
    assert results_sent(fake_api) == [
        result_block(
            "Woken before the sleep (3600 seconds) was over: a person woke you. They said: The report is ready."
        )
    ]


async def test_an_injected_message_cuts_a_sleep_short_and_follows_its_result(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    fake_api.script(sleeps({"seconds": 3600}), end_turn("Thanks."))
    async with worker():
        run = await runner.start(**BASE, sleep=True)
        await wait_status(run, "sleeping")
        assert "sleeping" in WAITING_STATUSES
        version = await run.inject("No need to wait: here it is.")
        assert version is not None
        result = await run.result()
    assert result.status == "completed"
    assert results_sent(fake_api) == [
        result_block("Woken before the sleep (3600 seconds) was over: a new message came, and follows."),
        {"type": "text", "text": "No need to wait: here it is."},
    ]


async def test_a_stop_cuts_a_sleep_short(runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI) -> None:
    fake_api.script(sleeps({"seconds": 3600}))
    async with worker():
        run = await runner.start(**BASE, sleep=True)
        await wait_status(run, "sleeping")
        await run.stop("enough")
        result = await run.result()
        transcript = await run.transcript()
    assert result.status == "stopped"
    assert len(fake_api.requests) == 1
    assert transcript[-1]["content"] == [
        result_block("Woken before the sleep (3600 seconds) was over: the run was stopped.")
    ]


async def test_a_retry_cuts_a_sleep_short_and_its_result_is_discarded(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    fake_api.script(sleeps({"seconds": 3600}), end_turn("No sleep this time."))
    async with worker():
        run = await runner.start(**BASE, sleep=True)
        await wait_status(run, "sleeping", 1)
        await run.retry()
        result = await run.result()
    assert result.status == "completed"
    assert fake_api.bodies()[1]["messages"] == BASE["messages"]  # the turn sent again, the sleep's result dropped


async def test_in_step_mode_a_run_sleeps_between_its_pauses(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    fake_api.script(sleeps({"seconds": 3600}), end_turn("Awake."))
    async with worker():
        run = await runner.start(**BASE, sleep=True, step={"review_results": True})
        await wait_status(run, "waiting_for_step", 1)
        await run.advance()
        await wait_status(run, "sleeping", 1)
        # An advance for the review pause to come is accepted now, and waits for the sleep to end.
        advance = asyncio.create_task(run.advance(iteration=1))
        await run.wake()
        await advance
        await wait_status(run, "waiting_for_step", 2)
        await run.advance()
        assert (await run.result()).status == "completed"
    assert results_sent(fake_api) == [
        result_block("Woken before the sleep (3600 seconds) was over: a person woke you.")
    ]


async def test_a_sleep_longer_than_the_run_allows_is_cut_to_the_limit(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    fake_api.script(
        sleeps({"until": "2999-01-01T00:00:00Z"}, tool_use("toolu_E", "sleep", {"seconds": 1})), end_turn("Awake.")
    )
    async with worker():
        run = await runner.start(**BASE, sleep={"max_seconds": 1})
        assert (await run.result()).status == "completed"
    assert results_sent(fake_api) == [
        result_block(
            "Slept 1 second, the longest this run allows (you asked to sleep until 2999-01-01T00:00:00+00:00): the "
            "time ran out."
        ),
        result_block("Slept 1 second: the time ran out.", "toolu_E"),  # just the limit is not cut
    ]


async def test_a_time_already_past_and_a_bad_input_answer_at_once(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    fake_api.script(
        Reply(
            [
                tool_use("toolu_A", "sleep", {"until": "2001-01-01T00:00:00+00:00"}),
                tool_use("toolu_B", "sleep", {"seconds": 5, "until": "2001-01-01T00:00:00Z"}),
                tool_use("toolu_C", "sleep", {"until": "tomorrow"}),
                tool_use("toolu_D", "sleep", {"until": "2030-01-01T09:00:00"}),
                tool_use("toolu_E", "sleep", {}),
                tool_use("toolu_F", "sleep", {"seconds": "5"}),
                tool_use("toolu_G", "sleep", {"seconds": True}),
                tool_use("toolu_H", "sleep", {"seconds": -1}),
                tool_use("toolu_J", "sleep", {"seconds": 0}),
                tool_use("toolu_K", "sleep", {"seconds": 0.5}),
            ],
            "tool_use",
        ),
        end_turn("Done."),
    )
    usage = (
        "Call `sleep` with `seconds` (a number of seconds) or `until` (an ISO 8601 date and time with its time "
        "zone), one of the two."
    )
    async with worker():
        run = await runner.start(**BASE, sleep=True)
        assert (await run.result()).status == "completed"
    assert results_sent(fake_api) == [
        result_block("Slept until 2001-01-01T00:00:00+00:00: the time ran out.", "toolu_A"),
        {
            **result_block(f"Error: Give `seconds` or `until`, not both and not neither. {usage}", "toolu_B"),
            "is_error": True,
        },
        {
            **result_block(f"Error: `until` must be an ISO 8601 date and time, not 'tomorrow'. {usage}", "toolu_C"),
            "is_error": True,
        },
        {
            **result_block(
                "Error: `until` must say its time zone (such as 2030-01-01T09:00:00Z or 2030-01-01T09:00:00+01:00). "
                + usage,
                "toolu_D",
            ),
            "is_error": True,
        },
        {
            **result_block(f"Error: Give `seconds` or `until`, not both and not neither. {usage}", "toolu_E"),
            "is_error": True,
        },
        {**result_block(f"Error: `seconds` must be a number, not '5'. {usage}", "toolu_F"), "is_error": True},
        {**result_block(f"Error: `seconds` must be a number, not True. {usage}", "toolu_G"), "is_error": True},
        {**result_block(f"Error: `seconds` must not be negative (-1). {usage}", "toolu_H"), "is_error": True},
        result_block("Slept 0 seconds: the time ran out.", "toolu_J"),
        result_block("Slept 0.5 seconds: the time ran out.", "toolu_K"),
    ]


async def test_a_sleep_that_ends_leaves_the_run_waiting_on_what_still_holds_it(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """When one of a turn's sleeps runs out, the run stays ``sleeping`` while another lasts, and goes back to
    ``waiting_for_approval`` while a call waits for a person: not to ``running``."""
    fake_api.script(
        Reply(
            [tool_use("toolu_L", "sleep", {"seconds": 3600}), tool_use("toolu_S", "sleep", {"seconds": 1})], "tool_use"
        ),
        Reply(
            [tool_use("toolu_R", "sleep", {"seconds": 1}), tool_use("toolu_T", "get_time", {"city": "Paris"})],
            "tool_use",
        ),
        end_turn("Noon, and awake."),
    )
    async with worker(get_time):
        run = await runner.start(**BASE, tools=[get_time], sleep=True, approval={"tools": ["get_time"]})
        await wait_status(run, "sleeping")
        status = await run.status()  # while both sleep: the later end
        assert status.sleeping_until is not None
        assert datetime.fromisoformat(status.sleeping_until) - datetime.now(UTC) > timedelta(minutes=50)
        await finished(run, "toolu_S")
        status = await run.status()
        assert status.status == "sleeping"
        assert status.sleeping_until is not None  # the hour-long sleep's end
        assert datetime.fromisoformat(status.sleeping_until) - datetime.now(UTC) > timedelta(minutes=50)
        await run.wake()
        await finished(run, "toolu_R")
        status = await run.status()
        assert (status.status, status.sleeping_until) == ("waiting_for_approval", None)
        await run.approve("toolu_T")
        assert (await run.result()).status == "completed"
    assert results_sent(fake_api) == [
        result_block("Woken before the sleep (3600 seconds) was over: a person woke you.", "toolu_L"),
        result_block("Slept 1 second: the time ran out.", "toolu_S"),
    ]
    assert fake_api.bodies()[2]["messages"][-1]["content"] == [
        result_block("Slept 1 second: the time ran out.", "toolu_R"),
        result_block("14:05 in Paris", "toolu_T"),
    ]


async def finished(run: Run, tool_use_id: str) -> None:
    """Wait for the ``tool_finished`` live event of the call ``tool_use_id``."""
    async with asyncio.timeout(20):
        async for event in run.events():
            if isinstance(event, ToolFinished) and event.tool_use_id == tool_use_id:
                return


async def test_a_replaced_history_cuts_a_sleep_short(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    fake_api.script(sleeps({"seconds": 3600}), end_turn("Starting over."))
    replacement = [{"role": "user", "content": "Forget the wait: start over."}]
    async with worker():
        run = await runner.start(**BASE, sleep=True)
        await wait_status(run, "sleeping")
        snapshot = await run.versioned_transcript()
        await run.replace_history(replacement, expected_version=snapshot.version)
        async with asyncio.timeout(20):  # not the hour
            assert (await run.result()).status == "completed"
    assert fake_api.bodies()[1]["messages"] == replacement


async def test_wake_is_refused_when_nothing_sleeps(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    fake_api.script(Reply([tool_use("toolu_T", "get_time", {"city": "Paris"})], "tool_use"), end_turn("Noon."))
    async with worker(get_time):
        run = await runner.start(**BASE, tools=[get_time], sleep=True, approval={"tools": ["get_time"]})
        await wait_status(run, "waiting_for_approval")
        with pytest.raises(EditRejected, match=r"^wake was refused: The run is not sleeping \(it is waiting_for_appr"):
            await run.wake()
        await run.approve("toolu_T")
        assert (await run.result()).status == "completed"


@pytest.mark.parametrize("sleep_first", [True, False], ids=["sleep_first", "approval_first"])
async def test_an_approval_decided_during_a_sleep_leaves_the_run_sleeping(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, sleep_first: bool
) -> None:
    """A call waiting for approval outranks a sleep in the run's status, whichever of the reply's calls came first
    (``list --status waiting_for_approval`` and the console find it); the decision puts the run back to ``sleeping``
    while a sleep lasts."""
    calls = [tool_use("toolu_S", "sleep", {"seconds": 3600}), tool_use("toolu_T", "get_time", {"city": "Paris"})]
    fake_api.script(Reply(calls if sleep_first else calls[::-1], "tool_use"), end_turn("Noon, and awake."))
    async with worker(get_time):
        run = await runner.start(**BASE, tools=[get_time], sleep=True, approval={"tools": ["get_time"]})
        await wait_status(run, "waiting_for_approval")
        assert (await run.status()).sleeping_until is not None
        await run.approve("toolu_T")
        await wait_status(run, "sleeping")
        await run.wake()
        assert (await run.result()).status == "completed"
    woken = result_block("Woken before the sleep (3600 seconds) was over: a person woke you.")
    paris = result_block("14:05 in Paris", "toolu_T")
    assert results_sent(fake_api) == ([woken, paris] if sleep_first else [paris, woken])


@pytest.mark.usefixtures("temporal_address")
async def test_the_command_line_and_the_stock_cli_wake_a_run(
    client: Client,
    runner: AgentRunner,
    worker: WorkerFactory,
    fake_api: FakeMessagesAPI,
    capsys: pytest.CaptureFixture[str],
) -> None:
    fake_api.script(sleeps({"seconds": 3600}), sleeps({"seconds": 3600}), end_turn("Up."))
    async with worker():
        run = await runner.start(**BASE, sleep=True)
        await wait_status(run, "sleeping", 1)
        assert await cli.amain(["wake", run.id, "--task-queue", runner.task_queue, "--reason", "Go on."]) == 0
        assert capsys.readouterr().out == "woken: Claude is told that a person cut its sleep short\n"
        await wait_status(run, "sleeping", 2)
        await asyncio.to_thread(stock_update, client, run.id, "wake", {})
        assert (await run.result()).status == "completed"
    assert fake_api.bodies()[1]["messages"][-1]["content"] == [
        result_block("Woken before the sleep (3600 seconds) was over: a person woke you. They said: Go on.")
    ]
    assert fake_api.bodies()[2]["messages"][-1]["content"] == [
        result_block("Woken before the sleep (3600 seconds) was over: a person woke you.")
    ]


@pytest.mark.parametrize(
    ("sleep", "tools", "problem"),
    [
        (
            {"max_seconds": 0},
            [],
            '`sleep` must be true, or an object such as {"max_seconds": 3600} (a positive whole number of seconds): '
            "Input should be greater than or equal to 1.",
        ),
        (
            {"max": 5},
            [],
            '`sleep` must be true, or an object such as {"max_seconds": 3600} (a positive whole number of seconds): '
            "Extra inputs are not permitted.",
        ),
        (
            True,
            [{"name": "sleep", "input_schema": {"type": "object"}}],
            "`sleep` offers Claude a built-in tool named `sleep`, and the run has a tool or agent of that name: rename "
            "it, or leave `sleep` out.",
        ),
    ],
    ids=["zero", "unknown_field", "name_taken"],
)
def test_a_bad_sleep_option_is_refused_at_the_door(sleep: Any, tools: list[Any], problem: str) -> None:
    with pytest.raises(InvalidRunInput) as caught:
        parse_run_input({**BASE, "sleep": sleep, "tools": tools})
    assert str(caught.value) == f"The run's input was rejected:\n- {problem}"


def test_without_the_option_claude_is_offered_no_sleep() -> None:
    assert parse_run_input(BASE).tools == []
    assert parse_run_input({**BASE, "sleep": False}).sleep is None
    assert parse_run_input({**BASE, "sleep": True}).tools == [
        {**SLEEP_DEFINITION, "description": SLEEP_DEFINITION["description"].replace("3600", "86400")}
    ]


@pytest.mark.slow
async def test_a_sleep_survives_its_worker_being_killed(
    client: Client, fake_api: FakeMessagesAPI, tmp_path: Path, temporal_address: str
) -> None:
    """The timer is Temporal's: the worker that started the sleep dies, the time runs out with no worker at all, and
    the next worker finishes the run from there."""
    from tests.test_durability import worker_process

    fake_api.script(sleeps({"seconds": 5}), end_turn("Awake."))
    runner = AgentRunner(client, task_queue=f"sleep-kill-{uuid.uuid4()}")
    marks, log = tmp_path / "marks.txt", tmp_path / "worker.log"
    with worker_process(temporal_address, runner.task_queue, fake_api, marks, log) as first:
        run = await runner.start(**BASE, sleep=True)
        await _asleep(run)
        first.send_signal(signal.SIGKILL)
        first.wait()
    await _timer_fired(run)
    with worker_process(temporal_address, runner.task_queue, fake_api, marks, log):
        result = RunResult.model_validate(await run.handle.result())
    assert result.status == "completed"
    assert results_sent(fake_api) == [result_block("Slept 5 seconds: the time ran out.")]
    assert len(fake_api.requests) == 2


async def _asleep(run: Run) -> None:
    """Wait until the run sleeps, while its worker process starts (a query finds no worker until it polls)."""
    async with asyncio.timeout(60):
        while True:
            try:
                if (await run.status()).status == "sleeping":
                    return
            except NoWorker:
                pass
            await asyncio.sleep(0.1)


async def _timer_fired(run: Run) -> None:
    """Wait until the server records the sleep's timer firing (no worker is running)."""
    async with asyncio.timeout(30):
        while True:
            history = await run.handle.fetch_history()
            if any(e.HasField("timer_fired_event_attributes") for e in history.events):
                return
            await asyncio.sleep(0.2)


async def test_a_sleep_ends_when_the_runs_time_budget_does(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """A sleep of ten minutes in a run with two seconds to live slept on, holding the run open past its budget."""
    from tests.test_umbrella_patch import markers

    fake_api.script(sleeps({"seconds": 600}), end_turn("Out of time; I did not get to check again."))
    async with worker():
        run = await runner.start(**BASE, sleep={"max_seconds": 3600}, budget={"timeout": "PT2S", "summarize": True})
        async with asyncio.timeout(30):
            result = await run.result()
        history = await run.handle.fetch_history()
    assert (result.status, result.detail) == ("budget_exhausted", "The time budget (0:00:02) is spent.")
    assert results_sent(fake_api) == [
        result_block("Slept until the run's time budget ran out (you asked to sleep 600 seconds): the run ends now."),
        text("The time budget (0:00:02) is spent. Do not call tools any more: answer now with what you have."),
    ]
    assert "sleep-ends-with-the-time-budget" in markers(history)
