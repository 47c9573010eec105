"""What-if runs: a run that answers tool calls with results another run recorded, instead of running the tools.

Fork a run with a change (another model, system prompt or tool version) and ``tool_results="recorded"``
(``Run.fork``, ``agent-runner fork --tool-results``), and the fork's input carries every tool call the run made from
that turn on with its result (``recorded_tool_results``). When Claude calls a tool with the same name and the same
input (equal as JSON) the fork answers with the recorded result, in the order the run got them, each once, and the
tool does not run; a call nothing recorded runs as in any run, or with ``unrecorded_tool_calls: "refuse"`` is
answered with an error saying why (a dry run: no tool runs at all). So only what the change changed costs anything,
and two runs differ only where the change made them differ.

The workflow's side is ``workflows/recorded_results.py``. This module is imported by workflow code, so it holds no
I/O.
"""

from __future__ import annotations

from collections.abc import Container
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agent_runner.contract.errors import validation_summary
from agent_runner.contract.transcript import canonical

__all__ = [
    "UNRECORDED",
    "RecordedResult",
    "ToolResultsSource",
    "Unrecorded",
    "call_key",
    "recorded_from",
    "recorded_problems",
    "tool_use_ids",
    "refused_text",
]

Unrecorded = Literal["run", "refuse"]
"""What ``unrecorded_tool_calls`` may say of a call no recorded result answers: run it, or refuse it."""

UNRECORDED: tuple[Unrecorded, ...] = ("run", "refuse")

ToolResultsSource = Literal["run", "recorded", "recorded_only"]
"""How a fork's tool calls are answered (``Run.fork``): run, from the run's record first, or from its record only."""


class RecordedResult(BaseModel):
    """One tool call of a run and its result: an entry of a run's ``recorded_tool_results`` input."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1)
    """The tool called."""
    input: Any = None
    """The call's input, as Claude sent it."""
    content: str | list[dict[str, Any]] | dict[str, Any] | None = None
    """The ``tool_result`` block's content."""
    is_error: bool = False
    """Whether the result was an error."""


def call_key(name: str, tool_input: Any) -> tuple[str, str]:
    """What makes two calls the same call: the tool's name and its input, compared as JSON (key order aside)."""
    return name, canonical(tool_input).decode()


def recorded_from(messages: list[dict[str, Any]], skip: Container[str] = ()) -> list[dict[str, Any]]:
    """Each tool call in a conversation that has its result, with that result, in the order of the calls.

    Args:
        messages: A run's conversation, in the wire shape (held or plain, as the run that takes the results is).
        skip: The ids of calls to leave out (those in the history a fork starts from).

    Returns:
        ``recorded_tool_results`` entries (``RecordedResult`` as JSON): a call whose result the conversation lacks
        (its run ended before it) is left out.
    """
    results: dict[str, dict[str, Any]] = {}
    for message in messages:
        if message.get("role") == "user" and isinstance(message.get("content"), list):
            for block in message["content"]:
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    results[str(block.get("tool_use_id"))] = block
    entries: list[dict[str, Any]] = []
    for message in messages:
        if message.get("role") != "assistant" or not isinstance(message.get("content"), list):
            continue
        for block in message["content"]:
            if not isinstance(block, dict) or block.get("type") != "tool_use":
                continue
            result = results.get(str(block.get("id")))
            if result is None or block.get("id") in skip:
                continue
            entry: dict[str, Any] = {"name": block.get("name"), "input": block.get("input")}
            if "content" in result:
                entry["content"] = result["content"]
            if result.get("is_error"):
                entry["is_error"] = True
            entries.append(entry)
    return entries


def tool_use_ids(messages: list[dict[str, Any]]) -> set[str]:
    """The ids of the tool calls in a conversation."""
    return {
        str(block.get("id"))
        for message in messages
        if message.get("role") == "assistant" and isinstance(message.get("content"), list)
        for block in message["content"]
        if isinstance(block, dict) and block.get("type") == "tool_use"
    }


def recorded_problems(recorded: object, unrecorded: object) -> list[str]:
    """What is wrong with a run's ``recorded_tool_results`` and ``unrecorded_tool_calls`` (empty when nothing is)."""
    problems: list[str] = []
    if recorded is not None:
        if not isinstance(recorded, list):
            problems.append(
                "`recorded_tool_results` must be a list of recorded calls, each "
                '{"name": ..., "input": ..., "content": ..., "is_error": false}; fork a run with '
                '`tool_results="recorded"` to have them filled in.'
            )
        else:
            for number, entry in enumerate(recorded):
                try:
                    RecordedResult.model_validate(entry)
                except ValidationError as e:
                    problems.append(
                        f"`recorded_tool_results[{number}]` is no recorded call ({validation_summary(e, 'entry')}): "
                        'give {"name": ..., "input": ..., "content": ..., "is_error": false}.'
                    )
    if unrecorded is not None and unrecorded not in UNRECORDED:
        problems.append(
            f'`unrecorded_tool_calls` must be "run" (a call no recorded result answers runs) or "refuse" (it is '
            f"answered with an error: no tool runs); got {unrecorded!r}."
        )
    return problems


def refused_text(name: str) -> str:
    """What Claude reads for a call no recorded result answers, in a run that runs no tools."""
    return (
        f"Error: Tool '{name}' was not run: this run answers tool calls only with the results another run recorded, "
        "and none is left for this call with this input."
    )
