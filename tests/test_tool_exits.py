"""A tool that exits (``sys.exit``, argparse on bad input, ``KeyboardInterrupt``) ends its call, not its worker.

``SystemExit`` and ``KeyboardInterrupt`` are not ``Exception``: raised in an asyncio task, they leave the event loop,
and the worker process exits with every run it holds, each retry of the call stopping the next worker. The worker is
a real process here (``python worker.py``), so the test sees it stay up.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from temporalio.testing import WorkflowEnvironment

from agent_runner.client import AgentRunner
from agent_runner.testing import FakeMessagesAPI, Reply, end_turn, tool_use
from tests.test_durability import worker_process


async def test_a_tool_that_exits_or_is_interrupted_gives_claude_an_error_and_the_worker_goes_on(
    temporal_env: WorkflowEnvironment, runner: AgentRunner, fake_api: FakeMessagesAPI, tmp_path: Path
) -> None:
    calls = [
        tool_use("toolu_1", "parse_count", {"count": "many"}),
        tool_use("toolu_2", "quit_async", {"code": 3}),
        tool_use("toolu_3", "interrupted", {"why": "ctrl-c"}),
    ]
    fake_api.script(Reply(calls, "tool_use"), end_turn("They all failed."), end_turn("Still here."))
    marks = tmp_path / "marks"
    address = temporal_env.client.service_client.config.target_host
    with worker_process(address, runner.task_queue, fake_api, marks, tmp_path / "worker.log") as worker:
        tools = ["parse_count", "quit_async", "interrupted"]
        run = await runner.start(
            model="claude-fake-1", max_tokens=64, messages=[{"role": "user", "content": "Go"}], tools=tools
        )
        result = await asyncio.wait_for(run.result(), 60)
        # The same worker takes the next run: it never stopped.
        after = await runner.start(model="claude-fake-1", max_tokens=64, messages=[{"role": "user", "content": "Up?"}])
        assert (await asyncio.wait_for(after.result(), 60)).status == "completed"
        assert worker.poll() is None
    assert (result.status, result.iterations) == ("completed", 2)
    assert fake_api.bodies()[1]["messages"][-1]["content"] == [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "SystemExit(2)", "is_error": True},
        {"type": "tool_result", "tool_use_id": "toolu_2", "content": "SystemExit(3)", "is_error": True},
        {"type": "tool_result", "tool_use_id": "toolu_3", "content": "KeyboardInterrupt('ctrl-c')", "is_error": True},
    ]
    # Each ran once: an exit is the tool's outcome, as any exception is, not a failed attempt to retry.
    assert sorted(marks.read_text().splitlines()) == ["interrupted ctrl-c", "parse_count many", "quit_async 3"]
