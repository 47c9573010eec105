"""A durable agent runner for Claude on Temporal: the Anthropic SDK's tool runner, surviving crashes.

The public API: ``AgentRunner`` and ``Run`` to start, follow and cancel runs; ``tool_options`` to set how a tool's
activity is scheduled; the error tree of ``workflows.errors``. Names are imported on first use, so that light
entry points (``python -m agent_runner.fake_api``) start without loading the Temporal and Anthropic clients.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from activities.hooks import HookContext, StopRun, result_hook
    from activities.tools import ToolCall, current_tool_call, tool_options
    from agent_runner.client import AgentRunner, Run
    from workflows.errors import (
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
    "tool_options": "activities.tools",
    "ToolCall": "activities.tools",
    "current_tool_call": "activities.tools",
    "result_hook": "activities.hooks",
    "HookContext": "activities.hooks",
    "StopRun": "activities.hooks",
    "AgentRunner": "agent_runner.client",
    "Run": "agent_runner.client",
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
        "workflows.errors",
    ),
}

__all__ = [
    "HookContext",
    "StopRun",
    "result_hook",
    "AgentRunError",
    "AgentRunner",
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
    "Run",
    "RunCancelled",
    "RunNotFound",
    "ToolNotRegistered",
    "ToolRegistrationError",
    "tool_options",
    "ToolCall",
    "current_tool_call",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'agent_runner' has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)
