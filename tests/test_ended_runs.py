"""Ended runs as the console and the CLI read them: from Temporal's history and the content store, never a query.

Each test drives real runs (dev server, fake Messages API over HTTP, an in-process worker) to an end, stops the
worker, and reads the run through the console's HTTP API and the ``agent-runner`` commands, asserting exact values:
the conversation a run had when it ended (the results of tool calls that completed after Claude's last reply, and
which calls had not), the conversation a ``send`` continued, the status a closed run reports at once, and the run
list's cap on the runs it asks which tools they wait for.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

import aiohttp
import pytest

from agent_runner import cli
from agent_runner.client import AgentRunner, Run
from agent_runner.console import listing
from agent_runner.contract.errors import AgentRunError, ModelRequestRejected, RunNotFound
from agent_runner.contract.events import ToolFinished
from agent_runner.testing import FakeMessagesAPI, Reply, bad_request, end_turn, text, tool_use
from tests.conftest import WorkerFactory
from tests.steering_support import CALLS, delete_file, wait_status
from tests.test_console import BIG, REPORT_CALL, USER, get, long_report, run_page

BASE: dict[str, Any] = {"model": "claude-fake-1", "max_tokens": 1024, "messages": [USER], "thread": False}
pytestmark = pytest.mark.usefixtures("fresh_tools")


async def printed_transcript(runner: AgentRunner, run: Run, capsys: pytest.CaptureFixture[str]) -> tuple[Any, str]:
    """What ``agent-runner transcript --json`` prints for the run: its messages, parsed, and its note (stderr)."""
    capsys.readouterr()
    assert await cli.amain(["transcript", run.id, "--json", "--task-queue", runner.task_queue]) == 0
    out, note = capsys.readouterr()
    return json.loads(out), note


async def tool_finished(run: Run, tool_use_id: str) -> None:
    """Wait until the run's tool call ``tool_use_id`` has its result."""
    async with asyncio.timeout(20):
        async for event in run.events(agents=False):
            if isinstance(event, ToolFinished) and event.tool_use_id == tool_use_id:
                return


REPORT_AND_DELETE = Reply(
    [
        text("Reporting, then deleting."),
        tool_use("toolu_D", "delete_file", {"path": "/tmp"}),
        tool_use("toolu_R", "long_report", {"topic": "disk"}),
    ],
    "tool_use",
)
REPLY_MESSAGE = {
    "role": "assistant",
    "content": [
        {"type": "text", "text": "Reporting, then deleting."},
        {"type": "tool_use", "id": "toolu_D", "name": "delete_file", "input": {"path": "/tmp"}},
        {"type": "tool_use", "id": "toolu_R", "name": "long_report", "input": {"topic": "disk"}},
    ],
}
REPORT_RESULT = {"type": "tool_result", "tool_use_id": "toolu_R", "content": f"disk:\n{BIG}"}


@pytest.mark.usefixtures("temporal_address")
@pytest.mark.parametrize("end", ["terminate", "cancel"])
async def test_a_run_that_ended_after_a_tool_ran_shows_its_result_and_the_calls_that_had_not_completed(
    end: str,
    runner: AgentRunner,
    worker: WorkerFactory,
    fake_api: FakeMessagesAPI,
    console: str,
    http: aiohttp.ClientSession,
    capsys: pytest.CaptureFixture[str],
) -> None:
    fake_api.script(REPORT_AND_DELETE)
    async with worker(delete_file, long_report):
        run = await runner.start(**BASE, tools=[delete_file, long_report], approval={"tools": ["delete_file"]})
        await wait_status(run, "waiting_for_approval")
        await tool_finished(run, "toolu_R")  # the report ran; the deletion waits for a person
        if end == "cancel":
            await run.cancel()  # the worker takes it: the approval's wait is cancelled and the run ends
            async with asyncio.timeout(20):
                while await run.ended() is None:
                    await asyncio.sleep(0.05)
    if end == "terminate":
        await run.terminate("runaway")
    # No worker now: the history holds the report's result (by reference: the store holds its text).
    expected = [USER, REPLY_MESSAGE, {"role": "user", "content": [REPORT_RESULT]}]
    data = await run_page(http, console, run)
    assert data["transcript"]["messages"] == expected
    assert data["unfinished"] == [{"tool_use_id": "toolu_D", "name": "delete_file"}]
    page = data["status"]
    ended_as = "terminated" if end == "terminate" else "cancelled"
    assert (page["status"], page["iterations"], page["stop_reason"], page["transcript_length"]) == (
        ended_as,
        1,
        "tool_use",
        3,
    )
    printed, note = await printed_transcript(runner, run, capsys)
    assert printed == expected
    assert note == (
        f"note: run {run.id} ended ({ended_as}) before these tool calls completed: delete_file (toolu_D). The "
        "conversation ends with the results of those that did.\n"
    )
    assert CALLS == []  # the deletion never ran


async def test_an_earlier_replys_result_never_answers_a_later_call_with_the_same_id(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, console: str, http: aiohttp.ClientSession
) -> None:
    fake_api.script(
        Reply([tool_use("toolu_X", "long_report", {"topic": "disk"})], "tool_use"),
        Reply([tool_use("toolu_X", "delete_file", {"path": "/tmp"})], "tool_use"),  # the same id, a later reply
    )
    async with worker(delete_file, long_report):
        run = await runner.start(**BASE, tools=[delete_file, long_report], approval={"tools": ["delete_file"]})
        await wait_status(run, "waiting_for_approval", 2)
    await run.terminate("runaway")
    data = await run_page(http, console, run)
    assert data["transcript"]["messages"] == [
        USER,
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "toolu_X", "name": "long_report", "input": {"topic": "disk"}}],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_X", "content": f"disk:\n{BIG}"}],
        },
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "toolu_X", "name": "delete_file", "input": {"path": "/tmp"}}],
        },
    ]
    assert data["unfinished"] == [{"tool_use_id": "toolu_X", "name": "delete_file"}]
    assert CALLS == []


async def test_an_agent_call_whose_child_run_completed_shows_the_childs_answer(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, console: str, http: aiohttp.ClientSession
) -> None:
    researcher = {"name": "researcher", "description": "Researches one question.", "system": "You research."}
    parent_reply = Reply(
        [
            tool_use("toolu_A", "researcher", {"task": "Weather in Paris?"}),
            tool_use("toolu_D", "delete_file", {"path": "/tmp"}),
        ],
        "tool_use",
    )

    def respond(body: dict[str, Any]) -> Any:
        return end_turn("It is sunny.") if body.get("system") == "You research." else parent_reply

    fake_api.responder = respond
    async with worker(delete_file):
        run = await runner.start(**BASE, tools=[delete_file], agents=[researcher], approval={"tools": ["delete_file"]})
        await wait_status(run, "waiting_for_approval")
        await tool_finished(run, "toolu_A")  # the child run answered; the deletion waits for a person
    await run.terminate("runaway")
    data = await run_page(http, console, run)
    assert data["transcript"]["messages"] == [
        USER,
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "toolu_A", "name": "researcher", "input": {"task": "Weather in Paris?"}},
                {"type": "tool_use", "id": "toolu_D", "name": "delete_file", "input": {"path": "/tmp"}},
            ],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_A", "content": "It is sunny."}]},
    ]
    assert data["unfinished"] == [{"tool_use_id": "toolu_D", "name": "delete_file"}]
    assert CALLS == []


@pytest.mark.usefixtures("temporal_address")
async def test_a_run_that_failed_on_the_request_after_its_tools_shows_their_results(
    runner: AgentRunner,
    worker: WorkerFactory,
    fake_api: FakeMessagesAPI,
    console: str,
    http: aiohttp.ClientSession,
    capsys: pytest.CaptureFixture[str],
) -> None:
    fake_api.script(REPORT_AND_DELETE, bad_request("messages: too long"))
    async with worker(delete_file, long_report):
        run = await runner.start(**BASE, tools=[delete_file, long_report])
        with pytest.raises(Exception, match="too long"):
            await run.result()
    # The second request failed for good: the conversation ends with both tools' results, as that request carried them.
    delete_result = {"type": "tool_result", "tool_use_id": "toolu_D", "content": "deleted /tmp"}
    expected = [USER, REPLY_MESSAGE, {"role": "user", "content": [delete_result, REPORT_RESULT]}]
    assert fake_api.bodies()[1]["messages"] == expected
    data = await run_page(http, console, run)
    assert (data["transcript"]["messages"], data["unfinished"]) == (expected, [])
    assert (data["status"]["status"], data["status"]["iterations"], data["status"]["stop_reason"]) == (
        "failed",
        1,
        "tool_use",
    )
    printed, note = await printed_transcript(runner, run, capsys)
    assert (printed, note) == (expected, "")


@pytest.mark.usefixtures("temporal_address")
async def test_a_send_that_ended_before_its_first_model_call_shows_the_conversation_it_continued(
    runner: AgentRunner,
    worker: WorkerFactory,
    fake_api: FakeMessagesAPI,
    console: str,
    http: aiohttp.ClientSession,
    capsys: pytest.CaptureFixture[str],
) -> None:
    fake_api.script(Reply([tool_use("toolu_R", "long_report", {"topic": "disk"})], "tool_use"))
    async with worker(long_report):
        first = await runner.start(**BASE, tools=[long_report], max_iterations=1)
        assert (await first.result()).status == "max_iterations"  # it ends with the report's result, unsent
        # Goes on where no worker polls: the new run never gets to its first model call.
        sent = await first.send("And the memory?", task_queue=f"{runner.task_queue}-nobody")
    await sent.terminate("not now")
    expected = [
        USER,
        REPORT_CALL,
        # The new message joins the unsent tool results, as the run itself joins it.
        {"role": "user", "content": [REPORT_RESULT, {"type": "text", "text": "And the memory?"}]},
    ]
    data = await run_page(http, console, sent)
    assert (data["transcript"]["messages"], data["unfinished"]) == (expected, [])
    page = data["status"]
    assert (page["status"], page["iterations"], page["transcript_length"], page["stop_reason_detail"]) == (
        "terminated",
        0,
        3,
        "not now",
    )
    printed, note = await printed_transcript(runner, sent, capsys)
    assert (printed, note) == (expected, "")
    assert len(fake_api.bodies()) == 1


@pytest.mark.usefixtures("temporal_address")
async def test_status_and_transcript_of_a_run_whose_worker_just_stopped_need_no_query(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, capsys: pytest.CaptureFixture[str]
) -> None:
    """Temporal remembers the gone worker as a poller for a while, so a query would wait ~20 s for it to answer.

    The run's result carries its last status (``RunResult.last_status``): the commands report it whole, transcript
    version and cost included, as the run's ``status`` query did while its worker answered.
    """
    fake_api.script(Reply([tool_use("toolu_R", "long_report", {"topic": "disk"})], "tool_use"), end_turn("Fine."))
    async with worker(long_report):
        run = await runner.start(**BASE, tools=[long_report], budget={"prices": {"input": 3000, "output": 15000}})
        await run.result()
        own = await run.status()  # the run's own word, while its worker answers
        transcript = await run.transcript()
    capsys.readouterr()
    async with asyncio.timeout(5):  # a guard, not a benchmark: well below the ~20 s a query would wait
        assert await cli.amain(["status", run.id, "--json", "--task-queue", runner.task_queue]) == 0
        as_json = capsys.readouterr().out
        assert await cli.amain(["status", run.id, "--task-queue", runner.task_queue]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert await cli.amain(["transcript", run.id, "--json", "--task-queue", runner.task_queue]) == 0
        messages = capsys.readouterr().out
    assert json.loads(as_json) == own.model_dump(mode="json")
    assert lines == [
        f"run          {run.id}",
        "status       completed",
        "turns        2",
        "stop_reason  end_turn",
        "tokens       20 input / 10 output tokens",
        "messages     4",
        "version      3",
        "cost         $0.2100",
    ]
    assert json.loads(messages) == transcript
    assert transcript[2] == {"role": "user", "content": [REPORT_RESULT]}


@pytest.mark.usefixtures("temporal_address")
async def test_status_of_a_failed_run_is_what_its_status_query_answered_as_it_failed(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, capsys: pytest.CaptureFixture[str]
) -> None:
    """A failed run has no result to carry its last status: its failure does (``LAST_STATUS_DETAIL``), so the
    commands report its transcript version and cost as its ``status`` query did, not the history's version 0."""
    fake_api.script(Reply([tool_use("toolu_R", "long_report", {"topic": "disk"})], "tool_use"), bad_request("no"))
    async with worker(long_report):
        run = await runner.start(**BASE, tools=[long_report], budget={"prices": {"input": 3000, "output": 15000}})
        with pytest.raises(ModelRequestRejected):
            await run.result()
        own = await run.status()  # the run's own word, while its worker answers
    capsys.readouterr()
    assert await cli.amain(["status", run.id, "--json", "--task-queue", runner.task_queue]) == 0
    as_json = capsys.readouterr().out
    assert await cli.amain(["status", run.id, "--task-queue", runner.task_queue]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert json.loads(as_json) == own.model_dump(mode="json")
    detail = (
        "Claude's API rejected the request with 400: invalid_request_error: no. Fix the run's input (or the worker's "
        "ANTHROPIC_API_KEY for 401/403) and start the run again."
    )
    assert lines == [
        f"run          {run.id}",
        "status       failed",
        "turns        1",
        "stop_reason  tool_use",
        "tokens       10 input / 5 output tokens",
        "messages     3",
        "version      2",
        "cost         $0.1050",
        f"stopped      {detail}",
    ]


@pytest.mark.usefixtures("temporal_address")
async def test_the_run_list_asks_only_the_first_runs_waiting_for_approval_which_tools(
    runner: AgentRunner,
    worker: WorkerFactory,
    fake_api: FakeMessagesAPI,
    console: str,
    http: aiohttp.ClientSession,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(listing, "APPROVALS_ASKED", 2)
    delete = Reply([tool_use("toolu_D", "delete_file", {"path": "/tmp"})], "tool_use")
    fake_api.script(delete, delete, delete)
    runs_url = f"{console}/api/runs?task_queue={runner.task_queue}&waiting=approval"
    async with worker(delete_file, search_attributes=True):
        runs = []
        for _ in range(3):
            run = await runner.start(**BASE, tools=[delete_file], approval={"tools": ["delete_file"]})
            await wait_status(run, "waiting_for_approval")
            runs.append(run)
        oldest, middle, newest = (r.id for r in runs)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(10):  # Temporal's visibility store follows the runs a moment later
                while len((await get(http, runs_url))[1]["runs"]) < 3:
                    await asyncio.sleep(0.1)
        status, listed = await get(http, runs_url)
        # Newest first: the first two are asked and name their tools; the third is not asked, and says to open it.
        assert status == 200
        assert [(r["id"], r["waiting"], r["tools"], r["note"]) for r in listed["runs"]] == [
            (newest, "approval", ["delete_file"], None),
            (middle, "approval", ["delete_file"], None),
            (oldest, "approval", None, "open it to see which tools it waits for"),
        ]
        for run in runs:
            await run.terminate("test over")
    assert CALLS == []


@pytest.mark.parametrize("how", ["terminate", "cancel"])
async def test_terminating_or_cancelling_a_run_that_ended_says_it_ended_and_leaves_it_as_it_ended(
    how: str, runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """Temporal refuses to terminate a closed run as not found, and takes a cancellation of one and does nothing."""
    fake_api.script(end_turn("Done."))
    async with worker():
        run = await runner.start(**BASE)
        await run.result()
    with pytest.raises(AgentRunError) as refused:
        await (run.terminate("too late") if how == "terminate" else run.cancel())
    assert (type(refused.value), str(refused.value)) == (
        AgentRunError,
        f"Run {run.id} has already ended (completed); there is nothing to {how}.",
    )
    assert await run.ended() == "completed"
    with pytest.raises(RunNotFound, match="No run with id 'nobody'"):
        await (runner.attach("nobody").terminate("x") if how == "terminate" else runner.attach("nobody").cancel())


@pytest.mark.usefixtures("temporal_address")
async def test_an_ended_runs_calls_wait_for_nobody_and_no_worker_is_needed_to_say_so(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, capsys: pytest.CaptureFixture[str]
) -> None:
    """A terminated run's pending_approvals query still named the call it waited on (`agent-runner approvals` listed
    it, and `approve` was then refused), where `status()` says it waits for nothing."""
    fake_api.script(Reply([tool_use("toolu_D", "delete_file", {"path": "/etc"})], "tool_use"))
    async with worker(delete_file):
        run = await runner.start(**BASE, tools=[delete_file], approval={"tools": "all"})
        await wait_status(run, "waiting_for_approval")
        assert [p.tool_use_id for p in await run.pending_approvals()] == ["toolu_D"]
        await run.terminate("enough")
        assert await run.pending_approvals() == []
    assert await run.pending_approvals() == []  # with no worker to answer a query
    capsys.readouterr()
    assert await cli.amain(["approvals", run.id, "--task-queue", runner.task_queue]) == 0
    assert CALLS == []
    assert capsys.readouterr() == ("", f"no tool call of run {run.id} waits for approval\n")
