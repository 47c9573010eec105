"""The run's metrics, counted by the workflow's meter, which counts nothing while replaying (so nothing counts twice).

This module is imported by workflow code, so it holds no I/O.
"""

from __future__ import annotations

from typing import Any

from temporalio import workflow


def count(name: str, description: str, **attributes: str) -> None:
    """Add one to a counter of the workflow's meter."""
    workflow.metric_meter().create_counter(name, description).add(1, attributes)


def record_reply(reply: dict[str, Any]) -> None:
    """Iterations and tokens, by model."""
    meter = workflow.metric_meter().with_additional_attributes({"model": str(reply.get("model") or "")})
    meter.create_counter("agent_runner_iterations", "Replies received from Claude").add(1)
    usage = reply.get("usage") or {}
    tokens = meter.create_counter("agent_runner_tokens", "Tokens used, by kind", "tokens")
    for kind in ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"):
        amount = int(usage.get(kind) or 0)
        if amount:
            tokens.add(amount, {"kind": kind.removesuffix("_tokens")})
