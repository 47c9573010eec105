"""Steering keeps its promises in every state the run can be in: waiting for approval, tools running, ended.

Each test is a way the promise was seen broken: a retried turn whose tool still ran after approval, the README's
read-then-replace example refused because the run's own tool results moved the version, a refusal that the stock
CLI showed as retryable.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import threading
from typing import Any

import pytest
from temporalio.client import Client

from agent_runner.client import AgentRunner
from agent_runner.contract.errors import EditRejected
from agent_runner.contract.events import ApprovalDecided
from agent_runner.contract.steering import (
    ADVANCE_UPDATE,
    INJECT_MESSAGE_UPDATE,
    REPLACE_HISTORY_UPDATE,
    RETRY_TURN_UPDATE,
    TO_GO_ON,
)
from agent_runner.testing import FakeMessagesAPI, Reply, end_turn, text, tool_use
from tests.conftest import TEMPORAL_BIN, WorkerFactory
from tests.steering_support import CALLS, GATE, delete_file, gated, wait_accepted, wait_status

USER = {"role": "user", "content": "Clean up."}
BASE: dict[str, Any] = {"model": "claude-fake-1", "max_tokens": 1024, "messages": [USER]}
pytestmark = pytest.mark.usefixtures("fresh_tools")


async def test_a_turn_retried_while_its_call_waits_for_approval_never_runs_the_call(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    fake_api.script(
        Reply([text("Deleting."), tool_use("toolu_D", "delete_file", {"path": "/etc"})], "tool_use"),
        end_turn("On second thought, nothing to delete."),
    )
    async with worker(delete_file):
        run = await runner.start(**BASE, tools=[delete_file], approval={"tools": ["delete_file"]}, thread=False)
        await wait_status(run, "waiting_for_approval")
        await run.retry()
        result = await run.result()
    assert CALLS == []
    assert (result.status, result.iterations) == ("completed", 2)
    assert fake_api.bodies()[1]["messages"] == [USER]  # the turn, sent again without the discarded reply


async def test_a_call_waiting_for_approval_when_the_run_is_stopped_never_runs_and_says_why(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    fake_api.script(Reply([text("Deleting."), tool_use("toolu_D", "delete_file", {"path": "/etc"})], "tool_use"))
    async with worker(delete_file):
        run = await runner.start(**BASE, tools=[delete_file], approval={"tools": ["delete_file"]})
        await wait_status(run, "waiting_for_approval")
        await run.stop("Closing.")
        result = await run.result()
        transcript = await run.transcript()
        decided = [event async for event in run.events(agents=False) if isinstance(event, ApprovalDecided)]
    why = "The run was stopped before this call was executed."
    assert CALLS == [] and (result.status, result.detail) == ("stopped", "Closing.")
    assert transcript[-1] == {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "toolu_D", "content": why, "is_error": True}],
    }
    assert [(e.tool_use_id, e.approved, e.reason) for e in decided] == [("toolu_D", False, why)]


async def test_a_run_waits_for_approval_until_its_last_waiting_call_is_decided(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """Deciding one of two waiting calls leaves the run waiting (its status, what `list` and the console filter on)."""
    fake_api.script(
        Reply(
            [tool_use("toolu_1", "delete_file", {"path": "/a"}), tool_use("toolu_2", "delete_file", {"path": "/b"})],
            "tool_use",
        ),
        end_turn("Done."),
    )
    async with worker(delete_file):
        run = await runner.start(**BASE, tools=[delete_file], approval={"tools": "all"})
        async with asyncio.timeout(20):
            while len(await run.pending_approvals()) < 2:
                await asyncio.sleep(0.05)
        await run.approve("toolu_1")
        async with asyncio.timeout(20):
            while CALLS != ["delete /a"]:
                await asyncio.sleep(0.05)
        status = await run.status()
        waiting = [p.tool_use_id for p in await run.pending_approvals()]
        await run.deny("toolu_2", "Not that one.")
        result = await run.result()
    assert (status.status, waiting) == ("waiting_for_approval", ["toolu_2"])
    assert result.status == "completed" and CALLS == ["delete /a"]


async def test_replace_history_with_the_version_read_while_tools_run_applies(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """The README's example: read the versioned transcript, then replace the history with that version."""
    fake_api.script(
        Reply([text("Reporting."), tool_use("toolu_G", "gated", {"city": "Oslo"})], "tool_use"),
        end_turn("Hi."),
    )
    trimmed = [{"role": "user", "content": "Just say hi."}]
    async with worker(gated):
        run = await runner.start(**BASE, tools=[gated], thread=False)
        async with asyncio.timeout(20):
            while CALLS != ["Oslo"]:
                await asyncio.sleep(0.02)
        snapshot = await run.versioned_transcript()  # the reply is in; its tool is still running
        replaced = asyncio.create_task(run.replace_history(trimmed, expected_version=snapshot.version))
        await wait_accepted(run, REPLACE_HISTORY_UPDATE)  # while the tool runs
        GATE.set()
        version = await replaced
        await run.until_done()
    assert version is not None and version > snapshot.version
    assert fake_api.bodies()[1]["messages"] == trimmed


@pytest.mark.parametrize(
    ("edit", "calls"),
    [("replace_history", False), ("inject", False), ("retry", False), ("retry", True), ("replace_history", True)],
    ids=["replace", "inject", "retry", "retry-tool-use", "replace-tool-use"],
)
@pytest.mark.usefixtures("fresh_tools")
async def test_an_edit_made_against_a_version_read_mid_turn_is_refused_once_the_reply_the_sender_never_saw_comes(
    edit: str, calls: bool, runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """The version names what the sender saw: read while the model call streams, it does not hold the reply to come,
    which an edit applied after it would discard (``replace_history``, ``retry``) or answer unseen (``inject``). The
    edit is refused as the reply comes, so the run goes on as without it: the reply's tools run, a final reply ends
    the run."""
    content = [text("The answer you never saw.")]
    if calls:
        content.append(tool_use("toolu_D", "delete_file", {"path": "/tmp/x"}))
    first = Reply([tool_use("toolu_A", "delete_file", {"path": "/a"})], "tool_use")
    replied = threading.Event()
    fake_api.script(first, Reply(content, "tool_use" if calls else "end_turn", until=replied), end_turn("Done."))
    async with worker(delete_file):
        run = await runner.start(**BASE, tools=[delete_file], step=True, thread=False)
        await wait_status(run, "waiting_for_step", 1)
        await run.advance()
        try:
            await asyncio.to_thread(fake_api.wait_for_requests, 2, 15)
            snapshot = await run.versioned_transcript()  # the second model call is under way: its reply is held
            if edit == "replace_history":
                rephrased = [{"role": "user", "content": "Rephrased."}]
                made = run.replace_history(rephrased, expected_version=snapshot.version, wait=True)
            elif edit == "inject":
                made = run.inject("And in French.", expected_version=snapshot.version, wait=True)
            else:
                made = run.retry(expected_version=snapshot.version, wait=True)
            sent = asyncio.create_task(made)
            update = {"replace_history": REPLACE_HISTORY_UPDATE, "inject": INJECT_MESSAGE_UPDATE}.get(edit)
            await wait_accepted(run, update or RETRY_TURN_UPDATE)  # accepted before the reply comes
        finally:
            replied.set()
        async with asyncio.timeout(15):
            with pytest.raises(EditRejected) as refused:
                await sent
        await wait_status(run, "waiting_for_step", 2)
        await run.advance()
        if calls:
            await wait_status(run, "waiting_for_step", 3)
            await run.advance()
        result = await run.result()
        transcript = await run.transcript()
    name = {"replace_history": "replace_history", "inject": "inject_message", "retry": "retry_turn"}[edit]
    assert str(refused.value) == (
        f"{name} could not apply: The transcript changed since version {snapshot.version} (it is now at "
        f"{snapshot.version + 1}); nothing was changed. Read the transcript again and resend the edit with its version."
    )
    assert fake_api.bodies()[1]["messages"] == snapshot.messages
    sent_messages = [*snapshot.messages, {"role": "assistant", "content": content}]
    if calls:
        tool_result = {"type": "tool_result", "tool_use_id": "toolu_D", "content": "deleted /tmp/x"}
        assert fake_api.bodies()[2]["messages"] == [*sent_messages, {"role": "user", "content": [tool_result]}]
        assert (CALLS, result.iterations) == (["delete /a", "delete /tmp/x"], 3)
    else:
        assert (len(fake_api.requests), CALLS, result.iterations) == (2, ["delete /a"], 2)
        assert transcript == sent_messages
    assert result.status == "completed"


async def test_an_edit_refused_by_the_run_reaches_the_stock_cli_as_final(
    client: Client, runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    fake_api.script(end_turn("Done."))
    async with worker():
        run = await runner.start(**BASE, step=True)
        await wait_status(run, "waiting_for_step", 1)
        done = await asyncio.to_thread(
            subprocess.run,
            [
                TEMPORAL_BIN,
                "workflow",
                "update",
                "execute",
                "--address",
                client.service_client.config.target_host,
                "--workflow-id",
                run.id,
                "--name",
                "retry_turn",
                "--input",
                json.dumps({"expected_version": 99}),
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        await run.stop()
    assert done.returncode != 0
    refusal = done.stderr + done.stdout
    assert "The transcript changed since version 99 (it is now at 1)" in refusal
    assert "EditRejected" in refusal and "retryable: true" not in refusal.lower()


async def test_a_message_injected_after_a_long_user_message_keeps_both_whole(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """A long message is stored apart and held as a placeholder: an injection must not join it as its keys."""
    fake_api.script(end_turn("First."), end_turn("Second."))
    long_text = "Read this carefully. " + "y" * 9_000
    async with worker():
        run = await runner.start(**BASE, step=True, thread=False)
        await wait_status(run, "waiting_for_step", 1)
        version = (await run.versioned_transcript()).version
        await run.replace_history([{"role": "user", "content": long_text}], expected_version=version, wait=False)
        await run.inject("And answer briefly.", wait=False)
        await run.advance()
        await wait_status(run, "waiting_for_step", 2)
        await run.advance()
        await run.until_done()
    assert fake_api.bodies()[1]["messages"] == [
        {"role": "user", "content": long_text},
        {"role": "user", "content": [{"type": "text", "text": "And answer briefly."}]},
    ]


async def test_a_client_waiting_for_its_edit_is_told_when_the_run_is_terminated(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    fake_api.script(Reply([tool_use("toolu_D", "delete_file", {"path": "/tmp/x"})], "tool_use"))
    async with worker(delete_file):
        run = await runner.start(**BASE, tools=[delete_file], approval={"tools": ["delete_file"]})
        await wait_status(run, "waiting_for_approval")
        waiting = asyncio.create_task(run.inject("Also check /var."))
        await wait_accepted(run, INJECT_MESSAGE_UPDATE)
        await run.terminate("operator ended it")
        async with asyncio.timeout(15):
            with pytest.raises(EditRejected) as refused:
                await waiting
    assert str(refused.value) == (
        f"inject_message did not apply: run {run.id} ended (terminated) before its next turn; nothing was changed. "
        + TO_GO_ON
    )
    assert CALLS == []


async def test_an_advance_waiting_for_a_pause_gives_up_when_the_run_continues_as_new(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """An `advance` for a review pause that already passed is accepted while a compaction runs at the boundary (the
    run looks as if that pause were still coming); the run then continues as new: the advance must give up, refused,
    instead of holding the continuation (and the run) for ever."""
    summary = {"type": "compaction", "content": "Summary: Oslo reported."}
    summarized = threading.Event()
    fake_api.script(
        Reply([text("Reporting."), tool_use("toolu_G", "delete_file", {"path": "/tmp/oslo"})], "tool_use"),
        Reply([summary], "compaction", until=summarized),
        end_turn("Done."),
    )
    async with worker(delete_file):
        run = await runner.start(
            **BASE,
            tools=[delete_file],
            step={"review_results": True},
            continue_as_new={"events": 10},
            betas=["compact-2026-09-04"],
        )
        await wait_status(run, "waiting_for_step", 1)
        await run.advance()
        await wait_status(run, "waiting_for_review", 1)
        await run.compact(wait=False)
        await run.advance()  # the review pause: the boundary now compacts (its summary held), then continues as new
        try:
            await asyncio.to_thread(fake_api.wait_for_requests, 2, 20)
            stale = asyncio.create_task(run.advance(iteration=1))  # the review pause of iteration 1 has passed
            await wait_accepted(run, ADVANCE_UPDATE, 3)  # accepted while the summary is held
        finally:
            summarized.set()
        with pytest.raises(EditRejected) as refused:
            async with asyncio.timeout(20):
                await stale
        await wait_status(run, "waiting_for_step", 2)
        status = await run.status()
        await run.advance()
        result = await run.result()
    assert str(refused.value) == (
        "advance was refused: The run is continuing as new; it was not paused after iteration 1. Read its status "
        "again and advance the pause it reports."
    )
    assert status.continuations >= 1
    assert (result.status, result.iterations) == ("completed", 2)


async def test_an_edit_made_against_a_version_a_queued_edit_changes_is_refused_at_the_boundary(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """Both edits are accepted against the same version; the first changes it, so the second changes nothing."""
    fake_api.script(end_turn("Sunny."), end_turn("Short answer."))
    trimmed = [{"role": "user", "content": "Just say hi."}]
    async with worker():
        run = await runner.start(**BASE, step=True)
        await wait_status(run, "waiting_for_step", 1)
        version = (await run.versioned_transcript()).version
        await run.replace_history(trimmed, expected_version=version, wait=False)
        late = asyncio.create_task(
            run.replace_history([{"role": "user", "content": "Say bye."}], expected_version=version, wait=True)
        )
        await wait_accepted(run, REPLACE_HISTORY_UPDATE, 2)  # accepted too: no edit has applied yet
        await run.advance()
        async with asyncio.timeout(15):
            with pytest.raises(EditRejected) as refused:
                await late
        await wait_status(run, "waiting_for_step", 2)
        await run.advance()
        await run.until_done()
    assert str(refused.value) == (
        f"replace_history could not apply: The transcript changed since version {version} (it is now at "
        f"{version + 1}); nothing was changed. Read the transcript again and resend the edit with its version."
    )
    assert fake_api.bodies()[1]["messages"] == trimmed


async def test_an_edit_still_queued_when_the_run_stops_is_answered_with_the_reason(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    fake_api.script(end_turn("Sunny."))
    async with worker():
        run = await runner.start(**BASE, step=True)
        await wait_status(run, "waiting_for_step", 1)
        waiting = asyncio.create_task(run.inject("And tomorrow?", wait=True))
        await wait_accepted(run, INJECT_MESSAGE_UPDATE)  # accepted, and queued for the next boundary
        await run.stop("enough")
        async with asyncio.timeout(15):
            with pytest.raises(EditRejected) as refused:
                await waiting
    assert str(refused.value) == (
        "inject_message could not apply: The run ended (stopped) before this edit could apply; nothing was changed. "
        + TO_GO_ON
    )
    assert len(fake_api.requests) == 1


async def test_a_retry_or_a_message_naming_its_version_behind_queued_edits_is_refused_and_the_run_goes_on(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """The loop acted on such a retry (the reply's call did not run), then the edit queued before it moved the
    version and the retry failed as stale at the boundary: the call was left without a result, and the run failed
    with the API's 400. A message the same way kept a finished turn going, and the same conversation was sent again."""
    fake_api.script(Reply([tool_use("toolu_D", "delete_file", {"path": "/tmp/x"})], "tool_use"), end_turn("Deleted."))
    async with worker(delete_file):
        run = await runner.start(**BASE, tools=[delete_file], step=True, thread=False)
        await wait_status(run, "waiting_for_step", 1)
        version = (await run.versioned_transcript()).version
        await run.update_params(max_tokens=512)
        refused = []
        for edit in (run.retry(expected_version=version), run.inject("And /tmp/y.", expected_version=version)):
            with pytest.raises(EditRejected) as error:
                await edit
            refused.append(str(error.value))
        await run.advance()
        await wait_status(run, "waiting_for_step", 2)
        await run.advance()
        result = await run.result()
    behind = (
        "1 edit(s) accepted before this {} have not applied yet, and they will move the transcript past version {}. "
        "Send it once they have applied (with the version they produce), or without expected_version."
    )
    assert refused == [
        "retry_turn was refused: " + behind.format("retry", version),
        "inject_message was refused: " + behind.format("message", version),
    ]
    assert CALLS == ["delete /tmp/x"] and result.status == "completed"
    result_block = {"type": "tool_result", "tool_use_id": "toolu_D", "content": "deleted /tmp/x"}
    assert fake_api.bodies()[1]["messages"][-1] == {"role": "user", "content": [result_block]}
    assert fake_api.bodies()[1]["max_tokens"] == 512
