"""The loop is the SDK's loop: exact request bodies, stop reasons, iteration counting, tool results."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
import threading
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from anthropic import beta_async_tool
from temporalio import activity
from temporalio.client import Client, WorkflowFailureError
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.exceptions import ApplicationError
from temporalio.worker import ActivityInboundInterceptor, ExecuteActivityInput, Interceptor, Worker

import agent_runner.workflows.tool_calls as tool_calls
import agent_runner.workflows.tool_lookup as tool_lookup
from agent_runner.activities.claude import ClaudeActivities
from agent_runner.activities.tools import tool_options
from agent_runner.client import AgentRunner
from agent_runner.contract.errors import AgentRunnerError, InvalidRunInput, ModelRequestRejected, ToolNotRegistered
from agent_runner.contract.transcript import STORED, canonical, ref_for
from agent_runner.contract.types import CREATE_MESSAGE_ACTIVITY, DESCRIBE_TOOLS_ACTIVITY, PROCESS_RESULTS_ACTIVITY
from agent_runner.plugin import AgentRunnerPlugin
from agent_runner.testing import FakeMessagesAPI, Reply, end_turn, text, tool_use
from tests.conftest import WorkerFactory, anthropic_client_factory, scheduled_activities
from tests.heartbeat_support import Heartbeats
from tests.tools_for_tests import fail_disk, get_time, get_weather, image_tool, refuse, returns_dict

USER = {"role": "user", "content": "What's the weather and time in Paris?"}
GET_WEATHER_DEF = {
    "name": "get_weather",
    "description": "Get the current weather for a city.",
    "input_schema": {
        "additionalProperties": False,
        "properties": {
            "city": {"description": "The city name, e.g. Paris.", "title": "City", "type": "string"},
            "unit": {
                "default": "c",
                "description": 'Temperature unit, "c" or "f".',
                "title": "Unit",
                "type": "string",
            },
        },
        "required": ["city"],
        "type": "object",
    },
}
BASE = {"model": "claude-fake-1", "max_tokens": 1024, "system": "You are terse."}
# Every request streams (the model call reads the reply as SSE), so each body on the wire says so.


def weather_call(tool_id: str = "toolu_A1") -> Reply:
    return Reply(
        content=[text("Let me check."), tool_use(tool_id, "get_weather", {"city": "Paris"})], stop_reason="tool_use"
    )


async def test_one_tool_call_full_history_sends_the_sdk_bodies(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """thread=False: each turn resends the whole history, with the tool result right after the reply."""
    fake_api.script(weather_call(), end_turn("Sunny, 21C."))
    async with worker(get_weather):
        run = await runner.start(**BASE, messages=[USER], tools=[get_weather], thread=False)
        final = await run.until_done()
    assert final.content[0].type == "text" and final.content[0].text == "Sunny, 21C."
    assert fake_api.bodies() == [
        {**BASE, "messages": [USER], "tools": [GET_WEATHER_DEF], "stream": True},
        {
            **BASE,
            "stream": True,
            "messages": [
                USER,
                {
                    "role": "assistant",
                    "content": [
                        {"type": "text", "text": "Let me check."},
                        {"type": "tool_use", "id": "toolu_A1", "name": "get_weather", "input": {"city": "Paris"}},
                    ],
                },
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": "toolu_A1", "content": "sunny, 21C in Paris"}],
                },
            ],
            "tools": [GET_WEATHER_DEF],
        },
    ]


async def test_thread_mode_creates_then_continues_with_only_new_messages(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """The default: `create` with the history, then `continue` with only the tool results, no system or tools."""
    fake_api.script(weather_call(), end_turn("Sunny."))
    async with worker(get_weather):
        run = await runner.start(**BASE, messages=[USER], tools=[get_weather])
        await run.until_done()
        transcript = await run.transcript()
    first, second = fake_api.requests
    assert first.body == {
        **BASE,
        "messages": [USER],
        "tools": [GET_WEATHER_DEF],
        "thread": {"type": "create"},
        "stream": True,
    }
    assert first.headers["anthropic-beta"] == "message-threads-2026-08-12"
    assert second.body == {
        "model": "claude-fake-1",
        "max_tokens": 1024,
        "stream": True,
        "messages": [
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "toolu_A1", "content": "sunny, 21C in Paris"}],
            }
        ],
        "thread": {"type": "continue", "previous_message_id": "msg_fake_001"},
    }
    assert transcript == fake_api.thread_messages("msg_fake_002")


async def test_parallel_tool_uses_run_concurrently_and_answer_in_block_order(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """Two tools that each wait for the other can only finish if they run at the same time."""
    barrier = asyncio.Barrier(2)

    @beta_async_tool
    async def meet(who: str) -> str:
        """Wait until both calls have started.

        Args:
            who: The caller.
        """
        async with asyncio.timeout(10):
            await barrier.wait()
        return f"{who} met"

    fake_api.script(
        Reply(
            content=[tool_use("toolu_B1", "meet", {"who": "first"}), tool_use("toolu_B2", "meet", {"who": "second"})],
            stop_reason="tool_use",
        ),
        end_turn("Both met."),
    )
    async with worker(meet):
        run = await runner.start(**BASE, messages=[USER], tools=[meet], thread=False)
        await run.until_done()
    assert fake_api.bodies()[1]["messages"][2] == {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "toolu_B1", "content": "first met"},
            {"type": "tool_result", "tool_use_id": "toolu_B2", "content": "second met"},
        ],
    }


@pytest.mark.parametrize("stop_reason", ["max_tokens", "end_turn", "stop_sequence", "refusal", None, "brand_new"])
async def test_terminal_stop_reasons_never_run_the_replys_tools(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, stop_reason: str | None
) -> None:
    """Tools in a reply that did not stop for `tool_use` would fire side effects the model never confirmed."""
    fake_api.script(Reply(content=[tool_use("toolu_X", "fail_disk", {"path": "/x"})], stop_reason=stop_reason))
    async with worker(fail_disk):
        run = await runner.start(**BASE, messages=[USER], tools=[fail_disk])
        result = await run.result()
        transcript = await run.transcript()
    assert len(fake_api.requests) == 1
    assert result.status == "completed" and result.stop_reason == stop_reason and result.iterations == 1
    # On a thread a refused turn stays out of the history, as in the SDK (tests/test_parity.py); it is still the result.
    assert transcript[-1]["role"] == ("user" if stop_reason == "refusal" else "assistant")


async def test_pause_turn_resumes_with_empty_messages_and_counts_as_an_iteration(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    fake_api.script(Reply(content=[text("searching")], stop_reason="pause_turn"), end_turn("found"))
    async with worker():
        run = await runner.start(**BASE, messages=[USER], max_iterations=2)
        result = await run.result()
    assert result.iterations == 2 and result.status == "completed"
    assert fake_api.bodies()[1] == {
        "model": "claude-fake-1",
        "max_tokens": 1024,
        "stream": True,
        "messages": [],
        "thread": {"type": "continue", "previous_message_id": "msg_fake_001"},
    }


async def test_pause_turn_without_thread_resends_history_ending_with_the_paused_reply(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    fake_api.script(Reply(content=[text("searching")], stop_reason="pause_turn"), end_turn("found"))
    async with worker():
        run = await runner.start(**BASE, messages=[USER], thread=False)
        await run.until_done()
    assert fake_api.bodies()[1]["messages"] == [USER, {"role": "assistant", "content": [text("searching")]}]


async def test_max_iterations_counts_replies_and_still_runs_the_last_replys_tools(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """As the SDK: exactly 2 requests, the second reply's tool runs, the final message is that tool_use reply."""
    fake_api.script(weather_call("toolu_1"), weather_call("toolu_2"))
    async with worker(get_weather):
        run = await runner.start(**BASE, messages=[USER], tools=[get_weather], max_iterations=2)
        result = await run.result()
        final = await run.until_done()
        transcript = await run.transcript()
    assert len(fake_api.requests) == 2
    assert result.status == "max_iterations" and result.iterations == 2 and result.stop_reason == "tool_use"
    assert final.id == "msg_fake_002"
    assert transcript[-1] == {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "toolu_2", "content": "sunny, 21C in Paris"}],
    }


async def test_tool_errors_become_is_error_results_the_model_can_act_on(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, caplog: pytest.LogCaptureFixture
) -> None:
    fake_api.script(
        Reply(
            content=[
                tool_use("toolu_E1", "fail_disk", {"path": "/data"}),
                tool_use("toolu_E2", "refuse", {"reason": "policy"}),
                tool_use("toolu_E3", "no_such_tool", {}),
                tool_use("toolu_E4", "get_weather", {"town": "Paris"}),
                tool_use("toolu_E5", "returns_dict", {"key": "a"}),
                tool_use("toolu_E6", "image_tool", {"label": "chart"}),
            ],
            stop_reason="tool_use",
        ),
        end_turn("ok"),
    )
    async with worker(fail_disk, refuse, get_weather, returns_dict, image_tool):
        run = await runner.start(
            **BASE,
            messages=[USER],
            tools=[fail_disk, refuse, get_weather, returns_dict, image_tool],
            thread=False,
        )
        await run.until_done()
    results = fake_api.bodies()[1]["messages"][-1]["content"]
    assert results == [
        {
            "type": "tool_result",
            "tool_use_id": "toolu_E1",
            "content": "ValueError('boom: disk full at /data')",
            "is_error": True,
        },
        {
            "type": "tool_result",
            "tool_use_id": "toolu_E2",
            "content": [{"type": "text", "text": "refused: policy"}],
            "is_error": True,
        },
        {
            "type": "tool_result",
            "tool_use_id": "toolu_E3",
            "content": "Error: Tool 'no_such_tool' not found",
            "is_error": True,
        },
        {
            "type": "tool_result",
            "tool_use_id": "toolu_E4",
            "content": "ValueError('Invalid arguments for function get_weather')\n"
            "- city: Missing required argument\n"
            "- town: Unexpected keyword argument (got 'Paris')",
            "is_error": True,
        },
        {
            "type": "tool_result",
            "tool_use_id": "toolu_E5",
            "content": "Error: Tool 'returns_dict' returned dict; a tool must return a string or a list of content "
            "blocks (text, image, document). Nothing else was sent.",
            "is_error": True,
        },
        {
            "type": "tool_result",
            "tool_use_id": "toolu_E6",
            "content": [
                {"type": "text", "text": "chart"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
            ],
        },
    ]
    tracebacks = [
        r for r in caplog.records if r.getMessage().startswith("Error occurred while calling tool: fail_disk")
    ]
    assert len(tracebacks) == 1 and tracebacks[0].exc_info is not None


async def test_long_exception_text_is_cut_at_4096_characters(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    fake_api.script(
        Reply(content=[tool_use("toolu_L", "fail_disk", {"path": "x" * 5000})], stop_reason="tool_use"),
        end_turn("ok"),
    )
    async with worker(fail_disk):
        run = await runner.start(**BASE, messages=[USER], tools=[fail_disk], thread=False)
        await run.until_done()
    content = fake_api.bodies()[1]["messages"][-1]["content"][0]["content"]
    assert content == repr(ValueError(f"boom: disk full at {'x' * 5000}"))[:4096]


async def test_raw_tool_definitions_are_sent_never_executed(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    search = {"type": "web_search_20250305", "name": "web_search"}
    fake_api.script(
        Reply(content=[tool_use("toolu_S", "web_search", {"query": "x"})], stop_reason="tool_use"), end_turn("ok")
    )
    async with worker():
        run = await runner.start(**BASE, messages=[USER], tools=[search], thread=False)
        await run.until_done()
    first, second = fake_api.bodies()
    assert first["tools"] == [search]
    assert second["messages"][-1]["content"] == [
        {
            "type": "tool_result",
            "tool_use_id": "toolu_S",
            "content": "Error: Tool 'web_search' not found",
            "is_error": True,
        }
    ]


async def test_container_id_is_carried_into_later_requests(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    fake_api.script(
        Reply(
            content=[tool_use("toolu_C", "get_weather", {"city": "Oslo"})],
            stop_reason="tool_use",
            container={"id": "container_123", "expires_at": "2026-12-01T00:00:00Z"},
        ),
        end_turn("ok"),
    )
    async with worker(get_weather):
        run = await runner.start(**BASE, messages=[USER], tools=[get_weather], thread=False)
        await run.until_done()
    assert "container" not in fake_api.bodies()[0]
    assert fake_api.bodies()[1]["container"] == "container_123"


async def test_thread_lost_replays_the_full_history_on_a_new_thread(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    from agent_runner.testing import ThreadNotFound

    fake_api.script(weather_call(), ThreadNotFound(), end_turn("ok"))
    async with worker(get_weather):
        run = await runner.start(**BASE, messages=[USER], tools=[get_weather])
        await run.until_done()
    bodies = fake_api.bodies()
    assert [b["thread"] for b in bodies] == [
        {"type": "create"},
        {"type": "continue", "previous_message_id": "msg_fake_001"},
        {"type": "create"},
    ]
    assert bodies[2] == {
        **BASE,
        "stream": True,
        "tools": [GET_WEATHER_DEF],
        "thread": {"type": "create"},
        "messages": [
            USER,
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Let me check."},
                    {"type": "tool_use", "id": "toolu_A1", "name": "get_weather", "input": {"city": "Paris"}},
                ],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "toolu_A1", "content": "sunny, 21C in Paris"}],
            },
        ],
    }


async def test_rejected_request_fails_the_run_with_the_apis_message(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    from agent_runner.testing import bad_request

    fake_api.script(bad_request("max_tokens: 999999 > 64000, the maximum for this model"))
    async with worker():
        run = await runner.start(**BASE, messages=[USER])
        with pytest.raises(ModelRequestRejected) as e:
            await run.until_done()
    assert "400" in str(e.value)
    assert "max_tokens: 999999 > 64000, the maximum for this model" in str(e.value)
    assert len(fake_api.requests) == 1


async def test_retryable_statuses_are_retried_by_temporal_honouring_retry_after(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    from agent_runner.testing import Disconnect, overloaded, rate_limited, server_error

    fake_api.script(rate_limited(0.2), overloaded(), server_error(), Disconnect(), end_turn("finally"))
    async with worker():
        run = await runner.start(
            **BASE, messages=[USER], model_activity={"initial_interval": "PT0.05S", "maximum_interval": "PT0.1S"}
        )
        final = await run.until_done()
    assert final.content[0].type == "text" and final.content[0].text == "finally"
    assert len(fake_api.requests) == 5
    assert all(r.body == fake_api.requests[0].body for r in fake_api.requests)
    assert all(r.headers["x-stainless-retry-count"] == "0" for r in fake_api.requests)


async def gives_up(runner: AgentRunner, worker: WorkerFactory, model_activity: dict[str, Any]) -> tuple[str, str]:
    """The failure's type and what it says, of a run (its retries quick) whose model call spends its
    ``model_activity`` attempts: the type is the last attempt's own (the client sees an ``AgentRunError``)."""
    async with worker():
        run = await runner.start(
            **BASE,
            messages=[USER],
            model_activity={**model_activity, "initial_interval": "PT0.05S", "maximum_interval": "PT0.1S"},
        )
        with pytest.raises(AgentRunnerError) as e:
            await run.until_done()
        ended = await run.ended()
        with pytest.raises(WorkflowFailureError) as failure:
            await run.handle.result()
    assert (type(e.value).__name__, ended) == ("AgentRunError", "failed")
    assert isinstance(failure.value.cause, ApplicationError)
    return failure.value.cause.type or "", str(e.value)


async def test_a_model_call_that_keeps_failing_is_sent_only_maximum_attempts_times_then_fails_the_run(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """Each attempt is billed: an overloaded API gets exactly ``maximum_attempts`` requests, then the run fails."""
    from agent_runner.testing import overloaded

    fake_api.script(overloaded(), overloaded(), overloaded(), end_turn("never sent"))
    assert await gives_up(runner, worker, {"maximum_attempts": 3}) == (
        "OverloadedError",
        "agent_runner.create_message gave up: its maximum_attempts were spent, and the last attempt failed "
        "(OverloadedError: Claude's API answered 529 (overloaded_error: Overloaded)). Try again later, or give it "
        "more attempts or time (the run's `model_activity`).",
    )
    assert len(fake_api.requests) == 3


async def test_a_model_call_past_its_timeout_is_sent_only_maximum_attempts_times_then_fails_the_run(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """A call that never answers within ``start_to_close_timeout`` is not re-sent without limit."""
    slow = Reply(content=[text("too late")], delay=3.0)
    fake_api.script(slow, slow, end_turn("never sent"))
    assert await gives_up(runner, worker, {"maximum_attempts": 2, "start_to_close_timeout": "PT1S"}) == (
        "AgentRunError",
        "agent_runner.create_message gave up: its maximum_attempts were spent, and the last attempt failed (it "
        "passed its start_to_close timeout). Try again later, or give it more attempts or time (the run's "
        "`model_activity`).",
    )
    assert len(fake_api.requests) == 2


async def test_a_model_call_is_retried_under_the_runs_model_activity_options(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """Temporal retries the model call with the run's ``model_activity`` intervals and attempts: its history says so."""
    fake_api.script(end_turn("Hi."))
    async with worker():
        options = {"initial_interval": "PT2S", "maximum_interval": "PT7S", "maximum_attempts": 4}
        run = await runner.start(**BASE, messages=[USER], model_activity=options)
        await run.until_done()
        history = await run.handle.fetch_history()
    assert [
        (p.initial_interval.ToTimedelta(), p.maximum_interval.ToTimedelta(), p.maximum_attempts)
        for p in (s.retry_policy for s in scheduled_activities(history, CREATE_MESSAGE_ACTIVITY))
    ] == [(timedelta(seconds=2), timedelta(seconds=7), 4)]


class AlwaysFails(Interceptor):
    """Fails every attempt of one activity before it runs, as a worker whose store is away would, and counts them.

    Args:
        activity_type: The activity.
        only: Fail only the calls whose input this is true of.
        hang: Hang instead of failing, past any timeout of the attempt.
    """

    def __init__(self, activity_type: str, only: Callable[[Any], bool] = lambda _: True, hang: bool = False) -> None:
        self.activity_type = activity_type
        self.only = only
        self.hang = hang
        self.attempts: list[int] = []

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        log = self

        class Inbound(ActivityInboundInterceptor):
            async def execute_activity(self, input: ExecuteActivityInput) -> Any:
                info = activity.info()
                if info.activity_type != log.activity_type or not log.only(input.args[0]):
                    return await super().execute_activity(input)
                log.attempts.append(info.attempt)
                if log.hang:
                    await asyncio.sleep(60)
                raise RuntimeError("the content store is unreachable")

        return Inbound(next)


@pytest.mark.slow
@pytest.mark.parametrize("activity_type", [DESCRIBE_TOOLS_ACTIVITY, PROCESS_RESULTS_ACTIVITY])
async def test_a_lookup_or_result_hook_that_keeps_failing_is_tried_10_times_then_fails_the_run_saying_so(
    activity_type: str,
    client: Client,
    runner: AgentRunner,
    fake_api: FakeMessagesAPI,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The runner's own activities (the tool lookup, a local activity; the result hooks) never retry for ever: after
    their 10 attempts the run fails saying which gave up and why, and that no option of the run's would help."""
    quick = {"initial_interval": timedelta(milliseconds=10), "maximum_interval": timedelta(milliseconds=20)}
    monkeypatch.setattr(tool_lookup, "RETRY", dataclasses.replace(tool_lookup.RETRY, **quick))
    monkeypatch.setattr(tool_calls, "HOOKS_RETRY", dataclasses.replace(tool_calls.HOOKS_RETRY, **quick))
    failing = AlwaysFails(activity_type)
    fake_api.script(Reply(content=[tool_use("toolu_W", "get_weather", {"city": "Paris"})], stop_reason="tool_use"))
    plugin = AgentRunnerPlugin(tools=[get_weather], claude=ClaudeActivities(anthropic_client_factory(fake_api)))
    async with Worker(client, task_queue=runner.task_queue, plugins=[plugin], interceptors=[failing]):
        run = await runner.start(**BASE, messages=[USER], tools=[get_weather], result_hooks=["cache_last_tool_result"])
        with pytest.raises(AgentRunnerError) as e:
            await run.until_done()
        ended = await run.ended()
    assert failing.attempts == list(range(1, 11))
    assert (type(e.value).__name__, ended) == ("AgentRunError", "failed")
    assert str(e.value) == (
        f"{activity_type} gave up: its maximum_attempts were spent, and the last attempt failed (RuntimeError: the "
        "content store is unreachable). Fix what it says on the workers (their logs have each attempt), then start "
        "the run again or fork it."
    )
    assert len(fake_api.requests) == (0 if activity_type == DESCRIBE_TOOLS_ACTIVITY else 1)


async def test_a_lookup_whose_every_attempt_times_out_fails_the_run_saying_its_attempts_were_spent(
    client: Client, runner: AgentRunner, fake_api: FakeMessagesAPI, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tool lookup (a local activity) bounds each attempt, not all of them: when every attempt passes its
    timeout, its attempts were spent, and the run says so, and what the last one did."""
    quick = {"initial_interval": timedelta(milliseconds=10), "maximum_interval": timedelta(milliseconds=20)}
    monkeypatch.setattr(tool_lookup, "RETRY", dataclasses.replace(tool_lookup.RETRY, maximum_attempts=3, **quick))
    monkeypatch.setattr(tool_lookup, "TIMEOUT", timedelta(milliseconds=300))
    hanging = AlwaysFails(DESCRIBE_TOOLS_ACTIVITY, hang=True)
    plugin = AgentRunnerPlugin(tools=[get_weather], claude=ClaudeActivities(anthropic_client_factory(fake_api)))
    async with Worker(client, task_queue=runner.task_queue, plugins=[plugin], interceptors=[hanging]):
        run = await runner.start(**BASE, messages=[USER], tools=[get_weather])
        with pytest.raises(AgentRunnerError) as e:
            await run.until_done()
    assert hanging.attempts == [1, 2, 3]
    assert str(e.value) == (
        f"{DESCRIBE_TOOLS_ACTIVITY} gave up: its maximum_attempts were spent, and the last attempt failed (it passed "
        "its start_to_close timeout). Fix what it says on the workers (their logs have each attempt), then start the "
        "run again or fork it."
    )
    assert fake_api.requests == []


async def test_invalid_input_fails_the_run_at_once_naming_each_problem(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    async with worker():
        handle = await runner.client.start_workflow(
            "AgentRun",
            {"max_tokens": 0, "messages": [{"role": "bot", "content": 3}], "temperture": 1},
            id="bad-input",
            task_queue=runner.task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.TERMINATE_EXISTING,
        )
        with pytest.raises(InvalidRunInput) as e:
            await runner.attach(handle.id).until_done()
    message = str(e.value)
    assert "Unknown field `temperture`" in message
    assert "Missing required field `model`" in message
    assert "`max_tokens` must be a positive integer" in message
    assert "`messages[0]`.role must be one of ['user', 'assistant', 'system'], got 'bot'" in message
    assert fake_api.requests == []


async def test_a_tool_no_worker_registered_fails_the_run_before_any_request(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    async with worker(get_weather):
        run = await runner.start(**BASE, messages=[USER], tools=["get_weather", "launch_rocket"])
        with pytest.raises(ToolNotRegistered, match="registered 'launch_rocket'"):
            await run.until_done()
    assert fake_api.requests == []


async def test_the_api_key_never_reaches_workflow_history(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    fake_api.script(weather_call(), end_turn("ok"))
    async with worker(get_weather, get_time):
        run = await runner.start(**BASE, messages=[USER], tools=[get_weather, get_time])
        await run.until_done()
    assert fake_api.requests[0].headers["authorization"] == "Bearer test-key"
    history = json.dumps((await run.handle.fetch_history()).to_json_dict())
    assert "test-key" not in history


async def test_replies_stream_to_an_attached_client_from_any_iteration(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    fake_api.script(weather_call("toolu_1"), weather_call("toolu_2"), end_turn("done"))
    async with worker(get_weather):
        run = await runner.start(**BASE, messages=[USER], tools=[get_weather])
        ids = [m.id async for m in run]
        later = [m.id async for m in runner.attach(run.id).messages(from_iteration=2)]
    assert ids == ["msg_fake_001", "msg_fake_002", "msg_fake_003"]
    assert later == ["msg_fake_002", "msg_fake_003"]


async def test_a_model_call_longer_than_the_heartbeat_timeout_is_kept_alive(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """The activity heartbeats while Claude takes 3 s, so a 1 s heartbeat timeout never fires."""
    fake_api.script(Reply(content=[text("slow")], delay=3.0))
    async with worker():
        run = await runner.start(**BASE, messages=[USER], model_activity={"heartbeat_timeout": "PT1S"})
        final = await run.until_done()
    assert final.id == "msg_fake_001"
    assert len(fake_api.requests) == 1


async def test_a_model_call_heartbeats_once_it_has_lasted_1_5_s_and_a_quicker_one_never(
    client: Client, runner: AgentRunner, fake_api: FakeMessagesAPI
) -> None:
    """A reply within 1.5 s costs no heartbeat (a write on the server less per iteration, the most under load); a
    slower one heartbeats every 1.5 s, its first after 1.5 s (half the 3 s heartbeat timeout)."""
    log = Heartbeats()
    fake_api.script(Reply(content=[text("quick")], delay=0.8), Reply(content=[text("slow")], delay=3.4))
    plugin = AgentRunnerPlugin(claude=ClaudeActivities(anthropic_client_factory(fake_api)))
    async with Worker(client, task_queue=runner.task_queue, plugins=[plugin], interceptors=[log]):
        for _ in range(2):
            await (await runner.start(**BASE, messages=[USER])).until_done()
    quick, slow = (beats[1:] for beats in log.beats)
    assert quick == []
    assert 1 <= len(slow) <= 2, slow
    assert slow[0] >= 1.49, slow
    assert all(later - earlier >= 1.45 for earlier, later in itertools.pairwise(slow)), slow


async def test_a_model_call_its_worker_began_late_heartbeats_as_it_begins(
    client: Client, runner: AgentRunner, fake_api: FakeMessagesAPI
) -> None:
    """The heartbeat timeout runs from the attempt's start on the server, so an attempt a busy worker began 2 s late
    heartbeats as it begins, not 1.5 s after (past the 3 s timeout), and is not timed out and sent again."""
    log = Heartbeats(begin_late=2.0)
    fake_api.script(Reply(content=[text("late")], delay=1.5))
    plugin = AgentRunnerPlugin(claude=ClaudeActivities(anthropic_client_factory(fake_api)))
    async with Worker(client, task_queue=runner.task_queue, plugins=[plugin], interceptors=[log]):
        await (await runner.start(**BASE, messages=[USER])).until_done()
    ((_, *beats),) = log.beats
    assert 2.0 <= beats[0] < 2.6, beats
    assert len(fake_api.requests) == 1


async def test_a_reply_with_big_blocks_is_stored_whole_and_sent_back_whole(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """A reply's blocks too big for history are stored in the model call's one commit, and come back exactly."""
    long_text, city = "word " * 2000, "P" * 6000
    reply = Reply(
        content=[text(long_text), tool_use("toolu_big", "get_weather", {"city": city})], stop_reason="tool_use"
    )
    fake_api.script(reply, end_turn("done"))
    async with worker(get_weather):
        run = await runner.start(**BASE, messages=[USER], tools=[get_weather], thread=False)
        await run.until_done()
    assert fake_api.bodies()[1]["messages"][1:] == [
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": long_text},
                {"type": "tool_use", "id": "toolu_big", "name": "get_weather", "input": {"city": city}},
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_big", "content": f"sunny, 21C in {city}"}],
        },
    ]


def calls_in_activities(monkeypatch: pytest.MonkeyPatch, store: Any, *names: str) -> list[tuple[str, str]]:
    """Each call of the methods ``names`` of ``store``'s class (every worker's store) made inside an activity, in order.

    Returns:
        The list the calls go to, as ``(activity type, method)``.
    """
    calls: list[tuple[str, str]] = []

    def counted(name: str) -> Callable[..., Any]:
        method = getattr(type(store), name)

        async def call(self: Any, *args: Any, **kwargs: Any) -> Any:
            if activity.in_activity():
                calls.append((activity.info().activity_type, name))
            return await method(self, *args, **kwargs)

        return call

    for name in names:
        monkeypatch.setattr(type(store), name, counted(name))
    return calls


@pytest.mark.parametrize("started_by", ["client", "stock-cli-json"])
async def test_a_model_call_writes_the_store_once_the_settings_a_runs_first_call_carries_included(
    client: Client,
    runner: AgentRunner,
    worker: WorkerFactory,
    fake_api: FakeMessagesAPI,
    monkeypatch: pytest.MonkeyPatch,
    started_by: str,
) -> None:
    """One commit (one disk sync) per model call: the run's first also stores its settings and their big values.

    (Our client stores a big value as it starts the run; a run started with JSON leaves that to the first call.)
    """
    store = runner.content.store
    writes = calls_in_activities(monkeypatch, store, "put", "put_nodes", "commit")
    system = "Be terse. " * 7_000  # over 64 KB: held by reference once the run has stored it (`big_params.py`)
    fake_api.script(Reply([tool_use("toolu_1", "get_weather", {"city": "Paris"})], "tool_use"), end_turn("Sunny."))
    async with worker(get_weather):
        if started_by == "client":
            run = await runner.start(**{**BASE, "system": system}, messages=[USER], tools=[get_weather], thread=False)
        else:
            handle = await client.start_workflow(
                "AgentRun",
                {**BASE, "system": system, "messages": [USER], "tools": ["get_weather"], "thread": False},
                id=f"json-{started_by}-{uuid.uuid4()}",
                task_queue=runner.task_queue,
            )
            run = runner.attach(handle.id)
        await run.until_done()
    assert [write for write in writes if write[0] == CREATE_MESSAGE_ACTIVITY] == [
        (CREATE_MESSAGE_ACTIVITY, "commit"),
        (CREATE_MESSAGE_ACTIVITY, "commit"),
    ]
    # Both are in the store itself, not only in a worker's memory, once the first call has returned.
    first = scheduled_activities(await run.handle.fetch_history(), CREATE_MESSAGE_ACTIVITY)[0]
    (call,) = await client.data_converter.decode(first.input.payloads)
    settings, settings_ref, system_ref = (
        call["turn"]["settings"],
        call["turn"]["settings_ref"],
        ref_for(canonical(system)),
    )
    assert settings["params"]["system"] == (system if started_by == "stock-cli-json" else {STORED: system_ref})
    stored = await store.get([settings_ref, system_ref])
    assert stored == {settings_ref: canonical(settings), system_ref: canonical(system)}
    assert [body["system"] for body in fake_api.bodies()] == [system, system]


GATHERED: list[asyncio.Event] = []
RUNS_AT_ONCE = 12


@beta_async_tool
async def gather(n: int) -> str:
    """Wait until every run of the test has called this.

    Args:
        n: A number.
    """
    GATHERED.append(asyncio.Event())
    if len(GATHERED) == RUNS_AT_ONCE:
        for event in GATHERED:
            event.set()
    await GATHERED[-1].wait()
    return f"gathered {n}"


async def test_a_worker_reads_no_transcript_back_for_the_runs_it_keeps_moving(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every run's second model call finds its transcript in the worker's memory, all runs' first calls between.

    Twelve runs hold each other's tool call until all twelve have made their first model call: a worker that
    remembered only a few transcripts would read the others back from the store.
    """
    GATHERED.clear()
    chain_reads = calls_in_activities(monkeypatch, runner.content.store, "chain")

    def claude(body: dict[str, Any]) -> Reply:
        last = body["messages"][-1]["content"]
        if isinstance(last, list) and last[-1]["type"] == "tool_result":
            return end_turn(f"Done: {last[-1]['content']}.")
        return Reply([tool_use("toolu_1", "gather", {"n": 1})], "tool_use")

    fake_api.responder = claude
    async with worker(gather):
        # Each run its own transcript: runs of the same messages would share one (content-addressed) chain.
        asks = [{"role": "user", "content": f"Gather, {i}."} for i in range(RUNS_AT_ONCE)]
        runs = [await runner.start(**BASE, messages=[ask], tools=[gather], thread=False) for ask in asks]
        results = [await run.until_done() for run in runs]
    assert [[block.to_dict() for block in r.content] for r in results] == [[text("Done: gathered 1.")]] * RUNS_AT_ONCE
    assert len(fake_api.requests) == 2 * RUNS_AT_ONCE
    assert chain_reads == []


BREWS: list[int] = []


@tool_options(heartbeat_timeout=timedelta(seconds=1))
@beta_async_tool
async def brew(minutes: int) -> str:
    """Brew tea, for 2.5 s: longer than the tool's 1 s heartbeat timeout.

    Args:
        minutes: How long, as the model asks.
    """
    BREWS.append(minutes)
    await asyncio.sleep(2.5)
    return f"brewed for {minutes} min"


async def test_a_tool_longer_than_its_short_heartbeat_timeout_is_kept_alive(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """The worker heartbeats for the tool at least twice per heartbeat timeout, its first after a wait, not at once."""
    BREWS.clear()
    fake_api.script(
        Reply(content=[tool_use("toolu_T", "brew", {"minutes": 3})], stop_reason="tool_use"), end_turn("ok")
    )
    async with worker(brew):
        run = await runner.start(**BASE, messages=[USER], tools=[brew])
        await run.until_done()
    assert BREWS == [3]  # one attempt
    assert fake_api.bodies()[1]["messages"][-1] == {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "toolu_T", "content": "brewed for 3 min"}],
    }


STEEPS: list[int] = []


@tool_options(heartbeat_timeout=timedelta(seconds=2))
@beta_async_tool
async def steep(minutes: int) -> str:
    """Steep tea, for 2 s: as long as the tool's heartbeat timeout.

    Args:
        minutes: How long, as the model asks.
    """
    STEEPS.append(minutes)
    await asyncio.sleep(2.0)
    return f"steeped for {minutes} min"


async def test_a_tool_its_worker_began_late_heartbeats_at_once_and_runs_once(
    client: Client, runner: AgentRunner, fake_api: FakeMessagesAPI
) -> None:
    """A tool's heartbeat timeout runs from the attempt's start on the server too: a tool a busy worker began 1.2 s
    into its 2 s timeout heartbeats as it begins, not a second later (past the timeout, and run again)."""
    STEEPS.clear()
    log = Heartbeats("agent_runner.run_tool", begin_late=1.2)
    fake_api.script(
        Reply(content=[tool_use("toolu_S", "steep", {"minutes": 4})], stop_reason="tool_use"), end_turn("ok")
    )
    plugin = AgentRunnerPlugin(tools=[steep], claude=ClaudeActivities(anthropic_client_factory(fake_api)))
    async with Worker(client, task_queue=runner.task_queue, plugins=[plugin], interceptors=[log]):
        await (await runner.start(**BASE, messages=[USER], tools=[steep])).until_done()
    ((_, *beats),) = log.beats
    assert 1.2 <= beats[0] < 1.6, beats
    assert STEEPS == [4]
    assert fake_api.bodies()[1]["messages"][-1] == {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "toolu_S", "content": "steeped for 4 min"}],
    }


async def test_cancelling_a_run_ends_it_as_cancelled(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    from agent_runner.contract.errors import RunCancelled

    held = threading.Event()  # never set before the run is cancelled: the reply is never seen
    fake_api.script(Reply(content=[text("never seen")], until=held))
    async with worker():
        run = await runner.start(**BASE, messages=[USER])
        try:
            await asyncio.to_thread(fake_api.wait_for_requests, 1)
            await run.cancel()
            with pytest.raises(RunCancelled, match="was cancelled"):
                await run.until_done()
        finally:
            held.set()


class Holds(Interceptor):
    """Holds every attempt of one activity until it is cancelled, and says when one started."""

    def __init__(self, activity_type: str) -> None:
        self.activity_type = activity_type
        self.started = asyncio.Event()

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        hold = self

        class Inbound(ActivityInboundInterceptor):
            async def execute_activity(self, input: ExecuteActivityInput) -> Any:
                if activity.info().activity_type != hold.activity_type:
                    return await super().execute_activity(input)
                hold.started.set()
                await asyncio.sleep(60)

        return Inbound(next)


async def test_cancelling_a_run_while_its_result_hooks_run_ends_it_as_cancelled(
    client: Client, runner: AgentRunner, fake_api: FakeMessagesAPI
) -> None:
    """A cancellation stays one whichever activity the run awaits: not a failure saying the hooks' activity failed."""
    from agent_runner.contract.errors import RunCancelled

    holding = Holds(PROCESS_RESULTS_ACTIVITY)
    fake_api.script(Reply(content=[tool_use("toolu_W", "get_weather", {"city": "Paris"})], stop_reason="tool_use"))
    plugin = AgentRunnerPlugin(tools=[get_weather], claude=ClaudeActivities(anthropic_client_factory(fake_api)))
    async with Worker(client, task_queue=runner.task_queue, plugins=[plugin], interceptors=[holding]):
        run = await runner.start(**BASE, messages=[USER], tools=[get_weather], result_hooks=["cache_last_tool_result"])
        await asyncio.wait_for(holding.started.wait(), 30)
        await run.cancel()
        with pytest.raises(RunCancelled, match="was cancelled"):
            await run.until_done()
        assert await run.ended() == "canceled"


async def test_a_large_max_tokens_is_sent_not_refused_by_the_sdks_streaming_guard(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """Without an explicit timeout the SDK refuses a non-streaming request with a large `max_tokens` before
    sending it; as an activity that refusal would be retried for ever."""
    fake_api.script(end_turn("long answer"))
    async with worker():
        run = await runner.start(**{**BASE, "max_tokens": 128000}, messages=[USER])
        await run.until_done()
    assert fake_api.bodies()[0]["max_tokens"] == 128000
