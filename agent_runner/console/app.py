"""The console's web application: one page, and the JSON and Server-Sent Events API it reads, on the public client.

``GET /`` and ``GET /runs/<id>`` serve the page (``static/``); its script reads:

- ``GET /api/runs?waiting=approval|step|review|sleep|any&task_queue=Q&limit=N``: runs, newest first, each with what
  it waits for, from Temporal's visibility store (the runs' search attributes; ``listing.py``), and for a run waiting
  for approval the tools it waits for (``tools``, ``null`` when the run did not say within a short time);
- ``GET /api/runs/<id>``: the run's status, its transcript with stored content put back, and the offset its live
  events go on from; for an ended run, read from its history and the content store (``ended.py``), without a worker;
- ``GET /api/runs/<id>/events?after=N``: the live events as a Server-Sent Events stream (each ``id:`` is the event's
  offset, so a reconnecting browser resumes where it was), ``event: end`` once the run finished, ``event: notice``
  when the run cannot go on by itself for now (no worker, or its workflow task keeps failing on the workers);
- ``POST /api/runs/<id>/{approve,deny,inject,retry,stop,fork}``: the steering actions, JSON in and out.

Errors answer ``{"error": "<what to do>"}`` with the status that fits: 400 a bad request, 404 no such run, 409 an
edit (or a fork point) the run refused, 503 no worker to answer (or workers whose code keeps failing the run).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, cast, get_args

from aiohttp import web
from temporalio.client import WorkflowQueryFailedError
from temporalio.contrib.workflow_streams import WorkflowStreamClient
from temporalio.service import RPCError

from agent_runner.client import AgentRunner, Run
from agent_runner.contract.errors import (
    AgentRunError,
    AgentRunnerError,
    EditRejected,
    InvalidRunInput,
    NoWorker,
    RunAlreadyExists,
    RunNotFound,
    RunStuck,
)
from agent_runner.contract.events import RUN_FINISHED
from agent_runner.contract.recorded_results import ToolResultsSource

from .ended import ended_page
from .listing import WAITING_FOR, list_rows, with_approval_tools
from .security import DEFAULT_HOST, check_binding, guard, is_loopback

STATIC = Path(__file__).resolve().parent / "static"

RUNNER = web.AppKey("runner", AgentRunner)
STREAMS: web.AppKey[set[asyncio.Task[Any]]] = web.AppKey("streams")

KEEPALIVE = 15.0
"""Seconds between comments on a quiet event stream, so that proxies keep it open and a closed tab is noticed."""
MAX_LIMIT = 500


class _BadRequest(Exception):
    """A request the API cannot take; the message says what to send instead. Answered as a 400, never raised on."""


def _api(
    handler: Callable[[web.Request], Awaitable[web.StreamResponse]],
) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """The handler, with the runner's errors answered as JSON with a status that fits."""

    @functools.wraps(handler)
    async def answer(request: web.Request) -> web.StreamResponse:
        try:
            return await handler(request)
        except (_BadRequest, InvalidRunInput) as e:
            return web.json_response({"error": str(e)}, status=400)
        except RunNotFound as e:
            return web.json_response({"error": str(e)}, status=404)
        except (EditRejected, RunAlreadyExists) as e:
            return web.json_response({"error": str(e)}, status=409)
        except (NoWorker, RunStuck) as e:
            return web.json_response({"error": str(e)}, status=503)
        except AgentRunnerError as e:
            return web.json_response({"error": str(e)}, status=502)

    return answer


def _run(request: web.Request) -> Run:
    run = request.app[RUNNER].attach(request.match_info["run_id"])
    # An edit waited for while the run waits for a person would hold the request until somebody acts: say so instead.
    run.wait_for_people = False
    return run


async def _body(request: web.Request) -> dict[str, Any]:
    try:
        body = await request.json()
    except ValueError as e:
        raise _BadRequest(f"The body is not JSON: {e}.") from None
    if not isinstance(body, dict):
        raise _BadRequest("The body must be a JSON object.")
    return body


def _field(body: dict[str, Any], name: str, kind: type | tuple[type, ...], *, required: bool = False) -> Any:
    value = body.get(name)
    if value is None:
        if required:
            raise _BadRequest(f"{name!r} is required.")
        return None
    if not isinstance(value, kind) or isinstance(value, bool) and kind is int:
        names = " or ".join(_JSON_NAMES[k] for k in (kind if isinstance(kind, tuple) else (kind,)))
        raise _BadRequest(f"{name!r} must be {names}.")
    return value


_JSON_NAMES = {str: "a string", int: "a whole number", dict: "a JSON object", list: "a list of content blocks"}


# --- Pages ------------------------------------------------------------------------------------------------------


async def page(_request: web.Request) -> web.StreamResponse:
    """The console's one page; its script shows the list or a run, after the address."""
    return web.FileResponse(STATIC / "index.html")


# --- Reading ----------------------------------------------------------------------------------------------------


@_api
async def list_runs(request: web.Request) -> web.StreamResponse:
    """``GET /api/runs``: runs, newest first, with what each waits for, from Temporal's visibility store."""
    waiting = request.query.get("waiting") or None
    if waiting not in (None, "any", *WAITING_FOR.values()):
        raise _BadRequest("waiting must be approval, step, review, sleep or any.")
    try:
        limit = int(request.query.get("limit", "50"))
    except ValueError:
        raise _BadRequest("limit must be a whole number.") from None
    if not 1 <= limit <= MAX_LIMIT:
        raise _BadRequest(f"limit must be between 1 and {MAX_LIMIT}.")
    runner = request.app[RUNNER]
    rows = await list_rows(runner.client, task_queue=request.query.get("task_queue"), waiting=waiting, limit=limit)
    return web.json_response({"runs": await with_approval_tools(runner, rows)})


async def _events_offset(runner: AgentRunner, run_id: str) -> int | None:
    """Where the run's live events go on from, or ``None`` when the run cannot say (then the page shows no stream)."""
    try:
        return int(await WorkflowStreamClient.create(runner.client, run_id).get_offset())
    except (RPCError, WorkflowQueryFailedError):
        return None


@_api
async def get_run(request: web.Request) -> web.StreamResponse:
    """``GET /api/runs/<id>``: status, transcript (stored content put back) and the live events' offset."""
    run = _run(request)
    ended = await run.ended()  # first: it says plainly when the run does not exist
    if ended is not None:  # from its history: a closed run's queries need a worker to replay it
        page = await ended_page(request.app[RUNNER], run.id, ended)
        return web.json_response(page, dumps=_dumps)
    status = await run.status()  # says plainly when no worker answers
    # Read before the transcript, so that no event between the two is missed (one read twice is harmless: the page
    # reads the transcript again after each reply).
    offset = await _events_offset(request.app[RUNNER], run.id)
    transcript = await run.versioned_transcript()
    return web.json_response(
        {
            "id": run.id,
            "status": status.model_dump(mode="json"),
            "waiting": WAITING_FOR.get(status.status),
            "transcript": {"version": transcript.version, "messages": transcript.messages},
            "events_offset": offset,
        },
        dumps=_dumps,
    )


def _dumps(value: Any) -> str:
    # Tool inputs and results are whatever tools made of them: show what cannot be JSON as text rather than fail.
    return json.dumps(value, default=str)


def _sse(event: dict[str, Any] | None, *, kind: str | None = None, id: int | None = None) -> bytes:  # noqa: A002
    lines = []
    if kind is not None:
        lines.append(f"event: {kind}")
    if id is not None:
        lines.append(f"id: {id}")
    lines.append(f"data: {_dumps(event or {})}")
    return ("\n".join(lines) + "\n\n").encode()


async def events(request: web.Request) -> web.StreamResponse:
    """``GET /api/runs/<id>/events``: the run's live events as Server-Sent Events, until it finishes."""
    run = _run(request)
    try:
        await run.task_queue()  # a run that does not exist gets a 404, not an empty stream
    except RunNotFound as e:
        return web.json_response({"error": str(e)}, status=404)
    except AgentRunnerError as e:
        return web.json_response({"error": str(e)}, status=502)
    last = request.headers.get("Last-Event-ID") or None
    try:
        after = int(last) + 1 if last is not None else int(request.query.get("after", "0"))
    except ValueError:
        return web.json_response({"error": "after and Last-Event-ID must be whole numbers."}, status=400)

    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "X-Accel-Buffering": "no"})
    await response.prepare(request)
    queue: asyncio.Queue[bytes | None] = asyncio.Queue()

    # No worker, or workers whose code fails the run's workflow task: the page says so, and the stream goes on.
    run.wait_notice = lambda e: queue.put_nowait(_sse({"notice": str(e)}, kind="notice"))

    async def pump() -> None:
        # In a task of its own: the writer below wakes for keep-alives, and an async generator's step cannot be
        # abandoned half-way and resumed.
        try:
            async for event in run.events(after=after, agents=False):
                await queue.put(_sse({**event.to_wire(), "offset": event.offset}, id=event.offset))
                if event.type == RUN_FINISHED:
                    break
            await queue.put(_sse(None, kind="end"))
        except AgentRunnerError as e:
            await queue.put(_sse({"error": str(e)}, kind="failure"))
        await queue.put(None)

    streams = request.app[STREAMS]
    this = asyncio.current_task()
    assert this is not None
    streams.add(this)
    task = asyncio.create_task(pump())
    try:
        while True:
            try:
                async with asyncio.timeout(KEEPALIVE):
                    chunk = await queue.get()
            except TimeoutError:
                chunk = b": keep-alive\n\n"
            if chunk is None:
                break
            await response.write(chunk)
    except ConnectionResetError:
        pass  # the tab was closed
    finally:
        streams.discard(this)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    return response


# --- Steering ---------------------------------------------------------------------------------------------------


@_api
async def approve(request: web.Request) -> web.StreamResponse:
    """``POST .../approve`` ``{"tool_use_id", "input"?}``: run a waiting tool call, with edited input if given."""
    body = await _body(request)
    tool_use_id = _field(body, "tool_use_id", str, required=True)
    edited = _field(body, "input", dict)
    await _run(request).approve(tool_use_id, input=edited)
    return web.json_response({"ok": True})


@_api
async def deny(request: web.Request) -> web.StreamResponse:
    """``POST .../deny`` ``{"tool_use_id", "reason"?}``: refuse a waiting tool call; Claude sees the reason."""
    body = await _body(request)
    tool_use_id = _field(body, "tool_use_id", str, required=True)
    reason = _field(body, "reason", str) or "The operator denied this tool call."
    await _run(request).deny(tool_use_id, reason)
    return web.json_response({"ok": True})


@_api
async def inject(request: web.Request) -> web.StreamResponse:
    """``POST .../inject`` ``{"content"}``: add a user message before the next turn (accepted, applied then)."""
    body = await _body(request)
    content = _field(body, "content", (str, list), required=True)
    if not content:
        raise _BadRequest("'content' is empty.")
    await _run(request).inject(content, wait=False)
    return web.json_response({"ok": True})


@_api
async def retry(request: web.Request) -> web.StreamResponse:
    """``POST .../retry``: discard Claude's last reply and ask again (accepted now, applied at the next boundary)."""
    await _body(request)
    await _run(request).retry(wait=False)
    return web.json_response({"ok": True})


@_api
async def stop(request: web.Request) -> web.StreamResponse:
    """``POST .../stop`` ``{"reason"?}``: end the run at its next step."""
    body = await _body(request)
    await _run(request).stop(_field(body, "reason", str) or "stopped from the console")
    return web.json_response({"ok": True})


@_api
async def fork(request: web.Request) -> web.StreamResponse:
    """``POST .../fork`` ``{"from_iteration", "id"?, "changes"?, "tool_results"?}``: a new run from that turn.

    A new run from this run's request for that turn; a what-if run with ``changes`` to its input and its tool calls
    answered from this run's record (``Run.fork``).
    """
    body = await _body(request)
    iteration = _field(body, "from_iteration", int, required=True)
    if iteration < 1:
        raise _BadRequest("'from_iteration' counts turns from 1.")
    tool_results = _field(body, "tool_results", str) or "run"
    if tool_results not in get_args(ToolResultsSource):
        raise _BadRequest(f"'tool_results' must be one of {', '.join(map(repr, get_args(ToolResultsSource)))}.")
    try:
        new = await _run(request).fork(
            iteration,
            id=_field(body, "id", str) or None,
            changes=_field(body, "changes", dict),
            tool_results=cast(ToolResultsSource, tool_results),
        )
    except AgentRunError as e:
        if isinstance(e.__cause__, WorkflowQueryFailedError):
            # The run refused the fork point (a turn it does not have, a compaction, one from before it continued as
            # new) and said why: the request's to change, not a failure of the console or the run.
            return web.json_response({"error": str(e.__cause__)}, status=409)
        raise
    return web.json_response({"id": new.id}, status=201)


# --- The application --------------------------------------------------------------------------------------------


async def _close_streams(app: web.Application) -> None:
    # Open event streams would otherwise hold the shutdown for aiohttp's whole grace period.
    streams: set[asyncio.Task[Any]] = app[STREAMS]
    for task in list(streams):
        task.cancel()


def create_app(runner: AgentRunner, *, host: str = DEFAULT_HOST, token: str | None = None) -> web.Application:
    """The console as an aiohttp application, for ``web.AppRunner`` or ``web.run_app``.

    Args:
        runner: The client the console reads and steers runs with.
        host: The address it will be bound to: on a non-loopback one a token is required.
        token: The secret every request must carry; ``None`` for none (a loopback address only).

    Raises:
        ConfigurationError: A non-loopback ``host`` without a token, or a token too short.
    """
    check_binding(host, token)
    app = web.Application(middlewares=[guard(token, loopback=is_loopback(host))])
    app[RUNNER] = runner
    app[STREAMS] = set()
    app.on_shutdown.append(_close_streams)
    app.router.add_get("/", page)
    app.router.add_get("/runs/{run_id}", page)
    app.router.add_static("/static/", STATIC)
    app.router.add_get("/api/runs", list_runs)
    app.router.add_get("/api/runs/{run_id}", get_run)
    app.router.add_get("/api/runs/{run_id}/events", events)
    for action in (approve, deny, inject, retry, stop, fork):
        app.router.add_post(f"/api/runs/{{run_id}}/{action.__name__}", action)
    return app
