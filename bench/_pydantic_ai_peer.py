"""The peer in ``bench/peer.py``: a pydantic-ai agent made durable on Temporal (``pydantic_ai.durable_exec.temporal``).

Its own module because pydantic-ai wants the agent built at import time, outside any workflow, so that its
activities can be registered on the worker; Temporal's sandbox then re-imports this module for each workflow run,
as it does any workflow module. The agent is pydantic-ai's Anthropic model pointed at the benchmark's fake Messages
API (``AGENT_RUNNER_BENCH_FAKE_URL``, set by ``bench/peer.py`` before it imports this module), with one tool,
``ping``, the same as the other modes' tool.

``TemporalDurability`` (a capability on a plain ``Agent``) is the way pydantic-ai 2.68 documents; the older
``TemporalAgent`` wrapper is deprecated there, and routes to the same activities.
"""

from __future__ import annotations

import os

import anthropic
from pydantic_ai import Agent
from pydantic_ai.durable_exec.temporal import PydanticAIWorkflow, TemporalDurability
from pydantic_ai.models.anthropic import AnthropicModel
from pydantic_ai.providers.anthropic import AnthropicProvider
from pydantic_ai.usage import UsageLimits
from temporalio import workflow

MODEL = "claude-bench-1"
FAKE_URL_ENV = "AGENT_RUNNER_BENCH_FAKE_URL"
WORKFLOW_NAME = "BenchPydanticAIAgent"


def pad(n: int, size: int) -> str:
    """``size`` bytes of text, different for each ``n`` (a content store would keep one copy of equal results)."""
    head = f"pong {n} "
    body = "0123456789abcdef" * (size // 16 + 1)
    return (head + body)[: max(size, len(head))]


async def ping(n: int, size: int = 0) -> str:
    """Answer a ping at once.

    Args:
        n: A sequence number.
        size: How many bytes the answer is.
    """
    return pad(n, size)


agent = Agent(
    AnthropicModel(
        MODEL,
        provider=AnthropicProvider(
            # max_retries=0 as the other modes' clients have, so that no mode hides a retry in its numbers.
            anthropic_client=anthropic.AsyncAnthropic(
                base_url=os.environ.get(FAKE_URL_ENV, "http://127.0.0.1:9"), api_key="bench", max_retries=0
            )
        ),
    ),
    name="bench_peer",
    tools=[ping],
    capabilities=[TemporalDurability()],
)


@workflow.defn(name=WORKFLOW_NAME)
class PeerAgentWorkflow(PydanticAIWorkflow):
    """One agent run: the model answers ``ping`` until it ends the turn (the fake decides when)."""

    __pydantic_ai_agents__ = [agent]

    @workflow.run
    async def run(self, prompt: str, request_limit: int) -> str:
        """Run the agent on ``prompt``; its final text."""
        result = await agent.run(prompt, usage_limits=UsageLimits(request_limit=request_limit))
        return result.output
