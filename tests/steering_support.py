"""Tools and helpers shared by the steering tests (Python client and CLI): tools that record their calls, and a
wait for a run's status."""

from __future__ import annotations

import asyncio

from anthropic import beta_async_tool

from agent_runner.client import Run

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
