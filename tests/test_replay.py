"""Safe upgrades: recorded histories of real runs replay against the current workflow code.

A change to `AgentRun` that would break running agents (a reordered activity, a new timer, a renamed update) makes
these replays fail. Deliberate changes go behind `workflow.patched(...)`, and new histories are recorded beside the
old ones with `python tests/histories/record.py`.

Workers run `AgentRun` outside Temporal's sandbox (`sandboxed=False`, for its cost); these replays run it inside the
strict one (Temporal's default restrictions, nothing of ours passed through), so a clock, a random number, I/O or a
module-level mutation anywhere on the paths the histories take fails here instead of in production.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from temporalio import workflow
from temporalio.client import WorkflowHistory
from temporalio.common import RawValue
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from agent_runner.workflows.agent_run import AgentRun
from agent_runner.workflows.start_input import NO_INPUT, one_raw_input

HISTORIES = sorted((Path(__file__).parent / "histories").glob("*.json"))


def load(path: Path) -> WorkflowHistory:
    return WorkflowHistory.from_json(path.stem, json.loads(path.read_text()))


@pytest.mark.parametrize("path", HISTORIES, ids=[p.stem for p in HISTORIES])
async def test_recorded_runs_replay_on_the_current_code(path: Path) -> None:
    result = await strict_replayer(AgentRun).replay_workflow(load(path), raise_on_replay_failure=False)
    assert result.replay_failure is None


def test_a_recorded_run_with_raw_tool_definitions_replays_in_a_fresh_interpreter() -> None:
    """In a process where nothing checked a tool definition before, the strict replay (in the sandbox) is the first
    to: the check's validators must not be built there (in the whole suite, an earlier test hid that)."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"{__file__}::{FIRST_TOOL_CHECK}"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).resolve().parents[1],
    )
    assert done.returncode == 0, done.stdout[-2000:]


FIRST_TOOL_CHECK = "test_recorded_runs_replay_on_the_current_code[big_values_2026_12]"
"""A recorded run whose input holds a raw tool definition, which the run's input check validates."""


def strict_replayer(workflow_class: type) -> Replayer:
    """A replayer that runs `workflow_class` in Temporal's strict sandbox, even though it is `sandboxed=False`."""
    return Replayer(
        workflows=[workflow_class],
        data_converter=pydantic_data_converter,
        unsandboxed_workflow_runner=SandboxedWorkflowRunner(),
    )


def test_workers_run_agent_run_outside_the_sandbox() -> None:
    defn = workflow._Definition.must_from_class(AgentRun)
    assert defn.sandboxed is False


@workflow.defn(name="AgentRun", sandboxed=False)
class AgentRunReadingTheClock(AgentRun):
    """A careless change: the wall clock read in workflow code (`datetime.now()` instead of `workflow.now()`)."""

    @workflow.run
    @one_raw_input
    async def run(self, raw_input: RawValue = NO_INPUT, *more: object) -> dict[str, Any]:
        import datetime

        datetime.datetime.now()
        return await super().run(raw_input, *more)


async def test_a_clock_read_in_workflow_code_fails_the_strict_replay() -> None:
    result = await strict_replayer(AgentRunReadingTheClock).replay_workflow(
        load(HISTORIES[0]), raise_on_replay_failure=False
    )
    assert result.replay_failure is not None
    assert "datetime.datetime.now" in str(result.replay_failure)


@workflow.defn(name="AgentRun")
class AgentRunWithAnExtraTimer(AgentRun):
    """A careless change: a pause before the run starts, shipped without `workflow.patched`."""

    @workflow.run
    @one_raw_input
    async def run(self, raw_input: RawValue = NO_INPUT, *more: object) -> dict[str, Any]:
        await workflow.sleep(1)
        return await super().run(raw_input, *more)


async def test_a_non_deterministic_change_fails_the_replay() -> None:
    result = await strict_replayer(AgentRunWithAnExtraTimer).replay_workflow(
        load(HISTORIES[0]), raise_on_replay_failure=False
    )
    assert result.replay_failure is not None
    assert (
        "Nondeterminism" in type(result.replay_failure).__name__ or "nondetermin" in str(result.replay_failure).lower()
    )
