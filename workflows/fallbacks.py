"""Refusal fallbacks: the SDK's ``BetaRefusalFallbackMiddleware``, durably (issue 13).

A run given ``refusal_fallbacks`` (a chain of models, or of the SDK's ``fallbacks`` entries) follows the middleware's
rules (``anthropic/lib/middleware/_fallbacks.py``), with each hop its own model-call activity:

- every request carries the ``fallback-credit-2026-07-01`` beta, since a refusal mints a ``fallback_credit_token``
  only when it is on;
- a reply that stops with ``refusal`` is not taken into the run while the chain has an entry left: the same turn is
  sent again with the next entry applied as a patch to the run's own parameters (an entry's field overrides, a
  ``None`` one unsets, an absent one keeps; ``output_config`` one level deep; a ``between_tools`` thinking config is
  sent ``disabled`` unless the entry sets ``thinking``), plus the refusal's token as
  ``{"token": …, "mode": "best_effort"}`` when it minted one. Hops never compound: each patches the run's
  parameters, not the previous hop's;
- the run is then *pinned* to the entry that was tried (``RunState.fallback_index``, the middleware's
  ``BetaFallbackState``): every later request of the run, compactions and continuations included, starts there, so
  the conversation stays on the model that accepted;
- a hop whose request fails (a rejection, or a failure left after Temporal's retries) is skipped: its token was never
  redeemed, so the next entry gets it;
- when the chain is exhausted the last refusal stands: it is the run's reply, and the run stops on it as on any
  refusal. (The middleware stamps ``recommended_model`` on a refusal it replays after failed hops; a run keeps the
  refusal as stored, since its replies are named by their content.)

The middleware's streaming splice (the refused partial output resent as a prefill, ``fallback`` seam blocks in the
reply) is not reproduced: a run takes the accepting model's reply as it came, and a refused hop is not one of the
run's replies (its usage is counted, since it is billed).

This module is imported by workflow code, so it holds no I/O.
"""

from __future__ import annotations

import copy
from typing import Any

from agent_runner.contract.transcript import canonical, ref_for
from agent_runner.contract.types import ModelTurn

FALLBACK_CREDIT_BETA = "fallback-credit-2026-07-01"
"""The beta a refusal needs to mint a ``fallback_credit_token`` (the middleware's ``DEFAULT_BETAS``)."""

REFUSAL_FALLBACKS_PATCH = "refusal-fallbacks"
"""``workflow.patched`` id of the first hop down a run's ``refusal_fallbacks`` chain."""


def fallback_problems(raw: object, params: dict[str, Any]) -> list[str]:
    """What is wrong with a run's ``refusal_fallbacks`` (empty when nothing is)."""
    if raw is None:
        return []
    if not isinstance(raw, list) or not all(
        (isinstance(e, str) and e) or (isinstance(e, dict) and isinstance(e.get("model"), str) and e["model"])
        for e in raw
    ):
        return [
            '`refusal_fallbacks` must be a list of model names (e.g. ["claude-opus-4-8"]), or of `fallbacks` '
            'entries with a `model` (e.g. {"model": "claude-opus-4-8", "thinking": null}).'
        ]
    if raw and params.get("fallbacks") is not None:
        return [
            "`refusal_fallbacks` (client-side, as the SDK's BetaRefusalFallbackMiddleware) cannot be used with "
            "`fallbacks` (server-side): give one of them."
        ]
    return []


def entries(raw: list[str | dict[str, Any]]) -> list[dict[str, Any]]:
    """The chain as ``fallbacks`` entries: a model name is ``{"model": name}``."""
    return [{"model": e} if isinstance(e, str) else dict(e) for e in raw]


def apply_hop(params: dict[str, Any], entry: dict[str, Any]) -> dict[str, Any]:
    """``entry`` applied as a patch to ``params`` (the middleware's ``_apply_hop``); ``params`` is not changed."""
    patched = _patch(params, entry)
    thinking = params.get("thinking")
    if "thinking" not in entry and isinstance(thinking, dict) and thinking.get("type") == "between_tools":
        patched["thinking"] = {"type": "disabled"}
    output_config = entry.get("output_config")
    if isinstance(output_config, dict):
        original = params.get("output_config")
        merged = _patch(original if isinstance(original, dict) else {}, output_config)
        if merged:
            patched["output_config"] = merged
        else:
            patched.pop("output_config", None)
    return copy.deepcopy(patched)


def _patch(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    patched = dict(base)
    for key, value in overrides.items():
        if value is None:
            patched.pop(key, None)
        else:
            patched[key] = value
    return patched


def credit_token(reply: dict[str, Any]) -> str | None:
    """The refusal's ``fallback_credit_token``, if it minted one."""
    details = reply.get("stop_details")
    if isinstance(details, dict) and details.get("type") == "refusal":
        token = details.get("fallback_credit_token")
        return token if isinstance(token, str) and token else None
    return None


def hop_turn(turn: ModelTurn, chain: list[dict[str, Any]], index: int | None, token: str | None = None) -> ModelTurn:
    """``turn`` as the middleware sends it.

    With its beta, on the pinned entry ``index`` (``None``: the run's own parameters), and with a refusal's credit
    token when it is the hop right after one.
    """
    settings = turn.settings
    assert settings is not None
    params: dict[str, Any] = settings["params"]
    if index is not None:
        params = apply_hop(params, chain[index])
    else:
        params = copy.deepcopy(params)
    betas = list(params.get("betas") or [])
    if FALLBACK_CREDIT_BETA not in betas:
        params["betas"] = [*betas, FALLBACK_CREDIT_BETA]
    if token is not None:
        params["fallback_credit_token"] = {"token": token, "mode": "best_effort"}
    settings = {**settings, "params": params}
    return turn.model_copy(update={"settings": settings, "settings_ref": ref_for(canonical(settings))})
