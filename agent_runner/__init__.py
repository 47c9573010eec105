"""A durable agent runner for Claude on Temporal: the Anthropic SDK's tool runner, surviving crashes.

The public API: ``AgentRunner`` and ``Run`` to start, follow and cancel runs; ``tool_options`` to set how a tool's
activity is scheduled; ``AgentSpec`` for an agent a worker registers; the error tree of
``agent_runner.contract.errors``. Names are imported on first use, so that light entry points (``python -m
agent_runner.testing``) start without loading the Temporal and Anthropic clients.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agent_runner.activities.budget_policies import budget_policy
    from agent_runner.activities.hooks import HookContext, StopRun, result_hook
    from agent_runner.activities.tools import ToolCall, current_tool_call, tool_options
    from agent_runner.activities.toolsets import toolset_options
    from agent_runner.client import AgentRunner, Run
    from agent_runner.contract.agents import AgentSpec
    from agent_runner.contract.budget import BudgetRequest
    from agent_runner.contract.errors import (
        AgentRunError,
        AgentRunnerError,
        BlobCorrupted,
        BlobMissing,
        ConfigurationError,
        EditQueued,
        EditRejected,
        InvalidRunInput,
        MalformedReply,
        ModelRequestRejected,
        NoWorker,
        RunAlreadyExists,
        RunCancelled,
        RunNotFound,
        StoreError,
        ToolNotRegistered,
        ToolRegistrationError,
    )

_HOMES = {
    "tool_options": "agent_runner.activities.tools",
    "toolset_options": "agent_runner.activities.toolsets",
    "ToolCall": "agent_runner.activities.tools",
    "current_tool_call": "agent_runner.activities.tools",
    "result_hook": "agent_runner.activities.hooks",
    "HookContext": "agent_runner.activities.hooks",
    "StopRun": "agent_runner.activities.hooks",
    "budget_policy": "agent_runner.activities.budget_policies",
    "BudgetRequest": "agent_runner.contract.budget",
    "AgentRunner": "agent_runner.client",
    "Run": "agent_runner.client",
    "AgentSpec": "agent_runner.contract.agents",
    **dict.fromkeys(
        [
            "AgentRunError",
            "AgentRunnerError",
            "ConfigurationError",
            "InvalidRunInput",
            "MalformedReply",
            "ModelRequestRejected",
            "StoreError",
            "BlobCorrupted",
            "BlobMissing",
            "EditRejected",
            "EditQueued",
            "RunAlreadyExists",
            "NoWorker",
            "RunCancelled",
            "RunNotFound",
            "ToolNotRegistered",
            "ToolRegistrationError",
        ],
        "agent_runner.contract.errors",
    ),
}

__all__ = [
    "HookContext",
    "StopRun",
    "result_hook",
    "budget_policy",
    "BudgetRequest",
    "AgentRunError",
    "AgentRunner",
    "AgentRunnerError",
    "AgentSpec",
    "ConfigurationError",
    "InvalidRunInput",
    "MalformedReply",
    "ModelRequestRejected",
    "StoreError",
    "BlobCorrupted",
    "BlobMissing",
    "EditRejected",
    "EditQueued",
    "RunAlreadyExists",
    "NoWorker",
    "Run",
    "RunCancelled",
    "RunNotFound",
    "ToolNotRegistered",
    "ToolRegistrationError",
    "tool_options",
    "toolset_options",
    "ToolCall",
    "current_tool_call",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'agent_runner' has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)
