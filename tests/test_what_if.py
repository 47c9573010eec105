"""What-if runs: a fork with a change whose tool calls, made as the run made them, get the run's recorded results.

Each test runs a real run against the dev server and the fake Messages API, forks it with another model, and checks
which tools ran and the exact ``tool_result`` blocks Claude got back.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from anthropic import beta_async_tool
from temporalio.client import WorkflowExecutionStatus

from agent_runner import cli, client
from agent_runner.client import AgentRunner, Run
from agent_runner.contract.errors import InvalidRunInput
from agent_runner.contract.recorded_results import recorded_from
from agent_runner.contract.run_input import parse_run_input
from agent_runner.contract.transcript import canonical
from agent_runner.contract.types import WORKFLOW_TYPE
from agent_runner.testing import DropMidStream, FakeMessagesAPI, Reply, end_turn, tool_use
from tests.conftest import WorkerFactory
from tests.steering_support import CALLS

pytestmark = pytest.mark.usefixtures("fresh_tools")

USER = {"role": "user", "content": "Check the sensors."}
BASE: dict[str, Any] = {"model": "claude-fake-1", "max_tokens": 1024, "messages": [USER]}


@beta_async_tool
async def reading(sensor: str) -> str:
    """Read a sensor; each reading is a new one.

    Args:
        sensor: The sensor.
    """
    CALLS.append(sensor)
    return f"{sensor}: {len(CALLS)}"


def calls(*pairs: tuple[str, str]) -> Reply:
    return Reply([tool_use(tool_use_id, "reading", {"sensor": sensor}) for tool_use_id, sensor in pairs], "tool_use")


def results(*pairs: tuple[str, str], refused: tuple[str, ...] = ()) -> dict[str, Any]:
    blocks: list[dict[str, Any]] = []
    for tool_use_id, content in pairs:
        block: dict[str, Any] = {"type": "tool_result", "tool_use_id": tool_use_id, "content": content}
        if tool_use_id in refused:
            block["is_error"] = True
        blocks.append(block)
    return {"role": "user", "content": blocks}


def asked(*pairs: tuple[str, str]) -> dict[str, Any]:
    return {"role": "assistant", "content": calls(*pairs).content}


REFUSED = (
    "Error: Tool 'reading' was not run: this run answers tool calls only with the results another run recorded, and "
    "none is left for this call with this input."
)


async def recorded_run(runner: AgentRunner, fake_api: FakeMessagesAPI) -> Run:
    """A run that read north and south, then north again: ``north: 1``, ``south: 2``, ``north: 3``."""
    fake_api.script(calls(("toolu_1", "north"), ("toolu_2", "south")), calls(("toolu_3", "north")), end_turn("Done."))
    run = await runner.start(**BASE, tools=[reading])
    await run.until_done()
    assert CALLS == ["north", "south", "north"]
    return run


async def test_a_fork_with_recorded_results_runs_only_the_calls_the_run_did_not_make(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """Another model, the same run from its first turn: a call made as the run made it gets the run's result (the
    second such call the second result, across a continue-as-new), and only the new calls run."""
    async with worker(reading):
        run = await recorded_run(runner, fake_api)
        fake_api.script(
            calls(("toolu_A", "north"), ("toolu_B", "east")),
            calls(("toolu_C", "north"), ("toolu_D", "north")),
            end_turn("North went from 1 to 3."),
        )
        fork = await run.fork(
            1,
            changes={"model": "claude-fake-2", "continue_as_new": {"events": 10}},
            tool_results="recorded",
        )
        await fork.until_done()
        first = await runner.client.get_workflow_handle(fork.id, run_id=fork.handle.first_execution_run_id).describe()
    assert CALLS == ["north", "south", "north", "east", "north"]  # the fork ran east and the third north only
    first_request = fake_api.bodies()[0]  # the run's: the fork's first is it, on another model
    turn = {"model": "claude-fake-2", "max_tokens": 1024, "stream": True}  # a turn on the thread: its new messages
    assert fake_api.bodies()[3:] == [
        {**first_request, "model": "claude-fake-2"},
        {
            **turn,
            "messages": [results(("toolu_A", "north: 1"), ("toolu_B", "east: 4"))],
            "thread": {"type": "continue", "previous_message_id": "msg_fake_004"},
        },
        {
            **turn,
            "messages": [results(("toolu_C", "north: 3"), ("toolu_D", "north: 5"))],
            "thread": {"type": "continue", "previous_message_id": "msg_fake_005"},
        },
    ]
    assert first.status == WorkflowExecutionStatus.CONTINUED_AS_NEW


async def test_a_what_if_with_eager_tools_starts_no_call_early_so_a_dropped_attempt_uses_no_record_up(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """The first attempt's stream drops once its ``north`` call is complete (Claude moved on to the next block), when
    an eager run starts it: answered from the record there, it would use ``north: 1`` up for an attempt whose
    starts are dropped, and the retry's ``north`` would get ``north: 3``. A what-if run starts its calls with the
    reply, whatever ``eager_tools`` says."""
    async with worker(reading):
        run = await recorded_run(runner, fake_api)
        reply = calls(("toolu_A", "north"), ("toolu_B", "east"))
        # message_start, ping, north's start, its 3 input deltas and stop, east's start: then the connection drops.
        fake_api.script(DropMidStream(reply, 8), reply, end_turn("Done."))
        fast = {"initial_interval": "PT0.05S", "maximum_interval": "PT0.1S"}
        fork = await run.fork(1, changes={"eager_tools": True, "model_activity": fast}, tool_results="recorded")
        await fork.until_done()
    assert CALLS == ["north", "south", "north", "east"]
    assert fake_api.bodies()[-1]["messages"][-1] == results(("toolu_A", "north: 1"), ("toolu_B", "east: 4"))


@pytest.mark.usefixtures("temporal_address")
async def test_a_fork_from_the_command_line_with_recorded_results_only_runs_no_tool(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--tool-results recorded-only``: a dry run. A call nothing recorded is answered with an error saying why;
    ``diff`` shows where the fork went otherwise, and ``follow`` reads it once it has ended, without a worker."""
    async with worker(reading):
        run = await recorded_run(runner, fake_api)
        capsys.readouterr()
        fake_api.script(calls(("toolu_A", "south"), ("toolu_B", "east")), end_turn("East is unknown."))
        fork_id = f"what-if-{uuid.uuid4()}"
        command = ["fork", run.id, "--from-iteration", "1", "--model", "claude-fake-2", "--set", "temperature=0.25"]
        assert await cli.amain([*command, "--set", 'model="claude-fake-3"']) == 2
        assert capsys.readouterr().err.endswith("agent-runner fork: error: model given more than once\n")
        command += ["--id", fork_id]
        assert await cli.amain([*command, "--tool-results", "recorded-only", "--detach"]) == 0
        assert capsys.readouterr() == (f"{fork_id}\n", "")
        result = await runner.attach(fork_id).result()
        transcript = await runner.attach(fork_id).transcript()
    assert await cli.amain(["diff", run.id, fork_id, "--exit-code"]) == 1
    run_line = f"{run.id} ── completed · 3 turns · stop_reason end_turn · 30 input / 15 output tokens ──"
    assert capsys.readouterr().out.splitlines() == [
        f"--- {run_line}",
        f"+++ {fork_id} ── completed · 2 turns · stop_reason end_turn · 20 input / 10 output tokens ──",
        "@@ -1,12 +1,9 @@",
        " ── user ──",
        " Check the sensors.",
        " ── assistant ──",
        '-→ reading {"sensor": "north"}',
        ' → reading {"sensor": "south"}',
        "-← reading: north: 1",
        '+→ reading {"sensor": "east"}',
        " ← reading: south: 2",
        f"+← ✗ reading: {REFUSED}",
        " ── assistant ──",
        '-→ reading {"sensor": "north"}',
        "-← reading: north: 3",
        "-── assistant ──",
        "-Done.",
        "+East is unknown.",
    ]
    assert await cli.amain(["diff", run.id, run.id, "--exit-code"]) == 0
    assert capsys.readouterr().out.splitlines() == [f"--- {run_line}", f"+++ {run_line}", "(the same conversation)"]
    assert await cli.amain(["follow", fork_id]) == 0  # no worker: read from the ended run's history and the store
    assert capsys.readouterr().out.splitlines() == [
        "── turn 1 ──",
        '→ reading {"sensor": "south"}',
        '→ reading {"sensor": "east"}',
        "← reading: south: 2",
        f"← ✗ reading: {REFUSED}",
        "── turn 2 ──",
        "East is unknown.",
        "── completed · 2 turns · stop_reason end_turn · 20 input / 10 output tokens ──",
    ]
    assert CALLS == ["north", "south", "north"]  # nothing ran
    assert result.status == "completed"
    assert transcript[1:3] == [
        asked(("toolu_A", "south"), ("toolu_B", "east")),
        results(("toolu_A", "south: 2"), ("toolu_B", REFUSED), refused=("toolu_B",)),
    ]
    assert (fake_api.bodies()[3]["model"], fake_api.bodies()[3]["temperature"]) == ("claude-fake-2", 0.25)


async def test_a_run_started_with_plain_json_takes_recorded_results_as_the_stock_cli_sends_them(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """Input that is not in the held form (the stock CLI's) is held as its messages are: the same call matches, and
    content that looks like a stored placeholder is data."""
    lookalike = [{"type": "text", "text": "see"}, {"agent_runner.stored": "sha256:" + "0" * 64}]
    run_input = {
        **BASE,
        "tools": ["reading"],
        "recorded_tool_results": [
            {"name": "reading", "input": {"sensor": "north"}, "content": "north: 41"},
            {"name": "reading", "input": {"sensor": "odd"}, "content": lookalike, "is_error": True},
        ],
        "unrecorded_tool_calls": "refuse",
    }
    fake_api.script(calls(("toolu_A", "north"), ("toolu_B", "odd"), ("toolu_C", "north")), end_turn("Read."))
    async with worker(reading):
        handle = await runner.client.start_workflow(
            WORKFLOW_TYPE, run_input, id=f"plain-{uuid.uuid4()}", task_queue=runner.task_queue
        )
        await handle.result()
    assert CALLS == []
    assert fake_api.bodies()[1]["messages"][-1] == {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "toolu_A", "content": "north: 41"},
            {"type": "tool_result", "tool_use_id": "toolu_B", "content": lookalike, "is_error": True},
            {"type": "tool_result", "tool_use_id": "toolu_C", "content": REFUSED, "is_error": True},
        ],
    }


def test_recorded_results_are_each_call_with_its_result_in_the_order_of_the_calls() -> None:
    messages = [
        USER,
        asked(("toolu_1", "north"), ("toolu_2", "south")),
        results(("toolu_2", "south: 2"), ("toolu_1", "north: 1")),
        asked(("toolu_3", "north")),  # no result: the run ended before it
    ]
    assert recorded_from(messages) == [
        {"name": "reading", "input": {"sensor": "north"}, "content": "north: 1"},
        {"name": "reading", "input": {"sensor": "south"}, "content": "south: 2"},
    ]


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        (
            {"recorded_tool_results": {"name": "reading"}},
            '`recorded_tool_results` must be a list of recorded calls, each {"name": ..., "input": ..., "content": '
            '..., "is_error": false}; fork a run with `tool_results="recorded"` to have them filled in.',
        ),
        (
            {"recorded_tool_results": [{"name": "", "content": 5}]},
            "`recorded_tool_results[0]` is no recorded call (name: String should have at least 1 character; "
            "content.str: Input should be a valid string; content.list[dict[str,any]]: Input should be a valid list; "
            "content.dict[str,any]: Input should be a valid dictionary): give "
            '{"name": ..., "input": ..., "content": ..., "is_error": false}.',
        ),
        (
            {"unrecorded_tool_calls": "skip"},
            '`unrecorded_tool_calls` must be "run" (a call no recorded result answers runs) or "refuse" (it is '
            "answered with an error: no tool runs); got 'skip'.",
        ),
    ],
    ids=["not-a-list", "bad-entry", "bad-choice"],
)
def test_bad_recorded_results_are_refused_saying_what_to_give(fields: dict[str, Any], problem: str) -> None:
    with pytest.raises(InvalidRunInput) as e:
        parse_run_input({**BASE, **fields})
    assert str(e.value) == f"The run's input was rejected:\n- {problem}"


async def test_a_fork_records_only_the_calls_from_its_turn_on_and_refuses_a_record_too_big_to_carry(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The calls before the fork point are in the fork's history already: from turn 2 on only the last call is
    recorded. A record over ``RECORDED_LIMIT`` is refused before anything starts, saying what to do."""
    monkeypatch.setattr(client, "RECORDED_LIMIT", 100)  # the three calls' record is over, the last one's under
    async with worker(reading):
        run = await recorded_run(runner, fake_api)
        with pytest.raises(InvalidRunInput) as e:
            await run.fork(1, tool_results="recorded")
        fake_api.script(calls(("toolu_A", "north")), end_turn("Still 3."))
        fork = await run.fork(2, tool_results="recorded_only")
        await fork.until_done()
        history = await fork.handle.fetch_history()
    entries = [
        {"name": "reading", "input": {"sensor": sensor}, "content": content}
        for sensor, content in (("north", "north: 1"), ("south", "south: 2"), ("north", "north: 3"))
    ]
    assert str(e.value) == (
        f"Run {run.id} made 3 tool calls from turn 1 on, {len(canonical(entries)):,} bytes of record: more than a "
        "run's input carries (100). Fork from a later turn."
    )
    started = json.loads(history.events[0].workflow_execution_started_event_attributes.input.payloads[0].data)
    assert (started["recorded_tool_results"], started["unrecorded_tool_calls"]) == (entries[2:], "refuse")
    assert CALLS == ["north", "south", "north"]
    assert fake_api.bodies()[-1]["messages"][-1]["content"] == [
        {"type": "tool_result", "tool_use_id": "toolu_A", "content": "north: 3"}
    ]


async def test_a_fork_change_to_none_leaves_the_field_out_and_the_rest_is_the_runs(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    fake_api.script(end_turn("Terse."), end_turn("Less terse."))
    async with worker(reading):
        run = await runner.start(**BASE, system="Be terse.", temperature=0.5, tools=[reading])
        await run.until_done()
        await (await run.fork(1, changes={"system": None, "model": "claude-fake-2"})).until_done()
    first, fork = fake_api.bodies()
    assert (first["system"], first["temperature"]) == ("Be terse.", 0.5)
    assert fork == {**{k: v for k, v in first.items() if k != "system"}, "model": "claude-fake-2"}


async def test_a_fork_refuses_changes_to_what_its_fork_point_decides_and_input_the_run_would_refuse(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    async with worker(reading):
        run = await recorded_run(runner, fake_api)
        with pytest.raises(InvalidRunInput) as kept:
            await run.fork(1, changes={"tools": [], "messages": []}, tool_results="recorded")
        with pytest.raises(InvalidRunInput) as refused:
            await run.fork(1, changes={"max_tokens": 0})
    assert str(kept.value) == (
        "A fork's changes cannot set `messages`, `tools`: its messages and tools are the fork point's, and "
        "`tool_results` says how its tool calls are answered. Fork from another iteration, or start a new run with "
        "`AgentRunner.start`."
    )
    assert str(refused.value).startswith("The run's input was rejected:\n- ") and "max_tokens" in str(refused.value)
    assert len(fake_api.bodies()) == 3  # nothing was started
