"""Never twice: what a tool's outcome becomes when something fails after (or while) it runs.

Each test counts the tool's side effects in a journal the tools write, reads the exact `tool_result` Claude received
from the fake Messages API, and checks how the run ended. The worker is real, the dev server is real, Claude is the
fake over HTTP. Worker crashes (`kill -9`) are in tests/test_tool_effects_crash.py (slow tier).
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import threading
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

import pytest
from anthropic import beta_async_tool, beta_tool
from temporalio.client import Client
from temporalio.worker import Worker

from agent_runner.activities.claude import ClaudeActivities
from agent_runner.activities.tools import ToolCall, ToolRegistry, current_tool_call, tool_options
from agent_runner.client import AgentRunner
from agent_runner.contract.errors import ToolRegistrationError
from agent_runner.contract.events import ToolOutcomeUnknown
from agent_runner.contract.types import RECONCILE_TOOL_ACTIVITY, RUN_TOOL_ACTIVITY, RunResult
from agent_runner.plugin import AgentRunnerPlugin
from agent_runner.store import ContentStore, open_store
from agent_runner.testing import FakeMessagesAPI, Reply, end_turn, text, tool_use
from agent_runner.worker import WorkerTuning, build_worker
from agent_runner.workflows import tool_calls
from tests.conftest import WorkerFactory, anthropic_client_factory, started_attempts
from tests.steering_support import wait_status
from tests.test_loop import AlwaysFails
from tests.tools_for_tests import get_weather

BASE = {"model": "claude-fake-1", "max_tokens": 256}
USER = {"role": "user", "content": "Do it."}

JOURNAL: list[str] = []
"""Every side effect the tools below performed, in order."""


def call(name: str, tool_id: str = "toolu_1", **tool_input: Any) -> Reply:
    return Reply(content=[text("On it."), tool_use(tool_id, name, tool_input)], stop_reason="tool_use")


def results_sent(fake: FakeMessagesAPI, request: int = 1) -> list[dict[str, Any]]:
    """The tool_result blocks of the `request`-th body (0 is the first)."""
    last = fake.bodies()[request]["messages"][-1]
    return [b for b in last["content"] if b.get("type") == "tool_result"]


@pytest.fixture(autouse=True)
def clean_journal() -> None:
    JOURNAL.clear()


# ------------------------------------------------------------------------------------------------ the tools


@beta_tool
def send_bytes(to: str) -> list[dict[str, Any]]:  # type: ignore[type-var]
    """Send an image, wrongly as raw bytes.

    Args:
        to: The recipient.
    """
    JOURNAL.append(f"send_bytes {to}")
    return [{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": b"\x89PNG"}}]


@beta_tool
def big_report(title: str) -> str:
    """Write a report too big to carry inline.

    Args:
        title: The report's title.
    """
    JOURNAL.append(f"big_report {title}")
    return title + " " + "x" * 10_000


_RELEASE = threading.Event()


@tool_options(start_to_close_timeout=timedelta(seconds=1))
@beta_tool
def stuck_sync(job: str) -> str:
    """A sync tool slower than its timeout.

    Args:
        job: The job.
    """
    JOURNAL.append(f"stuck_sync start {job}")
    _RELEASE.wait(20)
    JOURNAL.append(f"stuck_sync end {job}")
    return "finished late"


@tool_options(start_to_close_timeout=timedelta(seconds=1), maximum_attempts=2, initial_interval=timedelta(seconds=0.1))
@beta_async_tool
async def stuck_async(job: str) -> str:
    """An async tool slower than its timeout.

    Args:
        job: The job.
    """
    JOURNAL.append(f"stuck_async start {job}")
    await asyncio.sleep(30)
    return "never"


def _sent(call: ToolCall) -> str | None:
    """Reconcile: look the call up by its idempotency key in the journal."""
    JOURNAL.append(f"reconcile {call.name} {call.input['to']}")
    return f"already sent to {call.input['to']}" if f"sent {call.idempotency_key}" in JOURNAL else None


def _email(name: str, *, effect_before_hanging: bool = True, **options: Any) -> Any:
    """An at-most-once tool whose first attempt hangs past its timeout (after its effect, or before it)."""
    tried: set[str] = set()

    @tool_options(effects="at_most_once", start_to_close_timeout=timedelta(seconds=1), **options)
    @beta_async_tool(name=name)
    async def send_email(to: str) -> str:
        """Send an email.

        Args:
            to: The recipient.
        """
        key = current_tool_call().idempotency_key
        JOURNAL.append(f"{name} start {to}")
        if key not in tried:
            tried.add(key)
            if effect_before_hanging:
                JOURNAL.append(f"sent {key}")
            await asyncio.sleep(30)
        JOURNAL.append(f"sent {key}")
        return f"sent to {to}"

    return send_email


email_tell = _email("email_tell")
email_reconciled = _email("email_reconciled", reconcile=_sent)
email_reconciled_before = _email("email_reconciled_before", effect_before_hanging=False, reconcile=_sent)
email_ask = _email("email_ask", on_unknown="ask")


@beta_tool
def whose_key(note: str) -> str:
    """Return the call's idempotency key.

    Args:
        note: Anything.
    """
    del note
    return current_tool_call().idempotency_key


_KEYS_SEEN: list[str] = []


@tool_options(start_to_close_timeout=timedelta(seconds=1), initial_interval=timedelta(seconds=0.1))
@beta_async_tool
async def key_then_hang_once(note: str) -> str:
    """Return the call's idempotency key on its second attempt; the first hangs past its timeout.

    Args:
        note: Anything.
    """
    del note
    call = current_tool_call()
    _KEYS_SEEN.append(f"{call.attempt} {call.idempotency_key}")
    if call.attempt == 1:
        await asyncio.sleep(30)
    return call.idempotency_key


# ------------------------------------------------------------------------------------------------ the tests


async def test_a_result_that_cannot_be_serialized_is_an_error_result_and_the_tool_ran_once(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    fake_api.script(call("send_bytes", to="ana"), end_turn("Could not send."))
    async with worker(send_bytes):
        run = await runner.start(**BASE, messages=[USER], tools=[send_bytes], thread=False)
        await run.until_done()
    assert JOURNAL == ["send_bytes ana"]
    assert results_sent(fake_api) == [
        {
            "type": "tool_result",
            "tool_use_id": "toolu_1",
            "is_error": True,
            "content": "Error: Tool 'send_bytes' returned content that cannot be sent to Claude (TypeError('Object "
            "of type bytes is not JSON serializable')). A tool must return a string or content blocks of JSON values "
            "(base64 text for images and documents). Nothing else was sent, and the tool was not run again.",
        }
    ]


@beta_tool
def returns_shapes(shape: str) -> list[Any]:
    """Return a list that is not content blocks.

    Args:
        shape: Which list.
    """
    JOURNAL.append(f"returns_shapes {shape}")
    return ["just text"] if shape == "strings" else [{"text": "untyped"}]


@pytest.mark.parametrize(
    ("shape", "what"),
    [("strings", "a list holding str"), ("untyped", "a list holding an object without a string `type`")],
)
async def test_a_list_result_that_is_not_content_blocks_is_an_error_result_and_the_tool_ran_once(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, shape: str, what: str
) -> None:
    """Sent as it is, the API would refuse the next request and the run would fail: Claude is told instead."""
    fake_api.script(call("returns_shapes", shape=shape), end_turn("Understood."))
    async with worker(returns_shapes):
        run = await runner.start(**BASE, messages=[USER], tools=[returns_shapes], thread=False)
        await run.until_done()
    assert JOURNAL == [f"returns_shapes {shape}"]
    assert results_sent(fake_api) == [
        {
            "type": "tool_result",
            "tool_use_id": "toolu_1",
            "is_error": True,
            "content": f"Error: Tool 'returns_shapes' returned {what}; a tool must return a string or a list of "
            "content blocks (text, image, document). Nothing else was sent.",
        }
    ]


class WrappedStore(ContentStore):
    """A store that passes everything to ``inner``: the stores below change one of its operations."""

    def __init__(self, inner: ContentStore, url: str) -> None:
        self._inner = inner
        self.url = url

    async def put(self, blobs: Mapping[str, bytes]) -> int:
        return await self._inner.put(blobs)

    async def _read(self, refs: list[str]) -> dict[str, bytes]:
        return await self._inner.get(refs)

    async def put_nodes(self, nodes: Any) -> None:
        await self._inner.put_nodes(nodes)

    async def chain(self, head: str) -> list[str]:
        return await self._inner.chain(head)

    async def stats(self) -> Any:
        return await self._inner.stats()

    async def close(self) -> None:
        await self._inner.close()


class FailingBigPuts(WrappedStore):
    """A store that fails every write of a big blob: a tool's big result cannot be stored."""

    def __init__(self) -> None:
        super().__init__(open_store("memory:"), "failing-big-puts:")
        self.puts = 0

    async def put(self, blobs: Mapping[str, bytes]) -> int:
        if any(len(blob) > 8_000 for blob in blobs.values()):
            self.puts += 1
            raise OSError("disk full")
        return await super().put(blobs)


@pytest.mark.slow
async def test_a_result_the_store_cannot_take_is_an_error_result_and_the_tool_ran_once(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    store = FailingBigPuts()
    fake_api.script(call("big_report", title="Q3"), end_turn("Sorry."))
    async with worker(big_report, store=store):
        run = await runner.start(**BASE, messages=[USER], tools=[big_report], thread=False)
        result = RunResult.model_validate(await run.handle.result())
    assert result.status == "completed"
    assert JOURNAL == ["big_report Q3"]
    assert store.puts == 5  # STORE_ATTEMPTS, inside the one activity attempt
    assert results_sent(fake_api) == [
        {
            "type": "tool_result",
            "tool_use_id": "toolu_1",
            "is_error": True,
            "content": "Error: Tool 'big_report' ran, but its result could not be stored (OSError('disk full')). It "
            "was not run again.",
        }
    ]


class StallingFirstBigPut(FailingBigPuts):
    """A store whose first write of a big blob stalls past the tool's heartbeat timeout, then succeeds."""

    def __init__(self) -> None:
        super().__init__()
        self.url = "stalling-first-big-put:"
        self.stalls = 0

    async def put(self, blobs: Mapping[str, bytes]) -> int:
        if self.stalls == 0 and any(len(blob) > 8_000 for blob in blobs.values()):
            self.stalls += 1
            await asyncio.sleep(4)  # no heartbeat meanwhile: Temporal gives the call to another attempt
        return await self._inner.put(blobs)


@tool_options(heartbeat_timeout=timedelta(seconds=1), maximum_attempts=3, initial_interval=timedelta(seconds=0.1))
@beta_tool
def long_report(title: str) -> str:
    """Write a long report; an idempotent tool with a short heartbeat timeout.

    Args:
        title: The report's title.
    """
    JOURNAL.append(f"long_report {title}")
    return title + " " + "y" * 10_000


async def test_an_attempt_after_the_tool_returned_reuses_its_outcome_and_does_not_run_it_again(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """The tool returned, then storing its result stalled past the heartbeat timeout: Temporal starts another attempt,
    which reaches the same worker and finds the outcome by the call's idempotency key."""
    store = StallingFirstBigPut()
    fake_api.script(call("long_report", title="Q4"), end_turn("Here it is."))
    async with worker(long_report, store=store):
        run = await runner.start(**BASE, messages=[USER], tools=[long_report], thread=False)
        result = RunResult.model_validate(await run.handle.result())
        history = await run.handle.fetch_history()
    assert result.status == "completed"
    assert started_attempts(history)["agent_runner.run_tool"] == [
        2
    ]  # the second attempt gave the result: the first one's was too late
    assert store.stalls == 1
    assert JOURNAL == ["long_report Q4"]
    assert results_sent(fake_api) == [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "Q4 " + "y" * 10_000}
    ]


async def test_a_sync_tool_past_its_timeout_is_reported_once_and_never_runs_beside_a_retry(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    _RELEASE.clear()
    fake_api.script(call("stuck_sync", job="j1"), end_turn("It timed out."))
    try:
        async with worker(stuck_sync):
            run = await runner.start(**BASE, messages=[USER], tools=[stuck_sync], thread=False)
            async with asyncio.timeout(15):  # a retried timeout would take minutes of backoff before the run failed
                await run.until_done()
            assert JOURNAL == ["stuck_sync start j1"]  # no second copy was started while the first still ran
    finally:
        _RELEASE.set()
    async with asyncio.timeout(10):  # the thread ends once released, and only then; no copy ran beside it
        while JOURNAL[-1:] != ["stuck_sync end j1"]:
            await asyncio.sleep(0.05)
    assert JOURNAL == ["stuck_sync start j1", "stuck_sync end j1"]
    assert results_sent(fake_api) == [
        {
            "type": "tool_result",
            "tool_use_id": "toolu_1",
            "is_error": True,
            "content": "Error: Tool 'stuck_sync' did not finish within 1 s. It may still be running, so it was not "
            "run again.",
        }
    ]


async def test_an_idempotent_async_tool_past_its_timeout_is_cancelled_then_retried_within_its_attempts(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    fake_api.script(call("stuck_async", job="j1"))
    async with worker(stuck_async):
        run = await runner.start(**BASE, messages=[USER], tools=[stuck_async], thread=False)
        with pytest.raises(Exception) as failure:
            await run.handle.result()
    assert JOURNAL == ["stuck_async start j1", "stuck_async start j1"]  # maximum_attempts=2, one after the other
    cause = failure.value.cause  # type: ignore[attr-defined]
    assert (cause.type, cause.message) == (
        "ToolTimedOut",
        "Tool 'stuck_async' could not be run in 2 attempts: Tool 'stuck_async' did not finish within 1 s; it was "
        "cancelled. Check the workers that serve it (their logs say why), then fork the run from its last turn to "
        "go on.",
    )
    assert len(fake_api.requests) == 1


async def test_at_most_once_unknown_outcome_is_told_to_claude_and_never_rerun(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    fake_api.script(call("email_tell", to="ana"), end_turn("I could not confirm it."))
    async with worker(email_tell):
        run = await runner.start(**BASE, messages=[USER], tools=[email_tell], thread=False)
        events = []
        async for event in run.events():
            events.append(event)
            if event.type == "run_finished":
                break
    key = next(line.split()[1] for line in JOURNAL if line.startswith("sent "))
    assert JOURNAL == ["email_tell start ana", f"sent {key}"]
    assert results_sent(fake_api) == [
        {
            "type": "tool_result",
            "tool_use_id": "toolu_1",
            "is_error": True,
            "content": "Error: The outcome of this call of 'email_tell' is unknown: Tool 'email_tell' did not finish "
            "within 1 s; it was cancelled. It may or may not have taken effect, and it was not run again. Check "
            "before calling it again.",
        }
    ]
    unknown = [e for e in events if isinstance(e, ToolOutcomeUnknown)]
    assert [(e.tool_use_id, e.name, e.on_unknown) for e in unknown] == [("toolu_1", "email_tell", "tell")]


async def test_at_most_once_reconcile_finds_the_effect_and_its_answer_is_the_result(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    fake_api.script(call("email_reconciled", to="bo"), end_turn("Sent."))
    async with worker(email_reconciled):
        run = await runner.start(**BASE, messages=[USER], tools=[email_reconciled], thread=False)
        await run.until_done()
    key = next(line.split()[1] for line in JOURNAL if line.startswith("sent "))
    assert JOURNAL == ["email_reconciled start bo", f"sent {key}", "reconcile email_reconciled bo"]
    assert results_sent(fake_api) == [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "already sent to bo"}
    ]


async def test_at_most_once_reconcile_that_finds_nothing_runs_the_call_again_once(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    fake_api.script(call("email_reconciled_before", to="cy"), end_turn("Sent."))
    async with worker(email_reconciled_before):
        run = await runner.start(**BASE, messages=[USER], tools=[email_reconciled_before], thread=False)
        await run.until_done()
    sent = [line for line in JOURNAL if line.startswith("sent ")]
    assert JOURNAL == [
        "email_reconciled_before start cy",
        "reconcile email_reconciled_before cy",
        "email_reconciled_before start cy",
        *sent,
    ]
    assert len(sent) == 1  # the effect happened exactly once
    assert results_sent(fake_api) == [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "sent to cy"}]


def _found_nothing(call: ToolCall) -> None:
    """Reconcile: the call never takes effect, so it may run again."""
    JOURNAL.append(f"reconcile {call.name}")


@tool_options(effects="at_most_once", start_to_close_timeout=timedelta(seconds=1), reconcile=_found_nothing)
@beta_async_tool
async def never_finishes(job: str) -> str:
    """An at-most-once tool that never finishes within its timeout.

    Args:
        job: The job.
    """
    JOURNAL.append(f"never_finishes start {job}")
    await asyncio.sleep(30)
    return "never"


async def test_at_most_once_reconcile_that_never_finds_the_effect_gives_up_after_a_bounded_number_of_runs(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    fake_api.script(call("never_finishes", job="j1"), end_turn("It never finished."))
    async with worker(never_finishes):
        run = await runner.start(**BASE, messages=[USER], tools=[never_finishes], thread=False)
        async with asyncio.timeout(60):
            await run.until_done()
    assert JOURNAL == ["never_finishes start j1", "reconcile never_finishes"] * 3
    assert results_sent(fake_api) == [
        {
            "type": "tool_result",
            "tool_use_id": "toolu_1",
            "is_error": True,
            "content": "Error: The outcome of this call of 'never_finishes' is unknown: Tool 'never_finishes' did not "
            "finish within 1 s; it was cancelled; it was run 3 times without an outcome. It may or may not have taken "
            "effect, and it was not run again. Check before calling it again.",
        }
    ]


async def test_a_run_that_told_claude_an_unknown_outcome_before_the_cause_was_joined_goes_on_after_the_upgrade(
    client: Client, runner: AgentRunner, task_queue: str, fake_api: FakeMessagesAPI, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run that sent the unknown outcome's old text ("cancelled.; it was run") on the code before, then waited,
    goes on under the current code: it replays the text it sent (its transcript is stored under that text), and its
    next turn reads it."""
    fake_api.script(
        call("never_finishes", job="j1"), call("get_weather", tool_id="toolu_2", city="Paris"), end_turn("Done.")
    )
    claude = ClaudeActivities(anthropic_client_factory(fake_api))
    registry = ToolRegistry([never_finishes, get_weather])
    with monkeypatch.context() as before:
        before.setattr(tool_calls, "_joined", lambda cause, more: f"{cause}; {more}")  # the code before the patch
        async with build_worker(client, registry=registry, task_queue=task_queue, claude=claude):
            run = await runner.start(
                **BASE, messages=[USER], tools=[never_finishes, get_weather], step=True, thread=False
            )
            for replies in (1, 2):
                await wait_status(run, "waiting_for_step", replies)
                if replies == 1:
                    await run.advance()
    upgraded = build_worker(
        client, registry=registry, task_queue=task_queue, claude=claude, tuning=WorkerTuning(max_cached_workflows=0)
    )
    async with upgraded:
        await run.advance()
        await wait_status(run, "waiting_for_step", 3)  # its third turn read the transcript the old code stored
        await run.advance()
        result = await run.result()
    assert (result.status, result.iterations) == ("completed", 3)
    assert "it was cancelled.; it was run 3 times" in results_sent(fake_api)[0]["content"]
    assert fake_api.bodies()[2]["messages"][-3]["content"] == fake_api.bodies()[1]["messages"][-1]["content"]


def _cannot_reconcile(call: ToolCall) -> None:
    """Reconcile: the place that would say whether the call took effect cannot be read."""
    JOURNAL.append(f"reconcile {call.name}")
    raise RuntimeError("the mail server's log is unreachable")


@tool_options(effects="at_most_once", start_to_close_timeout=timedelta(seconds=1), reconcile=_cannot_reconcile)
@beta_async_tool
async def email_unreconcilable(to: str) -> str:
    """An at-most-once tool that never finishes within its timeout, and whose reconcile always fails.

    Args:
        to: The recipient.
    """
    JOURNAL.append(f"email_unreconcilable start {to}")
    await asyncio.sleep(30)
    return "never"


async def test_at_most_once_reconcile_that_raises_is_asked_once_and_claude_is_told_its_error(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """A reconcile that raises could not tell: the call is not run again and Claude is told why, at once."""
    fake_api.script(call("email_unreconcilable", to="ana"), end_turn("I could not confirm it."))
    async with worker(email_unreconcilable):
        run = await runner.start(**BASE, messages=[USER], tools=[email_unreconcilable], thread=False)
        async with asyncio.timeout(60):
            await run.until_done()
    assert JOURNAL == ["email_unreconcilable start ana", "reconcile email_unreconcilable"]
    assert results_sent(fake_api) == [
        {
            "type": "tool_result",
            "tool_use_id": "toolu_1",
            "is_error": True,
            "content": "Error: The outcome of this call of 'email_unreconcilable' is unknown, and checking it "
            'failed: RuntimeError("the mail server\'s log is unreachable"). It was not run again. Check before '
            "calling it again.",
        }
    ]


async def test_at_most_once_reconcile_whose_worker_keeps_failing_is_tried_5_times_then_claude_is_told_why(
    client: Client,
    runner: AgentRunner,
    fake_api: FakeMessagesAPI,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The reconcile activity failing on its worker (a store away, say) is tried a bounded number of times, never for
    ever; the call is not run again and Claude is told its outcome is unknown, with the last attempt's error."""
    quick = {"initial_interval": timedelta(milliseconds=10), "maximum_interval": timedelta(milliseconds=20)}
    monkeypatch.setattr(tool_calls, "RECONCILE_RETRY", dataclasses.replace(tool_calls.RECONCILE_RETRY, **quick))
    failing = AlwaysFails(RECONCILE_TOOL_ACTIVITY)
    fake_api.script(call("email_unreconcilable", to="ana"), end_turn("I could not confirm it."))
    plugin = AgentRunnerPlugin(
        tools=[email_unreconcilable], claude=ClaudeActivities(anthropic_client_factory(fake_api))
    )
    async with Worker(client, task_queue=runner.task_queue, plugins=[plugin], interceptors=[failing]):
        run = await runner.start(**BASE, messages=[USER], tools=[email_unreconcilable], thread=False)
        async with asyncio.timeout(60):
            await run.until_done()
    assert failing.attempts == [1, 2, 3, 4, 5]
    assert JOURNAL == ["email_unreconcilable start ana"]  # the reconcile itself never ran; nor did the call again
    assert results_sent(fake_api) == [
        {
            "type": "tool_result",
            "tool_use_id": "toolu_1",
            "is_error": True,
            "content": "Error: The outcome of this call of 'email_unreconcilable' is unknown: Tool "
            "'email_unreconcilable' did not finish within 1 s; it was cancelled; reconciling failed: the content "
            "store is unreachable. It may or may not have taken effect, and it was not run again. Check before "
            "calling it again.",
        }
    ]


@pytest.mark.parametrize("approve", [True, False], ids=["approved", "denied"])
async def test_at_most_once_ask_puts_the_unknown_call_to_a_person(
    approve: bool, runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    fake_api.script(call("email_ask", to="di"), end_turn("Done."))
    async with worker(email_ask):
        run = await runner.start(**BASE, messages=[USER], tools=[email_ask], thread=False)
        async with asyncio.timeout(30):
            while not (pending := await run.pending_approvals()):
                await asyncio.sleep(0.1)
        assert [(p.tool_use_id, p.name, p.input, p.note) for p in pending] == [
            (
                "toolu_1",
                "email_ask",
                {"to": "di"},
                "The outcome of this call is unknown (Tool 'email_ask' did not finish within 1 s; it was cancelled.). "
                "Approve to run it again; deny to tell Claude that its outcome is unknown.",
            )
        ]
        if approve:
            await run.approve("toolu_1")
        else:
            await run.deny("toolu_1")
        await run.until_done()
    sent = [line for line in JOURNAL if line.startswith("sent ")]
    if approve:
        assert JOURNAL == ["email_ask start di", sent[0], "email_ask start di", sent[0]]
        assert results_sent(fake_api) == [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "sent to di"}]
    else:
        assert JOURNAL == ["email_ask start di", sent[0]]
        assert results_sent(fake_api)[0]["content"].startswith(
            "Error: The outcome of this call of 'email_ask' is unknown: Tool 'email_ask' did not finish within 1 s"
        )


async def test_the_idempotency_key_is_stable_per_tool_use_across_continue_as_new_and_new_in_a_fork(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    fake_api.script(
        call("whose_key", "toolu_1", note="a"),
        call("whose_key", "toolu_2", note="b"),
        call("whose_key", "toolu_3", note="c"),
        end_turn("Keys."),
        # the fork, from iteration 2: it asks again for toolu_2
        call("whose_key", "toolu_2", note="b"),
        end_turn("Keys again."),
    )
    async with worker(whose_key):
        # Continue as new after every event budget: the third call runs in a continuation.
        run = await runner.start(
            **BASE, messages=[USER], tools=[whose_key], thread=False, continue_as_new={"events": 20}
        )
        await run.until_done()
        fork = await run.fork(2)
        await fork.until_done()
    bodies = fake_api.bodies()
    keys = [results_sent(fake_api, i)[0]["content"] for i in (1, 2, 3)]
    forked = bodies[5]["messages"][-1]["content"][0]["content"]
    first_run_id = (await run.handle.describe()).raw_description.workflow_execution_info.first_run_id
    assert keys == [hashlib.sha256(f"{first_run_id}/toolu_{n}".encode()).hexdigest()[:32] for n in (1, 2, 3)]
    assert forked not in keys and len(forked) == 32
    # The run's first execution leaves the key out of the tool's input (the activity derives it from its own run
    # id); a continuation, whose run id is another, sends it.
    sent: list[tuple[int, str, str | None]] = []
    for execution, run_id in enumerate(await execution_run_ids(runner, run.id)):
        history = await runner.client.get_workflow_handle(run.id, run_id=run_id).fetch_history()
        for event in history.events:
            if event.HasField("activity_task_scheduled_event_attributes"):
                scheduled = event.activity_task_scheduled_event_attributes
                if scheduled.activity_type.name == RUN_TOOL_ACTIVITY:
                    tool_input = json.loads(scheduled.input.payloads[0].data)
                    sent.append((execution, tool_input["tool_use_id"], tool_input.get("idempotency_key")))
    assert sent == [(0, "toolu_1", None), (0, "toolu_2", None), (1, "toolu_3", keys[2])]


async def execution_run_ids(runner: AgentRunner, run_id: str) -> list[str]:
    """The run ids of a run's executions (continue-as-new makes one each), oldest first."""
    executions = [e async for e in runner.client.list_workflows(f"WorkflowId = '{run_id}'")]
    return [e.run_id for e in sorted(executions, key=lambda e: e.start_time)]


async def test_the_idempotency_key_is_the_same_on_every_attempt(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    _KEYS_SEEN.clear()
    fake_api.script(call("key_then_hang_once", note="a"), end_turn("Key."))
    async with worker(key_then_hang_once):
        run = await runner.start(**BASE, messages=[USER], tools=[key_then_hang_once], thread=False)
        await run.until_done()
    key = results_sent(fake_api)[0]["content"]
    assert _KEYS_SEEN == [f"1 {key}", f"2 {key}"]


class FlakyReads(WrappedStore):
    """The shared store (``AGENT_RUNNER_STORE``), whose first ``failing`` reads fail: a tool's stored input cannot be
    read yet, so its tool has not started."""

    def __init__(self, failing: int) -> None:
        inner = open_store()
        super().__init__(inner, inner.url)
        self.failing = failing
        self.failed = 0

    async def _read(self, refs: list[str]) -> dict[str, bytes]:
        if self.failed < self.failing:
            self.failed += 1
            raise OSError("connection reset by peer")
        return await super()._read(refs)


def _filing_tool(tools_queue: str) -> Any:
    """An at-most-once tool on its own task queue, so it reads its (big, stored) input from the store."""

    @tool_options(
        effects="at_most_once",
        task_queue=tools_queue,
        maximum_attempts=3,
        initial_interval=timedelta(seconds=0.1),
        maximum_interval=timedelta(seconds=0.15),
    )
    @beta_async_tool
    async def file_report(body: str) -> str:
        """File a report.

        Args:
            body: The report.
        """
        JOURNAL.append(f"file_report {len(body)}")
        return f"filed {len(body)} characters"

    return file_report


@pytest.mark.parametrize("failing", [2, 3], ids=["read-on-the-third-attempt", "never-read"])
async def test_an_at_most_once_tool_whose_stored_input_cannot_be_read_is_tried_again_up_to_its_attempts(
    failing: int,
    runner: AgentRunner,
    worker: WorkerFactory,
    fake_api: FakeMessagesAPI,
    client: Client,
    task_queue: str,
) -> None:
    """ToolNotStarted: the tool did not start, so even an at-most-once call is tried again (never "unknown"), and
    only ``maximum_attempts`` times, after the delays its options give (doubled from ``initial_interval`` up to
    ``maximum_interval``)."""
    tools_queue = f"{task_queue}-tools"
    file_report = _filing_tool(tools_queue)
    body = "r" * 6000  # big: stored by the model worker, read back by the tool worker
    fake_api.script(Reply([tool_use("toolu_1", "file_report", {"body": body})], "tool_use"), end_turn("Filed."))
    store = FlakyReads(failing)
    async with worker(file_report, serve=("workflows", "model")):
        run = await runner.start(**BASE, messages=[USER], tools=["file_report"], thread=False)
        tools_worker = build_worker(
            client, registry=ToolRegistry([file_report]), task_queue=tools_queue, serve=["tools"], store=store
        )
        async with tools_worker:
            async with asyncio.timeout(60):
                if failing == 2:
                    await run.until_done()
                else:
                    with pytest.raises(Exception) as failure:
                        await run.handle.result()
    assert store.failed == failing
    history = await run.handle.fetch_history()
    delays = [
        e.timer_started_event_attributes.start_to_fire_timeout.ToTimedelta()
        for e in history.events
        if e.HasField("timer_started_event_attributes")
    ]
    assert delays == [timedelta(seconds=0.1), timedelta(seconds=0.15)]
    if failing == 2:
        assert JOURNAL == ["file_report 6000"]
        assert results_sent(fake_api) == [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "filed 6000 characters"}
        ]
        return
    assert JOURNAL == []
    cause = failure.value.cause  # type: ignore[attr-defined]
    assert (cause.type, cause.message) == (
        "ToolNotStarted",
        "Tool 'file_report' could not be run in 3 attempts: Could not read the stored input of tool 'file_report' "
        "(OSError: connection reset by peer); the tool did not start. Check the workers that serve it (their logs "
        "say why), then fork the run from its last turn to go on.",
    )
    assert len(fake_api.requests) == 1


def test_effect_options_that_contradict_each_other_are_refused_at_registration() -> None:
    with pytest.raises(ToolRegistrationError, match="applies to effects='at_most_once' only"):
        tool_options(on_unknown="ask")
    with pytest.raises(ToolRegistrationError, match=r"on_unknown='reconcile'\) needs reconcile=<function>"):
        tool_options(effects="at_most_once", on_unknown="reconcile")
    with pytest.raises(ToolRegistrationError, match="maximum_interval .* must be at least initial_interval"):
        tool_options(initial_interval=timedelta(seconds=5), maximum_interval=timedelta(seconds=1))
    with pytest.raises(LookupError, match="only available while a tool"):
        current_tool_call()
