"""A runnable toolset for tests that run workers as processes (``python worker.py --tools tests.toolsets_for_tests``).

Each action leaves a mark on disk when it starts (``AGENT_RUNNER_TEST_MARKS``); ``wait`` takes
``AGENT_RUNNER_TEST_SLOW_SECONDS``, so a test can kill the worker while it runs.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

from anthropic.lib.tools._toolsets._runnable import (
    BetaAsyncRunnableToolset,
    BetaToolsetCallContext,
    BetaToolsetContent,
)

from agent_runner.activities.toolsets import toolset_options
from agent_runner.contract.types import ActivityOptions


class MarkingBrowser(BetaAsyncRunnableToolset):
    """A browser whose actions mark the disk when they start."""

    toolset_name = "browser"

    def to_dict(self) -> Any:
        return {"type": "browser_toolset_20260801"}

    async def call(
        self, context: BetaToolsetCallContext, name: str, input: Mapping[str, object]
    ) -> str | BetaToolsetContent:
        marks = os.environ.get("AGENT_RUNNER_TEST_MARKS")
        if marks:
            with Path(marks).open("a") as f:
                f.write(f"start {name} {context.tool_use.id if context.tool_use else ''}\n")
        if name == "wait":
            await asyncio.sleep(float(os.environ.get("AGENT_RUNNER_TEST_SLOW_SECONDS", "3")))
        return f"{name} done {dict(input)}"


browser = toolset_options(
    MarkingBrowser(),
    options=ActivityOptions(start_to_close_timeout=timedelta(minutes=1), heartbeat_timeout=timedelta(seconds=2)),
)
