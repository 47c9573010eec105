"""The betas an edit's requests need: an edit the API would refuse for a missing beta is refused when it is sent.

A compaction request (its ``compaction`` field) needs ``compact-2026-09-04``; the ``tool_addition`` and
``tool_removal`` system messages of ``add_tools`` and ``remove_tools`` need ``inline-tools-2026-09-15``. As in the
SDK, the run adds neither (its ``betas`` are the user's), but where the SDK's loop sends the request, gets the API's
400 and is done, the run refuses the edit, saying what to add, and goes on. The run's ``betas`` are taken as they
will be when the edit applies: after the ``update_params`` queued before it.

This module is imported by workflow code, so it holds no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from agent_runner.contract.steering import COMPACT_BETA
from agent_runner.workflows.edits import QueuedEdit, QueuedParams

_MISSING = object()


def param_after(current: dict[str, Any], queue: Iterable[QueuedEdit], name: str) -> Any:
    """The request parameter ``name`` the run will send once the queued ``update_params`` apply (``None``: unset)."""
    value: Any = current.get(name)
    for edit in queue:
        if isinstance(edit, QueuedParams):
            new = edit.payload.params.get(name, _MISSING)
            if new is not _MISSING:
                value = new
    return value


def check_beta(betas: Any, beta: str, what: str) -> None:
    """Refuse ``what`` (an edit, or an option) unless ``betas`` holds ``beta`` (``ValueError`` saying what to do)."""
    if isinstance(betas, list) and beta in betas:
        return
    given = ", ".join(f"`{b}`" for b in betas) if isinstance(betas, list) and betas else "none"
    raise ValueError(
        f"{what} needs the `{beta}` beta, and the run's `betas` ({given}) will not have it: Claude's API would refuse "
        f'the request. Add it first (`update_params` with `{{"betas": [..., "{beta}"]}}`), then send this again.'
    )


def check_compaction_beta_kept(params: dict[str, Any], auto_compact: bool) -> None:
    """Refuse an ``update_params`` that takes the compaction beta from a run that compacts by itself."""
    if auto_compact and "betas" in params:
        betas = params["betas"]
        if not (isinstance(betas, list) and COMPACT_BETA in betas):
            raise ValueError(
                f"The run compacts its history by itself (`auto_compact`), which needs the `{COMPACT_BETA}` beta: "
                "keep it in the `betas` you set."
            )
