"""The fake Messages API server: ``POST /v1/messages`` over real HTTP, answering from a script.

See the package docstring (``agent_runner.testing``) for what it emulates and how ids are numbered.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import logging
import threading
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from aiohttp import web

from agent_runner.testing.replies import (
    _DEFAULT_USAGE,
    _SCRIPT_ITEM_TYPES,
    _TEXT_CHUNKS,
    _TOOL_INPUT_BLOCKS,
    COMPACT_BETA,
    ERROR_TYPES,
    INLINE_TOOLS_BETA,
    MESSAGE_THREADS_BETA,
    MESSAGES_PATH,
    Disconnect,
    DropMidStream,
    ErrorMidStream,
    Fault,
    RecordedRequest,
    Reply,
    Responder,
    ScriptItem,
    SlowStream,
    ThreadNotFound,
    ThreadUnsupported,
    _thread_not_found_body,
    _thread_unsupported_body,
    error_body,
)

log = logging.getLogger(__name__)


def _served_by_fallback(message: Mapping[str, Any]) -> bool:
    iterations = (message.get("usage") or {}).get("iterations")
    return isinstance(iterations, list) and any(
        isinstance(i, dict) and i.get("type") == "fallback_message" for i in iterations
    )


# --------------------------------------------------------------------------------------------
# Building responses
# --------------------------------------------------------------------------------------------


def _chunks(s: str, parts: int) -> list[str]:
    """Split ``s`` into at most ``parts`` non-empty pieces (none for an empty string)."""
    if not s:
        return []
    size = -(-len(s) // parts)
    return [s[i : i + size] for i in range(0, len(s), size)]


def sse_events(
    message: Mapping[str, Any], chunks: int = _TEXT_CHUNKS, closing_usage: Mapping[str, Any] | None = None
) -> list[tuple[str, dict[str, Any]]]:
    """The ``(event, data)`` SSE events that stream ``message`` the way the real API does.

    Order: ``message_start``, ``ping``, then per content block ``content_block_start``, its
    deltas and ``content_block_stop``, then ``message_delta`` and ``message_stop``. Text is sent
    as up to three ``text_delta`` chunks, tool input as up to three ``input_json_delta`` chunks
    of ``json.dumps(input)``, thinking as ``thinking_delta`` chunks plus one ``signature_delta``;
    other blocks arrive whole in ``content_block_start``.

    Args:
        message: A complete Messages API response object.
        chunks: How many deltas each text, thinking or tool input is cut into (at most).
        closing_usage: The ``message_delta``'s ``usage``; by default the message's (with its output count).

    Returns:
        The events; their count is what :class:`DropMidStream` ``after_events`` refers to.
    """
    usage = dict(message.get("usage") or {})
    start_message = {
        **copy.deepcopy(dict(message)),
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        # The real API reports a provisional output count at the start and the total at the end.
        "usage": {**usage, "output_tokens": 1},
    }
    start_message.pop("stop_details", None)  # it comes with the stop reason, in the `message_delta`
    events: list[tuple[str, dict[str, Any]]] = [
        ("message_start", {"type": "message_start", "message": start_message}),
        ("ping", {"type": "ping"}),
    ]
    for index, block in enumerate(message.get("content") or []):
        block_type = block.get("type")
        deltas: list[dict[str, Any]] = []
        if block_type == "text":
            start_block = {**block, "text": ""}
            deltas = [{"type": "text_delta", "text": c} for c in _chunks(str(block.get("text", "")), chunks)]
        elif block_type in _TOOL_INPUT_BLOCKS:
            start_block = {**block, "input": {}}
            partial = json.dumps(block.get("input", {}))
            deltas = [{"type": "input_json_delta", "partial_json": c} for c in _chunks(partial, chunks)]
        elif block_type == "thinking":
            start_block = {**block, "thinking": "", "signature": ""}
            deltas = [
                {"type": "thinking_delta", "thinking": c} for c in _chunks(str(block.get("thinking", "")), chunks)
            ]
            deltas.append({"type": "signature_delta", "signature": block.get("signature", "")})
        else:
            start_block = dict(block)
        events.append(
            ("content_block_start", {"type": "content_block_start", "index": index, "content_block": start_block})
        )
        events.extend(
            ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": d}) for d in deltas
        )
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    delta: dict[str, Any] = {"stop_reason": message.get("stop_reason"), "stop_sequence": message.get("stop_sequence")}
    if message.get("container") is not None:
        delta["container"] = message["container"]
    if message.get("stop_details") is not None:
        delta["stop_details"] = message["stop_details"]
    final_usage = (
        copy.deepcopy(dict(closing_usage))
        if closing_usage is not None
        else {**usage, "output_tokens": usage.get("output_tokens", 0)}
    )
    events.append(("message_delta", {"type": "message_delta", "delta": delta, "usage": final_usage}))
    events.append(("message_stop", {"type": "message_stop"}))
    return events


def _encode_sse(event: str, data: Mapping[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


def _fill_tool_ids(content: list[dict[str, Any]], reply_number: int) -> list[dict[str, Any]]:
    filled: list[dict[str, Any]] = []
    ordinal = 0
    for block in copy.deepcopy(content):
        if block.get("type") == "tool_use":
            ordinal += 1
            if not block.get("id"):
                block["id"] = f"toolu_fake_{reply_number:03d}_{ordinal}"
        filled.append(block)
    return filled


# --------------------------------------------------------------------------------------------
# Request validation
# --------------------------------------------------------------------------------------------


class _RequestError(Exception):
    """A request the fake rejects; carries the HTTP status and error body."""

    def __init__(self, status: int, body: dict[str, Any]) -> None:
        super().__init__(body["error"]["message"])
        self.status = status
        self.body = body


def _invalid(message: str, **details: Any) -> _RequestError:
    return _RequestError(400, error_body(400, message, **details))


def _blocks(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, list):
        return [b for b in content if isinstance(b, dict)]
    return []


def _validate_shape(body: dict[str, Any], *, is_continue: bool) -> None:
    for name in ("model", "max_tokens", "messages"):
        if name not in body:
            raise _invalid(f"{name}: Field required")
    if not isinstance(body["model"], str) or not body["model"]:
        raise _invalid("model: Input should be a non-empty string")
    max_tokens = body["max_tokens"]
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 0:
        raise _invalid("max_tokens: Input should be a non-negative integer")
    messages = body["messages"]
    if not isinstance(messages, list):
        raise _invalid("messages: Input should be a valid list")
    if not messages and not is_continue:
        raise _invalid("messages: at least one message is required")
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise _invalid(f"messages.{i}: Input should be an object")
        if message.get("role") not in ("user", "assistant", "system"):
            raise _invalid(f"messages.{i}.role: Input should be 'user', 'assistant' or 'system'")
        if "content" not in message:
            # A system message may carry only `output_config` (per-turn settings), as the API takes it.
            if message["role"] == "system" and message.get("output_config") is not None:
                continue
            raise _invalid(f"messages.{i}.content: Field required")
        if not isinstance(message["content"], str | list):
            raise _invalid(f"messages.{i}.content: Input should be a valid string or list of content blocks")


def _validate_tool_pairing(conversation: Sequence[dict[str, Any]], stored: int) -> None:
    """Reject ``tool_result``/``tool_use`` mismatches like the real API.

    The API merges consecutive messages of the same role, so pairing is checked between merged
    turns; ``system`` messages (beta) do not break a pair. ``stored`` is how many leading
    messages the thread already held, so errors name positions in the request's ``messages``.
    """

    def where(i: int) -> str:
        return f"messages.{i - stored}" if i >= stored else f"the thread's stored message {i}"

    # role, [(message index, block)]
    turns: list[tuple[str, list[tuple[int, dict[str, Any]]]]] = []
    for i, message in enumerate(conversation):
        role = message.get("role")
        if role == "system" or not isinstance(role, str):
            continue
        blocks = [(i, b) for b in _blocks(message.get("content"))]
        if turns and turns[-1][0] == role:
            turns[-1][1].extend(blocks)
        else:
            turns.append((role, blocks))

    for t, (role, blocks) in enumerate(turns):
        if role != "user":
            continue
        previous = turns[t - 1] if t > 0 and turns[t - 1][0] == "assistant" else None
        offered = [b.get("id") for _, b in (previous[1] if previous else []) if b.get("type") == "tool_use"]
        answered: set[Any] = set()
        for i, block in blocks:
            if block.get("type") != "tool_result":
                continue
            tool_use_id = block.get("tool_use_id")
            if tool_use_id not in offered:
                raise _invalid(
                    f"{where(i)}: unexpected `tool_use_id` found in `tool_result` blocks: {tool_use_id}. "
                    "Each `tool_result` block must have a corresponding `tool_use` block in the previous message."
                )
            answered.add(tool_use_id)
        missing = [tid for tid in offered if tid not in answered]
        if previous is not None and missing:
            at = previous[1][0][0] if previous[1] else (blocks[0][0] if blocks else 0)
            raise _invalid(
                f"{where(at)}: `tool_use` ids were found without `tool_result` blocks immediately after: "
                f"{', '.join(str(m) for m in missing)}. Each `tool_use` block must have a corresponding "
                "`tool_result` block in the next message."
            )


def _validate_betas(body: dict[str, Any], betas: set[str]) -> None:
    """Reject beta fields sent without their beta, as the real API does (the thread's, under its own flag)."""
    if "compaction" in body and COMPACT_BETA not in betas:
        raise _invalid(f"compaction: requires the `anthropic-beta: {COMPACT_BETA}` header")
    for i, message in enumerate(body["messages"]):
        content = message.get("content")
        for block in content if message.get("role") == "system" and isinstance(content, list) else ():
            kind = block.get("type") if isinstance(block, dict) else None
            if kind in ("tool_addition", "tool_removal") and INLINE_TOOLS_BETA not in betas:
                raise _invalid(
                    f"messages.{i}.content: `{kind}` requires the `anthropic-beta: {INLINE_TOOLS_BETA}` header"
                )


def _betas(headers: Mapping[str, str]) -> set[str]:
    return {b.strip() for b in headers.get("anthropic-beta", "").split(",") if b.strip()}


# --------------------------------------------------------------------------------------------
# The server
# --------------------------------------------------------------------------------------------


@dataclass
class _Thread:
    """The conversation the server holds under one reply id: ``parent``'s, then ``messages``.

    Linked rather than copied, so a thread of N turns costs O(N) memory, not O(N²).
    """

    messages: list[dict[str, Any]]
    """The messages this turn added, ending with its reply."""
    system: Any
    tools: Any
    continued: bool = False
    parent: _Thread | None = None

    def history(self) -> list[dict[str, Any]]:
        """The whole conversation up to and including this turn's reply."""
        turns: list[_Thread] = []
        entry: _Thread | None = self
        while entry is not None:
            turns.append(entry)
            entry = entry.parent
        return [message for turn in reversed(turns) for message in turn.messages]


@dataclass
class _Claim:
    """A validated continue request in flight on ``previous_message_id``."""

    previous_message_id: str
    base: _Thread
    generation: int


class FakeMessagesAPI:
    """A fake Messages API server on ``127.0.0.1`` answering from a FIFO script.

    Example::

        with FakeMessagesAPI() as fake:
            fake.script(end_turn("Hello!"), rate_limited(0.1), tool_call("search", {"q": "x"}))
            client = anthropic.Anthropic(base_url=fake.url, api_key="test-key", max_retries=0)
            ...
            assert fake.bodies()[0]["messages"] == [...]

    Each valid request consumes the next scripted item (or asks :attr:`responder` when the queue
    is empty); a request the fake rejects as invalid (400, or 404 for an unknown thread)
    consumes nothing. Every request is recorded, including rejected and faulted ones.

    Args:
        port: TCP port to listen on; 0 picks a free one.
        require_threads_beta: Reject a ``thread`` field unless the ``anthropic-beta`` header
            includes :data:`MESSAGE_THREADS_BETA`, as the real API does for beta fields.
    """

    def __init__(self, port: int = 0, *, require_threads_beta: bool = True) -> None:
        self._requested_port = port
        self.require_threads_beta = require_threads_beta
        self._lock = threading.Lock()
        self._request_seen = threading.Condition(self._lock)
        self._queue: deque[ScriptItem] = deque()
        self._responder: Responder | None = None
        self._requests: list[RecordedRequest] = []
        self._threads: dict[str, _Thread] = {}
        self._in_flight: set[str] = set()
        self._generation = 0
        """Bumped by reset(): a handler still sleeping from before a reset must not touch the new state."""
        self._reply_count = 0
        self._served_count = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._port: int | None = None

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> FakeMessagesAPI:
        """Start listening; returns ``self``. Blocks until the port is bound.

        Raises:
            RuntimeError: If already started.
        """
        if self._thread is not None:
            raise RuntimeError("FakeMessagesAPI is already started")
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=self._run_loop, args=(loop,), name="fake-messages-api", daemon=True)
        self._loop, self._thread = loop, thread
        thread.start()
        try:
            asyncio.run_coroutine_threadsafe(self._start_server(), loop).result(timeout=10)
        except BaseException:
            self._shutdown_loop()
            raise
        return self

    def stop(self) -> None:
        """Stop the server and its thread. Safe to call more than once."""
        if self._thread is None or self._loop is None:
            return
        if self._runner is not None:
            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(timeout=10)
            self._runner = None
        self._shutdown_loop()

    def __enter__(self) -> FakeMessagesAPI:
        if self._thread is None:
            self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    @property
    def port(self) -> int:
        """The bound TCP port.

        Raises:
            RuntimeError: If the server is not started.
        """
        if self._port is None:
            raise RuntimeError("FakeMessagesAPI is not started; call start() or use it as a context manager")
        return self._port

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT`` without a trailing slash, for the client's ``base_url``."""
        return f"http://127.0.0.1:{self.port}"

    @classmethod
    def from_script_file(cls, path: str | Path, port: int = 0) -> FakeMessagesAPI:
        """A (not yet started) fake with the items of a JSON script file queued; see :func:`parse_script`."""
        from agent_runner.testing.scripts import load_script  # the file format builds on this module

        fake = cls(port)
        fake.script(*load_script(path))
        return fake

    # -- scripting and inspection ---------------------------------------------------------

    def script(self, *items: ScriptItem) -> None:
        """Append items to the FIFO queue of answers.

        Raises:
            TypeError: If an item is not a script item (e.g. a bare content dict).
        """
        for item in items:
            if not isinstance(item, _SCRIPT_ITEM_TYPES):
                raise TypeError(f"not a script item: {item!r}; use Reply, Fault, Disconnect, ...")
        with self._lock:
            self._queue.extend(items)

    @property
    def responder(self) -> Responder | None:
        """``fn(body) -> item`` used when the queue is empty; ``None`` to answer 500 instead."""
        return self._responder

    @responder.setter
    def responder(self, fn: Responder | None) -> None:
        with self._lock:
            self._responder = fn

    @property
    def pending(self) -> int:
        """How many scripted items are still queued."""
        with self._lock:
            return len(self._queue)

    @property
    def requests(self) -> list[RecordedRequest]:
        """A copy of every request received so far, in order, including rejected and faulted ones."""
        with self._lock:
            return list(self._requests)

    def bodies(self) -> list[dict[str, Any]]:
        """The JSON bodies of :attr:`requests`, in order."""
        return [r.body for r in self.requests]

    def wait_for_requests(self, count: int, timeout: float = 5.0) -> list[RecordedRequest]:
        """Block until at least ``count`` requests were received; returns :attr:`requests`.

        Raises:
            TimeoutError: If fewer than ``count`` arrive within ``timeout`` seconds.
        """
        with self._request_seen:
            if not self._request_seen.wait_for(lambda: len(self._requests) >= count, timeout):
                raise TimeoutError(f"fake Messages API: {len(self._requests)} of {count} requests after {timeout}s")
            return list(self._requests)

    def thread_messages(self, reply_id: str) -> list[dict[str, Any]]:
        """The full conversation the server holds for a thread, up to and including reply ``reply_id``.

        Raises:
            KeyError: If no thread holds ``reply_id`` (never created, or forgotten).
        """
        with self._lock:
            entry = self._threads.get(reply_id)
            if entry is None:
                raise KeyError(f"fake Messages API holds no thread at reply {reply_id!r}")
            return copy.deepcopy(entry.history())

    def forget_threads(self) -> None:
        """Make every known thread "not found", as if the server's thread storage expired."""
        with self._lock:
            self._threads.clear()

    def reset(self) -> None:
        """Clear the queue, responder, recorded requests, threads and id counters."""
        with self._lock:
            self._queue.clear()
            self._responder = None
            self._requests.clear()
            self._threads.clear()
            self._reply_count = 0
            self._served_count = 0
            self._in_flight.clear()
            self._generation += 1

    # -- event loop plumbing --------------------------------------------------------------

    @staticmethod
    def _run_loop(loop: asyncio.AbstractEventLoop) -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_forever()
        finally:
            # Handlers still sleeping on a scripted delay must not outlive the loop silently.
            pending = asyncio.all_tasks(loop)
            for task in pending:
                task.cancel()
            if pending:
                loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    def _shutdown_loop(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(loop.stop)
        if thread is not None:
            thread.join(timeout=10)
        self._loop = self._thread = None
        self._port = None

    async def _start_server(self) -> None:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        # A short shutdown timeout: a handler sleeping on a long scripted delay must not stall stop().
        runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=0.5)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", self._requested_port)
        await site.start()
        self._runner = runner
        address = runner.addresses[0]
        self._port = int(address[1])

    # -- request handling -----------------------------------------------------------------

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        body: dict[str, Any] = {}
        parse_error: str | None = None
        if raw:
            try:
                decoded = json.loads(raw)
            except ValueError as exc:
                parse_error = f"Request body is not valid JSON: {exc}"
            else:
                if isinstance(decoded, dict):
                    body = decoded
                else:
                    parse_error = "Request body must be a JSON object"
        headers: dict[str, str] = {}
        for name, value in request.headers.items():
            key = name.lower()
            headers[key] = f"{headers[key]}, {value}" if key in headers else value
        recorded = RecordedRequest(
            method=request.method, path=request.path, headers=headers, body=body, query=dict(request.query)
        )
        with self._request_seen:
            self._requests.append(recorded)
            request_id = f"req_fake_{len(self._requests):03d}"
            self._request_seen.notify_all()

        if request.method != "POST" or request.path != MESSAGES_PATH:
            return _json_error(404, error_body(404, f"Not found: {request.method} {request.path}"), request_id)
        if parse_error is not None:
            return _json_error(400, error_body(400, parse_error), request_id)

        claim: _Claim | None = None
        generation = self._generation
        try:
            claim = self._validate_and_claim(body, headers)
            item = self._next_item(body)
            return await self._answer(request, body, item, claim, request_id, generation)
        except _RequestError as exc:
            return _json_error(exc.status, exc.body, request_id)
        finally:
            if claim is not None:
                with self._lock:
                    if generation == self._generation:
                        self._in_flight.discard(claim.previous_message_id)

    def _validate_and_claim(self, body: dict[str, Any], headers: Mapping[str, str]) -> _Claim | None:
        """Validate ``body``; for a valid ``continue``, mark its thread position in flight."""
        thread = body.get("thread")
        is_continue = isinstance(thread, dict) and thread.get("type") == "continue"
        _validate_shape(body, is_continue=is_continue)
        _validate_betas(body, _betas(headers))
        messages: list[dict[str, Any]] = body["messages"]
        if thread is None:
            _validate_tool_pairing(messages, 0)
            return None
        if self.require_threads_beta and MESSAGE_THREADS_BETA not in _betas(headers):
            raise _invalid(f"thread: requires the `anthropic-beta: {MESSAGE_THREADS_BETA}` header")
        if not isinstance(thread, dict) or thread.get("type") not in ("create", "continue"):
            raise _invalid("thread.type: Input should be 'create' or 'continue'")
        if thread["type"] == "create":
            _validate_tool_pairing(messages, 0)
            return None
        previous_id = thread.get("previous_message_id")
        if not isinstance(previous_id, str) or not previous_id:
            raise _invalid("thread.previous_message_id: Field required")
        for name in ("system", "tools"):
            if name in body:
                raise _invalid(
                    f"{name}: not allowed on a `continue` request; the thread keeps the `{name}` it was created with"
                )
        with self._lock:
            base = self._threads.get(previous_id)
            if base is None:
                raise _RequestError(404, _thread_not_found_body())
            if base.continued:
                raise _invalid(
                    f"thread: message {previous_id} was already continued; continue from the thread's latest reply",
                    error_code="thread_already_continued",
                )
            if previous_id in self._in_flight:
                raise _invalid(
                    f"thread: another request is still continuing from message {previous_id}",
                    error_code="thread_continue_in_flight",
                )
            # Pairing depends only on the reply right before the new messages, which ends `base.messages`.
            _validate_tool_pairing([base.messages[-1], *messages], 1)
            self._in_flight.add(previous_id)
            return _Claim(previous_id, base, self._generation)

    def _next_item(self, body: dict[str, Any]) -> ScriptItem:
        with self._lock:
            if self._queue:
                self._served_count += 1
                return self._queue.popleft()
            responder = self._responder
            served, received = self._served_count, len(self._requests)
        if responder is None:
            raise _RequestError(
                500,
                error_body(
                    500,
                    "fake Messages API: no scripted reply left for this request "
                    f"({served} scripted items served, {received} requests received); script more replies",
                ),
            )
        try:
            item = responder(copy.deepcopy(body))
        except Exception as exc:
            log.exception("fake Messages API responder raised")
            raise _RequestError(500, error_body(500, f"fake Messages API: responder raised {exc!r}")) from exc
        if not isinstance(item, _SCRIPT_ITEM_TYPES):
            raise _RequestError(500, error_body(500, f"fake Messages API: responder returned {item!r}"))
        with self._lock:
            self._served_count += 1
        return item

    async def _answer(
        self,
        request: web.Request,
        body: dict[str, Any],
        item: ScriptItem,
        claim: _Claim | None,
        request_id: str,
        generation: int,
    ) -> web.StreamResponse:
        stream = body.get("stream") is True
        if isinstance(item, ThreadNotFound):
            return _json_error(404, _thread_not_found_body(), request_id)
        if isinstance(item, ThreadUnsupported):
            return _json_error(400, _thread_unsupported_body(item.unsupported), request_id)
        if isinstance(item, Fault):
            await asyncio.sleep(item.delay)
            fault_body = item.body if item.body is not None else error_body(item.status)
            return _json_error(item.status, fault_body, request_id, item.headers)
        if isinstance(item, Disconnect):
            await asyncio.sleep(item.delay)
            return _disconnect(request)

        reply = item if isinstance(item, Reply) else item.reply
        message = self._complete(reply, body)
        await asyncio.sleep(reply.delay)
        while reply.until is not None and not reply.until.is_set():
            await asyncio.sleep(0.01)  # a threading.Event: the test that sets it runs on another loop
        if not stream:
            if isinstance(item, DropMidStream):
                return _disconnect(request)
            if isinstance(item, ErrorMidStream):
                status = next((s for s, t in ERROR_TYPES.items() if t == item.error_type), 500)
                return _json_error(status, error_body(status, item.message), request_id)
            self._commit_thread(body, claim, message, generation)
            return web.json_response(message, headers={"request-id": request_id})

        event_delay = item.event_delay if isinstance(item, SlowStream) else reply.event_delay
        chunks = item.chunks if isinstance(item, SlowStream) else _TEXT_CHUNKS
        events = sse_events(message, chunks, reply.closing_usage)
        cut = item.after_events if isinstance(item, DropMidStream | ErrorMidStream) else len(events)
        response = web.StreamResponse(
            status=200,
            headers={"content-type": "text/event-stream", "cache-control": "no-cache", "request-id": request_id},
        )
        if not isinstance(item, DropMidStream | ErrorMidStream):
            # The message exists once it is generated: a client that goes away while it streams (a worker killed
            # mid-call) still leaves the thread continued, whatever moment the connection loss is noticed.
            self._commit_thread(body, claim, message, generation)
        try:
            await response.prepare(request)
            for i, (event, data) in enumerate(events[:cut]):
                if i and event_delay:
                    await asyncio.sleep(event_delay)
                await response.write(_encode_sse(event, data))
            if isinstance(item, DropMidStream):
                await asyncio.sleep(item.delay)
                return _disconnect(request, response)
            if isinstance(item, ErrorMidStream):
                error = error_body(500, item.message)
                error["error"]["type"] = item.error_type
                await response.write(_encode_sse("error", error))
            await response.write_eof()
        except ConnectionError:
            # The client went away mid-stream; there is nobody left to answer.
            pass
        return response

    def _complete(self, reply: Reply, body: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            self._reply_count += 1
            n = self._reply_count
        message: dict[str, Any] = {
            "id": reply.id or f"msg_fake_{n:03d}",
            "type": "message",
            "role": "assistant",
            "model": reply.model or body.get("model"),
            "content": _fill_tool_ids(reply.content, n),
            "stop_reason": reply.stop_reason,
            "stop_sequence": reply.stop_sequence,
            "usage": dict(reply.usage) if reply.usage is not None else dict(_DEFAULT_USAGE),
        }
        if reply.container is not None:
            message["container"] = copy.deepcopy(reply.container)
        if reply.stop_details is not None:
            message["stop_details"] = copy.deepcopy(reply.stop_details)
        return message

    def _commit_thread(
        self, body: dict[str, Any], claim: _Claim | None, message: dict[str, Any], generation: int
    ) -> None:
        """Store the conversation up to ``message`` if the request created or continued a thread."""
        thread = body.get("thread")
        if not isinstance(thread, dict) or generation != self._generation:
            return
        if _served_by_fallback(message):
            # The server stores no turn a fallback model wrote; the thread stays where it was.
            return
        assistant = {"role": "assistant", "content": copy.deepcopy(message["content"])}
        new_messages = copy.deepcopy(body["messages"])
        with self._lock:
            if claim is None:
                system, tools = copy.deepcopy(body.get("system")), copy.deepcopy(body.get("tools"))
                entry = _Thread([*new_messages, assistant], system, tools)
            else:
                base = claim.base
                base.continued = True
                entry = _Thread([*new_messages, assistant], base.system, base.tools, parent=base)
            self._threads[message["id"]] = entry


def _json_error(
    status: int, body: Mapping[str, Any], request_id: str, headers: Mapping[str, str] | None = None
) -> web.Response:
    return web.json_response(dict(body), status=status, headers={"request-id": request_id, **(headers or {})})


def _disconnect(request: web.Request, response: web.StreamResponse | None = None) -> web.StreamResponse:
    """Close the connection; aiohttp then fails to write the returned response and drops it quietly."""
    transport = request.transport
    if transport is not None:
        # close() rather than abort(): events already written must still reach the client.
        transport.close()
    return response if response is not None else web.Response(status=500)
