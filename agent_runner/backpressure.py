"""Activity slots handed out only while the worker process keeps up: backpressure by its own responsiveness.

One worker process steps runs' workflow tasks and runs their model and tool calls. When more calls are in flight
than the process (or the Temporal server behind it) can take the results of, finished calls' runs wait for their
next workflow task on the process's sticky queue, where they time out after ``--sticky-queue-timeout`` and are
replayed elsewhere (more work); a call starved of the event loop misses its heartbeats, and Temporal re-sends it (a
billed model call). A fixed ``--max-concurrent-activities`` cannot say when that happens: it depends on how long the
model takes and on how busy the machine and the server are.

``ResponsiveSlotSupplier`` asks the process instead, with two signals:

* the event loop's *lag*: how late a small task sleeping ``sample_interval`` wakes (a process too busy to run its
  callbacks, heartbeats included);
* the *step delay*: for each activity this process starts, how long after this process finished the run's previous
  activity Temporal scheduled it (``StepDelayInterceptor``). That gap is the run's workflow task: its wait on the
  sticky queue plus its processing, the very wait that times out. A retry's gap (its backoff) is no step, nor is the
  gap before a call the run started after a wait of its own, an approval or a sleep, which its workflow marks
  (``agent_runner/after_wait.py``).

A new activity slot is granted only while the lag is under its bound and fewer slots are held than a limit that
slow steps lower and quick ones raise (additive increase, multiplicative decrease), so calls wait in the activity
queue (which has no timeout, and any other worker may take them) rather than results waiting on this process. It
always grants a few slots, so a slow process still makes progress, and never more than the maximum. Workflow-task
slots are left alone (``backpressure_options``): throttling them would only move the wait to the sticky queue.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

from temporalio import activity
from temporalio.worker import (
    ActivityInboundInterceptor,
    CustomSlotSupplier,
    ExecuteActivityInput,
    FixedSizeSlotSupplier,
    Interceptor,
    SlotMarkUsedContext,
    SlotPermit,
    SlotReleaseContext,
    SlotReserveContext,
    WorkerTuner,
)

from agent_runner.after_wait import AFTER_WAIT_HEADER
from agent_runner.tuning import Backpressure

__all__ = ["Backpressure", "ResponsiveSlotSupplier", "StepDelayInterceptor", "backpressure_options"]


STEP_SAMPLES_FRESH = 10.0
"""Seconds the step-delay limit counts for: with no newer measurement (no activity started since), it is lifted, so
slots held by long tools cannot keep the gate shut on an idle process."""


class ResponsiveSlotSupplier(CustomSlotSupplier):
    """Activity slots granted while this process keeps up, between a floor and a ceiling.

    Temporal's worker calls ``reserve_slot`` before it polls for an activity (and ``try_reserve_slot`` for an activity
    handed over eagerly with a workflow task's completion), then ``release_slot`` when the activity is done. A slot
    is granted while fewer than ``min_slots`` are held, or while fewer than ``max_slots`` are held, the loop's lag is
    under ``max_lag`` and the step delay under ``max_step_delay``; otherwise ``reserve_slot`` waits (and the activity
    stays in Temporal's queue).

    Args:
        max_slots: Never more slots than this (``--max-concurrent-activities``).
        backpressure: The bounds, the floor of slots and the sampling interval.
        clock: Seconds, monotonic (``time.monotonic`` by default; tests pass their own).
    """

    def __init__(self, max_slots: int, backpressure: Backpressure, *, clock: Callable[[], float] | None = None) -> None:
        self.max_slots = max_slots
        self.min_slots = min(backpressure.min_slots, max_slots)
        self.max_lag = backpressure.max_lag.total_seconds()
        self.max_step_delay = backpressure.max_step_delay.total_seconds()
        self.interval = backpressure.sample_interval.total_seconds()
        self.held = 0
        """Slots reserved and not yet released."""
        self.lag = 0.0
        """The event loop's lag, seconds, smoothed over the last few samples."""
        self.step_delay = 0.0
        """Runs' steps between two activities, seconds, smoothed over the last activities started."""
        self.limit = float(max_slots)
        """Slots granted while the loop keeps up: lowered while steps are slow, raised while they are quick."""
        self._step_seen: float | None = None
        self._clock = clock or time.monotonic
        self._due: float | None = None  # when the sampler should wake next: later than that, the loop is lagging
        self._sampler: asyncio.Task[None] | None = None
        self._changed: asyncio.Event | None = None
        self._waiting = 0
        # Temporal calls try_reserve_slot and release_slot from its own threads, reserve_slot on the worker's loop.
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None

    # -- the decision ------------------------------------------------------------------------------------------

    def current_lag(self) -> float:
        """The smoothed lag, or how overdue the sampler is if it has not woken yet (a loop busy right now)."""
        if self._due is None:
            return self.lag
        return max(self.lag, self._clock() - self._due)

    def current_limit(self) -> float:
        """The slots steps allow; all of them if no step was measured for ``STEP_SAMPLES_FRESH`` seconds."""
        if self._step_seen is None or self._clock() - self._step_seen > STEP_SAMPLES_FRESH:
            return self.max_slots
        return self.limit

    def grantable(self) -> bool:
        """Whether a slot may be granted now."""
        if self.held < self.min_slots:
            return True
        return self.held < min(self.max_slots, self.current_limit()) and self.current_lag() < self.max_lag

    def observe(self, lag: float) -> None:
        """Record one lag sample (seconds): smoothed, so one long workflow task does not stop the process."""
        # Rising at once and falling over a few samples: act on overload fast, resume without oscillating.
        self.lag = lag if lag > self.lag else 0.7 * self.lag + 0.3 * lag
        self._notify()

    def observe_step(self, delay: float) -> None:
        """Record one step delay (seconds), from an activity that just started."""
        # One sample counts for at most twice the bound: a run that waited an hour for an approval between two
        # calls moves the average as much as one slow step, no more.
        delay = min(max(delay, 0.0), 2 * self.max_step_delay)
        with self._lock:
            self.step_delay = 0.9 * self.step_delay + 0.1 * delay
            if self._step_seen is None or self._clock() - self._step_seen > STEP_SAMPLES_FRESH:
                self.limit = self.max_slots
            self._step_seen = self._clock()
            # Additive increase, multiplicative decrease (TCP's congestion control): the limit settles where steps
            # take about max_step_delay, rather than swinging between the floor and the ceiling.
            if self.step_delay > self.max_step_delay:
                self.limit = max(self.min_slots, self.limit * 0.97)
            else:
                self.limit = min(self.max_slots, self.limit + 0.5)

    # -- Temporal's interface ----------------------------------------------------------------------------------

    async def reserve_slot(self, ctx: SlotReserveContext) -> SlotPermit:  # noqa: ARG002
        """Wait until a slot may be granted, then take it."""
        self._start_sampler()
        self._waiting += 1
        try:
            while True:
                with self._lock:
                    if self.grantable():
                        self.held += 1
                        return SlotPermit()
                assert self._changed is not None
                await self._changed.wait()
        finally:
            self._waiting -= 1

    def try_reserve_slot(self, ctx: SlotReserveContext) -> SlotPermit | None:  # noqa: ARG002
        """Take a slot for an eager activity if one may be granted now; never waits."""
        with self._lock:
            if not self.grantable():
                return None
            self.held += 1
            return SlotPermit()

    def mark_slot_used(self, ctx: SlotMarkUsedContext) -> None:
        """Nothing to do: a reserved slot counts already."""

    def release_slot(self, ctx: SlotReleaseContext) -> None:  # noqa: ARG002
        """Give the slot back, and wake a waiting reservation."""
        with self._lock:
            self.held = max(0, self.held - 1)
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._notify)

    # -- the sampler -------------------------------------------------------------------------------------------

    def _notify(self) -> None:
        if self._changed is not None:
            self._changed.set()
            self._changed = asyncio.Event()

    def _start_sampler(self) -> None:
        if self._sampler is None or self._sampler.done():
            self._loop = asyncio.get_running_loop()
            self._changed = self._changed or asyncio.Event()
            self._sampler = self._loop.create_task(self._sample(), name="activity-backpressure")

    async def _sample(self) -> None:
        # Only while slots are held or wanted: a worker that shut down released them all, and leaves no task behind.
        while self.held or self._waiting:
            self._due = self._clock() + self.interval
            await asyncio.sleep(self.interval)
            self.observe(max(0.0, self._clock() - self._due))
        self._due = None


class StepDelayInterceptor(Interceptor):
    """Measures runs' steps between two activities on this process, for ``ResponsiveSlotSupplier``.

    When an activity ends, its run's time is noted (wall clock); when the run's next activity starts here, the time
    Temporal scheduled it (``activity.info().current_attempt_scheduled_time``) minus that note is the step between
    them: the workflow task that took the result and scheduled the next call.

    Args:
        supplier: Where the measurements go.
        remember: At most this many runs' last activity ends are kept (the oldest are forgotten first).
    """

    def __init__(self, supplier: ResponsiveSlotSupplier, remember: int = 20_000) -> None:
        self.supplier = supplier
        self.remember = remember
        self.ended: dict[str, float] = {}
        self._lock = threading.Lock()  # sync activities run on threads of their own

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:  # noqa: A002
        """Wrap every activity of the worker."""
        return _StepDelayActivity(next, self)

    def started(self, run_id: str, scheduled: float, *, step: bool = True) -> None:
        """An activity of ``run_id`` scheduled at ``scheduled`` (epoch seconds) starts.

        Args:
            run_id: The activity's run.
            scheduled: When Temporal scheduled this attempt.
            step: Whether the gap since the run's last activity is a step: not for a retry (the gap is its backoff)
                nor for an activity the run started after a wait of its own (``agent_runner/after_wait.py``).
        """
        with self._lock:
            ended = self.ended.pop(run_id, None)
        if ended is not None and step:
            self.supplier.observe_step(scheduled - ended)

    def finished(self, run_id: str) -> None:
        """An activity of ``run_id`` ends now."""
        with self._lock:
            self.ended.pop(run_id, None)
            self.ended[run_id] = time.time()
            while len(self.ended) > self.remember:
                del self.ended[next(iter(self.ended))]


class _StepDelayActivity(ActivityInboundInterceptor):
    def __init__(self, next: ActivityInboundInterceptor, steps: StepDelayInterceptor) -> None:  # noqa: A002
        super().__init__(next)
        self._steps = steps

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:  # noqa: A002
        info = activity.info()
        run_id = info.workflow_run_id
        if run_id is not None:
            step = info.attempt == 1 and AFTER_WAIT_HEADER not in input.headers
            self._steps.started(run_id, info.current_attempt_scheduled_time.timestamp(), step=step)
        try:
            return await super().execute_activity(input)
        finally:
            if run_id is not None:
                self._steps.finished(run_id)


def activity_tuner(supplier: ResponsiveSlotSupplier, max_workflow_tasks: int | None = None) -> WorkerTuner:
    """A tuner with ``supplier`` for activities and fixed slots for everything else.

    Args:
        supplier: The activity slots.
        max_workflow_tasks: Workflow-task slots; ``None`` is Temporal's default (100).
    """
    fixed = FixedSizeSlotSupplier(100)
    return WorkerTuner.create_composite(
        workflow_supplier=FixedSizeSlotSupplier(max_workflow_tasks or 100),
        activity_supplier=supplier,
        local_activity_supplier=fixed,
        nexus_supplier=fixed,
    )


def backpressure_options(
    *, max_activities: int, backpressure: Backpressure, max_workflow_tasks: int | None = None
) -> dict[str, Any]:
    """``temporalio.worker.Worker`` keyword arguments: the tuner and the interceptor that feeds it.

    Args:
        max_activities: The most activities in flight (``--max-concurrent-activities``).
        backpressure: When to stop granting activity slots.
        max_workflow_tasks: Workflow-task slots; ``None`` is Temporal's default (100).
    """
    supplier = ResponsiveSlotSupplier(max_activities, backpressure)
    return {
        "tuner": activity_tuner(supplier, max_workflow_tasks),
        "interceptors": [StepDelayInterceptor(supplier)],
    }
