"""`ANTHROPIC_LOG=debug` in a worker's environment turns on the SDK's own request logging."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from temporalio.testing import WorkflowEnvironment

from agent_runner.client import AgentRunner
from agent_runner.testing import FakeMessagesAPI, end_turn
from tests.test_durability import worker_process


@pytest.mark.slow
async def test_a_worker_started_with_anthropic_log_debug_logs_the_sdks_requests(
    temporal_env: WorkflowEnvironment, runner: AgentRunner, fake_api: FakeMessagesAPI, tmp_path: Path
) -> None:
    fake_api.script(end_turn("Hi."))
    log = tmp_path / "worker.log"
    address = temporal_env.client.service_client.config.target_host
    with worker_process(address, runner.task_queue, fake_api, tmp_path / "marks", log, env={"ANTHROPIC_LOG": "debug"}):
        run = await runner.start(model="claude-fake-1", max_tokens=64, messages=[{"role": "user", "content": "Hi"}])
        result = await asyncio.wait_for(run.result(), 60)
    assert result.status == "completed"
    lines = log.read_text().splitlines()
    options = [line for line in lines if "anthropic._base_client" in line and "Request options: " in line]
    assert len(options) == 1
    assert "'x-stainless-helper-method': 'stream'" in options[0] and "'model': 'claude-fake-1'" in options[0]
    assert any(
        f'anthropic._base_client: HTTP Response: POST {fake_api.url}/v1/messages "200 OK"' in line for line in lines
    )
    assert "sk-ant-secret-from-env" not in log.read_text()  # the SDK logs the request, never the key
