"""The exact request body each turn of a run sends, built from its ``Conversation``.

The thread rules it follows, and the conversation a run holds, are in ``agent_runner/contract/conversation.py``.
The model call resolves the conversation's messages and builds the request with ``build_request``.

This module is imported by workflow code, so it holds no I/O.
"""

from __future__ import annotations

import copy
from typing import Any

# The run's state imports Conversation from here, as it did before the type moved to the contract.
from agent_runner.contract.conversation import Conversation as Conversation
from agent_runner.contract.types import FALLBACK_CREDIT_BETA as FALLBACK_CREDIT_BETA
from agent_runner.contract.types import MESSAGE_THREADS_BETA

CREATE_ONLY_FIELDS = ("system", "tools")
"""Fields the server takes from the thread on a ``continue``, and rejects if the request repeats them."""

_KEYS_THAT_HOLD_BLOCKS = ("content", "source", "tool", "definition", "tool_references")


def build_request(
    params: dict[str, Any],
    tools: list[dict[str, Any]],
    messages: list[dict[str, Any]],
    *,
    threading: bool,
    answered: int,
    previous_message_id: str | None,
) -> dict[str, Any]:
    """The keyword arguments of ``client.beta.messages.create`` for a turn over the whole, resolved history."""
    request: dict[str, Any] = copy.deepcopy(params)
    extra_body = {k: request.pop(k) for k in ("temperature", "top_k", "top_p") if k in request}
    if extra_body:
        request["extra_body"] = extra_body
    # A run that has no tools sends `tools: []` when its settings say so (`Conversation.sdk_request_shape`: its
    # parameters hold it), as the SDK's runner does; a run recorded before that never sent one, and does not start to
    # mid-way, so the choice is the run's, made once in workflow code, not this builder's.
    if tools:
        request["tools"] = copy.deepcopy(tools)
    if not threading:
        # `answered` is 0 unless a thread was given up (the SDK's "unthreaded"), whose whole-history turns send the
        # messages up to the last reply without `cache_control`, as a replay does; a run that never threaded sends
        # every message as given.
        request["messages"] = [
            *(_without_cache_control(m) for m in messages[:answered]),
            *copy.deepcopy(messages[answered:]),
        ]
        return request
    betas = list(request.get("betas") or [])
    if MESSAGE_THREADS_BETA not in betas:
        # A run recorded before `sdk_request_shape` (which puts the threads beta after the run's own betas itself):
        # before the refusal-fallback beta, which the SDK's middleware adds after the thread's betas. Such a run keeps
        # this order to its end, a refusal-fallback beta in its own `betas` included.
        at = betas.index(FALLBACK_CREDIT_BETA) if FALLBACK_CREDIT_BETA in betas else len(betas)
        betas.insert(at, MESSAGE_THREADS_BETA)
    request["betas"] = betas
    if previous_message_id is not None:
        request["thread"] = {"type": "continue", "previous_message_id": previous_message_id}
        request["messages"] = copy.deepcopy(messages[answered:])
        for field in CREATE_ONLY_FIELDS:
            request.pop(field, None)
    else:
        request["thread"] = {"type": "create"}
        request["messages"] = [
            *(_without_cache_control(m) for m in messages[:answered]),
            *copy.deepcopy(messages[answered:]),
        ]
    return request


def compaction_params(params: dict[str, Any]) -> dict[str, Any]:
    """The parameters of a compaction request (the SDK's ``_without_compaction_incompatible_params``).

    It goes out on a new thread with the full history, without the parameters a compaction request cannot carry:
    ``context_management``, ``stop_sequences``, ``output_format``, and ``output_config.format`` (of the request and
    of each ``fallbacks`` entry). A ``tool_choice`` that forces a tool (``any`` / ``tool``) is dropped too, so the
    request sends what every model takes: the newest ones refuse a forced tool with a 400, and ``auto`` (the
    default) or ``none`` are all a compaction can use. An ``output_config`` left empty is sent empty, as the SDK
    sends it.
    """
    kept = {
        k: copy.deepcopy(v)
        for k, v in params.items()
        if k not in ("context_management", "stop_sequences", "output_format")
    }
    if isinstance(kept.get("tool_choice"), dict) and kept["tool_choice"].get("type") in ("any", "tool"):
        del kept["tool_choice"]
    if isinstance(kept.get("output_config"), dict) and kept["output_config"]:
        kept["output_config"] = _without_format(kept["output_config"])
    fallbacks = kept.get("fallbacks")
    if isinstance(fallbacks, list):
        kept["fallbacks"] = [
            {**f, "output_config": _without_format(f["output_config"])}
            if isinstance(f, dict) and isinstance(f.get("output_config"), dict) and f["output_config"]
            else f
            for f in fallbacks
        ]
    return kept


def _without_format(output_config: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in output_config.items() if k != "format"}


def _without_cache_control(value: Any) -> Any:
    """A copy of ``value`` without the ``cache_control`` of any block in it.

    Only the keys that hold blocks are followed, so a tool's free-form ``input`` stays as it is.
    """
    if isinstance(value, dict):
        return {
            key: _without_cache_control(item) if key in _KEYS_THAT_HOLD_BLOCKS else copy.deepcopy(item)
            for key, item in value.items()
            if key != "cache_control"
        }
    if isinstance(value, list):
        return [_without_cache_control(item) for item in value]
    return value
