"""Secrets never reach history: an MCP server's token stays in the workers' environment, the API key too."""

from __future__ import annotations

import json

import pytest

from agent_runner.activities.claude import with_worker_credentials
from agent_runner.client import AgentRunner
from agent_runner.contract.errors import EditRejected, InvalidRunInput
from agent_runner.contract.run_input import parse_run_input
from agent_runner.testing import FakeMessagesAPI, Reply, text
from tests.conftest import WorkerFactory

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
