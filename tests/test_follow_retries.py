"""`agent-runner follow` says when a model or tool call is being retried, instead of going silent until it gives up."""

from __future__ import annotations

import pytest

from agent_runner import cli
from agent_runner.cli import follow
from agent_runner.client import AgentRunner
from agent_runner.testing import FakeMessagesAPI, end_turn, rate_limited
from tests.conftest import WorkerFactory

RATE_LIMITED = (
    "Claude's API answered 429 (rate_limit_error: Number of requests has exceeded your rate limit (fake Messages "
    "API).); retrying."
)


@pytest.mark.usefixtures("temporal_address")
async def test_follow_prints_each_new_attempt_of_a_retried_model_call_once(
    runner: AgentRunner,
    worker: WorkerFactory,
    fake_api: FakeMessagesAPI,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Asked often (every 0.1 s) while each attempt waits 1.5 s, yet each attempt is said once."""
    monkeypatch.setattr(follow, "RETRY_POLL_SECONDS", 0.1)
    fake_api.script(rate_limited(1.5), rate_limited(1.5), end_turn("Finally."))
    async with worker():
        run = await runner.start(model="claude-fake-1", max_tokens=50, messages=[{"role": "user", "content": "Hi"}])
        assert await cli.amain(["follow", run.id]) == 0
    assert capsys.readouterr() == (
        f"↻ model call (attempt 2): {RATE_LIMITED}\n"
        f"↻ model call (attempt 3): {RATE_LIMITED}\n"
        "── turn 1 ──\n"
        "Finally.\n"
        "── completed · 1 turn · stop_reason end_turn · 10 input / 5 output tokens ──\n",
        "",
    )
