"""Runnable toolsets for tests that run workers as processes (``python worker.py --tools tests.toolsets_for_tests``).

Each browser action leaves a mark on disk when it starts (``AGENT_RUNNER_TEST_MARKS``); ``wait`` takes
``AGENT_RUNNER_TEST_SLOW_SECONDS``, so a test can kill the worker while it runs. The ``till`` and ``ledger``
toolsets are ``at_most_once``: their ``pay`` action journals its effect (``AGENT_RUNNER_TEST_EFFECTS``) under the
call's idempotency key, then takes ``AGENT_RUNNER_TEST_SLOW_SECONDS``; ``ledger`` reconciles by reading the journal.
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

from agent_runner.activities.tools import current_tool_call
from agent_runner.activities.toolsets import toolset_options
from agent_runner.contract.types import ActivityOptions
from tests.tools_for_tests import _already_paid, _effects  # the journal and reconcile of the `pay` tool


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


class Till(BetaAsyncRunnableToolset):
    """A toolset whose ``pay`` action must never happen twice."""

    toolset_name = "till"

    def to_dict(self) -> Any:
        return {"type": f"{self.toolset_name}_toolset_20260801"}

    async def call(
        self, context: BetaToolsetCallContext, name: str, input: Mapping[str, object]
    ) -> str | BetaToolsetContent:
        key = current_tool_call().idempotency_key
        assert context.tool_use is None or context.tool_use.name == name == "pay"
        _effects(f"start {key}")
        _effects(f"paid {key} {input.get('amount')}")
        await asyncio.sleep(float(os.environ.get("AGENT_RUNNER_TEST_SLOW_SECONDS", "3")))
        return f"paid {input.get('amount')}"


class Ledger(Till):
    """A ``Till`` whose lost actions are reconciled from the journal."""

    toolset_name = "ledger"


_AT_MOST_ONCE_OPTIONS = ActivityOptions(
    start_to_close_timeout=timedelta(minutes=1), heartbeat_timeout=timedelta(seconds=2)
)
till = toolset_options(Till(), options=_AT_MOST_ONCE_OPTIONS, effects="at_most_once")
ledger = toolset_options(Ledger(), options=_AT_MOST_ONCE_OPTIONS, effects="at_most_once", reconcile=_already_paid)
