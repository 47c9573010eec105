"""Budget negotiation (``on_spent="ask"``, ``advise``): a spent budget pauses the run for a person, not its end.

Claude sums up and estimates what finishing takes, the run waits as an approval named ``budget``; new limits go on
(also across continue-as-new and a worker restart), a denial, a stop or limits that are no budget do not.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

import aiohttp
import pytest
from temporalio.client import Client

from agent_runner import BudgetRequest, StopRun, budget_policy, cli
from agent_runner.activities.budget_policies import BudgetPolicy
from agent_runner.activities.tools import ToolRegistry
from agent_runner.client import AgentRunner
from agent_runner.contract.errors import EditRejected, InvalidRunInput, ToolNotRegistered
from agent_runner.contract.run_input import parse_run_input
from agent_runner.testing import FakeMessagesAPI, Reply, end_turn, text, tool_use
from tests.conftest import WorkerFactory, stock_start, stock_update
from tests.steering_support import wait_status
from tests.test_console import get, post
from tests.test_steering_cli import Output, following
from tests.tools_for_tests import get_weather

BASE: dict[str, Any] = {
    "model": "claude-fake-1",
    "max_tokens": 256,
    "messages": [{"role": "user", "content": "Check the weather in five cities."}],
    "thread": False,
}
CITIES = ["Paris", "Oslo", "Rome", "Lima", "Kyiv"]
SUMMARY = "Done: Paris, Oslo, Rome. Left: Lima, Kyiv; about 2 turns and 20 output tokens."
SPENT = "output token budget (30 of 25)"
ASKED = (
    f"The {SPENT} is spent. Do not call tools now: sum up what you have done and what is left to do, and estimate "
    "how many more input and output tokens finishing would take. A person will decide whether you go on."
)
NOTE = (
    f"The {SPENT} is spent and Claude has summed up. Approve with new limits as the input to go on (for instance "
    '{"max_output_tokens": 40000}); deny to end the run with its summary.'
)


def call(n: int) -> Reply:
    return Reply(
        [tool_use(f"toolu_{n}", "get_weather", {"city": CITIES[n - 1]})],
        "tool_use",
        usage={"input_tokens": 100, "output_tokens": 10},
    )


def weather(n: int) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": f"toolu_{n}", "content": f"sunny, 21C in {CITIES[n - 1]}"}


def summary() -> Reply:
    return end_turn(SUMMARY, usage={"input_tokens": 100, "output_tokens": 5})


ASK = {"max_output_tokens": 25, "on_spent": "ask"}


async def test_a_spent_budget_asks_a_person_and_approved_limits_go_on(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    fake_api.script(call(1), call(2), call(3), summary(), call(4), end_turn("All five are sunny."))
    async with worker(get_weather):
        run = await runner.start(**BASE, tools=[get_weather], budget=ASK)
        await wait_status(run, "waiting_for_approval", iterations=4)
        pending = await run.pending_approvals()
        await run.approve("budget_1", input={"max_output_tokens": 100})
        result = await run.result()
    assert [p.model_dump(exclude={"requested_at"}) for p in pending] == [
        {
            "tool_use_id": "budget_1",
            "name": "budget",
            "input": {"max_output_tokens": 25, "on_spent": "ask"},
            "iteration": 4,
            "note": NOTE,
        }
    ]
    bodies = fake_api.bodies()
    assert len(bodies) == 6
    # The summary turn: no tool may be called, and Claude reads why.
    assert bodies[3]["tool_choice"] == {"type": "none"}
    assert bodies[3]["messages"][-1] == {"role": "user", "content": [weather(3), {"type": "text", "text": ASKED}]}
    # The run goes on from the summary, told of the new limits, with the request's own tool_choice (none given).
    assert "tool_choice" not in bodies[4]
    assert bodies[4]["messages"][-2:] == [
        {"role": "assistant", "content": [text(SUMMARY)]},
        {
            "role": "user",
            "content": [
                {
                    "type": "text",
                    "text": "A person raised the budget. Budget left for this task: 65 of 100 output tokens. Pace "
                    "your work to finish within it. Go on with the task.",
                }
            ],
        },
    ]
    assert (result.status, result.iterations, result.detail) == ("completed", 6, None)
    assert result.final_message is not None and result.final_message["content"] == [text("All five are sunny.")]


@pytest.mark.usefixtures("fresh_tools", "temporal_address")
async def test_status_says_what_is_left_of_the_budget_as_it_stands(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_api.script(call(1), call(2), call(3), summary(), call(4), end_turn("All five are sunny."))
    async with worker(get_weather):
        run = await runner.start(**BASE, tools=[get_weather], budget=ASK)
        await wait_status(run, "waiting_for_approval", iterations=4)
        asking = await run.status()
        await run.approve("budget_1", input={"max_output_tokens": 100})
        await run.result()
    # Once it has ended, with no worker: read from its result.
    assert await cli.amain(["status", run.id]) == 0
    assert asking.budget_left == "0 of 25 output tokens"
    assert "budget left  50 of 100 output tokens" in capsys.readouterr().out.splitlines()


@pytest.mark.usefixtures("fresh_tools", "temporal_address")
@pytest.mark.parametrize("by", ["client", "cli"])
async def test_a_denied_request_ends_the_run_with_claudes_summary(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, capsys: pytest.CaptureFixture[str], by: str
) -> None:
    fake_api.script(call(1), call(2), call(3), summary(), end_turn("never sent"))
    async with worker(get_weather):
        run = await runner.start(**BASE, tools=[get_weather], budget=ASK)
        await wait_status(run, "waiting_for_approval", iterations=4)
        if by == "client":
            await run.deny("budget_1", "No more spending on this.")
        else:
            assert await cli.amain(["deny", run.id, "budget_1"]) == 0
            assert capsys.readouterr().out == "denied budget_1: the run ends with Claude's summary\n"
        result = await run.result()
        status = await run.status()
    assert (result.status, result.iterations, result.detail) == ("budget_exhausted", 4, f"The {SPENT} is spent.")
    assert result.final_message is not None and result.final_message["content"] == [text(SUMMARY)]
    assert len(fake_api.requests) == 4
    assert status.pending_approvals == []


async def test_the_approval_timeout_ends_the_request_even_where_it_approves_tool_calls(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """A timeout has no limits to go on with: a budget request is never approved by one."""
    fake_api.script(call(1), call(2), call(3), summary(), end_turn("never sent"))
    async with worker(get_weather):
        run = await runner.start(
            **BASE, tools=[get_weather], budget=ASK, approval={"timeout": "PT1S", "on_timeout": "approve"}
        )
        result = await run.result()
    assert (result.status, result.iterations, result.detail) == ("budget_exhausted", 4, f"The {SPENT} is spent.")
    assert result.final_message is not None and result.final_message["content"] == [text(SUMMARY)]
    assert len(fake_api.requests) == 4


async def test_a_stop_while_the_run_asks_ends_it_stopped(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    fake_api.script(call(1), call(2), call(3), summary())
    async with worker(get_weather):
        run = await runner.start(**BASE, tools=[get_weather], budget=ASK)
        await wait_status(run, "waiting_for_approval", iterations=4)
        await run.stop("The task was called off.")
        result = await run.result()
    assert (result.status, result.detail) == ("stopped", "The task was called off.")
    assert len(fake_api.requests) == 4


async def test_a_retry_while_the_run_asks_is_refused_and_the_request_still_waits(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """A retry would end the request's wait and so the run, its budget spent: it is refused with what to do."""
    fake_api.script(call(1), call(2), call(3), summary(), end_turn("All five are sunny."))
    async with worker(get_weather):
        run = await runner.start(**BASE, tools=[get_weather], budget=ASK)
        await wait_status(run, "waiting_for_approval", iterations=4)
        with pytest.raises(EditRejected) as refused:
            await run.retry()
        assert [p.tool_use_id for p in await run.pending_approvals()] == ["budget_1"]
        await run.approve("budget_1", input={"max_output_tokens": 100})
        result = await run.result()
    assert str(refused.value) == (
        "retry_turn was refused: The run waits for more budget (budget_1), and a retry would spend more: approve "
        "budget_1 with new limits, then retry; or deny it to end the run."
    )
    assert (result.status, len(fake_api.requests)) == ("completed", 5)


@pytest.mark.parametrize(
    ("limits", "refusal"),
    [
        (None, 'Approve a budget request with the new limits as its input, for instance {"max_output_tokens": 20000}.'),
        (
            {"max_output_tokens": 30},
            "With these limits the output token budget (35 of 30) is still spent: give limits above what the run has "
            "spent.",
        ),
        (
            {"max_output": 100},
            "The new limits are not a budget (max_output: Extra inputs are not permitted); give budget fields, for "
            'instance {"max_output_tokens": 20000}.',
        ),
        (
            {"max_cost_usd": 1},
            "The new limits are not a budget (limits: Value error, `max_cost_usd` needs `prices` (US dollars per "
            'million input and output tokens)); give budget fields, for instance {"max_output_tokens": 20000}.',
        ),
    ],
    ids=["no-limits", "still-spent", "unknown-field", "cost-without-prices"],
)
async def test_limits_the_run_could_not_go_on_with_are_refused_and_the_request_still_waits(
    runner: AgentRunner,
    worker: WorkerFactory,
    fake_api: FakeMessagesAPI,
    limits: dict[str, Any] | None,
    refusal: str,
) -> None:
    fake_api.script(call(1), call(2), call(3), summary(), end_turn("Finished."))
    async with worker(get_weather):
        run = await runner.start(**BASE, tools=[get_weather], budget=ASK)
        await wait_status(run, "waiting_for_approval", iterations=4)
        with pytest.raises(EditRejected) as refused:
            await run.approve("budget_1", input=limits)
        still = [p.tool_use_id for p in await run.pending_approvals()]
        await run.approve("budget_1", input={"max_output_tokens": 50})
        result = await run.result()
    assert str(refused.value) == f"approve_tool was refused: {refusal}"
    assert still == ["budget_1"]
    assert (result.status, result.iterations) == ("completed", 5)


async def test_the_stock_temporal_cli_answers_a_budget_request_with_plain_json(
    client: Client, task_queue: str, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """Everything a run is asked can be answered without our client: the approval is plain JSON, held or not."""
    fake_api.script(call(1), call(2), call(3), summary(), end_turn("Lima and Kyiv: sunny."))
    run_input = {**BASE, "tools": ["get_weather"], "budget": ASK}
    async with worker(get_weather):
        await asyncio.to_thread(stock_start, client, task_queue, "budget-stock", run_input)
        run = AgentRunner(client, task_queue=task_queue).attach("budget-stock")
        await wait_status(run, "waiting_for_approval", iterations=4)
        approval = {"tool_use_id": "budget_1", "input": {"max_output_tokens": 50, "timeout": "PT1H"}}
        await asyncio.to_thread(stock_update, client, run.id, "approve_tool", approval)
        result = await run.result()
    assert (result.status, result.iterations) == ("completed", 5)
    # The time left is the hour less the seconds the run has taken so far.
    assert re.fullmatch(
        r"A person raised the budget\. Budget left for this task: 15 of 50 output tokens; 0:59:[0-5]\d of 1:00:00\. "
        r"Pace your work to finish within it\. Go on with the task\.",
        fake_api.bodies()[4]["messages"][-1]["content"][0]["text"],
    )


async def test_approved_limits_hold_across_continue_as_new_and_a_new_worker(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """The approved budget is the run's state: a continuation (every boundary here) keeps it rather than asking
    again under the input's, and the wait needs no worker: the one that asked is gone before a person answers."""
    fake_api.script(call(1), call(2), call(3), summary(), call(4), call(5), end_turn("All five are sunny."))
    async with worker(get_weather):
        run = await runner.start(**BASE, tools=[get_weather], budget=ASK, continue_as_new={"events": 10})
        await wait_status(run, "waiting_for_approval", iterations=4)
    async with worker(get_weather):
        await run.approve("budget_1", input={"max_output_tokens": 100})
        result = await run.result()
        status = await run.status()
    assert (result.status, result.iterations) == ("completed", 7)
    assert status.continuations >= 2
    assert [b.get("tool_choice") for b in fake_api.bodies()] == [None, None, None, {"type": "none"}, None, None, None]


async def test_a_message_sent_after_the_run_ended_goes_on_under_the_approved_budget(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """``Run.send`` carries the run's usage, so under the input's budget it would be spent before its first turn."""
    fake_api.script(call(1), call(2), call(3), summary(), end_turn("Lima and Kyiv: sunny."), end_turn("Quito: sunny."))
    async with worker(get_weather):
        run = await runner.start(**BASE, tools=[get_weather], budget=ASK)
        await wait_status(run, "waiting_for_approval", iterations=4)
        await run.approve("budget_1", input={"max_output_tokens": 100})
        await run.result()
        sent = await run.send("And Quito?")
        async with asyncio.timeout(30):  # under the input's budget it would ask again, and wait
            result = await sent.result()
    assert (result.status, result.iterations) == ("completed", 1)
    assert result.final_message is not None and result.final_message["content"] == [text("Quito: sunny.")]
    assert len(fake_api.requests) == 6


async def test_advise_tells_claude_what_is_left_with_each_turns_tool_results(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    fake_api.script(call(1), call(2), end_turn("Both sunny."))
    budget = {
        "max_output_tokens": 1000,
        "max_cost_usd": 1.0,
        "prices": {"input": 3.0, "output": 15.0},
        "advise": True,
    }
    async with worker(get_weather):
        run = await runner.start(**BASE, tools=[get_weather], budget=budget)
        result = await run.result()
        transcript = await run.transcript()
    bodies = fake_api.bodies()
    assert bodies[1]["messages"][-1]["content"] == [
        weather(1),
        {
            "type": "text",
            "text": "Budget left for this task: 990 of 1,000 output tokens; $0.9996 of $1.0000. Pace your work to "
            "finish within it.",
        },
    ]
    assert bodies[2]["messages"][-1]["content"][-1]["text"] == (
        "Budget left for this task: 980 of 1,000 output tokens; $0.9991 of $1.0000. Pace your work to finish within it."
    )
    # What Claude read is the run's transcript: the notes stay where they were sent.
    assert transcript[2]["content"] == bodies[1]["messages"][-1]["content"]
    assert result.status == "completed"


@pytest.mark.usefixtures("fresh_tools", "temporal_address")
async def test_follow_shows_the_request_with_the_commands_that_answer_it(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_api.script(call(1), call(2), call(3), summary(), end_turn("Lima and Kyiv: sunny."))
    output = Output(capsys)
    async with worker(get_weather):
        run = await runner.start(**BASE, tools=[get_weather], budget=ASK)
        waiting = (
            f'⏸ budget spent, waiting for more: {{"max_output_tokens": 25, "on_spent": "ask"}} (budget_1) — '
            f"agent-runner approve {run.id} budget_1 --input '{{\"max_output_tokens\": 50}}' to go on, agent-runner "
            f"deny {run.id} budget_1 to end"
        )
        async with following(run.id) as follow:
            await output.until(waiting)
            assert await cli.amain(["approve", run.id, "budget_1", "--input", '{"max_output_tokens": 50}']) == 0
            assert await follow == 0
    assert output.lines()[-7:-1] == [
        "── turn 4 ──",
        SUMMARY,
        waiting,
        "approved budget_1: the run goes on under the new limits",
        "── turn 5 ──",
        "Lima and Kyiv: sunny.",
    ]
    assert output.lines()[-1] == "── completed · 5 turns · stop_reason end_turn · 410 input / 40 output tokens ──"
    live = [line for line in output.lines() if not line.startswith("approved ")]
    # Followed once it has ended, with no worker: the same lines, read from the run's history.
    output.out = ""
    assert await cli.amain(["follow", run.id]) == 0
    assert output.lines() == live


@pytest.mark.usefixtures("fresh_tools", "temporal_address")
async def test_an_ended_runs_follow_shows_each_request_with_the_budget_the_run_held_then(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, capsys: pytest.CaptureFixture[str]
) -> None:
    """A policy's limits taken, then a person asked (the policy left the second request to them), who approved;
    then a request the policy answered with limits it could not take, so a person was asked, who denied it."""
    fake_api.script(call(1), call(2), call(3), summary(), call(4), summary(), call(5), summary(), end_turn("unsent"))
    output = Output(capsys)
    async with worker(get_weather, hooks=(once_more,)):
        run = await runner.start(**BASE, tools=[get_weather], budget=with_policy("once_more"))
        await wait_status(run, "waiting_for_approval", iterations=6)
        await run.approve("budget_1", input={"max_output_tokens": 60})
        await wait_status(run, "waiting_for_approval", iterations=8)
        waiting = [p.model_dump(exclude={"note", "requested_at"}) for p in await run.pending_approvals()]
        await run.deny("budget_2")
        result = await run.result()
    assert (result.status, result.iterations) == ("budget_exhausted", 8)
    assert waiting == [
        {
            "tool_use_id": "budget_2",
            "name": "budget",
            "input": {"max_output_tokens": 60, "on_spent": "ask", "policy": "once_more"},
            "iteration": 8,
        }
    ]
    assert await cli.amain(["follow", run.id]) == 1  # the run did not complete
    assert (
        output.lines()[-1] == "── budget_exhausted · 8 turns · stop_reason end_turn · 800 input / 65 output tokens ──"
    )
    requests = [line for line in output.lines() if line.startswith("⏸")]
    assert [re.sub(r" — .*", "", line) for line in requests] == [
        '⏸ budget spent, waiting for more: {"max_output_tokens": 40, "on_spent": "ask", "policy": "once_more"} '
        "(budget_1)",
        '⏸ budget spent, waiting for more: {"max_output_tokens": 60, "on_spent": "ask", "policy": "once_more"} '
        "(budget_2)",
    ]


async def test_the_console_shows_the_request_and_takes_new_limits(
    runner: AgentRunner,
    worker: WorkerFactory,
    fake_api: FakeMessagesAPI,
    console: str,
    http: aiohttp.ClientSession,
) -> None:
    fake_api.script(call(1), call(2), call(3), summary(), end_turn("Lima and Kyiv: sunny."))
    async with worker(get_weather):
        run = await runner.start(**BASE, tools=[get_weather], budget=ASK)
        await wait_status(run, "waiting_for_approval", iterations=4)
        _, page = await get(http, f"{console}/api/runs/{run.id}")
        approve = f"{console}/api/runs/{run.id}/approve"
        as_shown = await post(http, approve, {"tool_use_id": "budget_1"})
        approved = await post(http, approve, {"tool_use_id": "budget_1", "input": {"max_output_tokens": 50}})
        result = await run.result()
    assert [p["tool_use_id"] for p in page["status"]["pending_approvals"]] == ["budget_1"]
    assert page["status"]["pending_approvals"][0]["note"] == NOTE
    assert as_shown == (
        409,
        {
            "error": "approve_tool was refused: Approve a budget request with the new limits as its input, for "
            'instance {"max_output_tokens": 20000}.'
        },
    )
    assert approved == (200, {"ok": True})
    assert (result.status, result.iterations) == ("completed", 5)


# --- Budget policies: a worker's function decides before a person is asked -----------------------------------------

ASKED_POLICY: list[BudgetRequest] = []


@budget_policy
def forty_more(request: BudgetRequest) -> dict[str, Any]:
    ASKED_POLICY.append(request)
    return {"max_output_tokens": request.budget["max_output_tokens"] + 40}


@budget_policy(name="monthly_cap")
async def over_the_cap(request: BudgetRequest) -> None:
    raise StopRun(f"Over this month's cap; Claude said: {request.summary}")


@budget_policy
def leave_it_to_a_person(request: BudgetRequest) -> None:
    del request


@budget_policy
def too_little(request: BudgetRequest) -> dict[str, Any]:
    del request
    return {"max_output_tokens": 30}


@budget_policy
def broken(request: BudgetRequest) -> dict[str, Any]:
    del request
    raise KeyError("max_cost_usd")


ONCE: list[str] = []


@budget_policy
def once_more(request: BudgetRequest) -> dict[str, Any] | None:
    """15 more output tokens the first time; the second request is a person's; the third gets too few."""
    ONCE.append(request.run_id)
    asked = ONCE.count(request.run_id)
    if asked == 2:
        return None
    return {"max_output_tokens": request.budget["max_output_tokens"] + (15 if asked == 1 else 1)}


def with_policy(name: str) -> dict[str, Any]:
    return {**ASK, "policy": name}


async def test_a_policy_gives_new_limits_and_the_run_goes_on_without_a_person(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    ASKED_POLICY.clear()
    fake_api.script(call(1), call(2), call(3), summary(), call(4), end_turn("All five are sunny."))
    async with worker(get_weather, hooks=(forty_more,)):
        run = await runner.start(**BASE, tools=[get_weather], budget=with_policy("forty_more"))
        result = await run.result()
    assert [r.model_dump() for r in ASKED_POLICY] == [
        {
            "policy": "forty_more",
            "run_id": run.id,
            "spent": SPENT,
            "budget": {"max_output_tokens": 25, "on_spent": "ask", "policy": "forty_more"},
            "usage": {
                "input_tokens": 400,
                "output_tokens": 35,
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 0,
            },
            "iterations": 4,
            "reply": {
                "id": "msg_fake_004",
                "type": "message",
                "role": "assistant",
                "model": "claude-fake-1",
                "content": [text(SUMMARY)],
                "stop_reason": "end_turn",
                "stop_sequence": None,
                "usage": {"input_tokens": 100, "output_tokens": 5},
            },
        }
    ]
    assert ASKED_POLICY[0].summary == SUMMARY
    assert fake_api.bodies()[4]["messages"][-1] == {
        "role": "user",
        "content": [
            {
                "type": "text",
                "text": "The budget policy 'forty_more' raised the budget. Budget left for this task: 30 of 65 output "
                "tokens. Pace your work to finish within it. Go on with the task.",
            }
        ],
    }
    assert (result.status, result.iterations) == ("completed", 6)


async def test_a_policy_ends_the_run_with_stop_run(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    fake_api.script(call(1), call(2), call(3), summary(), end_turn("never sent"))
    async with worker(get_weather, hooks=(over_the_cap,)):
        run = await runner.start(**BASE, tools=[get_weather], budget=with_policy("monthly_cap"))
        result = await run.result()
    assert (result.status, result.iterations) == ("budget_exhausted", 4)
    assert result.detail == f"Over this month's cap; Claude said: {SUMMARY}"
    assert result.final_message is not None and result.final_message["content"] == [text(SUMMARY)]


@pytest.mark.parametrize(
    ("policy", "why"),
    [
        (leave_it_to_a_person, ""),
        (
            too_little,
            "; the budget policy 'too_little' gave limits the run cannot go on with (With these limits the output "
            "token budget (35 of 30) is still spent: give limits above what the run has spent.)",
        ),
        (
            broken,
            "; the budget policy 'broken' could not decide (Budget policy 'broken' raised KeyError('max_cost_usd'); a "
            "person is asked instead.)",
        ),
    ],
    ids=["none", "spent-limits", "raised"],
)
async def test_a_policy_that_does_not_decide_leaves_it_to_a_person_told_why(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, policy: BudgetPolicy, why: str
) -> None:
    fake_api.script(call(1), call(2), call(3), summary(), end_turn("Finished."))
    async with worker(get_weather, hooks=(policy,)):
        run = await runner.start(**BASE, tools=[get_weather], budget=with_policy(policy.name))
        await wait_status(run, "waiting_for_approval", iterations=4)
        [pending] = await run.pending_approvals()
        await run.approve("budget_1", input={"max_output_tokens": 50})
        result = await run.result()
    assert pending.note == (
        f"The {SPENT} is spent and Claude has summed up{why}. Approve with new limits as the input to go on (for "
        'instance {"max_output_tokens": 40000}); deny to end the run with its summary.'
    )
    assert fake_api.bodies()[4]["messages"][-1]["content"][0]["text"].startswith("A person raised the budget.")
    assert (result.status, result.iterations) == ("completed", 5)


async def test_a_policy_no_worker_registered_refuses_the_run_at_its_start(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    async with worker(get_weather):
        run = await runner.start(**BASE, tools=[get_weather], budget=with_policy("nowhere"))
        with pytest.raises(ToolNotRegistered) as refused:
            await run.result()
    assert "registered 'nowhere'." in str(refused.value)
    assert fake_api.requests == []


def test_a_policy_needs_a_request_to_decide() -> None:
    with pytest.raises(InvalidRunInput, match='`policy` decides requests for more budget: it needs `on_spent: "ask"`'):
        parse_run_input({**BASE, "budget": {"max_output_tokens": 25, "policy": "forty_more"}})


def test_a_worker_registers_the_policies_its_tool_modules_define() -> None:
    registry = ToolRegistry()
    registry.add_module("tests.test_budget_requests")
    assert sorted(registry.budget_policies) == [
        "broken",
        "forty_more",
        "leave_it_to_a_person",
        "monthly_cap",
        "once_more",
        "too_little",
    ]
    assert registry.has_hook("monthly_cap") and not registry.has_hook("over_the_cap")
