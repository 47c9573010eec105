"""The tool results a model call's turn sends, in a compact form of their own (issue 14).

A lean run's turn (``workflows/history_size.py``) usually sends one pending message: the user message of the last
reply's tool results, each stored apart (``{"agent_runner.stored": ref}``). Spelled out, each result's
``tool_result`` wrapper costs the run's history about a hundred bytes an iteration. Since ``COMPACT_RESULTS_PATCH``
(``workflows/patches.py``) such a last pending message goes as ``results``: ``[tool_use_id, ref]`` pairs, in order.
The model call, and every reader of a run's history (``gc.py``, the console), puts the message back exactly
(``whole_pending``) before reading ``pending``, so what is stored, named and sent to Claude does not change.

Only a message made of nothing but such blocks is compacted (no ``is_error``, no inline content, no other block):
anything else goes as it is. Pure JSON work: workflow code imports it.
"""

from __future__ import annotations

from typing import Any

from agent_runner.contract.transcript import STORED
from agent_runner.contract.types import ModelTurn

RESULTS = "results"
"""The turn's field (in its JSON) that holds the compacted results."""


def _pair(block: Any) -> list[str] | None:
    """``[tool_use_id, ref]`` of a ``tool_result`` block that says nothing else, else ``None``."""
    if not isinstance(block, dict) or block.keys() != {"type", "tool_use_id", "content"}:
        return None
    content = block["content"]
    if block["type"] != "tool_result" or not isinstance(block["tool_use_id"], str) or not isinstance(content, dict):
        return None
    if content.keys() != {STORED} or not isinstance(content[STORED], str):
        return None
    return [block["tool_use_id"], content[STORED]]


def compact_results(pending: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[list[str]]]:
    """``pending`` without its last message and that message's results as pairs, if it is made of nothing else.

    Returns:
        The pending messages left and the pairs; ``pending`` itself and no pairs when its last message is not one of
        stored tool results only.
    """
    last = pending[-1] if pending else None
    if not isinstance(last, dict) or last.keys() != {"role", "content"} or last["role"] != "user":
        return pending, []
    blocks = last["content"]
    pairs = [_pair(block) for block in blocks] if isinstance(blocks, list) and blocks else [None]
    if any(pair is None for pair in pairs):
        return pending, []
    return pending[:-1], [pair for pair in pairs if pair is not None]


def results_message(pairs: list[list[str]]) -> dict[str, Any]:
    """The user message ``compact_results`` took ``pairs`` from."""
    return {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": use_id, "content": {STORED: ref}} for use_id, ref in pairs],
    }


def whole_pending(turn: dict[str, Any]) -> list[Any]:
    """The pending messages of a turn's JSON (as a run's history holds it), compacted results put back."""
    pending = turn.get("pending") or []
    pairs = turn.get(RESULTS)
    if not isinstance(pending, list) or not isinstance(pairs, list) or not pairs:
        return pending if isinstance(pending, list) else []
    return [*pending, results_message(pairs)]


def whole_turn(turn: ModelTurn) -> ModelTurn:
    """``turn`` with its compacted results put back in ``pending``: as it was before ``compact_turn``."""
    if not turn.results:
        return turn
    return turn.model_copy(update={"pending": [*turn.pending, results_message(turn.results)], "results": []})


def compact_turn(turn: ModelTurn) -> ModelTurn:
    """``turn`` with the stored tool results that end its pending messages as pairs (``compact_results``)."""
    pending, pairs = compact_results(turn.pending)
    if not pairs:
        return turn
    return turn.model_copy(update={"pending": pending, "results": pairs})
