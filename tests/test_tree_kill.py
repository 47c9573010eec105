"""A worker killed with a child run, an MCP call and a sleep all in flight: the tree ends as if it never happened.

One reply of the parent asks for a sub-agent (a child run that is waiting for Claude), a slow tool of the MCP test
server (``tests/mcp_server.py``, a process the worker started) and the built-in ``sleep``, at once. The worker is
killed with ``-9`` while all three are under way and a new one is started: the parent and its child end with the
transcripts, and Claude gets the requests, of a run that was never interrupted.
"""

from __future__ import annotations

import json
import signal
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType

from agent_runner.client import AgentRunner
from agent_runner.testing import FakeMessagesAPI, text, tool_use
from tests.subagent_support import BASE, RESEARCHER, RESEARCHER_DEF, USER, child_bodies, parent_bodies, two_step_tree
from tests.test_durability import FAST, connect, server, wait_for, worker_process
from tests.test_mcp import SERVER, calls, server_tools

pytestmark = pytest.mark.slow  # real processes killed and restarted

SLEEP_SECONDS = 12
"""The sleep Claude asks for: longer than the wait until the kill, so the timer is still running then."""

TREE = {
    **BASE,
    "messages": [USER],
    "thread": False,
    "model_activity": FAST,
    "agents": [{**RESEARCHER, "tools": ["slow_step"]}],
    "mcp": ["files"],
    "sleep": True,
}

ALL_AT_ONCE = [
    text("Three things at once."),
    tool_use("toolu_A", "researcher", {"task": "Run the two steps."}),
    tool_use("toolu_M", "slow", {"what": "x"}),
    tool_use("toolu_Z", "sleep", {"seconds": SLEEP_SECONDS}),
]
ALL_AT_ONCE_BLOCKS = [
    {"type": "text", "text": "Three things at once."},
    {"type": "tool_use", "id": "toolu_A", "name": "researcher", "input": {"task": "Run the two steps."}},
    {"type": "tool_use", "id": "toolu_M", "name": "slow", "input": {"what": "x"}},
    {"type": "tool_use", "id": "toolu_Z", "name": "sleep", "input": {"seconds": SLEEP_SECONDS}},
]


async def run_tree(where: Path, fake: FakeMessagesAPI, kill: bool) -> dict[str, Any]:
    """Run the tree in its own Temporal server and worker processes, killing the first worker if ``kill``."""
    fake.reset()
    # The child's second request is answered slowly the first time with ``kill``.
    fake.responder = two_step_tree(ALL_AT_ONCE, "All three are back.", {2} if kill else set())
    where.mkdir()
    marks, log, config_file = where / "marks.txt", where / "worker.log", where / "mcp.json"
    mcp_server = {
        "command": sys.executable,
        "args": [SERVER],
        # The MCP call takes 10 s: still under way when the worker is killed, a few seconds after it began.
        "env": {"MCP_TEST_DIR": str(where), "MCP_TEST_SLOW_SECONDS": "10"},
        "heartbeat_timeout": 5,
    }
    config_file.write_text(json.dumps({"mcpServers": {"files": mcp_server}}))
    args = ("--mcp-config", str(config_file))
    env = {"AGENT_RUNNER_TEST_SLOW_SECONDS": "1"}  # the child's tool
    async with server(where) as temporal:
        runner = AgentRunner(await connect(temporal.address), task_queue=f"tree-kill-{uuid.uuid4()}")
        with worker_process(temporal.address, runner.task_queue, fake, marks, log, *args, env=env) as first:
            run = await runner.start(**TREE)
            in_flight: dict[str, Any] = {}
            if kill:
                # The child's second request is answered slowly: it waits for Claude, the MCP call runs, the
                # sleep's timer is set. Kill the worker then.
                await wait_for(lambda: len(child_bodies(fake)) >= 2, "the child's second request")
                await wait_for(lambda: calls(where) == ["slow x"], "the MCP call reaching its server")
                description = (await run.handle.describe()).raw_description
                history = [e.event_type for e in (await run.handle.fetch_history()).events]
                in_flight = {
                    "activities": [a.activity_type.name for a in description.pending_activities],
                    "children": [c.workflow_id for c in description.pending_children],
                    "timers": (
                        history.count(EventType.EVENT_TYPE_TIMER_STARTED),
                        history.count(EventType.EVENT_TYPE_TIMER_FIRED),
                    ),
                }
                first.send_signal(signal.SIGKILL)
                first.wait()
        with worker_process(temporal.address, runner.task_queue, fake, marks, log, *args, env=env):
            result = await run.result()
            child = run.child("toolu_A")
            child_result = await child.result()
            return {
                "in_flight": in_flight,
                "run_id": run.id,
                "status": (result.status, child_result.status),
                "transcripts": (await run.transcript(), await child.transcript()),
                "parent_bodies": parent_bodies(fake),
                "child_bodies": child_bodies(fake),
                "mcp_calls": calls(where),
                "steps": marks.read_text().splitlines(),
            }


async def test_a_worker_killed_with_a_child_an_mcp_call_and_a_sleep_in_flight_leaves_an_uninterrupted_tree(
    tmp_path: Path, fake_api: FakeMessagesAPI
) -> None:
    expected = await run_tree(tmp_path / "reference", fake_api, kill=False)
    killed = await run_tree(tmp_path / "killed", fake_api, kill=True)
    # All three were under way when the worker died: the MCP call's activity, the child run, the sleep's timer.
    assert killed["in_flight"] == {
        "activities": ["agent_runner.call_mcp_tool"],
        "children": [f"{killed['run_id']}/toolu_A"],
        "timers": (1, 0),
    }
    assert killed["status"] == expected["status"] == ("completed", "completed")
    assert killed["transcripts"] == expected["transcripts"]
    # Claude got the same requests, the child's killed one asked again on the new worker.
    assert killed["parent_bodies"] == expected["parent_bodies"]
    assert killed["child_bodies"] == [*expected["child_bodies"][:2], *expected["child_bodies"][1:]]
    assert killed["steps"] == expected["steps"] == ["start step1", "start step2"]
    # The MCP tool is idempotent: the new worker's own server process made the call again.
    assert (expected["mcp_calls"], killed["mcp_calls"]) == (["slow x"], ["slow x", "slow x"])
    first, second = expected["parent_bodies"]
    sleep_definition = first["tools"][1]
    assert (sleep_definition["name"], first["tools"]) == ("sleep", [RESEARCHER_DEF, sleep_definition, *server_tools()])
    assert first["messages"] == [USER]
    assert second["messages"][:2] == [USER, {"role": "assistant", "content": ALL_AT_ONCE_BLOCKS}]
    assert second["messages"][2:] == [
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_A", "content": "Both steps are done."},
                {"type": "tool_result", "tool_use_id": "toolu_M", "content": [{"type": "text", "text": "slow x"}]},
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_Z",
                    "content": f"Slept {SLEEP_SECONDS} seconds: the time ran out.",
                },
            ],
        }
    ]
    assert expected["transcripts"][0][-1] == {
        "role": "assistant",
        "content": [{"type": "text", "text": "All three are back."}],
    }
