"""Steering a live run from `agent-runner` and from the stock `temporal` CLI, against real servers.

Each command is run in-process (`cli.amain`), its output checked line by line, and its effect checked where it
shows: in the exact next request Claude receives.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from agent_runner import cli
from agent_runner.client import AgentRunner
from agent_runner.contract.steering import TO_GO_ON
from agent_runner.testing import FakeMessagesAPI, Reply, end_turn, tool_use
from tests.conftest import WorkerFactory, stock_temporal
from tests.steering_support import CALLS, GATE, delete_file, gated, wait_status
from tests.tools_for_tests import get_time, get_weather

USER = {"role": "user", "content": "Weather in Paris?"}
BASE: dict[str, Any] = {"model": "claude-fake-1", "max_tokens": 1024, "messages": [USER]}
# Every test here drives the CLI against the session's test server (conftest `temporal_address`).
pytestmark = pytest.mark.usefixtures("fresh_tools", "temporal_address")


class Output:
    """Everything the commands (and a `follow` running beside them) printed so far."""

    def __init__(self, capsys: pytest.CaptureFixture[str]) -> None:
        self.capsys = capsys
        self.out = ""
        self.err = ""

    def read(self) -> Output:
        captured = self.capsys.readouterr()
        self.out += captured.out
        self.err += captured.err
        return self

    def lines(self) -> list[str]:
        return self.read().out.splitlines()

    async def until(self, line: str) -> None:
        async with asyncio.timeout(20):
            while line not in self.lines():
                await asyncio.sleep(0.05)


@contextlib.asynccontextmanager
async def following(run_id: str) -> AsyncIterator[asyncio.Task[int]]:
    """`agent-runner follow RUN_ID` running beside the test's commands; stopped if the test fails first."""
    task = asyncio.create_task(cli.amain(["follow", run_id]))
    try:
        yield task
    finally:
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


def step_note(run_id: str) -> str:
    return (
        f"note: run {run_id} is in step mode: the edit applies when it is advanced (`agent-runner advance {run_id}`).\n"
        f"note: if it cannot apply then, `agent-runner status {run_id}` says why.\n"
    )


ACCEPTED = "accepted; it applies before the next turn"


async def test_inject_in_step_mode_then_advance_while_follow_shows_each_pause(
    runner: AgentRunner,
    worker: WorkerFactory,
    fake_api: FakeMessagesAPI,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    fake_api.script(end_turn("Sunny."), end_turn("Ensoleillé."))
    blocks = tmp_path / "blocks.json"
    blocks.write_text(json.dumps([{"type": "text", "text": "Keep it short."}]))
    output = Output(capsys)
    async with worker():
        run = await runner.start(**BASE, step=True)
        async with following(run.id) as follow:
            await output.until(f"⏸ paused after turn 1 — agent-runner advance {run.id}")
            assert await cli.amain(["inject", run.id, "--file", str(blocks), "--expected-version", "1"]) == 0
            assert await cli.amain(["inject", run.id, "In French, please."]) == 0
            assert await cli.amain(["advance", run.id]) == 0
            await output.until(f"⏸ paused after turn 2 — agent-runner advance {run.id}")
            assert await cli.amain(["advance", run.id]) == 0
            assert await follow == 0
    assert output.lines() == [
        "── turn 1 ──",
        "Sunny.",
        f"⏸ paused after turn 1 — agent-runner advance {run.id}",
        ACCEPTED,
        ACCEPTED,
        "advanced",
        "── turn 2 ──",
        "Ensoleillé.",
        f"⏸ paused after turn 2 — agent-runner advance {run.id}",
        "advanced",
        "── completed · 2 turns · stop_reason end_turn · 20 input / 10 output tokens ──",
    ]
    assert output.err == step_note(run.id) * 2
    assert fake_api.bodies()[1] == {
        "model": "claude-fake-1",
        "max_tokens": 1024,
        "stream": True,
        "messages": [
            {
                "role": "user",
                "content": [{"type": "text", "text": "Keep it short."}, {"type": "text", "text": "In French, please."}],
            }
        ],
        "thread": {"type": "continue", "previous_message_id": "msg_fake_001"},
    }


def waiting_line(run_id: str, tool_use_id: str, path: str) -> str:
    call = f'delete_file {{"path": "{path}"}}'
    return f"⏸ waiting for approval: {call} ({tool_use_id}) — agent-runner approve {run_id} {tool_use_id}"


def _timeless(line: str) -> str:
    return re.sub(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d$", "<time>", line)


async def test_approvals_table_then_deny_and_approve_with_edited_input_while_follow_shows_them(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_api.script(
        Reply(
            [
                tool_use("toolu_D", "delete_file", {"path": "/etc"}),
                tool_use("toolu_E", "delete_file", {"path": "/tmp/x"}),
            ],
            "tool_use",
        ),
        end_turn("Done."),
    )
    output = Output(capsys)
    async with worker(delete_file):
        run = await runner.start(**BASE, tools=[delete_file], approval={"tools": ["delete_file"]})
        async with following(run.id) as follow:
            await output.until(waiting_line(run.id, "toolu_E", "/tmp/x"))
            assert await cli.amain(["approvals", run.id]) == 0
            assert await cli.amain(["deny", run.id, "toolu_D", "--reason", "Never touch /etc."]) == 0
            assert await cli.amain(["approve", run.id, "toolu_E", "--input", '{"path": "/tmp/scratch"}']) == 0
            assert await follow == 0
    assert [_timeless(line) for line in output.lines()] == [
        "── turn 1 ──",
        '→ delete_file {"path": "/etc"}',
        '→ delete_file {"path": "/tmp/x"}',
        waiting_line(run.id, "toolu_D", "/etc"),
        waiting_line(run.id, "toolu_E", "/tmp/x"),
        "TOOL_USE_ID  TOOL         INPUT               TURN  WAITING SINCE",
        'toolu_D      delete_file  {"path": "/etc"}    1     <time>',
        'toolu_E      delete_file  {"path": "/tmp/x"}  1     <time>',
        "denied toolu_D: it does not run, and Claude is told why",
        "approved toolu_E with the given input: it runs now",
        "← ✗ delete_file: Never touch /etc.",
        "← delete_file: deleted /tmp/scratch",
        "── turn 2 ──",
        "Done.",
        "── completed · 2 turns · stop_reason end_turn · 20 input / 10 output tokens ──",
    ]
    assert output.err == ""
    assert CALLS == ["delete /tmp/scratch"]  # the denied call never ran; the approved one ran with the edited input
    assert fake_api.bodies()[1]["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_D", "content": "Never touch /etc.", "is_error": True},
                {"type": "tool_result", "tool_use_id": "toolu_E", "content": "deleted /tmp/scratch"},
            ],
        }
    ]


async def test_follow_goes_on_past_a_reply_that_a_retry_discarded(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, capsys: pytest.CaptureFixture[str]
) -> None:
    """The discarded reply's tools never run, so `follow` must not wait for their results."""
    fake_api.script(Reply([tool_use("toolu_D", "delete_file", {"path": "/etc"})], "tool_use"), end_turn("Sorry."))
    output = Output(capsys)
    async with worker(delete_file):
        run = await runner.start(**BASE, tools=[delete_file], step=True)
        async with following(run.id) as follow:
            await output.until(f"⏸ paused after turn 1 — agent-runner advance {run.id}")
            assert await cli.amain(["retry", run.id]) == 0
            assert await cli.amain(["advance", run.id]) == 0
            await output.until(f"⏸ paused after turn 2 — agent-runner advance {run.id}")
            assert await cli.amain(["advance", run.id]) == 0
            assert await follow == 0
    assert output.lines() == [
        "── turn 1 ──",
        '→ delete_file {"path": "/etc"}',
        f"⏸ paused after turn 1 — agent-runner advance {run.id}",
        ACCEPTED,
        "advanced",
        "── turn 2 ──",
        "Sorry.",
        f"⏸ paused after turn 2 — agent-runner advance {run.id}",
        "advanced",
        "── completed · 2 turns · stop_reason end_turn · 20 input / 10 output tokens ──",
    ]
    assert CALLS == []


async def test_stop_waits_for_the_end_and_the_replys_tools_never_run(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_api.script(Reply([tool_use("toolu_D", "delete_file", {"path": "/etc"})], "tool_use"))
    async with worker(delete_file):
        run = await runner.start(**BASE, tools=[delete_file], step=True)
        await wait_status(run, "waiting_for_step", 1)
        assert await cli.amain(["stop", run.id, "--reason", "the user closed the tab"]) == 0
        assert capsys.readouterr().out == "── stopped · 1 turn · stop_reason tool_use · 10 input / 5 output tokens ──\n"
        assert await cli.amain(["status", run.id]) == 0
        assert capsys.readouterr().out.splitlines()[-2:] == ["version      1", "stopped      the user closed the tab"]
        assert await cli.amain(["inject", run.id, "hello?"]) == 1
        assert capsys.readouterr().err == (
            f"error: inject_message was refused: run {run.id} has already ended. {TO_GO_ON}\n"
        )
    assert CALLS == []
    assert len(fake_api.requests) == 1


async def test_params_wait_for_the_boundary_and_change_the_next_request(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run that is not in step mode: `params` waits until its edit applied, and prints the version."""
    call = tool_use("toolu_G", "gated", {"city": "Paris"})
    fake_api.script(Reply([call], "tool_use"), end_turn("ok"))
    argv = ["max_tokens=2048", 'tool_choice={"type": "auto"}', "system=Be brief.", "metadata=null"]
    async with worker(gated):
        run = await runner.start(**BASE, tools=[gated], thread=False, system="terse", metadata={"user_id": "u1"})
        async with asyncio.timeout(20):
            while not CALLS:
                await asyncio.sleep(0.02)
        params = asyncio.create_task(cli.amain(["params", run.id, *argv]))
        async with asyncio.timeout(20):  # the run accepted the edit: now it can only apply at the boundary
            while not any(
                e.HasField("workflow_execution_update_completed_event_attributes")
                for e in (await run.handle.fetch_history()).events
            ):
                await asyncio.sleep(0.05)
        assert not params.done()
        GATE.set()
        assert await params == 0
        await run.until_done()
    assert capsys.readouterr().out == "applied at version 3\n"  # the reply, its tool result, then the edit
    first, second = fake_api.bodies()
    assert first["metadata"] == {"user_id": "u1"}
    assert second == {
        "model": "claude-fake-1",
        "max_tokens": 2048,
        "stream": True,
        "system": "Be brief.",
        "tool_choice": {"type": "auto"},
        "tools": [gated.to_dict()],
        "messages": [
            USER,
            {"role": "assistant", "content": [call]},
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "toolu_G", "content": "report for Paris"}],
            },
        ],
    }


async def test_refused_edits_exit_1_with_the_reason_and_change_nothing(
    runner: AgentRunner,
    worker: WorkerFactory,
    fake_api: FakeMessagesAPI,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    fake_api.script(end_turn("Sunny."), end_turn("Hi!"), end_turn("Hello!"))
    trimmed = [{"role": "user", "content": "Just say hi."}]
    messages = tmp_path / "messages.json"
    messages.write_text(json.dumps(trimmed))
    async with worker():
        run = await runner.start(**BASE, step=True)
        await wait_status(run, "waiting_for_step", 1)
        refused = {
            ("inject", run.id, "Hello?", "--expected-version", "0"): (
                "inject_message was refused: The transcript changed since version 0 (it is now at 1). Read the "
                "transcript again and resend the edit with its version."
            ),
            ("replace-history", run.id, "--file", str(messages), "--expected-version", "0"): (
                "replace_history was refused: The transcript changed since version 0 (it is now at 1). Read the "
                "transcript again and resend the edit with its version."
            ),
            ("approve", run.id, "toolu_nope"): (
                "approve_tool was refused: Tool call 'toolu_nope' is not waiting for approval. Waiting: none."
            ),
            ("advance", run.id, "--tool-results", str(messages)): (
                "advance was refused: `tool_results` may hold only `tool_result` blocks."
            ),
        }
        for argv, reason in refused.items():
            assert await cli.amain(list(argv)) == 1, argv
            assert capsys.readouterr() == ("", f"error: {reason}\n")
        assert (await run.versioned_transcript()).version == 1

        assert await cli.amain(["replace-history", run.id, "--file", str(messages), "--expected-version", "1"]) == 0
        assert await cli.amain(["advance", run.id]) == 0
        await wait_status(run, "waiting_for_step", 2)
        assert await cli.amain(["retry", run.id, "--expected-version", "3"]) == 0  # replaced, then reply 2
        assert await cli.amain(["advance", run.id]) == 0
        await wait_status(run, "waiting_for_step", 3)
        assert await cli.amain(["stop", run.id, "--no-wait"]) == 0
        result = await run.result()
    assert capsys.readouterr().out.splitlines() == [
        ACCEPTED,
        "advanced",
        ACCEPTED,
        "advanced",
        "accepted; the run stops at its next step (a reply's tools that have not run never run)",
    ]
    assert result.status == "stopped"
    second, third = fake_api.bodies()[1:]
    assert second["messages"] == third["messages"] == trimmed  # the retry resent the turn without "Hi!"
    assert second["thread"] == third["thread"] == {"type": "create"}


async def test_added_and_removed_tools_reach_the_next_request(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_api.script(Reply([tool_use("toolu_1", "get_weather", {"city": "Paris"})], "tool_use"), end_turn("ok"))
    lookup = {"name": "lookup", "description": "Look it up.", "input_schema": {"type": "object"}}
    async with worker(get_weather, get_time):
        run = await runner.start(
            **BASE, tools=[get_weather], step=True, thread=False, betas=["inline-tools-2026-09-15"]
        )
        await wait_status(run, "waiting_for_step", 1)
        assert await cli.amain(["add-tools", run.id, "get_time", json.dumps(lookup), "--no-wait"]) == 0
        assert await cli.amain(["remove-tools", run.id, "get_weather"]) == 0
        assert await cli.amain(["advance", run.id]) == 0
        await wait_status(run, "waiting_for_step", 2)
        await run.advance()
        await run.until_done()
    captured = capsys.readouterr()
    assert captured.out.splitlines() == [ACCEPTED, ACCEPTED, "advanced"]
    assert captured.err == step_note(run.id)  # only where it did not say --no-wait
    assert fake_api.bodies()[1]["messages"][-1] == {
        "role": "system",
        "content": [
            {"type": "tool_addition", "tool": {"type": "tool_definition", "definition": get_time.to_dict()}},
            {"type": "tool_addition", "tool": {"type": "tool_definition", "definition": lookup}},
            {"type": "tool_removal", "tool": {"type": "tool_reference", "name": "get_weather"}},
        ],
    }


def temporal(client: Client, *args: str) -> Any:
    """The stock `temporal` CLI's JSON output, decoded."""
    return json.loads(stock_temporal(client, *args))


async def test_the_stock_temporal_cli_injects_denies_and_queries_with_plain_json(
    client: Client, runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    fake_api.script(Reply([tool_use("toolu_D", "delete_file", {"path": "/etc"})], "tool_use"), end_turn("Understood."))
    async with worker(delete_file):
        run = await runner.start(**BASE, tools=[delete_file], approval={"tools": ["delete_file"]})
        await wait_status(run, "waiting_for_approval")
        query = ("workflow", "query", "--workflow-id", run.id, "--name", "status")
        update = ("workflow", "update", "execute", "--workflow-id", run.id, "--name")
        status = await asyncio.to_thread(temporal, client, *query)
        inject = {"content": "Explain why instead."}
        injected = await asyncio.to_thread(temporal, client, *update, "inject_message", "--input", json.dumps(inject))
        deny = {"tool_use_id": "toolu_D", "reason": "Not /etc."}
        denied = await asyncio.to_thread(temporal, client, *update, "deny_tool", "--input", json.dumps(deny))
        await run.until_done()
    [state] = status["queryResult"]
    assert (state["status"], state["version"]) == ("waiting_for_approval", 1)
    assert [(p["tool_use_id"], p["name"], p["input"]) for p in state["pending_approvals"]] == [
        ("toolu_D", "delete_file", {"path": "/etc"})
    ]
    assert injected["result"] == {"seq": 1, "version": 1}  # queued: it joins the next user message
    assert denied["result"] == {"version": 1}
    assert CALLS == []
    assert fake_api.bodies()[1] == {
        "model": "claude-fake-1",
        "max_tokens": 1024,
        "stream": True,
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_D", "content": "Not /etc.", "is_error": True},
                    {"type": "text", "text": "Explain why instead."},
                ],
            }
        ],
        "thread": {"type": "continue", "previous_message_id": "msg_fake_001"},
    }


async def test_an_edit_refused_at_its_boundary_is_named_by_status_to_its_sender(
    runner: AgentRunner,
    worker: WorkerFactory,
    fake_api: FakeMessagesAPI,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    """Sent to a run waiting for a person, an edit is accepted and the command returns; one refused when its boundary
    came (stale: the inject before it moved the version) was found out only by querying `edit_outcome`."""
    fake_api.script(Reply([tool_use("toolu_D", "delete_file", {"path": "/tmp/x"})], "tool_use"), end_turn("Done."))
    async with worker(delete_file):
        run = await runner.start(**BASE, tools=[delete_file], approval={"tools": "all"}, thread=False)
        await wait_status(run, "waiting_for_approval")
        version = (await run.status()).version
        assert await cli.amain(["inject", run.id, "In French."]) == 0
        history = tmp_path / "history.json"
        history.write_text(json.dumps([USER]))
        replace = ["replace-history", run.id, "--file", str(history), "--expected-version", str(version)]
        assert await cli.amain(replace) == 0
        await run.approve("toolu_D")
        await run.until_done()
        capsys.readouterr()
        assert await cli.amain(["status", run.id]) == 0
    refused = [line for line in capsys.readouterr().out.splitlines() if line.startswith("refused")]
    assert refused == [
        f"refused      edit 2 (replace_history): The transcript changed since version {version} (it is now at "
        f"{version + 2}); nothing was changed. Read the transcript again and resend the edit with its version."
    ]
    assert fake_api.bodies()[1]["messages"][0] == USER and len(fake_api.bodies()[1]["messages"]) == 3
