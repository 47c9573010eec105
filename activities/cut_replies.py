"""A reply cut off mid-stream, continued by the next attempt (the run's ``continue_cut_replies``).

Without the option, a model call whose stream drops (a connection lost, a read timeout, an SSE ``overloaded_error``)
is retried from the first token, as the SDK's retries do. With it, the attempt that failed keeps the text it had
received, and the next attempt sends it as the start of Claude's turn (a trailing ``assistant`` message, the
*prefill*), so Claude goes on from where the stream stopped instead of writing the reply again; the reply is the kept
text, then what the continuation wrote, as separate blocks.

The kept text travels to the next attempt as the attempt's last heartbeat details (Temporal hands them to the
next attempt, however the attempt ended), by reference to the content store. While the stream is read, each
heartbeat names the text kept so far (stored again only when it grew), and a failed attempt's last one names all it
had: so an attempt that never says why it ended (its worker killed, its heartbeat or start-to-close timeout passed)
leaves the next one the text up to its last heartbeat, at most ``EVERY`` (1.5 s, ``heartbeats.py``) before the cut.
Only leading text blocks are kept: a thinking block cannot be resent without its signature, nor a tool call without
its whole input, so what follows one is written again. The last kept text loses its trailing whitespace, which the
API refuses at the end of a prefill.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from agent_runner.activities.reply_stream import ReplyStream
from agent_runner.contract.errors import StoreError

logger = logging.getLogger(__name__)

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


class KeptText:
    """What one attempt keeps for the next: the text it was sent to go on from (``lead``), then what it streamed.

    Args:
        put: Stores a value in the content store and returns its reference (``Content.put_value``).
        lead: The blocks a cut-off attempt before this one kept, which this attempt's request ends with.
        lead_ref: Their reference, as the heartbeat details this attempt got named them.
    """

    def __init__(
        self,
        put: Callable[[list[dict[str, Any]]], Awaitable[str]],
        lead: list[dict[str, Any]] | None = None,
        lead_ref: str | None = None,
    ) -> None:
        self._put = put
        self.lead = lead or []
        """The text a cut-off attempt before this one kept, which this attempt's request ends with."""
        self._kept = self.lead
        self._ref = lead_ref if self.lead else None

    async def details(self, reply: ReplyStream) -> tuple[dict[str, str], ...]:
        """The heartbeat details that name what is kept now, once ``reply`` streamed what it has: none if nothing.

        What is kept is stored when it changed since the last call; if the store fails, the last stored text is
        named still (the next attempt then goes on from a little less).
        """
        try:
            streamed = reply.message().get("content") or []
        except ValueError:  # a tool call's input cut where it cannot be parsed: what was kept before still holds
            streamed = None
        kept = self._kept if streamed is None else [*self.lead, *continuable(streamed)]
        if kept != self._kept:
            try:
                self._ref = await self._put(kept)
                self._kept = kept
            except StoreError as e:
                logger.warning("Could not keep the text of a streaming reply for a retry to go on from: %s", e)
        return ({CUT_REPLY_DETAIL: self._ref},) if self._ref else ()
