"""Tools the tests register, written exactly as for the SDK's tool runner.

A module of its own so that worker subprocesses can register it with `--tools tests.tools_for_tests`.
"""

from __future__ import annotations

import os
import time
from datetime import timedelta
from pathlib import Path

from anthropic import beta_async_tool, beta_tool
from anthropic.lib.tools import ToolError
from temporalio import activity

from agent_runner.activities.tools import ToolCall, current_tool_call, tool_options


@beta_tool
def get_weather(city: str, unit: str = "c") -> str:
    """Get the current weather for a city.

    Args:
        city: The city name, e.g. Paris.
        unit: Temperature unit, "c" or "f".
    """
    return f"sunny, 21{unit.upper()} in {city}"


@beta_async_tool
async def get_time(city: str) -> str:
    """Get the local time in a city.

    Args:
        city: The city name.
    """
    return f"14:05 in {city}"


@beta_tool
def fail_disk(path: str) -> str:
    """Write to a disk that is full.

    Args:
        path: Where to write.
    """
    raise ValueError(f"boom: disk full at {path}")


@beta_tool
def refuse(reason: str) -> str:
    """Refuse with structured content.

    Args:
        reason: Why.
    """
    raise ToolError([{"type": "text", "text": f"refused: {reason}"}])


@beta_tool
def returns_dict(key: str) -> str:
    """Return a dict by mistake.

    Args:
        key: A key.
    """
    return {key: 1}  # type: ignore[return-value]  # the mistake under test


@beta_tool
def image_tool(label: str) -> list[dict[str, object]]:  # type: ignore[type-var]
    """Return an image and a caption.

    Args:
        label: The caption.
    """
    return [
        {"type": "text", "text": label},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
    ]


@tool_options(heartbeat_timeout=timedelta(seconds=2), start_to_close_timeout=timedelta(seconds=60))
@beta_tool
def slow_step(step: str) -> str:
    """A slow tool that leaves a mark on disk each time it starts, for crash tests.

    Args:
        step: The step's name.
    """
    marks = os.environ.get("AGENT_RUNNER_TEST_MARKS")
    journal = os.environ.get("AGENT_RUNNER_TEST_JOURNAL")
    run_id = activity.info().workflow_id if journal else ""
    if marks:
        with Path(marks).open("a") as f:
            f.write(f"start {step}\n")
    if journal:
        with Path(journal).open("a") as f:
            f.write(f"start {run_id} {step} {os.getpid()}\n")
    time.sleep(float(os.environ.get("AGENT_RUNNER_TEST_SLOW_SECONDS", "3")))
    if journal:
        with Path(journal).open("a") as f:
            f.write(f"done {run_id} {step} {os.getpid()}\n")
    return f"done {step}"


def _effects(line: str | None = None) -> list[str]:
    """The payments journal (``AGENT_RUNNER_TEST_EFFECTS``): append ``line``; return every line."""
    path = Path(os.environ["AGENT_RUNNER_TEST_EFFECTS"])
    if line is not None:
        with path.open("a") as f:
            f.write(line + "\n")
    return path.read_text().splitlines() if path.exists() else []


def _pay(amount: int) -> str:
    key = current_tool_call().idempotency_key
    _effects(f"start {key}")
    _effects(f"paid {key} {amount}")
    time.sleep(float(os.environ.get("AGENT_RUNNER_TEST_SLOW_SECONDS", "3")))
    return f"paid {amount}"


def _already_paid(call: ToolCall) -> str | None:
    found = [line for line in _effects() if line.startswith(f"paid {call.idempotency_key} ")]
    return f"already paid {call.input['amount']} (found by reconcile)" if found else None


@tool_options(effects="at_most_once", heartbeat_timeout=timedelta(seconds=2))
@beta_tool
def pay(amount: int) -> str:
    """Pay an amount: an effect that must never happen twice. Slow, so a test can kill its worker mid-call.

    Args:
        amount: How much.
    """
    return _pay(amount)


@tool_options(effects="at_most_once", reconcile=_already_paid, heartbeat_timeout=timedelta(seconds=2))
@beta_tool
def pay_reconciled(amount: int) -> str:
    """Pay an amount, with a reconcile function that looks the payment up by its idempotency key.

    Args:
        amount: How much.
    """
    return _pay(amount)


@tool_options(local=True)
@beta_tool
def count_local(label: str) -> str:
    """Count a label, as a local activity: each attempt leaves a line in the journal. Slow, so a test can kill its
    worker mid-call.

    Args:
        label: What to count.
    """
    _effects(f"start {label} {os.getpid()}")
    time.sleep(float(os.environ.get("AGENT_RUNNER_TEST_SLOW_SECONDS", "3")))
    return f"counted {label}"


def _mark(line: str) -> None:
    """Leave ``line`` in the marks file (``AGENT_RUNNER_TEST_MARKS``), if the test gave one."""
    marks = os.environ.get("AGENT_RUNNER_TEST_MARKS")
    if marks:
        with Path(marks).open("a") as f:
            f.write(f"{line}\n")


@beta_tool
def parse_count(count: str) -> str:
    """Parse a count as a command line would: argparse exits the process (``SystemExit(2)``) on bad input.

    Args:
        count: The count, as text.
    """
    import argparse

    _mark(f"parse_count {count}")
    parser = argparse.ArgumentParser(prog="parse_count")
    parser.add_argument("--n", type=int)
    return str(parser.parse_args(["--n", count]).n)


@beta_async_tool
async def quit_async(code: int) -> str:
    """Exit the way a careless async tool does.

    Args:
        code: The exit code.
    """
    _mark(f"quit_async {code}")
    raise SystemExit(code)


@beta_tool
def interrupted(why: str) -> str:
    """Raise ``KeyboardInterrupt``, as a tool interrupted mid-way might.

    Args:
        why: Why.
    """
    _mark(f"interrupted {why}")
    raise KeyboardInterrupt(why)
