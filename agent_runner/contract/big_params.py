"""Big values go by reference, as big content does (``transcript.py``): request parameters and tool definitions.

A run carries its request parameters and its tools' definitions in its input, in every model call's input that
sends its settings, in the state it hands to continue-as-new and in the edits that change them (``update_params``,
``add_tools``). A long ``system`` prompt, a big ``output_config`` schema or megabytes of tool input schemas carried
so can push any of these past Temporal's 2 MB payload limit. So, once one is bigger than ``PARAM_INLINE_LIMIT``
(a tool's field: bigger than ``TOOL_FIELD_LIMIT`` once the run's tools together are bigger than that):

- the Python client stores it in the content store and sends the placeholder ``{"agent_runner.stored": ref}`` in
  its place (the run's input, or the edit, says ``"held": true``);
- a worker's ``describe_tools`` stores the big fields of the tools it registered and answers with placeholders;
- a run that got one by value (the stock ``temporal`` CLI's plain JSON) carries the placeholder into its
  continuation instead, once a model call stored it (the call stores every big value it is sent);
- the model call puts the stored values back (``resolve_settings``) before it builds the request, so Claude receives
  exactly what was given.

What may be a placeholder is fixed: a top-level value of a request parameter the workflow never reads (any but
``READ_PARAMS``), and a top-level field of a tool definition object other than ``READ_TOOL_FIELDS``. The workflow
reads only those it keeps by value (names, types, options), so it never needs a big value's bytes. A placeholder
there is taken as one only when its sender says the value is held; in plain JSON it is refused
(``lookalike_problems``): no valid parameter or tool field is such an object.

This module is pure (hashing and JSON only), so workflow code uses it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from agent_runner.contract.transcript import STORED, canonical, ref_for, stored

BY_REFERENCE = ("system",)
"""The parameters runs before ``big-values-by-reference`` carried by reference (``params-by-reference``)."""

READ_PARAMS = frozenset(
    {
        "model",
        "max_tokens",
        "thinking",
        "betas",
        "speed",
        "container",
        "tool_choice",
        "context_management",
        "fallbacks",
        "fallback_credit_token",
    }
)
"""Request parameters the workflow reads or changes itself (``workflows/fallbacks.py``, compaction checks, a
reply's container, ...): always held by value. Every other parameter may go by reference."""

READ_TOOL_FIELDS = frozenset({"name", "type"})
"""The fields of a tool definition the workflow reads (dispatch by name, a toolset's family by type)."""

PARAM_INLINE_LIMIT = 64_000
"""A value bigger than this (in canonical JSON bytes) goes by reference."""

TOOL_FIELD_LIMIT = 1024
"""Once a run's tool definitions together are bigger than ``PARAM_INLINE_LIMIT``, each field of theirs bigger than
this goes by reference: hundreds of tools of modest schemas add up to megabytes as surely as one big one."""


DESCRIBED_TOOL_FIELD_LIMIT = 128
"""A field of a tool a worker describes (``describe_tools``, an MCP server's tools) bigger than this goes by reference
always: a real tool's input schema (1-5 KB) would otherwise be in the lookup's answer and in the first model call's
input of every run, the biggest of a short run's history bytes (issue 14). Past 128 bytes a field costs more than
twice its placeholder (49 bytes)."""


def stored_ref(value: Any) -> str | None:
    """The ref a value's placeholder names, or ``None`` when the value is not a placeholder."""
    if isinstance(value, dict) and len(value) == 1 and isinstance(value.get(STORED), str):
        return str(value[STORED])
    return None


def _big(value: Any, limit: int) -> bool:
    return stored_ref(value) is None and len(canonical(value)) > limit


def big_params(params: Mapping[str, Any], limit: int = PARAM_INLINE_LIMIT) -> dict[str, Any]:
    """The ``BY_REFERENCE`` parameters of ``params`` held by value and bigger than ``limit`` (the older rule)."""
    return {key: params[key] for key in BY_REFERENCE if key in params and _big(params[key], limit)}


def by_reference(params: Mapping[str, Any], limit: int = PARAM_INLINE_LIMIT) -> dict[str, Any]:
    """``params`` with each big ``BY_REFERENCE`` parameter replaced by its placeholder (the older rule)."""
    big = big_params(params, limit)
    return {**params, **{key: stored(ref_for(canonical(value))) for key, value in big.items()}}


def _slim(mapping: Mapping[str, Any], keep: frozenset[str], limit: int, short: bool = False) -> dict[str, Any]:
    """``mapping`` with each big top-level value not in ``keep`` replaced by the placeholder of its value."""
    return {
        key: stored(ref_for(canonical(value), short)) if key not in keep and _big(value, limit) else value
        for key, value in mapping.items()
    }


def slim_params(
    params: Mapping[str, Any], limit: int = PARAM_INLINE_LIMIT, keep: frozenset[str] = frozenset()
) -> dict[str, Any]:
    """``params`` with every big parameter the workflow does not read (nor ``keep``) replaced by its placeholder."""
    return _slim(params, READ_PARAMS | keep, limit)


def read_by_fallbacks(refusal_fallbacks: object) -> frozenset[str]:
    """Parameters a run's refusal-fallback hops merge into, which it must then hold by value (``keep``).

    A ``refusal_fallbacks`` entry's ``output_config`` patches the run's key by key (``workflows/fallbacks.py``), which
    the workflow cannot do to a placeholder.
    """
    entries = refusal_fallbacks if isinstance(refusal_fallbacks, list) else []
    patched = any(isinstance(entry, dict) and "output_config" in entry for entry in entries)
    return frozenset({"output_config"}) if patched else frozenset()


def slim_tool(tool: Any, limit: int = PARAM_INLINE_LIMIT, short: bool = False) -> Any:
    """A tool definition with its big fields replaced by placeholders (a registered tool's name is kept as is).

    With ``short``, the placeholders name the short references (``transcript.ref_for``).
    """
    return _slim(tool, READ_TOOL_FIELDS, limit, short) if isinstance(tool, dict) else tool


def tool_field_limit(tools: list[Any], limit: int = PARAM_INLINE_LIMIT) -> int:
    """The size over which a field of one of ``tools`` goes by reference.

    ``limit``, or ``TOOL_FIELD_LIMIT`` once the definitions together are bigger than ``limit``.
    """
    return limit if len(canonical(tools)) <= limit else min(limit, TOOL_FIELD_LIMIT)


def slim_tools(tools: list[Any], limit: int = PARAM_INLINE_LIMIT, short: bool = False) -> list[Any]:
    """``tools`` with their big fields replaced by placeholders (``tool_field_limit``; ``short``: ``slim_tool``)."""
    field_limit = tool_field_limit(tools, limit)
    return [slim_tool(tool, field_limit, short) for tool in tools]


def big_values(params: Mapping[str, Any], tools: list[Any], limit: int = PARAM_INLINE_LIMIT) -> list[Any]:
    """Every value of ``params`` and ``tools`` that ``slim_params`` / ``slim_tools`` would put by reference."""
    values = [v for k, v in params.items() if k not in READ_PARAMS and _big(v, limit)]
    field_limit = tool_field_limit(tools, limit)
    for tool in tools:
        if isinstance(tool, dict):
            values.extend(v for k, v in tool.items() if k not in READ_TOOL_FIELDS and _big(v, field_limit))
    return values


def stored_params(params: Mapping[str, Any]) -> dict[str, str]:
    """The parameters of ``params`` held by reference, and their refs."""
    refs = {key: stored_ref(value) for key, value in params.items() if key not in READ_PARAMS}
    return {key: ref for key, ref in refs.items() if ref is not None}


def settings_refs(params: Mapping[str, Any], tools: Iterable[Any]) -> list[str]:
    """The refs of every value of ``params`` and ``tools`` held by reference."""
    refs = list(stored_params(params).values())
    for tool in tools:
        if isinstance(tool, dict):
            refs.extend(r for k, v in tool.items() if k not in READ_TOOL_FIELDS and (r := stored_ref(v)) is not None)
    return refs


def resolve_params(params: Mapping[str, Any], lookup: Callable[[str], Any]) -> dict[str, Any]:
    """``params`` with every parameter held by reference replaced by its stored value."""
    return {**params, **{key: lookup(ref) for key, ref in stored_params(params).items()}}


def resolve_tool(tool: Any, lookup: Callable[[str], Any]) -> Any:
    """A tool definition with every field held by reference replaced by its stored value."""
    if not isinstance(tool, dict):
        return tool
    return {
        key: lookup(ref) if key not in READ_TOOL_FIELDS and (ref := stored_ref(value)) is not None else value
        for key, value in tool.items()
    }


def lookalike_problems(params: Mapping[str, Any], tools: object, where: str = "") -> list[str]:
    """Placeholder-shaped values in plain JSON (a sender that did not say ``held``), where a placeholder would count.

    Refused rather than looked up: data that merely looks like a reference must never read the store.
    """
    problems = [
        f"{where}`{key}` is an object shaped like a stored reference; give the parameter's value itself."
        for key, value in params.items()
        if key not in READ_PARAMS and stored_ref(value) is not None
    ]
    for i, tool in enumerate(tools if isinstance(tools, list) else []):
        if isinstance(tool, dict):
            problems.extend(
                f"{where}`tools[{i}].{key}` is an object shaped like a stored reference; give the field's value itself."
                for key, value in tool.items()
                if key not in READ_TOOL_FIELDS and stored_ref(value) is not None
            )
    return problems
