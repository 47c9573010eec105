"""At most once, proven by `kill -9`: a worker killed while an `at_most_once` tool runs never leads to a second run.

The worker is a real subprocess (`python worker.py --tools tests.tools_for_tests`) on the session's dev server; the
tools write their effects to a journal file, which is what the assertions count.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from temporalio.client import Client

from agent_runner.client import AgentRunner
from agent_runner.testing import FakeMessagesAPI, Reply, end_turn, text, tool_use
from tests.test_durability import wait_for, worker_process

pytestmark = pytest.mark.slow

BASE = {"model": "claude-fake-1", "max_tokens": 256, "messages": [{"role": "user", "content": "Pay 42."}]}


@pytest.mark.parametrize(
    ("tool", "expected"),
    [
        (
            "pay",
            {
                "is_error": True,
                "content": "Error: The outcome of this call of 'pay' is unknown: activity Heartbeat timeout. It may or "
                "may not have taken effect, and it was not run again. Check before calling it again.",
            },
        ),
        ("pay_reconciled", {"content": "already paid 42 (found by reconcile)"}),
    ],
)
async def test_a_worker_killed_mid_call_never_runs_an_at_most_once_tool_twice(
    tool: str, expected: dict[str, object], client: Client, task_queue: str, fake_api: FakeMessagesAPI, tmp_path: Path
) -> None:
    effects, log = tmp_path / "effects.txt", tmp_path / "worker.log"
    address = client.service_client.config.target_host
    env = {"AGENT_RUNNER_TEST_EFFECTS": str(effects), "AGENT_RUNNER_TEST_SLOW_SECONDS": "30"}
    fake_api.script(
        Reply(content=[text("Paying."), tool_use("toolu_pay", tool, {"amount": 42})], stop_reason="tool_use"),
        end_turn("Done."),
    )
    runner = AgentRunner(client, task_queue=task_queue)
    with worker_process(address, task_queue, fake_api, tmp_path / "marks", log, env=env) as first:
        run = await runner.start(**BASE, tools=[tool], thread=False)
        await wait_for(lambda: any(line.startswith("paid ") for line in _lines(effects)), "the payment")
        first.send_signal(signal.SIGKILL)
        first.wait()
    with worker_process(address, task_queue, fake_api, tmp_path / "marks", log, env=env):
        await run.until_done()
    key = _lines(effects)[0].split()[1]
    assert _lines(effects) == [f"start {key}", f"paid {key} 42"]  # once, never again
    last = fake_api.bodies()[1]["messages"][-1]
    assert last == {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_pay", **expected}]}


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []
