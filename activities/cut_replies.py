"""A reply cut off mid-stream, continued by the next attempt (the run's ``continue_cut_replies``).

Without the option, a model call whose stream drops (a connection lost, a read timeout, an SSE ``overloaded_error``)
is retried from the first token, as the SDK's retries do. With it, the attempt that failed keeps the text it had
received, and the next attempt sends it as the start of Claude's turn (a trailing ``assistant`` message, the
*prefill*), so Claude goes on from where the stream stopped instead of writing the reply again; the reply is the kept
text, then what the continuation wrote, as separate blocks.

The kept text travels to the next attempt as the failed attempt's last heartbeat details (Temporal hands them to the
next attempt), by reference to the content store. Only leading text blocks are kept: a thinking block cannot be
resent without its signature, nor a tool call without its whole input, so what follows one is written again. The
last kept text loses its trailing whitespace, which the API refuses at the end of a prefill. A worker killed
mid-stream heartbeats nothing at the end, so its next attempt starts over.
"""

from __future__ import annotations

from typing import Any

CUT_REPLY_DETAIL = "cut_reply"
"""The key of the heartbeat detail that names the stored blocks a failed attempt kept."""


def continuable(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The blocks of a cut-off reply that the next attempt can send as a prefill: its leading plain text.

    Args:
        blocks: The reply's content as far as it streamed.

    Returns:
        Its leading text blocks without citations, as ``{"type": "text", "text": ...}``, blank ones left out and
        the last one's trailing whitespace removed; empty when the reply did not start with text.
    """
    kept: list[dict[str, Any]] = []
    for block in blocks:
        if block.get("type") != "text" or block.get("citations") or not isinstance(block.get("text"), str):
            break
        if block["text"].strip():  # the API refuses a text block of only whitespace
            kept.append({"type": "text", "text": block["text"]})
    if kept:
        kept[-1]["text"] = kept[-1]["text"].rstrip()
    return kept


def with_prefill(messages: list[dict[str, Any]], blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` ending with ``blocks`` as the start of Claude's turn.

    A conversation that already ends with an assistant message (a prefill of the caller's) gets the blocks after
    that message's content: the API takes one trailing assistant message.
    """
    if not blocks:
        return messages
    if messages and messages[-1].get("role") == "assistant":
        last = messages[-1]
        content = last.get("content")
        given = [{"type": "text", "text": content}] if isinstance(content, str) else list(content or [])
        return [*messages[:-1], {**last, "content": [*given, *blocks]}]
    return [*messages, {"role": "assistant", "content": blocks}]


def cut_reply_ref(details: object) -> str | None:
    """The stored blocks a failed attempt kept, from the heartbeat details its next attempt got; ``None`` if none."""
    first = details[0] if isinstance(details, list | tuple) and details else None
    ref = first.get(CUT_REPLY_DETAIL) if isinstance(first, dict) else None
    return ref if isinstance(ref, str) and ref else None
