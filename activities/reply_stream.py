"""A streamed reply put together from its server-sent events, by the rules of the SDK's ``MessageStream``.

The SDK's stream builds a pydantic model of each event and updates a pydantic snapshot of the message with it
(``accumulate_event``), re-parsing a tool call's whole input on each of its deltas. That was about a third of what a
model call cost a worker. The model call needs only the events as they come (for live text and eager tools) and
the final message as the wire carried it, so it reads the same response's events as JSON (the SDK's
``AsyncStream.raw_events``; through the SDK's stream only when the SDK traces the call, ``activities/claude.py``)
and applies ``accumulate_event``'s rules to plain dicts: the final body is the one
``get_final_message().model_dump(mode="json", exclude_unset=True, by_alias=True)`` gave, except that fields the
wire never carried stay out.
"""

from __future__ import annotations

from typing import Any, Literal

from jiter import from_json

TRACKS_TOOL_INPUT = frozenset({"tool_use", "server_tool_use", "mcp_tool_use"})
"""Block types whose ``input`` the stream sends as ``input_json_delta`` (the SDK's ``TRACKS_TOOL_INPUT``)."""

FINE_GRAINED_TOOL_STREAMING_BETA = "fine-grained-tool-streaming-2025-05-14"
"""With this beta a tool input's strings may be cut anywhere: the SDK then parses it with ``trailing-strings``."""

_DELTA_FIELDS = ("stop_reason", "stop_sequence", "stop_details")
"""Fields ``message_delta`` sets on the message whatever it carries (the SDK assigns them from its ``delta``)."""

_DELTA_USAGE = (
    "input_tokens",
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
    "server_tool_use",
    "output_tokens_details",
    "iterations",
    "fallback_credit",
)
"""Cumulative counts of ``message_delta``'s ``usage`` that replace the message's when given (``output_tokens``
always does); others keep the ``message_start`` value, as in the SDK."""


class ReplyStream:
    """The message a stream's events build, one event at a time.

    Args:
        betas: The request's ``anthropic-beta`` header: it says how a tool call's partial input is parsed.
    """

    def __init__(self, betas: str = "") -> None:
        self._partial_mode: Literal[True, "trailing-strings"] = True
        self.betas(betas)
        self._message: dict[str, Any] | None = None
        self._inputs: dict[int, bytes] = {}  # each tool call's input JSON so far, parsed when asked for
        self._parts: dict[tuple[int, str], list[str]] = {}  # text and thinking so far, joined when asked for

    def betas(self, header: str) -> None:
        """The request's ``anthropic-beta`` header, once it is known (before the first event)."""
        self._partial_mode = "trailing-strings" if FINE_GRAINED_TOOL_STREAMING_BETA in header else True

    def add(self, event: dict[str, Any]) -> None:
        """Apply one event (its JSON) to the message.

        Raises:
            ValueError: A tool call's input that is not JSON, in the SDK's words.
        """
        kind = event.get("type")
        message = self._message
        if message is None:
            if kind == "message_start":
                self._message = dict(event["message"])
                self._message["content"] = list(self._message.get("content") or [])
            return  # as the SDK's stream: an event before `message_start` is passed on, and builds nothing
        if kind == "content_block_start":
            block = dict(event["content_block"])
            message["content"].append(block)
            if block.get("type") == "fallback":
                # The hop that served the reply names the model (the non-streaming message is relabelled so too).
                message["model"] = block["to"]["model"]
        elif kind == "content_block_delta":
            self._apply_delta(event["index"], event["delta"])
        elif kind == "content_block_stop":
            self.block(event["index"])
        elif kind == "message_delta":
            delta = event.get("delta") or {}
            for field in _DELTA_FIELDS:
                if field in delta or field in message:
                    message[field] = delta.get(field)
            if delta.get("container") is not None:
                message["container"] = delta["container"]
            for field in ("context_management", "input_transformations"):
                if event.get(field) is not None:
                    message[field] = event[field]
            usage = event.get("usage") or {}
            totals = message.setdefault("usage", {})
            totals["output_tokens"] = usage.get("output_tokens")
            for field in _DELTA_USAGE:
                if usage.get(field) is not None:
                    totals[field] = usage[field]

    def block(self, index: int) -> dict[str, Any]:
        """Block ``index`` as it stands, a tool call's input parsed from what has come of it."""
        assert self._message is not None
        block: dict[str, Any] = self._message["content"][index]
        for field in ("text", "thinking"):
            parts = self._parts.pop((index, field), None)
            if parts is not None:
                block[field] = block.get(field, "") + "".join(parts)
        buffer = self._inputs.pop(index, b"")
        if buffer:
            try:
                block["input"] = from_json(buffer, partial_mode=self._partial_mode)
            except ValueError as e:
                raise ValueError(
                    "Unable to parse tool parameter JSON from model. Please retry your request or adjust your "
                    f"prompt. Error: {e}. JSON: {buffer.decode('utf-8')}"
                ) from e
        return block

    def message(self) -> dict[str, Any]:
        """The message the events built; empty when the stream never started one (``reply_problems`` says so)."""
        if self._message is None:
            return {}
        for index in {*self._inputs, *(index for index, _ in self._parts)}:
            self.block(index)
        return self._message

    def _apply_delta(self, index: int, delta: dict[str, Any]) -> None:
        assert self._message is not None
        block = self._message["content"][index]
        kind, block_type = delta.get("type"), block.get("type")
        if kind == "text_delta" and block_type == "text":
            self._parts.setdefault((index, "text"), []).append(delta["text"])
        elif kind == "input_json_delta" and block_type in TRACKS_TOOL_INPUT:
            self._inputs[index] = self._inputs.get(index, b"") + delta["partial_json"].encode()
        elif kind == "citations_delta" and block_type == "text":
            block["citations"] = [*(block.get("citations") or []), delta["citation"]]
        elif kind == "thinking_delta" and block_type == "thinking":
            self._parts.setdefault((index, "thinking"), []).append(delta["thinking"])
        elif kind == "signature_delta" and block_type == "thinking":
            block["signature"] = delta["signature"]
        elif kind == "compaction_delta" and block_type == "compaction":
            block["content"] = delta.get("content")
            block["encrypted_content"] = delta.get("encrypted_content")
