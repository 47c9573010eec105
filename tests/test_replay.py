"""Safe upgrades: recorded histories of real runs replay against the current workflow code.

A change to `AgentRun` that would break running agents (a reordered activity, a new timer, a renamed update) makes
these replays fail. Deliberate changes go behind `workflow.patched(...)`, and new histories are recorded beside the
old ones with `python tests/histories/record.py`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from temporalio import workflow
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from agent_runner.workflows.agent_run import AgentRun

HISTORIES = sorted((Path(__file__).parent / "histories").glob("*.json"))


def load(path: Path) -> WorkflowHistory:
    return WorkflowHistory.from_json(path.stem, json.loads(path.read_text()))


@pytest.mark.parametrize("path", HISTORIES, ids=[p.stem for p in HISTORIES])
async def test_recorded_runs_replay_on_the_current_code(path: Path) -> None:
    replayer = Replayer(workflows=[AgentRun], data_converter=pydantic_data_converter)
    result = await replayer.replay_workflow(load(path), raise_on_replay_failure=False)
    assert result.replay_failure is None


@workflow.defn(name="AgentRun")
class AgentRunWithAnExtraTimer(AgentRun):
    """A careless change: a pause before the run starts, shipped without `workflow.patched`."""

    @workflow.run
    async def run(self, raw_input: Any = None) -> dict[str, Any]:
        await workflow.sleep(1)
        return await super().run(raw_input)


async def test_a_non_deterministic_change_fails_the_replay() -> None:
    replayer = Replayer(workflows=[AgentRunWithAnExtraTimer], data_converter=pydantic_data_converter)
    result = await replayer.replay_workflow(load(HISTORIES[0]), raise_on_replay_failure=False)
    assert result.replay_failure is not None
    assert (
        "Nondeterminism" in type(result.replay_failure).__name__ or "nondetermin" in str(result.replay_failure).lower()
    )
