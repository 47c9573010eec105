"""Steering a live run: each control reaches the run as an update, applies at the iteration boundary, and the
exact next request shows it. Each of the SDK's verified pitfalls has a test proving it does not happen here."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from temporalio.client import Client, WorkflowUpdateFailedError, WorkflowUpdateStage
from temporalio.exceptions import ApplicationError
from temporalio.worker import Worker

from agent_runner.activities.claude import ClaudeActivities
from agent_runner.activities.tools import ToolActivities, ToolRegistry
from agent_runner.client import AgentRunner
from agent_runner.contract.errors import EditRejected
from agent_runner.contract.steering import ADVANCE_UPDATE, APPROVE_TOOL_UPDATE, INJECT_MESSAGE_UPDATE
from agent_runner.testing import FakeMessagesAPI, Reply, SlowStream, end_turn, text, tool_use
from agent_runner.workflows.agent_run import AgentRun
from tests.conftest import WorkerFactory, anthropic_client_factory
from tests.steering_support import CALLS, GATE, delete_file, gated, wait_accepted, wait_status
from tests.tools_for_tests import get_time, get_weather

USER = {"role": "user", "content": "Weather in Paris?"}
BASE: dict[str, Any] = {"model": "claude-fake-1", "max_tokens": 1024, "messages": [USER]}
pytestmark = pytest.mark.usefixtures("fresh_tools")


def weather_call(tool_id: str = "toolu_A1", city: str = "Paris") -> Reply:
    return Reply([text("Checking."), tool_use(tool_id, "get_weather", {"city": city})], "tool_use")


async def test_injected_message_joins_the_tool_results_and_no_tool_runs_twice(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """The SDK's documented pattern ran every tool twice (pitfall g2); here the tool runs once."""
    fake_api.script(Reply([tool_use("toolu_G", "gated", {"city": "Paris"})], "tool_use"), end_turn("Ensoleillé."))
    async with worker(gated):
        run = await runner.start(**BASE, tools=[gated], thread=False)
        async with asyncio.timeout(20):
            while not CALLS:
                await asyncio.sleep(0.02)
        inject = asyncio.create_task(run.inject("Also answer in French."))
        await wait_accepted(run, INJECT_MESSAGE_UPDATE)  # while the tool runs
        GATE.set()
        version = await inject
        await run.until_done()
    assert CALLS == ["Paris"]
    assert fake_api.bodies()[1]["messages"][2] == {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "toolu_G", "content": "report for Paris"},
            {"type": "text", "text": "Also answer in French."},
        ],
    }
    assert version == 3  # reply 1, tool results, then the injection


async def test_a_message_injected_after_the_final_reply_continues_the_conversation(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """In step mode the run waits after `end_turn`; an injection then goes out as a new user turn, never as
    `[user, user]` (pitfall g1)."""
    fake_api.script(end_turn("Sunny."), end_turn("Ensoleillé."))
    async with worker():
        run = await runner.start(**BASE, step=True)
        await wait_status(run, "waiting_for_step", 1)
        await run.inject("In French, please.")
        await run.advance()
        await wait_status(run, "waiting_for_step", 2)
        await run.advance()
        result = await run.result()
    assert result.iterations == 2 and result.status == "completed"
    assert fake_api.bodies()[1] == {
        "model": "claude-fake-1",
        "max_tokens": 1024,
        "stream": True,
        "messages": [{"role": "user", "content": [{"type": "text", "text": "In French, please."}]}],
        "thread": {"type": "continue", "previous_message_id": "msg_fake_001"},
    }


async def test_retry_resends_the_turn_on_a_new_thread_and_the_discarded_replys_tools_never_run(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """Pitfall g3: the SDK's retry still ran the dropped reply's tools."""
    fake_api.script(Reply([tool_use("toolu_D", "delete_file", {"path": "/etc"})], "tool_use"), end_turn("Sorry."))
    async with worker(delete_file):
        run = await runner.start(**BASE, tools=[delete_file], step=True)
        await wait_status(run, "waiting_for_step", 1)
        assert await run.retry() is None  # accepted; it applies at the boundary after `advance`
        await run.advance()
        await wait_status(run, "waiting_for_step", 2)
        await run.advance()
        await run.until_done()
    assert CALLS == []
    first, second = fake_api.bodies()
    assert second["messages"] == first["messages"] == [USER]
    assert second["thread"] == {"type": "create"}


async def test_a_retry_keeps_what_edits_added_after_the_reply_it_drops(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """An injected message and a tool change accepted before the retry were lost with the reply (their edits said
    they applied); they are kept, after the messages before the reply. Recorded behind a patch asked only then."""
    from tests.test_umbrella_patch import markers

    lookup = {"name": "lookup", "description": "Look it up.", "input_schema": {"type": "object", "properties": {}}}
    fake_api.script(Reply([tool_use("toolu_D", "delete_file", {"path": "/etc"})], "tool_use"), end_turn("Sorry."))
    async with worker(delete_file):
        run = await runner.start(**BASE, tools=[delete_file], step=True, betas=["inline-tools-2026-09-15"])
        await wait_status(run, "waiting_for_step", 1)
        await run.inject("Only ever touch /tmp.")
        await run.add_tools(lookup)
        await run.retry()
        await run.advance()
        await wait_status(run, "waiting_for_step", 2)
        await run.advance()
        await run.until_done()
        transcript = await run.transcript()
    assert CALLS == []
    addition = {"type": "tool_addition", "tool": {"type": "tool_definition", "definition": lookup}}
    kept = [
        {"role": "user", "content": [text("Weather in Paris?"), text("Only ever touch /tmp.")]},
        {"role": "system", "content": [addition]},
    ]
    assert fake_api.bodies()[1]["messages"] == kept
    assert transcript == [*kept, {"role": "assistant", "content": [text("Sorry.")]}]
    assert "retry-keeps-edits" in markers(await run.handle.fetch_history())


async def test_replace_history_needs_the_current_version_and_starts_a_new_thread(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    fake_api.script(end_turn("Sunny."), end_turn("Short answer."))
    trimmed = [{"role": "user", "content": "Just say hi."}]
    async with worker():
        run = await runner.start(**BASE, step=True)
        await wait_status(run, "waiting_for_step", 1)
        snapshot = await run.versioned_transcript()
        with pytest.raises(EditRejected, match=r"changed since version 0 \(it is now at 1\)"):
            await run.replace_history(trimmed, expected_version=0)
        accepted = await run.replace_history(trimmed, expected_version=snapshot.version)
        await run.advance()
        await wait_status(run, "waiting_for_step", 2)
        await run.advance()
        await run.until_done()
    assert accepted is None
    assert fake_api.bodies()[1]["messages"] == trimmed
    assert fake_api.bodies()[1]["thread"] == {"type": "create"}


async def test_a_retry_before_the_first_reply_is_refused_before_anything_is_written(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """There is nothing to retry yet: the update's validator refuses it, so it never enters the run's history."""
    replied = threading.Event()
    fake_api.script(Reply([text("Sunny.")], until=replied))
    async with worker():
        run = await runner.start(**BASE)
        try:
            await asyncio.to_thread(fake_api.wait_for_requests, 1, 20)  # the first reply is held until the retry
            with pytest.raises(EditRejected, match=r"There is no reply to retry yet\."):
                await run.retry()
        finally:
            replied.set()
        await run.until_done()
        history = await run.handle.fetch_history()
    assert [e for e in history.events if e.HasField("workflow_execution_update_accepted_event_attributes")] == []
    assert [body["messages"] for body in fake_api.bodies()] == [[USER]]


async def test_an_advance_for_the_reply_still_coming_waits_for_its_pause_then_lets_the_run_on(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """Accepted, not refused as "not paused": Temporal may hand the run the update with the reply it pauses after."""
    replied = threading.Event()
    fake_api.script(Reply([text("Sunny.")], "end_turn", until=replied))
    async with worker():
        run = await runner.start(**BASE, step=True)
        try:
            await asyncio.to_thread(fake_api.wait_for_requests, 1, 20)
            # The first reply is held until the advance is accepted; the advance completes at the pause after it.
            advance = await run.handle.start_update(
                ADVANCE_UPDATE, {"iteration": 1}, wait_for_stage=WorkflowUpdateStage.ACCEPTED
            )
        finally:
            replied.set()
        async with asyncio.timeout(20):
            await advance.result()
        result = await run.result()
    assert (result.status, result.iterations) == ("completed", 1)


async def test_history_with_an_orphan_tool_result_is_refused_before_anything_is_written(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """Pitfall g9: an orphan `tool_result` the real API rejects."""
    fake_api.script(end_turn("Sunny."))
    orphan = [USER, {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_Z", "content": "x"}]}]
    async with worker():
        run = await runner.start(**BASE, step=True)
        await wait_status(run, "waiting_for_step", 1)
        with pytest.raises(EditRejected, match="answers `tool_use_id` 'toolu_Z'"):
            await run.replace_history(orphan, expected_version=1)
        with pytest.raises(EditRejected, match="tool results come from the run's tools"):
            await run.inject([{"type": "tool_result", "tool_use_id": "toolu_Z", "content": "x"}])
        history = await run.handle.fetch_history()
        await run.stop()
        await run.result()
    assert "toolu_Z" not in str(history.to_json())


async def test_update_params_apply_to_later_turns_and_system_cannot_change_on_a_thread(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    fake_api.script(weather_call(), end_turn("ok"))
    async with worker(get_weather):
        run = await runner.start(**BASE, tools=[get_weather], step=True, system="terse")
        await wait_status(run, "waiting_for_step", 1)
        with pytest.raises(EditRejected, match="Cannot change `system` on a thread"):
            await run.update_params(system="verbose")
        await run.update_params(max_tokens=77, tool_choice={"type": "none"})
        await run.advance()
        await wait_status(run, "waiting_for_step", 2)
        await run.advance()
        await run.until_done()
    second = fake_api.bodies()[1]
    assert (second["max_tokens"], second["tool_choice"]) == (77, {"type": "none"})


async def test_added_and_removed_tools_are_announced_in_one_system_message_after_the_results(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    fake_api.script(
        weather_call("toolu_1"),
        Reply([tool_use("toolu_2", "get_weather", {"city": "Oslo"})], "tool_use"),
        end_turn("ok"),
    )
    async with worker(get_weather, get_time):
        run = await runner.start(
            **BASE, tools=[get_weather], step=True, thread=False, betas=["inline-tools-2026-09-15"]
        )
        await wait_status(run, "waiting_for_step", 1)
        await run.add_tools(get_time)
        await run.remove_tools("get_weather")
        await run.advance()
        for iteration in (2, 3):
            await wait_status(run, "waiting_for_step", iteration)
            await run.advance()
        await run.until_done()
    second, third = fake_api.bodies()[1:]
    assert second["tools"] == fake_api.bodies()[0]["tools"]  # unchanged, to keep the prompt cache
    assert second["messages"][-1] == {
        "role": "system",
        "content": [
            {"type": "tool_addition", "tool": {"type": "tool_definition", "definition": get_time.to_dict()}},
            {"type": "tool_removal", "tool": {"type": "tool_reference", "name": "get_weather"}},
        ],
    }
    assert third["messages"][-1]["content"] == [
        {
            "type": "tool_result",
            "tool_use_id": "toolu_2",
            "content": "Error: Tool 'get_weather' not found",
            "is_error": True,
        }
    ]


async def test_stop_ends_the_run_and_the_current_replys_tools_never_run(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    fake_api.script(Reply([tool_use("toolu_D", "delete_file", {"path": "/etc"})], "tool_use"))
    async with worker(delete_file):
        run = await runner.start(**BASE, tools=[delete_file], step=True)
        await wait_status(run, "waiting_for_step", 1)
        await run.stop("the user closed the tab")
        result = await run.result()
        status = await run.status()
        with pytest.raises(EditRejected, match="has already ended"):
            await run.inject("hello?")
    assert CALLS == []
    assert result.status == "stopped" and status.stop_reason_detail == "the user closed the tab"
    assert len(fake_api.requests) == 1


async def test_a_denied_tool_never_runs_and_claude_sees_the_reason(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """Pitfall h2: denying by appending a result still executed the tool in the SDK."""
    fake_api.script(Reply([tool_use("toolu_D", "delete_file", {"path": "/etc"})], "tool_use"), end_turn("Understood."))
    async with worker(delete_file):
        run = await runner.start(**BASE, tools=[delete_file], approval={"tools": ["delete_file"]})
        await wait_status(run, "waiting_for_approval")
        pending = await run.pending_approvals()
        status = await run.status()
        await run.deny("toolu_D", "Never touch /etc.")
        await run.until_done()
    assert [(p.tool_use_id, p.name, p.input) for p in pending] == [("toolu_D", "delete_file", {"path": "/etc"})]
    assert status.pending_approvals[0]["tool_use_id"] == "toolu_D"
    assert CALLS == []
    assert fake_api.bodies()[1]["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_D", "content": "Never touch /etc.", "is_error": True}
            ],
        }
    ]


async def test_approval_with_edited_input_runs_the_tool_with_that_input(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    fake_api.script(Reply([tool_use("toolu_D", "delete_file", {"path": "/etc"})], "tool_use"), end_turn("Done."))
    async with worker(delete_file):
        run = await runner.start(**BASE, tools=[delete_file], approval={"tools": "all"})
        await wait_status(run, "waiting_for_approval")
        with pytest.raises(EditRejected, match="'toolu_nope' is not waiting for approval. Waiting: \\['toolu_D'\\]"):
            await run.approve("toolu_nope")
        with pytest.raises(EditRejected, match="'toolu_nope' is not waiting for approval. Waiting: \\['toolu_D'\\]"):
            await run.deny("toolu_nope", "a call Claude has not made is not denied ahead")
        await run.approve("toolu_D", input={"path": "/tmp/scratch"})
        await run.until_done()
    assert CALLS == ["delete /tmp/scratch"]


async def test_edited_input_the_tools_schema_refuses_is_refused_and_the_call_still_waits(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """A person's edited input is checked against the tool's ``input_schema`` as it is sent (from the Python client,
    held, or as the stock CLI sends it, plain): refused with what is wrong, the call still waits, and a fixed input
    runs. Claude's own input is left to the tool, as in the SDK."""
    fake_api.script(Reply([tool_use("toolu_D", "delete_file", {"path": "/etc"})], "tool_use"), end_turn("Done."))
    async with worker(delete_file):
        run = await runner.start(**BASE, tools=[delete_file], approval={"tools": "all"})
        await wait_status(run, "waiting_for_approval")
        with pytest.raises(EditRejected) as wrong_type:
            await run.approve("toolu_D", input={"path": 5})
        with pytest.raises(WorkflowUpdateFailedError) as stock:
            await run.handle.execute_update(APPROVE_TOOL_UPDATE, {"tool_use_id": "toolu_D", "input": {"file": "/x"}})
        pending = await run.pending_approvals()
        await run.approve("toolu_D", input={"path": "/tmp/scratch"})
        await run.until_done()
    assert str(wrong_type.value) == (
        "approve_tool was refused: The edited input does not fit delete_file's input_schema: at `path`: 5 is not of "
        "type 'string'. Approve with input the schema accepts, or with none to run the call as Claude wrote it."
    )
    assert isinstance(stock.value.cause, ApplicationError) and stock.value.cause.message == (
        "The edited input does not fit delete_file's input_schema: Additional properties are not allowed ('file' was "
        "unexpected); 'path' is a required property. Approve with input the schema accepts, or with none to run the "
        "call as Claude wrote it."
    )
    assert [(p.tool_use_id, p.input) for p in pending] == [("toolu_D", {"path": "/etc"})]
    assert CALLS == ["delete /tmp/scratch"]
    assert fake_api.bodies()[1]["messages"][-1]["content"] == [
        {"type": "tool_result", "tool_use_id": "toolu_D", "content": "deleted /tmp/scratch"}
    ]


async def test_an_unanswered_approval_times_out_as_denied(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    fake_api.script(Reply([tool_use("toolu_D", "delete_file", {"path": "/etc"})], "tool_use"), end_turn("ok"))
    async with worker(delete_file):
        run = await runner.start(**BASE, tools=[delete_file], approval={"tools": "all", "timeout": "PT1S"})
        await run.until_done()
    assert CALLS == []
    assert fake_api.bodies()[1]["messages"][0]["content"] == [
        {
            "type": "tool_result",
            "tool_use_id": "toolu_D",
            "content": "No approval within 0:00:01; not executed.",
            "is_error": True,
        }
    ]


async def test_step_mode_takes_tool_results_the_client_built_and_runs_no_tool(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    fake_api.script(Reply([tool_use("toolu_D", "delete_file", {"path": "/etc"})], "tool_use"), end_turn("ok"))
    mine = [{"type": "tool_result", "tool_use_id": "toolu_D", "content": "Refused by policy.", "is_error": True}]
    async with worker(delete_file):
        run = await runner.start(**BASE, tools=[delete_file], step=True)
        await wait_status(run, "waiting_for_step", 1)
        with pytest.raises(EditRejected, match="must answer each `tool_use` of the last reply exactly once"):
            await run.advance(tool_results=[])
        await run.advance(tool_results=mine)
        await wait_status(run, "waiting_for_step", 2)
        await run.advance()
        await run.until_done()
    assert CALLS == []
    assert fake_api.bodies()[1]["messages"] == [{"role": "user", "content": mine}]


@pytest.mark.parametrize("step", [True, {"review_results": True}], ids=["step", "review-results"])
async def test_the_step_loop_reads_like_the_sdks_loop_body(
    step: Any, runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """`async for message in run` on a step-mode run: each iteration of the loop advances the run (past the review
    of its tools' results too, which go as they are)."""
    fake_api.script(weather_call("toolu_1"), weather_call("toolu_2", "Oslo"), end_turn("done"))
    seen: list[str] = []
    async with worker(get_weather):
        run = await runner.start(**BASE, tools=[get_weather], step=step)
        async for message in run:
            seen.append(message.id)
            if message.id == "msg_fake_002":
                await run.inject("Keep it short.")
    assert seen == ["msg_fake_001", "msg_fake_002", "msg_fake_003"]
    assert fake_api.bodies()[2]["messages"][0]["content"][-1] == {"type": "text", "text": "Keep it short."}


async def test_a_step_that_nobody_advances_stops_the_run_after_its_timeout(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    fake_api.script(Reply([tool_use("toolu_D", "delete_file", {"path": "/etc"})], "tool_use"))
    async with worker(delete_file):
        run = await runner.start(**BASE, tools=[delete_file], step={"timeout": "PT1S"})
        result = await run.result()
        status = await run.status()
    assert result.status == "stopped" and CALLS == []
    assert status.stop_reason_detail == "No client advanced the run within 0:00:01."


async def test_many_injections_from_several_clients_each_appear_once_in_order(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """Every accepted injection lands exactly once, in the order the run accepted it; none is lost, even when more
    arrive at once than Temporal's 10 updates in flight."""
    fake_api.responder = lambda _body: Reply([text("ok")], "end_turn")
    async with worker():
        run = await runner.start(**BASE, step=True, thread=False)
        await wait_status(run, "waiting_for_step", 1)
        clients = [runner.attach(run.id) for _ in range(3)]
        for i in range(6):  # one after another from three clients: the order is known
            await clients[i % 3].inject(f"note {i}", wait=False)
        burst = [clients[i % 3].inject(f"burst {i}", wait=False) for i in range(15)]
        assert await asyncio.gather(*burst) == [None] * 15  # each accepted
        await run.advance()
        await wait_status(run, "waiting_for_step", 2)
        status = await run.status()
        await run.stop()
        await run.result()
    notes = [b["text"] for b in fake_api.bodies()[1]["messages"][-1]["content"]]
    assert notes[:6] == [f"note {i}" for i in range(6)]
    assert sorted(notes[6:]) == sorted(f"burst {i}" for i in range(15))
    assert status.version == 1 + 21 + 1  # the first reply, 21 edits, the second reply


async def test_compaction_summarizes_the_history_on_a_new_thread_and_does_not_count_as_an_iteration(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """The SDK's `compact_before_next_turn`: one request with the full history and `compaction`, without the
    parameters it cannot carry; the next turn continues from the summary alone."""
    summary = {"type": "compaction", "content": "Summary: Paris is sunny."}
    fake_api.script(weather_call(), Reply([summary], "compaction"), end_turn("Anything else?"))
    async with worker(get_weather):
        run = await runner.start(
            **BASE,
            tools=[get_weather],
            step=True,
            max_iterations=2,
            betas=["compact-2026-09-04"],
            stop_sequences=["END"],
            tool_choice={"type": "any"},
        )
        await wait_status(run, "waiting_for_step", 1)
        await run.compact()
        await run.advance()
        await wait_status(run, "waiting_for_step", 2)
        await run.advance()
        result = await run.result()
    first, compaction, after = fake_api.bodies()
    assert {k: v for k, v in compaction.items() if k != "messages"} == {
        "model": "claude-fake-1",
        "max_tokens": 1024,
        "stream": True,
        "tools": first["tools"],
        "thread": {"type": "create"},
        "compaction": {"type": "summarize"},
    }
    assert compaction["messages"] == [
        USER,
        {"role": "assistant", "content": [text("Checking."), tool_use("toolu_A1", "get_weather", {"city": "Paris"})]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_A1", "content": "sunny, 21C in Paris"}],
        },
    ]
    assert after["messages"] == [{"role": "assistant", "content": [summary]}]
    assert after["thread"] == {"type": "create"}
    assert result.iterations == 2 and result.status == "completed"  # 3 requests within max_iterations=2


async def test_step_mode_review_shows_tool_results_and_takes_changed_ones(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """The SDK's "modify tool results", without running the tool twice: the run pauses with the results."""
    fake_api.script(weather_call("toolu_R"), end_turn("ok"))
    changed = [
        {
            "type": "tool_result",
            "tool_use_id": "toolu_R",
            "content": "sunny, 21C in Paris",
            "cache_control": {"type": "ephemeral"},
        }
    ]
    async with worker(get_weather):
        run = await runner.start(**BASE, tools=[get_weather], step={"review_results": True})
        await wait_status(run, "waiting_for_step", 1)
        await run.advance()
        await wait_status(run, "waiting_for_review", 1)
        review = (await run.status()).tool_results_under_review
        await run.advance(tool_results=changed)
        await wait_status(run, "waiting_for_step", 2)
        await run.advance()
        await run.until_done()
    assert review == [{"type": "tool_result", "tool_use_id": "toolu_R", "content": "sunny, 21C in Paris"}]
    assert fake_api.bodies()[1]["messages"] == [{"role": "user", "content": changed}]


async def test_tool_edits_naming_unknown_tools_are_refused_up_front(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    fake_api.script(end_turn("ok"))
    async with worker(get_weather):
        run = await runner.start(**BASE, tools=[get_weather], step=True)
        await wait_status(run, "waiting_for_step", 1)
        with pytest.raises(
            EditRejected, match=r"No worker registered \['launch_rocket'\]; registered: \['get_weather'\]"
        ):
            await run.add_tools("launch_rocket")
        with pytest.raises(EditRejected, match=r"The run has no tools named \['get_time'\]; it has \['get_weather'\]"):
            await run.remove_tools("get_time")
        await run.stop()
        await run.result()


async def test_fork_resumes_a_run_from_a_chosen_iteration_as_a_new_run(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """The new run's first request is the original's request for that iteration; the original is untouched."""
    fake_api.script(weather_call("toolu_1"), weather_call("toolu_2", "Oslo"), end_turn("done"), end_turn("again"))
    async with worker(get_weather):
        run = await runner.start(**BASE, tools=[get_weather], thread=False, system="terse")
        await run.until_done()
        fork = await run.fork(2)
        await fork.until_done()
        with pytest.raises(Exception, match="Iteration 9 does not exist; the run has 3 replies"):
            await run.fork(9)
    bodies = fake_api.bodies()
    assert bodies[3] == bodies[1]
    assert fork.id != run.id


async def test_advance_reaches_a_worker_replaying_the_run_and_a_stale_one_is_refused(
    client: Client, task_queue: str, runner: AgentRunner, fake_api: FakeMessagesAPI
) -> None:
    """A worker with no workflow cache replays the run for every task, and Temporal may then hand it the update
    together with the reply the run pauses on: the advance waits for that pause instead of being refused."""
    fake_api.script(
        SlowStream(
            Reply([text("Checking. " * 20), tool_use("toolu_1", "get_weather", {"city": "Paris"})], "tool_use"), 0.02
        ),
        SlowStream(Reply([text("Sunny. " * 20)], "end_turn"), 0.02),
    )
    registry = ToolRegistry([get_weather])
    claude = ClaudeActivities(anthropic_client_factory(fake_api))
    tools = ToolActivities(registry)
    uncached = Worker(
        client,
        task_queue=task_queue,
        workflows=[AgentRun],
        activities=[claude.create_message, tools.describe_tools, tools.run_tool],
        max_cached_workflows=0,
    )
    async with claude.running(), uncached:  # a bare Worker: the client its model calls open is closed here
        run = await runner.start(**BASE, tools=[get_weather], step=True)
        await wait_status(run, "waiting_for_step", 1)
        with pytest.raises(EditRejected, match="advance was refused"):  # stale: the run paused after iteration 1
            await run.advance(iteration=0)
        await run.advance()
        await wait_status(run, "waiting_for_step", 2)
        await run.advance()
        result = await run.result()
    assert result.status == "completed" and result.iterations == 2
