"""What the workflow accepts from outside its own code: Claude's replies, and the model call's ``tool_use_ready``.

Workflow code must never assume a shape it did not check: an exception in a workflow task fails the *task*, which
Temporal retries for ever, wedging the run. A reply that cannot be used fails the run with the reason; a signal that
cannot be used is dropped with a warning.

This module is imported by workflow code, so it holds no I/O.
"""

from __future__ import annotations

from pydantic import ValidationError

from agent_runner.contract.errors import validation_summary
from agent_runner.contract.transcript import is_placeholder
from agent_runner.contract.types import ToolUseReady

_USAGE_COUNTS = ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")


def reply_problems(reply: object) -> list[str]:
    """What makes ``reply`` (a Messages API response body) unusable by the loop; empty when it is usable.

    Only what the loop reads is checked (``id``, ``content`` blocks and their ``type``, each ``tool_use``'s
    ``id``/``name``/``input``, ``stop_reason``, ``usage`` counts); anything else passes through untouched, so a new
    field or block type from the API is no problem.
    """
    if not isinstance(reply, dict):
        return [f"the reply is {type(reply).__name__}, not a JSON object"]
    problems: list[str] = []
    if not isinstance(reply.get("id"), str) or not reply.get("id"):
        problems.append("`id` is missing or not a string")
    content = reply.get("content")
    if not isinstance(content, list):
        problems.append(f"`content` is {type(content).__name__}, not a list of blocks")
        content = []
    for i, block in enumerate(content):
        if is_placeholder(block):
            continue  # a big block the model call stored apart
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            problems.append(f"`content[{i}]` is not a content block with a string `type`")
        elif block["type"] == "tool_use":
            if not isinstance(block.get("id"), str) or not block.get("id"):
                problems.append(f"`content[{i}]` is a tool_use without a string `id`")
            if not isinstance(block.get("name"), str) or not block.get("name"):
                problems.append(f"`content[{i}]` is a tool_use without a string `name`")
            if not isinstance(block.get("input"), dict):  # a stored one is a placeholder, a dict too
                problems.append(f"`content[{i}]` is a tool_use whose `input` is not an object")
    if reply.get("stop_reason") is not None and not isinstance(reply.get("stop_reason"), str):
        problems.append("`stop_reason` is not a string")
    usage = reply.get("usage")
    if usage is not None and not isinstance(usage, dict):
        problems.append("`usage` is not an object")
    elif isinstance(usage, dict):
        for key in _USAGE_COUNTS:
            value = usage.get(key)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
                problems.append(f"`usage.{key}` is not a count")
    return problems


def parse_tool_use_ready(raw: object) -> tuple[ToolUseReady | None, str]:
    """The signal's payload if it is usable, else ``None`` and why not."""
    try:
        ready = ToolUseReady.model_validate(raw)
    except ValidationError as e:
        return None, validation_summary(e, "payload")
    problems = reply_problems({"id": "-", "content": [ready.block]})
    if ready.block.get("type") != "tool_use":
        problems.append("`block` is not a tool_use block")
    return (None, "; ".join(problems)) if problems else (ready, "")
