"""Big request parameters go by reference, as big content does (``transcript.py``).

A run carries its request parameters in its input, in every model call's input that sends its settings, and in the
state it hands to continue-as-new. A long ``system`` prompt (1 MB and more is seen) carried so can push any of these
past Temporal's 2 MB payload limit. So, once it is bigger than ``PARAM_INLINE_LIMIT``:

- the Python client stores it in the content store and starts the run with the placeholder
  ``{"agent_runner.stored": ref}`` in its place (the run's input says ``"held": true``);
- a run that got it by value (the stock ``temporal`` CLI's plain JSON) carries the placeholder into its
  continuation instead, once a model call stored it (the call stores every big parameter it is sent);
- the model call puts the stored value back (``resolve_params``) before it builds the request, so Claude receives
  exactly the parameter given.

Only top-level values of ``BY_REFERENCE`` parameters can be placeholders, and only when the run's input is held
(a placeholder in plain JSON is refused as a wrong type); the workflow never reads those parameters itself.

This module is pure (hashing and JSON only), so workflow code uses it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from agent_runner.contract.transcript import STORED, canonical, ref_for, stored

BY_REFERENCE = ("system",)
"""The parameters that may go by reference: ones the runner passes through without reading them."""

PARAM_INLINE_LIMIT = 64_000
"""A parameter bigger than this (in canonical JSON bytes) goes by reference."""


def stored_ref(value: Any) -> str | None:
    """The ref a parameter's placeholder names, or ``None`` when the value is not a placeholder."""
    if isinstance(value, dict) and len(value) == 1 and isinstance(value.get(STORED), str):
        return str(value[STORED])
    return None


def big_params(params: Mapping[str, Any], limit: int = PARAM_INLINE_LIMIT) -> dict[str, Any]:
    """The ``BY_REFERENCE`` parameters of ``params`` held by value and bigger than ``limit``."""
    return {
        key: params[key]
        for key in BY_REFERENCE
        if key in params and stored_ref(params[key]) is None and len(canonical(params[key])) > limit
    }


def by_reference(params: Mapping[str, Any], limit: int = PARAM_INLINE_LIMIT) -> dict[str, Any]:
    """``params`` with each big parameter replaced by the placeholder of its value as stored (``put_value``)."""
    big = big_params(params, limit)
    return {**params, **{key: stored(ref_for(canonical(value))) for key, value in big.items()}}


def stored_params(params: Mapping[str, Any]) -> dict[str, str]:
    """The ``BY_REFERENCE`` parameters of ``params`` held by reference, and their refs."""
    refs = {key: stored_ref(params.get(key)) for key in BY_REFERENCE}
    return {key: ref for key, ref in refs.items() if ref is not None}


def resolve_params(params: Mapping[str, Any], lookup: Callable[[str], Any]) -> dict[str, Any]:
    """``params`` with every parameter held by reference replaced by its stored value."""
    return {**params, **{key: lookup(ref) for key, ref in stored_params(params).items()}}
