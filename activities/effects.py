"""What running a call twice would do, as a tool or a toolset declares it: ``effects``, ``on_unknown``, ``reconcile``.

``tool_options`` (``activities/tools.py``) and ``toolset_options`` (``activities/toolsets.py``) take the same choices,
checked here once; the workflow applies them (``workflows/tool_calls.py``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from agent_runner.contract.errors import ToolRegistrationError
from agent_runner.contract.types import OnUnknown, ToolEffects


@dataclasses.dataclass(frozen=True)
class Effects:
    """A tool's (or a toolset's) effect policy."""

    effects: ToolEffects
    on_unknown: OnUnknown
    reconcile: Callable[..., Any] | None
    """``reconcile(call: ToolCall)``: ``None`` if the call did not take effect, else its result for Claude."""


IDEMPOTENT = Effects("idempotent", "tell", None)


def effect_policy(
    caller: str, effects: ToolEffects, on_unknown: OnUnknown | None, reconcile: Callable[..., Any] | None
) -> Effects:
    """The policy these options choose.

    Args:
        caller: The function given them (``tool_options``, ``toolset_options``), for the error messages.
        effects: ``"idempotent"`` or ``"at_most_once"``.
        on_unknown: For ``at_most_once``: ``"reconcile"``, ``"ask"`` or ``"tell"``; ``None`` for the default.
        reconcile: For ``on_unknown="reconcile"``: the function that says whether the call took effect.

    Raises:
        ToolRegistrationError: for options that contradict each other.
    """
    if effects not in ("idempotent", "at_most_once"):
        raise ToolRegistrationError(f"{caller}(effects={effects!r}): use 'idempotent' or 'at_most_once'.")
    if effects == "idempotent" and (on_unknown is not None or reconcile is not None):
        raise ToolRegistrationError(
            f"{caller}(on_unknown=..., reconcile=...) applies to effects='at_most_once' only: an idempotent "
            "tool is simply retried."
        )
    chosen: OnUnknown = on_unknown or ("reconcile" if reconcile is not None else "tell")
    if chosen not in ("reconcile", "ask", "tell"):
        raise ToolRegistrationError(f"{caller}(on_unknown={on_unknown!r}): use 'reconcile', 'ask' or 'tell'.")
    if chosen == "reconcile" and reconcile is None:
        raise ToolRegistrationError(f"{caller}(on_unknown='reconcile') needs reconcile=<function>.")
    if reconcile is not None and not callable(reconcile):
        raise ToolRegistrationError(f"{caller}(reconcile=...) must be a function taking a ToolCall.")
    return Effects(effects, chosen, reconcile)
