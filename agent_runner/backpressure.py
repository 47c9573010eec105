"""Activity slots handed out only while the worker process keeps up: backpressure by its own responsiveness.

One worker process steps runs' workflow tasks and runs their model and tool calls in one interpreter. When more calls
are in flight than it can take the results of, finished calls' runs wait for their next workflow task on the
process's sticky queue, where they time out after ``--sticky-queue-timeout`` and are replayed elsewhere (more CPU);
a call starved of the event loop misses its heartbeats, and Temporal re-sends it (a billed model call). A fixed
``--max-concurrent-activities`` cannot say when that happens: it depends on how long the model takes.

``ResponsiveSlotSupplier`` asks the process instead. A small task measures how late the event loop wakes it (its
*lag*); a new activity slot is granted only while that lag stays under a bound, so calls wait in the activity queue
(which has no timeout, and any other worker may take them) rather than results waiting on this process. It always
grants a few slots, so a slow process still makes progress, and never more than the maximum. Workflow-task slots are
left alone (``activity_tuner``): throttling them would only move the wait to the sticky queue.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

from temporalio.worker import (
    CustomSlotSupplier,
    FixedSizeSlotSupplier,
    SlotMarkUsedContext,
    SlotPermit,
    SlotReleaseContext,
    SlotReserveContext,
    WorkerTuner,
)

from agent_runner.contract.errors import ConfigurationError

__all__ = ["Backpressure", "ResponsiveSlotSupplier", "activity_tuner"]


@dataclass(frozen=True)
class Backpressure:
    """When a worker process stops taking new model and tool calls (``--max-loop-lag``).

    Attributes:
        max_lag: New activity slots are granted only while the event loop's lag (how late a sleeping task wakes,
            smoothed) is below this.
        min_slots: Slots granted whatever the lag, so a busy process still makes progress.
        sample_interval: How often the lag is measured.
    """

    max_lag: timedelta = timedelta(milliseconds=100)
    min_slots: int = 10
    sample_interval: timedelta = timedelta(milliseconds=20)

    def __post_init__(self) -> None:
        if self.max_lag <= timedelta(0):
            raise ConfigurationError(
                f"--max-loop-lag must be more than 0 seconds (or 0 for no backpressure), not "
                f"{self.max_lag.total_seconds()}."
            )
        if self.min_slots < 1:
            raise ConfigurationError(f"--min-concurrent-activities must be at least 1, not {self.min_slots}.")
        if self.sample_interval <= timedelta(0):
            raise ConfigurationError("The event loop's sample interval must be more than 0 seconds.")


class ResponsiveSlotSupplier(CustomSlotSupplier):
    """Activity slots granted while this process's event loop keeps up, between a floor and a ceiling.

    Temporal's worker calls ``reserve_slot`` before it polls for an activity (and ``try_reserve_slot`` for an activity
    handed over eagerly with a workflow task's completion), then ``release_slot`` when the activity is done. A slot
    is granted while fewer than ``min_slots`` are held, or while fewer than ``max_slots`` are held and the loop's lag
    is under ``max_lag``; otherwise ``reserve_slot`` waits (and the activity stays in Temporal's queue).

    Args:
        max_slots: Never more slots than this (``--max-concurrent-activities``).
        backpressure: The lag bound, the floor of slots and the sampling interval.
        clock: Seconds, monotonic; the running loop's clock by default (tests pass their own).
    """

    def __init__(self, max_slots: int, backpressure: Backpressure, *, clock: Callable[[], float] | None = None) -> None:
        self.max_slots = max_slots
        self.min_slots = min(backpressure.min_slots, max_slots)
        self.max_lag = backpressure.max_lag.total_seconds()
        self.interval = backpressure.sample_interval.total_seconds()
        self.held = 0
        """Slots reserved and not yet released."""
        self.lag = 0.0
        """The event loop's lag, seconds, smoothed over the last few samples."""
        self._clock = clock
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
        return max(self.lag, self._now() - self._due)

    def grantable(self) -> bool:
        """Whether a slot may be granted now."""
        if self.held < self.min_slots:
            return True
        return self.held < self.max_slots and self.current_lag() < self.max_lag

    def observe(self, lag: float) -> None:
        """Record one lag sample (seconds): smoothed, so one long workflow task does not stop the process."""
        # Rising at once and falling over a few samples: act on overload fast, resume without oscillating.
        self.lag = lag if lag > self.lag else 0.7 * self.lag + 0.3 * lag
        self._notify()

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

    def _now(self) -> float:
        return self._clock() if self._clock is not None else time.monotonic()

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
            self._due = self._now() + self.interval
            await asyncio.sleep(self.interval)
            self.observe(max(0.0, self._now() - self._due))
        self._due = None


def activity_tuner(
    *,
    max_activities: int,
    backpressure: Backpressure,
    max_workflow_tasks: int | None = None,
) -> WorkerTuner:
    """A tuner with ``ResponsiveSlotSupplier`` for activities and fixed slots for everything else.

    Args:
        max_activities: The most activities in flight (``--max-concurrent-activities``).
        backpressure: When to stop granting activity slots.
        max_workflow_tasks: Workflow-task slots; ``None`` is Temporal's default (100).
    """
    fixed = FixedSizeSlotSupplier(100)
    return WorkerTuner.create_composite(
        workflow_supplier=FixedSizeSlotSupplier(max_workflow_tasks or 100),
        activity_supplier=ResponsiveSlotSupplier(max_activities, backpressure),
        local_activity_supplier=fixed,
        nexus_supplier=fixed,
    )
