"""Tools and helpers shared by the steering tests (Python client and CLI): tools that record their calls, and a
wait for a run's status."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from anthropic import beta_async_tool

from agent_runner.client import Run
from agent_runner.testing import FakeMessagesAPI, Reply, end_turn, text
from agent_runner.workflows import model_calls

CALLS: list[str] = []
"""What the tools below did, in order; emptied before each test by the `fresh_tools` fixture."""

GATE = asyncio.Event()
"""`gated` waits for it, so a test can act while a tool is running."""


@beta_async_tool
async def gated(city: str) -> str:
    """Report on a city once the test opens the gate.

    Args:
        city: The city.
    """
    CALLS.append(city)
    await GATE.wait()
    return f"report for {city}"


@beta_async_tool
async def delete_file(path: str) -> str:
    """Delete a file.

    Args:
        path: The file.
    """
    CALLS.append(f"delete {path}")
    return f"deleted {path}"


async def wait_status(run: Run, status: str, iterations: int | None = None) -> None:
    """Wait until the run reports ``status`` (at ``iterations`` replies, if given)."""
    async with asyncio.timeout(20):
        while True:
            current = await run.status()
            if current.status == status and (iterations is None or current.iterations == iterations):
                return
            await asyncio.sleep(0.05)


async def wait_accepted(run: Run, update: str, count: int = 1) -> None:
    """Wait until the run has accepted ``count`` updates named ``update`` (its history shows them): an edit a task
    sent and still waits on has reached the run."""
    async with asyncio.timeout(20):
        while True:
            events = (await run.handle.fetch_history()).events
            accepted = [
                e
                for e in events
                if e.HasField("workflow_execution_update_accepted_event_attributes")
                and e.workflow_execution_update_accepted_event_attributes.accepted_request.input.name == update
            ]
            if len(accepted) >= count:
                return
            await asyncio.sleep(0.05)


class BrokenWorkers:
    """Workers whose code fails the run's workflow task once its first reply comes (a bug in the workers' code), until
    fixed; the reply is a ``pause_turn`` (``Looking.``), then ``last`` ends the run."""

    def __init__(self, fake_api: FakeMessagesAPI, monkeypatch: pytest.MonkeyPatch, last: str = "Sunny.") -> None:
        self._release = threading.Event()
        fake_api.script(Reply([text("Looking.")], "pause_turn", until=self._release), end_turn(last))
        self._monkeypatch = monkeypatch
        self._fixed = model_calls.reply_problems

    def break_(self) -> None:
        """Break the workers' code, and let the first reply come."""
        self._monkeypatch.setattr(model_calls, "reply_problems", _broken)
        self._release.set()

    def fix(self) -> None:
        """Give the workers their own code back: the task's next attempt goes through."""
        self._monkeypatch.setattr(model_calls, "reply_problems", self._fixed)

    @staticmethod
    async def failed(run: Run, attempts: int = 2) -> None:
        """Wait until the run's workflow task is at attempt ``attempts`` (Temporal retries it after 10 s from 3 on)."""
        async with asyncio.timeout(30):
            while (await run.handle.describe()).raw_description.pending_workflow_task.attempt < attempts:
                await asyncio.sleep(0.05)


def _broken(_message: Any) -> list[str]:
    raise RuntimeError("a bug in the worker's code")
