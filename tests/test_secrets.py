"""Secrets never reach history or logs: an MCP server's token stays in the workers' environment, the API key and a
store password too."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from urllib.parse import urlsplit

import anthropic
import pytest
from temporalio.client import Client, WorkflowFailureError
from temporalio.exceptions import ApplicationError

from agent_runner.activities.claude import ClaudeActivities, with_worker_credentials
from agent_runner.activities.tools import ToolRegistry
from agent_runner.client import AgentRunner
from agent_runner.contract.errors import EditRejected, InvalidRunInput
from agent_runner.contract.run_input import parse_run_input
from agent_runner.testing import FakeMessagesAPI, Fault, Reply, error_body, text
from agent_runner.worker import build_worker
from tests.conftest import WorkerFactory, history_text
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
    replied = threading.Event()
    fake_api.script(Reply(content=[text("Hello.")], until=replied))  # held while the run is refused the edit
    async with worker():
        run = await runner.start(**BASE, mcp_servers=[SERVER], thread=False)
        try:
            with pytest.raises(EditRejected, match="AGENT_RUNNER_MCP_TOKEN_LINEAR_PROD in the workers' environment"):
                await run.update_params(mcp_servers=[{**SERVER, "authorization_token": "tok-other"}])
        finally:
            replied.set()
        await run.until_done()
        history = history_text(await run.handle.fetch_history())
    assert fake_api.bodies()[0]["mcp_servers"] == [{**SERVER, "authorization_token": "tok-secret-4242"}]
    assert "tok-secret-4242" not in history


@pytest.mark.slow
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
            history = history_text(await run.handle.fetch_history())
    ready = [line for line in log.read_text().splitlines() if "Worker ready" in line]
    assert len(ready) == 1 and ready[0].endswith(f"store={with_password.replace('pw-s3cret-77', '***')}")
    assert "pw-s3cret-77" not in log.read_text()
    assert "pw-s3cret-77" not in history


async def test_an_api_key_claude_rejects_reaches_neither_the_failure_nor_history(
    runner: AgentRunner, client: Client, task_queue: str, fake_api: FakeMessagesAPI
) -> None:
    """A wrong key is when a 401's failure carries the most of the request: the key stays in the worker all the same."""
    key = "sk-ant-rejected-key-5150"
    fake_api.script(Fault(401, error_body(401, "invalid x-api-key")))
    claude = ClaudeActivities(lambda: anthropic.AsyncAnthropic(base_url=fake_api.url, api_key=key, max_retries=0))
    async with build_worker(client, registry=ToolRegistry(), task_queue=task_queue, claude=claude):
        run = await runner.start(**BASE, thread=False)
        with pytest.raises(WorkflowFailureError) as failed:
            await run.handle.result()
        history = history_text(await run.handle.fetch_history())
    cause = failed.value.cause
    assert isinstance(cause, ApplicationError)
    assert (cause.type, cause.message) == (
        "ModelRequestRejected",
        "Claude's API rejected the request with 401: authentication_error: invalid x-api-key. Fix the run's input (or "
        "the worker's ANTHROPIC_API_KEY for 401/403) and start the run again.",
    )
    assert fake_api.requests[0].headers["authorization"] == f"Bearer {key}"  # the request that left the worker had it
    assert key not in history
