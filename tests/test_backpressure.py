"""Backpressure by the worker process's responsiveness (``agent_runner/backpressure.py``).

The slot supplier's rules, driven directly with a clock of the test's; then a real worker (the session's Temporal
server, the fake Messages API) whose event loop a tool keeps busy: new model calls wait in Temporal's activity queue
until the loop is free again, and a worker without backpressure (the negative control) starts them at once.
"""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import timedelta
from typing import Any, cast

import pytest
from anthropic import beta_async_tool
from temporalio.worker import FixedSizeSlotSupplier, SlotReleaseContext, SlotReserveContext

from agent_runner.after_wait import AFTER_WAIT_HEADER
from agent_runner.backpressure import (
    STEP_SAMPLES_FRESH,
    Backpressure,
    ResponsiveSlotSupplier,
    StepDelayInterceptor,
    backpressure_options,
)
from agent_runner.client import AgentRunner
from agent_runner.contract.errors import ConfigurationError
from agent_runner.testing import FakeMessagesAPI, Reply, end_turn, rate_limited, tool_use
from agent_runner.worker import WorkerTuning
from tests.conftest import WorkerFactory, scheduled_activities
from tests.steering_support import delete_file, wait_status

CTX = cast(SlotReserveContext, None)
RELEASE = cast(SlotReleaseContext, None)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def supplier(max_slots: int = 5, min_slots: int = 2, clock: Clock | None = None) -> ResponsiveSlotSupplier:
    # The sampler sleeps an hour: only the test's observe() calls and its clock move the lag.
    backpressure = Backpressure(
        max_lag=timedelta(milliseconds=100), min_slots=min_slots, sample_interval=timedelta(hours=1)
    )
    return ResponsiveSlotSupplier(max_slots, backpressure, clock=clock or Clock())


def test_grants_while_responsive_up_to_the_maximum_and_releases() -> None:
    s = supplier()
    assert [s.try_reserve_slot(CTX) is not None for _ in range(6)] == [True] * 5 + [False]
    assert s.held == 5
    s.release_slot(RELEASE)
    assert s.held == 4
    assert s.try_reserve_slot(CTX) is not None
    assert s.held == 5


def test_withholds_while_lagging_but_never_below_the_floor() -> None:
    s = supplier()
    s.observe(0.5)
    assert [s.try_reserve_slot(CTX) is not None for _ in range(3)] == [True, True, False]  # the floor of 2 only
    s.release_slot(RELEASE)
    assert s.held == 1
    assert s.try_reserve_slot(CTX) is not None  # back up to the floor
    assert s.try_reserve_slot(CTX) is None
    # The lag falls over a few samples (one short sample does not reopen the gate), then slots are granted again.
    s.observe(0.0)
    assert s.lag == pytest.approx(0.35)
    assert s.try_reserve_slot(CTX) is None
    for _ in range(4):
        s.observe(0.0)
    assert s.lag == pytest.approx(0.5 * 0.7**5)
    assert s.try_reserve_slot(CTX) is not None
    s.observe(0.2)  # rising lag counts at once
    assert s.lag == 0.2
    assert s.try_reserve_slot(CTX) is None


async def test_a_reservation_waits_while_lagging_and_a_release_or_an_overdue_sampler_decides() -> None:
    clock = Clock()
    s = supplier(max_slots=10, min_slots=1, clock=clock)
    first = await s.reserve_slot(CTX)  # the floor: granted, and the sampler is running (due in an hour)
    assert first is not None
    await asyncio.sleep(0)  # the sampler starts
    # The loop has not woken the sampler for 0.5 s past its due time: the process is busy right now.
    clock.now += 3600.5
    assert s.current_lag() == pytest.approx(0.5)
    waiting = asyncio.create_task(s.reserve_slot(CTX))
    await asyncio.sleep(0.05)
    assert not waiting.done()
    s.release_slot(RELEASE)  # from Temporal's thread in a real worker: wakes the waiter through the loop
    await asyncio.wait_for(waiting, timeout=10)
    assert s.held == 1
    s.release_slot(RELEASE)
    assert s.held == 0
    assert s._sampler is not None
    s._sampler.cancel()


def test_slow_steps_between_a_runs_calls_lower_the_limit_and_quick_ones_raise_it_again() -> None:
    clock = Clock()
    s = supplier(max_slots=100, min_slots=2, clock=clock)  # max_step_delay: 2 s by default
    steps = StepDelayInterceptor(s)
    steps.finished("run-1")
    ended = steps.ended["run-1"]
    steps.started("run-1", ended + 30.0)  # the run's next call was scheduled 30 s after its last one ended here
    assert s.step_delay == pytest.approx(0.4)  # one sample counts for at most 2 × 2 s, a tenth of it
    assert s.limit == 100  # the smoothed delay is still under 2 s
    steps.started("run-1", ended + 30.0)  # no end noted since: not a step
    assert s.step_delay == pytest.approx(0.4)
    for _ in range(200):
        s.observe_step(30.0)
    assert s.limit == 2  # lowered 3 % a sample while the smoothed delay is over 2 s, never under the floor
    assert [s.try_reserve_slot(CTX) is not None for _ in range(3)] == [True, True, False]
    for _ in range(20):
        s.observe_step(0.05)
    assert s.step_delay < 2.0
    assert s.limit == pytest.approx(2 + 0.5 * 14)  # raised half a slot a sample once the delay is under 2 s
    assert [s.try_reserve_slot(CTX) is not None for _ in range(8)] == [True] * 7 + [False]
    for _ in range(30):
        s.observe_step(30.0)
    assert s.limit < s.held
    assert s.try_reserve_slot(CTX) is None
    clock.now += STEP_SAMPLES_FRESH + 1  # no activity started for a while: the limit is lifted
    assert s.current_limit() == 100
    assert s.try_reserve_slot(CTX) is not None
    # Only the last ends of `remember` runs are kept.
    small = StepDelayInterceptor(s, remember=2)
    for run in ("a", "b", "c"):
        small.finished(run)
    assert list(small.ended) == ["b", "c"]


def test_the_tuner_throttles_activities_only_and_bad_settings_say_what_to_do() -> None:
    options = backpressure_options(max_activities=300, backpressure=Backpressure(), max_workflow_tasks=50)
    tuner = options["tuner"]
    assert tuner._get_workflow_task_slot_supplier() == FixedSizeSlotSupplier(50)
    activities = tuner._get_activity_task_slot_supplier()
    assert isinstance(activities, ResponsiveSlotSupplier)
    assert (activities.max_slots, activities.min_slots, activities.max_lag, activities.max_step_delay) == (
        300,
        10,
        0.1,
        2.0,
    )
    [steps] = options["interceptors"]
    assert isinstance(steps, StepDelayInterceptor) and steps.supplier is activities
    with pytest.raises(ConfigurationError, match=r"--max-loop-lag must be more than 0 seconds"):
        Backpressure(max_lag=timedelta(seconds=-1))
    with pytest.raises(ConfigurationError, match=r"--max-step-delay must be more than 0 seconds, not 0\.0\."):
        Backpressure(max_step_delay=timedelta(0))
    with pytest.raises(ConfigurationError, match=r"--min-concurrent-activities must be at least 1, not 0\."):
        Backpressure(min_slots=0)


# ------------------------------------------------------------------------------------------------------------------
# Through a real worker
# ------------------------------------------------------------------------------------------------------------------


async def test_a_runs_own_waits_and_retries_are_not_steps(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A call the run started after waiting for a person is marked, and its wait is not taken for a slow step."""
    steps: list[float] = []
    observe = ResponsiveSlotSupplier.observe_step

    def recorded(supplier: ResponsiveSlotSupplier, delay: float) -> None:
        steps.append(delay)
        observe(supplier, delay)

    monkeypatch.setattr(ResponsiveSlotSupplier, "observe_step", recorded)
    fake_api.script(
        Reply([tool_use("toolu_D", "delete_file", {"path": "/tmp/x"})], "tool_use"),
        Reply([tool_use("toolu_E", "delete_file", {"path": "/tmp/y"})], "tool_use"),
        end_turn("Done."),
    )
    async with worker(delete_file, tuning=WorkerTuning(backpressure=Backpressure())):
        run = await runner.start(
            model="claude-fake-1",
            max_tokens=64,
            messages=[{"role": "user", "content": "Clean up."}],
            tools=[delete_file],
            approval={"tools": "all"},
        )
        await wait_status(run, "waiting_for_approval")
        await asyncio.sleep(2.5)  # a person takes their time: longer than the slowest step backpressure allows
        await run.approve("toolu_D")
        await wait_status(run, "waiting_for_approval", 2)
        await run.approve("toolu_E")
        await run.until_done()
    history = await run.handle.fetch_history()
    assert [(a.activity_type.name, AFTER_WAIT_HEADER in a.header.fields) for a in scheduled_activities(history)] == [
        ("agent_runner.create_message", False),
        ("agent_runner.run_tool", True),  # after the approval
        ("agent_runner.create_message", False),  # after the tool's result
        ("agent_runner.run_tool", True),
        ("agent_runner.create_message", False),
    ]
    # The steps into each model call (the tools lookup's and the tools' results), none of the approvals' waits.
    assert len(steps) == 3, steps
    assert max(steps) < 2.0, steps

    # A retried call's gap is its backoff (here the 2.5 s the API asked for), not a step either.
    steps.clear()
    fake_api.script(rate_limited(2.5), end_turn("Done."))
    async with worker(tuning=WorkerTuning(backpressure=Backpressure())):
        retried = await runner.start(
            model="claude-fake-1", max_tokens=64, messages=[{"role": "user", "content": "Hello."}]
        )
        await retried.until_done()
    assert len(steps) == 1, steps  # into the first attempt, from the tools lookup
    assert max(steps) < 2.0, steps


HOGGING = threading.Event()
STOP_HOGGING = threading.Event()
OTHERS = 8
"""More runs than the worker's activity pollers (5), each of which may hold a slot reserved before the lag rose."""


@beta_async_tool
async def hog() -> str:
    """Keep the worker's event loop busy until told to stop."""
    HOGGING.set()
    deadline = time.monotonic() + 120  # a guard: never hang the session
    while not STOP_HOGGING.is_set() and time.monotonic() < deadline:
        time.sleep(0.3)  # blocks the loop on purpose: a process too busy to keep up
        await asyncio.sleep(0)
    return "done hogging"


def first_text(body: dict[str, Any]) -> str:
    content = body["messages"][0]["content"]
    if isinstance(content, str):
        return content
    return "".join(str(block.get("text", "")) for block in content)


def responder(body: dict[str, Any]) -> Reply:
    first = first_text(body)
    if first == "hog" and len(body["messages"]) == 1:
        return Reply(content=[tool_use(None, "hog", {})], stop_reason="tool_use")
    return end_turn(f"answered {first}")


def model_requests(fake: FakeMessagesAPI) -> set[str]:
    return {first_text(b) for b in fake.bodies()} - {"hog", ""}  # "": the hog run's tool result


@pytest.mark.slow  # a worker whose loop is blocked on purpose steps every run slowly: a minute or two each
@pytest.mark.parametrize("backpressure", [True, False], ids=["backpressure", "fixed-slots"])
async def test_a_busy_event_loop_holds_new_model_calls_in_the_activity_queue(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, backpressure: bool
) -> None:
    HOGGING.clear()
    STOP_HOGGING.clear()
    fake_api.responder = responder
    tuning = WorkerTuning(backpressure=Backpressure(min_slots=1) if backpressure else None)
    base: dict[str, Any] = {"model": "claude-fake-1", "max_tokens": 64}
    try:
        async with worker(hog, tuning=tuning):
            hogging = await runner.start(**base, messages=[{"role": "user", "content": "hog"}], tools=[hog])
            assert await asyncio.to_thread(HOGGING.wait, 60)
            others = [
                await runner.start(**base, messages=[{"role": "user", "content": f"run {i}"}]) for i in range(OTHERS)
            ]
            expected = {f"run {i}" for i in range(OTHERS)}
            if backpressure:
                # Every run's model call is scheduled (the workflow tasks are not held back)...
                for run in others:
                    for _ in range(600):
                        if (await run.handle.describe()).raw_description.pending_activities:
                            break
                        await asyncio.sleep(0.1)
                    else:
                        pytest.fail("the run's model call was never scheduled")
                await asyncio.sleep(3)
                # ...but while the loop lags, only slots reserved before it did (one per poller) may take one.
                assert len(model_requests(fake_api)) <= 5
                STOP_HOGGING.set()
            else:
                for _ in range(600):  # the negative control: all of them start while the loop is still busy
                    if model_requests(fake_api) == expected:
                        break
                    await asyncio.sleep(0.1)
                assert model_requests(fake_api) == expected
                assert not STOP_HOGGING.is_set()
                STOP_HOGGING.set()
            results = [await asyncio.wait_for(run.result(), timeout=120) for run in others]
            assert [(r.final_message or {})["content"][0]["text"] for r in results] == [
                f"answered run {i}" for i in range(OTHERS)
            ]
            assert model_requests(fake_api) == expected
            await asyncio.wait_for(hogging.result(), timeout=60)
    finally:
        STOP_HOGGING.set()
