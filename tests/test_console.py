"""The operators' web console (agent_runner/console/): its HTTP API against real runs, and who may use it.

Every test drives a real run (dev server, fake Messages API, a worker) through the console's HTTP API over a real
socket, and checks what reached the run: the exact input a tool received, the exact next request Claude got. The
browser tier (tests/console/) drives the page itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from anthropic import beta_async_tool
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from agent_runner.client import AgentRunner, Run
from agent_runner.console import create_app, main, serving
from agent_runner.console.listing import NO_ATTRIBUTES_NOTE
from agent_runner.console.security import COOKIE, is_loopback
from agent_runner.contract.errors import ConfigurationError, ToolNotRegistered
from agent_runner.contract.steering import TO_GO_ON
from agent_runner.temporal_server import EmbeddedTemporal
from agent_runner.testing import FakeMessagesAPI, Reply, SlowStream, end_turn, text, tool_use
from tests.conftest import WorkerFactory
from tests.steering_support import CALLS, BrokenWorkers, delete_file, wait_status
from tests.test_layers import ROOT, _imports, _layer_of_module
from tests.test_status import no_worker_line

USER = {"role": "user", "content": "Clean up the temp files."}
BASE: dict[str, Any] = {"model": "claude-fake-1", "max_tokens": 1024, "messages": [USER]}
TOKEN = "a-console-token-of-32-characters"
BIG = "line of a long report\n" * 300  # 6,600 characters: over the inline limit, so the store holds it
pytestmark = pytest.mark.usefixtures("fresh_tools")


@beta_async_tool
async def long_report(topic: str) -> str:
    """A report too long to travel inline.

    Args:
        topic: The topic.
    """
    return f"{topic}:\n{BIG}"


REPORT_CALL = {
    "role": "assistant",
    "content": [{"type": "tool_use", "id": "toolu_R", "name": "long_report", "input": {"topic": "disk"}}],
}
REPORT_RESULT = {
    "role": "user",
    "content": [{"type": "tool_result", "tool_use_id": "toolu_R", "content": f"disk:\n{BIG}"}],
}


def delete_call(path: str = "/etc") -> Reply:
    return Reply([text("Deleting."), tool_use("toolu_D", "delete_file", {"path": path})], "tool_use")


async def waiting_to_delete(runner: AgentRunner, approval: str | list[str], **options: Any) -> Run:
    """A run with ``delete_file`` (approval for ``approval``) once the call Claude made (``delete_call``) waits."""
    run = await runner.start(**BASE, tools=[delete_file], approval={"tools": approval}, **options)
    await wait_status(run, "waiting_for_approval")
    return run


async def get(http: aiohttp.ClientSession, url: str, **kw: Any) -> tuple[int, Any]:
    async with http.get(url, **kw) as response:
        return response.status, await response.json()


async def post(http: aiohttp.ClientSession, url: str, body: dict[str, Any], **kw: Any) -> tuple[int, Any]:
    async with http.post(url, json=body, **kw) as response:
        return response.status, await response.json()


async def run_page(http: aiohttp.ClientSession, console: str, run: Run) -> Any:
    """The data of the run's page, which the console has (200)."""
    status, data = await get(http, f"{console}/api/runs/{run.id}")
    assert status == 200
    return data


async def sse(
    http: aiohttp.ClientSession, url: str, into: list[tuple[str, str | None, dict[str, Any]]] | None = None, **kw: Any
) -> list[tuple[str, str | None, dict[str, Any]]]:
    """Every message of an event stream until its ``end``: (event name, id, data), appended ``into`` as they come."""
    messages = [] if into is None else into
    async with http.get(url, **kw) as response:
        assert response.status == 200 and response.content_type == "text/event-stream"
        kind, event_id, data = "message", None, ""
        async for raw in response.content:
            line = raw.decode().rstrip("\n")
            if line.startswith("event: "):
                kind = line[7:]
            elif line.startswith("id: "):
                event_id = line[4:]
            elif line.startswith("data: "):
                data = line[6:]
            elif line == "" and data:
                messages.append((kind, event_id, json.loads(data)))
                if kind in ("end", "failure"):
                    break
                kind, event_id, data = "message", None, ""
    return messages


# --- Reading runs -----------------------------------------------------------------------------------------------


Row = tuple[Any, ...]


def rows(listing: dict[str, Any]) -> list[Row]:
    return [(r["id"], r["status"], r["waiting"], r["iterations"], r["note"]) for r in listing["runs"]]


async def listed(http: aiohttp.ClientSession, url: str, expected: list[Row]) -> list[Row]:
    """The list at ``url`` once it shows ``expected``: Temporal's visibility store follows a run a moment later."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(10):
            while (current := rows((await get(http, url))[1])) != expected:
                await asyncio.sleep(0.1)
    return current


async def test_the_list_shows_what_each_run_waits_for_and_filters_on_approval_without_asking_any_run(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, console: str, http: aiohttp.ClientSession
) -> None:
    fake_api.script(end_turn("Nothing to do."), delete_call())
    async with worker(delete_file, search_attributes=True):
        done = await runner.start(**BASE)
        await done.until_done()
        waiting = await waiting_to_delete(runner, ["delete_file"])
    # No worker polls the runs' task queue now: Temporal's visibility store answers (the waiting run is asked which
    # tools, and does not answer: its row says "approval" all the same).
    runs = f"{console}/api/runs?task_queue={runner.task_queue}"
    waits = (waiting.id, "waiting_for_approval", "approval", 1, None)
    assert await listed(http, runs, [waits, (done.id, "completed", None, 1, None)]) == [
        waits,
        (done.id, "completed", None, 1, None),  # the run's own word for how it ended, kept by the attribute
    ]
    assert await listed(http, f"{runs}&waiting=approval", [waits]) == [waits]
    assert await listed(http, f"{runs}&waiting=any", [waits]) == [waits]
    assert await listed(http, f"{runs}&waiting=step", []) == []
    assert await get(http, f"{console}/api/runs?waiting=lunch") == (
        400,
        {"error": "waiting must be approval, step, review, sleep or any."},
    )
    await waiting.terminate("done with it")
    terminated = (waiting.id, "terminated", None, 1, None)
    assert (await listed(http, runs, [terminated, (done.id, "completed", None, 1, None)]))[0] == terminated


async def test_a_row_waiting_for_approval_names_the_tools_its_run_waits_for_while_a_worker_answers(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, console: str, http: aiohttp.ClientSession
) -> None:
    fake_api.script(
        end_turn("Nothing to do."),
        Reply(
            [tool_use("toolu_D", "delete_file", {"path": "/tmp"}), tool_use("toolu_R", "long_report", {"topic": "t"})],
            "tool_use",
        ),
    )
    runs = f"{console}/api/runs?task_queue={runner.task_queue}"

    def with_tools(listing: dict[str, Any]) -> list[Row]:
        return [(r["id"], r["waiting"], r["tools"]) for r in listing["runs"]]

    async with worker(delete_file, long_report, search_attributes=True):
        done = await runner.start(**BASE)
        await done.until_done()
        run = await runner.start(
            **BASE, tools=[delete_file, long_report], approval={"tools": ["delete_file", "long_report"]}
        )
        await wait_status(run, "waiting_for_approval")
        finished = (done.id, "completed", None, 1, None)
        await listed(http, runs, [(run.id, "waiting_for_approval", "approval", 1, None), finished])
        # Only the row waiting for approval asks its run, which answers: the tools in the order Claude called them.
        assert with_tools((await get(http, runs))[1]) == [
            (run.id, "approval", ["delete_file", "long_report"]),
            (done.id, None, None),
        ]
        assert with_tools((await get(http, f"{runs}&waiting=approval"))[1]) == [
            (run.id, "approval", ["delete_file", "long_report"])
        ]
    # No worker answers now: the row still says what the run waits for, without the tools.
    assert with_tools((await get(http, runs))[1]) == [(run.id, "approval", None), (done.id, None, None)]
    assert rows((await get(http, runs))[1]) == [(run.id, "waiting_for_approval", "approval", 1, None), finished]
    await run.terminate("done with it")


async def test_the_dev_stack_keeps_search_attributes_only_where_the_namespace_has_them(
    client: Client, tmp_path: Path
) -> None:
    from agent_runner.dev import _search_attributes_registered

    assert await _search_attributes_registered(client)  # the session's server registers them, as `connect()`'s does
    with EmbeddedTemporal(tmp_path / "bare.db") as bare:  # a server nobody registered them on
        assert not await _search_attributes_registered(await Client.connect(bare.address))


async def test_a_run_whose_workers_keep_no_search_attributes_is_listed_with_a_note(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, console: str, http: aiohttp.ClientSession
) -> None:
    fake_api.script(delete_call())
    async with worker(delete_file):
        run = await waiting_to_delete(runner, ["delete_file"])
        runs = f"{console}/api/runs?task_queue={runner.task_queue}"
        expected = [(run.id, "running", None, None, NO_ATTRIBUTES_NOTE)]
        assert await listed(http, runs, expected) == expected
        assert await listed(http, f"{runs}&waiting=approval", []) == []  # the list cannot know: it does not ask
        await run.stop()


async def test_a_runs_page_data_has_the_transcript_with_stored_content_put_back(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, console: str, http: aiohttp.ClientSession
) -> None:
    fake_api.script(
        Reply([tool_use("toolu_R", "long_report", {"topic": "disk"})], "tool_use"),
        end_turn("The disk is fine."),
    )
    async with worker(long_report):
        run = await runner.start(**BASE, tools=[long_report], thread=False)
        await run.until_done()
        own = await run.transcript()
    # No worker polls any more: an ended run's page comes from its history and the content store, not a query.
    data = await run_page(http, console, run)
    assert data["transcript"]["messages"] == own
    assert data["transcript"] == {
        "version": None,
        "messages": [
            USER,
            REPORT_CALL,
            REPORT_RESULT,
            {"role": "assistant", "content": [{"type": "text", "text": "The disk is fine."}]},
        ],
    }
    assert (data["id"], data["status"]["status"], data["status"]["iterations"], data["waiting"]) == (
        run.id,
        "completed",
        2,
        None,
    )
    assert data["status"]["usage"] == (await run.result()).usage.model_dump(mode="json")
    assert data["events_offset"] is None  # nothing more to follow
    # What the run itself sent Claude, for comparison: the same long result (the store is not a lossy summary).
    assert fake_api.bodies()[1]["messages"][2]["content"][0]["content"] == f"disk:\n{BIG}"


async def test_a_run_cut_off_by_max_iterations_has_a_page_with_the_tool_results_after_its_last_reply(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, console: str, http: aiohttp.ClientSession
) -> None:
    fake_api.script(Reply([text("Writing it."), tool_use("toolu_R", "long_report", {"topic": "disk"})], "tool_use"))
    async with worker(long_report):
        run = await runner.start(**BASE, tools=[long_report], max_iterations=1, thread=False)
        assert (await run.result()).status == "max_iterations"
        own = await run.transcript()  # the run's own word, while a worker can answer
    # No worker now: the page reads the history and the store, and shows the tool's result no model call saw.
    data = await run_page(http, console, run)
    assert (
        data["transcript"]["messages"]
        == own
        == [
            USER,
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Writing it."},
                    {"type": "tool_use", "id": "toolu_R", "name": "long_report", "input": {"topic": "disk"}},
                ],
            },
            REPORT_RESULT,
        ]
    )
    page = data["status"]
    assert (page["status"], page["iterations"], page["stop_reason"], page["transcript_length"]) == (
        "max_iterations",
        1,
        "tool_use",
        3,
    )
    assert len(fake_api.bodies()) == 1  # the result never reached Claude


async def test_a_terminated_runs_page_needs_no_worker_and_says_why_it_ended(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, console: str, http: aiohttp.ClientSession
) -> None:
    fake_api.script(delete_call())
    async with worker(delete_file):
        run = await waiting_to_delete(runner, ["delete_file"])
        own = await run.transcript()
    await run.terminate("runaway")
    data = await run_page(http, console, run)
    assert (
        data["transcript"]["messages"]
        == own
        == [
            USER,
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Deleting."},
                    {"type": "tool_use", "id": "toolu_D", "name": "delete_file", "input": {"path": "/etc"}},
                ],
            },
        ]
    )
    page = data["status"]
    assert (page["status"], page["iterations"], page["stop_reason"], page["stop_reason_detail"]) == (
        "terminated",
        1,
        "tool_use",
        "runaway",
    )
    assert (page["pending_approvals"], data["waiting"], data["events_offset"]) == ([], None, None)
    assert CALLS == []


async def test_a_run_that_failed_before_its_first_turn_has_a_page_saying_why(
    runner: AgentRunner, worker: WorkerFactory, console: str, http: aiohttp.ClientSession
) -> None:
    async with worker():
        run = await runner.start(**BASE, tools=["no_such_tool"])
        with pytest.raises(ToolNotRegistered):
            await run.result()
    data = await run_page(http, console, run)
    page = data["status"]
    # It never called the model: its conversation is the input's messages.
    assert (page["status"], page["iterations"], page["stop_reason"], data["transcript"]["messages"]) == (
        "failed",
        0,
        None,
        [USER],
    )
    assert page["stop_reason_detail"] == (
        f"No worker on task queue {runner.task_queue!r} registered 'no_such_tool'. Start a worker with `python "
        "worker.py --tools <module that defines it>`, or pass the tool's definition as a JSON object to send it "
        "without running it."
    )


async def test_a_run_that_ended_before_its_first_model_call_has_a_page_with_its_input_messages(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, console: str, http: aiohttp.ClientSession
) -> None:
    async with worker():
        run = await runner.start(**BASE, budget={"max_output_tokens": 0})  # spent before the first request
        assert (await run.result()).status == "budget_exhausted"
        own = await run.transcript()
    data = await run_page(http, console, run)
    assert data["transcript"]["messages"] == own == [USER]
    page = data["status"]
    assert (page["status"], page["iterations"], page["stop_reason"], page["transcript_length"]) == (
        "budget_exhausted",
        0,
        None,
        1,
    )
    assert fake_api.bodies() == []


async def test_a_run_terminated_after_it_continued_as_new_has_a_page_with_the_conversation_it_carried(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, console: str, http: aiohttp.ClientSession
) -> None:
    fake_api.script(
        Reply([tool_use("toolu_R", "long_report", {"topic": "disk"})], "tool_use"),
        SlowStream(end_turn("The disk is fine."), event_delay=3),  # under way when the run is terminated
    )
    async with worker(long_report):
        run = await runner.start(**BASE, tools=[long_report], thread=False, continue_as_new={"events": 10})
        first = (await run.handle.describe()).run_id
        async with asyncio.timeout(20):
            while (await run.handle.describe()).run_id == first or len(fake_api.bodies()) < 2:
                await asyncio.sleep(0.05)
        own = await run.transcript()  # the continued execution's, while its second request streams
        await run.terminate("enough")
    # The last execution's history has no reply: its conversation is the one it carried over.
    data = await run_page(http, console, run)
    assert (
        data["transcript"]["messages"]
        == own
        == [
            USER,
            REPORT_CALL,
            REPORT_RESULT,
        ]
    )
    assert (data["status"]["status"], data["status"]["stop_reason_detail"]) == ("terminated", "enough")


async def test_a_missing_run_is_a_404_that_says_how_to_find_runs(console: str, http: aiohttp.ClientSession) -> None:
    assert await get(http, f"{console}/api/runs/no-such-run") == (
        404,
        {"error": "No run with id 'no-such-run'. List runs with `agent-runner list`."},
    )


async def test_the_event_stream_carries_the_text_as_written_and_resumes_after_an_id(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, console: str, http: aiohttp.ClientSession
) -> None:
    fake_api.script(end_turn("All clean, nothing to delete."))
    async with worker():
        run = await runner.start(**BASE)
        await run.until_done()
        messages = await sse(http, f"{console}/api/runs/{run.id}/events?after=0")
        middle = int(messages[len(messages) // 2][1] or 0)
        resumed = await sse(http, f"{console}/api/runs/{run.id}/events", headers={"Last-Event-ID": str(middle)})
    events = [data for kind, _, data in messages if kind == "message"]
    assert "".join(e["text"] for e in events if e["type"] == "text") == "All clean, nothing to delete."
    assert events[-1]["type"] == "run_finished" and events[-1]["status"] == "completed"
    assert messages[-1] == ("end", None, {})
    assert [id for _, id, _ in messages[:-1]] == [str(e["offset"]) for e in events]
    # A browser that reconnects sends the last id it saw; the stream goes on from the next event.
    assert [data for kind, _, data in resumed if kind == "message"] == [e for e in events if e["offset"] > middle]


async def test_without_a_worker_a_runs_page_is_a_503_saying_so_and_its_stream_says_so_and_goes_on_when_one_starts(
    runner: AgentRunner,
    worker: WorkerFactory,
    fake_api: FakeMessagesAPI,
    console: str,
    http: aiohttp.ClientSession,
    task_queue: str,
) -> None:
    fake_api.script(end_turn("All clean."))
    run = await runner.start(**BASE)
    assert await get(http, f"{console}/api/runs/{run.id}") == (503, {"error": no_worker_line(task_queue)})
    messages: list[tuple[str, str | None, dict[str, Any]]] = []
    stream = asyncio.create_task(sse(http, f"{console}/api/runs/{run.id}/events?after=0", into=messages))
    async with asyncio.timeout(20):
        while not messages:
            await asyncio.sleep(0.05)
    assert messages == [("notice", None, {"notice": no_worker_line(task_queue)})]
    async with worker():
        await asyncio.wait_for(stream, 20)
    events = [data for kind, _, data in messages if kind == "message"]
    assert "".join(e["text"] for e in events if e["type"] == "text") == "All clean."
    assert events[-1]["type"] == "run_finished" and events[-1]["status"] == "completed"
    assert [kind for kind, _, _ in messages] == ["notice", *["message"] * len(events), "end"]


@pytest.mark.slow  # about 15 s: Temporal retries a failing workflow task after 10 s
async def test_a_run_whose_workflow_task_keeps_failing_has_a_503_page_and_a_stream_that_says_so_and_goes_on(
    runner: AgentRunner,
    worker: WorkerFactory,
    fake_api: FakeMessagesAPI,
    console: str,
    http: aiohttp.ClientSession,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A bug in the workers' code fails the run's workflow task: the page cannot be read and says why; its stream says
    so once and goes on, and ends as the run does once the workers are fixed."""
    workers = BrokenWorkers(fake_api, monkeypatch, last="All clean.")
    async with worker():
        run = await runner.start(**BASE)
        workers.break_()
        await workers.failed(run)
        status, page = await get(http, f"{console}/api/runs/{run.id}")
        messages: list[tuple[str, str | None, dict[str, Any]]] = []
        stream = asyncio.create_task(sse(http, f"{console}/api/runs/{run.id}/events?after=0", into=messages))
        async with asyncio.timeout(30):
            while not any(kind == "notice" for kind, _, _ in messages):
                await asyncio.sleep(0.05)
        workers.fix()
        await asyncio.wait_for(stream, 40)
    failing = (
        "its workflow task keeps failing on the workers (attempt N; WORKFLOW_WORKER_UNHANDLED_FAILURE: a bug in the "
        f"worker's code). The workers' log says why (`temporal workflow show --workflow-id {run.id}` shows the first "
        "failure); once workers run code that can go on with the run, it goes on by itself"
    )
    assert (status, re.sub(r"\(attempt \d+;", "(attempt N;", page["error"])) == (
        503,
        f"Run {run.id} cannot answer now: {failing}.",
    )
    said = [data["notice"] for kind, _, data in messages if kind == "notice"]
    notices = [re.sub(r"\(attempt \d+;", "(attempt N;", notice) for notice in said]
    assert notices == [f"Run {run.id} is not going on: {failing}, and this wait with it."]
    events = [data for kind, _, data in messages if kind == "message"]
    assert "".join(e["text"] for e in events if e["type"] == "text") == "Looking.All clean."
    assert events[-1]["type"] == "run_finished" and events[-1]["status"] == "completed"
    assert messages[-1] == ("end", None, {})


# --- Steering ---------------------------------------------------------------------------------------------------


async def test_approving_with_edited_input_runs_the_tool_with_exactly_that_input(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, console: str, http: aiohttp.ClientSession
) -> None:
    fake_api.script(delete_call("/etc"), end_turn("Done."))
    async with worker(delete_file):
        run = await waiting_to_delete(runner, "all")
        _, data = await get(http, f"{console}/api/runs/{run.id}")
        unknown = await post(http, f"{console}/api/runs/{run.id}/approve", {"tool_use_id": "toolu_nope"})
        malformed = await post(http, f"{console}/api/runs/{run.id}/approve", {"tool_use_id": "toolu_D", "input": "/"})
        approved = await post(
            http, f"{console}/api/runs/{run.id}/approve", {"tool_use_id": "toolu_D", "input": {"path": "/tmp/scratch"}}
        )
        await run.until_done()
    pending = data["status"]["pending_approvals"]
    assert [{k: v for k, v in p.items() if k != "requested_at"} for p in pending] == [
        {"tool_use_id": "toolu_D", "name": "delete_file", "input": {"path": "/etc"}, "iteration": 1, "note": None}
    ]
    assert data["waiting"] == "approval"
    assert unknown == (
        409,
        {
            "error": "approve_tool was refused: Tool call 'toolu_nope' is not waiting for approval. "
            "Waiting: ['toolu_D']."
        },
    )
    assert malformed == (400, {"error": "'input' must be a JSON object."})
    assert approved == (200, {"ok": True})
    assert CALLS == ["delete /tmp/scratch"]
    assert fake_api.bodies()[1]["messages"][-1]["content"] == [
        {"type": "tool_result", "tool_use_id": "toolu_D", "content": "deleted /tmp/scratch"}
    ]


async def test_denying_never_runs_the_tool_and_claude_sees_the_reason(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, console: str, http: aiohttp.ClientSession
) -> None:
    fake_api.script(delete_call("/etc"), end_turn("Understood."))
    async with worker(delete_file):
        run = await waiting_to_delete(runner, "all", thread=False)
        denied = await post(
            http, f"{console}/api/runs/{run.id}/deny", {"tool_use_id": "toolu_D", "reason": "Never touch /etc."}
        )
        await run.until_done()
    assert denied == (200, {"ok": True})
    assert CALLS == []
    assert fake_api.bodies()[1]["messages"][-1]["content"] == [
        {"type": "tool_result", "tool_use_id": "toolu_D", "content": "Never touch /etc.", "is_error": True}
    ]


async def test_an_injected_message_goes_out_with_the_next_turn(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, console: str, http: aiohttp.ClientSession
) -> None:
    fake_api.script(delete_call("/tmp/a"), end_turn("C'est fait."))
    async with worker(delete_file):
        run = await waiting_to_delete(runner, "all", thread=False)
        # Accepted while the run waits for a person: the request does not wait for the approval, it is queued.
        injected = await post(http, f"{console}/api/runs/{run.id}/inject", {"content": "Answer in French."})
        empty = await post(http, f"{console}/api/runs/{run.id}/inject", {"content": ""})
        await post(http, f"{console}/api/runs/{run.id}/approve", {"tool_use_id": "toolu_D"})
        await run.until_done()
    assert injected == (200, {"ok": True})
    assert empty == (400, {"error": "'content' is empty."})
    assert fake_api.bodies()[1]["messages"][-1] == {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "toolu_D", "content": "deleted /tmp/a"},
            {"type": "text", "text": "Answer in French."},
        ],
    }


async def test_retry_discards_the_last_reply_and_its_tools_never_run(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, console: str, http: aiohttp.ClientSession
) -> None:
    fake_api.script(delete_call("/etc"), end_turn("Sorry."))
    async with worker(delete_file):
        run = await runner.start(**BASE, tools=[delete_file], step=True)
        await wait_status(run, "waiting_for_step", 1)
        retried = await post(http, f"{console}/api/runs/{run.id}/retry", {})
        await run.advance()
        await wait_status(run, "waiting_for_step", 2)
        await run.advance()
        await run.until_done()
    assert retried == (200, {"ok": True})
    assert CALLS == []
    first, second = fake_api.bodies()
    assert second["messages"] == first["messages"] == [USER]


async def test_stop_ends_a_run_that_waits_for_approval_without_running_the_tool(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, console: str, http: aiohttp.ClientSession
) -> None:
    fake_api.script(delete_call("/etc"))
    async with worker(delete_file):
        run = await waiting_to_delete(runner, "all")
        stopped = await post(http, f"{console}/api/runs/{run.id}/stop", {"reason": "the operator said no"})
        result = await run.result()
        again = await post(http, f"{console}/api/runs/{run.id}/stop", {})
    assert stopped == (200, {"ok": True})
    assert (result.status, result.detail) == ("stopped", "the operator said no")
    assert again == (409, {"error": f"stop was refused: run {run.id} has already ended. {TO_GO_ON}"})
    assert CALLS == [] and len(fake_api.requests) == 1


async def test_fork_starts_a_new_run_from_a_chosen_turn(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, console: str, http: aiohttp.ClientSession
) -> None:
    fake_api.script(end_turn("First answer."), end_turn("Second answer."))
    async with worker():
        run = await runner.start(**BASE, thread=False)
        await run.until_done()
        created = await post(http, f"{console}/api/runs/{run.id}/fork", {"from_iteration": 1, "id": f"{run.id}-fork"})
        final = await runner.attach(f"{run.id}-fork").until_done()
        zero = await post(http, f"{console}/api/runs/{run.id}/fork", {"from_iteration": 0})
        past = await post(http, f"{console}/api/runs/{run.id}/fork", {"from_iteration": 2})
    assert created == (201, {"id": f"{run.id}-fork"})
    assert final.content[0].type == "text" and final.content[0].text == "Second answer."
    first, second = fake_api.bodies()
    assert second == first
    assert zero == (400, {"error": "'from_iteration' counts turns from 1."})
    # The run's own refusal, the user's to act on: not a 502, as if the console or the run had broken.
    assert past == (409, {"error": "Iteration 2 does not exist; the run has 1 replies."})


async def test_a_what_if_fork_takes_another_model_and_answers_the_runs_calls_from_its_record(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, console: str, http: aiohttp.ClientSession
) -> None:
    call = Reply([tool_use("toolu_D", "delete_file", {"path": "/tmp/a"})], "tool_use")
    fake_api.script(call, end_turn("Deleted."), call, end_turn("Deleted again."))
    async with worker(delete_file):
        run = await runner.start(**BASE, tools=[delete_file])
        await run.until_done()
        url = f"{console}/api/runs/{run.id}/fork"
        body = {"from_iteration": 1, "id": f"{run.id}-what-if", "changes": {"model": "claude-fake-2"}}
        created = await post(http, url, {**body, "tool_results": "recorded_only"})
        await runner.attach(f"{run.id}-what-if").until_done()
        unknown = await post(http, url, {**body, "tool_results": "cached"})
        refused = await post(http, url, {**body, "changes": {"messages": []}})
    assert created == (201, {"id": f"{run.id}-what-if"})
    assert CALLS == ["delete /tmp/a"]  # the run's call only: the fork's got its result from the record
    assert fake_api.bodies()[2]["model"] == "claude-fake-2"
    assert fake_api.bodies()[3]["messages"][-1] == {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "toolu_D", "content": "deleted /tmp/a"}],
    }
    assert unknown == (400, {"error": "'tool_results' must be one of 'run', 'recorded', 'recorded_only'."})
    assert refused == (
        400,
        {
            "error": "A fork's changes cannot set `messages`: its messages and tools are the fork point's, and "
            "`tool_results` says how its tool calls are answered. Fork from another iteration, or start a new run "
            "with `AgentRunner.start`."
        },
    )


# --- Who may use it ---------------------------------------------------------------------------------------------


async def test_on_loopback_it_needs_no_token_but_only_answers_to_loopback_names(
    console: str, http: aiohttp.ClientSession
) -> None:
    async with http.get(f"{console}/") as page:
        assert page.status == 200 and page.content_type == "text/html"
        assert page.headers["X-Frame-Options"] == "DENY"
        assert "frame-ancestors 'none'" in page.headers["Content-Security-Policy"]
        assert '<script src="/static/console.js" defer></script>' in await page.text()
    async with http.get(f"{console}/static/console.js") as script:
        assert script.status == 200 and "function showRun" in await script.text()
    port = console.rsplit(":", 1)[1]
    async with http.get(f"{console}/", headers={"Host": f"localhost:{port}"}) as ok:
        assert ok.status == 200
    # A page whose name an attacker points at 127.0.0.1 (DNS rebinding) is refused.
    async with http.get(f"{console}/api/runs", headers={"Host": f"attacker.example:{port}"}) as rebound:
        assert rebound.status == 403
        assert await rebound.json() == {
            "error": f"Host 'attacker.example:{port}' is not this machine: open the console at http://127.0.0.1"
        }


async def test_it_refuses_to_start_beyond_loopback_without_a_token(
    runner: AgentRunner, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AGENT_RUNNER_CONSOLE_TOKEN", raising=False)
    with pytest.raises(ConfigurationError, match="beyond this machine, only with a token"):
        create_app(runner, host="0.0.0.0")
    with pytest.raises(ConfigurationError, match="16 characters or more"):
        create_app(runner, host="0.0.0.0", token="short")
    create_app(runner, host="0.0.0.0", token=TOKEN)  # with one, it may
    assert main(["--host", "0.0.0.0", "--port", "0"]) == 2
    assert capsys.readouterr().err == (
        "error: The console serves on 0.0.0.0, beyond this machine, only with a token: anyone who reaches it could "
        "read every transcript and approve tool calls. Set AGENT_RUNNER_CONSOLE_TOKEN or pass --token (make one "
        'with: python -c "import secrets; print(secrets.token_urlsafe())"), or bind to 127.0.0.1.\n'
    )
    assert [is_loopback(h) for h in ("127.0.0.1", "::1", "[::1]", "localhost", "0.0.0.0", "", "10.1.2.3", "box")] == [
        True, True, True, True, False, False, False, False
    ]  # fmt: skip


async def test_with_a_token_every_request_carries_it(runner: AgentRunner, http: aiohttp.ClientSession) -> None:
    async with serving(runner, token=TOKEN) as url:
        assert await get(http, f"{url}/api/runs/x") == (
            401,
            {
                "error": f"This console needs its token: open it once as {url}/?token=<token>, or send "
                "Authorization: Bearer <token>."
            },
        )
        assert await get(http, f"{url}/api/runs/x", headers={"Authorization": "Bearer wrong-token-of-some-length"}) == (
            403,
            {"error": "Wrong token."},
        )
        assert (await get(http, f"{url}/api/runs/x", headers={"Authorization": f"Bearer {TOKEN}"}))[0] == 404
        async with http.get(f"{url}/runs/x?token={TOKEN}&a=1", allow_redirects=False) as handed:
            # The browser gets a cookie, and an address without the token.
            assert handed.status == 303 and handed.headers["Location"] == "/runs/x?a=1"
            cookie = handed.headers["Set-Cookie"]
            assert cookie.startswith(f"{COOKIE}={TOKEN};") and "HttpOnly" in cookie and "SameSite=Strict" in cookie
        async with http.get(f"{url}/?token=wrong-token-of-some-length", allow_redirects=False) as wrong:
            assert wrong.status == 403
        cookies = {"Cookie": f"{COOKIE}={TOKEN}"}
        assert (await get(http, f"{url}/api/runs/x", headers=cookies))[0] == 404
        assert (await get(http, f"{url}/api/runs/x", headers={"Cookie": f"{COOKIE}=wrong"})) == (
            403,
            {"error": "Wrong token."},
        )
        async with http.get(f"{url}/static/console.js") as script:
            assert script.status == 401  # the page's files too


async def test_a_post_from_another_page_is_refused_even_with_the_cookie(
    runner: AgentRunner, http: aiohttp.ClientSession
) -> None:
    async with serving(runner, token=TOKEN) as url:
        cookie = {"Cookie": f"{COOKIE}={TOKEN}"}
        approve = f"{url}/api/runs/no-such-run/approve"
        body = {"tool_use_id": "toolu_D"}
        # The console's own page passes the checks (and reaches the handler: no such run).
        assert (await post(http, approve, body, headers={**cookie, "Origin": url}))[0] == 404
        assert await post(http, approve, body, headers={**cookie, "Origin": "http://evil.example"}) == (
            403,
            {"error": "Requests from http://evil.example are refused: use the console's own page."},
        )
        assert await post(http, approve, body, headers={**cookie, "Sec-Fetch-Site": "cross-site"}) == (
            403,
            {"error": "Requests from a cross-site page are refused: use the console's own page."},
        )
        # A plain form post (the one kind another page can send without asking first) is refused whatever it carries.
        async with http.post(approve, data={"tool_use_id": "toolu_D"}, headers=cookie) as form:
            assert form.status == 415
            assert await form.json() == {"error": "Send the request body as JSON (Content-Type: application/json)."}
    # Without a token (loopback), the same checks hold: they are what keeps other pages out then.
    async with serving(runner) as url:
        approve = f"{url}/api/runs/no-such-run/approve"
        assert (await post(http, approve, body, headers={"Origin": "http://evil.example"}))[0] == 403
        async with http.post(approve, data="{}", headers={"Content-Type": "text/plain"}) as plain:
            assert plain.status == 415


def test_the_console_uses_only_the_client_and_the_contract() -> None:
    found = set()
    for path in sorted((ROOT / "agent_runner" / "console").glob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        for _, name in _imports(rel, path.read_text()):
            layer = _layer_of_module(name)
            if layer is not None and not name.startswith("agent_runner.console"):
                found.add(layer)
    assert found == {"client", "contract"}


async def test_python_m_agent_runner_console_serves_until_interrupted(
    temporal_env: WorkflowEnvironment, http: aiohttp.ClientSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TEMPORAL_ADDRESS", temporal_env.client.service_client.config.target_host)
    monkeypatch.delenv("AGENT_RUNNER_CONSOLE_TOKEN", raising=False)
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "agent_runner.console", "--port", "0", stdout=asyncio.subprocess.PIPE
    )
    try:
        assert process.stdout is not None
        ready = (await asyncio.wait_for(process.stdout.readline(), 60)).decode()
        assert ready.startswith("READY http://127.0.0.1:") and ready.endswith("/\n")
        status, listing = await get(http, f"{ready.split()[1]}api/runs?limit=1")
        assert status == 200 and list(listing) == ["runs"]
        process.send_signal(signal.SIGINT)
        assert await asyncio.wait_for(process.wait(), 20) == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


# --- tests/console/run.sh, the browser tier's script: each failing step says why -----------------------------------

RUN_SH = ROOT / "tests" / "console" / "run.sh"


def run_browser_script(tmp_path: Path, **stubs: str) -> subprocess.CompletedProcess[str]:
    """run.sh with some commands replaced by shell stubs (``id``, ``dpkg-query``, ``apt-get``): nothing is installed."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(parents=True)
    for name, body in stubs.items():
        stub = bin_dir / name.replace("_", "-")
        stub.write_text(f"#!/bin/sh\n{body}\n")
        stub.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    return subprocess.run(["bash", str(RUN_SH)], env=env, capture_output=True, text=True, timeout=30, check=False)


def test_the_browser_script_parses() -> None:
    done = subprocess.run(["bash", "-n", str(RUN_SH)], capture_output=True, text=True, timeout=30, check=False)
    assert (done.returncode, done.stderr) == (0, "")


def test_the_browser_script_says_only_root_can_install_chromium(tmp_path: Path) -> None:
    done = run_browser_script(tmp_path, id="echo 1000", dpkg_query="exit 1")
    assert (done.returncode, done.stdout, done.stderr) == (
        1,
        "",
        "[browser] FAILED: chromium chromium-driver missing, and only root can apt-get install it: run this as root\n",
    )


def test_the_browser_script_says_which_apt_step_failed(tmp_path: Path) -> None:
    done = run_browser_script(tmp_path / "update", id="echo 0", dpkg_query="exit 1", apt_get="exit 100")
    assert (done.returncode, done.stdout, done.stderr) == (
        1,
        "[browser] installing Debian's chromium chromium-driver\n",
        "[browser] FAILED: apt-get update (exit 100): apt cannot read its package lists; check "
        "/etc/apt/sources.list.d/\n",
    )
    done = run_browser_script(
        tmp_path / "install", id="echo 0", dpkg_query="exit 1", apt_get='[ "$1" = update ] && exit 0; exit 100'
    )
    assert (done.returncode, done.stderr) == (
        1,
        "[browser] FAILED: apt-get install chromium chromium-driver (exit 100); its own message is above\n",
    )
