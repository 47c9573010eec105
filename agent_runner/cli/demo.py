"""``agent-runner demo``: the example agent end to end, on an in-process worker and Claude or the scripted fake.

The only command besides ``dev`` that loads ``agent_runner.testing``: without ``ANTHROPIC_API_KEY`` its Claude is the
fake Messages API, answered by ``DemoClaude``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from agent_runner.cli.common import (
    DEFAULT_MAX_TOKENS,
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    NO_KEY_NOTICE,
    connected,
    default_model,
    err,
    out,
    use_color,
)
from agent_runner.cli.follow import follow_until_interrupted
from agent_runner.cli.render import BOLD, paint, result_text, tool_results_by_id
from agent_runner.contract.errors import AgentRunnerError
from agent_runner.testing import FakeMessagesAPI, Reply, ScriptItem, text, tool_use

DEMO_PROMPT = "What's the weather and the local time in Paris and Tokyo right now?"
DEMO_TOOLS = ("get_weather", "get_time")


class DemoClaude:
    """The scripted Claude of ``demo`` when no API key is set: a ``FakeMessagesAPI`` responder.

    It answers by what the conversation already holds, whatever the request shape (full history or a thread's new
    messages): first it calls ``get_weather`` for Paris and Tokyo in parallel, then ``get_time`` for both, then it
    answers with a summary that quotes the tool results it received.
    """

    WEATHER = {"toolu_demo_weather_paris": "Paris", "toolu_demo_weather_tokyo": "Tokyo"}
    TIME = {"toolu_demo_time_paris": "Paris", "toolu_demo_time_tokyo": "Tokyo"}

    def __init__(self) -> None:
        self.results: dict[str, tuple[str, bool]] = {}

    def __call__(self, body: dict[str, Any]) -> ScriptItem:
        """The reply to one request body."""
        for block in tool_results_by_id(body.get("messages") or []).values():
            self.results[str(block.get("tool_use_id"))] = (
                result_text(block.get("content")),
                bool(block.get("is_error")),
            )
        usage = {"input_tokens": 380 + 60 * len(self.results), "output_tokens": 70}
        if not set(self.WEATHER) <= set(self.results):
            return Reply(
                content=[
                    text("I'll check the weather in both cities first."),
                    *(tool_use(i, "get_weather", {"city": city}) for i, city in self.WEATHER.items()),
                ],
                stop_reason="tool_use",
                usage=usage,
            )
        if not set(self.TIME) <= set(self.results):
            return Reply(
                content=[
                    text("Now the local time in each city."),
                    *(tool_use(i, "get_time", {"city": city}) for i, city in self.TIME.items()),
                ],
                stop_reason="tool_use",
                usage=usage,
            )
        lines = ["Here's the picture right now:"]
        for (weather_id, city), time_id in zip(self.WEATHER.items(), self.TIME, strict=True):
            weather = self._quote(weather_id, city, "weather")
            local_time = self._quote(time_id, city, "local time")
            lines.append(f"- {city}: {weather}, local time {local_time}.")
        return Reply(content=[text("\n".join(lines))], stop_reason="end_turn", usage={**usage, "output_tokens": 90})

    def _quote(self, tool_use_id: str, city: str, what: str) -> str:
        result, is_error = self.results[tool_use_id]
        if is_error:
            return f"{what} unavailable ({result})"
        return result.removesuffix(f" in {city}")


async def cmd_demo(args: argparse.Namespace) -> int:
    """``demo``: the example agent end to end, on an in-process worker and Claude or the scripted fake."""
    import anthropic

    from agent_runner.activities.claude import ClaudeActivities, default_client
    from agent_runner.worker import build_registry, build_worker

    fake: FakeMessagesAPI | None = None
    previous_base_url = os.environ.get("ANTHROPIC_BASE_URL")
    claude_factory: Callable[[], anthropic.AsyncAnthropic] | None = None  # None: the key from the environment
    if not os.environ.get("ANTHROPIC_API_KEY"):
        out([NO_KEY_NOTICE])
        fake = FakeMessagesAPI().start()
        fake.responder = DemoClaude()
        os.environ["ANTHROPIC_BASE_URL"] = fake.url

        def fake_claude() -> anthropic.AsyncAnthropic:
            # The fake accepts any key. It lives only in this worker's client, never in a run's input.
            return default_client(api_key="demo-key-for-the-fake-api")

        claude_factory = fake_claude

    model = args.model or default_model()
    code = EXIT_ERROR
    task_queue = f"demo-{uuid.uuid4()}"  # a stale worker of an earlier demo cannot steal this run's tasks
    try:
        async with connected(task_queue) as runner:
            worker = build_worker(
                runner.client,
                registry=build_registry(["agent_runner.example_tools"]),
                task_queue=task_queue,
                claude=ClaudeActivities(claude_factory),
                graceful_shutdown_timeout=timedelta(seconds=5),
            )
            async with worker:
                run = await runner.start(
                    model=model,
                    max_tokens=DEFAULT_MAX_TOKENS,
                    messages=[{"role": "user", "content": DEMO_PROMPT}],
                    tools=list(DEMO_TOOLS),
                    max_iterations=10,
                )
                color = use_color()
                out(
                    [
                        f"Run {run.id} · model {model}{' (scripted fake)' if fake else ''} · Temporal {runner.address}",
                        paint("── user ──", BOLD, color),
                        DEMO_PROMPT,
                    ]
                )
                code = await follow_until_interrupted(run, color=color)
                if code == EXIT_INTERRUPTED:
                    err(f"interrupted: cancelling demo run {run.id}")
                    with contextlib.suppress(AgentRunnerError, TimeoutError):
                        await run.cancel()
                        await asyncio.wait_for(run.result(), timeout=5)
    finally:
        if fake is not None:
            fake.stop()
            if previous_base_url is None:
                os.environ.pop("ANTHROPIC_BASE_URL", None)
            else:
                os.environ["ANTHROPIC_BASE_URL"] = previous_base_url
    return code
