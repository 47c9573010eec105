"""Secrets never reach history or logs: an MCP server's token stays in the workers' environment, the API key and a
store password too."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from agent_runner.activities.claude import with_worker_credentials
from agent_runner.client import AgentRunner
from agent_runner.contract.errors import EditRejected, InvalidRunInput
from agent_runner.contract.run_input import parse_run_input
from agent_runner.testing import FakeMessagesAPI, Reply, text
from tests.conftest import WorkerFactory
from tests.test_durability import worker_process

BASE = {"model": "claude-fake-1", "max_tokens": 64, "messages": [{"role": "user", "content": "Hi."}]}
SERVER = {"type": "url", "url": "https://mcp.example.test/sse", "name": "linear-prod"}


def test_a_token_in_the_run_input_is_refused_with_where_to_put_it() -> None:
    with pytest.raises(InvalidRunInput) as refused:
        parse_run_input({**BASE, "mcp_servers": [{**SERVER, "authorization_token": "tok-123"}]})
    assert str(refused.value) == (
        "The run's input was rejected:\n- `mcp_servers[0].authorization_token` would be stored in the run's history. "
        "Leave it out and set AGENT_RUNNER_MCP_TOKEN_LINEAR_PROD in the workers' environment: they add it to each "
        "request."
    )


def test_the_worker_adds_each_servers_token_from_its_environment_only() -> None:
    request = {"model": "m", "mcp_servers": [SERVER, {**SERVER, "name": "other"}]}
    given = with_worker_credentials(request, {"AGENT_RUNNER_MCP_TOKEN_LINEAR_PROD": "tok-123"})
    assert given["mcp_servers"] == [{**SERVER, "authorization_token": "tok-123"}, {**SERVER, "name": "other"}]
    assert request["mcp_servers"] == [SERVER, {**SERVER, "name": "other"}]  # the run's own copy is untouched


async def test_claude_gets_the_token_and_the_history_never_holds_it(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENT_RUNNER_MCP_TOKEN_LINEAR_PROD", "tok-secret-4242")
    fake_api.script(Reply(content=[text("Hello.")], delay=1.0))
    async with worker():
        run = await runner.start(**BASE, mcp_servers=[SERVER], thread=False)
        with pytest.raises(EditRejected, match="AGENT_RUNNER_MCP_TOKEN_LINEAR_PROD in the workers' environment"):
            await run.update_params(mcp_servers=[{**SERVER, "authorization_token": "tok-other"}])
        await run.until_done()
        history = json.dumps((await run.handle.fetch_history()).to_json_dict())
    assert fake_api.bodies()[0]["mcp_servers"] == [{**SERVER, "authorization_token": "tok-secret-4242"}]
    assert "tok-secret-4242" not in history


async def test_a_password_in_the_store_url_reaches_neither_the_workers_log_nor_history(
    runner: AgentRunner, task_queue: str, fake_api: FakeMessagesAPI, postgres_url: str, tmp_path: Path
) -> None:
    parts = urlsplit(postgres_url)  # the test cluster trusts every password, so any one connects
    with_password = postgres_url.replace(
        parts.netloc, f"{parts.username or 'postgres'}:pw-s3cret-77@{parts.hostname}:{parts.port}", 1
    )
    log = tmp_path / "worker.log"
    fake_api.script(Reply(content=[text("Stored " * 1000)]))  # over 4 KB: the reply goes to the store
    address = runner.client.service_client.config.target_host
    env = {"AGENT_RUNNER_STORE": with_password}
    with worker_process(address, task_queue, fake_api, tmp_path / "marks", log, env=env):
        async with asyncio.timeout(60):
            while "Worker ready" not in (log.read_text() if log.exists() else ""):
                await asyncio.sleep(0.1)
            run = await runner.start(**BASE, thread=False)
            await run.handle.result()
            history = json.dumps((await run.handle.fetch_history()).to_json_dict())
    ready = [line for line in log.read_text().splitlines() if "Worker ready" in line]
    assert len(ready) == 1 and ready[0].endswith(f"store={with_password.replace('pw-s3cret-77', '***')}")
    assert "pw-s3cret-77" not in log.read_text()
    assert "pw-s3cret-77" not in history
