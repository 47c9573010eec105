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
  refusal.

A run streams every model call, so it follows the middleware's streaming splice (behind
``FALLBACK_SPLICE_PATCH``; ``Splice`` keeps the chain while a turn hops, ``spliced_reply`` builds the reply):

- a hop's request ends with the refused partial output as a trailing assistant turn (the *prefill*) when the refusal
  granted it (``stop_details.fallback_has_prefill_claim``): its blocks verbatim but ``fallback`` seams, trailing
  thinking dropped; a hop after another refused hop sends the earlier continuation followed by that hop's output;
- the reply the run takes is one message: the refused hops' output, a ``fallback`` seam block at each model boundary
  (``{"type": "fallback", "from": …, "to": …, "trigger": {"type": "refusal", "category": …}}``), then the accepting
  model's content; it keeps the first refused reply's id, and its ``usage.iterations`` lists each refused hop as a
  ``message`` and the accepting one as the ``fallback_message`` (which also starts a new thread, as the SDK's thread
  does after a fallback model's reply); its other ``usage`` fields are those of the first hop that streamed output
  (whose ``message_start`` opened the stream) under the counts the accepting hop's ``message_delta`` carried, as the
  SDK's stream accumulator reads the splice;
- a refusal after output goes down the chain only with a credit token (one before any output goes without);
- a hop whose server rejects the prefill (a 400) is sent once more without the newest refused output, and one over
  capacity (429, 529, after its retries) that inherited ``speed: "fast"`` once more without ``speed``;
- when the last hop fails, the refusal that stands is replayed: the chain's ``usage.iterations``, and
  ``stop_details.recommended_model`` (the failed model after a capacity error, else ``None``); the model call
  records it (``ModelTurn.replay``), since the run's replies are named by their content;
- seam blocks in the history are left out of every request (the API rejects them), an assistant turn left empty
  dropped whole;
- the hop's live events count their attempts on from the refused hop's, so a watcher is told the refused stream is
  retracted (``Run.events`` yields ``retracted``) and then reads the spliced reply from its first block, the refused
  output, the seam and the fallback's text, under the indices the final reply has.

A refused hop is not one of the run's replies, but its usage is counted, since it is billed.

This module is imported by workflow code, so it holds no I/O.
"""

from __future__ import annotations

import copy
from typing import Any

from temporalio.exceptions import ApplicationError

from agent_runner.contract.transcript import canonical, ref_for
from agent_runner.contract.types import FallbackSplice, ModelTurn
from agent_runner.workflows.conversation import FALLBACK_CREDIT_BETA

REFUSAL_FALLBACKS_PATCH = "refusal-fallbacks"
"""``workflow.patched`` id of the first hop down a run's ``refusal_fallbacks`` chain."""

FALLBACK_SPLICE_PATCH = "refusal-fallback-splice"
"""``workflow.patched`` id of the middleware's streaming splice: prefill, seam blocks, one reply per hopped turn."""

CAPACITY_ERRORS = ("RateLimitError", "OverloadedError")
"""The model call's error types for HTTP 429 and 529 (``activities/claude.py``): the middleware's capacity errors."""


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


def hop_turn(
    turn: ModelTurn,
    chain: list[dict[str, Any]],
    index: int | None,
    token: str | None = None,
    splice: FallbackSplice | None = None,
) -> ModelTurn:
    """``turn`` as the middleware sends it.

    With its beta, on the pinned entry ``index`` (``None``: the run's own parameters), with a refusal's credit token
    when it is the hop right after one, and with the hop's ``splice`` (``None``: the run predates splices).
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
    # Seams are left out of every request of the run, spliced or not: a no-op in a run that never spliced.
    update: dict[str, Any] = {"settings": settings, "settings_ref": ref_for(canonical(settings)), "strip_seams": True}
    if splice is not None:
        update["splice"] = splice
    return turn.model_copy(update=update)


def inherits_fast_speed(
    chain: list[dict[str, Any]], index: int | None, params: dict[str, Any], error: BaseException | None
) -> bool:
    """Whether a request on entry ``index`` failed over capacity with a ``speed: "fast"`` the entry did not set.

    The middleware then sends it once more without ``speed`` (``send_hop``).
    """
    if index is None or "speed" in chain[index] or params.get("speed") != "fast":
        return False
    return isinstance(error, ApplicationError) and error.type in CAPACITY_ERRORS


def without_fast_speed(chain: list[dict[str, Any]], index: int | None) -> list[dict[str, Any]]:
    """``chain`` with entry ``index`` unsetting ``speed`` (not ``standard``: a model without fast mode rejects it)."""
    if index is None:
        return chain
    return [*chain[:index], {**chain[index], "speed": None}, *chain[index + 1 :]]


def seam_block(from_model: str, to_model: str, category: str | None) -> dict[str, Any]:
    """The ``fallback`` content block that marks one model boundary (the middleware's ``_seam_block``)."""
    return {
        "type": "fallback",
        "from": {"model": from_model},
        "to": {"model": to_model},
        "trigger": {"type": "refusal", "category": category},
    }


def strip_seams(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` without ``fallback`` seam blocks; an assistant message left empty is dropped whole."""
    out: list[dict[str, Any]] = []
    for message in messages:
        content = message.get("content")
        if not isinstance(content, list):
            out.append(message)
            continue
        kept = [b for b in content if not (isinstance(b, dict) and b.get("type") == "fallback")]
        if len(kept) == len(content):
            out.append(message)
        elif kept or message.get("role") != "assistant":
            out.append({**message, "content": kept})
    return out


def prefill_blocks(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A refused reply's output as the next hop's prefill.

    Seams are dropped, and trailing thinking, which an assistant turn cannot end with.
    """
    out = [copy.deepcopy(b) for b in blocks if b.get("type") != "fallback"]
    while out and out[-1].get("type") in ("thinking", "redacted_thinking"):
        out.pop()
    return out


def _iteration_usage(kind: str, model: str, usage: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": kind,
        "model": model,
        "input_tokens": usage.get("input_tokens") or 0,
        "output_tokens": usage.get("output_tokens") or 0,
        "cache_read_input_tokens": usage.get("cache_read_input_tokens") or 0,
        "cache_creation_input_tokens": usage.get("cache_creation_input_tokens") or 0,
        "cache_creation": usage.get("cache_creation"),
    }


def declined_entries(reply: dict[str, Any], model: str) -> list[dict[str, Any]]:
    """The ``usage.iterations`` entries a refused hop adds to the chain (the middleware's rule).

    Its own, retyped ``message`` (a single one named ``model`` if the wire did not name it), or one made from its usage.
    """
    usage = reply.get("usage") if isinstance(reply.get("usage"), dict) else {}
    assert isinstance(usage, dict)
    reported = usage.get("iterations")
    if isinstance(reported, list):
        entries = [{**e, "type": "message"} for e in reported if isinstance(e, dict)]
        if len(entries) == 1 and not isinstance(entries[0].get("model"), str):
            entries[0]["model"] = model
        if entries:
            return entries
    return [_iteration_usage("message", model, usage)]


DELTA_USAGE_KEYS = (
    "output_tokens",
    "input_tokens",
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
    "server_tool_use",
    "output_tokens_details",
    "fallback_credit",
)
"""The ``usage`` fields the SDK's stream accumulator takes from a ``message_delta`` when it carries them (besides
``iterations``, which the splice writes); the others stay as the stream's ``message_start`` had them."""


def spliced_reply(
    reply: dict[str, Any], splice: FallbackSplice, closing_usage: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The hop's ``reply`` as the middleware's stream makes it.

    It takes the first refused reply's id, the refused output and seams before its content, and the chain in
    ``usage.iterations``; a refusal gets the ``recommended_model`` slot. When a refused hop's output opened the
    stream, the reply's usage is that hop's under the counts this hop's ``message_delta`` carried (``closing_usage``;
    the reply's own when not given), as the SDK's accumulator reads the spliced stream; the chain's last entry is
    made from those counts, as the middleware makes it.
    """
    spliced = copy.deepcopy(reply)
    spliced["id"] = splice.id
    spliced["content"] = [*copy.deepcopy(splice.prefix), *spliced.get("content", [])]
    usage = spliced.get("usage") if isinstance(spliced.get("usage"), dict) else {}
    assert isinstance(usage, dict)
    closing = closing_usage if closing_usage is not None else usage
    base = usage
    if splice.opened_usage is not None:
        base = copy.deepcopy(splice.opened_usage)
        base.update({key: closing[key] for key in DELTA_USAGE_KEYS if closing.get(key) is not None})
    # The middleware's `fallback_message` entry: what the hop's `message_delta` reported, or made from its counts.
    reported = closing.get("iterations")
    last = reported[-1] if isinstance(reported, list) and reported and isinstance(reported[-1], dict) else None
    serving = (
        {**last, "type": "fallback_message", "model": last.get("model") or splice.model}
        if last is not None
        else _iteration_usage("fallback_message", splice.model, closing)
    )
    spliced["usage"] = {**base, "iterations": [*copy.deepcopy(splice.iterations), serving]}
    details = spliced.get("stop_details")
    if spliced.get("stop_reason") == "refusal" and isinstance(details, dict):
        details.setdefault("recommended_model", None)
    return spliced


class Splice:
    """The chain of one turn while it hops (the middleware's ``_ChainState``): what the next hop sends and splices.

    Kept only while a turn's model call lasts, which no continue-as-new interrupts.
    """

    def __init__(
        self, refusal: dict[str, Any], model: str, attempts: int, opening_usage: dict[str, Any] | None = None
    ) -> None:
        self.id = str(refusal.get("id"))
        self.content: list[dict[str, Any]] = copy.deepcopy(refusal.get("content") or [])
        self.iterations = declined_entries(refusal, model)
        self.base: list[dict[str, Any]] = []
        self.partial = self._partial(refusal)
        # As the middleware's chain: a reply the API already handed to another model inside itself (a server
        # `fallback` seam in its output) was refused by that model, which the first client-side seam hands off from.
        self.from_model = _last_fallback_to(refusal) or model
        self.category = _category(refusal)
        self.opened_usage = _opened_usage(refusal, opening_usage)
        """The usage of the first refused hop that streamed output (it opened the stream), once one has."""
        self.attempts = attempts
        """Attempts of the turn's model call so far (a failed hop counts its retry policy's whole)."""

    @staticmethod
    def _partial(refusal: dict[str, Any]) -> list[dict[str, Any]]:
        details = refusal.get("stop_details")
        claim = isinstance(details, dict) and details.get("fallback_has_prefill_claim") is True
        return prefill_blocks(refusal.get("content") or []) if claim else []

    def hop(self, model: str, *, with_partial: bool = True) -> FallbackSplice:
        """What the hop to ``model`` sends (the prefill) and splices (the seam to it after the output so far).

        Args:
            model: The hop's model.
            with_partial: Whether the prefill ends with the newest refused output; without it (the server rejected
                it) the hop sends the continuation the refused hop was sent.
        """
        return FallbackSplice(
            id=self.id,
            prefix=[*self.content, seam_block(self.from_model, model, self.category)],
            prefill=[*self.base, *self.partial] if with_partial else list(self.base),
            iterations=self.iterations,
            model=model,
            opened_usage=self.opened_usage,
            attempt_base=self.attempts,
        )

    def refused(
        self, spliced: dict[str, Any], splice: FallbackSplice, attempt: int, opening_usage: dict[str, Any] | None = None
    ) -> None:
        """Take in a hop that refused as well.

        Args:
            spliced: Its reply, as the hop spliced it.
            splice: The hop's splice.
            attempt: The model call's attempt that got it.
            opening_usage: The ``usage`` its ``message_start`` carried, when the model call said.
        """
        own = {**spliced, "content": spliced.get("content", [])[len(splice.prefix) :]}
        usage = spliced.get("usage")
        if isinstance(usage, dict):  # its own usage, as it came: the splice added the chain
            iterations = usage.get("iterations")
            own["usage"] = {**usage, "iterations": iterations[-1:]} if isinstance(iterations, list) else usage
        self.content = copy.deepcopy(spliced.get("content") or [])
        self.base = splice.prefill
        self.partial = self._partial(own)
        self.iterations = [*self.iterations, *declined_entries(own, splice.model)]
        self.from_model = splice.model
        self.category = _category(own)
        if self.opened_usage is None:
            self.opened_usage = _opened_usage(own, opening_usage)
        self.attempts = attempt

    def standing(self, refusal: dict[str, Any], failed_model: str, error_type: str | None) -> dict[str, Any]:
        """The last ``refusal`` as the reply when the last hop failed.

        The middleware replays it with the chain's ``usage.iterations`` and ``recommended_model`` (``recommended``).
        """
        usage = refusal.get("usage") if isinstance(refusal.get("usage"), dict) else {}
        stood = {**refusal, "id": self.id, "usage": {**(usage or {}), "iterations": copy.deepcopy(self.iterations)}}
        return recommended(stood, failed_model, error_type)

    def rejected_prefill(self, splice: FallbackSplice | None, error: object) -> bool:
        """Whether a hop's failure is the server rejecting its prefill (a 400).

        The middleware then sends the hop once more without the newest refused output.
        """
        if splice is None or not splice.prefill or not isinstance(error, ApplicationError):
            return False
        return api_status(error) == 400

    def failed(self, maximum_attempts: int) -> None:
        """A hop failed: the next hop's attempts count on past all of its."""
        self.attempts += maximum_attempts or 1000


def _opened_usage(refusal: dict[str, Any], opening: dict[str, Any] | None) -> dict[str, Any] | None:
    """A refused hop's ``message_start`` usage when its output opened the stream (the middleware holds back none).

    Its whole usage stands for it when the model call did not say (a call recorded before it did): they differ only
    in the counts its ``message_delta`` carried (``DELTA_USAGE_KEYS``).
    """
    usage = opening if opening is not None else refusal.get("usage")
    if not refusal.get("content") or not isinstance(usage, dict):
        return None
    return {key: value for key, value in usage.items() if key != "iterations"}


def api_status(error: ApplicationError) -> object:
    """The HTTP status of a failed model call (``api_status_error`` puts it in the details), or ``None``."""
    details = error.details[0] if error.details else None
    return details.get("status_code") if isinstance(details, dict) else None


def _last_fallback_to(reply: dict[str, Any]) -> str | None:
    """The model the last ``fallback`` seam in ``reply``'s output hands off to, if it has one."""
    last = None
    for block in reply.get("content") or []:
        to = block.get("to") if isinstance(block, dict) and block.get("type") == "fallback" else None
        if isinstance(to, dict) and isinstance(to.get("model"), str):
            last = to["model"]
    return last


def _category(refusal: dict[str, Any]) -> str | None:
    details = refusal.get("stop_details")
    category = details.get("category") if isinstance(details, dict) else None
    return category if isinstance(category, str) else None


def recommended(refusal: dict[str, Any], failed_model: str, error_type: str | None) -> dict[str, Any]:
    """The refusal that stands after the last hop failed, as the middleware replays it.

    Its ``recommended_model`` is the failed model for a capacity error (429, 529), else ``None``.
    """
    replayed = copy.deepcopy(refusal)
    details = replayed.get("stop_details")
    if isinstance(details, dict):
        details["recommended_model"] = failed_model if error_type in CAPACITY_ERRORS else None
    return replayed
