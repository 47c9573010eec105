"""Refusal fallbacks: the SDK 2.14.0 ``BetaRefusalFallbackMiddleware``, durably (``workflows/fallbacks.py``).

A refused turn is sent again down ``refusal_fallbacks``, each hop patching the run's own parameters and carrying the
refusal's credit token; the run then stays on the model that accepted, across turns and continue-as-new; when the
chain is exhausted the last refusal is the run's reply.
"""

from __future__ import annotations

import signal
import uuid
from pathlib import Path
from typing import Any

import anthropic
import pytest
from temporalio.client import Client
from temporalio.worker import Worker

from agent_runner.activities.claude import ClaudeActivities
from agent_runner.client import AgentRunner
from agent_runner.contract.errors import AgentRunnerError, InvalidRunInput
from agent_runner.contract.run_input import parse_run_input
from agent_runner.contract.types import CREATE_MESSAGE_ACTIVITY, RunResult
from agent_runner.plugin import AgentRunnerPlugin
from agent_runner.testing import FakeMessagesAPI, Fault, Reply, bad_request, end_turn, text, tool_use
from agent_runner.workflows.fallbacks import apply_hop
from tests import test_durability as durability
from tests.conftest import WorkerFactory, anthropic_client_factory
from tests.test_loop import GET_WEATHER_DEF, AlwaysFails
from tests.tools_for_tests import get_weather

BASE = {"model": "claude-fake-1", "max_tokens": 1024, "system": "You are terse."}
USER = {"role": "user", "content": "What's the weather in Paris?"}
BETA = "fallback-credit-2026-07-01"


def refusal(token: str | None, category: str = "cyber") -> Reply:
    details: dict[str, Any] = {"type": "refusal", "category": category, "explanation": "Not this."}
    if token is not None:
        details["fallback_credit_token"] = token
    return Reply([text("I can't help with that.")], "refusal", stop_details=details)


def weather_call() -> Reply:
    return Reply([tool_use("toolu_F1", "get_weather", {"city": "Paris"})], "tool_use")


CALL = {"role": "assistant", "content": [tool_use("toolu_F1", "get_weather", {"city": "Paris"})]}
RESULT = {
    "role": "user",
    "content": [{"type": "tool_result", "tool_use_id": "toolu_F1", "content": "sunny, 21C in Paris"}],
}


def body(model: str, messages: list[dict[str, Any]], token: str | None = None) -> dict[str, Any]:
    sent: dict[str, Any] = {**BASE, "model": model, "messages": messages, "tools": [GET_WEATHER_DEF], "stream": True}
    if token is not None:
        sent["fallback_credit_token"] = {"token": token, "mode": "best_effort"}
    return sent


async def test_a_refused_turn_is_retried_on_the_fallback_and_the_run_stays_there(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """The hop is the refused request on the next model with the refusal's token; later turns start on that model."""
    fake_api.script(refusal("tok_A"), weather_call(), end_turn("Sunny."))
    async with worker(get_weather):
        run = await runner.start(
            **BASE, messages=[USER], tools=[get_weather], thread=False, refusal_fallbacks=["claude-fallback-2"]
        )
        result = await run.result()
        status = await run.status()
        replies = [m.stop_reason async for m in run.messages()]
    # The refused output stays in the reply the fallback spliced onto it (its seam block is never sent back).
    spliced_call = {"role": "assistant", "content": [text("I can't help with that."), *CALL["content"]]}
    assert fake_api.bodies() == [
        body("claude-fake-1", [USER]),
        body("claude-fallback-2", [USER], token="tok_A"),
        body("claude-fallback-2", [USER, spliced_call, RESULT]),
    ]
    assert all(BETA in r.headers["anthropic-beta"].split(",") for r in fake_api.requests)
    # The refused hop is not one of the run's replies, but it is billed: its usage counts.
    assert replies == ["tool_use", "end_turn"]
    assert (result.status, result.iterations, result.stop_reason) == ("completed", 2, "end_turn")
    assert (status.usage.input_tokens, status.usage.output_tokens) == (30, 15)


async def test_an_exhausted_chain_leaves_the_last_refusal_as_the_reply(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """Each hop patches the run's own parameters (hops never compound) and carries the newest refusal's token; the
    last entry's refusal stops the run, the middleware's ``recommended_model`` slot in its details."""
    fake_api.script(refusal("tok_A"), refusal("tok_B"), refusal("tok_C"))
    async with worker(get_weather):
        run = await runner.start(
            **BASE,
            messages=[USER],
            tools=[get_weather],
            thread=False,
            refusal_fallbacks=["claude-fallback-2", {"model": "claude-fallback-3", "system": None}],
        )
        result = await run.result()
    without_system = {k: v for k, v in body("claude-fallback-3", [USER]).items() if k != "system"}
    assert fake_api.bodies() == [
        body("claude-fake-1", [USER]),
        body("claude-fallback-2", [USER], token="tok_A"),
        {**without_system, "fallback_credit_token": {"token": "tok_B", "mode": "best_effort"}},
    ]
    assert (result.status, result.iterations, result.stop_reason) == ("completed", 1, "refusal")
    assert result.final_message is not None
    assert result.final_message["stop_details"] == {
        "type": "refusal",
        "category": "cyber",
        "explanation": "Not this.",
        "fallback_credit_token": "tok_C",
        "recommended_model": None,
    }


async def test_a_refusal_after_output_without_a_token_stands(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """As the middleware's stream: output already streamed, and no credit token to pay for a continuation."""
    fake_api.script(refusal(None))
    async with worker(get_weather):
        run = await runner.start(
            **BASE, messages=[USER], tools=[get_weather], thread=False, refusal_fallbacks=["claude-fallback-2"]
        )
        result = await run.result()
    assert fake_api.bodies() == [body("claude-fake-1", [USER])]
    assert (result.status, result.stop_reason) == ("completed", "refusal")


async def test_a_fallback_whose_request_fails_is_skipped_and_when_all_fail_the_refusal_stands(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """As the middleware: the failed hop's token was never redeemed, so the next entry gets it."""
    chain = ["claude-fallback-2", "claude-fallback-3"]
    fake_api.script(refusal("tok_A"), bad_request("no such model"), end_turn("Sunny."))
    fake_api.script(refusal("tok_B"), bad_request("no such model"), bad_request("no such model"))
    async with worker(get_weather):
        served = await runner.start(**BASE, messages=[USER], tools=[get_weather], thread=False, refusal_fallbacks=chain)
        served_result = await served.result()
        refused = await runner.start(
            **BASE, messages=[USER], tools=[get_weather], thread=False, refusal_fallbacks=chain
        )
        refused_result = await refused.result()
    assert fake_api.bodies() == [
        body("claude-fake-1", [USER]),
        body("claude-fallback-2", [USER], token="tok_A"),
        body("claude-fallback-3", [USER], token="tok_A"),
        body("claude-fake-1", [USER]),
        body("claude-fallback-2", [USER], token="tok_B"),
        body("claude-fallback-3", [USER], token="tok_B"),
    ]
    assert (served_result.status, served_result.stop_reason) == ("completed", "end_turn")
    assert (refused_result.status, refused_result.stop_reason, refused_result.iterations) == ("completed", "refusal", 1)
    assert refused_result.final_message is not None
    assert refused_result.final_message["stop_details"]["fallback_credit_token"] == "tok_B"


async def test_a_standing_refusal_that_cannot_be_stored_fails_the_run_saying_the_model_call_gave_up(
    client: Client, runner: AgentRunner, fake_api: FakeMessagesAPI
) -> None:
    """Storing the refusal that stands is a model-call activity too: when it spends the run's `model_activity`
    attempts, the run fails saying so, with the last attempt's error, as any model call that gives up."""
    storing = AlwaysFails(CREATE_MESSAGE_ACTIVITY, only=lambda call: call.turn.replay is not None)
    fake_api.script(refusal("tok_A"), bad_request("no such model"))
    plugin = AgentRunnerPlugin(tools=[get_weather], claude=ClaudeActivities(anthropic_client_factory(fake_api)))
    async with Worker(client, task_queue=runner.task_queue, plugins=[plugin], interceptors=[storing]):
        run = await runner.start(
            **BASE,
            messages=[USER],
            tools=[get_weather],
            refusal_fallbacks=["claude-fallback-2"],
            model_activity={"maximum_attempts": 3, "initial_interval": "PT0.05S", "maximum_interval": "PT0.1S"},
        )
        with pytest.raises(AgentRunnerError) as e:
            await run.until_done()
    assert storing.attempts == [1, 2, 3]
    assert str(e.value) == (
        "agent_runner.create_message gave up: its maximum_attempts were spent, and the last attempt failed "
        "(RuntimeError: the content store is unreachable). Try again later, or give it more attempts or time (the "
        "run's `model_activity`)."
    )
    assert len(fake_api.requests) == 2


async def test_a_hop_over_capacity_is_retried_before_it_counts_as_failed(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """A deliberate difference (README): the middleware (``max_retries=0``) would go on to the next entry at once; a
    hop is a model call with Temporal's retries, so the entry over capacity gets its turn once it has capacity."""
    chain = ["claude-fallback-2", "claude-fallback-3"]
    fake_api.script(refusal("tok_A"), Fault(529), end_turn("Sunny."))
    async with worker(get_weather):
        run = await runner.start(
            **BASE,
            messages=[USER],
            tools=[get_weather],
            thread=False,
            refusal_fallbacks=chain,
            model_activity={"initial_interval": "PT0.05S", "maximum_interval": "PT0.1S"},
        )
        result = await run.result()
    hop = body("claude-fallback-2", [USER], token="tok_A")
    assert fake_api.bodies() == [body("claude-fake-1", [USER]), hop, hop]
    assert (result.status, result.stop_reason) == ("completed", "end_turn")
    assert result.final_message is not None and result.final_message["model"] == "claude-fallback-2"


async def test_on_a_thread_a_refused_continue_is_retried_on_a_new_thread(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """The server may hold the refused turn, so the hop replays the history as a ``create`` (as a refusal the run
    keeps makes the next turn do), then the run continues that thread on the fallback model."""
    fake_api.script(weather_call(), refusal("tok_B"), end_turn("Sunny."))
    async with worker(get_weather):
        run = await runner.start(**BASE, messages=[USER], tools=[get_weather], refusal_fallbacks=["claude-fallback-2"])
        result = await run.result()
    bodies = fake_api.bodies()
    assert [(b["model"], b["thread"], b["messages"], b.get("fallback_credit_token")) for b in bodies[1:]] == [
        ("claude-fake-1", {"type": "continue", "previous_message_id": "msg_fake_001"}, [RESULT], None),
        ("claude-fallback-2", {"type": "create"}, [USER, CALL, RESULT], {"token": "tok_B", "mode": "best_effort"}),
    ]
    assert (result.status, result.stop_reason) == ("completed", "end_turn")


async def test_the_pin_survives_continue_as_new(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    fake_api.script(refusal("tok_A"), weather_call(), weather_call(), end_turn("Sunny."))
    async with worker(get_weather):
        run = await runner.start(
            **BASE,
            messages=[USER],
            tools=[get_weather],
            thread=False,
            refusal_fallbacks=["claude-fallback-2"],
            continue_as_new={"events": 10},
        )
        result = await run.result()
        status = await run.status()
    assert status.continuations >= 1
    assert [b["model"] for b in fake_api.bodies()] == ["claude-fake-1", *["claude-fallback-2"] * 3]
    assert result.status == "completed"


def test_a_hop_patches_the_runs_parameters_as_the_middleware_does() -> None:
    """An entry's ``None`` unsets, ``output_config`` one level deep and dropped when nothing is left of it, a
    ``between_tools`` thinking disabled unless the entry sets ``thinking``."""
    params = {
        "model": "a",
        "max_tokens": 10,
        "thinking": {"type": "between_tools"},
        "output_config": {"effort": "high", "format": {"type": "json_schema"}},
        "speed": "fast",
    }
    entry = {"model": "b", "speed": None, "output_config": {"format": None}}
    assert apply_hop(params, entry) == {
        "model": "b",
        "max_tokens": 10,
        "thinking": {"type": "disabled"},
        "output_config": {"effort": "high"},
    }
    assert apply_hop(params, {"model": "b", "thinking": {"type": "adaptive"}})["thinking"] == {"type": "adaptive"}
    assert apply_hop(params, {"model": "b", "output_config": {"effort": None, "format": None}}) == {
        "model": "b",
        "max_tokens": 10,
        "thinking": {"type": "disabled"},
        "speed": "fast",
    }


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            {"refusal_fallbacks": "claude-opus-4-8"},
            '`refusal_fallbacks` must be a list of model names (e.g. ["claude-opus-4-8"]), or of `fallbacks` entries '
            'with a `model` (e.g. {"model": "claude-opus-4-8", "thinking": null}).',
        ),
        (
            {"refusal_fallbacks": ["claude-opus-4-8"], "fallbacks": [{"model": "claude-opus-4-8"}]},
            "`refusal_fallbacks` (client-side, as the SDK's BetaRefusalFallbackMiddleware) cannot be used with "
            "`fallbacks` (server-side): give one of them.",
        ),
    ],
)
def test_bad_refusal_fallbacks_are_refused_at_start(extra: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidRunInput) as e:
        parse_run_input({**BASE, "messages": [USER], **extra})
    assert str(e.value) == f"The run's input was rejected:\n- {message}"


@pytest.mark.slow
async def test_the_pin_survives_a_worker_killed_during_the_fallback_call(
    tmp_path: Path, fake_api: FakeMessagesAPI
) -> None:
    """The hop is a durable step: a worker ``kill -9``ed while the fallback model writes its reply leaves a run that
    retries the hop on a new worker, never asks the model that refused again, and stays on the fallback."""
    slow = {"first": True}

    def respond(body: dict[str, Any]) -> Reply:
        if body["model"] == "claude-fake-1":
            return refusal("tok_K")
        answered = any(
            isinstance(m.get("content"), list) and any(b.get("type") == "tool_result" for b in m["content"])
            for m in body["messages"]
        )
        if answered:
            return end_turn("Done.")
        delay, slow["first"] = (6.0 if slow["first"] else 0.0), False
        return Reply([tool_use("toolu_K", "slow_step", {"step": "one"})], "tool_use", delay=delay)

    fake_api.responder = respond
    marks, log = tmp_path / "marks.txt", tmp_path / "worker.log"
    async with durability.server(tmp_path) as temporal:
        runner = AgentRunner(await durability.connect(temporal.address), task_queue=f"kill-hop-{uuid.uuid4()}")
        with durability.worker_process(temporal.address, runner.task_queue, fake_api, marks, log) as first:
            run = await runner.start(**{**durability.RUN, "thread": False, "refusal_fallbacks": ["claude-fallback-2"]})
            await durability.wait_for(lambda: len(fake_api.requests) >= 2, "the fallback request")
            first.send_signal(signal.SIGKILL)
            first.wait()
        with durability.worker_process(temporal.address, runner.task_queue, fake_api, marks, log):
            result = RunResult.model_validate(await run.handle.result())
    assert (result.status, result.stop_reason) == ("completed", "end_turn")
    assert [r.body["model"] for r in fake_api.requests] == ["claude-fake-1", *["claude-fallback-2"] * 3]
    assert [r.body.get("fallback_credit_token") for r in fake_api.requests][1:3] == [
        {"token": "tok_K", "mode": "best_effort"}
    ] * 2
    assert marks.read_text().splitlines() == ["start one"]


def test_the_fake_api_answers_a_scripted_refusal_with_its_stop_details(fake_api: FakeMessagesAPI) -> None:
    """Whole in a JSON reply; streamed, in the ``message_delta`` with the stop reason (not in ``message_start``)."""
    client = anthropic.Anthropic(base_url=fake_api.url, api_key="k", max_retries=0)
    fake_api.script(refusal("tok_J"), refusal("tok_S"))
    whole = client.beta.messages.create(**BASE, messages=[USER])
    with client.beta.messages.stream(**BASE, messages=[USER]) as stream:
        started = None
        for event in stream:
            if event.type == "message_start":
                started = event.message.stop_details
        streamed = stream.get_final_message()
    assert whole.stop_details is not None and whole.stop_details.fallback_credit_token == "tok_J"
    assert started is None
    assert streamed.stop_details is not None
    assert streamed.stop_details.model_dump(exclude_unset=True) == {
        "type": "refusal",
        "category": "cyber",
        "explanation": "Not this.",
        "fallback_credit_token": "tok_S",
    }
