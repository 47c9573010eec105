"""The tool results a model call's turn sends, in a compact form of their own (issue 14).

A lean run's turn (``workflows/history_size.py``) usually sends one pending message: the user message of the last
reply's tool results. Spelled out, the message and each result's ``tool_result`` wrapper cost the run's history about
a hundred bytes an iteration. Since ``COMPACT_RESULTS_PATCH`` (``workflows/patches.py``) such a last pending message
goes as ``results``, one entry a result, in order: ``[tool_use_id, ref]`` for content stored apart
(``{"agent_runner.stored": ref}``, as results over 256 bytes are), else ``[tool_use_id, is_error, content]``.
The model call, and every reader of a run's history (``gc.py``, the console), puts the message back exactly
(``whole_pending``) before reading ``pending``, so what is stored, named and sent to Claude does not change.

Only a message made of nothing but ``tool_result`` blocks with no other key (``cache_control``, say) and no
``"is_error": false`` is compacted: anything else goes as it is. Pure JSON work: workflow code imports it.
"""

from __future__ import annotations

from typing import Any

from agent_runner.contract.transcript import STORED
from agent_runner.contract.types import ModelTurn

RESULTS = "results"
"""The turn's field (in its JSON) that holds the compacted results."""


Entry = list[Any]
"""One result: ``[tool_use_id, ref]`` for content stored apart, else ``[tool_use_id, is_error, content]`` (``0`` or
``1``; ``1`` for a block with ``"is_error": true``)."""


def _entry(block: Any) -> Entry | None:
    """The entry of a ``tool_result`` block that says nothing but its id, content and error flag, else ``None``."""
    if not isinstance(block, dict) or block.get("type") != "tool_result":
        return None
    if not isinstance(block.get("tool_use_id"), str):
        return None
    if not {"type", "tool_use_id", "content"} <= block.keys() <= {"type", "tool_use_id", "content", "is_error"}:
        return None
    if block.get("is_error", True) is not True:
        return None  # an explicit `"is_error": false` (or a non-boolean) is sent as it is
    content = block["content"]
    if "is_error" not in block and isinstance(content, dict) and content.keys() == {STORED}:
        if isinstance(content[STORED], str):
            return [block["tool_use_id"], content[STORED]]
    return [block["tool_use_id"], 1 if "is_error" in block else 0, content]


def _block(entry: Entry) -> dict[str, Any]:
    """The ``tool_result`` block ``_entry`` made ``entry`` from."""
    if len(entry) == 2:
        return {"type": "tool_result", "tool_use_id": entry[0], "content": {STORED: entry[1]}}
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": entry[0], "content": entry[2]}
    if entry[1]:
        block["is_error"] = True
    return block


def compact_results(pending: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[Entry]]:
    """``pending`` without its last message and that message's results as entries, if it is made of nothing else.

    Returns:
        The pending messages left and the entries; ``pending`` itself and no entries when its last message is not
        one of tool results only.
    """
    last = pending[-1] if pending else None
    if not isinstance(last, dict) or last.keys() != {"role", "content"} or last["role"] != "user":
        return pending, []
    blocks = last["content"]
    entries = [_entry(block) for block in blocks] if isinstance(blocks, list) and blocks else [None]
    if any(entry is None for entry in entries):
        return pending, []
    return pending[:-1], [entry for entry in entries if entry is not None]


def results_message(entries: list[Entry]) -> dict[str, Any]:
    """The user message ``compact_results`` took ``entries`` from."""
    return {"role": "user", "content": [_block(entry) for entry in entries]}


def whole_pending(turn: dict[str, Any]) -> list[Any]:
    """The pending messages of a turn's JSON (as a run's history holds it), compacted results put back."""
    pending = turn.get("pending") or []
    entries = turn.get(RESULTS)
    if not isinstance(pending, list) or not isinstance(entries, list) or not entries:
        return pending if isinstance(pending, list) else []
    return [*pending, results_message(entries)]


def whole_turn(turn: ModelTurn) -> ModelTurn:
    """``turn`` with its compacted results put back in ``pending``: as it was before ``compact_turn``."""
    if not turn.results:
        return turn
    return turn.model_copy(update={"pending": [*turn.pending, results_message(turn.results)], "results": []})


def compact_turn(turn: ModelTurn) -> ModelTurn:
    """``turn`` with the tool results that end its pending messages as entries (``compact_results``)."""
    pending, entries = compact_results(turn.pending)
    if not entries:
        return turn
    return turn.model_copy(update={"pending": pending, "results": entries})
