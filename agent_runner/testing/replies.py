"""Scripted answers of the fake Messages API: replies, HTTP faults and broken streams, and builders for them.

Each item is what :meth:`agent_runner.testing.FakeMessagesAPI.script` queues for one request. The builders
(:func:`end_turn`, :func:`tool_call`, :func:`rate_limited`, ...) cover the usual cases in one call; the dataclasses
(:class:`Reply`, :class:`Fault`, :class:`SlowStream`, ...) take every detail.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias

MESSAGE_THREADS_BETA = "message-threads-2026-08-12"
"""The ``anthropic-beta`` value that enables server-side message threads (``thread`` field)."""

COMPACT_BETA = "compact-2026-09-04"
"""The ``anthropic-beta`` value a request's ``compaction`` field needs."""

INLINE_TOOLS_BETA = "inline-tools-2026-09-15"
"""The ``anthropic-beta`` value a ``tool_addition`` or ``tool_removal`` block in a ``system`` message needs."""

MESSAGES_PATH = "/v1/messages"

ERROR_TYPES: Mapping[int, str] = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    408: "timeout_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    504: "timeout_error",
    529: "overloaded_error",
}
"""HTTP status -> Anthropic ``error.type``; other 4xx map to ``invalid_request_error``, 5xx to ``api_error``."""

_DEFAULT_ERROR_MESSAGES: Mapping[int, str] = {
    400: "Invalid request",
    401: "invalid x-api-key",
    402: "Your credit balance is too low to access the Anthropic API.",
    403: "Your API key does not have permission to use the specified resource.",
    404: "Not found",
    408: "Request timed out",
    413: "Request exceeds the maximum allowed number of bytes.",
    429: "Number of requests has exceeded your rate limit (fake Messages API).",
    500: "Internal server error",
    504: "Gateway timeout",
    529: "Overloaded",
}

_DEFAULT_USAGE: Mapping[str, int] = {"input_tokens": 10, "output_tokens": 5}

# Block types whose `input` the real API streams as `input_json_delta` chunks.
_TOOL_INPUT_BLOCKS = frozenset({"tool_use", "server_tool_use", "mcp_tool_use"})

_TEXT_CHUNKS = 3


# --------------------------------------------------------------------------------------------
# Scripted items
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RecordedRequest:
    """One HTTP request the fake received, whatever it was answered with.

    Attributes:
        method: The HTTP method, e.g. ``"POST"``.
        path: The URL path without the query string, e.g. ``"/v1/messages"``.
        headers: Request headers with lower-cased names; repeated headers are joined with ``", "``.
        body: The decoded JSON body, or ``{}`` when it was empty or not a JSON object.
        query: Query parameters; the beta client sends ``?beta=true``.
    """

    method: str
    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    query: dict[str, str] = field(default_factory=dict)


@dataclass
class Reply:
    """A successful Messages API response.

    The server completes it into ``{"id", "type": "message", "role": "assistant", "model",
    "content", "stop_reason", "stop_sequence", "usage"}`` (plus ``"container"`` when given) and
    streams it as SSE when the request asks for ``"stream": true``.

    Attributes:
        content: Content blocks, e.g. ``[text("hi"), tool_use(None, "search", {"q": "x"})]``.
            A ``tool_use`` block without an ``id`` gets ``toolu_fake_{n:03d}_{k}``.
        stop_reason: ``"end_turn"``, ``"tool_use"``, ``"max_tokens"``, ``"pause_turn"``, ...
        stop_sequence: The matched stop sequence, if any.
        usage: The ``usage`` object; defaults to ``{"input_tokens": 10, "output_tokens": 5}``.
        closing_usage: When streamed, the ``usage`` of the ``message_delta`` in place of ``usage`` (which the
            ``message_start`` carries): the real API's closing counts may leave out fields the opening ones have.
            A body that is not streamed has ``usage``.
        container: A ``container`` object (``{"id": ..., "expires_at": ...}``), included only if set.
        stop_details: A refusal's ``stop_details`` (``{"type": "refusal", "category": ...,
            "explanation": ..., "fallback_credit_token": ...}``), included only if set; streamed in the
            ``message_delta``, as the API does.
        id: The message id; defaults to ``msg_fake_{n:03d}`` (n-th reply since start/reset).
        model: The model; defaults to the request's ``model``.
        delay: Seconds to wait before answering (before the response headers).
        event_delay: Seconds to wait between SSE events when streaming.
        until: Answer only once this is set (after ``delay``): a test holds the reply while it acts on the run,
            where a delay would leave it a window to race.
    """

    content: list[dict[str, Any]]
    stop_reason: str | None = "end_turn"
    stop_sequence: str | None = None
    usage: dict[str, Any] | None = None
    closing_usage: dict[str, Any] | None = None
    container: dict[str, Any] | None = None
    stop_details: dict[str, Any] | None = None
    id: str | None = None
    model: str | None = None
    delay: float = 0.0
    event_delay: float = 0.0
    until: threading.Event | None = None


@dataclass
class Fault:
    """An HTTP error response with Anthropic's error body.

    Attributes:
        status: The HTTP status, e.g. 429, 500, 529.
        body: The JSON body; defaults to :func:`error_body` for ``status``.
        headers: Extra response headers (``request-id`` is always set).
        delay: Seconds to wait before answering.
    """

    status: int
    body: dict[str, Any] | None = None
    headers: dict[str, str] | None = None
    delay: float = 0.0


@dataclass
class Disconnect:
    """Close the TCP connection without sending any response; the client sees a connection error.

    Attributes:
        delay: Seconds to wait before closing.
    """

    delay: float = 0.0


@dataclass
class SlowStream:
    """Stream ``reply`` with ``event_delay`` seconds between SSE events (overrides ``reply.event_delay``).

    A non-streaming request gets ``reply`` as usual.

    Attributes:
        reply: The reply to stream.
        event_delay: Seconds between SSE events.
        chunks: How many deltas each text, thinking or tool input is cut into (at most).
    """

    reply: Reply
    event_delay: float
    chunks: int = _TEXT_CHUNKS


@dataclass
class DropMidStream:
    """Stream the first ``after_events`` SSE events of ``reply``, then close the connection.

    Events are counted as :func:`sse_events` lists them (``message_start`` is event 1, ``ping``
    event 2). The reply still consumes its reply number, but a thread does not advance to it.
    A non-streaming request is answered like :class:`Disconnect`.

    Attributes:
        reply: The reply whose stream is cut short.
        after_events: How many SSE events to send before closing.
        delay: Seconds the stream stalls after them before the connection closes (a stream that hangs).
    """

    reply: Reply
    after_events: int
    delay: float = 0.0


@dataclass
class ErrorMidStream:
    """Stream the first ``after_events`` SSE events of ``reply``, then an ``event: error`` and the end.

    This is how the real API reports e.g. overload after a stream has started (HTTP status 200).
    A thread does not advance to the reply. A non-streaming request gets the matching HTTP error
    (529 for ``overloaded_error``).

    Attributes:
        reply: The reply whose stream fails.
        after_events: How many SSE events to send before the error event.
        error_type: The ``error.type`` of the error event.
        message: The ``error.message`` of the error event.
    """

    reply: Reply
    after_events: int
    error_type: str = "overloaded_error"
    message: str = "Overloaded"


@dataclass
class ThreadNotFound:
    """Answer the next request with the 404 ``thread_not_found`` error, as if the thread expired."""


@dataclass
class ThreadUnsupported:
    """Answer the next request with the 400 ``thread_unsupported_request`` error.

    The real API sends it for a threaded request that combines ``thread`` with a field or an organization setting
    Threads do not support; the SDK then resends the turn without ``thread`` and stops threading.

    Attributes:
        unsupported: ``error.details.unsupported``: the fields or settings, e.g. ``("fallbacks",)``; left out of the
            body when empty.
    """

    unsupported: tuple[str, ...] = ()


ScriptItem: TypeAlias = (
    Reply | Fault | Disconnect | SlowStream | DropMidStream | ErrorMidStream | ThreadNotFound | ThreadUnsupported
)
"""Anything :meth:`FakeMessagesAPI.script` accepts and a responder may return."""

Responder: TypeAlias = Callable[[dict[str, Any]], ScriptItem]
"""``fn(request_body) -> item``, asked when the script queue is empty (runs in the server thread)."""

_SCRIPT_ITEM_TYPES = (
    Reply,
    Fault,
    Disconnect,
    SlowStream,
    DropMidStream,
    ErrorMidStream,
    ThreadNotFound,
    ThreadUnsupported,
)


# --------------------------------------------------------------------------------------------
# Helpers to build scripts
# --------------------------------------------------------------------------------------------


def text(s: str) -> dict[str, Any]:
    """A ``text`` content block."""
    return {"type": "text", "text": s}


def tool_use(id: str | None, name: str, input: dict[str, Any]) -> dict[str, Any]:  # noqa: A002
    """A ``tool_use`` content block.

    Args:
        id: The tool use id, or ``None`` to let the server assign ``toolu_fake_{n:03d}_{k}``.
        name: The tool name.
        input: The tool input.
    """
    if id is None:
        return {"type": "tool_use", "name": name, "input": input}
    return {"type": "tool_use", "id": id, "name": name, "input": input}


def thinking(thought: str, signature: str = "sig_fake") -> dict[str, Any]:
    """A ``thinking`` content block (streamed as ``thinking_delta`` and ``signature_delta``)."""
    return {"type": "thinking", "thinking": thought, "signature": signature}


def end_turn(text_str: str, **kw: Any) -> Reply:
    """A reply with one text block and ``stop_reason`` ``"end_turn"``.

    Args:
        text_str: The text.
        **kw: Other :class:`Reply` fields.
    """
    return Reply(content=[text(text_str)], **kw)


def tool_call(
    name: str,
    input: dict[str, Any],  # noqa: A002
    id: str | None = None,  # noqa: A002
    text: str | None = None,
    **kw: Any,
) -> Reply:
    """A reply that calls one tool, with ``stop_reason`` ``"tool_use"``.

    Args:
        name: The tool name.
        input: The tool input.
        id: The tool use id; by default the server assigns ``toolu_fake_{n:03d}_1`` where n is
            the reply number, so the id is the same on every run of a script.
        text: Optional text block placed before the ``tool_use`` block.
        **kw: Other :class:`Reply` fields.
    """
    content: list[dict[str, Any]] = [] if text is None else [{"type": "text", "text": text}]
    content.append(tool_use(id, name, input))
    kw.setdefault("stop_reason", "tool_use")
    return Reply(content=content, **kw)


def error_body(status: int, message: str | None = None, **details: Any) -> dict[str, Any]:
    """Anthropic's error body for ``status``.

    Args:
        status: HTTP status, mapped to ``error.type`` with :data:`ERROR_TYPES`.
        message: ``error.message``; a stock message for the status by default.
        **details: If given, sent as ``error.details`` (e.g. ``error_code="thread_not_found"``).
    """
    error_type = ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    error: dict[str, Any] = {
        "type": error_type,
        "message": message if message is not None else _DEFAULT_ERROR_MESSAGES.get(status, f"HTTP {status}"),
    }
    if details:
        error["details"] = dict(details)
    return {"type": "error", "error": error}


def rate_limited(retry_after: float) -> Fault:
    """A 429 ``rate_limit_error`` with a ``retry-after`` header (seconds)."""
    return Fault(429, headers={"retry-after": f"{retry_after:g}"})


def overloaded() -> Fault:
    """A 529 ``overloaded_error``."""
    return Fault(529)


def server_error() -> Fault:
    """A 500 ``api_error``."""
    return Fault(500)


def bad_request(message: str) -> Fault:
    """A 400 ``invalid_request_error`` with ``message``."""
    return Fault(400, body=error_body(400, message))


def _thread_not_found_body() -> dict[str, Any]:
    return error_body(404, "thread not found", error_code="thread_not_found")


def _thread_unsupported_body(unsupported: Sequence[str]) -> dict[str, Any]:
    named = f" ({', '.join(unsupported)})" if unsupported else ""
    message = f"thread: this request cannot be threaded{named}; send the full conversation without `thread`"
    if unsupported:
        return error_body(400, message, error_code="thread_unsupported_request", unsupported=list(unsupported))
    return error_body(400, message, error_code="thread_unsupported_request")
