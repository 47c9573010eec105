"""The model call: one streamed Messages API request per activity attempt.

Temporal owns retries, so every attempt is visible in the run's history and survives a worker crash: the client is
built with ``max_retries=0``, and each API failure becomes an ``ApplicationError`` that says whether retrying can
help, with the server's ``retry-after`` as the next delay. The rule is the SDK's own (``_base_client._should_retry``):
408, 409, 429, 5xx (529 overloaded included) and connection errors are retried; ``x-should-retry`` overrides the
status; other statuses fail the run with the API's own message. A thread rejection (``thread_not_found`` and the
other replay codes, ``thread_unsupported_request``) is never retried as it is: the run decides how to resend the
turn (``workflows/conversation.py``). Once the stream began, an SSE ``error`` event is
retried when its ``error.type`` is an overload, an API error or a rate limit, and a dropped connection always is.

The reply is streamed (``client.beta.messages.stream``): the attempt heartbeats while it reads, and the reply is
written as it comes to the run's live log in the content store (``activities/live_events.py``), not to its
history. With ``eager_tools``, each ``tool_use`` block is signalled to the run once the model has moved on from it
(as the SDK's ``run_tools_eagerly``), so the tool starts before the reply ends.

The API key and base URL come only from the worker's environment (``ANTHROPIC_API_KEY``, ``ANTHROPIC_BASE_URL``):
nothing secret is ever part of a workflow's input or history.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import email.utils
import json
import logging
import os
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping
from datetime import timedelta
from typing import Any

import anthropic
import httpx2
from opentelemetry import trace
from temporalio import activity
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError

from agent_runner.activities.cut_replies import KeptText, cut_reply_ref, with_prefill
from agent_runner.activities.heartbeats import EVERY, HeartbeatClock
from agent_runner.activities.live_events import EventPublisher
from agent_runner.activities.reply_stream import ReplyStream
from agent_runner.content import Content
from agent_runner.contract.big_params import big_values, resolve_params, resolve_tool, settings_refs
from agent_runner.contract.conversation import THREAD_UNSUPPORTED_CODE, THREAD_UNSUPPORTED_ERROR
from agent_runner.contract.errors import StoreError
from agent_runner.contract.events import BLOCK_START, BLOCK_STOP, TEXT, THINKING, TOOL_INPUT
from agent_runner.contract.lean import lean_output
from agent_runner.contract.params import mcp_token_env
from agent_runner.contract.tool_result_refs import whole_turn
from agent_runner.contract.transcript import escape, is_short
from agent_runner.contract.types import (
    CREATE_MESSAGE_ACTIVITY,
    THREAD_LOST_ERROR,
    THREAD_REPLAY_CODES,
    TOOL_USE_READY_SIGNAL,
    CreateMessageInput,
    CreateMessageOutput,
    ToolUseReady,
)
from agent_runner.store import LiveEntries
from agent_runner.workflows.conversation import build_request, compaction_params
from agent_runner.workflows.fallbacks import api_status, spliced_reply, strip_seams
from agent_runner.workflows.reply import reply_problems

logger = logging.getLogger(__name__)

_RETRYABLE_STATUSES = frozenset({408, 409, 429})

_RETRYABLE_STREAM_ERRORS = frozenset({"overloaded_error", "api_error", "rate_limit_error"})
"""``error.type`` values of an SSE ``error`` event (sent after a 200) that another attempt may get past."""

_WIRE_EVENTS: frozenset[str] = frozenset(
    {
        "message_start",
        "message_delta",
        "message_stop",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
    }
)
"""The Messages API's stream events, as the SDK's stream helper yields them besides its own (``text``, ...)."""

MID_RUN_STOP_REASONS = frozenset({"tool_use", "pause_turn"})
"""Stop reasons of a reply the run goes on from: its long text is stored apart in a lean result (the final reply,
once per run and the run's result, is carried whole up to ``INLINE_LIMIT``)."""


class ClaudeActivities:
    """The model-call activity, holding one Anthropic client per worker.

    Args:
        client_factory: Builds the client. The default reads ``ANTHROPIC_API_KEY`` and ``ANTHROPIC_BASE_URL`` from
            the environment and turns off the SDK's own retries.
        heartbeat_every: The most seconds between heartbeats while a call is in flight (less when its heartbeat
            timeout is under twice this).
    """

    def __init__(
        self,
        client_factory: Callable[[], anthropic.AsyncAnthropic] | None = None,
        *,
        heartbeat_every: float = EVERY,
        content: Content | None = None,
    ) -> None:
        self._client_factory = client_factory or default_client
        self._client: anthropic.AsyncAnthropic | None = None
        self._heartbeat_every = heartbeat_every
        self.content = content or Content()
        """Where transcripts are read from and replies stored (the worker shares it with its tools)."""

    @property
    def client(self) -> anthropic.AsyncAnthropic:
        """The worker's Anthropic client, built on first use so a worker can start without credentials."""
        if self._client is None:
            self._client = self._client_factory()
        return self._client

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """While a worker runs: the client it built is closed when it stops (its connections with it)."""
        try:
            yield
        finally:
            client, self._client = self._client, None
            if client is not None:
                await client.close()

    @activity.defn(name=CREATE_MESSAGE_ACTIVITY)
    async def create_message(self, input: CreateMessageInput) -> CreateMessageOutput | dict[str, Any]:
        """Send one turn to Claude; store the turn's new messages and the reply; return the reply.

        The reply comes back as the response body carried it, except that blocks too big to carry through the
        run's history are stored and replaced by placeholders (``agent_runner/contract/transcript.py``). A turn
        without ``length`` gets the lean result (``agent_runner/contract/lean.py``).
        """
        if not input.run_id:  # runs since issue 14 leave their own id out of the input (workflows/history_size.py)
            input = input.model_copy(update={"run_id": activity.info().workflow_id or ""})
        turn = input.turn if input.turn is None else whole_turn(input.turn)  # results sent compact put back
        if turn is None:
            async with self._publisher(input, activity.info().attempt) as events:
                reply = await self._call(input.request, input, events)
            return CreateMessageOutput(message=reply, attempt=activity.info().attempt)
        settings = turn.settings
        # Blobs stored in the reply's commit below: the run counts on none of them before the call returns.
        big_blocks: dict[str, bytes] = {}
        if settings is None:
            settings = (await self.content.values([turn.settings_ref]))[turn.settings_ref]
        else:
            await self.content.put_value(settings, deferred=big_blocks, short=is_short(turn.settings_ref))
            # Stored apart too, so the run can carry them by reference into its continuation (``big_params.py``).
            for value in big_values(settings["params"], settings["tools"]):
                await self.content.put_value(value, deferred=big_blocks)
        refs = settings_refs(settings["params"], settings["tools"])
        if refs:
            found = await self.content.values(refs)
            settings = {
                **settings,
                "params": resolve_params(settings["params"], found.__getitem__),
                "tools": [resolve_tool(tool, found.__getitem__) for tool in settings["tools"]],
            }
        # A turn that continues a thread sends only what the server does not hold: read only that. (A compaction
        # turn has no `previous_message_id`, so it reads the whole history.)
        lean = turn.length is None  # a lean turn leaves the count of its stored messages to the call
        if turn.length is None:
            stored_count = await self.content.length(turn.head)
        else:
            stored_count = turn.length - len(turn.pending)
        answered = turn.answered if turn.answered is not None else (stored_count if lean else 0)
        skip = answered if turn.threading and turn.previous_message_id else 0
        skip = min(skip, stored_count)
        held = [*(await self.content.messages(turn.head, start=skip)), *turn.pending]
        request = build_request(
            compaction_params(settings["params"]) if turn.compaction is not None else settings["params"],
            settings["tools"],
            await self.content.resolve(held),
            threading=turn.threading,
            answered=answered - skip,
            previous_message_id=turn.previous_message_id,
        )
        if turn.compaction is not None:
            request["compaction"] = turn.compaction
        if turn.strip_seams:
            request["messages"] = strip_seams(request["messages"])
        splice = turn.splice
        prefix: list[dict[str, Any]] = []
        if splice is not None:  # a refusal-fallback hop (workflows/fallbacks.py): it goes on from the refused output
            prefix = await self.content.resolve(splice.prefix)
            if splice.prefill:
                prefill = await self.content.resolve(splice.prefill)
                request["messages"] = [*request["messages"], {"role": "assistant", "content": prefill}]
        # What this attempt keeps for the next if its stream is cut off (`cut_replies.py`), starting with the text a
        # cut-off attempt before it kept (`lead`): only for the run's own turns, not a fallback hop's.
        kept: KeptText | None = None
        if input.continue_cut and splice is None and turn.replay is None:
            kept = KeptText(self.content.put_value, *await self._kept_by_last_attempt())
        lead = kept.lead if kept is not None else []
        attempt = activity.info().attempt + (splice.attempt_base if splice is not None else 0)
        live: LiveEntries | None = None
        wire_usage: dict[str, Any] = {}  # the usage its `message_start` and `message_delta` carried, for a splice
        if turn.replay is not None:
            reply = turn.replay  # a replayed reply streamed already (as the refused hops'): it is only recorded
        else:
            async with self._publisher(input, attempt) as events:
                for index, block in enumerate(prefix):
                    _publish_block(events, index, block)
                try:
                    continued = {**request, "messages": with_prefill(request["messages"], lead)} if lead else request
                    reply = await self._call(
                        continued, input, events, shift=len(prefix), wire_usage=wire_usage, kept=kept
                    )
                except ApplicationError as e:
                    if not (lead and api_status(e) == 400):
                        raise
                    # A model that takes no prefill: the reply starts over, as without `continue_cut_replies`, and
                    # this call's later attempts do too (the empty heartbeat forgets the kept text).
                    logger.warning("Claude's API refused the kept text of a cut-off reply, so it starts over: %s", e)
                    activity.heartbeat()
                    reply = await self._call(request, input, events, shift=len(prefix), wire_usage=wire_usage)
                live = await events.take()  # written below, in the reply's commit
        if splice is not None:
            reply = spliced_reply(reply, splice, wire_usage.get("closing"))
        # A lean run goes on from a `tool_use` or `pause_turn` reply: its long text is stored apart, as a tool result.
        goes_on = lean and reply.get("stop_reason") in MID_RUN_STOP_REASONS
        message = await self.content.offload_reply(reply, deferred=big_blocks, text_limit=goes_on)
        # One commit (one disk sync) for the turn's transcript, the reply, its big blocks, the settings a run's first
        # call carries and the attempt's last live events: all of it is stored before the reply (which names them)
        # is returned.
        await self.content.append_many(
            [
                (turn.head, [*turn.pending, {"role": "assistant", "content": message["content"]}]),
                (input.replies_head, [message]),
            ],
            blobs=big_blocks,
            live=live,
            short=lean,
        )
        # A refusal's opening usage, which a refusal-fallback splice keeps when its output opened the stream.
        opening = wire_usage.get("opening") if reply.get("stop_reason") == "refusal" else None
        if lean:
            return lean_output(message, attempt, opening)
        return CreateMessageOutput(message=message, stored=True, attempt=attempt, opening_usage=opening)

    async def _kept_by_last_attempt(self) -> tuple[list[dict[str, Any]], str | None]:
        """The text the attempt before this one kept when its stream was cut off, and its reference; empty if none."""
        ref = cut_reply_ref(activity.info().heartbeat_details)
        if ref is None:
            return [], None
        try:
            kept = (await self.content.values([ref])).get(ref)
        except (ApplicationError, StoreError) as e:  # the store lost it: this attempt starts the reply over
            logger.warning("The text a cut-off attempt kept (%s) cannot be read, so the reply starts over: %s", ref, e)
            return [], None
        return (kept, ref) if isinstance(kept, list) and kept else ([], None)

    @staticmethod
    async def _keep_cut(error: ApplicationError, kept: KeptText | None, reply: ReplyStream) -> ApplicationError:
        """``error``, after a last heartbeat that names all the text the reply had streamed (``cut_replies.py``).

        Only when the run continues cut replies, Temporal will try again, and there is text to keep.
        """
        if kept is not None and not error.non_retryable:
            details = await kept.details(reply)
            if details:
                activity.heartbeat(*details)
        return error

    def _publisher(self, input: CreateMessageInput, attempt: int) -> EventPublisher:
        """The attempt's live events, written to the run's live log (a fallback hop's attempt counts on)."""
        return EventPublisher(self.content.store, input.run_id, iteration=input.iteration, attempt=attempt)

    async def _call(
        self,
        request: dict[str, Any],
        input: CreateMessageInput,
        events: EventPublisher,
        *,
        shift: int = 0,
        wire_usage: dict[str, Any] | None = None,
        kept: KeptText | None = None,
    ) -> dict[str, Any]:
        """One Messages API request, its stream published to ``events``; the reply's body.

        Args:
            request: The request.
            input: The activity's input.
            events: Where the reply's stream is published.
            shift: The index its first block is published at (a fallback hop's reply follows the spliced prefix).
            wire_usage: Filled with the ``usage`` the reply's ``message_start`` (``opening``) and ``message_delta``
                (``closing``) carried.
            kept: What the attempt keeps for the next if the stream is cut off (the run's ``continue_cut_replies``);
                its ``lead``, the text a cut-off attempt before kept, is what the request ends with: published once
                the stream opens, and the reply's first blocks.
        """
        lead = kept.lead if kept is not None else []
        request = with_worker_credentials(request)
        info = activity.info()
        logger.info(
            "Calling Claude: run=%s iteration=%d attempt=%d model=%s",
            input.run_id,
            input.iteration,
            info.attempt,
            request.get("model"),
        )
        # An explicit timeout (the attempt's own) bounds each read of the stream as well as the connection.
        timeout = info.start_to_close_timeout.total_seconds() if info.start_to_close_timeout else 600.0
        reply = ReplyStream()
        call = asyncio.ensure_future(self._stream(request, input, timeout, events, reply, shift, wire_usage, lead))
        # Heartbeat while the call runs (waiting for the first byte included), so a slow start does not look like a
        # dead worker and a cancellation of the run reaches the call; not before `EVERY` (1.5 s) has passed, so a
        # reply that comes within it costs the server no heartbeat (`heartbeats.py`).
        heartbeats = HeartbeatClock(self._heartbeat_every)
        # With `continue_cut_replies`, each heartbeat names the text kept so far, for an attempt after one that ends
        # without a word (its worker killed, a timeout) to go on from.
        try:
            while not call.done():
                events.tick()
                await asyncio.wait({call}, timeout=min(events.interval, heartbeats.left()))
                if not call.done() and heartbeats.left() == 0:
                    heartbeats.beat(*(await kept.details(reply) if kept is not None else ()))
            body = call.result()
        except anthropic.APIStatusError as e:
            raise await self._keep_cut(api_status_error(e), kept, reply) from e
        except (TypeError, ValueError) as e:
            raise _bad_request(e) from e
        except (anthropic.APIConnectionError, httpx2.TransportError) as e:
            # A transport error mid-stream (the connection dropped, a read timed out) reaches us as httpx's own
            # error, not as the SDK's APIConnectionError: both are worth another attempt.
            error = ApplicationError(
                f"Could not reach Claude's API, or the reply's stream was cut off ({type(e).__name__}: {e}); retrying.",
                type=type(e).__name__,
            )
            raise await self._keep_cut(error, kept, reply) from e
        finally:
            call.cancel()
        if lead:
            body = {**body, "content": [*copy.deepcopy(lead), *(body.get("content") or [])]}
        problems = reply_problems(body)
        if problems:
            # Another attempt is billed and would most likely get the same: fail the run, saying what was wrong.
            raise ApplicationError(
                f"Claude's API sent a reply the runner cannot use: {'; '.join(problems)}. If a proxy sits between "
                "the worker and the API (ANTHROPIC_BASE_URL), check it; then fork the run from its last turn.",
                type="MalformedReply",
                non_retryable=True,
            )
        logger.info(
            "Claude replied: run=%s iteration=%d id=%s stop_reason=%s",
            input.run_id,
            input.iteration,
            body.get("id"),
            body.get("stop_reason"),
        )
        return body

    async def _stream(
        self,
        request: dict[str, Any],
        input: CreateMessageInput,
        timeout: float,
        events: EventPublisher,
        reply: ReplyStream,
        shift: int = 0,
        wire_usage: dict[str, Any] | None = None,
        lead: list[dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        """Read the reply's stream into ``reply``, publishing it as live events; the final message as a response body.

        Its blocks are published from index ``shift`` on (a fallback hop's reply follows the spliced prefix), after
        the ``lead`` a cut-off attempt kept, and the ``usage`` its ``message_start`` and ``message_delta`` carried
        into ``wire_usage`` (``opening``, ``closing``).
        """
        eager = input.eager_tools and bool(input.eager_token)
        closed: dict[str, Any] | None = None  # the last `tool_use` block to close, until the model moves on from it
        fallback = shift > 0  # a fallback hop's reply follows its seam block
        async with (
            self.client.beta.messages.stream(**request, timeout=timeout) as stream,
            contextlib.aclosing(_events(stream)) as wire,
        ):
            reply.betas(stream.response.request.headers.get("anthropic-beta", ""))
            # The kept text shows once the request is accepted (a refused prefill fails the attempt before).
            for block in lead or []:
                _publish_block(events, shift, block)
                shift += 1
            # No heartbeat per event: `_call` writes live events every `FLUSH_INTERVAL` and heartbeats every 1.5 s
            # while the stream is read, which is as good a sign of life and costs nothing per token.
            async for event in wire:
                kind = event.get("type")
                # As the SDK's `EagerToolCalls.track`: a call is ready once the model moved on from it (the next block
                # starts, or the reply stops with `tool_use`), not at its own `content_block_stop`, which a reply cut
                # off by `max_tokens` also sends for a call whose input may be cut short. After a `fallback` block
                # (a refusal handed the reply to another model) no call is ready before the reply ends.
                moved_on = kind == "content_block_start" or (
                    kind == "message_delta" and (event.get("delta") or {}).get("stop_reason") == "tool_use"
                )
                if kind == "content_block_start" and event["content_block"].get("type") == "fallback":
                    fallback, closed, moved_on = True, None, False
                if moved_on and closed is not None:
                    await _tool_use_ready(input, closed)
                    closed = None
                reply.add(event)
                if kind == "message_start":
                    if wire_usage is not None:
                        wire_usage["opening"] = dict(event["message"].get("usage") or {})
                elif kind == "message_delta":
                    if wire_usage is not None:
                        wire_usage["closing"] = dict(event.get("usage") or {})
                elif kind == "content_block_start":
                    block = event["content_block"]
                    # As the wire carried it: the live log is a preview nothing resolves, so data is never escaped.
                    events.publish(BLOCK_START, index=event["index"] + shift, block=block)
                elif kind == "content_block_delta":
                    delta, index = event["delta"], event["index"] + shift
                    if delta.get("type") == "text_delta":
                        events.delta(TEXT, index, delta["text"])
                    elif delta.get("type") == "thinking_delta":
                        events.delta(THINKING, index, delta["thinking"])
                    elif delta.get("type") == "input_json_delta":
                        events.delta(TOOL_INPUT, index, delta["partial_json"])
                elif kind == "content_block_stop":
                    events.publish(BLOCK_STOP, index=event["index"] + shift)
                    block = reply.block(event["index"])
                    if eager and not fallback and block.get("type") == "tool_use":
                        closed = escape(copy.deepcopy(block))  # held, as the reply's own block
        return reply.message()


async def _events(stream: Any) -> AsyncGenerator[dict[str, Any]]:
    """The reply's events as JSON, each as the wire carried it.

    The SDK has sent the request and turned an error status into its exception. Its events are read from the bytes
    and put together without the SDK's per-event models (``reply_stream.py``), unless the SDK traces the call
    (OpenTelemetry is set up): its span records what the SDK's own stream reads, so then they come through that.
    """
    response = stream.response
    if getattr(response.stream, "stream_observer", None) is not None:
        async for event in stream:
            if event.type in _WIRE_EVENTS:  # the stream helper's own events (`text`, ...) repeat these
                yield event.model_dump(mode="json", exclude_unset=True, by_alias=True, warnings=False)
        return
    async for sse in anthropic.AsyncStream.raw_events(response):
        if sse.event == "error":
            raise _sse_error(sse, response)
        if sse.event not in (None, "ping") and sse.data:
            yield sse.json()


def _sse_error(sse: Any, response: Any) -> anthropic.APIStatusError:
    """An ``error`` event mid-stream as the SDK's stream raises it (``api_status_error`` reads its type)."""
    try:
        body: object = sse.json()
    except ValueError:
        body = sse.data
    return anthropic.APIStatusError(str(body) or f"Error code: {response.status_code}", response=response, body=body)


def _publish_block(events: EventPublisher, index: int, block: dict[str, Any]) -> None:
    """A whole block as the live events its stream would have been (a fallback hop's spliced prefix)."""
    kind = block.get("type")
    if kind == "text":
        events.publish(BLOCK_START, index=index, block={**block, "text": ""})
        events.delta(TEXT, index, str(block.get("text", "")))
    elif kind == "thinking":
        events.publish(BLOCK_START, index=index, block={**block, "thinking": ""})
        events.delta(THINKING, index, str(block.get("thinking", "")))
    elif kind == "tool_use":
        events.publish(BLOCK_START, index=index, block={**block, "input": {}})
        events.delta(TOOL_INPUT, index, json.dumps(block.get("input", {})))
    else:
        events.publish(BLOCK_START, index=index, block=block)
    events.publish(BLOCK_STOP, index=index)


async def _tool_use_ready(input: CreateMessageInput, block: dict[str, Any]) -> None:
    """Tell the run a ``tool_use`` block is complete, so it can start the tool before the reply ends."""
    info = activity.info()
    handle = activity.client().get_workflow_handle(info.workflow_id or "")
    ready = ToolUseReady(iteration=input.iteration, attempt=info.attempt, token=input.eager_token, block=block)
    try:
        await handle.signal(TOOL_USE_READY_SIGNAL, ready.model_dump(mode="json"))
    except RPCError as e:
        # The run then starts the tool when the reply arrives, as without eager tools.
        logger.warning("Could not signal a ready tool_use to run %s: %s", info.workflow_id, e.message)


def with_worker_credentials(request: dict[str, Any], environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """``request`` with each MCP server's ``authorization_token`` from this worker's environment, where set.

    Credentials never travel through the run (its input and history): only the request that leaves this process
    carries them.
    """
    env = os.environ if environ is None else environ
    servers = request.get("mcp_servers")
    if not isinstance(servers, list):
        return request
    given = [
        {**server, "authorization_token": env[mcp_token_env(str(server.get("name")))]}
        if isinstance(server, dict) and mcp_token_env(str(server.get("name"))) in env
        else server
        for server in servers
    ]
    return {**request, "mcp_servers": given}


def _bad_request(error: Exception) -> ApplicationError:
    """A request the SDK refused to build: retrying cannot help, so the run fails with the SDK's words."""
    return ApplicationError(
        f"The Anthropic SDK refused to send the request: {error}. Fix the run's input and start it again.",
        type="ModelRequestRejected",
        non_retryable=True,
    )


def default_client(**options: Any) -> anthropic.AsyncAnthropic:
    """The worker's client: credentials and base URL from the environment (or ``options``), no retries of its own.

    Its HTTP goes through aiohttp (the SDK's ``DefaultAioHttpClient``), not httpx: a streamed reply costs the worker
    about a third less CPU (``bench/peer.py``), and the SDK maps aiohttp's errors and timeouts to the httpx errors it
    reports either way. Proxies still come from ``HTTPS_PROXY``/``NO_PROXY``, as with httpx.

    When no OpenTelemetry tracer provider is set up as the client is built (the worker's first model call), nothing
    could record or propagate the SDK's spans, so the client is built without them: it would otherwise work out
    each request's span attributes for a no-op span. Give ``open_telemetry`` to decide otherwise.
    """
    if "open_telemetry" not in options and isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        options["open_telemetry"] = False
    return anthropic.AsyncAnthropic(max_retries=0, http_client=anthropic.DefaultAioHttpClient(), **options)


def api_status_error(error: anthropic.APIStatusError) -> ApplicationError:
    """The ``ApplicationError`` for an API error status: retryable or not, with the server's suggested delay."""
    status = error.status_code
    if status < 300:
        return _stream_error(error)
    details = _error_details(error.body)
    error_code = details.get("error_code")
    if error_code in THREAD_REPLAY_CODES:
        return ApplicationError(str(error_code), type=THREAD_LOST_ERROR, non_retryable=True)
    if error_code == THREAD_UNSUPPORTED_CODE:
        # The run resends the turn without a thread (the SDK's "continue_unthreaded"); when it cannot, it fails
        # with these words, as any rejection.
        return ApplicationError(
            f"Claude's API rejected the request with {status}: {_error_message(error)}. The request cannot be "
            "threaded; start the run with `thread=False`.",
            {"status_code": status, "body": error.body, "request_id": error.request_id},
            type=THREAD_UNSUPPORTED_ERROR,
            non_retryable=True,
        )
    should_retry = error.response.headers.get("x-should-retry")
    if should_retry == "true":
        retryable = True
    elif should_retry == "false":
        retryable = False
    else:
        retryable = status in _RETRYABLE_STATUSES or status >= 500
    api_message = _error_message(error)
    if retryable:
        return ApplicationError(
            f"Claude's API answered {status} ({api_message}); retrying.",
            type=type(error).__name__,
            next_retry_delay=retry_after(error.response.headers),
        )
    return ApplicationError(
        f"Claude's API rejected the request with {status}: {api_message}. Fix the run's input "
        "(or the worker's ANTHROPIC_API_KEY for 401/403) and start the run again.",
        {"status_code": status, "body": error.body, "request_id": error.request_id},
        type="ModelRequestRejected",
        non_retryable=True,
    )


def _stream_error(error: anthropic.APIStatusError) -> ApplicationError:
    """An SSE ``error`` event after the stream began (with status 200): its ``error.type`` says what it was."""
    inner = error.body.get("error") if isinstance(error.body, dict) else None
    error_type = inner.get("type") if isinstance(inner, dict) else None
    api_message = _error_message(error)
    if error_type in _RETRYABLE_STREAM_ERRORS:
        return ApplicationError(f"Claude's API failed mid-stream ({api_message}); retrying.", type=type(error).__name__)
    return ApplicationError(
        f"Claude's API failed mid-stream: {api_message}. Fix the run's input and start the run again.",
        {"status_code": error.status_code, "body": error.body, "request_id": error.request_id},
        type="ModelRequestRejected",
        non_retryable=True,
    )


def retry_after(headers: Any) -> timedelta | None:
    """The delay the server asked for: ``retry-after-ms``, else ``retry-after`` in seconds or as an HTTP date."""
    value = headers.get("retry-after-ms")
    if value is not None:
        try:
            return timedelta(milliseconds=float(value))
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return timedelta(seconds=float(value))
    except ValueError:
        parsed = email.utils.parsedate_tz(value)
        if parsed is None:
            return None
        return timedelta(seconds=max(0.0, email.utils.mktime_tz(parsed) - time.time()))


def _error_details(body: object) -> dict[str, Any]:
    error = body.get("error") if isinstance(body, dict) else None
    details = error.get("details") if isinstance(error, dict) else None
    return details if isinstance(details, dict) else {}


def _error_message(error: anthropic.APIStatusError) -> str:
    body = error.body
    inner = body.get("error") if isinstance(body, dict) else None
    if isinstance(inner, dict) and inner.get("message"):
        return f"{inner.get('type', 'error')}: {inner['message']}"
    return str(error.message)
