"""Plain JSON is data: content that did not come in the held form is escaped before the run keeps it.

A run keeps its conversation in the held form (``contract/transcript.py``), where a one-key object such as
``{"agent_runner.stored": ref}`` stands for stored content. The Python client sends content already held (it stores
big parts and escapes lookalikes) and says so with ``"held": true`` in the run's input and in its updates. Anything
without the marker (the stock ``temporal`` CLI's JSON, a schedule's input) is plain JSON, which the run escapes here,
so a lookalike in it is data and never looked up in the store, whoever wrote it.

Runs recorded before the marker kept such content as it came; they replay so (``PLAIN_JSON_PATCH``).
"""

from __future__ import annotations

from typing import TypeVar

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from agent_runner.contract.transcript import escape
    from agent_runner.workflows.patches import implied

PLAIN_JSON_PATCH = "plain-json-is-data"
"""``workflow.patched`` id of escaping unmarked content. Asked only where escaping changes something, so runs
without lookalikes carry no marker."""

_T = TypeVar("_T")


def as_held(value: _T, held: bool) -> _T:
    """``value`` in the held form: as it is if its sender marked it ``held``, else escaped (``transcript.escape``)."""
    if held:
        return value
    escaped: _T = escape(value)
    if escaped is value:  # nothing looks like a placeholder: the same content, the same refs
        return value
    return escaped if implied(PLAIN_JSON_PATCH) else value
